#!/usr/bin/env bash
# gpu-run.sh: the one command for a GPU machine (../shared/device/README.md: one H100 or H200,
# CUDA 13, no network, no MPI launcher). Sets up the Debian packages carried in .debs/ (if
# there), configures and builds build-gpu (Release, LWOPT_CUDA=ON, CUDA architectures 90 unless
# CUDA_ARCHITECTURES says otherwise), says which GPU it runs on, runs the GPU tests (ctest -L gpu)
# and then the GPU benchmarks (bench/cuda/*, bench/gpt2_gpu.lua, and the PyTorch peers
# bench/peers/torch_newton_schulz.py and torch_gpt2.py when python3 can import torch). Every
# step's output goes to a log in $OUT (the device tool copies $OUT back), else runs/gpu/;
# summary.txt lists each step's exit status. Exits non-zero when there is no GPU, the build
# fails or a test fails; a benchmark that fails is recorded and the others still run.
# Usage: scripts/gpu-run.sh [--no-bench | --bench-only]   (the device tool allows 10 minutes a
# command: run the tests and the benchmarks as two calls; the build is kept between them)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ -f .debs/setup-device.sh ]; then
    # shellcheck disable=SC1091
    . .debs/setup-device.sh
fi
out=${OUT:-runs/gpu}
build=${GPU_BUILD:-build-gpu}
arch=${CUDA_ARCHITECTURES:-90}
jobs=$(nproc)
bench=1
tests=1
case "${1:-}" in
--no-bench) bench=0 ;;
--bench-only) tests=0 ;;
"") ;;
*) echo "usage: scripts/gpu-run.sh [--no-bench | --bench-only]" >&2; exit 2 ;;
esac
mkdir -p "$out"
: >"$out/summary.txt"
status=0

# step NAME CMD...: runs CMD, its output to the terminal and $out/NAME.log; records its status.
step() {
    local name=$1
    shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "$name: exit $rc" >>"$out/summary.txt"
    return "$rc"
}

{
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi 2>&1 || echo "nvidia-smi: not found"
} >"$out/machine.log"

step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLWOPT_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" || { echo "configure failed"; exit 1; }
step build cmake --build "$build" -j "$jobs" || { echo "build failed"; exit 1; }

# bin/lwopt with this build's library and binding (bin/lwopt looks in build/ by default)
export LWOPT_LIB="$PWD/$build/liblwopt.so"
export LUA_PATH="$PWD/$build/lua/?.lua;;"
if ! step device bin/lwopt device cuda; then
    echo "no GPU to run on (above: why); nothing else to do"
    exit 1
fi

if [ "$tests" = 1 ]; then
    step tests ctest --test-dir "$build" -L gpu --output-on-failure || status=1
    # a skipped GPU test on a GPU machine is a failure of this run
    if grep -q "Skipped\|Not Run" "$out/tests.log"; then
        echo "tests: some GPU tests did not run (see $out/tests.log)" | tee -a "$out/summary.txt"
        status=1
    fi
fi

if [ "$bench" = 1 ]; then
    step bench_newton_schulz "$build/bench_cuda_newton_schulz"
    step bench_newton_schulz_tf32 "$build/bench_cuda_newton_schulz" tf32 --no-batched
    step bench_adamw "$build/bench_cuda_adamw"
    step bench_optimizer_step "$build/bench_cuda_optimizer_step"
    step bench_gpt2 bin/lwopt run bench/gpt2_gpu.lua
    if python3 -c "import torch" 2>/dev/null; then
        step bench_torch_newton_schulz python3 bench/peers/torch_newton_schulz.py
        step bench_torch_gpt2 python3 bench/peers/torch_gpt2.py
    else
        for name in bench_torch_newton_schulz bench_torch_gpt2; do
            echo "$name: skipped (python3 cannot import torch)" >>"$out/summary.txt"
        done
    fi
fi
echo
cat "$out/summary.txt"
exit "$status"
