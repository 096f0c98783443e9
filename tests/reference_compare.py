#!/usr/bin/python3
"""reference_compare.py: compares lwopt's layout engine with tests/reference_layout.py, an
independent implementation written from docs/algorithms.md sections 2-4 and docs/layout.md.

Generates seeded random cases (specs + options), runs lwopt once on all of them through
tests/reference_driver.lua, and compares every buffer (key, algorithm, dp, numel, buckets) and
every parameter's placement (buffer, bucket, start, stop, owner) exactly. Fixed regression cases
from docs/algorithms.md's rules are checked against the Python implementation and lwopt directly.
Prints at most 5 mismatches and a last line "reference_compare: N cases, M mismatches"; exits 1
on any mismatch. Usage: reference_compare.py [--cases N] [--seed S]
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import reference_layout as ref  # noqa: E402

ADAMW_LAYOUTS = (None, "distopt", "aligned", "default", "legacy")
MAX_SHOWN = 5


# ---- random cases ----------------------------------------------------------------------------
def rand_dim(rng):
    """A mix: small 1..70, multiples of 64, anything up to a few thousand."""
    u = rng.random()
    if u < 0.3:
        return rng.randint(1, 70)
    if u < 0.8:
        return 64 * rng.randint(1, 32)
    return rng.randint(1, 3000)


def rand_shape(rng):
    u = rng.random()
    if u < 0.65:
        return [rand_dim(rng), rand_dim(rng)]
    if u < 0.85:
        return [rand_dim(rng)]
    if u < 0.95:
        return [rng.randint(1, 16) for _ in range(3)]
    return [rng.randint(1, 8) for _ in range(4)]


def rand_dp(rng):
    u = rng.random()
    if u < 0.75:
        return rng.choice([1, 2, 2, 3, 4, 4, 4, 5, 6, 8, 8, 8, 16])
    if u < 0.9:
        return rng.randint(1, 64)
    return rng.randint(1, 256)


# Equal numels with different costs (64x256, 128x128), sizes that fill each other exactly
# (64 + 64 = 128, 64 + 128 = 192): exact-size partners, exact greedy fits and sort ties.
PALETTE = [[64, 64], [64, 128], [128, 64], [128, 128], [64, 256], [256, 64], [32, 512], [64, 192],
           [192, 64], [8, 8], [1, 64], [64], [128], [3, 5], [100, 7], [16, 4, 2], [2, 16], [4, 4],
           [2, 128], [1, 512], [40, 40]]


def gen_case(rng):
    n = rng.randint(1, 40)
    mode = rng.random()
    big = mode < 0.05
    if big:  # large: elements far past 2^32 (costs stay below 2^48, exact as doubles)
        shapes = [[2 ** rng.randint(20, 40) + rng.randint(0, 999)] if rng.random() < 0.4
                  else [rng.randint(1, 2 ** 14), rng.randint(1, 2 ** 14)] for _ in range(n)]
    elif mode < 0.3:  # a small palette: many equal and complementary sizes
        palette = rng.sample(PALETTE, rng.randint(2, 6))
        shapes = [list(rng.choice(palette)) for _ in range(n)]
    elif mode < 0.6:  # repeated blocks, as in real models: equal sizes for size_matching
        block = [rand_shape(rng) for _ in range(rng.randint(1, 4))]
        shapes = [list(block[i % len(block)]) for i in range(n)]
        if rng.random() < 0.3:  # a few transposes: equal numel, different cost
            for s in shapes:
                if len(s) == 2 and rng.random() < 0.3:
                    s.reverse()
    else:
        shapes = [rand_shape(rng) for _ in range(n)]
    p_muon = rng.choice([0.0, 0.5, 0.8, 1.0])
    p_expert = rng.choice([0.0, 0.0, 0.3, 0.6])
    p_bf16 = rng.choice([0.0, 0.0, 0.0, 0.3])
    n_shared = rng.choice([0, 0, 0, 1, 1, 2, 3])
    shared_at = set(rng.sample(range(n), min(n_shared, n)))
    specs = []
    for i, shape in enumerate(shapes):
        s = {"name": "p%d" % i, "shape": shape}
        if i in shared_at:
            s["shape"] = shape if len(shape) == 2 else [rand_dim(rng), rand_dim(rng)]
            s["shared_embedding"] = True
            s["optimizer"] = "adamw"
        else:
            s["optimizer"] = "muon" if len(shape) == 2 and rng.random() < p_muon else "adamw"
            if rng.random() < p_expert:
                s["expert"] = True
        s["dtype"] = "bf16" if rng.random() < p_bf16 else "f32"
        u = rng.random()
        if u < 0.4:
            pass  # grad_dtype left to its default
        elif u < 0.4 + p_bf16:
            s["grad_dtype"] = "bf16"
        else:
            s["grad_dtype"] = "f32"
        specs.append(s)
    total = sum(ref.numel_of(s["shape"]) for s in specs)
    dp = rand_dp(rng)
    opts = {"dp": dp}
    if rng.random() < 0.3:
        opts["expert_dp"] = rand_dp(rng)
    if big and rng.random() < 0.5:
        opts["dp"] = dp = rng.randint(1, 1024)
    u = rng.random()
    if u < 0.3:
        pass  # no bucket size: one bucket per buffer
    elif u < 0.4:
        opts["bucket_size"] = 0
    elif u < 0.7:  # around the scale of the model, so buckets close now and then
        opts["bucket_size"] = rng.randint(1, max(1, 2 * total // rng.randint(1, 8)))
    elif u < 0.85:
        opts["bucket_size"] = int(10 ** rng.uniform(1, 15 if big else 7.5))
    else:  # whole shards: closing tests that hold with equality
        sd = ref.shard_divisor(dp, False)
        opts["bucket_size"] = dp * sd * rng.randint(1, 24)
    if rng.random() < 0.9:  # the shard-aligned layouts more often: they have more to get wrong
        opts["algorithm"] = rng.choice(ref.ALGORITHMS + ref.ALIGNED)
    al = rng.choice(ADAMW_LAYOUTS + ("aligned",))
    if al is not None:
        opts["adamw_layout"] = al
    if rng.random() < 0.2:
        opts["high_busbw"] = True
    return {"opts": opts, "specs": specs}


# ---- fixed regression cases from the rules of docs/algorithms.md ---------------------------------
DIVISORS = [  # (dp, high_busbw, bucket_end_divisor, shard_divisor)
    (1, False, 128, 128), (2, False, 128, 64), (4, False, 128, 64), (8, False, 128, 64),
    (3, False, 384, 128), (8, True, 65536, 8192), (256, False, 256, 64), (6, False, 384, 64),
]


def fixed_cases():
    """(case, check) pairs; check(result_in_ref_form) returns an error string or None."""
    out = []
    # legacy ping-pong, 4 ranks, 10 params p0..p9 in numel order (defined shuffled)
    sizes = {"p%d" % i: 64 * (i + 1) for i in range(10)}
    names = ["p3", "p7", "p0", "p9", "p5", "p1", "p8", "p2", "p6", "p4"]
    specs = [{"name": nm, "shape": [sizes[nm], 3], "dtype": "f32", "optimizer": "muon"}
             for nm in names]
    want = {}
    for r, group in enumerate([["p0", "p7", "p8"], ["p1", "p6", "p9"], ["p2", "p5"], ["p3", "p4"]]):
        for nm in group:
            want[nm] = r

    def check_pingpong(res):
        got = {nm: res["params"][nm]["owner"] for nm in want}
        return None if got == want else "ping-pong owners %s, want %s" % (got, want)

    for alg, al in (("legacy", None), ("cost", "legacy")):
        sp = [dict(s) for s in specs]
        if al:
            for s in sp:
                s["optimizer"] = "adamw"
        opts = {"dp": 4, "algorithm": alg}
        if al:
            opts["adamw_layout"] = al
        out.append(({"opts": opts, "specs": sp}, check_pingpong))

    # size_matching: zero padding when every size's count divides by dp
    specs = []
    for i in range(12):
        specs.append({"name": "q%d" % i, "shape": [[64, 128], [128, 192], [256, 64]][i % 3],
                      "dtype": "f32", "optimizer": "muon"})

    def check_zero_padding(res):
        b = res["buffers"][0]
        real = sum(x["numel_unpadded"] for x in b["buckets"])
        return None if b["numel"] == real else "padding %d, want 0" % (b["numel"] - real)

    out.append(({"opts": {"dp": 4, "algorithm": "size_matching"}, "specs": specs},
                check_zero_padding))

    # lpt/cost: bucket ids rise monotonically along backprop order; distopt: a shared embedding
    # sits alone in its bucket
    rng = random.Random(7)
    specs = [{"name": "m%d" % i, "shape": [rng.choice([64, 128, 192, 320]), 64], "dtype": "f32",
              "optimizer": "muon"} for i in range(30)]

    def check_monotone(res):
        order = [res["params"]["m%d" % i]["bucket"] for i in reversed(range(30))]
        if len(set(order)) < 2:
            return "expected several buckets, got %d" % len(set(order))
        return None if order == sorted(order) else "bucket ids along backprop: %s" % order

    for alg in ("lpt", "cost"):
        out.append(({"opts": {"dp": 3, "algorithm": alg, "bucket_size": 20000}, "specs": specs},
                    check_monotone))

    specs = [{"name": "wte", "shape": [500, 64], "dtype": "f32", "optimizer": "adamw",
              "shared_embedding": True}]
    specs += [{"name": "b%d" % i, "shape": [100], "dtype": "f32", "optimizer": "adamw"}
              for i in range(4)]

    def check_isolated(res):
        pe = res["params"]["wte"]
        others = [nm for nm, p in res["params"].items()
                  if nm != "wte" and (p["buffer"], p["bucket"]) == (pe["buffer"], pe["bucket"])]
        if others:
            return "shared embedding shares its bucket with %s" % others
        if pe.get("owner") not in (None, 0):
            return "shared embedding owner %s" % pe["owner"]
        return None

    for alg, al in (("cost", "distopt"), ("lpt", "aligned"), ("size_matching", "aligned")):
        out.append(({"opts": {"dp": 2, "algorithm": alg, "adamw_layout": al}, "specs": specs},
                    check_isolated))

    # boundaries worked out by hand from the text
    def muon(name, shape):
        return {"name": name, "shape": shape, "dtype": "f32", "optimizer": "muon"}

    # default: a bucket closes once it holds *at least* bucket_size elements
    out.append(({"opts": {"dp": 2, "algorithm": "default", "bucket_size": 128},
                 "specs": [muon("d%d" % i, [8, 8]) for i in range(4)]},
                expect([(0, 128, 128, 128), (128, 256, 128, 128)],
                       {"d3": (0, 0, None), "d2": (0, 64, None), "d1": (1, 128, None)})))
    # size_matching: closes when dp * pad(cursor, shard_divisor) >= bucket_size (equality)
    out.append(({"opts": {"dp": 2, "algorithm": "size_matching", "bucket_size": 8192},
                 "specs": [muon("s%d" % i, [64, 64]) for i in range(4)]},
                expect([(0, 8192, 4096, 8192), (8192, 16384, 4096, 8192)],
                       {"s3": (0, 0, 0), "s2": (0, 4096, 1), "s1": (1, 8192, 0),
                        "s0": (1, 12288, 1)})))
    # size_matching: no partner for the seed; the greedy fill fits exactly (4096 + 4096 = 8192)
    out.append(({"opts": {"dp": 2, "algorithm": "size_matching"},
                 "specs": [muon("g1", [64, 64]), muon("g2", [64, 64]), muon("big", [64, 128])]},
                expect([(0, 16384, 8192, 16384)],
                       {"big": (0, 0, 0), "g2": (0, 8192, 1), "g1": (0, 12288, 1)})))
    # lpt/cost with aligned AdamW: a shared embedding resets the chunk estimate (reading 10);
    # backprop order big, wte, p1, p2, p3; with bucket_size 0, p3 finds p1 and p2 on separate
    # shards of the fresh estimate, does not fit (228 > 128) and closes the chunk
    specs = [{"name": nm, "shape": [100], "dtype": "f32", "optimizer": "adamw"}
             for nm in ("p3", "p2", "p1")]
    specs += [{"name": "wte", "shape": [2, 64], "dtype": "f32", "optimizer": "adamw",
               "shared_embedding": True},
              {"name": "big", "shape": [10000], "dtype": "f32", "optimizer": "adamw"}]
    buckets = [(0, 20096, 10048, 10000), (20096, 20352, 128, 128), (20352, 20608, 128, 200),
               (20608, 20864, 128, 100)]
    common = {"big": (0, 0, 0), "wte": (1, 20096, 0), "p3": (3, 20608, 0)}
    for alg, p1, p2 in (("lpt", (2, 20352, 0), (2, 20480, 1)),
                        ("cost", (2, 20480, 1), (2, 20352, 0))):  # cost: big loaded shard 0
        out.append(({"opts": {"dp": 2, "algorithm": alg, "adamw_layout": "aligned",
                              "bucket_size": 0}, "specs": specs},
                    expect(buckets, dict(common, p1=p1, p2=p2))))
    return out


def expect(buckets, params):
    """A check for a one-buffer case: buckets as (start, stop, shard_size, numel_unpadded) and
    some parameters as name -> (bucket, start, owner)."""
    def check(res):
        b = res["buffers"][0]
        got = [(x["start"], x["stop"], x["shard_size"], x["numel_unpadded"]) for x in b["buckets"]]
        if got != buckets:
            return "buckets %s, want %s" % (got, buckets)
        for nm, want in params.items():
            p = res["params"][nm]
            if (p["bucket"], p["start"], p["owner"]) != want:
                return "%s at (bucket, start, owner) %s, want %s" % (
                    nm, (p["bucket"], p["start"], p["owner"]), want)
        return None
    return check


# ---- lwopt's JSON in the reference's form ------------------------------------------------------
def from_lwopt(doc):
    buffers, places = [], {}
    for bi, b in enumerate(doc["buffers"]):
        k = b["key"]
        buckets = []
        for ki, bk in enumerate(b["buckets"]):
            buckets.append({f: bk[f] for f in ("start", "stop", "shard_size", "numel_unpadded")})
            for p in bk["params"]:
                if p["name"] in places:
                    places[p["name"] + "  (listed twice)"] = places[p["name"]]
                places[p["name"]] = {"buffer": bi, "bucket": ki, "start": p["start"],
                                     "stop": p["stop"], "owner": p.get("owner")}
        buffers.append({"key": (k["param_dtype"], k["grad_dtype"], k["expert"], k["whole"]),
                        "algorithm": b["algorithm"], "dp": b["dp"], "numel": b["numel"],
                        "buckets": buckets})
    return {"buffers": buffers, "params": places}


def diff(case, mine, theirs):
    """A list of strings, one per difference found (buffers, buckets, then parameters)."""
    out = []
    mb, tb = mine["buffers"], theirs["buffers"]
    if len(mb) != len(tb):
        out.append("buffer count: reference %d, lwopt %d" % (len(mb), len(tb)))
    for i, (a, b) in enumerate(zip(mb, tb)):
        for f in ("key", "algorithm", "dp", "numel"):
            if a[f] != b[f]:
                out.append("buffer %d %s: reference %r, lwopt %r" % (i, f, a[f], b[f]))
        if len(a["buckets"]) != len(b["buckets"]):
            out.append("buffer %d bucket count: reference %d, lwopt %d"
                       % (i, len(a["buckets"]), len(b["buckets"])))
        for j, (x, y) in enumerate(zip(a["buckets"], b["buckets"])):
            if x != y:
                out.append("buffer %d bucket %d: reference %s, lwopt %s" % (i, j, x, y))
                break
    for s in case["specs"]:
        nm = s["name"]
        x, y = mine["params"].get(nm), theirs["params"].get(nm)
        if x != y:
            out.append("param %s: reference %s, lwopt %s" % (nm, x, y))
    for nm in theirs["params"]:
        if nm not in mine["params"]:
            out.append("param %s: only in lwopt's output" % nm)
    return out


def show_case(case):
    o = case["opts"]
    lines = ["  opts " + json.dumps(o, sort_keys=True)]
    parts = []
    for s in case["specs"]:
        flags = ("M" if s["optimizer"] == "muon" else "A") + ("E" if s.get("expert") else "") \
            + ("S" if s.get("shared_embedding") else "")
        parts.append("%s:%s:%s/%s:%s" % (s["name"], "x".join(map(str, s["shape"])), s["dtype"],
                                          s.get("grad_dtype", "-"), flags))
    for i in range(0, len(parts), 6):
        lines.append("  specs " + "  ".join(parts[i:i + 6]))
    return "\n".join(lines)


# ---- self-check of the reference against docs/layout.md's invariants ----------------------------
def self_check(case, res):
    o = case["opts"]
    names = [s["name"] for s in case["specs"]]
    assert sorted(res["params"]) == sorted(names), "reference lost a parameter"
    high = bool(o.get("high_busbw"))
    for bi, b in enumerate(res["buffers"]):
        alg, dp = b["algorithm"], b["dp"]
        prev = 0
        for k, bk in enumerate(b["buckets"]):
            assert bk["start"] == prev and bk["stop"] > bk["start"], (bi, k, bk)
            prev = bk["stop"]
            n = bk["stop"] - bk["start"]
            if alg in ("default", "legacy"):
                assert bk["shard_size"] == n
            else:
                assert bk["stop"] % ref.bucket_end_divisor(dp, high) == 0, (bi, k, bk)
                assert bk["shard_size"] * dp == n
            if alg in ref.ALIGNED:
                assert bk["shard_size"] % ref.shard_divisor(dp, high) == 0
        ps = sorted((p["start"], p["stop"], nm) for nm, p in res["params"].items()
                    if p["buffer"] == bi)
        for (s0, e0, _), (s1, _, nm) in zip(ps, ps[1:]):
            assert e0 <= s1, "overlap at %s" % nm
        for nm, p in res["params"].items():
            if p["buffer"] != bi:
                continue
            bk = b["buckets"][p["bucket"]]
            assert bk["start"] <= p["start"] and p["stop"] <= bk["stop"], nm
            if alg in ("distopt",) + ref.ALIGNED:
                assert p["start"] % 64 == 0, nm
            if alg in ref.ALIGNED:
                S = bk["shard_size"]
                k = (p["start"] - bk["start"]) // S
                assert p["owner"] == k and p["stop"] <= bk["start"] + (k + 1) * S, nm
            elif alg == "legacy":
                assert 0 <= p["owner"] < dp
            else:
                assert p["owner"] is None
        if alg in ("default", "legacy"):
            assert b["numel"] == sum(x["numel_unpadded"] for x in b["buckets"])


# ---- main ----------------------------------------------------------------------------------------
def run_lwopt(cases):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cases": cases}, f)
        path = f.name
    try:
        p = subprocess.run([os.path.join(ROOT, "bin", "lwopt"), "run",
                            os.path.join("tests", "reference_driver.lua"), path],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit("reference_compare: the driver failed (exit %d)" % p.returncode)
    lines = p.stdout.splitlines()
    if len(lines) != len(cases):
        raise SystemExit("reference_compare: %d cases, %d driver lines"
                         % (len(cases), len(lines)))
    return [json.loads(line) for line in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    failures = []  # (case or None, [differences])

    # divisors, against the text
    for dp, high, bed, sd in DIVISORS:
        got = (ref.bucket_end_divisor(dp, high), ref.shard_divisor(dp, high))
        if got != (bed, sd):
            failures.append((None, ["reference divisors dp=%d high_busbw=%s: %s, want %s"
                                    % (dp, high, got, (bed, sd))]))

    fixed = fixed_cases()
    rng = random.Random(args.seed)
    cases = [c for c, _ in fixed] + [gen_case(rng) for _ in range(args.cases)]
    div_cases = [{"divisor": {"dp": dp, "high_busbw": high}} for dp, high, _, _ in DIVISORS]
    results = run_lwopt(div_cases + cases)
    div_results, results = results[:len(div_cases)], results[len(div_cases):]

    for (dp, high, bed, sd), got in zip(DIVISORS, div_results):
        want = {"bucket_end_divisor": bed, "shard_divisor": sd}
        if got != want:
            failures.append((None, ["lwopt divisors dp=%d high_busbw=%s: %s, want %s"
                                    % (dp, high, got, want)]))

    for i, (case, got) in enumerate(zip(cases, results)):
        mine = ref.compute(case["specs"], case["opts"])
        self_check(case, mine)
        problems = []
        if i < len(fixed):
            err = fixed[i][1](mine)
            if err:
                problems.append("reference, fixed case %d: %s" % (i + 1, err))
        if "error" in got:
            problems.append("lwopt raised: %s" % got["error"])
        else:
            theirs = from_lwopt(got)
            if i < len(fixed):
                err = fixed[i][1](theirs)
                if err:
                    problems.append("lwopt, fixed case %d: %s" % (i + 1, err))
            problems += diff(case, mine, theirs)
        if problems:
            failures.append((case, problems))

    for case, problems in failures[:MAX_SHOWN]:
        print("MISMATCH")
        if case is not None:
            print(show_case(case))
        for line in problems[:6]:
            print("  " + line)
        if len(problems) > 6:
            print("  ... %d more differences" % (len(problems) - 6))
    n = len(cases) + len(DIVISORS)
    print("reference_compare: %d cases, %d mismatches" % (n, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
