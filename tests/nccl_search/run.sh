#!/usr/bin/env bash
# run.sh: cmake/FindNCCL.cmake against fake NCCL installs (a header with a version and empty
# library files: the search looks at names, not contents): the pip wheel's layout
# (site-packages/nvidia/nccl/{include/nccl.h, lib/libnccl.so.2}, no unversioned library) found
# through Python, NCCL_ROOT and NCCL_HOME (variable and environment) winning over the wheel, a
# folder's versioned library winning over an unversioned one in a later folder, and the include
# folder a SYSTEM one. Usage: tests/nccl_search/run.sh [source-dir]
set -uo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # check WHAT EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAILED: $1: expected '$2', got '$3'"; fails=$((fails + 1)); fi
}
fake_nccl() { # fake_nccl DIR MINOR LIBNAMES...: DIR/include/nccl.h and DIR/lib/<names>
    local dir=$1 minor=$2
    shift 2
    mkdir -p "$dir/include" "$dir/lib"
    # as the real header: a prototype without (void), which -Wstrict-prototypes refuses
    printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR %s\n#define NCCL_PATCH 9\nvoid ncclResetDebugInit();\n' \
        "$minor" >"$dir/include/nccl.h"
    for name in "$@"; do : >"$dir/lib/$name"; done
}
# configure NAME [cmake args...]: runs the search in a fresh build folder; prints found.txt
configure() {
    local name=$1
    shift
    cmake -S "$src/tests/nccl_search" -B "$tmp/build-$name" "$@" >"$tmp/$name.log" 2>&1 ||
        { echo "FAILED: configure $name"; cat "$tmp/$name.log"; fails=$((fails + 1)); }
    cat "$tmp/build-$name/found.txt" 2>/dev/null
}
field() { echo "$1" | sed -n "s/^$2=//p"; }

# the wheel, found through Python (a python3 that sees the fake package on PYTHONPATH)
wheel="$tmp/site/nvidia/nccl"
fake_nccl "$wheel" 28 libnccl.so.2
: >"$wheel/__init__.py"
py=$(command -v python3)
out=$(PYTHONPATH="$tmp/site" NCCL_ROOT= NCCL_HOME= configure wheel "-DNCCL_PYTHON=$py")
check "wheel: found" TRUE "$(field "$out" found)"
check "wheel: header" "$wheel/include" "$(field "$out" include)"
check "wheel: libnccl.so.2 without libnccl.so" "$wheel/lib/libnccl.so.2" "$(field "$out" library)"
check "wheel: version from nccl.h" 2.28.9 "$(field "$out" version)"
check "wheel: said where" "the Python package nvidia.nccl ($py)" "$(field "$out" where)"
check "wheel: a SYSTEM include folder" "$wheel/include" "$(field "$out" system)"
if cmake --build "$tmp/build-wheel" >"$tmp/wheel-build.log" 2>&1; then
    echo "ok: nccl.h's old-style prototype compiles under -Wstrict-prototypes -Werror"
else
    echo "FAILED: a file including nccl.h does not build:"; cat "$tmp/wheel-build.log"; fails=$((fails + 1))
fi

# NCCL_ROOT (CMake variable) before the wheel; a versioned library in the root's lib/ wins over
# an unversioned one in its lib64/
root="$tmp/root"
fake_nccl "$root" 27 libnccl.so.2
mkdir -p "$root/lib64" && : >"$root/lib64/libnccl.so"
out=$(PYTHONPATH="$tmp/site" configure root "-DNCCL_PYTHON=$py" "-DNCCL_ROOT=$root")
check "NCCL_ROOT: before the wheel" "$root/include" "$(field "$out" include)"
check "NCCL_ROOT: the first folder's library" "$root/lib/libnccl.so.2" "$(field "$out" library)"
check "NCCL_ROOT: said where" "NCCL_ROOT / NCCL_HOME" "$(field "$out" where)"

# NCCL_HOME from the environment
home="$tmp/home"
fake_nccl "$home" 26 libnccl.so
out=$(PYTHONPATH="$tmp/site" NCCL_HOME="$home" configure home "-DNCCL_PYTHON=$py")
check "NCCL_HOME (environment)" "$home/lib/libnccl.so" "$(field "$out" library)"
check "NCCL_HOME: version" 2.26.9 "$(field "$out" version)"

# a root without a library: nothing half-found from it, the wheel's pair instead
half="$tmp/half"
mkdir -p "$half/include" && cp "$root/include/nccl.h" "$half/include/"
out=$(PYTHONPATH="$tmp/site" configure half "-DNCCL_PYTHON=$py" "-DNCCL_ROOT=$half")
check "header-only root: the wheel's header" "$wheel/include" "$(field "$out" include)"
check "header-only root: the wheel's library" "$wheel/lib/libnccl.so.2" "$(field "$out" library)"

echo "nccl_search: $fails failed"
[ "$fails" -eq 0 ]
