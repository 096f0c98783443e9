#!/usr/bin/env python3
"""gpu_report.py: the headline figures of a scripts/gpu-run.sh run, read from the logs it wrote.

Prints, from OUT/bench.log and OUT/peers.log: tokens/s of each GPT-2 configuration of
bench/gpt2_gpu.lua and of the PyTorch peer (bench/peers/torch_gpt2.py), lwopt's best against
torch.compile's with the same optimizer, Muon's cost over AdamW, the memory columns, Newton-
Schulz against cuBLAS's GEMM (bench_cuda_newton_schulz's worst ratio), and attention per layer
(bench_cuda_attention against torch_attention.py's SDPA, shape by shape, the tensor-core kernels'
variants beside: pipelined staging, tile-major grids); from OUT/profile.txt (Nsight
Compute's --csv, or Nsight Systems' cuda_gpu_kern_sum report) each kernel family's share of GPU
time and the largest kernels. A figure whose log is missing is said to be missing.
Usage: scripts/gpu_report.py OUT            (the standard library only: runs on any python3)
       scripts/gpu_report.py --profile CSV  (the profile summary alone)
"""
import csv
import os
import re
import sys

# Kernel families by name (lower case, first match wins): lwopt's kernels (src/cuda/*.cu) and
# the libraries'.
FAMILIES = [
    ("attention", r"attention|flash|fmha|(^|::|\s)(forward_kernel|dq_kernel|dkdv_kernel|rowdot_kernel)\b"),
    ("cuBLAS GEMMs", r"gemm|cutlass|xmma|cublas|sm\d\d_|splitk|gemv|nvjet"),
    ("bf16 conversions", r"f32_to_bf16|bf16_to_f32|convert|cast"),
    ("layer norm", r"\bln_|layernorm|layer_norm"),
    ("GELU", r"gelu"),
    ("cross-entropy", r"dlogits|partial_rows|rows_kernel|softmax|cross_entropy"),
    ("embedding", r"embed"),
    ("optimizer (Muon, AdamW, norms)",
     r"adamw|momentum|norm_partials|norm_finish|scale_by_norm|square_partials|finite|"
     r"scale_kernel|axpy|add_kernel|colsum"),
    ("NCCL", r"nccl"),
    ("copies and fills", r"memcpy|memset|fill|copy"),
]


def family(name):
    low = name.lower()
    for label, pattern in FAMILIES:
        if re.search(pattern, low):
            return label
    return "other"


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def table_rows(text):
    """The rows of the markdown tables in text: {first cell: [cells]}."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| configuration") and "---" not in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def number(cell):
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def gpt2_lines(bench, peers):
    out = []
    ours = {k: v for k, v in table_rows(bench or "").items() if k.startswith("lwopt ")}
    torch = {k: v for k, v in table_rows(peers or "").items() if k.startswith("torch ")}
    if not ours:
        out.append("GPT-2 124M (bench/gpt2_gpu.lua): no table in bench.log")
    for key, cells in ours.items():
        out.append(f"  {key}: {cells[1]} tokens/s, step {cells[2]} ms, MFU {cells[7]}, "
                   f"tensors {cells[8]} MiB, GPU in use {cells[9]} MiB")
    if not torch:
        out.append("PyTorch peer (torch_gpt2.py): no table in peers.log")
    for key, cells in torch.items():
        extra = (f", step {cells[2]} ms, MFU {cells[7]}, tensors {cells[8]} MiB, GPU in use "
                 f"{cells[9]} MiB") if number(cells[1]) else ""
        out.append(f"  {key}: {cells[1]} tokens/s{extra}")
    for kind, ours_word, torch_word in (("adamw", "lwopt adamw", "adamw (fused)"),
                                        ("muon", "lwopt muon", "torch.optim.Muon")):
        best = max((number(c[1]) or 0, k) for k, c in ours.items() if k.startswith(ours_word)) \
            if any(k.startswith(ours_word) for k in ours) else (0, None)
        for mode in ("compile", "eager"):
            peer = [c for k, c in torch.items() if k.startswith(f"torch {mode}") and torch_word in k]
            if best[1] and peer and number(peer[0][1]):
                out.append(f"  {kind}: lwopt's best ({best[1]}) / torch {mode} = "
                           f"{best[0] / number(peer[0][1]):.2f}")
    for line in (bench or "").splitlines():
        if "Muon's cost over AdamW" in line:
            out.append("  " + line.strip())
    return out


def ns_lines(bench):
    m = re.findall(r"worst ratio ([0-9.]+) \(goal >= ([0-9.]+)\)", bench or "")
    if not m:
        return ["Newton-Schulz (bench_cuda_newton_schulz): no figures in bench.log"]
    return [f"Newton-Schulz against cuBLAS's bf16 GEMM: worst ratio {r} (goal >= {g})"
            for r, g in m]


def attention_rows(text):
    """{(shape, kernels): (fwd ms, fwd+bwd ms)} from the tables of bench_cuda_attention and
    torch_attention.py (rows "| attention b 8, nh 12, t 1024, hd 64 | kernels | fwd | both |")."""
    rows = {}
    for line in (text or "").splitlines():
        if not line.startswith("| attention "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and number(cells[2]) is not None and number(cells[3]) is not None:
            rows[(cells[0][len("attention "):], cells[1])] = (number(cells[2]), number(cells[3]))
    return rows


# A tensor-core variant's row: "lwopt bf16 pipelined (tensor cores)" (LWOPT_ATTN_PIPELINE=1),
# "lwopt bf16 (tensor cores, order work)" (LWOPT_ATTN_ORDER=work), or both; the default's is
# "lwopt bf16 (tensor cores)".
VARIANT = re.compile(r"lwopt bf16 (?:(\w+) )?\(tensor cores(?:, (.+))?\)$")


def variant_of(kernels):
    """The variant's label ("pipelined", "order work", "pipelined + order work"), "" for the
    default's row, None for any other."""
    m = VARIANT.match(kernels)
    return None if not m else " + ".join(part for part in m.groups() if part)


