#!/usr/bin/env python3
"""Composable Kernel's gfx12 fmha forward beside ours and AMD's Triton kernel: the same static
figures as scripts/kernel_report.py (its functions), from CK instances compiled here. No GPU.

Usage: ck_gfx12_reference.py CK OUT_DIR [--targets gfx1201,gfx1200] [--dims 64,128,256]
           [--ours AOT_DIR ...] [--reference AITER_FWD_PREFILL_PY] [--out FILE] [--jobs N]

CK is a Composable Kernel tree (the folder holding include/ck_tile and example/ck_tile/01_fmha)
or an sdist that contains one (amd-aiter's bundles it under 3rdparty/composable_kernel; the user
downloads it); an sdist is unpacked into OUT_DIR/src. CK's own code generator
(example/ck_tile/01_fmha/codegen, gfx12's KernelComponentFactoryGfx12) emits the plain prefill
instances comparable to ours: fp16 and bf16, the --dims head dims (hdim_v = hdim), batch mode,
`qr` pipeline, no padding, no bias, LSE, dropout, logits soft-cap, skip or quantization, without
a mask (`s_no`) and with CK's mask (`s_mask`, the simplified generic mask causal calls take).
Each is compiled to device assembly only (hipcc -x hip --offload-arch=T --cuda-device-only -S,
-O3 and the device flags build/toolchain.rs gives CK with upstream LLVM, CK_USE_WMMA for
CK_USE_XDL), by the hipcc on PATH or else inside scripts/rocm-chroot.sh (HIP 6.4, LLVM 21), and
read with kernel_report.analyze: hot loop, VGPRs the descriptor asks for, waves per SIMD, LLVM's
`; Occupancy:`, scratch, spills. The useful MACs of one key-loop iteration are those of CK's block
tile, 2 x bM0 x bN0 x hdim (Q.K^T of bM0 rows by bN0 keys, then P.V into hdim columns), for
bM0 x bN0 x warps of the instance name (b<bM0>x<bN0>x..._r<warps>...); issued/useful checks it
against the WMMAs the loop issues.

CK's masked instance has one key loop whose edge tiles branch into the per-pixel mask:
kernel_report.loop_paths gives the interior tiles' path (fewest instructions) and the edge
tiles' (most). Writes a markdown table (--out, default OUT_DIR/ck_gfx12_reference.md) with ours
(--ours: kernel_report.our_rows of an aot.py --out directory: flat prefill at the exact head
dim, no extras) and AMD's (--reference: kernel_report.reference_rows, needs triton) beside CK.
"""
import argparse
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report as kr  # noqa: E402

CK = "CK gfx12"
FMHA = os.path.join("example", "ck_tile", "01_fmha")
# build/toolchain.rs' device flags for upstream LLVM (HIP > 6.1), with WMMA for XDL.
FLAGS = ["-O3", "-std=c++17", "-DCK_TILE_FMHA_FWD_FAST_EXP2=1", "-fgpu-flush-denormals-to-zero", "-DCK_ENABLE_BF16",
         "-DCK_ENABLE_FP16", "-DCK_USE_WMMA", "-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3", "-mllvm",
         "--lsr-drop-solution=1", "-mllvm", "-enable-post-misched=0", "-Wno-undefined-func-template"]


def ck_tree(path, out_dir):
    """The CK folder: `path` itself, or the one unpacked from the sdist `path`."""
    if os.path.isdir(path):
        if not os.path.isdir(os.path.join(path, FMHA)):
            raise SystemExit(f"ck_gfx12_reference: no {FMHA} under {path}")
        return os.path.abspath(path)
    with tarfile.open(path) as tar:
        marker = "/" + FMHA.replace(os.sep, "/") + "/generate.py"
        roots = [m.name[:-len(marker)] for m in tar.getmembers() if m.name.endswith(marker)]
        if len(roots) != 1:
            raise SystemExit(f"ck_gfx12_reference: {len(roots)} CK trees in {path}")
        dest = os.path.join(out_dir, "src")
        if not os.path.isdir(os.path.join(dest, roots[0], FMHA)):
            tar.extractall(dest, [m for m in tar.getmembers() if m.name.startswith(roots[0] + "/")])
    return os.path.abspath(os.path.join(dest, roots[0]))


