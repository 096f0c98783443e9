#!/usr/bin/env bash
# gpu-run.sh: the one command for a GPU machine (one H100 or H200, CUDA 13, PyTorch's Python; no
# network, no LuaJIT, OpenBLAS or MPI of its own: those come in .debs/, unpacked by
# .debs/setup-device.sh when it is there). One call builds build-gpu (Release, LWOPT_CUDA=ON,
# CUDA architectures 90 unless CUDA_ARCHITECTURES says otherwise, NCCL found as
# cmake/FindNCCL.cmake looks for it), says which GPU it runs on, runs every GPU test (ctest -L
# gpu: the kernels against the CPU's, the device communicators, the recipe on the GPU, 2 and 3
# ranks sharing it), the GPU benchmarks, the PyTorch peers when python3 can import torch, and a
# kernel profile of two GPT-2 steps when Nsight Systems (nsys) or Nsight Compute (ncu) is there.
# Each step runs under its own time limit, so one hang cannot eat the rest, and no step starts
# once the whole run is past its budget (GPU_RUN_BUDGET seconds, default 540: the device tool
# gives a command 10 minutes). Nothing is installed. What comes back is at most 8 files in $OUT
# (the device tool copies $OUT back; else runs/gpu/):
#   summary.txt  each step's status and time, then the headline figures (scripts/gpu_report.py)
#   machine.txt  the commit, nvidia-smi, the GPU as lwopt sees it
#   build.log    configure and build
#   tests.log    the GPU tests, and everything they printed (ctest's LastTest.log)
#   bench.log    bench_cuda_* (attention per layer among them, its tensor-core kernels' two
#                stagings side by side, and when cuobjdump is here their SASS's cp.async and
#                16-byte loads counted per kernel) and bench/gpt2_gpu.lua (then, budget left, its
#                quick runs at batch 16 and on GPT-2 350M, bench/bf16_band.lua)
#   peers.log    the PyTorch peers (torch_attention.py: SDPA on bench_cuda_attention's shapes)
#   profile.txt  the profiler's output (CSV)
# Exits non-zero when there is no GPU, the build fails or a test fails; a benchmark that fails is
# recorded and the others still run.
# Usage: scripts/gpu-run.sh [--no-bench | --tests-only | --bench-only]
#   --no-bench / --tests-only: build and tests; --bench-only: build, benchmarks, peers, profile
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ -f .debs/setup-device.sh ]; then
    # shellcheck disable=SC1091
    . .debs/setup-device.sh
fi
out=${OUT:-runs/gpu}
build=${GPU_BUILD:-build-gpu}
arch=${CUDA_ARCHITECTURES:-90}
budget=${GPU_RUN_BUDGET:-540}
jobs=$(nproc)
bench=1
tests=1
case "${1:-}" in
--no-bench | --tests-only) bench=0 ;;
--bench-only) tests=0 ;;
"") ;;
*) echo "usage: scripts/gpu-run.sh [--no-bench | --tests-only | --bench-only]" >&2; exit 2 ;;
esac
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
start=$SECONDS
status=0

# step NAME LOG LIMIT CMD...: runs CMD under `timeout LIMIT` (seconds), its output appended to
# $out/LOG under a header; records its status and time in the summary. Skipped (status 124)
# once the run is past its budget.
step() {
    local name=$1 log=$out/$2 limit=$3
    shift 3
    if [ $((SECONDS - start)) -ge "$budget" ]; then
        echo "$name: skipped: the run is past its budget of $budget s" | tee -a "$summary"
        return 124
    fi
    echo "== $name: $* (limit $limit s)" | tee -a "$log"
    local t0=$SECONDS
    timeout --kill-after=15 "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    local took=$((SECONDS - t0)) what
    case $rc in
    0) what="ok" ;;
    124 | 137) what="timed out after $limit s" ;;
    77) what="skipped (exit 77)" ;;
    *) what="failed (exit $rc)" ;;
    esac
    echo "$name: $what, $took s" | tee -a "$summary"
    tail -n 3 "$log" | sed 's/^/    /'
    return "$rc"
}

{
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        "$(git status --porcelain 2>/dev/null | grep -q . && echo '(with changes)')"
    date -u
    nvidia-smi 2>&1 || echo "nvidia-smi: not found"
} >"$out/machine.txt"

step configure build.log 120 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLWOPT_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" || { echo "configure failed: $out/build.log"; exit 1; }
grep "lwopt:" "$out/build.log" | tail -n 4 >>"$out/machine.txt"
step build build.log 300 cmake --build "$build" -j "$jobs" || { echo "build failed: $out/build.log"; exit 1; }

# bin/lwopt with this build's library and binding (bin/lwopt looks in build/ by default)
export LWOPT_LIB="$PWD/$build/liblwopt.so"
export LUA_PATH="$PWD/$build/lua/?.lua;${LUA_PATH:-;}"
# the GPU tests run mpirun as whoever this is; the machine's MPI may ask for these as root
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! step device machine.txt 60 bin/lwopt device cuda; then
    echo "no GPU to run on ($out/machine.txt says why); nothing else to do"
    exit 1
