"""The GPU benchmark of the Triton path beside PyTorch, in one run, shape by shape.

    python3 scripts/bench_gpu.py BENCH_BINARY [--quick] [--prefill-only | --decode-only | --extras-only | --sd-only] [--baseline OLD_BINARY]
                                 [--rounds N] [--dims 64,128,256] [--lengths 512,4096] [--no-varlen]

BENCH_BINARY is the `bench_gpu` example (built with `--features cuda-verify` for NVIDIA or
`rocm` for AMD). Prefill: f16/bf16, d = 64, 128, 256 with h*d = 2048 (32, 16, 8 heads),
b*s = 16384 tokens, s = 256..16384 (64 short prompts to one long one), causal and not, our
TFLOP/s beside `scaled_dot_product_attention`'s flash backend (FA2) and its fastest backend for
the row (cuDNN, flash or memory-efficient); varlen batches of mixed prompt lengths beside SDPA on
nested (jagged) tensors. Each prefill row times ours (a `bench_gpu --serve` process), the
baseline and SDPA's backends in bursts of about 20 ms that take turns (`bench_timing.interleaved`:
the GPU's clock under load depends on what ran before), at least 7 x `--rounds N` bursts each,
and reports each one's median. `--dims` picks the dense prefill rows' head dims and `--lengths`
their prompt lengths (varlen runs with d = 128 only; `--no-varlen` leaves it out). `--baseline OLD_BINARY`
adds the prefill TFLOP/s and the decode times of another build (old beside new in the same run;
a build with `--serve`, from the commit that added it on); each prefill row then serves both
builds from two processes each, started in mirrored order (`bench_timing.mirrored`: with one
each, the one started second read up to 6% faster with the same binary in both places). Decode rows run the binary once per
shape (its own 7 bursts, then SDPA's). Decode: b = 1..64, 32 query / 8 k/v heads, d=128, s_k = 1k..128k, beside PyTorch's
fastest backend for it (cuDNN, memory-efficient or flash, enable_gqa), and the K/V bytes read
per second as a fraction of the GPU's device-to-device copy bandwidth (read + write); paged
decode (pages of 16 and 256, shuffled table) has no PyTorch counterpart, so its rows stand
beside PyTorch's fastest flat decode of the same shape (issue 27's bar). Decode with extras
(sliding windows, softcap, ALiBi, bf16, other GQA groups, the head dims 80 and 96 of phi-2 and
Phi-3-mini; `--decode-only` includes it) stands
beside PyTorch's best for each: SDPA over the window's keys, flex_attention for the score mods.
Stable Diffusion rows (`--sd-only`, and in every full run): the attention calls of SD 1.5's UNet
at 512 x 512, batch 2 (self-attention over 4096, 1024, 256 and 64 tokens at d = 40, 80, 160, 160,
8 heads, and cross-attention of each with 77 text keys), and SDXL's (4096 x 10 heads and 1024 x 20
at d = 64), beside SDPA's backends; the baseline on the self-attention rows only (its binary may
predate the key length of cross-attention).
"""

import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_timing import Served, burst_size, interleaved, mirrored


def timed(fn, reps=7):
    """Median seconds per call of `reps` bursts of about bench_timing.BURST_SECONDS, one after
    another (decode rows and the copy bandwidth; prefill rows take turns: `interleaved`)."""
    fn()
    burst = torch_burst(fn)
    size = burst_size(burst)
    return statistics.median(burst(size) for _ in range(reps))


