#!/usr/bin/env bash
# preempt.sh: a 2-rank job asked to stop stops cleanly: SIGUSR1 sent to mpirun (which forwards
# it to every rank), then, after a resume, SIGTERM sent to rank 1 alone (as a scheduler signals a
# job step's processes). Each time both ranks stop after the same step, that step is saved, the
# job exits 75 (requeue), and the log holds every step once; the resumed run continues it.
# Usage: preempt.sh SOURCE_DIR MPIEXEC
set -uo pipefail
src=$1
mpiexec=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "preempt.sh: $*"; failed=1; }

recipe=(luajit "$src/recipes/gpt_small.lua" --preset tiny --sample 0 --quiet --timeout 60
    --data "$src/data/kjv.txt" --ckpt-dir "$work/ck" --log "$work/log.jsonl")

# the steps the log holds, in order, one per line
steps() { grep -o '"step":[0-9]*' "$work/log.jsonl" | cut -d: -f2; }

# the log holds steps 1..$1, each once, in order
check_log() {
    local want
    want=$(seq 1 "$1")
    [ "$(steps)" = "$want" ] || fail "$2: the log's steps are $(steps | tr '\n' ' '), not 1..$1"
}

lines() { cat "$work/log.jsonl" 2>/dev/null | wc -l; }

# start ARGS...: the job in the background (job: its pid), once it has logged 6 more lines
start() {
    local before
    before=$(lines)
    # a process group of its own (setsid execs timeout, which leads it): a job that never gets
    # going is ended whole, mpirun and ranks, not left holding the test's output
    (cd /tmp && exec setsid timeout 300 "$mpiexec" -np 2 -x OPENBLAS_NUM_THREADS=1 \
        "${recipe[@]}" "$@") >"$work/out" 2>&1 &
    job=$!
    for _ in $(seq 1 3000); do # 5 minutes: a loaded machine starts MPI slowly
        [ "$(lines)" -ge $((before + 6)) ] && return
        sleep 0.1
    done
    kill -9 -- "-$job" 2>/dev/null
    fail "the job never logged 6 lines: $(tail -n 5 "$work/out")"
    exit 1
}

# stopped SIGNAL: the job's status and lines after SIGNAL; sets step (the step it stopped after)
stopped() {
    wait "$job"
    local status=$?
    [ "$status" -eq 75 ] || fail "$1: the job ended with status $status, not 75"
    step=$(sed -n "s/^stopped after step \([0-9]*\): asked to stop by $1 .*/\1/p" "$work/out")
    if [ -z "$step" ]; then fail "$1: no 'stopped after step N: asked to stop by $1'"; step=0; fi
    local latest
    latest=$(cat "$work/ck/latest" 2>/dev/null)
    [ "$latest" = "$(printf 'step-%09d' "$step")" ] || fail "$1: latest is '$latest', not step $step"
    grep -q "run the same command with --resume to continue from it" "$work/out" ||
        fail "$1: no line saying how to continue"
    [ "$failed" -eq 0 ] || cat "$work/out"
}

# 1. SIGUSR1 to mpirun: forwarded to both ranks
start --steps 100000
mpirun_pid=$(pgrep -P "$job" | head -n 1) # timeout's child
kill -USR1 "${mpirun_pid:-0}" || fail "no mpirun to signal"
stopped SIGUSR1
first=$step
check_log "$first" "after SIGUSR1"

# 2. resumed to two steps past it: the log goes on, every step once
(cd /tmp && timeout 300 "$mpiexec" -np 2 -x OPENBLAS_NUM_THREADS=1 "${recipe[@]}" --steps 100000 \
    --resume --stop-after $((first + 2))) >"$work/out" 2>&1 || fail "the resumed run failed"
check_log $((first + 2)) "resumed"

# 3. SIGTERM to rank 1 alone: rank 0 learns of it at the step's end and stops with it
start --steps 100000 --resume
victim=''
for p in $(pgrep -f "gpt_small.lua --preset tiny" || true); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
if [ -z "$victim" ]; then fail "rank 1 was never found"; else kill -TERM "$victim"; fi
stopped SIGTERM
[ "$step" -gt $((first + 2)) ] || fail "SIGTERM: stopped after step $step, before the resume's"
check_log "$step" "after SIGTERM to rank 1"

[ "$failed" -eq 0 ] && echo "preempt.sh: SIGUSR1 to mpirun stopped after step $first, SIGTERM to rank 1 after step $step; saved, status 75, every step logged once"
exit "$failed"
