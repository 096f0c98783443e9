#!/usr/bin/env bash
# Runs every suite (C tests, C tests under ASan + UBSan, busted specs under LuaJIT), prints
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

# busted ends with "12 successes / 0 failures / 0 errors / 1 pending : 0.1 seconds"
run_busted() {
    echo "== Lua specs (busted, LuaJIT)"
    busted 2>&1 | tee "$log"
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
echo
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
exit "$status"
