#!/usr/bin/env bash
# Runs every suite (C tests, C tests under ASan + UBSan, busted specs under LuaJIT, the specs
# again under other BLAS threads and kernels), prints
# their output, and ends with one line "N passed, N failed, N skipped" over all of them (tests
# that need hardware this machine lacks, a GPU, skip: ctest exit 77, busted pending; they are
# never counted as passed). Exits non-zero if any suite fails. Usage: scripts/test.sh [build-dir] [asan-build-dir]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
asan=${2:-build-asan}
passed=0
failed=0
skipped=0
status=0
log=$(mktemp)
trap 'rm -f "$log" "$log".*' EXIT

# ctest ends with "100% tests passed, 0 tests failed out of 5"
run_ctest() {
    echo "== C tests ($1)"
    ctest --test-dir "$1" --output-on-failure 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local line
    line=$(grep -Eo '[0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        local bad total
        bad=$(echo "$line" | awk '{print $1}')
        total=$(echo "$line" | awk '{print $NF}')
        local skips
        skips=$(grep -c '\*\*\*Skipped' "$log")
        passed=$((passed + total - bad - skips))
        failed=$((failed + bad))
        skipped=$((skipped + skips))
    elif [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
    fi
    [ "$rc" -eq 0 ] || status=1
}

# busted ends with "12 successes / 0 failures / 0 errors / 1 pending : 0.1 seconds";
# busted_into OUT [VAR=VALUE ...] runs the specs with those variables set, their output and
# then their exit status into OUT and OUT.rc; tally_busted OUT prints them and counts them.
busted_into() {
    local out=$1
    shift
    echo "== Lua specs (busted, LuaJIT${*:+; $*})" >"$out"
    env "$@" busted >>"$out" 2>&1
    echo $? >"$out.rc"
}
tally_busted() {
    local rc
    cat "$1"
    rc=$(cat "$1.rc")
    local line
    line=$(grep -Eo '[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' \
        "$1" | tail -n 1)
    if [ -n "$line" ]; then
        local ok bad err pend
        read -r ok bad err pend <<<"$(echo "$line" | awk '{print $1, $4, $7, $10}')"
        passed=$((passed + ok))
        failed=$((failed + bad + err))
        skipped=$((skipped + pend))
    elif [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
    fi
    [ "$rc" -eq 0 ] || status=1
}

run_ctest "$build"
# The sanitizer build's C tests and the specs side by side: each keeps about one core busy (the
# sanitizers' tests are single processes but a few small MPI ones; the specs wait on the
# recipes they start), and every spec and test writes under its own temporary names.
busted_into "$log.specs" &
specs=$!
run_ctest "$asan"
wait "$specs"
tally_busted "$log.specs"
# The specs again as another machine would run them: one BLAS thread a process, and four with
# another CPU's OpenBLAS kernels (Haswell's, which AMD's Zen cores take too, where the CPU has
# AVX2). A spec that holds only at this machine's core count or with its kernels (a one-rank
# run equal to a two-rank one to the last bit) fails here, not on someone else's machine. The
# two passes run side by side (every spec writes under its own temporary names), their output
# printed when both end.
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    other=(OPENBLAS_NUM_THREADS=4 OPENBLAS_CORETYPE=Haswell)
else
    other=(OPENBLAS_NUM_THREADS=4)
fi
busted_into "$log.one" OPENBLAS_NUM_THREADS=1 &
busted_into "$log.other" "${other[@]}" &
wait
tally_busted "$log.one"
tally_busted "$log.other"
echo
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
exit "$status"
