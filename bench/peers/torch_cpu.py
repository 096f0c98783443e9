#!/usr/bin/env python3
"""torch_cpu.py: the PyTorch CPU peer of recipes/gpt_small.lua (small preset), for bench/peers.lua.

The same model, data, schedule and optimizers as the recipe, written here from lwopt's sources
(lua/lwopt/app/recipe*.lua, train.lua, data.lua, optim.lua, nn/*.lua,
src/core/optim/muon.c and device/cpu/{muon,adamw}.c), not from another trainer:
- model (lw.nn.GPT with the recipe's config): bytes (vocabulary 256), token + position
  embeddings (128 positions), 6 pre-LN blocks of 256 with 8 heads (x + attn(ln_1(x)), then
  + mlp(ln_2(.))), causal softmax attention scaled by 1/sqrt(head size), a 4 x 256 GELU (tanh)
  MLP, a final LayerNorm and the LM head tied to the token embedding; no biases anywhere,
  LayerNorms with a gain only (eps 1e-5): 4,820,224 parameters, as lwopt's 4.82M.
- initialisation: --init recipe (default) makes the recipe's own draws (its 31-bit LCG in
  doubles and Box-Muller, seed 1337, parameter by parameter in lw.arch.gpt's order: normal(0,
  0.02), the two proj matrices of each block 0.02 / sqrt(2 x 6), gains 1), so that both start
  from the same weights; it takes ~5 s of Python, so the timing runs use --init fast (torch's
  normal_ with the same standard deviations).
- data: the bytes of data/kjv.txt, the last 5% held out, and the recipe's batches exactly: row
  i of rank r at step s is the 128 bytes at offset splitmix64(splitmix64(splitmix64(seed) + s)
  + k) mod (n_train - 129), k = r x 8 + i (lw.data.offset), 8 rows per rank.
- schedule (train.schedule): lr 3e-3 x (s / 50 during the 50 warmup steps, then a cosine from
  1 to 0.1 over the remaining steps up to --steps), gradients clipped to global norm 1
  (clip / (norm + 1e-6), as optimizer.c), the mean of the ranks' gradients (DDP's average).
- AdamW (torch.optim.AdamW, foreach): betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D
  non-embedding matrices only (optim.lua's adamw_decays), none on embeddings and gains.
- Muon (--optimizer muon; written here from the algorithm, as muon.c does it): for the 24 block
  matrices (qkv, attn.proj, mlp.fc, mlp.proj; route.lua's default rules), AdamW as above for the
  embeddings and gains. Per matrix: decoupled weight decay w *= 1 - lr x 0.1, momentum m = 0.95 m
  + 0.05 g, Nesterov u = 0.05 g + 0.95 m, X = u / max(||u||_F, 1e-7), transposed so that rows <=
  cols, 5 Newton-Schulz steps X = a X + (b A + c A A) X with A = X X^T, and w -= lr x 0.2 x
  sqrt(max(rows, cols)) x X (the moonlight scale, with the AdamW lr). Coefficients: lwopt's
  default set, "quintic" (five different (a, b, c), one per step: lw_muon_defaults), or
  --ns-coeffs simple for (3.4445, -4.7750, 2.0315) five times; the cost is the same. The fused
  attn.qkv weight's Q, K and V row blocks are orthogonalised as three 256 x 256 matrices, each
  with its own scale, as the recipe's --split-qkv on (its default);
  --split-qkv off orthogonalises the fused weight whole.
  --muon-split: under DDP each rank updates only the matrices it owns (of each shape, every
  world-th), with momentum for those only, then the updated matrices are all-gathered (one
  dist.all_gather per shape); without it every rank updates every matrix.

Single process, or DDP over gloo with --nproc N: the script starts N copies of itself with
torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), since Debian's torchrun
1.13 fails under Python 3.11 (AttributeError in elastic's to_map, before any rank starts); a
copy started by torchrun elsewhere (WORLD_SIZE > 1) joins its group the same way. --threads T sets
torch's intra-op threads and OPENBLAS_NUM_THREADS (torch's GEMMs go to Debian's OpenBLAS).
Prints per step and at the end, on rank 0: tokens/s (the mean over steps after --skip of each
step's tokens / wall time, as bench/train_throughput.lua averages lwopt's log), forward /
backward / optimizer / Muon / gather ms, the loss at the last step (mean over ranks), and one
line `RESULT {json}` for the harness. --muon-step times the Muon step alone (random gradients,
no model pass; --steps repeats). Needs python3-torch (Debian: apt-get install -y python3-torch).
Usage: python3 bench/peers/torch_cpu.py [--nproc N] [--optimizer adamw|muon] [--muon-split]
       [--steps N] [--skip K] [--threads T] [--init recipe|fast] [--muon-step] [--quiet]
"""
import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time

