#!/usr/bin/env python3
"""torch_newton_schulz.py: the PyTorch peer of bench/cuda/newton_schulz.c on the same GPU.

The reference Newton-Schulz in bf16 (Keller Jordan's zeropower_via_newtonschulz5, written here
from its math: X = G / ||G||_F in bf16, transposed so that rows <= cols; five steps of
A = X X^T, B = b A + c A A, X = a X + B X with (a, b, c) = (3.4445, -4.7750, 2.0315); transposed
back), and torch.optim.Muon's step (torch >= 2.9) where it exists, for the shapes of
bench_cuda_newton_schulz, printed in its table format (TFLOP/s in full-GEMM FLOPs: per step
4 p^2 q + 2 p^3, p = min, q = max), next to torch's own bf16 GEMM of p x q x p. Needs torch and
a GPU: scripts/gpu-run.sh runs it when python3 can import torch; never part of `make test`.
Usage: python3 bench/peers/torch_newton_schulz.py [--repeats N] [--batch B]
"""
import argparse
import sys

from gpu_peer import best_of, gpu_torch

SHAPES = [
    ("GPT-2 124M", 768, 768), ("GPT-2 124M", 768, 2304), ("GPT-2 124M", 768, 3072),
    ("GPT-2 124M", 3072, 768), ("GPT-2 1.5B", 1600, 1600), ("GPT-2 1.5B", 1600, 4800),
    ("GPT-2 1.5B", 1600, 6400), ("GPT-2 1.5B", 6400, 1600), ("LLaMA-8B", 4096, 4096),
    ("LLaMA-8B", 4096, 1024), ("LLaMA-8B", 4096, 14336), ("LLaMA-8B", 14336, 4096),
]
STEPS = 5
A, B, C = 3.4445, -4.7750, 2.0315


def ns_flops(rows, cols):
    p, q = min(rows, cols), max(rows, cols)
    return STEPS * (4.0 * p * p * q + 2.0 * p * p * p)


def newton_schulz(torch, g, eps=1e-7):
    """Orthogonalises g (..., rows, cols) in bf16; leading dimensions are a batch."""
    x = g.bfloat16()
    tall = g.size(-2) > g.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)
    for _ in range(STEPS):
        a = x @ x.mT
        b = B * a + C * (a @ a)
        x = A * x + b @ x
    if tall:
        x = x.mT
    return x


def row(model, rows, cols, batch, impl, ms, tflops, gemm):
    print(f"| {model} | {rows}x{cols} | {batch} | {impl} | bf16 | {ms:.3f} | {tflops:.1f} | "
          f"{gemm:.1f} | {tflops / gemm:.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch = gpu_torch("torch_newton_schulz.py")
    if torch is None:
        return 77
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
          f"\n\nNewton-Schulz, {STEPS} quintic steps, bf16; best of {args.repeats}; TFLOP/s in "
          "full-GEMM FLOPs; ratio: against torch's bf16 GEMM (p x q x p) of the same run\n")
    header = ("| model | shape | batch | impl | precision | ms | TFLOP/s | bf16 GEMM TFLOP/s | "
              "ratio |\n|---|---|---|---|---|---|---|---|---|")
    print(header)
    muon_cls = getattr(torch.optim, "Muon", None)
    gemms = {}
    for model, rows, cols in SHAPES:
        p, q = min(rows, cols), max(rows, cols)
        a = torch.randn(p, q, device=dev, dtype=torch.bfloat16)
        t = best_of(torch, lambda: a @ a.mT, args.repeats, 10, warmups=2)
        gemm = 2.0 * p * p * q / t / 1e12
        gemms[(rows, cols)] = gemm
        g = torch.randn(rows, cols, device=dev)
        t = best_of(torch, lambda: newton_schulz(torch, g), args.repeats, 3, warmups=2)
        row(model, rows, cols, 1, "torch reference", 1e3 * t, ns_flops(rows, cols) / t / 1e12,
            gemm)
        gb = torch.randn(args.batch, rows, cols, device=dev)
        t = best_of(torch, lambda: newton_schulz(torch, gb), args.repeats, 1, warmups=2)
        row(model, rows, cols, args.batch, "torch reference", 1e3 * t,
            args.batch * ns_flops(rows, cols) / t / 1e12, gemm)
        del a, g, gb
    print()
    if muon_cls is None:
        print(f"torch.optim.Muon: not in torch {torch.__version__} (it came with 2.9)")
        return 0
    print(f"torch.optim.Muon: one step over {args.batch} matrices of a shape (its own "
          "Newton-Schulz and defaults; TFLOP/s count Newton-Schulz only)\n")
    print(header)
    for model, rows, cols in SHAPES:
        params = [torch.nn.Parameter(torch.randn(rows, cols, device=dev) * 0.02)
                  for _ in range(args.batch)]
        for w in params:
            w.grad = torch.randn_like(w)
        opt = muon_cls(params, lr=0.02)
        t = best_of(torch, opt.step, args.repeats, 1, warmups=2)
        row(model, rows, cols, args.batch, "torch.optim.Muon", 1e3 * t,
            args.batch * ns_flops(rows, cols) / t / 1e12, gemms[(rows, cols)])
        del params, opt
    return 0


if __name__ == "__main__":
    sys.exit(main())
