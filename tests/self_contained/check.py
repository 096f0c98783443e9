#!/usr/bin/env python3
"""check.py: the repository explains itself: no file cites a document or a tracker outside it.

Reads every tracked file (git ls-files; without git, every file) of README.md, CMakeLists.txt,
Makefile and the folders src, lua, spec, docs, tests, bench, scripts, recipes, cmake and bin,
and fails on a mention of the project's former outside documents (the reference, design and
style pages named in capitals with a .md suffix), of the folder that held them beside the
repository, of an absolute /work/ path, or of a tracker's "issue <number>" (also across a
comment's line break). The algorithms live in docs/algorithms.md; say what an issue was about
in words instead of its number. This file is the one exception. Also fails on any tracked
symbolic link, wherever it is, whose target is absolute or leaves the repository (a link to a
machine's own folder, such as a data directory, committed by mistake, replaces that folder in
every checkout it is merged into). Prints each hit as path:line: text and exits 1 if there is
any.
Usage: tests/self_contained/check.py [repo root]"""
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                       else os.path.join(os.path.dirname(__file__), "..", ".."))
FILES = {"README.md", "CMakeLists.txt", "Makefile"}
FOLDERS = ("src", "lua", "spec", "docs", "tests", "bench", "scripts", "recipes", "cmake", "bin")
SELF = os.path.relpath(os.path.abspath(__file__), root)

# built from parts, so that this file does not match itself when read as text
DOCS = "|".join(name + r"\.md" for name in ("REFER" + "ENCE", "DES" + "IGN", "STY" + "LE"))
PATTERNS = [
    (re.compile(r"\b(?:" + DOCS + r")\b"), "a document outside the repository"),
    (re.compile(r"shared" + r" folder|\.\./shared\b|/work" + r"/", re.I),
     "a path outside the repository"),
    # the word with a number after it: singular or plural, with or without "#", and split
    # across a comment's line break
    (re.compile(r"\bissues?[ \t]*(?:\n[ \t]*(?:--|//|\*|#|;)?[ \t]*)?#?\d+\b", re.I),
     "an issue number (say what it was about)"),
]


def tracked():
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode("utf-8", "replace")
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for folder in FOLDERS:
            for d, _, files in os.walk(os.path.join(root, folder)):
                names += [os.path.relpath(os.path.join(d, f), root) for f in files]
        names += [f for f in FILES if os.path.exists(os.path.join(root, f))]
    return sorted(n for n in names
                  if (n in FILES or n.split("/")[0] in FOLDERS) and n != SELF)


hits = []
files = tracked()
for name in files:
    path = os.path.join(root, name)
    if not os.path.isfile(path):
        continue
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:4096]:
        continue  # binary (images, fixtures)
    text = data.decode("utf-8", "replace")
    for pattern, what in PATTERNS:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            shown = text.splitlines()[line - 1].strip()
            hits.append(f"{name}:{line}: {what} ({m.group(0)!r}): {shown}")

# tracked links: their targets are what git stores, checked whether or not the link resolves
try:
    out = subprocess.run(["git", "-C", root, "ls-files", "-s", "-z"], capture_output=True,
                         check=True).stdout.decode("utf-8", "replace")
    for entry in filter(None, out.split("\0")):
        meta, name = entry.split("\t", 1)  # "mode object stage\tpath"
        path = os.path.join(root, name)
        if meta.split()[0] != "120000" or not os.path.islink(path):
            continue
        target = os.readlink(path)
        inside = os.path.normpath(os.path.join(os.path.dirname(name), target))
        if os.path.isabs(target) or inside.startswith(".."):
            hits.append(f"{name}:0: a link out of the repository ({target!r})")
except (OSError, subprocess.CalledProcessError):
    pass

for h in hits:
    print(h)
print(f"self_contained: {len(files)} files, {len(hits)} outside reference(s)")
sys.exit(1 if hits else 0)
