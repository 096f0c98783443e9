#!/usr/bin/env bash
# watchdog.sh: a rank that stops before a collective (spec/fixtures/skips_collective.lua) does not
# hang the job: with LWOPT_TIMEOUT=2 the waiting rank's watchdog fails the wait with a message
# naming the rank, the collective, what it was for and how long it waited, and lw.comm.run ends
# the job, within seconds. Cases: a bucket's reduce-scatter in the step, a labelled blocking
# all-reduce, a labelled all-to-all, and a barrier after the timeout (the communicator stays
# broken: it fails at once). Then the main job with a rank stopped in training, and with a rank
# stopped before MPI's start-up (the start-up watchdog).
# Usage: watchdog.sh SOURCE_DIR MPIEXEC
set -uo pipefail
src=$1
mpiexec=$2
failed=0

# run MODE: sets out, status and seconds
run() {
    local start=$SECONDS
    out=$(LWOPT_TIMEOUT=2 timeout 120 "$mpiexec" -np 2 -x LWOPT_TIMEOUT \
        "$src/bin/lwopt" run "$src/spec/fixtures/skips_collective.lua" "$1" 2>&1)
    status=$?
    seconds=$((SECONDS - start))
}

# expect MODE TEXT...: each TEXT (an extended regex) appears in the output of MODE
expect() {
    local mode=$1 bad=0
    shift
    if [ "$status" -eq 124 ]; then echo "watchdog.sh $mode: the job hung"; bad=1; fi
    if [ "$status" -eq 0 ]; then echo "watchdog.sh $mode: the job exited 0"; bad=1; fi
    if [ "$seconds" -ge 20 ]; then echo "watchdog.sh $mode: the job took $seconds s"; bad=1; fi
    if echo "$out" | grep -q "woke up\|passed the"; then
        echo "watchdog.sh $mode: a rank got past the collective or woke up"; bad=1
    fi
    for text in "$@"; do
        echo "$out" | grep -Eq -- "$text" || { echo "watchdog.sh $mode: no '$text'"; bad=1; }
    done
    if [ "$bad" -ne 0 ]; then echo "$out"; failed=1; return; fi
    echo "watchdog.sh $mode: ended with status $status after $seconds s, as expected"
}

waited='waited [2-9]\.[0-9] s'
watchdog="\[rank 0\] .*comm: watchdog: rank 0 of 2 $waited"
run bucket
expect bucket "$watchdog for the reduce-scatter of buffer 1 bucket 1 \(collective #3 on this" \
    "communicator, 14\.34 kB; during step 1\): another rank has stopped" \
    "timeout 2 s; LWOPT_TIMEOUT sets it"
run allreduce
expect allreduce "$watchdog for the all-reduce of the validation loss \(collective #2 on this" \
    "communicator, 8 B; during evaluation\)"
run alltoall
expect alltoall "$watchdog for the all-to-all of the expert dispatch of block 1 \(collective #2" \
    "on this communicator, 16 B; during step 3\)"
run sticky
expect sticky "sticky: the barrier after the timeout failed in 0\.[0-4][0-9]* s with the same" \
    "\[rank 0\] comm:barrier: comm: watchdog: rank 0 of 2 $waited for the all-reduce"

# The main job with one rank stopped by SIGSTOP in the middle of training (a hung host): rank 0's
# watchdog (--timeout 2) ends the job, naming the collective, its bucket and the step.
start=$SECONDS
log=$(mktemp)
timeout 120 "$mpiexec" -np 2 -x OPENBLAS_NUM_THREADS=1 luajit "$src/recipes/gpt_small.lua" \
    --preset tiny --steps 100000 --sample 0 --quiet --timeout 2 --data "$src/data/kjv.txt" \
    >"$log" 2>&1 &
job=$!
victim=''
for _ in $(seq 1 100); do # the rank-1 process, once it exists
    for p in $(pgrep -f "gpt_small.lua --preset tiny --steps 100000" || true); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
    done
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 3 # well into training
[ -n "$victim" ] && kill -STOP "$victim"
wait "$job"
status=$?
seconds=$((SECONDS - start))
out=$(cat "$log")
rm -f "$log"
[ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
if [ -z "$victim" ]; then echo "watchdog.sh stopped: rank 1 was never found"; failed=1
else
    expect stopped "$watchdog for the (all-gather|reduce-scatter|all-reduce|barrier)( of [^(]*)? \(collective #[0-9]+ on this communicator.*during step [0-9]+"
fi
# A rank stopped before MPI starts (a host that hangs at launch): the other waits in
# MPI_Init_thread, which no collective's watchdog can poll; the start-up watchdog (--timeout 2)
# ends the job naming the call, and the launcher ends the stopped rank.
start=$SECONDS
args="--preset tiny --steps 2 --sample 0 --quiet --timeout 2 --data $src/data/kjv.txt"
# shellcheck disable=SC2016,SC2086 # $0 and $@ are the inner shell's; args split on purpose
out=$(timeout 120 "$mpiexec" -np 2 -x OPENBLAS_NUM_THREADS=1 sh -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi; exec luajit "$0" "$@"' \
    "$src/recipes/gpt_small.lua" $args 2>&1)
status=$?
seconds=$((SECONDS - start))
expect startup "\[rank 0\] comm: start-up watchdog: rank 0 of 2 waited 2 s in MPI_Init_thread" \
    "another rank has stopped or failed to start \(timeout 2 s; --timeout or LWOPT_TIMEOUT"
for p in $(pgrep -f "gpt_small.lua $args" || true); do
    echo "watchdog.sh startup: the stopped rank (pid $p) was left behind"; kill -9 "$p"; failed=1
done
exit "$failed"
