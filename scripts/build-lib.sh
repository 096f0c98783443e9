#!/usr/bin/env bash
# Builds what a recipe needs, quietly: liblwopt.so and the Lua binding generated from src/lw.h;
# liblwopt_cuda.so only when the build folder already holds one (kept current, never started
# here); no tests or benchmarks (make build builds everything). Prints one line, or when the
# configure or build fails, their whole output. Usage: scripts/build-lib.sh [build-dir] [jobs]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${2:-$(nproc)}
mkdir -p "$build"
log=$build/build-lib.log
targets=(lwopt lwopt_cdef)
if [ -e "$build/liblwopt_cuda.so" ]; then targets+=(lwopt_cuda); fi

echo "building lwopt..."
if ! {
    { [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release; } &&
        cmake --build "$build" -j "$jobs" --target "${targets[@]}"
} >"$log" 2>&1; then
    cat "$log" >&2
    echo "building lwopt failed (the output above is in $log)" >&2
    exit 1
fi
