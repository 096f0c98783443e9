#!/usr/bin/env bash
# run.sh: `lwopt export` checked by an independent reader: trains two tiny checkpoints through
# recipes/gpt_small.lua (bytes, vocabulary 256 = its rows; token shards of vocabulary 300,
# padded to 384 rows), exports each as hf-gpt2 and nanogpt, and runs tests/export/check_hf.py
# (numpy) on every export. Exit 77 (skipped) where Debian's python3 cannot import numpy.
# Usage: tests/export/run.sh [ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}"
. tests/export/common.sh
for kind in bytes tokens; do
    if [ "$kind" = bytes ]; then data=(--data "$tmp/text.txt"); else
        data=(--data "$tmp/t_train_*.bin" --vocab 300); fi
    checkpoint "$kind" --steps 2 --warmup 1 "${data[@]}"
    for format in hf-gpt2 nanogpt; do
        exported "$kind" "$format" "$tmp/$kind-$format" || continue
        echo "== $kind, $format"
        /usr/bin/python3 tests/export/check_hf.py "$tmp/$kind/step-000000002" \
            "$tmp/$kind-$format" "$format" bin/lwopt || status=1
    done
done
exit "$status"
