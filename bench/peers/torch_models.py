#!/usr/bin/env python3
"""torch_models.py: PyTorch CPU peers of recipes/gpt_small.lua --arch llama and --arch nanochat
at the small preset, trained with AdamW, for bench/models.lua.

Written from the published architectures, not from lwopt's code:
- llama: Hugging Face's LlamaForCausalLM at lwopt's `--arch llama` config (6 layers of 256, 8
  heads, --n-kv-head KV heads, default 8): token embedding without positions; per layer
  x + o_proj(attn(input_layernorm(x))), then + down_proj(silu(gate_proj(.)) * up_proj(.)) of
  post_attention_layernorm; RMSNorm with a gain (eps 1e-5, the mean square in fp32 as HF does);
  rotary embeddings on Q and K paired by halves (HF's rotate_half) with base 500000 (LLaMA 3's);
  grouped-query attention (each KV head serves n_head / n_kv_head consecutive query heads, HF's
  repeat_kv); the MLP's hidden width 64 ceil(8 C / 3 / 64) = 704; no biases; an untied lm_head;
  init HF's: normal(0, 0.02) for every Linear and embedding, gains 1.
- nanochat: nanochat/gpt.py's GPT (Andrej Karpathy's nanochat) less what lwopt's model leaves
  out (the smear of the previous token, the mid-layer backout, and Q and K times 1.2 after the
  QK norm: lwopt's attention scales by 1 / sqrt(hd) only): the token embedding followed
  by a parameter-free RMSNorm (eps: fp32's machine epsilon, F.rms_norm's default), whose output
  x0 is mixed back in before each layer, x = resid_lambdas[i] x + x0_lambdas[i] x0; per layer
  x + c_proj(attn(norm(x))), then + mlp(norm(.)) with a ReLU^2 MLP of 4 C; rotary embeddings by
  halves turning nanochat's way (y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos), base 100000, then
  QK norm; GQA; on layers i with i mod 2 = (L - 1) mod 2 a value embedding
  [V, n_kv_head hd] added to V through a per-KV-head gate 3 sigmoid(W_g x[..., :12]); sliding
  windows by the pattern SSSL (short: 128 ceil(T / 4 / 128), the last layer full: at T = 128
  every window is the whole sequence); a final norm, an untied lm_head and logits capped by
  15 tanh(logits / 15); no biases; nanochat's init_weights.
Both at vocabulary 256 (bytes), sequence 128, batch 8 per rank; the parameter count is asserted
against its formula here, and bench/models.lua asserts it equal to lwopt's.

Training as torch_cpu.py's AdamW runs (its data, batches, schedule, launcher and threads,
imported from it): the recipe's batches of data/kjv.txt, lr 3e-3 with 50 warmup steps and a
cosine to 0.1, gradients clipped to norm 1, torch.optim.AdamW (foreach) with betas (0.9, 0.95),
eps 1e-8 and weight decay 0.1 on the 2-D matrices that are not embeddings (the token embedding
and the value embeddings take none, nor do gains and scalars): the recipe's --optimizer adamw.
--nproc N: DDP over gloo, ranks started as torch_cpu.py starts them.
Prints, on rank 0, tokens/s (the mean over steps after --skip), forward / backward / optimizer
ms, the loss (of step 1, the last step and the mean of the last 10), every rank's peak RSS
(getrusage's ru_maxrss) and one line `RESULT {json}`. --save-init FILE writes the initial
weights in lwopt's names and layouts (safetensors) for the recipe's --init-from: the two then
start from the same weights, and step 1's loss is the same forward on both sides.
Usage: python3 bench/peers/torch_models.py --arch llama|nanochat [--n-kv-head K] [--nproc N]
       [--threads T] [--steps N] [--skip K] [--save-init FILE] [--quiet]
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ left in the checkout by the import below
import torch_cpu as base  # noqa: E402  (the peer whose data, schedule and launcher this reuses)

L, C, NH, T, B, V = base.L, base.C, base.NH, base.T, base.B, base.V
HD = C // NH
LLAMA_HIDDEN = 64 * math.ceil(8 * C / 3 / 64)  # 704
LLAMA_ROPE_BASE, LLAMA_EPS = 500000.0, 1e-5
NC_ROPE_BASE, NC_SOFTCAP = 100000.0, 15.0
NC_GATE_CHANNELS, NC_GATE_SCALE = 12, 3.0
NC_PATTERN = "SSSL"


def nc_has_ve(i):
    """nanochat's has_ve: every other layer, the last one included."""
    return i % 2 == (L - 1) % 2