L, C, NH, T, B, V = 6, 256, 8, 128, 8, 256  # the small preset on bytes
N_PARAMS = V * C + T * C + L * (12 * C * C + 2 * C) + C  # 4,820,224
LR, WARMUP, MIN_RATIO, WD, CLIP, SEED = 3e-3, 50, 0.1, 0.1, 1.0, 1337
MOMENTUM, NS_EPS = 0.95, 1e-7
COEFFS = {
    # lw_muon_defaults' LW_NS_QUINTIC: step k takes triple k
    "quintic": [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
                (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)],
    "simple": [(3.4445, -4.7750, 2.0315)] * 5,
}
M64 = (1 << 64) - 1


def schedule(s, steps, warmup=WARMUP, min_ratio=MIN_RATIO):
    """train.schedule: the lr multiplier at step s (1-based)."""
    if warmup > 0 and s <= warmup:
        return s / warmup
    span = max(1, steps - warmup - 1)
    progress = max(0.0, min(1.0, (s - warmup - 1) / span))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def splitmix(z):
    """lw.data's mix: one splitmix64 output for z, in uint64 arithmetic."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def offset(n_train, seed, step, k):
    """lw.data.offset: where sequence k of step `step` starts in the training split."""
    z = splitmix((splitmix((splitmix(seed) + step) & M64) + k) & M64)
    return z % (n_train - T - 1)


def recipe_init(shapes):
    """The recipe's init_params, draw for draw: a 31-bit LCG evaluated in doubles (as LuaJIT
    does, so the product's rounding is part of the sequence), Box-Muller, one parameter after
    another in lw.arch.gpt's order, row-major. shapes: [(name, shape)]; returns {name: [floats]}
    (gains: 1, no draws)."""
    state, m = float(SEED), 2147483648.0
    log, sqrt, cos, two_pi = math.log, math.sqrt, math.cos, 2 * math.pi
    out = {}
    for name, shape in shapes:
        n = math.prod(shape)
        if len(shape) == 1:
            out[name] = [1.0] * n
            continue
        std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
        values = [0.0] * n
        for i in range(n):
            state = (state * 1103515245.0 + 12345.0) % m
            u1 = (state + 0.5) / m
            state = (state * 1103515245.0 + 12345.0) % m
            u2 = (state + 0.5) / m
            values[i] = std * (sqrt(-2 * log(u1)) * cos(two_pi * u2))
        out[name] = values
    return out


def make_model(torch):
    """The GPT class (defined here so that --help works without torch)."""
    nn, F = torch.nn, torch.nn.functional

    class Gain(nn.Module):  # LayerNorm with a gain and no bias (torch 1.13's has both or none)
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return F.layer_norm(x, (C,), self.weight, None, 1e-5)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C, bias=False)
            self.proj = nn.Linear(C, C, bias=False)
            # a plain attribute, not a buffer: DDP would broadcast it, and gloo has no bool
            self.mask = torch.ones(T, T, dtype=torch.bool).tril()

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)  # rows of qkv: q, then k, then v
            q, k, v = (z.view(b, t, NH, c // NH).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // NH))
            s = s.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(C, 4 * C, bias=False)
            self.proj = nn.Linear(4 * C, C, bias=False)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = Gain(), Attention(), Gain(), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = Gain()

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe.weight[: idx.size(1)]
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied LM head
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    return GPT


def lwopt_names(model):
    """(lwopt name, parameter) in lw.arch.gpt's order: wte, wpe, per block ln_1, attn.qkv,
    attn.proj, ln_2, mlp.fc, mlp.proj, then ln_f. The torch names are the same here."""
    params = dict(model.named_parameters())
    order = ["wte.weight", "wpe.weight"]
    for i in range(L):
        order += [f"h.{i}.{n}.weight" for n in ("ln_1", "attn.qkv", "attn.proj", "ln_2",
                                                "mlp.fc", "mlp.proj")]
    order.append("ln_f.weight")
    assert sorted(order) == sorted(params), "the model's parameters are not lwopt's"
    return [(n, params[n]) for n in order]


def initialise(torch, model, how):
    named = lwopt_names(model)
    if how == "recipe":
        values = recipe_init([(n, tuple(p.shape)) for n, p in named])
        with torch.no_grad():
            for n, p in named:
                p.copy_(torch.tensor(values[n], dtype=torch.float32).view(p.shape))
        return
    with torch.no_grad():
        for n, p in named:
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02)


def is_muon(name, p):
    """route.lua's default rules for this model: 2-D, not an embedding (wte is also the head)."""
    return p.dim() == 2 and name not in ("wte.weight", "wpe.weight")


