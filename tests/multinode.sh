#!/usr/bin/env bash
# multinode.sh: the main job across two "hosts" on this machine. Each host is a network
# namespace; a veth pair joins them and holds their only addresses (SUBNET below; no route
# leaves the pair). mpirun runs in the first namespace with a hostfile naming both addresses and
# tests/multinode/netns-agent.sh as its launch agent instead of ssh; ranks talk over TCP on the
# veth subnet only (no shared memory). Checks, at 2 ranks (1 per host) and 4 ranks (2 per host,
# oversubscribing 2 cores):
#   - each rank ran in the namespace (and with the address) of the host it was mapped to,
#   - the traffic crossed the veth (bytes received on the second host's end),
#   - losses and final parameters are bit-identical to the same job run plainly on one host
#     (at 4 ranks stopped after step 3, checkpointed and resumed across the hosts).
# Skips (77) when not root or when `ip netns add` is not permitted. Namespaces and links are
# named after this script's pid and removed on every exit, Ctrl-C included; what a run killed
# outright (SIGKILL) leaves, the next run removes.
# Usage: sudo tests/multinode.sh SOURCE_DIR [MPIRUN]   (needs make build and make data)
set -uo pipefail
src=$(cd "${1:?usage: multinode.sh SOURCE_DIR [MPIRUN]}" && pwd)
mpirun=${2:-mpirun}

SUBNET=10.77.7            # a private /24; it exists only inside the two namespaces
addr_a=$SUBNET.1 addr_b=$SUBNET.2
ns_a=lwopt-mn-$$-a ns_b=lwopt-mn-$$-b
link_a=lwmn$$a link_b=lwmn$$b # interface names: at most 15 characters
tmp='' bg=''

skip() { echo "multinode: skipped: $*"; exit 77; }
fail() { echo "multinode: FAILED: $*"; exit 1; }

