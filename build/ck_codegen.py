#!/usr/bin/env python3
"""Emit the CK fmha forward instances this crate needs, with CK's own code generator.

Usage: ck_codegen.py FMHA_DIR OUT_DIR --dtypes fp16,bf16 --hdims 64,128 [--lse] [--paged]
                     [--filter PATTERN] [--occupancy-one-hdims 96,128]

FMHA_DIR is CK's example/ck_tile/01_fmha. This does what `generate.py -d fwd,fwd_splitkv
--receipt 2` does, with one difference: generate.py takes a single fnmatch pattern per API,
which cannot say "fp16 or bf16, hdim 64 or 128, no dropout". So this lists the receipt-2
kernels through the codegen modules generate.py itself loads, keeps the selected ones, rebuilds
the dispatcher pool from exactly those (in CK's order: dispatch order matters) and writes them
with the codegen's own writers.

Selection: dtypes and hdims as given (hdim_v == hdim only: the (192,128) tile is skipped), no
dropout, the LSE-writing kernels with --lse (else the no-LSE ones: one variant, never both;
the Rust side then always or never passes an LSE buffer), and for --paged the group-mode paged-KV
split-KV kernels with their combine kernels (both LSE variants: the dispatcher names both).
Split-KV kernels are generated only for head-dim tiles whose split-KV pipeline class exists in
this CK's headers: its codegen asks for `BlockFmhaFwdSplitKVPipelineQRKSVSAsync` (the `qr_async`
pipeline) for hdims 96 and 160, a class this CK does not have, and has no split-KV tile for 192.
A paged call with such a head dim runs on the next larger split-KV tile (CK pads the head dim);
the Rust side knows the split-KV tiles from the manifest. --filter keeps only kernels whose
name matches one of its comma-separated fnmatch patterns (for small CI builds).

--occupancy-one-hdims 96,128 builds the forward kernels of those head-dim tiles with occupancy 1
(CK's `o1` tile option, which its own 160 and 192 tiles use): the kernel may then use the whole
512-register file. The build passes it for upstream LLVM (distro ROCm), where CK's d128 forward
and d96 tiles at the default occupancy spill (gfx942, LLVM 21: 256 VGPRs, 90-104 and 1 spills;
with o1: 300-326 and 280 registers, 0 spills; see the README).

Writes OUT_DIR/*.cpp and OUT_DIR/manifest.txt: one line per kernel, "<api> <name>", where name
is the file stem, and the dispatcher files as "api fmha_fwd_api" / "api fmha_fwd_splitkv_api".
"""
import argparse
import dataclasses
import fnmatch
import re
import sys
from pathlib import Path

RECEIPT_FLASH_ATTENTION = 2
MASK_IMPL = "simplified"  # generate.py's default, used by flash-attention's build


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("fmha_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dtypes", required=True)
    parser.add_argument("--hdims", required=True)
    parser.add_argument("--lse", action="store_true")
    parser.add_argument("--paged", action="store_true")
    parser.add_argument("--filter", default="")
    parser.add_argument("--occupancy-one-hdims", default="")
    return parser.parse_args()


def matches_filter(name, patterns):
    return not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)


class Selection:
    def __init__(self, args):
        self.dtypes = args.dtypes.split(",")
        self.hdims = [int(h) for h in args.hdims.split(",")]
        self.lse_values = ["t"] if args.lse else ["f"]
        self.patterns = [p for p in args.filter.split(",") if p]
        self.occupancy_one = {int(h) for h in args.occupancy_one_hdims.split(",") if h}

    def common(self, kernel):
        return (kernel.F_dtype in self.dtypes and kernel.F_hdim in self.hdims
                and kernel.F_tile.F_bn1 >= kernel.F_hdim
                and matches_filter(kernel.name, self.patterns))

    def fwd(self, kernel):
        p = kernel.F_pipeline
        return self.common(kernel) and p.F_dropout == "f" and p.F_lse in self.lse_values

    def splitkv(self, kernel, pipeline_exists):
        p = kernel.F_pipeline
        return (self.common(kernel) and kernel.F_mode == "group" and p.F_pagedkv == "t"
                and pipeline_exists(p.tag))

    def combine(self, kernel, used_pads):
        # The split-KV dispatcher pairs each split kernel with the combine kernel of the same
        # mode and dv padding; it references both LSE variants (a runtime `if`), so both must
        # exist or the link fails.
        p = kernel.F_pipeline
        return (kernel.F_dtype in self.dtypes and kernel.F_hdim in self.hdims
                and kernel.F_mode == "group"
                and (kernel.F_dtype, kernel.F_hdim, p.F_dvpad) in used_pads)


