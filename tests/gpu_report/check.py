#!/usr/bin/env python3
"""check.py: scripts/gpu_report.py on logs laid out as scripts/gpu-run.sh writes them (excerpts in
the formats of bench/gpt2_gpu.lua, bench/peers/torch_gpt2.py, bench_cuda_newton_schulz, Nsight
Compute's and Nsight Systems' CSV): the figures it must find, the kernel families it must sum,
and what it says when a log is missing. Prints "N passed, M failed"; exits 1 on a failure."""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "..", "scripts", "gpu_report.py")

BENCH = """== bench_newton_schulz: build-gpu/bench_cuda_newton_schulz (limit 60 s)
| GPT-2 124M | 768x768 | 1 | lwopt | bf16 | 0.246 | 55.2 | 73.2 | 0.75 |
worst ratio 0.61 (goal >= 0.70)
| configuration | tokens/s | step ms | fwd ms | bwd ms | opt ms | model TFLOP/s | MFU | tensors peak MiB | GPU in use MiB |
|---|---|---|---|---|---|---|---|---|---|
| lwopt adamw, bf16 GEMMs | 114003 | 71.9 | 18.0 | 52.4 | 0.7 | 98.0 | 9.9% | 11784 | 13199 |
| lwopt muon (bf16 NS), bf16 GEMMs | 105481 | 77.7 | 18.0 | 52.3 | 4.1 | 90.7 | 9.2% | 11460 | 13193 |
bf16 GEMMs: Muon's cost over AdamW 0.081 (adamw / muon tokens/s - 1); ratio 0.45 (goal <= 1.25)
== bench_attention: build-gpu/bench_cuda_attention (limit 60 s)
| attention shape | kernels | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s |
|---|---|---|---|---|---|
| attention b 8, nh 12, t 1024, hd 64 | lwopt bf16 (tensor cores) | 0.100 | 0.400 | 129.0 | 112.7 |
| attention b 8, nh 12, t 1024, hd 64 | lwopt bf16 pipelined (tensor cores) | 0.090 | 0.360 | 143.2 | 125.3 |
| attention b 8, nh 12, t 1024, hd 64 | lwopt bf16 (tensor cores, order work) | 0.095 | 0.340 | 135.8 | 132.6 |
| attention b 8, nh 12, t 1024, hd 64 | lwopt bf16 pipelined (tensor cores, order work) | 0.085 | 0.320 | 151.7 | 140.9 |
| attention b 8, nh 12, t 1024, hd 64 | lwopt fp32 | 1.200 | 4.000 | 10.7 | 11.3 |
| attention b 8, nh 6, t 1024, hd 128 | lwopt bf16 (tensor cores) | 0.090 | 0.360 | 143.2 | 125.3 |
"""
PEERS = """| configuration | tokens/s | step ms | fwd ms | bwd ms | opt ms | model TFLOP/s | MFU | tensors peak MiB | GPU in use MiB |
|---|---|---|---|---|---|---|---|---|---|
| torch eager, adamw (fused) | 358830 | 22.8 | 6.1 | 13.2 | 1.1 | 308.4 | 31.2% | 8308 | 10513 |
| torch compile, adamw (fused) | 456000 | 17.9 | 4.0 | 11.0 | 1.0 | 392.0 | 39.7% | 5232 | 6157 |
| torch compile, torch.optim.Muon + fused adamw | 211000 | 38.8 | 4.0 | 11.0 | 20.0 | 181.0 | 18.3% | 4908 | 5875 |
| attention shape | kernels | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s |
|---|---|---|---|---|---|
| attention b 8, nh 12, t 1024, hd 64 | torch sdpa bf16 | 0.080 | 0.250 | 161.3 | 180.4 |
"""
NCU = """==PROF== Connected to process 3965
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","luajit","h","void <unnamed>::dkdv_kernel<64>(const float *, int)","1","13","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","ns","600,000"
"1","1","luajit","h","void <unnamed>::forward_kernel<64>(const float *)","1","13","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","ns","100,000"
"2","1","luajit","h","nvjet_sm90_tss_192x192_64x4_2x1_v_bz_coopB_TNN","1","13","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","ns","200,000"
"3","1","luajit","h","<unnamed>::f32_to_bf16_kernel(float *)","1","13","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","ns","50,000"
"4","1","luajit","h","<unnamed>::ln_forward_kernel(float *)","1","13","(1,1,1)","(1,1,1)","0","9.0","s","gpu__time_duration.sum","ns","50,000"
"""
NSYS = """Processing [gpt2.sqlite] with [cuda_gpu_kern_sum.py]...
"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"
"75.0","3000","10","300","300","300","300","0","void <unnamed>::dq_kernel<64>(float *)"
"25.0","1000","10","100","100","100","100","0","<unnamed>::adamw_kernel(float *)"
"""