def nc_windows():
    """nanochat's window per layer (keys at most `w` positions back), the pattern tiled, the
    last layer full."""
    short = 128 * math.ceil(T / 4 / 128)
    w = [short if NC_PATTERN[i % len(NC_PATTERN)] == "S" else T for i in range(L)]
    w[-1] = T
    return w


def n_params(arch, n_kv):
    """The parameter count from the architecture, independent of the modules built below."""
    kv = n_kv * HD
    attn = 2 * C * C + 2 * C * kv  # q, o; k, v
    if arch == "llama":
        return V * C + L * (attn + 3 * C * LLAMA_HIDDEN + 2 * C) + C + V * C
    n_ve = sum(1 for i in range(L) if nc_has_ve(i))
    return 2 * V * C + L * (attn + 8 * C * C) + n_ve * (V * kv + n_kv * NC_GATE_CHANNELS) + 2 * L


def make_models(torch, n_kv):
    """{arch: module class} (defined here so that --help works without torch)."""
    nn, F = torch.nn, torch.nn.functional
    rep = NH // n_kv

    def rms(x, eps, weight=None):
        # torch 1.13 has no F.rms_norm
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y if weight is None else y * weight

    def attend(q, k, v, mask, scale):
        """q [b, NH, t, hd], k and v [b, n_kv, t, hd]: softmax attention (torch 1.13 has no
        scaled_dot_product_attention); KV head j serves query heads j rep .. j rep + rep - 1."""
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-2, -1)) * scale
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def angles(base_theta):
        inv = 1.0 / (base_theta ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        return torch.outer(torch.arange(T, dtype=torch.float32), inv)  # [T, hd / 2]

    def heads(z, n, b, t):
        return z.view(b, t, n, HD).transpose(1, 2)  # [b, n, t, hd]

    class RMSNorm(nn.Module):  # HF's LlamaRMSNorm: x / sqrt(mean(x^2) + eps), times a gain
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return rms(x, LLAMA_EPS, self.weight)

    class LlamaLayer(nn.Module):
        def __init__(self, cos, sin, mask):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.q_proj = nn.Linear(C, NH * HD, bias=False)
            self.k_proj = nn.Linear(C, n_kv * HD, bias=False)
            self.v_proj = nn.Linear(C, n_kv * HD, bias=False)
            self.o_proj = nn.Linear(NH * HD, C, bias=False)
            self.gate_proj = nn.Linear(C, LLAMA_HIDDEN, bias=False)
            self.up_proj = nn.Linear(C, LLAMA_HIDDEN, bias=False)
            self.down_proj = nn.Linear(LLAMA_HIDDEN, C, bias=False)
            # plain attributes, not buffers: DDP would broadcast them, and gloo has no bool
            self.cos, self.sin, self.mask = cos, sin, mask

        def rotate(self, x):  # HF's apply_rotary_pos_emb: x cos + rotate_half(x) sin
            x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
            return x * self.cos + torch.cat((-x2, x1), dim=-1) * self.sin

        def forward(self, x):
            b, t, _ = x.shape
            h = self.input_layernorm(x)
            q = self.rotate(heads(self.q_proj(h), NH, b, t))
            k = self.rotate(heads(self.k_proj(h), n_kv, b, t))
            y = attend(q, k, heads(self.v_proj(h), n_kv, b, t), self.mask, 1.0 / math.sqrt(HD))
            x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, C))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            f = angles(LLAMA_ROPE_BASE)
            f = torch.cat((f, f), dim=-1)  # HF's emb: the angles twice, for the two halves
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            self.embed_tokens = nn.Embedding(V, C)
            self.layers = nn.ModuleList(LlamaLayer(f.cos(), f.sin(), mask) for _ in range(L))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(C, V, bias=False)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for layer in self.layers:
                x = layer(x)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

        def init_weights(self):
            with torch.no_grad():
                for p in self.parameters():
                    if p.dim() == 1:
                        p.fill_(1.0)
                    else:
                        p.normal_(0.0, 0.02)

        embeddings = ("embed_tokens.weight",)

    eps = torch.finfo(torch.float32).eps

    class NanoAttention(nn.Module):
        def __init__(self, i, cos, sin, mask):
            super().__init__()
            self.c_q = nn.Linear(C, NH * HD, bias=False)
            self.c_k = nn.Linear(C, n_kv * HD, bias=False)
            self.c_v = nn.Linear(C, n_kv * HD, bias=False)
            self.c_proj = nn.Linear(C, C, bias=False)
            self.ve_gate = (nn.Linear(NC_GATE_CHANNELS, n_kv, bias=False) if nc_has_ve(i)
                            else None)
            self.cos, self.sin, self.mask = cos, sin, mask

        def rotate(self, x):  # nanochat's turn: by -theta
            x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
            return torch.cat((x1 * self.cos + x2 * self.sin, x2 * self.cos - x1 * self.sin), -1)

        def forward(self, x, ve):
            b, t, _ = x.shape
            v = self.c_v(x)
            if ve is not None:
                gate = NC_GATE_SCALE * torch.sigmoid(self.ve_gate(x[..., :NC_GATE_CHANNELS]))
                v = (v.view(b, t, n_kv, HD) + gate.unsqueeze(-1) * ve.view(b, t, n_kv, HD))
            q = rms(self.rotate(heads(self.c_q(x), NH, b, t)), eps)
            k = rms(self.rotate(heads(self.c_k(x), n_kv, b, t)), eps)
            y = attend(q, k, v.reshape(b, t, n_kv, HD).transpose(1, 2), self.mask,
                       1.0 / math.sqrt(HD))
            return self.c_proj(y.transpose(1, 2).reshape(b, t, C))

    class NanoMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C, bias=False)
            self.c_proj = nn.Linear(4 * C, C, bias=False)

        def forward(self, x):
            return self.c_proj(F.relu(self.c_fc(x)).square())

    class NanoBlock(nn.Module):
        def __init__(self, i, cos, sin, mask):
            super().__init__()
            self.attn, self.mlp = NanoAttention(i, cos, sin, mask), NanoMLP()

        def forward(self, x, ve):
            x = x + self.attn(rms(x, eps), ve)
            return x + self.mlp(rms(x, eps))

    class NanoChat(nn.Module):
        def __init__(self):
            super().__init__()
            f = angles(NC_ROPE_BASE)
            pos = torch.arange(T)
            back = pos.view(T, 1) - pos.view(1, T)  # query i, key j: i - j
            masks = {w: (back >= 0) & (back <= w) for w in set(nc_windows())}
            self.wte = nn.Embedding(V, C)
            self.h = nn.ModuleList(NanoBlock(i, f.cos(), f.sin(), masks[w])
                                   for i, w in enumerate(nc_windows()))
            self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(V, n_kv * HD)
                                               for i in range(L) if nc_has_ve(i)})
            self.resid_lambdas = nn.Parameter(torch.ones(L))
            self.x0_lambdas = nn.Parameter(torch.zeros(L))
            self.lm_head = nn.Linear(C, V, bias=False)

        def forward(self, idx, targets):
            x = x0 = rms(self.wte(idx), eps)
            for i, block in enumerate(self.h):
                x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
                ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
                x = block(x, ve)
            logits = self.lm_head(rms(x, eps))
            logits = NC_SOFTCAP * torch.tanh(logits / NC_SOFTCAP)
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

        def init_weights(self):
            """nanochat's init_weights: uniform of std 1 / sqrt(C) for the attention, the
            value embeddings and (x 0.4) the MLP's fc; zero output projections; the ramps of
            the residual scalars."""
            s = math.sqrt(3) / math.sqrt(C)
            with torch.no_grad():
                self.wte.weight.normal_(0.0, 0.8)
                self.lm_head.weight.normal_(0.0, 0.001)
                for block in self.h:
                    a = block.attn
                    for w in (a.c_q.weight, a.c_k.weight, a.c_v.weight):
                        w.uniform_(-s, s)
                    a.c_proj.weight.zero_()
                    block.mlp.c_fc.weight.uniform_(-0.4 * s, 0.4 * s)
                    block.mlp.c_proj.weight.zero_()
                    if a.ve_gate is not None:
                        a.ve_gate.weight.uniform_(0.0, 0.02)
                for ve in self.value_embeds.values():
                    ve.weight.uniform_(-s, s)
                for i in range(L):
                    self.resid_lambdas[i] = 1.15 - 0.10 * i / max(L - 1, 1)
                    self.x0_lambdas[i] = 0.20 - 0.15 * i / max(L - 1, 1)

        embeddings = ("wte.weight",) + tuple(f"value_embeds.{i}.weight"
                                             for i in range(L) if nc_has_ve(i))

    return {"llama": Llama, "nanochat": NanoChat}


