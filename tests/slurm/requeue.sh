#!/usr/bin/env bash
# requeue.sh: scripts/slurm/train.sbatch as Slurm runs it, without Slurm: the batch shell started
# with the job's variables (SLURM_JOB_ID, ...) and a stand-in `scontrol` that records its
# arguments, the recipe on one rank under mpirun. SIGUSR1 to the shell (what --signal=B:USR1
# sends ahead of the time limit) stops the run after a step, saved: the shell exits 75 and
# requeues its job; the requeued start resumes from that step and, run to its end, exits 0 and
# requeues nothing; the log holds every step once.
# Usage: requeue.sh SOURCE_DIR
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "requeue.sh: $*"; failed=1; }

mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$@" >> "%s/scontrol.calls"\n' "$work" >"$work/bin/scontrol"
chmod +x "$work/bin/scontrol"
export PATH="$work/bin:$PATH" SLURM_JOB_ID=4242 SLURM_JOB_NAME=lwopt LWOPT_SRC="$src" \
    LWOPT_RUN="$work/run" LWOPT_MPIRUN_ARGS="-np 1" OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset LWOPT_DEVICE SLURM_GPUS_ON_NODE
flags=(--preset tiny --sample 0 --quiet --timeout 60)
steps() { grep -o '"step":[0-9]*' "$work/run/log.jsonl" | cut -d: -f2; }

# 1. the first start, signalled once it has logged 3 steps: the batch shell is timeout's child
# (timeout leads a process group of its own, which a test that fails ends whole)
(cd /tmp && exec timeout 300 bash "$src/scripts/slurm/train.sbatch" "${flags[@]}" \
    --steps 100000) >"$work/out" 2>&1 &
watch=$!
trap 'kill -- "-$watch" 2>/dev/null; rm -rf "$work"' EXIT
shell=''
for _ in $(seq 1 3000); do # 5 minutes: a loaded machine starts MPI slowly
    [ -n "$shell" ] || shell=$(pgrep -P "$watch" | head -n 1)
    [ -n "$shell" ] && [ "$(steps 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.1
done
kill -USR1 "${shell:-0}" || fail "no batch shell to signal"
wait "$watch"
status=$?
[ "$status" -eq 75 ] || fail "signalled: the batch shell exited $status, not 75"
[ "$(cat "$work/scontrol.calls" 2>/dev/null)" = "requeue 4242" ] ||
    fail "signalled: scontrol was called with '$(cat "$work/scontrol.calls" 2>/dev/null)'"
first=$(sed -n 's/^stopped after step \([0-9]*\): asked to stop by SIGUSR1.*/\1/p' "$work/out")
[ -n "$first" ] || { fail "no 'stopped after step N: asked to stop by SIGUSR1'"; first=0; }
[ "$failed" -eq 0 ] || cat "$work/out"

# 2. the requeued start: resumes after that step and runs to its end
(cd /tmp && SLURM_RESTART_COUNT=1 timeout 300 bash "$src/scripts/slurm/train.sbatch" \
    "${flags[@]}" --steps 100000 --stop-after $((first + 2))) >"$work/out" 2>&1
status=$?
[ "$status" -eq 0 ] || fail "requeued: the batch shell exited $status, not 0"
grep -q "resumed from $work/run/ckpt/step-$(printf '%09d' "$first"): step $first" "$work/out" ||
    fail "requeued: it did not resume from step $first"
[ "$(wc -l <"$work/scontrol.calls")" -eq 1 ] || fail "requeued: scontrol was called again"
[ "$(steps | tr '\n' ' ')" = "$(seq 1 $((first + 2)) | tr '\n' ' ')" ] ||
    fail "the log's steps are $(steps | tr '\n' ' '), not 1..$((first + 2))"
[ "$failed" -eq 0 ] || cat "$work/out"
[ "$failed" -eq 0 ] && echo "requeue.sh: passed (stopped after step $first, requeued, resumed)"
exit "$failed"