def latency(fn, reps=51):
    """Median launch-to-result time of one call (launch, then wait for it)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def ours(binary, *args):
    out = subprocess.run([binary, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{binary} {args}: {out.stderr.strip()}")
    return dict(kv.split("=") for kv in out.stdout.split())


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / timed(lambda: y.copy_(x)) / 1e9


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    binary = sys.argv[1]
    quick = "--quick" in sys.argv
    baseline = option("--baseline", None)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bw = copy_bandwidth()
    print(f"# device-to-device copy bandwidth (read + write): {bw:.0f} GB/s")
    if "--sd-only" in sys.argv:
        stable_diffusion(binary, baseline)
        return
    if "--decode-only" not in sys.argv and "--extras-only" not in sys.argv:
        prefill(binary, baseline, quick)
        if not quick:
            stable_diffusion(binary, baseline)
    if "--prefill-only" not in sys.argv and "--extras-only" not in sys.argv:
        decode(binary, baseline, quick, bw)
    if "--prefill-only" not in sys.argv:
        extras(binary, baseline, quick, bw)


PREFILL_BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                    ("efficient", SDPBackend.EFFICIENT_ATTENTION))


def torch_prefill(q, k, v, causal):
    """{backend: one call} of SDPA's backends that take the call."""
    calls = {}
    for name, backend in PREFILL_BACKENDS:
        def call(backend=backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            call()
        except RuntimeError:
            continue
        calls[name] = call
    return calls


def torch_burst(fn):
    """fn as a burst timer like Served: seconds per call of n calls closed by one synchronize."""
    def burst(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n
    return burst


def prefill(binary, baseline, quick):
    """Prefill at 16384 tokens per call, from many short prompts (64 x 256) to one long one
    (1 x 16384), h * d = 2048: ours beside FA2 (SDPA's flash backend) and SDPA's fastest backend
    for the row; then varlen batches of mixed lengths."""
    old_col = " baseline TFLOP/s |" if baseline else ""
    print(f"| prefill | dtype | d | b x s x h | causal |{old_col} ours TFLOP/s | FA2 TFLOP/s | best TFLOP/s (backend) | ours / FA2 | ours / best |")
    print("|---|---|---|---|---|" + ("---|" if baseline else "") + "---|---|---|---|---|")
    lengths = (512, 4096) if quick else (256, 512, 1024, 2048, 4096, 8192, 16384)
    lengths = [int(s) for s in option("--lengths", ",".join(map(str, lengths))).split(",")]
    dims = [int(d) for d in option("--dims", "64,128,256").split(",")]
    for dtype_name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        for d, s in ((d, s) for d in dims for s in lengths):
            b, h = 16384 // s, 2048 // d
            for causal in (False, True):
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                args = ("prefill", dtype_name, b, s, h, d, int(causal))
                row = f"| | {dtype_name} | {d} | {b} x {s} x {h} | {causal} |"
                print(prefill_row(binary, baseline, args, row, flops, lambda: torch_prefill(q, k, v, causal)))
                del q, k, v
    if "--no-varlen" not in sys.argv:
        varlen(binary, baseline, quick)


def prefill_row(binary, baseline, args, head, flops, torch_calls, baseline_column=None):
    """One table row: ours (and the baseline) beside FA2 and the fastest of SDPA's backends
    (`torch_calls()`: {backend: one call}), each the median of at least 7 x `--rounds` bursts
    taking turns with the others' (`interleaved`). `baseline_column`: the table has a baseline
    column (default: when there is a baseline), left empty for a row without one."""
    if baseline_column is None:
        baseline_column = baseline is not None
    rounds = int(option("--rounds", "1"))
    if baseline:
        builds = {"ours": binary, "baseline": baseline}
        served = mirrored(lambda name: Served(builds[name], args), list(builds))
    else:
        served = {"ours": [Served(binary, args)]}
    bursts = {name: torch_burst(fn) for name, fn in torch_calls().items()}
    times = interleaved({**bursts, **served}, 7 * rounds)
    for procs in served.values():
        for proc in procs:
            proc.close()
    ours_tf = flops / times.pop("ours") / 1e12
    old = f" {flops / times.pop('baseline') / 1e12:.1f} |" if baseline else (" |" if baseline_column else "")
    fa2_tf = flops / times["flash"] / 1e12 if "flash" in times else float("nan")
    best = min(times, key=times.get)
    best_tf = flops / times[best] / 1e12
    return (f"{head}{old} {ours_tf:.1f} | {fa2_tf:.1f} | {best_tf:.1f} ({best}) | {ours_tf / fa2_tf:.2f} | "
            f"{ours_tf / best_tf:.2f} |")


# (model, tokens, heads, head dim) of the UNets' attention at 512 x 512 (SD 1.5) and 1024 x 1024
# (SDXL, whose 64 x 64 latent has 4096 tokens at its highest-resolution attention).
SD_ATTENTION = (("SD 1.5", 4096, 8, 40), ("SD 1.5", 1024, 8, 80), ("SD 1.5", 256, 8, 160), ("SD 1.5", 64, 8, 160),
                ("SDXL", 4096, 10, 64), ("SDXL", 1024, 20, 64))
SD_TEXT_KEYS = 77


def stable_diffusion(binary, baseline):
    """The UNets' attention calls, batch 2, not causal: self-attention, then SD 1.5's
    cross-attention with SD_TEXT_KEYS keys."""
    print()
    old_col = " baseline TFLOP/s |" if baseline else ""
    print(f"| diffusion | dtype | b x s_q x s_k x h, d |{old_col} ours TFLOP/s | FA2 TFLOP/s | best TFLOP/s (backend) | ours / FA2 | ours / best |")
    print("|---|---|---|" + ("---|" if baseline else "") + "---|---|---|---|---|")
    b = 2
    rows = [(m, s, s, h, d) for m, s, h, d in SD_ATTENTION] + [
        (m, s, SD_TEXT_KEYS, h, d) for m, s, h, d in SD_ATTENTION if m == "SD 1.5"]
    for dtype_name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        for model, s_q, s_k, h, d in rows:
            q = torch.randn(b, h, s_q, d, device="cuda", dtype=dtype)
            k, v = (torch.randn(b, h, s_k, d, device="cuda", dtype=dtype) for _ in range(2))
            flops = 4 * b * h * s_q * s_k * d
            args = ("prefill", dtype_name, b, s_q, h, d, 0) + ((s_k,) if s_k != s_q else ())
            what = "self" if s_k == s_q else "cross"
            head = f"| {model} {what} | {dtype_name} | {b} x {s_q} x {s_k} x {h}, {d} |"
            print(prefill_row(binary, baseline if s_k == s_q else None, args, head, flops,
                              lambda: torch_prefill(q, k, v, False), baseline_column=baseline is not None))
            del q, k, v


def mixed_lengths(count, lo, hi, seed):
    """`count` prompt lengths in [lo, hi), a fixed pseudo-random draw (the same every run)."""
    state, out = seed, []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(lo + (state >> 33) % (hi - lo))
    return out


def varlen(binary, baseline, quick):
    """Varlen prefill (packed prompts of mixed lengths, 32 heads, d = 128): PyTorch takes them as
    a nested (jagged) tensor, the form its SDPA backends accept for varlen."""
    print()
    old_col = " baseline TFLOP/s |" if baseline else ""
    print(f"| varlen prefill (32 heads, d = 128) | dtype | prompts (lengths) | tokens | causal |{old_col} ours TFLOP/s | FA2 TFLOP/s | best TFLOP/s (backend) | ours / FA2 | ours / best |")
    print("|---|---|---|---|---|" + ("---|" if baseline else "") + "---|---|---|---|---|")
    batches = [mixed_lengths(64, 32, 512, 1), mixed_lengths(16, 256, 2048, 2)] if quick else [
        mixed_lengths(128, 16, 256, 1), mixed_lengths(64, 32, 512, 1), mixed_lengths(16, 256, 2048, 2),
        mixed_lengths(8, 512, 4096, 3)]
    h, d = 32, 128
    for dtype_name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        for lens in batches:
            total = sum(lens)
            offsets = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], device="cuda")
            q, k, v = (torch.nested.nested_tensor_from_jagged(torch.randn(total, h, d, device="cuda", dtype=dtype),
                                                              offsets).transpose(1, 2) for _ in range(3))
            for causal in (False, True):
                if not torch_prefill(q, k, v, causal):
                    print(f"# varlen {dtype_name} {len(lens)} prompts: no SDPA backend took the nested tensors")
                    continue
                flops = sum(4 * h * n * n * d for n in lens) / (2 if causal else 1)
                args = ("varlen", dtype_name, h, d, int(causal), ",".join(map(str, lens)))
                head = f"| | {dtype_name} | {len(lens)} ({min(lens)}..{max(lens)}) | {total} | {causal} |"
                print(prefill_row(binary, baseline, args, head, flops, lambda: torch_prefill(q, k, v, causal)))
            del q, k, v