class Muon:
    """Muon over a list of (name, matrix), as lwopt's muon.c on the CPU (fp32). split: (rank,
    world, dist): each rank steps the matrices it owns and all-gathers them; None: all."""

    def __init__(self, torch, named, coeffs, split=None, split_qkv=True):
        self.torch, self.coeffs, self.split = torch, coeffs, split
        # split_qkv: the fused attention weights' Q, K and V row blocks orthogonalised as three
        # matrices, each with its own shape's scale (lwopt's default, Megatron's)
        self.qkv = {p for n, p in named if split_qkv and n.endswith("attn.qkv.weight")}
        self.groups = {}  # shape -> [params], in model order
        for _, p in named:
            self.groups.setdefault(tuple(p.shape), []).append(p)
        rank, world = (split[0], split[1]) if split else (0, 1)
        self.owned = [p for ps in self.groups.values() for p in ps[rank::world]]
        self.momentum = {p: torch.zeros_like(p) for p in self.owned}
        self.seconds_gather = 0.0

    def orthogonalize(self, u):
        torch = self.torch
        x = u / max(u.norm().item(), NS_EPS)
        wide = x.size(0) <= x.size(1)
        if not wide:
            x = x.t()
        for a, b, c in self.coeffs:
            s = x @ x.t()
            x = torch.addmm(x, torch.addmm(s, s, s, beta=b, alpha=c), x, beta=a)
        return x if wide else x.t()

    def step(self, lr, grad_scale):
        with self.torch.no_grad():
            for p in self.owned:
                m, g = self.momentum[p], p.grad
                if grad_scale != 1.0:
                    g = g * grad_scale
                p.mul_(1.0 - lr * WD)
                m.mul_(MOMENTUM).add_(g, alpha=1.0 - MOMENTUM)
                u = g.mul(1.0 - MOMENTUM).add_(m, alpha=MOMENTUM)
                if p in self.qkv:
                    rows = p.shape[0] // 3
                    for b in range(3):
                        block = slice(b * rows, (b + 1) * rows)
                        p[block].add_(self.orthogonalize(u[block]),
                                      alpha=-lr * 0.2 * math.sqrt(max(rows, p.shape[1])))
                else:
                    p.add_(self.orthogonalize(u), alpha=-lr * 0.2 * math.sqrt(max(p.shape)))
            if self.split:
                t0 = time.perf_counter()
                self.gather()
                self.seconds_gather = time.perf_counter() - t0

    def gather(self):
        """Every rank's updated matrices to every rank: per shape one all_gather of the owned
        matrices flattened together (padded to the largest share when the count is uneven)."""
        torch = self.torch
        rank, world, dist = self.split
        for ps in self.groups.values():
            numel = ps[0].numel()
            per = (len(ps) + world - 1) // world
            mine = ps[rank::world]
            send = torch.zeros(per * numel)
            for j, p in enumerate(mine):
                send[j * numel:(j + 1) * numel].copy_(p.view(-1))
            recv = [torch.empty_like(send) for _ in range(world)]
            dist.all_gather(recv, send)
            for r in range(world):
                for j, p in enumerate(ps[r::world]):
                    if r != rank:
                        p.view(-1).copy_(recv[r][j * numel:(j + 1) * numel])


def adamw(torch, named, lr, embeddings=("wte.weight", "wpe.weight")):
    """AdamW with weight decay on the 2-D matrices that are not embeddings (the names in
    `embeddings`) only (optim.lua)."""
    decay = [p for n, p in named if p.dim() == 2 and n not in embeddings]
    rest = [p for n, p in named if not (p.dim() == 2 and n not in embeddings)]
    groups = [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)


def load_data(torch, path):
    with open(path, "rb") as f:
        raw = f.read()
    n = len(raw)
    n_train = n - math.floor(n * 0.05)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8), n_train