def attention_lines(bench, peers):
    ours, torch = attention_rows(bench), attention_rows(peers)
    if not ours:
        return ["attention (bench_cuda_attention): no table in bench.log"]
    out = ["attention per layer, forward + backward ms (bench_cuda_attention, torch_attention.py):"]
    for (shape, kernels), (fwd, both) in ours.items():
        # the default's row leads; the variants' (LWOPT_ATTN_PIPELINE, LWOPT_ATTN_ORDER) join it
        if not kernels.startswith("lwopt bf16") or variant_of(kernels):
            continue
        text = f"  {shape}: lwopt bf16 {both:.3f} (forward {fwd:.3f})"
        for (other, label), (vfwd, vboth) in ours.items():
            if other == shape and variant_of(label):
                text += (f", {variant_of(label)} {vboth:.3f} (forward {vfwd:.3f}): "
                         f"{vboth / both:.2f} of it")
        fp32 = ours.get((shape, "lwopt fp32"))
        if fp32:
            text += f", lwopt fp32 {fp32[1]:.3f}"
        peer = torch.get((shape, "torch sdpa bf16"))
        if peer:
            text += (f", torch sdpa {peer[1]:.3f} (forward {peer[0]:.3f}): lwopt / torch "
                     f"{both / peer[1]:.2f} (goal <= 1.3)")
        else:
            text += ", torch sdpa: not in peers.log"
        out.append(text)
    return out


def profile_rows(text):
    """(kernel name, ns) pairs from Nsight Compute's CSV (one row per kernel launch and metric)
    or Nsight Systems' cuda_gpu_kern_sum CSV (one row per kernel name)."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    rows = []
    for r in csv.DictReader(lines):
        if "Metric Name" in r:  # ncu
            if r.get("Metric Name") != "gpu__time_duration.sum":
                continue
            value = number((r.get("Metric Value") or "").replace(",", ""))
            unit = (r.get("Metric Unit") or "").lower()
            scale = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6,
                     "ms": 1e6, "second": 1e9, "s": 1e9}.get(unit, 1)
            name = r.get("Kernel Name") or r.get("Function Name") or "?"
            if value is not None:
                rows.append((name, value * scale))
        elif "Total Time (ns)" in r:  # nsys
            value = number((r.get("Total Time (ns)") or "").replace(",", ""))
            if value is not None:
                rows.append((r.get("Name") or "?", value))
    return rows


def profile_lines(text):
    rows = profile_rows(text or "")
    if not rows:
        return ["kernel profile: none (no ncu or nsys, or it failed: see profile.txt)"]
    total = sum(ns for _, ns in rows)
    by_family, by_name = {}, {}
    for name, ns in rows:
        by_family[family(name)] = by_family.get(family(name), 0) + ns
        short = re.sub(r"\(.*", "", name)[:70]
        by_name[short] = by_name.get(short, 0) + ns
    out = [f"kernel profile: {len(rows)} rows, {total / 1e6:.1f} ms of GPU time"]
    for label, ns in sorted(by_family.items(), key=lambda kv: -kv[1]):
        out.append(f"  {label:32s} {100 * ns / total:5.1f}%  {ns / 1e6:8.2f} ms")
    out.append("  largest kernels:")
    for name, ns in sorted(by_name.items(), key=lambda kv: -kv[1])[:10]:
        out.append(f"    {100 * ns / total:5.1f}%  {name}")
    return out


def main(argv):
    if len(argv) == 3 and argv[1] == "--profile":
        print("\n".join(profile_lines(read(argv[2]))))
        return 0
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    out = argv[1]
    bench, peers = read(os.path.join(out, "bench.log")), read(os.path.join(out, "peers.log"))
    lines = ["GPT-2 124M, one GPU:"] + gpt2_lines(bench, peers) + ns_lines(bench)
    lines += attention_lines(bench, peers)
    lines += profile_lines(read(os.path.join(out, "profile.txt")))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
