"""JIT check and timing of the sm_90 split-head-dim kernels (d = 80, 96, 160; kernels/aot.py
SPLIT_DIMS): the warp-specialized `attention_ws.attn_fwd_tma_ws_split` beside the one-warpgroup
`attention_tma.attn_fwd_tma_split` (the prefill class tma.rs launches today) and PyTorch's SDPA
(cuDNN and flash backends).

Needs one H100/H200, torch and triton 3.6 (no network). Run from the repository root:

    python scripts/jit_ws_split.py            # correctness, then the timing table
    python scripts/jit_ws_split.py --sweep    # also other warp-specialized tiles (WS_SWEEP)
    python scripts/jit_ws_split.py --compile-only DIR   # no GPU: sm_90 cubins, registers, spills

The kernels are JIT-compiled without Triton's specialization of integer arguments (`aot_like`),
as kernels/aot.py builds them, and timed in CUDA graphs.

The descriptors and scalars are those src/triton/tma.rs (`views`, `tma_args`) and
src/triton/marshal.rs (`fwd_args`) pass in batch mode: 2-D views [rows, columns] of q, k and v
(a row per token, sequence b from row b * seqlen, head h from column h * head_dim), boxes of
64 columns with the 128-byte swizzle for the head dim's power-of-two part, and one box of the
tail's 16 or 32 columns (Triton's NVMMA layout for it: 32- or 64-byte swizzle) for the rest.
Exits 1 if any correctness check fails.
"""

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))

from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

import attention_tma  # noqa: E402
import attention_ws  # noqa: E402

if not {"--compile-only", "-h", "--help"} & set(sys.argv):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

SPLIT_DIMS = {80: (64, 16), 96: (64, 32), 160: (128, 32)}
# attn_fwd_tma_split's tile (kernels/aot.py TMA_TILES ("sm90", "prefill")): BLOCK_M, BLOCK_N, warps, stages.
SPLIT_TILE = (64, 64, 4, 2)
# The warp-specialized tiles: BLOCK_M (2 or 3 consumers of 64 rows), BLOCK_N, STAGES.
WS_TILES = {80: (128, 128, 2), 96: (128, 128, 2), 160: (128, 64, 2)}
# Three consumers (160 registers each) spill at d = 80 192x128, d = 96 192x64 and d = 160 192x64
# (sm_90 cubins, triton 3.6: STL/LDL in the consumers), so only d = 80 tries them.
WS_SWEEP = {80: [(128, 128, 3), (128, 64, 3), (192, 64, 3)], 96: [(128, 128, 3), (128, 64, 3)],
            160: [(128, 64, 3), (128, 128, 2)]}
CONSUMER_ROWS = 64
DTYPES = {"fp16": ("float16", gl.float16), "bf16": ("bfloat16", gl.bfloat16)}