def lwopt_weights(torch, arch, model):
    """[(lwopt's name, tensor)]: the model's weights in the names and layouts of lwopt's
    --save-params, read by its --init-from (attn.qkv: the Q, K and V rows stacked; llama's
    mlp.fc: the gate's rows, then the up projection's)."""
    out = []
    if arch == "llama":
        out.append(("wte.weight", model.embed_tokens.weight))
        for i, l in enumerate(model.layers):
            out += [(f"h.{i}.ln_1.weight", l.input_layernorm.weight),
                    (f"h.{i}.attn.qkv.weight", torch.cat((l.q_proj.weight, l.k_proj.weight,
                                                          l.v_proj.weight))),
                    (f"h.{i}.attn.proj.weight", l.o_proj.weight),
                    (f"h.{i}.ln_2.weight", l.post_attention_layernorm.weight),
                    (f"h.{i}.mlp.fc.weight", torch.cat((l.gate_proj.weight, l.up_proj.weight))),
                    (f"h.{i}.mlp.proj.weight", l.down_proj.weight)]
        return out + [("ln_f.weight", model.norm.weight), ("lm_head.weight", model.lm_head.weight)]
    out += [("wte.weight", model.wte.weight), ("resid_lambdas", model.resid_lambdas),
            ("x0_lambdas", model.x0_lambdas)]
    for i, block in enumerate(model.h):
        a = block.attn
        out.append((f"h.{i}.attn.qkv.weight", torch.cat((a.c_q.weight, a.c_k.weight,
                                                         a.c_v.weight))))
        if a.ve_gate is not None:
            out += [(f"h.{i}.attn.ve.weight", model.value_embeds[str(i)].weight),
                    (f"h.{i}.attn.ve_gate.weight", a.ve_gate.weight)]
        out += [(f"h.{i}.attn.proj.weight", a.c_proj.weight),
                (f"h.{i}.mlp.fc.weight", block.mlp.c_fc.weight),
                (f"h.{i}.mlp.proj.weight", block.mlp.c_proj.weight)]
    return out + [("lm_head.weight", model.lm_head.weight)]


