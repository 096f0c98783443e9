#!/usr/bin/env python3
"""torch_gpt2.py: the PyTorch peer of bench/gpt2_gpu.lua: GPT-2 124M on the same GPU, same shapes.

A nanoGPT-style GPT-2 124M written here from the architecture, shaped as lwopt's lw.nn.GPT with
the recipe's --preset gpt2 (lua/lwopt/nn/gpt.lua, lw.arch.gpt: tied = true, bias = false by
default, and the recipe does not turn biases on): token + position embeddings (vocabulary 50304,
1024 positions), 12 pre-LN blocks of 768 with 12 heads (x + attn(ln_1(x)), then + mlp(ln_2(.))),
causal self-attention through F.scaled_dot_product_attention(is_causal=True), a GELU (tanh) MLP
of 4 x 768, a final LayerNorm and the LM head tied to the token embedding; no biases anywhere,
LayerNorms included (gain only, eps 1e-5): 124,373,760 parameters, the same count as lwopt's.
Batch 8 x 1024 of random tokens (throughput does not depend on which tokens), bf16 autocast over
fp32 master weights, gradients clipped to norm 1 as the recipe does (--clip 1.0). Optimizers:
torch.optim.AdamW(fused=True, betas 0.9/0.95, weight decay 0.1) for everything, or
torch.optim.Muon (torch >= 2.9, its defaults and lr 0.02; "unavailable" before) for the 48 2-D
block matrices plus the fused AdamW for the rest (embeddings, LayerNorm gains) as lwopt routes
them; each eager and with torch.compile (a compile that fails is reported and the rest go on).

Per configuration: tokens/s over steps warmup+1..steps (total tokens over the time between two
torch.cuda.synchronize), forward / backward / optimizer ms (mean GPU time between CUDA events
around each phase), model TFLOP/s and MFU by bench/gpt2_gpu.lua's formula (6 N + 12 L H Q T per
token, N all parameters with the tied embedding once; MFU against the GPU's dense bf16 peak),
torch.cuda.max_memory_allocated (the tensors' peak) and the GPU memory in use as the driver
counts it (torch.cuda.mem_get_info: total - free, the CUDA context and allocator cache
included), printed in bench/gpt2_gpu.lua's table format. Exit 77 when torch or a GPU is missing,
1 when an eager run fails. scripts/gpu-run.sh runs it when python3 can import torch.
Usage: python3 bench/peers/torch_gpt2.py [--steps N] [--warmup W] [--no-compile]
"""
import argparse
import gc
import math
import sys
import time

from gpu_peer import gpu_torch

L, C, H, T, B = 12, 768, 12, 1024, 8  # GPT-2 124M, bench/gpt2_gpu.lua's shapes
VOCAB_DATA, VOCAB = 50257, 50304
TOKENS_PER_STEP = B * T
# lwopt's parameter count for the same model: embeddings, 12 blocks of qkv, proj, fc, fc proj
# and two LayerNorm gains, the final gain.
LWOPT_PARAMS = VOCAB * C + T * C + L * (12 * C * C + 2 * C) + C


def peak_tflops(name):
    """Dense bf16 tensor-core peak (TFLOP/s, no sparsity) by the driver's GPU name, as in
    bench/gpt2_gpu.lua; (None, None) for a GPU not listed (NVL boards and GH200 are not)."""
    if "H100 PCIe" in name:
        return 756, "H100 PCIe"
    if "NVL" in name or "GH200" in name:
        return None, None
    if "H100" in name:
        return 989, "H100 SXM"
    if "H200" in name:
        return 989, "H200"
    if "A100" in name:
        return 312, "A100"
    return None, None


def ns_flops():
    """Newton-Schulz FLOPs per step over the Muon matrices, 5 steps, full GEMMs: per step
    4 p^2 q + 2 p^3 for a p x q matrix (p = min, q = max)."""
    total = 0
    for rows, cols in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C)):
        p, q = min(rows, cols), max(rows, cols)
        total += 5 * (4 * p * p * q + 2 * p * p * p)
    return L * total


