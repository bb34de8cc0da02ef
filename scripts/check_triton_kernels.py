"""Checks kernels/attention.py directly from Python on any GPU with PyTorch + Triton (CUDA or
ROCm builds): random batch / varlen / paged calls with GQA, windows, ALiBi, softcap,
mm_prefix_ranges, padded head dims and key splits, against an f32 reference written from the
crate's semantics. A kernel-level check only; the crate's own GPU suite is tests/gpu_triton.rs.

    python3 scripts/check_triton_kernels.py [--seed N] [--cases N]
"""

import argparse
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
import attention  # noqa: E402


def reference(q, k, v, scale, left, right, softcap, slopes, ranges):
    """q (s_q, h, d), k/v (s_k, h_k, d) of one sequence -> out (s_q, h, d), lse (h, s_q)."""
    s_q, h, _ = q.shape
    s_k, h_k, _ = k.shape
    g = h // h_k
    kk = k.float().repeat_interleave(g, dim=1)
    vv = v.float().repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(s_q, device=q.device)[:, None] + s_k - s_q
    j = torch.arange(s_k, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes[:, None, None] * (pos - j).abs()[None].float()
    lo = torch.zeros_like(pos) if left < 0 else (pos - left).clamp(min=0)
    hi = torch.full_like(pos, s_k) if right < 0 else (pos + right + 1).clamp(min=0, max=s_k)
    vis = (j >= lo) & (j < hi)
    for (a, b) in ranges:
        if a < b:
            holds = (pos >= a) & (pos < b)
            vis = vis | (holds & (j >= max(a, 0)) & (j < min(b, s_k)))
    s = s.masked_fill(~vis[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(s), torch.exp(s - lse[..., None]))
    out = torch.einsum("hqk,khd->qhd", p, vv)
    return out, lse


def run_case(rng, dev, case):
    mode = rng.choice(["batch", "varlen", "paged"])
    dtype = rng.choice([torch.float16, torch.bfloat16])
    d = rng.choice([32, 40, 64, 72, 96, 128, 160, 256, 16])
    h_k = rng.choice([1, 2, 3])
    g = rng.choice([1, 2, 4, 5])
    h = h_k * g
    b = rng.choice([1, 2, 3])
    decode = rng.random() < 0.3
    lens = []
    for _ in range(b):
        sq = rng.choice([1, 2, 5]) if decode else rng.choice([0, 1, 17, 64, 113, 200])
        sk = rng.choice([0, 1, 33, 128, 203, 700])
        lens.append((sq, sk))
    if mode == "batch":
        lens = [lens[0]] * b
    scale = rng.choice([d ** -0.5, 0.3, -0.2])
    kind = rng.choice(["none", "causal", "window", "left", "right"])
    max_k = max(l[1] for l in lens)
    left, right = {"none": (-1, -1), "causal": (max_k, 0), "window": (rng.randint(0, 50), rng.randint(0, 50)),
                   "left": (rng.randint(0, 60), max_k), "right": (max_k, rng.randint(0, 60))}[kind]
    extras = rng.random() < 0.4
    softcap = rng.choice([None, 5.0, 30.0]) if extras else None
    alibi = extras and mode != "paged" and rng.random() < 0.5
    mm = extras and mode == "paged" and rng.random() < 0.5
    # The plain variants fold the scale into the exponent after the row maximum, which holds for
    # a positive normal scale x log2(e) only: the host runs other scales with the EXTRAS code
    # (src/triton/select.rs, needs_extras), and so does this check.
    qk_scale = scale * math.log2(math.e)
    extras = extras or not (qk_scale > 0 and qk_scale >= 2.0 ** -126)
    # Every key tile in one loop, as the short prefill tile compiles it (kernels/aot.py).
    one_loop = rng.random() < 0.3
    splits = rng.choice([1, 1, 2, 3, 8])
    block_d = max(32, 1 << (d - 1).bit_length())
    block_m, block_n, warps = (16, 64, 4) if decode and not extras else ((64, 64, 4) if block_d == 256 else (128, 64, 8 if block_d >= 128 else 4))
    split_len = max(block_n, math.ceil(max(max_k, 1) / splits / block_n) * block_n)
    splits = max(1, math.ceil(max(max_k, 1) / split_len))

    qs = [torch.randn(sq, h, d, device=dev, dtype=dtype) for sq, _ in lens]
    ks = [torch.randn(sk, h_k, d, device=dev, dtype=dtype) for _, sk in lens]
    vs = [torch.randn(sk, h_k, d, device=dev, dtype=dtype) for _, sk in lens]
    slopes = torch.rand(h, device=dev) * 0.5 if alibi else None
    ranges = []
    if mm:
        ranges = [[(rng.randint(-5, 50), rng.randint(0, 120)) for _ in range(2)] for _ in range(b)]
    dummy_i32 = torch.zeros(2, device=dev, dtype=torch.int32)
    cu_q = torch.tensor([0] + list(itertools_acc([l[0] for l in lens])), device=dev, dtype=torch.int32)
    cu_k = torch.tensor([0] + list(itertools_acc([l[1] for l in lens])), device=dev, dtype=torch.int32)
    page = 0
    table = dummy_i32
    stride_bt = 0
    if mode == "batch":
        q = torch.stack(qs)  # (b, s, h, d)
        k = torch.stack(ks).transpose(1, 2).contiguous().transpose(1, 2) if rng.random() < 0.5 else torch.stack(ks)
        v = torch.stack(vs)
        sqs, sks = lens[0]
        qst = (q.stride(0), q.stride(1), q.stride(2))
        kst = (k.stride(0), k.stride(1), k.stride(2))
        vst = (v.stride(0), v.stride(1), v.stride(2))
        rows_per_batch, total_rows = sqs, b * sqs
        lse = torch.empty(b, h, sqs, device=dev)
        lse_strides = (h * sqs, sqs)
        is_varlen = 0
    else:
        q = torch.cat(qs)
        total_rows, rows_per_batch, sqs, sks = q.shape[0], 0, 0, 0
        qst = (0, q.stride(0), q.stride(1))
        lse = torch.empty(h, total_rows, device=dev)
        lse_strides = (0, total_rows)
        is_varlen = 1
        if mode == "varlen":
            k, v = torch.cat(ks), torch.cat(vs)
            kst = (0, k.stride(0), k.stride(1))
            vst = (0, v.stride(0), v.stride(1))
        else:
            page = rng.choice([1, 7, 16, 32, 256])
            need = [math.ceil(sk / page) for _, sk in lens]
            nblocks = sum(need) + 3
            perm = torch.randperm(nblocks).tolist()
            maxb = max(max(need), 1)
            table_l = torch.zeros(b, maxb, dtype=torch.int32)
            k = torch.randn(nblocks, page, h_k, d, device=dev, dtype=dtype)
            v = torch.randn(nblocks, page, h_k, d, device=dev, dtype=dtype)
            c = 0
            for bi, (_, sk) in enumerate(lens):
                for n in range(need[bi]):
                    blk = perm[c]; c += 1
                    table_l[bi, n] = blk
                    rows = min(page, sk - n * page)
                    k[blk, :rows] = ks[bi][n * page:n * page + rows]
                    v[blk, :rows] = vs[bi][n * page:n * page + rows]
            table = table_l.to(dev)
            stride_bt = table.stride(0)
            kst = (k.stride(0), k.stride(1), k.stride(2))
            vst = (v.stride(0), v.stride(1), v.stride(2))
            cu_k = cu_k.clone()
    out = torch.full((total_rows, h, d), float("nan"), device=dev, dtype=dtype)
    mm_t = torch.tensor(ranges, device=dev, dtype=torch.int32) if mm else dummy_i32
    oacc = torch.empty(splits, total_rows, h, d, device=dev)
    lacc = torch.empty(splits, total_rows, h, device=dev)
    fault = torch.zeros(1, device=dev, dtype=torch.int32)
    # The bounds the kernels check the side tensors against (src/triton/marshal.rs): k/v rows
    # and keys per sequence, the page divisor, the cache's blocks.
    if mode == "batch":
        seqlen_q, seqlen_k, kv_rows, kv_len_cap, num_blocks = sqs, sks, sks, sks, 0
    else:
        seqlen_q, seqlen_k = max(l[0] for l in lens), max_k
        kv_rows = 2**31 - 1 if mode == "paged" else k.shape[0]
        kv_len_cap = min(max_k, maxb * page) if mode == "paged" else max_k
        num_blocks = nblocks if mode == "paged" else 0
    magic = 0xFFFFFFFF // max(page, 1)
    page_magic = magic - 2**32 if magic >= 2**31 else magic
    grid = (math.ceil(max(max(l[0] for l in lens), 1) * g / block_m), b * h_k, splits)
    attention.attn_fwd[grid](
        q, k, v, out, lse, oacc, lacc, cu_q, cu_k, table, slopes if alibi else lse, mm_t, fault,
        scale, softcap or 0.0, *qst, *kst, *vst, h * d, d, *lse_strides, stride_bt, mm_t.stride(0) if mm else 0,
        is_varlen, seqlen_q, seqlen_k, rows_per_batch, total_rows, kv_rows, kv_len_cap, h, h_k, d, left, right,
        max(page, 1), page_magic, num_blocks,
        int(softcap is not None), int(alibi), len(ranges[0]) if mm else 0, splits, split_len,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, EVEN_D=(d == block_d), PAGED=(mode == "paged"),
        EXTRAS=extras, PAGE_TILES=(mode == "paged" and torch.version.hip is None),
        FOLD_SCALE=torch.version.hip is not None, ONE_LOOP=one_loop, num_warps=warps, num_stages=1)
    if splits > 1:
        attention.attn_merge[(max(max(l[0] for l in lens), 1) * g, b * h_k)](
            out, lse, oacc, lacc, cu_q, cu_k, h * d, d, *lse_strides,
            is_varlen, seqlen_q, seqlen_k, rows_per_batch, total_rows, kv_rows, kv_len_cap, h, h_k, d, splits,
            BLOCK_S=2048 // block_d, BLOCK_D=block_d, num_warps=4)
    torch.cuda.synchronize()
    if fault.item() != 0:
        print(f"FAIL case {case}: fault word {fault.item()} on valid side tensors")
        return False, float("inf")
    worst = 0.0
    row = 0
    for bi, (sq, sk) in enumerate(lens):
        ref_o, ref_l = reference(qs[bi], ks[bi], vs[bi], scale, left, right, softcap, slopes, ranges[bi] if mm else [])
        if mode == "batch":
            got_o = out[row:row + sq].float(); got_l = lse[bi]
        else:
            got_o = out[row:row + sq].float(); got_l = lse[:, row:row + sq]
        row += sq
        if sq == 0:
            continue
        err = (got_o - ref_o).abs().max().item()
        tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
        tol *= max(1.0, ref_o.abs().max().item())
        fin = torch.isfinite(ref_l)
        lse_ok = torch.equal(torch.isinf(got_l), ~fin) and (got_l[fin] - ref_l[fin]).abs().max().item() <= 1e-3 * (1 + ref_l[fin].abs().max().item()) if fin.any() else torch.isinf(got_l).all().item()
        worst = max(worst, err / tol)
        if not (err <= tol) or not lse_ok:
            print(f"FAIL case {case}: {mode} {dtype} d={d} h={h}/{h_k} lens={lens} win=({left},{right}) softcap={softcap} "
                  f"alibi={alibi} mm={ranges if mm else None} splits={splits} decode={decode} page={page} one_loop={one_loop}: "
                  f"seq {bi} err {err:.3e} tol {tol:.1e} lse_ok {lse_ok}")
            return False, worst
    return True, worst


def itertools_acc(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    ap.add_argument("--cases", type=int, default=200)
    a = ap.parse_args()
    print(f"seed {a.seed}, triton {attention.triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    fails = 0
    worst = 0.0
    for c in range(a.cases):
        ok, w = run_case(rng, "cuda", c)
        fails += not ok
        worst = max(worst, w)
    print(f"{a.cases - fails} passed, {fails} failed (worst err/tol {worst:.3f})")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