cleanup() {
    trap '' INT TERM
    # Only what this run started can be inside its namespaces: end it (the job, if a signal or a
    # failure left it running), wait for it, then drop the names; the veth goes with them.
    local ns pids i
    [ -n "$bg" ] && kill "$bg" 2>/dev/null # a plain run, on this host (timeout passes it on)
    for ns in "$ns_a" "$ns_b"; do
        [ -e "/run/netns/$ns" ] || continue
        for i in 1 2 3 4 5 6 7 8 9 10; do
            read -ra pids <<<"$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
            [ ${#pids[@]} -eq 0 ] && break
            if [ "$i" -lt 8 ]; then kill "${pids[@]}"; else kill -9 "${pids[@]}"; fi 2>/dev/null
            sleep 0.5
        done
        ip netns del "$ns" 2>/dev/null
    done
    [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "multinode: interrupted"; exit 130' INT
trap 'echo "multinode: terminated"; exit 143' TERM

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (run with sudo)"
command -v ip >/dev/null || fail "no ip command (iproute2: scripts/deps.sh installs it)"
[ -f "$src/data/kjv.txt" ] || fail "no $src/data/kjv.txt (make data)"

# what runs killed with SIGKILL left (their pid is gone, or is this run's); a live run's stays
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^lwopt-mn-[0-9]+-[ab]$'); do
    pid=${ns#lwopt-mn-}
    pid=${pid%-?}
    if [ "$pid" = $$ ] || ! kill -0 "$pid" 2>/dev/null; then ip netns del "$ns" 2>/dev/null; fi
done
for dir in /tmp/lwopt-multinode-*.*; do
    pid=${dir#/tmp/lwopt-multinode-}
    pid=${pid%%.*}
    [[ -d $dir && $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$dir"
done

err=$(ip netns add "$ns_a" 2>&1) || skip "ip netns add is not permitted here (${err%%$'\n'*})"
ip netns add "$ns_b" || fail "ip netns add $ns_b"
ip -n "$ns_a" link add "$link_a" type veth peer name "$link_b" netns "$ns_b" ||
    fail "cannot create a veth pair between the namespaces"
for side in "$ns_a $link_a $addr_a" "$ns_b $link_b $addr_b"; do
    read -r ns link addr <<<"$side"
    if ! { ip -n "$ns" link set lo up && ip -n "$ns" addr add "$addr/24" dev "$link" &&
        ip -n "$ns" link set "$link" up; }; then
        fail "cannot set up $link in $ns"
    fi
    # IPv4 on the pair only: no IPv6 link-local address for OpenMPI to pick up
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
done
[ -z "$(ip -n "$ns_a" route show default)" ] || fail "$ns_a has a default route"
inode_a=$(ip netns exec "$ns_a" readlink /proc/self/ns/net)
inode_b=$(ip netns exec "$ns_b" readlink /proc/self/ns/net)
[ "$inode_a" != "$inode_b" ] || fail "the two namespaces are one"

tmp=$(mktemp -d "/tmp/lwopt-multinode-$$.XXXXXX")
printf '%s slots=2\n%s slots=2\n' "$addr_a" "$addr_b" >"$tmp/hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # mpirun checks, orted does not
export OPENBLAS_NUM_THREADS=1
export LWOPT_NETNS_HOSTS="$addr_a=$ns_a $addr_b=$ns_b" # read by netns-agent.sh
# The agent starts the remote orted with a clean environment, as ssh would, so everything the
# ranks need goes with -x. All OPENBLAS_* matter: a rank whose OpenBLAS picks another kernel
# (OPENBLAS_CORETYPE unset there, say) computes different last bits.
forward=()
for v in $(compgen -e | grep -E '^(OPENBLAS_|LWOPT_LIB$|LWOPT_TIMEOUT$)'); do
    forward+=(-x "$v")
done

# The job: global batch 8 (batch 2 x accum x ranks), 6 steps of the tiny preset.
job() { # np, name, more recipe flags...: sets the array job
    job=(luajit "$src/recipes/gpt_small.lua" --preset tiny --steps 6 --sample 0 --quiet
        --batch 2 --accum $((4 / $1)) --log "$tmp/$2.jsonl" --save-params "$tmp/$2.safetensors"
        "${@:3}")
}

# Runs a command in the background and waits, so that a signal reaches the trap at once.
run() { # log, command...
    local log=$1
    shift
    "$@" >"$log" 2>&1 &
    bg=$!
    wait $bg || { bg=; tail -n 30 "$log"; return 1; }
    bg=
}

plain() { # np, name: every rank on this host, OpenMPI's default transports (shared memory)
    job "$1" "$2"
    run "$tmp/$2.out" timeout 50 "$mpirun" --oversubscribe -np "$1" "${forward[@]}" "${job[@]}" ||
        fail "plain run $2"
}

rx_b() { ip netns exec "$ns_b" cat "/sys/class/net/$link_b/statistics/rx_bytes"; }

across() { # np, name, more recipe flags...: np/2 ranks per host, TCP over the veth subnet only
    local ppn=$(($1 / 2)) before after
    rm -rf "$tmp/$2.where"
    mkdir -p "$tmp/$2.where"
    job "$@"
    before=$(rx_b)
    # --bind-to none: both "hosts" are this machine's cores; bound, each host's first rank would
    # sit on core 0. pml ob1: no UCX, which could pick a transport of its own.
    run "$tmp/$2.out" ip netns exec "$ns_a" timeout 50 "$mpirun" -np "$1" \
        --hostfile "$tmp/hostfile" --map-by "ppr:$ppn:node" --bind-to none \
        --mca plm_rsh_agent "$src/tests/multinode/netns-agent.sh" \
        --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
        "${forward[@]}" "$src/tests/multinode/where.sh" "$tmp/$2.where" "${job[@]}" ||
        fail "run across hosts $2"
    after=$(rx_b)

    local r want got where=
    for ((r = 0; r < $1; r++)); do
        if [ "$r" -lt "$ppn" ]; then want="$inode_a $addr_a"; else want="$inode_b $addr_b"; fi
        got=$(cat "$tmp/$2.where/rank.$r" 2>/dev/null)
        got=${got% }
        [ "$got" = "$want" ] || fail "$2: rank $r ran at '$got', not '$want'"
        where+="${where:+, }rank $r ${got#* } ${got%% *}"
    done
    # the all-gathers alone bring every rank the whole model at each step
    local model
    model=$(stat -c %s "$tmp/$2.safetensors")
    [ $((after - before)) -gt "$model" ] ||
        fail "$2: only $((after - before)) bytes crossed the veth (model: $model bytes)"
    local label=$2
    [[ " ${*:3} " == *" --stop-after "* ]] && label+=" (stopped after step 3)"
    [[ " ${*:3} " == *" --resume "* ]] && label+=" (resumed)"
    echo "multinode: $label: $where; $((after - before)) bytes received by the second host"
}

same() { # name, reference: losses and parameters bit for bit
    # Exactly: the ranks compute the same operations on the same data whatever carries the
    # bytes, and OpenMPI picks a reduction's algorithm (so the order of its sums) from the
    # communicator and message sizes, not from the transport or the placement.
    local l1 l2
    l1=$(grep -o '"loss":[^,}]*' "$tmp/$1.jsonl")
    l2=$(grep -o '"loss":[^,}]*' "$tmp/$2.jsonl")
    [ "$(echo "$l1" | wc -l)" -eq 6 ] || fail "$1: $(echo "$l1" | wc -l) losses logged, not 6"
    [ "$l1" = "$l2" ] || fail "$1: losses differ from $2:$(diff <(echo "$l1") <(echo "$l2") | head)"
    cmp -s "$tmp/$1.safetensors" "$tmp/$2.safetensors" || fail "$1: parameters differ from $2"
    echo "multinode: $1: losses and parameters bit-identical to $2"
}

start=$SECONDS
plain 2 plain2
across 2 across2
same across2 plain2
plain 4 plain4
# stopped after step 3 and resumed: every rank writes its optimizer shard into the checkpoint
# directory (this machine's file system stands for a shared one), and reads them back
across 4 across4 --ckpt-dir "$tmp/ckpt" --stop-after 3
across 4 across4 --ckpt-dir "$tmp/ckpt" --resume
shards=$(find "$tmp/ckpt/$(cat "$tmp/ckpt/latest")" -name 'optim-r*.safetensors' | wc -l)
[ "$shards" -eq 4 ] || fail "across4: $shards optimizer shards in the checkpoint, not 4"
same across4 plain4
echo "multinode: passed in $((SECONDS - start)) s"
