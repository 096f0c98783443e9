#!/usr/bin/env bash
# run_nanochat.sh: `lwopt export --format nanochat` checked by an independent reader: trains two
# tiny --arch nanochat checkpoints through recipes/gpt_small.lua at a sequence of 160, where
# nanochat's short window (128) cuts (token shards of vocabulary 300: 384 rows in lwopt, 320 in
# nanochat, 2 KV heads of 4; bytes with 3 layers, a KV head per head), exports each and runs
# tests/export/check_nanochat.py (numpy) on it. Exit 77 (skipped) where Debian's python3 cannot
# import numpy.
# Usage: tests/export/run_nanochat.sh [ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}"
. tests/export/common.sh
for model in tokens bytes; do
    case "$model" in
        tokens) flags=(--data "$tmp/t_train_*.bin" --vocab 300 --n-kv-head 2) ;;
        bytes) flags=(--data "$tmp/text.txt" --n-layer 3) ;;
    esac
    checkpoint "$model" --arch nanochat --seq 160 --batch 2 --steps 3 --warmup 1 \
        --eval-every 0 "${flags[@]}"
    exported "$model" nanochat "$tmp/$model-nc" || continue
    echo "== $model"
    /usr/bin/python3 tests/export/check_nanochat.py "$tmp/$model/step-000000003" \
        "$tmp/$model-nc" bin/lwopt || status=1
done
exit "$status"