def write_fwd(ops, selection, out_dir, manifest):
    fwd = ops.fmha_fwd
    _, kernels = fwd.get_fwd_blobs("", RECEIPT_FLASH_ATTENTION, [-1], MASK_IMPL)
    pool = fwd.FmhaFwdApiPool(MASK_IMPL)
    for kernel in kernels:
        if kernel.F_hdim in selection.occupancy_one and kernel.F_tile.F_occupancy == -1:
            # A copy: the codegen shares one tile object between kernels. Before the filter, so
            # that the patterns see the final name (with its `_o1`).
            kernel.F_tile = dataclasses.replace(kernel.F_tile, F_occupancy=1)
    for kernel in filter(selection.fwd, kernels):
        pool.register_traits(kernel.api_trait())
        fwd.write_single_fwd_kernel(kernel, out_dir)
        manifest.append(f"fwd {kernel.name}")
    fwd.write_fwd_api(pool, out_dir)
    cheapen_cu_query(out_dir / fwd.FMHA_FWD_API_FILENAME)
    manifest.append("api " + Path(fwd.FMHA_FWD_API_FILENAME).stem)


# The generated fmha_fwd() calls hipGetDeviceProperties on every call only to read the CU
# count; hipDeviceGetAttribute reads the same value without building the whole property struct.
CU_QUERY_EDITS = [
    ("hipDeviceProp_t props{};\n    status = hipGetDeviceProperties(&props, device);",
     "int cu_count = 0;\n    status = hipDeviceGetAttribute(&cu_count, "
     "hipDeviceAttributeMultiprocessorCount, device);"),
    ("num_cus = props.multiProcessorCount;", "num_cus = static_cast<unsigned>(cu_count);"),
]


def cheapen_cu_query(api_file):
    text = api_file.read_text()
    for old, new in CU_QUERY_EDITS:
        if old not in text:
            sys.exit(f"ck_codegen: {api_file.name} no longer contains `{old}`: update CU_QUERY_EDITS")
        text = text.replace(old, new)
    api_file.write_text(text)


class PipelineClasses:
    """Which pipeline tags of the split-KV codegen name a class that CK's headers define."""

    def __init__(self, fmha_dir, pipeline_map):
        pipeline_dir = fmha_dir.parents[2] / "include" / "ck_tile" / "ops" / "fmha" / "pipeline"
        headers = [f.read_text() for f in sorted(pipeline_dir.glob("*.hpp"))]
        if not headers:
            sys.exit(f"ck_codegen: no pipeline headers under {pipeline_dir}")
        self.defined = {
            tag for tag, cpp_name in pipeline_map.items()
            if any(re.search(rf"\bstruct {cpp_name.split('::')[-1]}\b", h) for h in headers)
        }

    def exists(self, tag):
        return tag in self.defined


def write_splitkv(ops, selection, fmha_dir, out_dir, manifest):
    skv = ops.fmha_fwd_splitkv
    classes = PipelineClasses(fmha_dir, skv.FMHA_FWD_SPLITKV_PIPELINE_MAP)
    _, kernels = skv.get_fwd_splitkv_blobs("", RECEIPT_FLASH_ATTENTION, MASK_IMPL, [-1])
    pool = skv.FmhaFwdSplitKVApiPool(MASK_IMPL)
    used_pads = set()
    for kernel in (k for k in kernels if selection.splitkv(k, classes.exists)):
        pool.register_traits(kernel.api_trait())
        skv.write_single_kernel(kernel, out_dir)
        manifest.append(f"fwd_splitkv {kernel.name}")
        used_pads.add((kernel.F_dtype, kernel.F_hdim, kernel.F_pipeline.F_dvpad))
    combines = skv.get_fwd_splitkv_combine_blobs("", RECEIPT_FLASH_ATTENTION, [-1])
    for kernel in combines:
        if selection.combine(kernel, used_pads):
            skv.write_single_kernel(kernel, out_dir)
            manifest.append(f"fwd_splitkv_combine {kernel.name}")
    skv.write_fwd_splitkv_api(pool, out_dir)
    manifest.append("api " + Path(skv.FMHA_FWD_SPLITKV_API_FILENAME).stem)


def main():
    args = parse_args()
    sys.path.insert(0, str(args.fmha_dir))
    import codegen.ops.fmha_fwd  # noqa: F401  (CK's generator, as generate.py loads it)
    import codegen.ops.fmha_fwd_splitkv  # noqa: F401
    import codegen.ops as ops

    selection = Selection(args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    manifest = []
    write_fwd(ops, selection, args.out_dir, manifest)
    if args.paged:
        write_splitkv(ops, selection, args.fmha_dir.resolve(), args.out_dir, manifest)
    (args.out_dir / "manifest.txt").write_text("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
