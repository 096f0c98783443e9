#!/usr/bin/env python3
"""check.py: liblwopt's BPE against references written here in Python: GPT-2's pre-tokenizer
pattern run by the `regex` module (its chunks of random Unicode text and of data/kjv.txt when
present), and GPT-2's merge loop (the pair of lowest rank, every occurrence left to right, until
none has a rank) over the merges liblwopt learnt, on the same texts. Calls the library through
ctypes. Exits 77 (skipped) when the `regex` module is missing.
Usage: tests/bpe_reference/check.py REPO_ROOT BUILD_DIR"""
import ctypes
import os
import random
import sys

try:
    import regex
except ImportError:
    print("skipped: the python3 module regex is not installed")
    sys.exit(77)

root, build = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(os.path.join(build, "liblwopt.so"))
i32, i64, p = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
lib.lw_bpe_chunk.restype = i64
lib.lw_bpe_chunk.argtypes = [ctypes.c_char_p, i64, i64]
lib.lw_last_error.restype = ctypes.c_char_p
PATTERN = regex.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                        r"|\s+(?!\S)|\s+")


def ok(status):
    if status != 0:
        sys.exit("liblwopt: " + lib.lw_last_error().decode())


def chunks(raw):
    out, at = [], 0
    while at < len(raw):
        end = lib.lw_bpe_chunk(raw, len(raw), at)
        out.append(raw[at:end])
        at = end
    return out


def train(raw, vocab):
    trainer, bpe = p(), p()
    ok(lib.lw_bpe_trainer_new(i32(vocab), i64(2), None, i32(0), ctypes.byref(trainer)))
    ok(lib.lw_bpe_trainer_add_text(trainer, raw, i64(len(raw))))
    ok(lib.lw_bpe_trainer_train(trainer, ctypes.byref(bpe)))
    lib.lw_bpe_trainer_free(trainer)
    ranks = {}
    for r in range(lib.lw_bpe_merge_count(bpe)):
        a, b, c = i32(), i32(), i32()
        ok(lib.lw_bpe_merge(bpe, i32(r), ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)))
        ranks[(a.value, b.value)] = (r, c.value)
    return bpe, ranks


def encode(bpe, raw):
    ids, n = (i32 * max(len(raw), 1))(), i64()
    ok(lib.lw_bpe_encode(p(bpe.value), raw, i64(len(raw)), ctypes.c_bool(True), ids,
                         ctypes.byref(n)))
    return list(ids[:n.value])


def reference_bpe(chunk, ranks):
    word = list(chunk)
    while len(word) > 1:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        best = min(pairs, key=lambda q: ranks.get(q, (1 << 62,))[0])
        if best not in ranks:
            break
        new, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                new.append(ranks[best][1])
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = new
    return word


failures = 0


def compare(name, text, bpe, ranks):
    global failures
    raw = text.encode("utf-8")
    ours, ref = chunks(raw), [m.encode("utf-8") for m in PATTERN.findall(text)]
    if ours != ref:
        at = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b),
                  min(len(ours), len(ref)))
        print("%s: chunk %d differs: ours %r, the pattern's %r" % (name, at, ours[at:at + 3],
                                                                 ref[at:at + 3]))
        failures += 1
    memo = {}
    for c in ref:
        if c not in memo:
            memo[c] = reference_bpe(c, ranks)
    want = [t for c in ref for t in memo[c]]
    if encode(bpe, raw) != want:
        print("%s: the encoding differs from GPT-2's merge loop" % name)
        failures += 1


random.seed(3)
pool = ([chr(c) for c in range(32, 127)] * 3 + [chr(c) for c in (
    9, 10, 11, 12, 13, 0x1c, 0x85, 0xa0, 0x1680, 0x2003, 0x2028, 0x3000, 0xe9, 0xb2, 0x663,
    0x4f60, 0x1f44b, 0x2014, 0x201c, 0x301, 0x2160, 0x10400, 0)]
    + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "  ", "\n\n", " \n", "the ", "and "])
texts = ["".join(random.choice(pool) for _ in range(random.randint(0, 400))) for _ in range(300)]
bpe, ranks = train("".join(texts).encode("utf-8"), 600)
for k, text in enumerate(texts):
    compare("random text %d" % k, text, bpe, ranks)
kjv = os.path.join(root, "data", "kjv.txt")
if os.path.exists(kjv):
    with open(kjv, encoding="utf-8") as f:
        text = f.read()
    bpe, ranks = train(text.encode("utf-8"), 1024)
    compare("data/kjv.txt", text, bpe, ranks)
else:
    print("data/kjv.txt is missing (make data): checked random text only")
print("bpe_reference: %s" % ("%d failures" % failures if failures else "all agree"))
sys.exit(1 if failures else 0)