def decode(binary, baseline, quick, bw):
    old_col, old_sep = (" baseline ms | ours / baseline |", "---|---|") if baseline else ("", "")

    def old(*args, ms):
        return f" {(t := ours(baseline, *args)['ms'])} | {float(ms) / float(t):.2f} |" if baseline else ""

    print()
    print(f"| decode (GQA 32/8, d=128, f16) | b | s_k | splits |{old_col} ours ms | torch ms (backend) | ours / torch time | ours K/V GB/s | fraction of copy bandwidth | latency us, ours / torch |")
    print(f"|---|---|---|---|{old_sep}---|---|---|---|---|---|")
    shapes = [(1, 4096), (1, 131072), (16, 4096), (16, 131072)] if quick else (
        [(1, s_k) for s_k in (1024, 2048, 4096, 16384, 32768, 131072)]
        + [(b, s_k) for b in (4, 16) for s_k in (4096, 16384, 32768, 131072)] + [(64, 1024), (64, 4096)])
    for b, s_k in shapes:
        args = ("decode", "f16", b, s_k, 32, 8, 128)
        r = ours(binary, *args)
        t_torch, backend, lat_torch = torch_decode(b, s_k)
        ratio = float(r["ms"]) / (t_torch * 1e3)
        print(f"| | {b} | {s_k} | {r['splits']} |{old(*args, ms=r['ms'])} {r['ms']} | {t_torch * 1e3:.4f} ({backend}) | {ratio:.2f} | "
              f"{r['kv_gbps']} | {float(r['kv_gbps']) / bw:.2f} | {r['latency_us']} / {lat_torch * 1e6:.1f} |")
    print()
    print(f"| paged decode (GQA 32/8, d=128, f16; PyTorch has no paged SDPA: its best flat decode) | b | s_k | page | splits |{old_col} ours ms | torch flat ms (backend) | ours / torch time | K/V GB/s | fraction of copy bandwidth |")
    print(f"|---|---|---|---|---|{old_sep}---|---|---|---|---|")
    for b in ((4,) if quick else (1, 4, 16)):
        for s_k in ((32768,) if quick else (32768, 131072)):
            t_torch, backend, _ = torch_decode(b, s_k)
            for page in (16, 256):
                args = ("paged", "f16", b, s_k, 32, 8, 128, page)
                r = ours(binary, *args)
                ratio = float(r["ms"]) / (t_torch * 1e3)
                print(f"| | {b} | {s_k} | {page} | {r['splits']} |{old(*args, ms=r['ms'])} {r['ms']} | {t_torch * 1e3:.4f} ({backend}) | {ratio:.2f} | "
                      f"{r['kv_gbps']} | {float(r['kv_gbps']) / bw:.2f} |")


