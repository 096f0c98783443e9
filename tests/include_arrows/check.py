#!/usr/bin/env python3
"""check.py: the include arrows between src/core's subsystems against docs/architecture.md.

Reads the subsystem table of docs/architecture.md (folder, and the subsystems it "uses"), then
every #include "<folder>/..." in src/core/<folder>/ (its cpu/ subfolder counted as device/):
each arrow from one subsystem to another must be one the table lists, and the arrows must form
no circle. With --objects BUILD, also the calls between the C files of src/core, from the
symbols of liblwopt's objects in BUILD (nm): a file that calls into a file that calls back into
it, directly or round a longer circle, fails too. Prints the arrows found; exits 1 naming any
arrow the table does not list, or a circle.
Usage: tests/include_arrows/check.py [repo root] [--objects BUILD]"""
import glob
import os
import re
import subprocess
import sys

args = sys.argv[1:]
objects = None
if "--objects" in args:
    i = args.index("--objects")
    objects = args[i + 1]
    del args[i:i + 2]
root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..")
core = os.path.join(root, "src", "core")
folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))

# the table: | `folder/` | header | what | uses |
allowed = {}
with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
    for line in f:
        m = re.match(r"\|\s*`([a-z_]+)/`\s*\|(.*)\|(.*)\|(.*)\|\s*$", line)
        if m and m.group(1) in folders:
            uses = m.group(4)
            allowed[m.group(1)] = {d for d in folders if re.search(r"\b%s\b" % d, uses)}
failed = 0
for d in folders:
    if d not in allowed:
        print(f"FAILED: src/core/{d}/ has no row in docs/architecture.md's subsystem table")
        failed += 1

arrows = {}
for d in folders:
    for dirpath, _, files in os.walk(os.path.join(core, d)):
        for name in files:
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                    if m and m.group(1) != d and m.group(1) in folders:
                        arrows.setdefault((d, m.group(1)), f"{os.path.relpath(path, root)}:{n}")

for (a, b), where in sorted(arrows.items()):
    ok = b in allowed.get(a, set())
    print(f"{'ok' if ok else 'FAILED'}: {a} -> {b} ({where}){'' if ok else ': not in its uses'}")
    failed += not ok

# a circle: depth-first search over the arrows
graph = {}
for a, b in arrows:
    graph.setdefault(a, set()).add(b)
state = {}


def visit(node, path):
    global failed
    state[node] = "open"
    for nxt in sorted(graph.get(node, ())):
        if state.get(nxt) == "open":
            print("FAILED: include circle: " + " -> ".join(path + [node, nxt]))
            failed += 1
        elif nxt not in state:
            visit(nxt, path + [node])
    state[node] = "done"


for node in sorted(graph):
    if node not in state:
        visit(node, [])


def call_circles(build):
    """Circles of calls between src/core's C files: strongly connected groups of more than one
    file in the graph of "file A uses a symbol file B defines" (nm of the library's objects)."""
    defined, used = {}, {}
    for obj in glob.glob(os.path.join(build, "CMakeFiles", "lwopt.dir", "src", "core", "**", "*.o"),
                         recursive=True):
        name = obj.split(os.sep + "core" + os.sep, 1)[1][:-len(".c.o")]
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        defined[name] = {p[2] for p in (l.split() for l in out.splitlines())
                         if len(p) == 3 and p[1] in "TDBR"}
        used[name] = {p[1] for p in (l.split() for l in out.splitlines())
                      if len(p) == 2 and p[0] == "U"}
    owner = {sym: f for f, syms in defined.items() for sym in syms}
    calls = {f: {owner[s] for s in used[f] if s in owner and owner[s] != f} for f in defined}
    order, low, stack, on, groups = {}, {}, [], set(), []

    def strong(v):  # Tarjan's strongly connected components
        order[v] = low[v] = len(order)
        stack.append(v)
        on.add(v)
        for w in calls[v]:
            if w not in order:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(calls):
        if v not in order:
            strong(v)
    return len(defined), groups


if objects is not None:
    files, groups = call_circles(objects)
    if files == 0:
        print(f"FAILED: no objects of src/core under {objects}")
        failed += 1
    for group in groups:
        print("FAILED: C files calling each other round a circle: " + ", ".join(group))
        failed += 1
    print(f"calls: {files} C files, {len(groups)} circles")
print(f"include_arrows: {len(arrows)} arrows, {failed} failed")
sys.exit(1 if failed else 0)
