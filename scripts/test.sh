#!/usr/bin/env bash
# Runs every suite (C tests, C tests under ASan + UBSan, busted specs under LuaJIT, the specs
# again under other BLAS threads and kernels), prints
# their output, and ends with one line "N passed, N failed, N skipped" over all of them (tests
# that need hardware this machine lacks, a GPU, skip: ctest exit 77, busted pending; they are
# never counted as passed). Exits non-zero if any suite fails. Usage: scripts/test.sh [build-dir] [asan-build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
asan=${2:-build-asan}
passed=0
failed=0
skipped=0
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

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

# busted ends with "12 successes / 0 failures / 0 errors / 1 pending : 0.1 seconds"; run_busted
# [VAR=VALUE ...] runs the specs with those variables set
run_busted() {
    echo "== Lua specs (busted, LuaJIT${*:+; $*})"
    env "$@" busted 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local line
    line=$(grep -Eo '[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' \
        "$log" | tail -n 1)
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
run_ctest "$asan"
run_busted
# The specs again as another machine would run them: one BLAS thread a process, and four with
# another CPU's OpenBLAS kernels (Haswell's, which AMD's Zen cores take too, where the CPU has
# AVX2). A spec that holds only at this machine's core count or with its kernels (a one-rank
# run equal to a two-rank one to the last bit) fails here, not on someone else's machine.
run_busted OPENBLAS_NUM_THREADS=1
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    run_busted OPENBLAS_NUM_THREADS=4 OPENBLAS_CORETYPE=Haswell
else
    run_busted OPENBLAS_NUM_THREADS=4
fi
echo
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
exit "$status"