def batch(torch, data, n_train, step, rank):
    """This rank's 8 rows of step `step` (1-based), as lw.data's train_batch at accum 1."""
    rows = [data[o:o + T + 1] for o in (offset(n_train, SEED, step, rank * B + i)
                                         for i in range(B))]
    xy = torch.stack(rows).long()
    return xy[:, :-1].contiguous(), xy[:, 1:].contiguous()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=1,
                   help="ranks: N processes in one DDP group over gloo")
    p.add_argument("--optimizer", choices=("adamw", "muon"), default="muon")
    p.add_argument("--muon-split", action="store_true",
                   help="under DDP, each rank steps its share of the Muon matrices, then "
                        "all_gather (default: every rank steps all)")
    p.add_argument("--ns-coeffs", choices=sorted(COEFFS), default="quintic")
    p.add_argument("--split-qkv", choices=("on", "off"), default="on",
                   help="orthogonalise attn.qkv's Q, K and V blocks apart, as the recipe's "
                        "--split-qkv (default on)")
    p.add_argument("--steps", type=int, default=30, help="steps (the schedule spans them)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the figures")
    p.add_argument("--threads", type=int, default=1, help="torch and OpenBLAS threads per rank")
    p.add_argument("--init", choices=("recipe", "fast"), default="recipe")
    p.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "data", "kjv.txt"))
    p.add_argument("--muon-step", action="store_true",
                   help="time the Muon step alone on random gradients, --steps times")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    args = p.parse_args(argv)
    if args.steps <= args.skip or args.skip < 0 or args.threads < 1 or args.nproc < 1:
        p.error("need 0 <= --skip < --steps, --threads >= 1 and --nproc >= 1")
    return args


def launch(argv, nproc, script=None):
    """Starts nproc copies of `script` (default: this one) as the ranks of one gloo group on this
    machine (what torchrun --standalone would do) and waits for them; the worst exit status."""
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(script or __file__)]
                                      + argv, env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


