#!/usr/bin/env bash
# sass-count.sh: per kernel of a CUDA library whose name matches a pattern, the count of two
# kinds of SASS instruction: LDGSTS (cp.async, global to shared without registers) and LDG.E.128
# (16-byte global loads), from cuobjdump -sass; one line per kernel, names demangled. Used by
# scripts/gpu-run.sh on the tensor-core attention's kernels (flash_mma), to see which staging
# each instantiation compiled to. Exits 1 when no kernel matches.
# Usage: scripts/sass-count.sh CUOBJDUMP LIBRARY [PATTERN]   (PATTERN: an awk regex, flash_mma)
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: scripts/sass-count.sh CUOBJDUMP LIBRARY [PATTERN]" >&2
    exit 2
fi
pattern=${3:-flash_mma}
counts=$("$1" -sass "$2" | awk -v pat="$pattern" '
    /Function :/ { name = $3; next }
    name ~ pat { seen[name] = 1 }
    name ~ pat && /LDGSTS/ { async[name]++ }
    name ~ pat && /LDG\.E\.128/ { wide[name]++ }
    END { for (n in seen) printf "sass %s: %d LDGSTS, %d LDG.E.128\n", n, async[n], wide[n] }' |
    c++filt | sort)
if [ -z "$counts" ]; then
    echo "sass-count: no kernel matching $pattern in $2" >&2
    exit 1
fi
echo "$counts"