def ws_maxnreg(block_m):
    """kernels/aot.py's ws_maxnreg: the registers per thread the warp-specialized kernel is compiled with."""
    warps = (block_m // CONSUMER_ROWS + 1) * 4
    return 65536 // (warps * 32) // 8 * 8


def descriptor(t2d, rows, cols, col_parts, box_rows, gdt):
    """The descriptors of one tensor's 2-D view (tma.rs `views`): the power-of-two part's and the tail's."""
    head_d, head_d2 = col_parts
    out = []
    for width in (head_d, head_d2):
        layout = gl.NVMMASharedLayout.get_default_for([box_rows, width], gdt)
        out.append(TensorDescriptor(t2d, [rows, cols], [t2d.stride(0), 1], [box_rows, width], layout))
    return out


class Call:
    """One batch-mode call: q (b, sq, h, d), k/v (b, sk, hk, d), contiguous; window_right 0 (causal,
    the diagonal at the bottom right as flash-attn's) or -1."""

    def __init__(self, b, sq, sk, h, hk, d, dtype, causal, seed=0):
        torch.manual_seed(seed)
        tdt, self.gdt = DTYPES[dtype]
        tdt = getattr(torch, tdt)
        self.b, self.sq, self.sk, self.h, self.hk, self.d, self.causal = b, sq, sk, h, hk, d, causal
        self.dtype = dtype
        dev = "cuda"
        self.q = torch.randn(b, sq, h, d, device=dev, dtype=tdt)
        self.k = torch.randn(b, sk, hk, d, device=dev, dtype=tdt)
        self.v = torch.randn(b, sk, hk, d, device=dev, dtype=tdt)
        self.out = torch.full((b * sq, h, d), float("nan"), device=dev, dtype=tdt)
        self.lse = torch.full((b, h, sq), float("nan"), device=dev, dtype=torch.float32)
        self.fault = torch.zeros(1, device=dev, dtype=torch.int32)
        self.cu = torch.zeros(b + 1, device=dev, dtype=torch.int32)  # unread in batch mode (tma.rs passes null)
        self.descs = {}

    def reset(self):
        self.out.fill_(float("nan"))
        self.lse.fill_(float("nan"))
        self.fault.zero_()

    def args(self, box_q, box_kv):
        """attn_fwd_tma_split's / attn_fwd_tma_ws_split's arguments, by name, as tma.rs passes them."""
        key = (box_q, box_kv)
        if key not in self.descs:
            parts = SPLIT_DIMS[self.d]
            q2d = self.q.view(self.b * self.sq, self.h * self.d)
            k2d = self.k.view(self.b * self.sk, self.hk * self.d)
            v2d = self.v.view(self.b * self.sk, self.hk * self.d)
            q1, q2 = descriptor(q2d, self.b * self.sq, self.h * self.d, parts, box_q, self.gdt)
            k1, k2 = descriptor(k2d, self.b * self.sk, self.hk * self.d, parts, box_kv, self.gdt)
            v1, v2 = descriptor(v2d, self.b * self.sk, self.hk * self.d, parts, box_kv, self.gdt)
            self.descs[key] = (q1, k1, v1, q2, k2, v2)
        q1, k1, v1, q2, k2, v2 = self.descs[key]
        return dict(
            q_desc=q1, k_desc=k1, v_desc=v1, q2_desc=q2, k2_desc=k2, v2_desc=v2,
            Out=self.out, Lse=self.lse, CuSeqQ=self.cu, CuSeqK=self.cu, Fault=self.fault,
            sm_scale=1.0 / math.sqrt(self.d),
            stride_qh=self.d, stride_kh=self.d, stride_vh=self.d,
            q_batch_rows=self.sq if self.b > 1 else 0, k_batch_rows=self.sk if self.b > 1 else 0,
            v_batch_rows=self.sk if self.b > 1 else 0,
            stride_lb=self.h * self.sq, stride_lh=self.sq,
            is_varlen=0, seqlen_q=self.sq, seqlen_k=self.sk, total_rows=self.b * self.sq, kv_rows=self.sk,
            kv_len_cap=self.sk, num_heads=self.h, num_heads_k=self.hk,
            window_right=0 if self.causal else -1, batch=self.b)

    def flops(self):
        pairs = self.sq * self.sk
        if self.causal:
            # Visible (query, key) pairs with the diagonal at the bottom right.
            off = self.sk - self.sq
            pairs = sum(max(0, min(self.sk, i + off + 1)) for i in range(self.sq))
        return 4.0 * self.b * self.h * pairs * self.d


def aot_like(fn):
    """Turns off the JIT's specialization of integer arguments (on value 1 and on divisibility by
    16), which kernels/aot.py's builds do not have: one compile per tile and dtype, not one per
    shape, and code closer to what tma.rs launches."""
    pointers = {"Out", "Lse", "CuSeqQ", "CuSeqK", "Fault"}
    for param in fn.params:
        if not param.is_constexpr and param.name not in pointers and not param.name.endswith("_desc"):
            param.do_not_specialize = True
            param.do_not_specialize_on_alignment = True


def launcher(kind, call, tile=None):
    """A function that runs the kernel `kind` ("ws", "split") on `call`."""
    head_d, head_d2 = SPLIT_DIMS[call.d]
    if kind == "split":
        bm, bn, warps, stages = SPLIT_TILE
        fn, opts, box_q = attention_tma.attn_fwd_tma_split, dict(num_warps=warps, num_stages=stages), bm
    else:
        bm, bn, stages = tile
        fn, opts, box_q = attention_ws.attn_fwd_tma_ws_split, dict(num_warps=4, num_stages=stages,
                                                                  maxnreg=ws_maxnreg(bm)), CONSUMER_ROWS
    args = call.args(box_q, bn)
    missing = set(fn.arg_names) - set(args) - {"BLOCK_M", "BLOCK_N", "HEAD_D", "HEAD_D2", "STAGES"}
    extra = set(args) - set(fn.arg_names)
    if missing or extra:
        raise SystemExit(f"argument list of {fn.__name__}: missing {sorted(missing)}, unknown {sorted(extra)}")
    grid = (triton_cdiv(call.sq, bm), call.b * call.h)

    def run():
        return fn[grid](**args, BLOCK_M=bm, BLOCK_N=bn, HEAD_D=head_d, HEAD_D2=head_d2, STAGES=stages, **opts)
    run.box_rows = [box_q, bn, bn]
    return run


def triton_cdiv(a, b):
    return (a + b - 1) // b


def reference(call):
    """O and the natural-log LSE in f32 math, the diagonal at the bottom right; rows that see no
    key: O = 0, LSE = -inf (the kernels' contract)."""
    outs, lses = [], []
    rep = call.h // call.hk
    scale = 1.0 / math.sqrt(call.d)
    for bi in range(call.b):
        q = call.q[bi].float().transpose(0, 1)  # h, sq, d
        k = call.k[bi].float().transpose(0, 1).repeat_interleave(rep, 0)
        v = call.v[bi].float().transpose(0, 1).repeat_interleave(rep, 0)
        s = torch.matmul(q, k.transpose(1, 2)) * scale
        if call.causal:
            i = torch.arange(call.sq, device=s.device)[:, None]
            j = torch.arange(call.sk, device=s.device)[None, :]
            s = s.masked_fill(j > i + call.sk - call.sq, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
        o = torch.matmul(p, v)
        outs.append(o.transpose(0, 1))  # sq, h, d
        lses.append(lse)
        del s, p
    return torch.cat(outs, 0), torch.stack(lses, 0)


TOL = {"fp16": (4e-3, 2e-3), "bf16": (3e-2, 1e-2)}  # (O max abs error, LSE max abs error)


def check(call, kinds, ref):
    """Runs each kernel on `call` and compares with `ref`; returns (rows, all ok)."""
    o_ref, lse_ref = ref
    rows, ok_all = [], True
    import aot

    for name, run in kinds:
        call.reset()
        kernel = run()
        torch.cuda.synchronize()
        # The descriptors Triton encoded for the kernel are those tma.rs encodes (box, swizzle).
        aot.check_tma_descriptors(name, kernel.metadata.tensordesc_meta, run.box_rows, call.dtype, call.d)
        out = call.out.float()
        nan = bool(torch.isnan(out).any()) or bool(torch.isnan(call.lse).any())
        err = (out - o_ref).abs().max().item() if not nan else float("nan")
        finite = torch.isfinite(lse_ref)
        lse_err = (call.lse[finite] - lse_ref[finite]).abs().max().item() if finite.any() else 0.0
        inf_ok = bool((call.lse[~finite] == float("-inf")).all())
        fault = int(call.fault.item())
        o_tol, l_tol = TOL[call.dtype]
        ok = (not nan) and err <= o_tol and lse_err <= l_tol and inf_ok and fault == 0
        ok_all &= ok
        rows.append((name, err, lse_err, nan, fault, inf_ok, ok))
    return rows, ok_all


def time_plain(fn, calls=10, reps=5):
    """time_graph without a graph: `calls` launches between two events."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    times.sort()
    return times[len(times) // 2]


def time_graph(fn, calls=10, reps=5):
    """Seconds per call: `calls` launches captured in a CUDA graph, replayed `reps` times, median."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    times.sort()
    return times[len(times) // 2]


def sdpa(call, backend):
    q = call.q.transpose(1, 2)
    k = call.k.transpose(1, 2)
    v = call.v.transpose(1, 2)

    def run():
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=call.causal)
    return run


def compile_only(out_dir, dims, dtypes, sweep):
    """Compiles the warp-specialized tiles for sm_90 as kernels/aot.py compiles a TMA variant (its
    signature, descriptor types and checks, no GPU needed) and prints registers, stack and the
    spill instructions (STL/LDL) of each cubin."""
    import subprocess

    import aot
    import triton
    from triton.experimental.gluon._runtime import GluonASTSource

    nvidia_bin = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    os.makedirs(out_dir, exist_ok=True)
    fn = attention_ws.attn_fwd_tma_ws_split
    for d in dims:
        head_d, head_d2 = SPLIT_DIMS[d]
        for dtype in dtypes:
            for bm, bn, stages in [WS_TILES[d]] + (WS_SWEEP[d] if sweep else []):
                sig, attrs = aot.signature(fn, aot.TMA_POINTERS, ["sm_scale"], dtype)
                for arg, rows in (("q", CONSUMER_ROWS), ("k", bn), ("v", bn)):
                    for name, cols in ((f"{arg}_desc", head_d), (f"{arg}2_desc", head_d2)):
                        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], DTYPES[dtype][1])
                        sig[name] = f"tensordesc<{dtype}[{rows}, {cols}],{layout!r}>"
                constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "HEAD_D": head_d, "HEAD_D2": head_d2, "STAGES": stages}
                src = GluonASTSource(fn, sig, constexprs=constexprs, attrs=attrs)
                target = aot.gpu_target("sm_90")
                kernel = triton.compile(src, target=target, options={"num_warps": 4, "num_stages": stages,
                                                                     "maxnreg": aot.ws_maxnreg(bm)})
                md = kernel.metadata
                name = f"fwd_tma_ws_{dtype}_d{d}_{bm}x{bn}x{stages}"
                aot.check_tma_descriptors(name, md.tensordesc_meta, [CONSUMER_ROWS, bn, bn], dtype, d)
                facts = aot.ptx_kernel_facts(kernel.asm["ptx"], md.name)
                problems = aot.launch_problems(facts, md.num_warps * 32, 32, aot.launch_args(sig, 2), md.shared,
                                               aot.shared_limit("sm_90"))
                path = os.path.join(out_dir, name)
                with open(path + ".cubin", "wb") as f:
                    f.write(kernel.asm["cubin"])
                with open(path + ".ptx", "w") as f:
                    f.write(kernel.asm["ptx"])
                usage = subprocess.run([os.path.join(nvidia_bin, "cuobjdump"), "-res-usage", path + ".cubin"],
                                       capture_output=True, text=True).stdout
                sass = subprocess.run([os.path.join(nvidia_bin, "nvdisasm"), "-c", path + ".cubin"],
                                      capture_output=True, text=True).stdout
                spills = len(re.findall(r"\b(?:STL|LDL)\b", sass))
                found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
                print(f"{name}: {md.num_warps} warps, {md.shared} B shared, maxnreg {aot.ws_maxnreg(bm)}, "
                      f"REG {found.group(1)} STACK {found.group(2)}, STL/LDL {spills}, launch problems {problems}",
                      flush=True)
                if problems:
                    raise SystemExit(1)


