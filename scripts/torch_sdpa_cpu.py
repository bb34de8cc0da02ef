#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention on the bench example's shapes, for comparison.

Usage: python3 scripts/torch_sdpa_cpu.py --threads 16 --seq 512,2048,4096 [--dtype f32,bf16] [--runs 3]
Prints one markdown row per (dtype, causal, seq): median ms over `runs` after a warm-up.
Layout as the bench: batch 1, heads 16, head dim 128 (torch wants (b, h, s, d)).
"""
import argparse
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def median_ms(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--seq", default="512,2048,4096")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| dtype | causal | seq | torch sdpa ms |\n|---|---|---|---|")
    for name in args.dtype.split(","):
        for causal in (False, True):
            for s in map(int, args.seq.split(",")):
                q, k, v = (torch.randn(1, args.heads, s, args.dim, dtype=DTYPES[name]) for _ in range(3))
                with torch.no_grad():
                    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.runs)
                print(f"| {name} | {str(causal).lower()} | {s} | {ms:.1f} |", flush=True)


if __name__ == "__main__":
    main()