def launch_ranks(argv, nproc, script=None):
    """launch() with argv less its --nproc: the ranks get the same flags but that one."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return launch(rest, nproc, script)


def finish(status):
    """Ends the process with status. A rank leaves without Python's finalisation: in torch 1.13
    the gloo process group's destructor, run from the DDP reducer's at interpreter exit, joins a
    worker thread that waits for the GIL the exiting thread holds, and the rank hangs (seen here,
    1 run in ~20). The caller has finished every collective (a barrier at the end of the run)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def start_torch(threads, who):
    """Imports torch with `threads` intra-op and OpenBLAS threads and, in a rank that launch()
    started, joins its gloo group: (torch, torch.distributed, rank, world), or None (said on
    stderr, `who` naming the script) when python3 cannot import torch."""
    # Before torch loads: OpenBLAS reads its thread count once, when the library loads.
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    # torch's elementwise ops run on OpenMP threads that, by default, spin for a while after
    # each parallel region; on 2 cores they then compete with OpenBLAS's own (pthread) threads
    # in the GEMM that follows. bench/peers.lua sets OMP_WAIT_POLICY=passive (threads sleep at
    # once); a run without the harness gets the same unless the caller chose otherwise.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import torch
    except ImportError:
        print(f"{who}: python3 cannot import torch; install Debian's: "
              "apt-get install -y python3-torch", file=sys.stderr)
        return None
    import torch.distributed as dist
    torch.set_num_threads(threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    if world > 1:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    return torch, dist, rank, world


def main(argv):
    args = parse_args(argv)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch_ranks(argv, args.nproc)
    started = start_torch(args.threads, "torch_cpu.py")
    if started is None:
        return 77
    torch, dist, rank, world = started
    if world == 1 and args.muon_split:
        print("torch_cpu.py: --muon-split needs several ranks (torchrun --nproc_per_node N)",
              file=sys.stderr)
        return 2
    say = print if rank == 0 else (lambda *a, **k: None)

    torch.manual_seed(SEED + rank)
    model = make_model(torch)()
    # under DDP rank 0's weights are broadcast to the others when DDP wraps the model
    initialise(torch, model, args.init if rank == 0 else "fast")
    named = lwopt_names(model)
    assert sum(p.numel() for _, p in named) == N_PARAMS
    run = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        run = DistributedDataParallel(model)
    use_muon = args.optimizer == "muon"
    muon_named = [(n, p) for n, p in named if use_muon and is_muon(n, p)]
    muon = Muon(torch, muon_named, COEFFS[args.ns_coeffs],
                (rank, world, dist) if args.muon_split else None,
                args.split_qkv == "on") if use_muon else None
    adam = adamw(torch, [(n, p) for n, p in named if not (use_muon and is_muon(n, p))], LR)
    what = ("adamw" if not use_muon else
            "muon (%s, %s) + adamw" % (args.ns_coeffs, "split across ranks + all_gather"
                                      if args.muon_split else "every rank all matrices"))
    say(f"torch {torch.__version__}: GPT {L} x {C}, {NH} heads, {N_PARAMS} parameters; {what}; "
        f"{world} process{'es' if world > 1 else ''} x {args.threads} thread"
        f"{'s' if args.threads > 1 else ''}{', DDP over gloo' if world > 1 else ''}; "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; init {args.init}", flush=True)

    if args.muon_step:
        return muon_step_alone(torch, dist, args, muon, named, rank, world, say)

    data, n_train = load_data(torch, args.data)
    params = [p for _, p in named]
    tokens_per_step = B * T * world
    recs = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = batch(torch, data, n_train, step, rank)
        a = time.perf_counter()
        loss = run(x, y)
        m = time.perf_counter()
        loss.backward()  # under DDP: the gradients' all-reduce, overlapped, and its wait
        o0 = time.perf_counter()
        scale = schedule(step, args.steps)
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        grad_scale = 1.0  # clip_grad_norm_ has already multiplied the gradients
        for g in adam.param_groups:
            g["lr"] = LR * scale
        adam.step()
        mu0 = time.perf_counter()
        if muon:
            muon.step(LR * scale, grad_scale)
        mu1 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        o1 = time.perf_counter()
        mean_loss = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean_loss)
            mean_loss /= world
        wall = time.perf_counter() - t0
        rec = {"step": step, "loss": mean_loss.item(), "lr": LR * scale, "grad_norm": norm,
               "tokens_per_s": tokens_per_step / wall,
               "time_ms": {"fwd": 1e3 * (m - a), "bwd": 1e3 * (o0 - m), "opt": 1e3 * (o1 - o0),
                           "muon": 1e3 * (mu1 - mu0),
                           "gather": 1e3 * (muon.seconds_gather if muon else 0.0)}}
        recs.append(rec)
        if not args.quiet:
            say(f"step {step:4d}/{args.steps}  loss {rec['loss']:.4f}  lr {rec['lr']:.2e}  "
                f"{rec['tokens_per_s']:7.0f} tok/s", flush=True)
    timed = recs[args.skip:]
    mean = {k: statistics.fmean(r["time_ms"][k] for r in timed) for k in timed[0]["time_ms"]}
    result = {"tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in timed),
              "time_ms": mean, "loss": recs[-1]["loss"], "steps": args.steps,
              "loss_last10": statistics.fmean(r["loss"] for r in recs[-10:]),
              "world": world, "threads": args.threads, "torch": torch.__version__}
    say(f"tokens/s {result['tokens_per_s']:.0f} (mean over steps {args.skip + 1}-{args.steps}); "
        f"fwd {mean['fwd']:.1f} ms, bwd {mean['bwd']:.1f} ms, opt {mean['opt']:.1f} ms (muon "
        f"{mean['muon']:.1f}, of which all_gather {mean['gather']:.1f}); loss at step "
        f"{args.steps} {result['loss']:.4f}")
    say("RESULT " + json.dumps(result), flush=True)
    if world > 1:
        dist.barrier()  # then finish(): no destroy_process_group, see there
    return 0


def muon_step_alone(torch, dist, args, muon, named, rank, world, say):
    """The Muon step over the 24 matrices (this rank's share and the all_gather with
    --muon-split), random gradients, --steps repeats after one untimed; ms per step, the slowest
    rank's."""
    if muon is None:
        print("torch_cpu.py: --muon-step needs --optimizer muon", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(SEED)
    for name, p in named:
        if is_muon(name, p):
            p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    times, gathers = [], []
    for i in range(args.steps + 1):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        muon.step(LR, 1.0)
        dt = torch.tensor([time.perf_counter() - t0, muon.seconds_gather])
        if world > 1:
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if i > 0:
            times.append(1e3 * dt[0].item())
            gathers.append(1e3 * dt[1].item())
    result = {"muon_step_ms_best": min(times), "muon_step_ms_median": statistics.median(times),
              "gather_ms_median": statistics.median(gathers), "world": world,
              "threads": args.threads, "torch": torch.__version__}
    say(f"Muon step alone: best {result['muon_step_ms_best']:.1f} ms, median "
        f"{result['muon_step_ms_median']:.1f} ms (all_gather {result['gather_ms_median']:.1f}) "
        f"over {args.steps} steps")
    say("RESULT " + json.dumps(result), flush=True)
    if world > 1:
        dist.barrier()  # then finish(): no destroy_process_group, see there
    return 0


if __name__ == "__main__":
    finish(main(sys.argv[1:]))