def instances(ck, targets, dims):
    """CK's plain batch-mode fp16/bf16 gfx12 forward kernels (see the docstring)."""
    sys.path.insert(0, os.path.join(ck, FMHA))
    import codegen.ops.fmha_fwd as fwd

    _, kernels = fwd.get_fwd_blobs(targets, "", 0, [-1], "simplified")
    keep = []
    for k in kernels:
        p = k.F_pipeline
        if (k.F_dtype in ("fp16", "bf16") and k.F_mode == "batch" and k.F_hdim in dims and k.F_tile.F_bn1 == k.F_hdim
                and p.tag == "qr" and p.F_mask in ("s_no", "s_mask") and p.F_bias == "no"
                and (p.F_spad, p.F_skpad, p.F_dpad, p.F_dvpad, p.F_logits, p.F_lse, p.F_dropout, p.F_skip,
                     p.F_squant) == ("f",) * 9):
            keep.append(k)
    return fwd, keep


def compile_one(job):
    """Device assembly of one generated instance; returns (assembly path, seconds)."""
    ck, source, target, asm = job
    command = ["hipcc", "-x", "hip", f"--offload-arch={target}", "--cuda-device-only", "-S", *FLAGS,
               f"-I{ck}/include", f"-I{ck}/{FMHA}", source, "-o", asm]
    env = dict(os.environ)
    if not shutil.which("hipcc"):
        binds = [ck, os.path.dirname(os.path.dirname(asm))]
        env["FLASH_ATTN_ROCM_CHROOT_BINDS"] = ":".join(binds + [env.get("FLASH_ATTN_ROCM_CHROOT_BINDS", "")])
        command = [os.path.join(kr.REPO, "scripts", "rocm-chroot.sh"), "run", "--"] + command
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"ck_gfx12_reference: compiling {source} failed:\n{done.stderr[-4000:]}")
    return asm, time.monotonic() - start


def ck_rows(ck, out_dir, targets, dims, jobs):
    fwd, kernels = instances(ck, targets, dims)
    gen = os.path.join(out_dir, "gen")
    os.makedirs(gen, exist_ok=True)
    work = []
    for k in kernels:
        fwd.write_single_fwd_kernel(k, pathlib.Path(gen))
        for target in targets:
            os.makedirs(os.path.join(out_dir, target), exist_ok=True)
            work.append((ck, os.path.join(gen, k.filename), target, os.path.join(out_dir, target, k.name + ".s")))
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        done = list(pool.map(compile_one, work))
    rows = []
    for (_, _, target, _), k, (asm_path, seconds) in zip(work, [k for k in kernels for _ in targets], done):
        t = k.F_tile
        asm = kr.read_text(asm_path)
        md = kr.kernel_metadata(asm)
        wave = int(md.get(".wavefront_size") or 32)
        row = kr.analyze(CK, target, md[".name"], "fwd", t.F_bm0, t.F_bn0, k.F_hdim, t.F_rm0 * t.F_rn0 * t.F_rk0 * wave,
                         0, asm, None)
        row.update(variant=k.name, dtype=k.F_dtype, causal=k.F_pipeline.F_mask != "s_no", seconds=seconds)
        rows.append(row)
    return rows


def per_4096(row, insns):
    """Instructions (or any per-wave count) of the hot loop per 4096 useful MACs."""
    if insns is None or not row["hot"]:
        return None
    return insns * row["warps"] / (2 * row["block_m"] * row["block_n"] * row["block_d"] / 4096)


