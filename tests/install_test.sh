#!/usr/bin/env bash
# install_test.sh: installs lwopt into a temporary prefix from a separate build tree, then uses
# it as a user would: bin/lwopt, require("lwopt") from share/lua/5.1, and a C program built
# with pkg-config. Usage: install_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# without the CUDA library: the main build compiles and tests it, and its nvcc build would be most
# of this test's time; what is checked here is what a user of the core and the Lua front end sees
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DLWOPT_TESTS=OFF -DLWOPT_CUDA=OFF \
    -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build "$tmp/build" -j 2 >/dev/null
cmake --install "$tmp/build" >/dev/null

for f in share/lua/5.1/lwopt/init.lua \
         share/lua/5.1/lwopt/cdef.lua share/lua/5.1/lwopt/layout.lua \
         share/lua/5.1/lwopt/nn/init.lua share/lua/5.1/lwopt/nn/module.lua \
         share/lua/5.1/lwopt/nn/gpt.lua bin/lwopt; do
    [ -e "$prefix/$f" ] || { echo "install_test: $f not installed"; exit 1; }
done
# every public header (src/lw.h and src/lw_*.h) installed, each compiling on its own, in C and C++
for h in "$src"/src/lw.h "$src"/src/lw_*.h; do
    name=$(basename "$h")
    [ -e "$prefix/include/lwopt/$name" ] || { echo "install_test: $name not installed"; exit 1; }
    printf '#include <%s>\n' "$name" >"$tmp/alone.c"
    cc -std=c11 -Wall -Wextra -Wpedantic -Wstrict-prototypes -Werror -fsyntax-only \
        -I"$prefix/include/lwopt" "$tmp/alone.c" ||
        { echo "install_test: $name does not compile on its own"; exit 1; }
    if command -v c++ >/dev/null; then
        c++ -x c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include/lwopt" \
            "$tmp/alone.c" || { echo "install_test: $name does not compile as C++"; exit 1; }
    fi
done
pc=$(dirname "$(find "$prefix" -name lwopt.pc | head -n 1)")
[ -n "$pc" ] || { echo "install_test: lwopt.pc not installed"; exit 1; }

# the installed command, from elsewhere, with the build tree gone
rm -rf "$tmp/build"
out=$(cd / && "$prefix/bin/lwopt" layout --n-layer 1 --n-embd 64 --n-head 2 --dp 2 --stats)
echo "$out" | grep -q "muon numel per rank" || { echo "install_test: lwopt layout: $out"; exit 1; }

# the Lua modules from share/lua/5.1
LUA_PATH="$prefix/share/lua/5.1/?.lua;$prefix/share/lua/5.1/?/init.lua;;" \
    luajit -e 'local lw = require("lwopt"); assert(lw.library:find("'"$prefix"'", 1, true), lw.library)
               assert(lw.nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2 }:parameters()[1])
               assert(require("lwopt.nn.linear") == lw.nn.Linear)'

# a C user through pkg-config
cat >"$tmp/user.c" <<'C'
#include <lw.h>
#include <stdio.h>
int main(void) {
    lw_param_spec s = {"w", 2, {64, 64, 0, 0}, LW_DTYPE_F32, LW_DTYPE_F32, false, false, true};
    lw_layout_options o = lw_layout_defaults();
    lw_layout *l;
    if (lw_layout_new(&s, 1, &o, &l) != LW_OK) return 1;
    int ok = lw_layout_check(l) == LW_OK;
    lw_layout_free(l);
    printf("lwopt %s %s\n", lw_version(), ok ? "ok" : "bad");
    return ok ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$pc
cc -std=c11 -Wall -Werror "$tmp/user.c" $(pkg-config --cflags --libs lwopt) -o "$tmp/user"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir lwopt) "$tmp/user"

# docs/c_api.md's example, as printed there, against the installed headers
sed -n '/^```c$/,/^```$/p' "$src/docs/c_api.md" | sed '1d;$d' >"$tmp/example.c"
diff -u "$src/tests/test_c_example.c" "$tmp/example.c" ||
    { echo "install_test: docs/c_api.md's example differs from tests/test_c_example.c"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror "$tmp/example.c" $(pkg-config --cflags --libs lwopt) \
    -o "$tmp/example"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir lwopt) "$tmp/example"