passed = failed = 0


def expect(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAILED: " + what)


def share(out, family, percent):
    """Whether the profile summary gives `family` that share of GPU time."""
    return re.search(r"^  " + re.escape(family) + r"\s+" + re.escape(percent) + "%", out, re.M)


def report(out_dir):
    r = subprocess.run([sys.executable, REPORT, out_dir], capture_output=True, text=True)
    expect(r.returncode == 0, f"gpu_report.py exits 0 ({r.returncode}: {r.stderr.strip()})")
    return r.stdout


with tempfile.TemporaryDirectory() as d:
    for name, text in (("bench.log", BENCH), ("peers.log", PEERS), ("profile.txt", NCU)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    out = report(d)
    expect("lwopt muon (bf16 NS), bf16 GEMMs: 105481 tokens/s, step 77.7 ms, MFU 9.2%" in out,
           "lwopt's configuration with its tokens/s, step and MFU:\n" + out)
    expect("GPU in use 13193 MiB" in out, "lwopt's memory")
    expect("torch compile, adamw (fused): 456000 tokens/s" in out, "the peer's tokens/s")
    expect("adamw: lwopt's best (lwopt adamw, bf16 GEMMs) / torch compile = 0.25" in out,
           "lwopt's best AdamW against compiled: 114003 / 456000")
    expect("adamw: lwopt's best (lwopt adamw, bf16 GEMMs) / torch eager = 0.32" in out,
           "against eager: 114003 / 358830")
    expect("muon: lwopt's best (lwopt muon (bf16 NS), bf16 GEMMs) / torch compile = 0.50" in out,
           "Muon against compiled Muon: 105481 / 211000")
    expect("Muon's cost over AdamW 0.081" in out, "Muon's cost line")
    expect("worst ratio 0.61 (goal >= 0.70)" in out, "Newton-Schulz against cuBLAS")
    expect("b 8, nh 12, t 1024, hd 64: lwopt bf16 0.400 (forward 0.100), pipelined 0.360 "
           "(forward 0.090): 0.90 of it, order work 0.340 (forward 0.095): 0.85 of it, pipelined "
           "+ order work 0.320 (forward 0.085): 0.80 of it, lwopt fp32 4.000, torch sdpa 0.250 "
           "(forward 0.080): lwopt / torch 1.60 (goal <= 1.3)" in out,
           "attention against SDPA, shape by shape, the variants beside:\n" + out)
    expect(out.count("b 8, nh 12, t 1024, hd 64:") == 1,
           "the variants' rows join their shape's line, not lines of their own:\n" + out)
    expect("b 8, nh 6, t 1024, hd 128: lwopt bf16 0.360 (forward 0.090), torch sdpa: not in "
           "peers.log" in out, "a shape torch did not run is said")
    expect("kernel profile: 5 rows, 1.0 ms of GPU time" in out, "the profile's total:\n" + out)
    expect(share(out, "attention", "70.0"), "attention: dkdv + forward 70%")
    expect(share(out, "cuBLAS GEMMs", "20.0"), "nvjet kernels are cuBLAS GEMMs")
    expect(share(out, "bf16 conversions", "5.0"), "conversions")
    expect(share(out, "layer norm", "5.0"), "layer norm")
    expect("60.0%  void <unnamed>::dkdv_kernel<64>" in out, "the largest kernel, named")

with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "profile.txt"), "w") as f:
        f.write(NSYS)
    out = report(d)
    expect("no table in bench.log" in out and "no table in peers.log" in out,
           "missing logs are said:\n" + out)
    expect("no figures in bench.log" in out, "missing Newton-Schulz figures are said")
    expect("attention (bench_cuda_attention): no table in bench.log" in out,
           "missing attention figures are said")
    expect(share(out, "attention", "75.0"), "Nsight Systems' report read:\n" + out)
    expect(share(out, "optimizer (Muon, AdamW, norms)", "25.0"), "AdamW is the optimizer's")

with tempfile.TemporaryDirectory() as d:
    out = report(d)
    expect("kernel profile: none" in out, "no profile is said")

print(f"gpu_report: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