fi

if [ "$tests" = 1 ]; then
    # four at a time: the GPU has room, and the multi-rank ones wait on MPI more than on it
    # LWOPT_GEMM_REPORT: the path each bf16-output GEMM shape takes, in the tests' output
    step tests tests.log 300 env LWOPT_GEMM_REPORT=1 ctest --test-dir "$build" -L gpu -j 4 \
        --timeout 280 --output-on-failure || status=1
    # what the passing tests printed too (tolerances measured, losses compared)
    cat "$build/Testing/Temporary/LastTest.log" >>"$out/tests.log" 2>/dev/null
    # a skipped GPU test on a GPU machine is a failure of this run
    if grep -q "Skipped\|Not Run" "$out/tests.log"; then
        echo "tests: some GPU tests did not run (tests.log says which)" | tee -a "$summary"
        status=1
    fi
fi

if [ "$bench" = 1 ]; then
    step bench_newton_schulz bench.log 60 "$build/bench_cuda_newton_schulz"
    step bench_newton_schulz_tf32 bench.log 45 "$build/bench_cuda_newton_schulz" tf32 --no-batched
    step bench_adamw bench.log 30 "$build/bench_cuda_adamw"
    step bench_optimizer_step bench.log 45 "$build/bench_cuda_optimizer_step"
    # the tensor-core attention's kernels as built (sm_90 SASS): per kernel, LDGSTS (cp.async,
    # the pipelined staging's) and LDG.E.128 (16-byte loads) counted, when cuobjdump is here
    cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
    if [ -n "$cuobjdump" ]; then
        step sass_attention bench.log 60 scripts/sass-count.sh "$cuobjdump" \
            "$build/liblwopt_cuda.so" flash_mma
    else
        echo "sass_attention: skipped (no cuobjdump here)" | tee -a "$summary"
    fi
    step bench_attention bench.log 60 "$build/bench_cuda_attention"
    # LWOPT_GEMM_REPORT: which path each bf16-output GEMM shape takes (cuBLASLt's epilogue or not)
    step bench_gpt2 bench.log 150 env LWOPT_GEMM_REPORT=1 bin/lwopt run bench/gpt2_gpu.lua
    if python3 -c "import torch" 2>/dev/null; then
        step torch_newton_schulz peers.log 90 python3 bench/peers/torch_newton_schulz.py
        step torch_attention peers.log 60 python3 bench/peers/torch_attention.py
        step torch_gpt2 peers.log 200 python3 bench/peers/torch_gpt2.py
    else
        echo "torch peers: skipped (python3 cannot import torch)" | tee -a "$summary"
    fi
    # two GPT-2 steps (Muon, bf16 GEMMs and Newton-Schulz) under a profiler: each kernel's GPU
    # time. Nsight Systems first (it times kernels as they run, in seconds); else Nsight Compute
    # (it replays each kernel alone: minutes for the ~2000 launches of two steps)
    shard=$(mktemp -d)/tokens.bin
    profiled=(bin/lwopt run recipes/gpt_small.lua --device cuda --preset gpt2 --data "$shard"
        --vocab 50257 --batch 8 --seq 1024 --optimizer muon --matmul bf16 --muon-precision bf16
        --steps 2 --eval-every 0 --eval-max 1 --sample 0 --quiet)
    nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
    rep=$(dirname "$shard")/gpt2
    if [ -z "$ncu" ] && [ -z "$nsys" ]; then
        echo "profile: skipped (neither nsys nor ncu here)" | tee -a "$summary"
    elif ! bin/lwopt run bench/gpt2_gpu.lua --write-shard "$shard" >>"$out/profile.txt" 2>&1; then
        echo "profile: failed to write its token shard (profile.txt)" | tee -a "$summary"
    elif [ -n "$nsys" ] && step profile_nsys profile.txt 120 "$nsys" profile -t cuda -o "$rep" \
        --force-overwrite true "${profiled[@]}"; then
        step profile_stats profile.txt 60 "$nsys" stats --report cuda_gpu_kern_sum --format csv \
            "$rep.nsys-rep"
    elif [ -n "$ncu" ]; then
        step profile_ncu profile.txt 150 "$ncu" --csv --print-units base \
            --metrics gpu__time_duration.sum "${profiled[@]}"
    fi
    rm -rf "$(dirname "$shard")"
    # what is left of the budget: the GPU default's pair at batch 16 and on GPT-2 350M, and the
    # bf16 run's loss curve against the fp32 run's over 200 steps
    step bench_gpt2_b16 bench.log 120 bin/lwopt run bench/gpt2_gpu.lua 20 1 --batch 16 --quick
    step bench_gpt2_350m bench.log 150 bin/lwopt run bench/gpt2_gpu.lua 20 1 \
        --preset gpt2-medium --quick
    step bf16_band bench.log 120 bin/lwopt run bench/bf16_band.lua --device cuda
fi

{
    echo "total: $((SECONDS - start)) s"
    echo
    python3 scripts/gpu_report.py "$out" 2>&1
} >>"$summary"
echo
cat "$summary"
exit "$status"
