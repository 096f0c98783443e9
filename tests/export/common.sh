# common.sh: sourced by tests/export/run*.sh, after their `cd` to the repo root. Exits 77
# (skipped) where Debian's python3 cannot import numpy; otherwise makes $tmp (removed on exit)
# with a text file and token shards of vocabulary 300 (make_data.py), sets status=0 and defines
# the two steps every export test takes.
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    echo "export: /usr/bin/python3 cannot import numpy (python3-numpy): skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 tests/export/make_data.py "$tmp"
status=0

# checkpoint NAME FLAGS...: trains $tmp/NAME through recipes/gpt_small.lua --preset tiny with
# FLAGS; without it nothing can be checked, so a failure ends the test.
checkpoint() {
    local name=$1
    shift
    if ! luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet "$@" \
        --ckpt-dir "$tmp/$name"; then
        echo "FAILED: the $name checkpoint was not made"
        exit 1
    fi
}

# exported NAME FORMAT OUT: `lwopt export $tmp/NAME --format FORMAT OUT`; a failure is said,
# sets status=1 and returns 1 (the test goes on to its next model).
exported() {
    if ! bin/lwopt export "$tmp/$1" --format "$2" "$3"; then
        echo "FAILED: lwopt export $1 --format $2"
        status=1
        return 1
    fi
}
