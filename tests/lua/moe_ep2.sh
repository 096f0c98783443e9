#!/usr/bin/env bash
# moe_ep2.sh: the mixture-of-experts preset with expert parallelism, every other flag but the
# step count at its default (the 200-character sample; 60 of its 300 steps, the schedule fitted
# to them), runs to its end on 2 ranks: the sample's forward passes exchange tokens between the
# EP ranks, so every rank must take part while rank 0 alone prints. --timeout 60 turns a hang into a failure within a minute.
# Usage: moe_ep2.sh SOURCE_DIR MPIEXEC
set -uo pipefail
src=$1
mpiexec=$2
out=$(cd /tmp && timeout 600 "$mpiexec" -np 2 -x OPENBLAS_NUM_THREADS=1 luajit \
    "$src/recipes/gpt_small.lua" --preset moe --ep 2 --steps 60 --timeout 60 \
    --data "$src/data/kjv.txt" 2>&1)
status=$?
bad=0
if [ "$status" -ne 0 ]; then echo "moe_ep2.sh: the job ended with status $status"; bad=1; fi
for text in "on 2 ranks" "step +60/60" "final validation loss" "sample:"; do
    echo "$out" | grep -Eq "$text" || { echo "moe_ep2.sh: no '$text'"; bad=1; }
done
samples=$(echo "$out" | grep -c "^sample:")
[ "$samples" -eq 1 ] || { echo "moe_ep2.sh: $samples samples printed, not 1"; bad=1; }
if [ "$bad" -ne 0 ]; then echo "$out" | tail -n 20; exit 1; fi
echo "moe_ep2.sh: --preset moe --ep 2 trained 60 steps and printed one sample"