def save_safetensors(path, named):
    """named [(name, tensor)] as a safetensors file of F32 tensors: an 8-byte little-endian
    header length, the JSON header (padded with spaces to 8 bytes), then the data in order."""
    header, blobs, at = {}, [], 0
    for name, t in named:
        blob = t.detach().float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=("llama", "nanochat"), required=True)
    p.add_argument("--n-kv-head", type=int, default=NH, help=f"KV heads (default {NH})")
    p.add_argument("--nproc", type=int, default=1,
                   help="ranks: N processes in one DDP group over gloo")
    p.add_argument("--threads", type=int, default=1, help="torch and OpenBLAS threads per rank")
    p.add_argument("--steps", type=int, default=30, help="steps (the schedule spans them)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the figures")
    p.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "data", "kjv.txt"))
    p.add_argument("--save-init", metavar="FILE",
                   help="write the initial weights in lwopt's names (safetensors) for the "
                        "recipe's --init-from, then train")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    args = p.parse_args(argv)
    if args.steps <= args.skip or args.skip < 0 or args.threads < 1 or args.nproc < 1:
        p.error("need 0 <= --skip < --steps, --threads >= 1 and --nproc >= 1")
    if args.n_kv_head < 1 or NH % args.n_kv_head != 0:
        p.error(f"--n-kv-head must divide the {NH} heads, got {args.n_kv_head}")
    return args


