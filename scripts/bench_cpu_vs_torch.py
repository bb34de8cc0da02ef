#!/usr/bin/env python3
"""Our CPU kernel against PyTorch's CPU scaled_dot_product_attention, interleaved shape by shape
in one run, so both see the same machine state.

Usage: python3 scripts/bench_cpu_vs_torch.py --bin target/release/examples/bench_cpu
           [--threads 2,16] [--dtype f32,bf16,f16] [--seq 1024,4096] [--runs 5]
           [--decode 512,4096,32768]

Prefill: b=1, h=16, d=128, causal and not. For each shape: torch's median of `runs` (the better
of two such medians, as a warm-up can lose to frequency changes), then ours (the bench_cpu
binary, same thread count through RAYON_NUM_THREADS), then the ratio ours/torch (lower is
better). Ours runs twice: on the (b, s, h, d) tensors the flash-attn API takes, and on the same
shape viewed from (b, h, s, d) memory, the layout torch is given here.

Decode (s_q=1, GQA 32/8, d=128): ours and naive attention (bench_cpu decode) and our K/V stream
as a fraction of the read bandwidth bench_cpu measures at that thread count. Also one thread's
FMA peak and our one-thread prefill GFLOP/s against it.
Prints markdown tables.
"""
import argparse
import os
import subprocess
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
HEADS, DIM = 16, 128


def ours(binary, threads, *args):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run([binary, *map(str, args)], env=env, check=True, capture_output=True, text=True).stdout
    line = out.strip().splitlines()[-1]
    return dict(kv.split("=", 1) for kv in line.split())


def torch_ms(fn, runs):
    def median():
        fn()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2] * 1e3

    return min(median(), median())


def prefill(args, threads):
    print(f"\n### Prefill, {threads} threads (b=1, h={HEADS}, d={DIM}; ms, ratio = ours / torch)\n")
    print("| dtype | seq | causal | torch ms | ours ms | ratio | ours, heads contiguous | ratio |\n"
          "|---|---|---|---|---|---|---|---|")
    torch.set_num_threads(threads)
    for name in args.dtype.split(","):
        for s in map(int, args.seq.split(",")):
            for causal in (False, True):
                q, k, v = (torch.randn(1, HEADS, s, DIM).to(DTYPES[name]) for _ in range(3))
                with torch.no_grad():
                    t = torch_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.runs)
                common = ("prefill", "--dtype", name, "--seq", s, "--causal", int(causal), "--runs", args.runs)
                o = float(ours(args.bin, threads, *common)["ours_ms"])
                # The same call on torch's memory layout: each head's rows contiguous.
                c = float(ours(args.bin, threads, *common, "--layout", 1)["ours_ms"])
                print(f"| {name} | {s} | {str(causal).lower()} | {t:.2f} | {o:.2f} | {o / t:.2f} | {c:.2f} | {c / t:.2f} |",
                      flush=True)


def decode(args, threads):
    machine = ours(args.bin, threads, "machine")
    read = float(machine["read_gbs"])
    print(f"\n### Decode, {threads} threads (s_q=1, GQA 32/8, d={DIM}, b=1; read bandwidth {read:.1f} GB/s)\n")
    print("| dtype | s_k | ours ms | naive ms | ours K/V GB/s | of read BW |\n|---|---|---|---|---|---|")
    for name in args.dtype.split(","):
        for s in map(int, args.decode.split(",")):
            r = ours(args.bin, threads, "decode", "--dtype", name, "--seq", s, "--runs", args.runs)
            gbs = float(r["kv_gbs"])
            print(f"| {name} | {s} | {float(r['ours_ms']):.3f} | {float(r['naive_ms']):.3f} | {gbs:.1f} | {gbs / read:.2f} |",
                  flush=True)


def peak(args):
    m = ours(args.bin, 1, "machine")
    gflops = float(m["fma_peak_gflops_1t"])
    print(f"\n### One thread against the FMA peak ({m['isa']}: {gflops:.1f} GFLOP/s)\n")
    print("| seq | causal | ours ms | GFLOP/s | of peak |\n|---|---|---|---|---|")
    s = 2048
    for causal in (False, True):
        ms = float(ours(args.bin, 1, "prefill", "--seq", s, "--causal", int(causal), "--runs", 3)["ours_ms"])
        flops = 4 * s * s * DIM * HEADS * (0.5 if causal else 1.0)
        g = flops / (ms * 1e-3) / 1e9
        print(f"| {s} | {str(causal).lower()} | {ms:.1f} | {g:.1f} | {g / gflops:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--threads", default="2,16")
    ap.add_argument("--dtype", default="f32,bf16,f16")
    ap.add_argument("--seq", default="1024,4096")
    ap.add_argument("--decode", default="512,4096,32768")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: prefill,decode,peak")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    print(f"torch {torch.__version__}; {os.cpu_count()} logical CPUs")
    for threads in map(int, args.threads.split(",")):
        if "prefill" not in skip:
            prefill(args, threads)
        if "decode" not in skip:
            decode(args, threads)
    if "peak" not in skip:
        peak(args)


if __name__ == "__main__":
    main()
