#!/usr/bin/env bash
# run_llama.sh: `lwopt export --format hf-llama` checked by an independent reader: trains three
# tiny --arch llama checkpoints through recipes/gpt_small.lua (bytes with the preset's 2 KV heads
# of 4, rotary pairing by halves; token shards of vocabulary 300, padded to 384 rows, one KV
# head, the interleaved pairing; bytes with a KV head per head), exports each and runs
# tests/export/check_hf_llama.py (numpy) on it. Exit 77 (skipped) where Debian's python3 cannot
# import numpy.
# Usage: tests/export/run_llama.sh [ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}"
. tests/export/common.sh
for model in gqa interleaved mha; do
    case "$model" in
        gqa) flags=(--data "$tmp/text.txt") ;;
        interleaved) flags=(--data "$tmp/t_train_*.bin" --vocab 300 --n-kv-head 1
                            --rope-pairing interleaved) ;;
        mha) flags=(--data "$tmp/text.txt" --n-kv-head 4) ;;
    esac
    checkpoint "$model" --arch llama --steps 3 --warmup 1 "${flags[@]}"
    exported "$model" hf-llama "$tmp/$model-hf" || continue
    echo "== $model"
    /usr/bin/python3 tests/export/check_hf_llama.py "$tmp/$model/step-000000003" \
        "$tmp/$model-hf" bin/lwopt || status=1
done
exit "$status"