def heads_for(d):
    return max(1, 2048 // d)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", default="80,96,160")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--sweep", action="store_true", help="also time the WS_SWEEP tiles")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--log", metavar="FILE", help="every correctness row (and the case before it runs) to FILE")
    parser.add_argument("--verbose", action="store_true", help="every correctness row to stdout too")
    parser.add_argument("--compile-only", metavar="DIR",
                        help="no GPU: compile the warp-specialized tiles for sm_90 into DIR and print registers/spills")
    args = parser.parse_args()
    dims = [int(x) for x in args.dims.split(",")]
    dtypes = args.dtypes.split(",")
    if args.compile_only:
        compile_only(args.compile_only, dims, dtypes, args.sweep)
        return
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference in f32 math
    aot_like(attention_tma.attn_fwd_tma_split)
    aot_like(attention_ws.attn_fwd_tma_ws_split)

    log = open(args.log, "w") if args.log else None

    def detail(line, stdout=False):
        if log:
            log.write(line + "\n")
            log.flush()
        if stdout or args.verbose:
            print(line, flush=True)

    failed = []
    # (a) correctness: the timed shapes, then tails (lengths off the tiles), cross-attention
    # lengths (q != k, causal rows that see no key) and GQA. Per row with --verbose / --log, else
    # the worst per head dim, dtype and kernel (and every failing row).
    print("\n== correctness (f32 math reference; O max abs error, LSE max abs error) ==")
    columns = (f"{'d':>4} {'dtype':>5} {'b x sq x sk, h/hk':>22} {'causal':>6} {'kernel':>18} {'O err':>9} "
               f"{'LSE err':>9} {'NaN':>4} {'fault':>5} {'ok':>3}")
    detail(columns, stdout=True)
    worst = {}
    for d in dims:
        h = heads_for(d)
        shapes = [(4, 4096, 4096, h, h), (16, 1024, 1024, h, h), (2, 4096, 4096, 8, 8), (3, 1000, 1000, 8, 8),
                  (2, 200, 200, 8, 8), (2, 1030, 1030, 8, 8), (1, 65, 65, 4, 4), (2, 1000, 77, 8, 8), (2, 300, 1000, 8, 8),
                  (2, 1000, 1000, 8, 2)]
        for dtype in dtypes:
            for (b, sq, sk, hh, hk) in shapes:
                for causal in (False, True):
                    detail(f"-- running d={d} {dtype} {b}x{sq}x{sk} heads {hh}/{hk} causal={causal}")
                    call = Call(b, sq, sk, hh, hk, d, dtype, causal)
                    tiles = [WS_TILES[d]] + (WS_SWEEP[d] if args.sweep else [])
                    kinds = [(f"ws {t[0]}x{t[1]}x{t[2]}", launcher("ws", call, t)) for t in tiles]
                    kinds.append(("split 64x64x2", launcher("split", call)))
                    ref = reference(call)
                    rows, ok = check(call, kinds, ref)
                    if not (causal and sq != sk):
                        # Context, not checked: SDPA's own error in this dtype (its causal mask is
                        # at the top left, the same as ours only where sq == sk).
                        o = F.scaled_dot_product_attention(call.q.transpose(1, 2), call.k.transpose(1, 2),
                                                           call.v.transpose(1, 2), is_causal=causal,
                                                           enable_gqa=hh != hk)
                        err = (o.transpose(1, 2).reshape(b * sq, hh, d).float() - ref[0]).abs().max().item()
                        rows.append(("sdpa (context)", err, 0.0, False, 0, True, None))
                        del o
                    for name, err, lse_err, nan, fault, inf_ok, good in rows:
                        detail(f"{d:>4} {dtype:>5} {f'{b}x{sq}x{sk}, {hh}/{hk}':>22} {str(causal):>6} {name:>18} "
                               f"{err:9.2e} {lse_err:9.2e} {str(nan):>4} {fault:>5} "
                               f"{'-' if good is None else 'ok' if good else 'BAD':>3}"
                               + ("" if inf_ok else "  (rows without keys: LSE not -inf)"), stdout=good is False)
                        if good is False:
                            failed.append((d, dtype, b, sq, sk, hh, hk, causal, name))
                        w = worst.setdefault((d, dtype, name), [0.0, 0.0, 0, 0])
                        w[0] = max(w[0], err) if err == err else float("nan")
                        w[1] = max(w[1], lse_err)
                        w[2] += 1
                        w[3] += good is not False
                    del call, ref
                    torch.cuda.empty_cache()
    print(f"\n{'d':>4} {'dtype':>5} {'kernel':>18} {'worst O err':>12} {'worst LSE err':>14} {'cases ok':>9}")
    for (d, dtype, name), (err, lse_err, cases, good) in worst.items():
        print(f"{d:>4} {dtype:>5} {name:>18} {err:12.2e} {lse_err:14.2e} {f'{good}/{cases}':>9}", flush=True)

    if not args.no_timing:
        print("\n== timing: TFLOP/s, best of %d alternating turns, CUDA graphs of 10 calls ==" % args.turns)
        header = None
        for d in dims:
            h = heads_for(d)
            for dtype in dtypes:
                for (b, s, hh) in ((4, 4096, h), (16, 1024, h), (2, 4096, 8)):
                    for causal in (False, True):
                        call = Call(b, s, s, hh, hh, d, dtype, causal)
                        tiles = [WS_TILES[d]] + (WS_SWEEP[d] if args.sweep else [])
                        sides = [(f"ws{t[0]}x{t[1]}x{t[2]}", launcher("ws", call, t)) for t in tiles]
                        sides += [("split", launcher("split", call)), ("cudnn", sdpa(call, SDPBackend.CUDNN_ATTENTION)),
                                  ("flash", sdpa(call, SDPBackend.FLASH_ATTENTION))]
                        best, plain = {}, set()
                        for turn in range(args.turns):
                            order = sides if turn % 2 == 0 else sides[::-1]
                            for name, run in order:
                                try:
                                    if name in plain:
                                        t = time_plain(run)
                                    else:
                                        try:
                                            t = time_graph(run)
                                        except Exception as e:  # not capturable: events around plain calls
                                            torch.cuda.synchronize()
                                            plain.add(name)
                                            print(f"  {name}: no CUDA graph ({type(e).__name__}: {str(e)[:100]}), "
                                                  "timed without", flush=True)
                                            t = time_plain(run)
                                    best[name] = max(best.get(name, 0.0), call.flops() / t / 1e12)
                                except Exception as e:  # a backend that does not take the shape
                                    best.setdefault(name, float("nan"))
                                    if turn == 0:
                                        print(f"  {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                        names = [n for n, _ in sides]
                        if header != names:
                            header = names
                            print(f"{'d':>4} {'dtype':>5} {'b x s x h':>14} {'causal':>6} " + " ".join(
                                f"{n:>13}" for n in names) + f" {'ws/cudnn':>9} {'split/cudnn':>11} {'ws/split':>9}")
                        ws = best[names[0]]
                        print(f"{d:>4} {dtype:>5} {f'{b}x{s}x{hh}':>14} {str(causal):>6} " + " ".join(
                            f"{best[n]:13.1f}" for n in names) + f" {ws / best['cudnn']:9.3f} "
                            f"{best['split'] / best['cudnn']:11.3f} {ws / best['split']:9.3f}", flush=True)
                        del call
                        torch.cuda.empty_cache()

    if failed:
        print(f"\nFAILED: {len(failed)} correctness checks:")
        for f in failed:
            print("  ", f)
        sys.exit(1)
    print("\nall correctness checks passed")


if __name__ == "__main__":
    main()
