"""Other tiles for attention.attn_fwd (the `tl` kernel's prefill class) at one head dim on sm_90,
beside SDPA's cuDNN backend: each tile compiled as kernels/aot.py compiles the variant (its
signature, divisibility attributes and constexprs, padded or exact head dim), checked against
SDPA and timed in bursts of 20 calls, the sides taking turns (forwards, then backwards), 6 rounds.
f16, batch mode, q/k/v standard normal.

Needs one H100/H200, torch and triton 3.6. Run from the repository root:

    python3 scripts/jit_fwd_tiles.py D BxSxHxCAUSAL,... BM/BN/WARPS/STAGES,...
    python3 scripts/jit_fwd_tiles.py 40 2x4096x8x0,4x4096x51x1 128/64/4/3,64/64/4/3
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
import triton  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import aot  # noqa: E402
import attention  # noqa: E402


def compile_tile(dtype, d, bm, bn, warps, stages):
    """attn_fwd's flat prefill variant of head dim d (exact or padded) on sm_90 with another tile."""
    block_d = d if d in aot.SPLIT_DIMS else aot.tile_dim(d)
    fields = dict(tile="prefill", dtype=dtype, block_d=block_d, even_d=d == block_d, paged=False, extras=False,
                  ptr32=False)
    sig, attrs = aot.signature(attention.attn_fwd, aot.FWD_POINTERS, aot.FWD_FLOATS, aot.DTYPES[dtype])
    cx = aot.fwd_constexprs("sm_90", fields)
    cx.update(BLOCK_M=bm, BLOCK_N=bn)
    for k in cx: sig[k] = "constexpr"
    src = ASTSource(fn=attention.attn_fwd, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(src, target=aot.gpu_target("sm_90"), options={"num_warps": warps, "num_stages": stages}), cx

def main():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d = int(sys.argv[1]); shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
    tiles = [tuple(int(x) for x in t.split("/")) for t in sys.argv[3].split(",")]
    dtype = "fp16"; tdt = torch.float16
    kernels = []
    for t in tiles:
        try:
            k, cx = compile_tile(dtype, d, *t)
            kernels.append((t, k, cx))
            print(f"tile {t}: shared {k.metadata.shared}", flush=True)
        except Exception as e:
            print(f"tile {t}: compile failed {e}", flush=True)
    for (b, s, h, causal) in shapes:
        q = torch.randn(b, s, h, d, device="cuda", dtype=tdt)
        kk = torch.randn(b, s, h, d, device="cuda", dtype=tdt)
        v = torch.randn(b, s, h, d, device="cuda", dtype=tdt)
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2), is_causal=bool(causal)).transpose(1, 2)
        scale = d ** -0.5
        dummy = torch.zeros(2, device="cuda", dtype=torch.int32)
        lse = torch.empty(b, h, s, device="cuda")
        fault = torch.zeros(1, device="cuda", dtype=torch.int32)
        left, right = (s, 0) if causal else (-1, -1)
        runners = {}
        for (t, k, cx) in kernels:
            out = torch.empty_like(q)
            bm = t[0]
            grid = (math.ceil(s / bm), b * h, 1)
            args = [q, kk, v, out, lse, lse, lse, dummy, dummy, dummy, lse, dummy, fault, scale, 0.0,
                    q.stride(0), q.stride(1), q.stride(2), kk.stride(0), kk.stride(1), kk.stride(2),
                    v.stride(0), v.stride(1), v.stride(2), out.stride(1), out.stride(2), h * s, s, 0, 0,
                    0, s, s, s, b * s, s, s, h, h, d, left, right, 1, 0, 0, 0, 0, 0, 1, s]
            # The compiled launcher takes the constexprs too, in the signature's order.
            full = args + [cx[n] for n in attention.attn_fwd.arg_names[len(args):]]
            def run(k=k, grid=grid, full=full):
                k[grid](*full)
            run(); torch.cuda.synchronize()
            err = (out.float() - ref.float()).abs().max().item()
            runners[str(t)] = run
            print(f"  {b}x{s}x{h} causal={causal} tile {t} regs {k.n_regs} spills {k.n_spills}: max err {err:.2e} fault {fault.item()}", flush=True)
        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2), is_causal=bool(causal))
        runners["cudnn"] = cudnn
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        res = {n: [] for n in runners}
        for rnd in range(6):
            order = list(runners) if rnd % 2 == 0 else list(reversed(runners))
            for n in order:
                f = runners[n]
                for _ in range(3): f()
                st = torch.cuda.Event(enable_timing=True); en = torch.cuda.Event(enable_timing=True)
                st.record()
                for _ in range(20): f()
                en.record(); en.synchronize()
                res[n].append(st.elapsed_time(en) / 20)
        best = {n: min(v) for n, v in res.items()}
        med = {n: sorted(v)[len(v) // 2] for n, v in res.items()}
        for n in runners:
            print(f"  {b}x{s}x{h} causal={causal} {n}: {flops / best[n] / 1e9:.1f} TFLOP/s best, {flops / med[n] / 1e9:.1f} median, / cudnn {med['cudnn'] / med[n]:.3f}", flush=True)

if __name__ == "__main__":
    main()
