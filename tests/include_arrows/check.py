#!/usr/bin/env python3
"""check.py: the include arrows between src/core's subsystems against docs/architecture.md.

Reads the subsystem table of docs/architecture.md (folder, and the subsystems it "uses"), then
every #include "<folder>/..." in src/core/<folder>/ (its cpu/ subfolder counted as device/):
each arrow from one subsystem to another must be one the table lists, and the arrows must form
no circle. Prints the arrows found; exits 1 naming any arrow the table does not list, or a
circle. Usage: tests/include_arrows/check.py [repo root]"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
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
print(f"include_arrows: {len(arrows)} arrows, {failed} failed")
sys.exit(1 if failed else 0)
