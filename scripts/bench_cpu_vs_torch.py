#!/usr/bin/env python3
"""Our CPU kernel against PyTorch's CPU scaled_dot_product_attention, interleaved shape by shape
in one run, so both see the same machine state.

Usage: python3 scripts/bench_cpu_vs_torch.py --bin target/release/examples/bench_cpu
           [--threads 2,16] [--dtype f32,bf16,f16] [--seq 1024,4096] [--runs 5] [--rounds 3]
           [--decode 512,4096,32768]

Prefill: b=1, h=16, d=128, causal and not. For each shape, `rounds` rounds back to back, each
timing torch (median of `runs`), ours (the bench_cpu binary, same thread count through
RAYON_NUM_THREADS, median of `runs`) and ours again on PyTorch's layout; each side keeps its
best round, and the ratio is ours/torch of those (lower is better). A shared machine slows
whole minutes at a time; the best of rounds taken in turn gives both sides its quiet moments,
and the `spread` column (torch's slowest round over its fastest) shows how loud it was. Ours
runs on the (b, s, h, d) tensors the flash-attn API takes and, in the second column, on the
same shape viewed from (b, h, s, d) memory, the layout torch is given here.

Decode (s_q=1, GQA 32/8, d=128): ours (best of `rounds`) and naive attention (bench_cpu
decode, once) and our K/V stream as a fraction of the read bandwidth bench_cpu measures at that
thread count (the best of `rounds` too). Also one thread's FMA peak and our one-thread prefill
GFLOP/s against it (best of `rounds`).
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
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2] * 1e3


def best_of(rounds, timers):
    """Runs every timer once per round, in turn; what each returned, round by round."""
    times = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            times[name].append(timer())
    return times


def prefill(args, threads):
    print(f"\n### Prefill, {threads} threads (b=1, h={HEADS}, d={DIM}; ms, best of {args.rounds} rounds; "
          "ratio = ours / torch)\n")
    print("| dtype | seq | causal | torch ms | ours ms | ratio | ours, heads contiguous | ratio | torch spread |\n"
          "|---|---|---|---|---|---|---|---|---|")
    torch.set_num_threads(threads)
    for name in args.dtype.split(","):
        for s in map(int, args.seq.split(",")):
            for causal in (False, True):
                q, k, v = (torch.randn(1, HEADS, s, DIM).to(DTYPES[name]) for _ in range(3))
                common = ("prefill", "--dtype", name, "--seq", s, "--causal", int(causal), "--runs", args.runs)

                def sdpa():
                    with torch.no_grad():
                        return torch_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.runs)

                times = best_of(args.rounds, {
                    "torch": sdpa,
                    "ours": lambda: float(ours(args.bin, threads, *common)["ours_ms"]),
                    # The same call on torch's memory layout: each head's rows contiguous.
                    "contiguous": lambda: float(ours(args.bin, threads, *common, "--layout", 1)["ours_ms"]),
                })
                t, o, c = (min(times[n]) for n in ("torch", "ours", "contiguous"))
                spread = max(times["torch"]) / t
                print(f"| {name} | {s} | {str(causal).lower()} | {t:.2f} | {o:.2f} | {o / t:.2f} | {c:.2f} | {c / t:.2f} "
                      f"| {spread:.2f} |", flush=True)


def decode(args, threads):
    read = max(float(ours(args.bin, threads, "machine")["read_gbs"]) for _ in range(args.rounds))
    print(f"\n### Decode, {threads} threads (s_q=1, GQA 32/8, d={DIM}, b=1; ours best of {args.rounds} rounds; "
          f"read bandwidth {read:.1f} GB/s, the best of as many)\n")
    print("| dtype | s_k | ours ms | naive ms | ours K/V GB/s | of read BW |\n|---|---|---|---|---|---|")
    for name in args.dtype.split(","):
        for s in map(int, args.decode.split(",")):
            common = ("decode", "--dtype", name, "--seq", s, "--runs", args.runs)
            naive = float(ours(args.bin, threads, *common)["naive_ms"])
            runs = [ours(args.bin, threads, *common, "--naive", 0) for _ in range(args.rounds)]
            best = min(runs, key=lambda r: float(r["ours_ms"]))
            gbs = float(best["kv_gbs"])
            print(f"| {name} | {s} | {float(best['ours_ms']):.3f} | {naive:.3f} | {gbs:.1f} | {gbs / read:.2f} |", flush=True)


def peak(args):
    machine = [ours(args.bin, 1, "machine") for _ in range(args.rounds)]
    gflops, isa = max(float(m["fma_peak_gflops_1t"]) for m in machine), machine[0]["isa"]
    print(f"\n### One thread against the FMA peak ({isa}: {gflops:.1f} GFLOP/s, the best of {args.rounds}; "
          f"ours best of {args.rounds} rounds)\n")
    print("| seq | causal | ours ms | GFLOP/s | of peak |\n|---|---|---|---|---|")
    s = 2048
    times = best_of(args.rounds, {
        causal: (lambda c=causal: float(ours(args.bin, 1, "prefill", "--seq", s, "--causal", int(c), "--runs", 3)["ours_ms"]))
        for causal in (False, True)
    })
    for causal in (False, True):
        ms = min(times[causal])
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
    ap.add_argument("--rounds", type=int, default=3)
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
