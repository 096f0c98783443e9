#!/usr/bin/env bash
# optimizer_step.sh: bench/optimizer_step.lua at dp 1, 2 and 4 (4 oversubscribes a 2-core
# machine), one BLAS thread per rank. Prints the markdown table; collective lines go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| dp | mode | step s | comm s | compute s | Muon s | MB sent per rank |"
echo "|---|---|---|---|---|---|---|"
for np in 1 2 4; do
    mpirun --oversubscribe -np "$np" -x OPENBLAS_NUM_THREADS=1 bin/lwopt run \
        bench/optimizer_step.lua "$@"
done
