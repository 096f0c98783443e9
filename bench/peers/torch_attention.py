#!/usr/bin/env python3
"""torch_attention.py: the PyTorch peer of bench/cuda/attention.c on the same GPU.

torch.nn.functional.scaled_dot_product_attention, causal, in bf16 (what autocast hands it in a
GPT's training step), on bench_cuda_attention's shapes: b 8, c 768 as 12 heads of 64 and 6 of
128, t 1024, 2048, 4096; q, k and v are views of one [b, t, 3, nh, hd] tensor, transposed to
[b, nh, t, hd] as a GPT's attention takes them from its QKV projection. Forward, and forward +
backward (the gradient of that tensor), in ms per layer, printed in bench_cuda_attention's table
format (TFLOP/s: the causal half of the products, the backward 2.5 times the forward's), best of
the repeats of `calls` calls after a warm-up. Needs torch and a GPU: scripts/gpu-run.sh runs it
when python3 can import torch; never part of `make test`.
Usage: python3 bench/peers/torch_attention.py [--repeats N] [--calls N]
"""
import argparse
import sys

from gpu_peer import best_of, gpu_torch

SHAPES = [(8, 1024, 768, 12), (8, 1024, 768, 6), (8, 2048, 768, 12), (8, 2048, 768, 6),
          (8, 4096, 768, 12), (8, 4096, 768, 6)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    torch = gpu_torch("torch_attention.py")
    if torch is None:
        return 77
    import torch.nn.functional as F
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
          f"\n\nscaled_dot_product_attention, causal, bf16; best of {args.repeats} x {args.calls} "
          "calls\n")
    print("| attention shape | kernels | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s |\n"
          "|---|---|---|---|---|---|")
    for b, t, c, nh in SHAPES:
        hd = c // nh
        qkv = torch.randn(b, t, 3, nh, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(b, nh, t, hd, device=dev, dtype=torch.bfloat16)

        def forward():
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward_backward():
            qkv.grad = None
            forward().backward(dout)

        with torch.no_grad():
            fwd = best_of(torch, forward, args.repeats, args.calls)
        both = best_of(torch, forward_backward, args.repeats, args.calls)
        flops = 2.0 * b * nh * t * t * hd
        print(f"| attention b {b}, nh {nh}, t {t}, hd {hd} | torch sdpa bf16 | {1e3 * fwd:.3f} | "
              f"{1e3 * both:.3f} | {flops / fwd / 1e12:.1f} | {3.5 * flops / both / 1e12:.1f} |",
              flush=True)
        del qkv, dout
    return 0


if __name__ == "__main__":
    sys.exit(main())