def extras(binary, baseline, quick, bw):
    """Decode with the features a model adds, beside PyTorch's best for the same call: a sliding
    window is a slice of the cache at decode (SDPA over the last LEFT + 1 keys); softcap and ALiBi
    have no SDPA backend, so flex_attention's compiled decode takes them. K/V GB/s counts the keys
    a row sees."""
    old_col, old_sep = (" baseline ms | ours / baseline |", "---|---|") if baseline else ("", "")
    print()
    print(f"| decode with extras | b | s_k | heads | d | dtype | extras | splits |{old_col} ours ms | torch ms (how) | ours / torch time | K/V GB/s | fraction of copy bandwidth |")
    print(f"|---|---|---|---|---|---|---|---|{old_sep}---|---|---|---|---|")
    rows = [(1, 32768, 32, 8, 128, "f16", ("--window", 4096)), (4, 32768, 32, 8, 128, "f16", ("--window", 4096)),
            (1, 131072, 32, 8, 128, "f16", ("--window", 1024)), (16, 32768, 32, 8, 128, "f16", ("--window", 1024)),
            (4, 32768, 32, 8, 128, "f16", ("--softcap", 50)), (4, 32768, 32, 8, 128, "f16", ("--alibi",)),
            (1, 8192, 16, 8, 256, "bf16", ("--softcap", 50)), (4, 8192, 16, 8, 256, "bf16", ("--softcap", 50)),
            (4, 32768, 32, 8, 128, "bf16", ()), (4, 16384, 32, 32, 128, "f16", ()), (4, 32768, 32, 4, 128, "bf16", ()),
            # The split head dims' decode: phi-2 (32 heads of 80) and Phi-3-mini (32 of 96), no GQA.
            (1, 4096, 32, 32, 80, "f16", ()), (8, 4096, 32, 32, 80, "f16", ()),
            (1, 4096, 32, 32, 96, "bf16", ()), (8, 4096, 32, 32, 96, "bf16", ())]
    for b, s_k, h, h_k, d, dtype, opts in rows[:3] if quick else rows:
        args = ("decode", dtype, b, s_k, h, h_k, d, *opts)
        r = ours(binary, *args)
        t_torch, how = torch_extras(b, s_k, h, h_k, d, dtype, opts)
        old = ""
        if baseline:
            t_old = ours(baseline, *args)["ms"]
            old = f" {t_old} | {float(r['ms']) / float(t_old):.2f} |"
        ratio = f"{float(r['ms']) / (t_torch * 1e3):.2f}" if t_torch else "-"
        torch_ms = f"{t_torch * 1e3:.4f}" if t_torch else "-"
        print(f"| | {b} | {s_k} | {h}/{h_k} | {d} | {dtype} | {' '.join(map(str, opts)) or 'none'} | {r['splits']} |{old} {r['ms']} | "
              f"{torch_ms} ({how}) | {ratio} | {r['kv_gbps']} | {float(r['kv_gbps']) / bw:.2f} |")