def cells(row, causal=None):
    """One table line's cells for a row (`causal`: the masked instance's row, CK and AMD)."""
    hot = row["hot"]
    instr = kr.fmt(row["insns_per_4096"], 1)
    if causal is not None and causal["hot"]:
        low, high = per_4096(causal, causal["hot"]["path_min"]), per_4096(causal, causal["hot"]["path_max"])
        instr += f" / {kr.fmt(low, 1)}" + (f" (edge tiles {kr.fmt(high, 1)})" if high - low > 1e-9 else "")
    elif row["source"] == kr.OURS:
        instr += " / same loop"
    return [f"{row['block_m']}x{row['block_n']}, {row['warps']}", kr.fmt_issued(row), instr,
            kr.fmt(per_4096(row, hot["lds"] if hot else None), 2), str(row["allocated_vgprs"]),
            f"{row['waves_regs']}/{row['waves_lds']} ({row['llvm_occupancy'] or '?'})",
            f"{hot['stores']}/{hot['loads']}" if hot else "-", str(row["vgpr_spills"])]


def table(rows):
    """Ours, AMD's and CK's rows per target, head dim and dtype."""
    def pick(source, causal):
        out = {}
        for r in rows:
            if r["source"] != source or r.get("causal", False) != causal:
                continue
            if source == kr.OURS and not (r["tile"] == "prefill" and r["even_d"] and not r["paged"]
                                          and not r["extras"] and not r.get("ptr32")):
                continue
            out[(r["target"], r["block_d"], r["dtype"])] = r
        return out
    plain = {s: pick(s, False) for s in (kr.OURS, kr.AITER, CK)}
    masked = {s: pick(s, True) for s in (kr.AITER, CK)}
    lines = ["| target, d, dtype | kernel | tile, warps | issued/useful | instr/4096 MACs: no mask / causal "
             "interior tiles (edge tiles) | LDS ops/4096 MACs | VGPRs (descriptor) | waves/SIMD regs/LDS (LLVM) | "
             "key-loop scratch st/ld | VGPR spills |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(plain[CK], key=lambda k: (k[0], k[1], k[2] != "fp16")):
        for source in (kr.OURS, kr.AITER, CK):
            row = plain[source].get(key)
            if row:
                lines.append(f"| {key[0]}, {key[1]}, {key[2]} | {source} | "
                             + " | ".join(cells(row, masked.get(source, {}).get(key))) + " |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ck", help="a Composable Kernel tree or an sdist holding one")
    parser.add_argument("out_dir")
    parser.add_argument("--targets", default="gfx1201")
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--ours", metavar="AOT_DIR", action="append", default=[],
                        help="aot.py --out directory of ours (repeatable: one per target)")
    parser.add_argument("--reference", metavar="FWD_PREFILL_PY", help="aiter's fwd_prefill.py (needs triton)")
    parser.add_argument("--out", help="markdown table (default OUT_DIR/ck_gfx12_reference.md)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel compiles")
    args = parser.parse_args()

    start = time.monotonic()
    targets = [t for t in args.targets.split(",") if t]
    out_dir = os.path.abspath(args.out_dir)
    ck = ck_tree(args.ck, out_dir)
    unpacked = time.monotonic()
    rows = ck_rows(ck, out_dir, targets, [int(d) for d in args.dims.split(",")], args.jobs)
    compiled = time.monotonic()
    for directory in args.ours:
        rows += kr.our_rows(directory, targets)
    # AMD's kernel where kernel_report knows its config (gfx1200 has none).
    ref_targets = [t for t in targets if t in kr.REFERENCE_CONFIGS]
    if args.reference and ref_targets:
        rows += kr.reference_rows(args.reference, ref_targets, os.path.join(out_dir, kr.REFERENCE_DIR), args.jobs)
    lines = table(rows)
    out = args.out or os.path.join(out_dir, "ck_gfx12_reference.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    seconds = [r["seconds"] for r in rows if r["source"] == CK]
    print(f"ck_gfx12_reference: CK tree ready in {unpacked - start:.0f} s, {len(seconds)} instances compiled in "
          f"{compiled - unpacked:.0f} s wall (each {min(seconds):.0f}-{max(seconds):.0f} s), "
          f"{time.monotonic() - start:.0f} s in all; table in {out}")


if __name__ == "__main__":
    main()
