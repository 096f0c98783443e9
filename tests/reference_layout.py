"""reference_layout.py: an independent implementation of lwopt's parameter layouts, written from
docs/algorithms.md sections 2-4 and the "Readings of the algorithms" in docs/layout.md only (not
from lwopt's sources), for tests/reference_compare.py. Standard library only; integer arithmetic
except the two float expressions the text writes (lpt/cost chunk closing, cost cap).

compute(specs, opts) -> {"buffers": [...], "params": {name: placement}} where
  buffer    = {"key": (param_dtype, grad_dtype, expert, muon), "algorithm", "dp", "numel",
               "buckets": [{"start", "stop", "shard_size", "numel_unpadded"}]}
  placement = {"buffer", "bucket", "start", "stop", "owner"}  (0-based; owner None when the
               buffer is element-wise or unsharded)
specs: dicts {name, shape, dtype, grad_dtype?, expert?, shared_embedding?, optimizer};
opts: {dp, expert_dp?, bucket_size? (None = no limit), algorithm?, adamw_layout?, high_busbw?}.
"""

import math

ALGORITHMS = ("default", "distopt", "legacy", "size_matching", "lpt", "cost")
ALIGNED = ("size_matching", "lpt", "cost")


# ---- section 3: padding -----------------------------------------------------------------------
def pad(v, d):
    """ceil(v / d) * d in integers."""
    return -(-v // d) * d


def pad64(v):
    return pad(v, 64)


def lcm(a, b):
    return a * b // math.gcd(a, b)


def bucket_end_divisor(dp, high_busbw=False):
    d = lcm(dp, 128)
    if high_busbw:
        d = lcm(d, 65536)
    return d


def shard_divisor(dp, high_busbw=False):
    return lcm(64, bucket_end_divisor(dp, high_busbw) // dp)


def numel_of(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def cost_of(shape):
    """max(m,n) * min(m,n)^2 for a 2-D (m, n) parameter, numel for any other."""
    if len(shape) == 2:
        m, n = shape
        return max(m, n) * min(m, n) ** 2
    return numel_of(shape)


class P:
    """One parameter inside a buffer."""

    __slots__ = ("name", "shape", "numel", "shared", "cost")

    def __init__(self, spec):
        self.name = spec["name"]
        self.shape = tuple(spec["shape"])
        self.numel = numel_of(self.shape)
        self.shared = bool(spec.get("shared_embedding", False))
        self.cost = cost_of(self.shape)


class Result:
    """Buckets and placements of one buffer, in buffer-relative offsets."""

    def __init__(self):
        self.buckets = []  # dicts start, stop, shard_size, numel_unpadded
        self.place = {}  # name -> (bucket index, start, stop, owner)

    def add_bucket(self, start, stop, shard_size, members):
        """members: list of (P, start, owner)."""
        b = len(self.buckets)
        for p, s, owner in members:
            assert p.name not in self.place
            self.place[p.name] = (b, s, s + p.numel, owner)
        self.buckets.append({"start": start, "stop": stop, "shard_size": shard_size,
                             "numel_unpadded": sum(p.numel for p, _, _ in members)})

    @property
    def end(self):
        return self.buckets[-1]["stop"] if self.buckets else 0


# ---- section 3: default, legacy, distopt --------------------------------------------------------
def layout_default(params, dp, bucket_size):
    """Unpadded, backprop order; a bucket closes once it holds >= bucket_size elements. No
    shared-embedding isolation (reading 5); shard_size = the whole bucket."""
    r = Result()
    start = cursor = 0
    members = []
    for p in reversed(params):
        members.append((p, cursor, None))
        cursor += p.numel
        if bucket_size is not None and cursor - start >= bucket_size:
            r.add_bucket(start, cursor, cursor - start, members)
            start, members = cursor, []
    if members:
        r.add_bucket(start, cursor, cursor - start, members)
    return r


def pingpong_owners(params, dp):
    """Definition order, stable-sorted by numel ascending, dealt 0..dp-1, dp-1..0, 0.. ."""
    order = sorted(range(len(params)), key=lambda i: params[i].numel)
    owners = {}
    for k, i in enumerate(order):
        j = k % (2 * dp)
        owners[params[i].name] = j if j < dp else 2 * dp - 1 - j
    return owners


def layout_legacy(params, dp, bucket_size):
    """The default layout's offsets with ping-pong owners (reading 6)."""
    r = layout_default(params, dp, bucket_size)
    owners = pingpong_owners(params, dp)
    r.place = {n: (b, s, e, owners[n]) for n, (b, s, e, _) in r.place.items()}
    return r


def layout_distopt(params, dp, bucket_size, high_busbw):
    """Element-wise ZeRO-1: 64-aligned starts, bucket ends padded to bucket_end_divisor, shared
    embeddings alone in their bucket (reading 4)."""
    bed = bucket_end_divisor(dp, high_busbw)
    r = Result()
    state = {"start": 0, "cursor": 0, "members": []}

    def close(stop):
        start = state["start"]
        r.add_bucket(start, stop, (stop - start) // dp, state["members"])
        state.update(start=stop, cursor=stop, members=[])

    for p in reversed(params):
        if p.shared:
            if state["members"]:
                close(pad(pad64(state["cursor"]), bed))
            s = state["cursor"]
            state["members"].append((p, s, None))
            close(pad(s + p.numel, bed))
            continue
        s = pad64(state["cursor"])
        e = s + p.numel
        state["members"].append((p, s, None))
        state["cursor"] = e
        if bucket_size is not None and e - state["start"] >= bucket_size:
            close(pad(e, bed))
    if state["members"]:
        close(pad(state["cursor"], bed))
    return r


# ---- section 4: shard-aligned layouts -----------------------------------------------------------
def emit_aligned(r, dp, S, entries):
    """entries: (P, shard, offset inside the shard); the bucket follows the previous one."""
    start = r.end
    members = []
    for p, k, off in entries:
        assert 0 <= k < dp and off % 64 == 0 and off + p.numel <= S, (p.name, k, off, S)
        members.append((p, start + k * S + off, k))
    r.add_bucket(start, start + dp * S, S, members)


def emit_shared(r, dp, p, sd):
    """A shared embedding alone in its bucket, shard 0, S = pad(numel, shard_divisor)."""
    emit_aligned(r, dp, pad(p.numel, sd), [(p, 0, 0)])


def segments(params):
    """Backprop order split at shared embeddings: yields ("pool", [P...]) and ("shared", P)."""
    pool = []
    for p in reversed(params):
        if p.shared:
            if pool:
                yield "pool", pool
            pool = []
            yield "shared", p
        else:
            pool.append(p)
    if pool:
        yield "pool", pool


def layout_size_matching(params, dp, bucket_size, sd):
    r = Result()
    for kind, item in segments(params):
        if kind == "shared":
            emit_shared(r, dp, item, sd)
            continue
        pool = list(item)  # unassigned, in pool (backprop) order
        entries, cursor = [], 0
        while pool:
            seed = pool.pop(0)
            n = seed.numel
            base = pad64(cursor)
            entries.append((seed, 0, base))
            for k in range(1, dp):
                partner = next((i for i, q in enumerate(pool) if q.numel == n), None)
                if partner is not None:
                    entries.append((pool.pop(partner), k, base))
                    continue
                fill = 0
                while pool and pad64(fill) + pool[0].numel <= n:
                    q = pool.pop(0)
                    entries.append((q, k, base + pad64(fill)))
                    fill = pad64(fill) + q.numel
            # every shard is padded to n: all of them advance to the same cursor
            cursor = base + n
            if bucket_size is not None and dp * pad(cursor, sd) >= bucket_size:
                emit_aligned(r, dp, pad(cursor, sd), entries)
                entries, cursor = [], 0
        if entries:
            emit_aligned(r, dp, pad(cursor, sd), entries)
    return r


def chunks_lpt(params, dp, bucket_size, sd):
    """lpt/cost chunking (reading 8): yields ("chunk", [P...]) and ("shared", P)."""
    cur, fills, cn, cmax = [], [0] * dp, 0, 0
    for p in reversed(params):
        if p.shared:
            if cur:
                yield "chunk", cur
            yield "shared", p
            cur, fills, cn, cmax = [], [0] * dp, 0, 0
            continue
        if cur and bucket_size is not None:
            if cn >= max(bucket_size, math.floor(dp * cmax * 0.9)):
                fits = pad64(min(fills)) + p.numel <= pad(max(fills), sd)
                if not fits:
                    yield "chunk", cur
                    cur, fills, cn, cmax = [], [0] * dp, 0, 0
        k = min(range(dp), key=lambda i: (fills[i], i))
        fills[k] = pad64(fills[k]) + p.numel
        cur.append(p)
        cn += p.numel
        cmax = max(cmax, p.numel)
    if cur:
        yield "chunk", cur


def layout_lpt(params, dp, bucket_size, sd):
    r = Result()
    for kind, item in chunks_lpt(params, dp, bucket_size, sd):
        if kind == "shared":
            emit_shared(r, dp, item, sd)
            continue
        fills, entries = [0] * dp, []
        for p in sorted(item, key=lambda q: -q.numel):  # stable
            k = min(range(dp), key=lambda i: (fills[i], i))
            entries.append((p, k, pad64(fills[k])))
            fills[k] = pad64(fills[k]) + p.numel
        emit_aligned(r, dp, pad(max(fills), sd), entries)
    return r


def layout_cost(params, dp, bucket_size, sd):
    r = Result()
    loads = [0] * dp  # persist across the buckets of this buffer
    for kind, item in chunks_lpt(params, dp, bucket_size, sd):
        if kind == "shared":
            emit_shared(r, dp, item, sd)  # adds no load (reading 9)
            continue
        chunk_numel = sum(p.numel for p in item)
        cap = 1.3 * chunk_numel / dp
        fills, entries = [0] * dp, []
        for p in sorted(item, key=lambda q: -q.cost):  # stable
            ok = [i for i in range(dp) if pad64(fills[i]) + p.numel <= cap]
            if ok:
                k = min(ok, key=lambda i: (loads[i], i))
            else:
                k = min(range(dp), key=lambda i: (fills[i], i))
            entries.append((p, k, pad64(fills[k])))
            fills[k] = pad64(fills[k]) + p.numel
            loads[k] += p.cost
        emit_aligned(r, dp, pad(max(fills), sd), entries)
    return r


def layout_buffer(algorithm, params, dp, bucket_size, high_busbw):
    sd = shard_divisor(dp, high_busbw)
    if algorithm == "default":
        return layout_default(params, dp, bucket_size)
    if algorithm == "legacy":
        return layout_legacy(params, dp, bucket_size)
    if algorithm == "distopt":
        return layout_distopt(params, dp, bucket_size, high_busbw)
    if algorithm == "size_matching":
        return layout_size_matching(params, dp, bucket_size, sd)
    if algorithm == "lpt":
        return layout_lpt(params, dp, bucket_size, sd)
    if algorithm == "cost":
        return layout_cost(params, dp, bucket_size, sd)
    raise ValueError("unknown algorithm %r" % (algorithm,))


# ---- section 2: buffers --------------------------------------------------------------------------
def adamw_algorithm(algorithm, adamw_layout):
    if adamw_layout is None:
        return algorithm if algorithm in ("default", "legacy") else "distopt"
    if adamw_layout == "aligned":
        return algorithm
    if adamw_layout in ("distopt", "default", "legacy"):
        return adamw_layout
    raise ValueError("unknown adamw_layout %r" % (adamw_layout,))


def compute(specs, opts):
    dp = opts["dp"]
    expert_dp = opts.get("expert_dp")
    if expert_dp is None:
        expert_dp = dp
    bucket_size = opts.get("bucket_size")
    algorithm = opts.get("algorithm") or "cost"
    high = bool(opts.get("high_busbw", False))
    groups = {}  # key -> [P], insertion (first-seen) order
    for s in specs:
        key = (s["dtype"], s.get("grad_dtype") or "f32", bool(s.get("expert", False)),
               s["optimizer"] == "muon")
        groups.setdefault(key, []).append(P(s))
    buffers, places = [], {}
    for bi, (key, params) in enumerate(groups.items()):
        bdp = expert_dp if key[2] else dp
        alg = algorithm if key[3] else adamw_algorithm(algorithm, opts.get("adamw_layout"))
        r = layout_buffer(alg, params, bdp, bucket_size, high)
        buffers.append({"key": key, "algorithm": alg, "dp": bdp, "numel": r.end,
                        "buckets": r.buckets})
        for name, (b, s, e, owner) in r.place.items():
            places[name] = {"buffer": bi, "bucket": b, "start": s, "stop": e, "owner": owner}
    return {"buffers": buffers, "params": places}