def torch_extras(b, s_k, h, h_k, d, dtype, opts):
    """PyTorch's time for one `extras` row: (seconds per call or None, how)."""
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    if not opts or opts[0] == "--window":
        keys = s_k if not opts else min(s_k, opts[1] + 1)
        t, backend, _ = torch_decode(b, keys, h_k, dtype, h, d)
        return t, backend if not opts else f"{backend}, last {keys} keys"
    from torch.nn.attention.flex_attention import flex_attention
    q = torch.randn(b, h, 1, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, h_k, s_k, d, device="cuda", dtype=dtype) for _ in range(2))
    if opts[0] == "--softcap":
        cap = float(opts[1])
        score_mod = lambda score, b_, h, i, j: cap * torch.tanh(score / cap)
    else:
        slopes = torch.exp2(-8.0 * torch.arange(1, h + 1, device="cuda") / h)
        score_mod = lambda score, b_, h, i, j: score - slopes[h] * (i + s_k - 1 - j).abs()
    flex = torch.compile(flex_attention)
    try:
        return timed(lambda: flex(q, k, v, score_mod=score_mod, enable_gqa=True)), "flex_attention"
    except Exception as e:  # noqa: BLE001 - a missing compiler leaves the cell empty, not the table
        print(f"# flex_attention failed: {type(e).__name__}: {str(e)[:200]}")
        return None, "flex_attention failed"


def torch_decode(b, s_k, h_k=8, dtype=torch.float16, h=32, d=128):
    """PyTorch's fastest decode for one query row against GQA h/h_k K/V: cuDNN's SDPA with
    enable_gqa where it takes the call, else the memory-efficient backend. (seconds per call in
    a burst, backend, launch-to-result seconds of one call)"""
    q = torch.randn(b, h, 1, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, h_k, s_k, d, device="cuda", dtype=dtype) for _ in range(2))
    best = None
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                t = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        except RuntimeError:
            continue
        if best is None or t < best[0]:
            best = (t, name, backend)
    with sdpa_kernel(best[2]):
        lat = latency(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    return best[0], best[1], lat

if __name__ == "__main__":
    main()