def make_gpt(torch):
    """The model classes (defined here so that the module imports without torch)."""
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C, bias=False)
            self.proj = nn.Linear(C, C, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)
            q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

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
            self.ln_1 = nn.LayerNorm(C, eps=1e-5, bias=False)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(C, eps=1e-5, bias=False)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5, bias=False)
            self.lm_head = nn.Linear(C, VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            # GPT-2's initialisation, as the recipe's: normal(0, 0.02), the residual
            # projections scaled by 1/sqrt(2 L), gains 1
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    torch.nn.init.normal_(p, mean=0.0, std=std)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT


def optimizers(torch, model, kind):
    """[optimizer, ...] for kind "adamw" (all fused AdamW) or "muon" (torch.optim.Muon for the
    blocks' 2-D matrices, fused AdamW for the rest)."""
    def adamw(params):
        return torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                 fused=True)
    if kind == "adamw":
        return [adamw(list(model.parameters()))]
    matrices = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2]
    rest = [p for n, p in model.named_parameters()
            if not (n.startswith("blocks.") and p.dim() == 2)]
    assert len(matrices) == 4 * L, f"{len(matrices)} block matrices, {4 * L} expected"
    return [torch.optim.Muon(matrices, lr=0.02), adamw(rest)]


def measure(torch, gpt_class, kind, compiled, steps, warmup, batches):
    """One configuration's figures: dict of tps, fwd, bwd, opt (ms), max_alloc, in_use (bytes)."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = gpt_class().cuda()
    n_params = sum(p.numel() for p in model.parameters())  # the tied table once
    assert n_params == LWOPT_PARAMS, f"{n_params} parameters, lwopt's model has {LWOPT_PARAMS}"
    opts = optimizers(torch, model, kind)
    run = torch.compile(model) if compiled else model
    params = list(model.parameters())
    in_use = 0

    def step(i, events=None):
        x, y = batches[i % len(batches)]
        if events:
            events[0].record()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = run(x, y)
        if events:
            events[1].record()
        loss.backward()
        if events:
            events[2].record()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for o in opts:
            o.step()
        model.zero_grad(set_to_none=True)
        if events:
            events[3].record()

    for i in range(warmup):  # compiles (forward at the first call, backward at the first backward)
        step(i)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    in_use = max(in_use, total - free)
    timed = [[torch.cuda.Event(enable_timing=True) for _ in range(4)]
             for _ in range(steps - warmup)]
    t0 = time.perf_counter()
    for i, events in enumerate(timed):
        step(warmup + i, events)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    free, total = torch.cuda.mem_get_info()
    in_use = max(in_use, total - free)
    n = len(timed)
    out = {
        "tps": n * TOKENS_PER_STEP / elapsed,
        "fwd": sum(e[0].elapsed_time(e[1]) for e in timed) / n,
        "bwd": sum(e[1].elapsed_time(e[2]) for e in timed) / n,
        "opt": sum(e[2].elapsed_time(e[3]) for e in timed) / n,
        "max_alloc": torch.cuda.max_memory_allocated(),
        "in_use": in_use,
    }
    del run, model, opts, params
    return out


def release(torch):
    gc.collect()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the figures")
    parser.add_argument("--no-compile", action="store_true", help="eager configurations only")
    args = parser.parse_args()
    if args.warmup < 1 or args.steps <= args.warmup:
        parser.error("need 1 <= --warmup < --steps")
    torch = gpu_torch("torch_gpt2.py")
    if torch is None:
        return 77
    # as nanoGPT: fp32 GEMMs outside autocast may use tf32 tensor cores
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(1337)
    name = torch.cuda.get_device_name(0)
    peak, peak_name = peak_tflops(name)
    flops_per_token = 6 * LWOPT_PARAMS + 12 * L * H * (C // H) * T
    step_flops = flops_per_token * TOKENS_PER_STEP
    ns_share = ns_flops() / (step_flops + ns_flops())
    has_muon = hasattr(torch.optim, "Muon")
    print(f"torch {torch.__version__} on {name}, CUDA {torch.version.cuda}\n")
    print(f"GPT-2 124M: {LWOPT_PARAMS} parameters (tied embedding once, position table "
          f"included), batch {B} x {T} = {TOKENS_PER_STEP} tokens per step, bf16 autocast, "
          "fp32 master weights")
    print(f"model FLOPs per token 6 N + 12 L H Q T = {flops_per_token / 1e9:.4f} GFLOP; per step "
          f"{step_flops / 1e12:.3f} TFLOP; Newton-Schulz {100 * ns_share:.1f}% of the step's "
          "FLOPs")
    print(f"MFU against the {peak_name}'s dense bf16 peak, {peak} TFLOP/s" if peak
          else f"MFU: no peak known for {name!r}, TFLOP/s only")
    print(f"{args.steps} steps per configuration; means over steps {args.warmup + 1}-{args.steps}"
          "\n", flush=True)

    gen = torch.Generator().manual_seed(20240520)
    batches = []
    for _ in range(4):
        tokens = torch.randint(0, VOCAB_DATA, (B, T + 1), generator=gen)
        batches.append((tokens[:, :-1].contiguous().cuda(), tokens[:, 1:].contiguous().cuda()))
    gpt_class = make_gpt(torch)

    configs = [(mode, kind) for mode in (("eager", "compile") if not args.no_compile
                                         else ("eager",)) for kind in ("adamw", "muon")]
    labels = {"adamw": "adamw (fused)", "muon": "torch.optim.Muon + fused adamw"}
    results, notes, status = {}, [], 0
    for mode, kind in configs:
        key = f"torch {mode}, {labels[kind]}"
        if kind == "muon" and not has_muon:
            results[key] = "unavailable"
            notes.append(f"{key}: unavailable: torch {torch.__version__} has no "
                         "torch.optim.Muon (it came with 2.9)")
            continue
        try:
            results[key] = measure(torch, gpt_class, kind, mode == "compile", args.steps,
                                   args.warmup, batches)
            print(f"{key}: {results[key]['tps']:.0f} tokens/s", flush=True)
        except Exception as e:  # noqa: BLE001 - any failure is reported and the rest go on
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            results[key] = "failed"
            notes.append(f"{key}: failed: {why}")
            print(f"{key}: failed: {why}", flush=True)
            if mode == "eager":
                status = 1
        release(torch)

    print("\n| configuration | tokens/s | step ms | fwd ms | bwd ms | opt ms | model TFLOP/s | "
          "MFU | tensors peak MiB | GPU in use MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        if isinstance(r, str):
            print(f"| {key} | {r} | - | - | - | - | - | - | - | - |")
            continue
        tflops = r["tps"] * flops_per_token / 1e12
        mfu = f"{100 * tflops / peak:.1f}%" if peak else "-"
        print(f"| {key} | {r['tps']:.0f} | {1e3 * TOKENS_PER_STEP / r['tps']:.1f} | "
              f"{r['fwd']:.1f} | {r['bwd']:.1f} | {r['opt']:.1f} | {tflops:.1f} | {mfu} | "
              f"{r['max_alloc'] / 2**20:.0f} | {r['in_use'] / 2**20:.0f} |")
    print("\n(model TFLOP/s and MFU over the whole step, optimizer included; fwd / bwd / opt: GPU "
          "time between CUDA events, opt with the clip and zero_grad; tensors peak: "
          "torch.cuda.max_memory_allocated; GPU in use: the driver's, max of after warm-up and "
          "at the end)")
    for note in notes:
        print(note)
    for mode in ("eager", "compile"):
        a = results.get(f"torch {mode}, {labels['adamw']}")
        m = results.get(f"torch {mode}, {labels['muon']}")
        if isinstance(a, dict) and isinstance(m, dict):
            cost = a["tps"] / m["tps"] - 1
            print(f"torch {mode}: Muon's cost over AdamW {cost:.3f} (adamw / muon tokens/s - 1); "
                  f"Newton-Schulz share of the step's FLOPs {ns_share:.3f}; ratio "
                  f"{cost / ns_share:.2f} (for reference: lwopt's goal is <= 1.25)")
    return status


if __name__ == "__main__":
    sys.exit(main())
