#!/usr/bin/env bash
# run.sh: `lwopt export` checked by an independent reader: trains two tiny checkpoints through
# recipes/gpt_small.lua (bytes, vocabulary 256 = its rows; token shards of vocabulary 300,
# padded to 384 rows), exports each as hf-gpt2 and nanogpt, and runs tests/export/check_hf.py
# (numpy) on every export. Exit 77 (skipped) where Debian's python3 cannot import numpy.
# Usage: tests/export/run.sh [ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}"
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    echo "export: /usr/bin/python3 cannot import numpy (python3-numpy): skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a text file, and token shards of vocabulary 300
/usr/bin/python3 tests/export/make_data.py "$tmp"
status=0
for kind in bytes tokens; do
    if [ "$kind" = bytes ]; then data=(--data "$tmp/text.txt"); else
        data=(--data "$tmp/t_train_*.bin" --vocab 300); fi
    if ! luajit recipes/gpt_small.lua --preset tiny --steps 2 --warmup 1 --sample 0 --quiet \
        "${data[@]}" --ckpt-dir "$tmp/$kind"; then
        echo "FAILED: the $kind checkpoint was not made"
        exit 1
    fi
    for format in hf-gpt2 nanogpt; do
        if ! bin/lwopt export "$tmp/$kind" --format "$format" "$tmp/$kind-$format"; then
            echo "FAILED: lwopt export $kind --format $format"
            status=1
            continue
        fi
        echo "== $kind, $format"
        /usr/bin/python3 tests/export/check_hf.py "$tmp/$kind/step-000000002" \
            "$tmp/$kind-$format" "$format" bin/lwopt || status=1
    done
done
exit "$status"