def peak_rss_mb(torch, dist, world):
    """Every rank's peak resident set so far, MiB (ru_maxrss is KiB on Linux)."""
    mine = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                        dtype=torch.float64)
    if world == 1:
        return [mine.item()]
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [x.item() for x in every]


def main(argv):
    args = parse_args(argv)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return base.launch_ranks(argv, args.nproc, __file__)
    started = base.start_torch(args.threads, "torch_models.py")
    if started is None:
        return 77
    torch, dist, rank, world = started
    say = print if rank == 0 else (lambda *a, **k: None)

    torch.manual_seed(base.SEED + rank)
    Model = make_models(torch, args.n_kv_head)[args.arch]
    model = Model()
    model.init_weights()  # under DDP rank 0's weights are broadcast when DDP wraps the model
    count, expected = sum(p.numel() for p in model.parameters()), n_params(args.arch,
                                                                            args.n_kv_head)
    assert count == expected, f"{args.arch}: {count} parameters built, {expected} expected"
    if args.save_init and rank == 0:  # rank 0's: the weights DDP broadcasts
        weights = lwopt_weights(torch, args.arch, model)
        assert sum(t.numel() for _, t in weights) == count, "a parameter left out of the file"
        save_safetensors(args.save_init, weights)
    run = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        run = DistributedDataParallel(model)
    named = list(model.named_parameters())
    adam = base.adamw(torch, named, base.LR, Model.embeddings)
    say(f"torch {torch.__version__}: {args.arch} {L} x {C}, {NH} heads ({args.n_kv_head} KV), "
        f"{count} parameters; adamw; {world} process{'es' if world > 1 else ''} x "
        f"{args.threads} thread{'s' if args.threads > 1 else ''}"
        f"{', DDP over gloo' if world > 1 else ''}", flush=True)

    data, n_train = base.load_data(torch, args.data)
    params = [p for _, p in named]
    recs = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = base.batch(torch, data, n_train, step, rank)
        a = time.perf_counter()
        loss = run(x, y)
        m = time.perf_counter()
        loss.backward()  # under DDP: the gradients' all-reduce, overlapped, and its wait
        o0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, base.CLIP)
        for g in adam.param_groups:
            g["lr"] = base.LR * base.schedule(step, args.steps)
        adam.step()
        model.zero_grad(set_to_none=True)
        o1 = time.perf_counter()
        mean_loss = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean_loss)
            mean_loss /= world
        wall = time.perf_counter() - t0
        recs.append({"loss": mean_loss.item(), "tokens_per_s": B * T * world / wall,
                     "time_ms": {"fwd": 1e3 * (m - a), "bwd": 1e3 * (o0 - m),
                                 "opt": 1e3 * (o1 - o0)}})
        if not args.quiet:
            say(f"step {step:4d}/{args.steps}  loss {recs[-1]['loss']:.4f}  "
                f"{recs[-1]['tokens_per_s']:7.0f} tok/s", flush=True)
    timed = recs[args.skip:]
    mean = {k: statistics.fmean(r["time_ms"][k] for r in timed) for k in timed[0]["time_ms"]}
    result = {"arch": args.arch, "parameters": count,
              "tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in timed),
              "time_ms": mean, "loss": recs[-1]["loss"], "steps": args.steps,
              "loss_first": recs[0]["loss"],
              "loss_last10": statistics.fmean(r["loss"] for r in recs[-10:]),
              "rss_mb": peak_rss_mb(torch, dist, world), "world": world,
              "threads": args.threads, "torch": torch.__version__}
    say(f"tokens/s {result['tokens_per_s']:.0f} (mean over steps {args.skip + 1}-{args.steps}); "
        f"fwd {mean['fwd']:.1f} ms, bwd {mean['bwd']:.1f} ms, opt {mean['opt']:.1f} ms; loss at "
        f"step {args.steps} {result['loss']:.4f}; peak RSS by rank (MiB) "
        + " ".join(f"{x:.0f}" for x in result["rss_mb"]))
    say("RESULT " + json.dumps(result), flush=True)
    if world > 1:
        dist.barrier()  # then base.finish(): no destroy_process_group, see there
    return 0


if __name__ == "__main__":
    base.finish(main(sys.argv[1:]))
