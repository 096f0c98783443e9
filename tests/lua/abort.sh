#!/usr/bin/env bash
# abort.sh: a Lua error on one rank ends the whole MPI job: non-zero status within seconds,
# "[rank r] message" on stderr, and no rank left waiting in a collective.
# Usage: abort.sh SOURCE_DIR MPIEXEC
set -uo pipefail
src=$1
mpiexec=$2
out=$(timeout 60 "$mpiexec" -np 2 "$src/bin/lwopt" run "$src/spec/fixtures/fails.lua" 2>&1)
status=$?
if [ "$status" -eq 124 ]; then echo "abort.sh: the job hung"; exit 1; fi
if [ "$status" -eq 0 ]; then echo "abort.sh: the job exited 0"; echo "$out"; exit 1; fi
echo "$out" | grep -q "\[rank 1\] .*broken on purpose" || { echo "abort.sh: no [rank 1] message"; echo "$out"; exit 1; }
if echo "$out" | grep -q "passed the barrier"; then echo "abort.sh: a rank got past"; exit 1; fi
echo "abort.sh: the job ended with status $status and the message of rank 1"
