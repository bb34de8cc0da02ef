#!/usr/bin/env python3
"""kernels/aot.py's launch-contract check: a compiled kernel's metadata (AMDGPU `.amdgpu_metadata`
or PTX) against what src/triton/launch.rs passes (threads, wave size, arguments, LDS).

    python3 tests/python/test_aot_metadata.py

The parsing and comparison run on synthetic metadata with any python3. With triton importable
(the build's venv; .ci/rocm-check.sh runs it there), it also compiles the smallest merge kernel
for gfx1100 and checks the real metadata, and that aot.py refuses a kernel whose wave size it
assumed wrongly.
"""
import ast
import os
import sys
import tempfile
import unittest

from triton_support import have_triton

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "kernels"))
# No __pycache__ in kernels/: the build script watches that folder and would rebuild.
sys.dont_write_bytecode = True
import aot  # noqa: E402
import launch_contract  # noqa: E402

# The shape of LLVM's AMDGPU metadata (code object v5): two kernels, the one asked for second, a
# hidden argument, a quoted string, a list of scalars, an empty list.
AMDGCN = """
	.text
	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:           []
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 1024
    .name:           other_kernel
    .private_segment_fixed_size: 0
    .wavefront_size: 64
  - .agpr_count:     0
    .args:
      - .address_space:  global
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .offset:         8
        .size:           4
        .value_kind:     by_value
      - .offset:         16
        .size:           8
        .value_kind:     by_value
      - .address_space:  global
        .offset:         24
        .size:           8
        .value_kind:     global_buffer
      - .offset:         32
        .size:           4
        .value_kind:     hidden_block_count_x
    .group_segment_fixed_size: 16
    .kernarg_segment_align: 8
    .kernarg_segment_size: 36
    .language:       'OpenCL C'
    .max_flat_workgroup_size: 128
    .name:           toy
    .private_segment_fixed_size: 24
    .symbol:         toy.kd
    .uses_dynamic_stack: false
    .vgpr_spill_count: 0
    .wavefront_size: 32
amdhsa.target:   amdgcn-amd-amdhsa--gfx1100
amdhsa.version:
  - 1
  - 2
...

	.end_amdgpu_metadata
"""

PTX = """
.extern .shared .align 16 .b8 global_smem[];
.visible .entry toy(
	.param .u64 .ptr .global .align 1 toy_param_0,
	.param .u32 toy_param_1,
	.param .u64 toy_param_2,
	.param .u64 .ptr .global .align 1 toy_param_3
)
.reqntid 128
{
	ret;
}
"""

# toy(X: *fp16, n: i32, stride: i64, BLOCK: constexpr) + one scratch pointer.
SIGNATURE = {"X": "*fp16", "n": "i32", "stride": "i64", "BLOCK": "constexpr"}
LIMIT = 64 * 1024


def agreeing_launch(**changes):
    launch = dict(threads=128, wave=32, args=launch_contract.launch_args(SIGNATURE, 1), shared=1024, limit=LIMIT)
    launch.update(changes)
    return launch


class ParseTest(unittest.TestCase):
    def test_amdgpu_facts_of_the_named_kernel(self):
        self.assertEqual(launch_contract.amdgpu_kernel_facts(AMDGCN, "toy"), {
            "threads": 128, "wave": 32, "arg_sizes": [8, 4, 8, 8], "static_shared": 16, "private": 24,
            "dynamic_stack": False})
        self.assertEqual(launch_contract.amdgpu_kernel_facts(AMDGCN, "other_kernel")["arg_sizes"], [])

    def test_yaml_subset(self):
        doc = launch_contract.parse_yaml_block(AMDGCN[AMDGCN.index("---"):AMDGCN.index(".end_amdgpu_metadata")])
        self.assertEqual(doc["amdhsa.version"], ["1", "2"])
        self.assertEqual(doc["amdhsa.target"], "amdgcn-amd-amdhsa--gfx1100")
        self.assertEqual(doc["amdhsa.kernels"][1][".language"], "OpenCL C")

    def test_missing_metadata_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "no .amdgpu_metadata"):
            launch_contract.amdgpu_kernel_facts("\t.text\n", "toy")
        with self.assertRaisesRegex(ValueError, "0 metadata entries for kernel absent"):
            launch_contract.amdgpu_kernel_facts(AMDGCN, "absent")
        with self.assertRaisesRegex(ValueError, "no .wavefront_size"):
            launch_contract.amdgpu_kernel_facts(AMDGCN.replace("    .wavefront_size: 32\n", ""), "toy")

    def test_ptx_facts(self):
        self.assertEqual(launch_contract.ptx_kernel_facts(PTX, "toy"), {
            "threads": 128, "wave": None, "arg_sizes": [8, 4, 8, 8], "static_shared": 0, "private": 0,
            "dynamic_stack": False})
        self.assertEqual(launch_contract.ptx_kernel_facts(PTX.replace(".reqntid 128", ".maxntid 64, 2, 1"), "toy")["threads"], 128)
        with self.assertRaisesRegex(ValueError, "no .entry absent"):
            launch_contract.ptx_kernel_facts(PTX, "absent")

    def test_launch_args(self):
        self.assertEqual(launch_contract.launch_args(SIGNATURE, 2), [
            ("X", 8), ("n", 4), ("stride", 8), ("scratch pointer 1", 8), ("scratch pointer 2", 8)])
        self.assertEqual(launch_contract.launch_args({"scale": "fp32"}, 0), [("scale", 4)])
        with self.assertRaisesRegex(ValueError, "parameter flag of type i1"):
            launch_contract.launch_args({"flag": "i1"}, 0)


class ContractTest(unittest.TestCase):
    def problems(self, text=AMDGCN, parse=launch_contract.amdgpu_kernel_facts, **changes):
        return launch_contract.launch_problems(parse(text, "toy"), **agreeing_launch(**changes))

    def assert_one_problem(self, problems, *parts):
        self.assertEqual(len(problems), 1, problems)
        for part in parts:
            self.assertIn(part, problems[0])

    def test_agreeing_launch(self):
        self.assertEqual(self.problems(), [])
        self.assertEqual(self.problems(PTX, launch_contract.ptx_kernel_facts, limit=227 * 1024), [])

    def test_threads_must_match_exactly(self):
        self.assert_one_problem(self.problems(threads=256), "compiled for 128 threads", "launched with 256")
        # Fewer threads than compiled for would leave part of every tile to no one.
        self.assert_one_problem(self.problems(threads=64), "compiled for 128 threads", "launched with 64")
        self.assert_one_problem(self.problems(PTX, launch_contract.ptx_kernel_facts, threads=256), "compiled for 128 threads")

    def test_wave_size(self):
        self.assert_one_problem(self.problems(wave=64), "32-wide waves", "assumed 64")
        # NVIDIA: a warp is 32 wide; nothing to compare.
        self.assertEqual(self.problems(PTX, launch_contract.ptx_kernel_facts, wave=64), [])

    def test_argument_count(self):
        self.assert_one_problem(self.problems(args=launch_contract.launch_args(SIGNATURE, 2)), "4 kernel arguments",
                                "passes 5", "scratch pointer 2")
        dropped = {k: v for k, v in SIGNATURE.items() if k != "n"}
        self.assert_one_problem(self.problems(args=launch_contract.launch_args(dropped, 1)), "passes 3")
        self.assert_one_problem(self.problems(PTX, launch_contract.ptx_kernel_facts, args=launch_contract.launch_args(SIGNATURE, 0)),
                                "4 kernel arguments", "passes 3")

    def test_tma_descriptor_arguments(self):
        # A host TMA descriptor: the 128-byte map, the 2-D view's sizes (i32) and strides (i64).
        sig = {"desc": "tensordesc<fp16[64, 128],NVMMASharedLayout(...)>", "n": "i32"}
        self.assertEqual(launch_contract.launch_args(sig, 0),
                         [("desc", 128), ("desc shape 0", 4), ("desc shape 1", 4), ("desc stride 0", 8),
                          ("desc stride 1", 8), ("n", 4)])
        ptx = PTX.replace("\t.param .u64 .ptr .global .align 1 toy_param_0,",
                          "\t.param .align 64 .b8 toy_param_0[128],")
        self.assertEqual(launch_contract.ptx_kernel_facts(ptx, "toy")["arg_sizes"], [128, 4, 8, 8])

    def test_argument_sizes(self):
        wide = dict(SIGNATURE, n="i64")
        self.assert_one_problem(self.problems(args=launch_contract.launch_args(wide, 1)), "argument 1 (n) is 4 bytes",
                                "passes 8")

    def test_lds_limit(self):
        # 16 bytes of static LDS plus the dynamic ones.
        self.assertEqual(self.problems(shared=LIMIT - 16), [])
        self.assert_one_problem(self.problems(shared=LIMIT - 15), "16 bytes of static", f"{LIMIT - 15} of dynamic",
                                f"than the {LIMIT}")
        self.assert_one_problem(self.problems(PTX, launch_contract.ptx_kernel_facts, shared=228 * 1024, limit=launch_contract.shared_limit("sm_90")),
                                f"than the {227 * 1024}")
        self.assertEqual(launch_contract.shared_limit("rdna"), LIMIT)
        self.assertEqual(launch_contract.shared_limit("cdna"), LIMIT)

    def test_dynamic_stack(self):
        text = AMDGCN.replace(".uses_dynamic_stack: false", ".uses_dynamic_stack: true")
        self.assert_one_problem(self.problems(text), "dynamic stack", "24 bytes")


class BufferTwinTest(unittest.TestCase):
    """The 32-bit buffer-addressing twins (`_b32`): AMD targets only, 64-bit variants unchanged
    (the power-of-two tiles; SplitTileTest has the split ones)."""

    def test_twins_per_target(self):
        base = [name for name, _, _ in aot.variants(aot.POW2_DIMS, list(aot.DTYPES))]
        # RDNA has no decode-tile extras variants from d = 128 (aot.decode_extras).
        rdna_base = [n for n in base if not (n.startswith("fwd_decode") and n.endswith("_x")
                                             and ("_d128" in n or "_d256" in n or "_d512" in n))]
        self.assertEqual(len(base) - len(rdna_base), 24)
        for no_twins, own in (("sm_80", base), ("sm_86", base), ("sm_89", base), ("sm_90", base), ("gfx1030", rdna_base)):
            names = [name for name, _, _ in aot.variants(aot.POW2_DIMS, list(aot.DTYPES), no_twins)]
            self.assertEqual([n for n in names if "_prefill_short_" not in n and "_decode_batch_" not in n
                              and not n.startswith("fwd_tma_")], own)
        # sm_90 alone has short prefill tiles and batched decode tiles: plain and flat, one per
        # dtype, head-dim tile (the batched decode tile at d = 64 and 128) and exact/padded head dim.
        sm90 = aot.variants(aot.POW2_DIMS, list(aot.DTYPES), "sm_90")
        for tile, count, dims in (("prefill_short", 16, {32, 64, 128, 256}), ("decode_batch", 8, {64, 128})):
            own_class = [(n, f) for n, family, f in sm90 if family == "fwd" and f["tile"] == tile]
            self.assertEqual(len(own_class), count, tile)
            self.assertEqual({f["block_d"] for _, f in own_class}, dims, tile)
            self.assertTrue(all(n.endswith("_flat") and not f["paged"] and not f["extras"] for n, f in own_class))
        # and the TMA kernels (attention_tma.py, attention_ws.py): head dims 64, 128 and 256 here,
        # both dtypes; the short class at 128 and 256, the warp-specialized one at all three, its
        # walking twin at 128.
        tma = {n: f["tile"] for n, family, f in sm90 if family == "fwd_tma"}
        self.assertEqual(tma, {**{f"fwd_tma_{dt}_d{d}": "prefill" for dt in ("fp16", "bf16") for d in (64, 128, 256)},
                               **{f"fwd_tma_short_{dt}_d{d}": "prefill_short" for dt in ("fp16", "bf16") for d in (128, 256)},
                               **{f"fwd_tma_ws_{dt}_d{d}": "prefill_ws" for dt in ("fp16", "bf16") for d in (64, 128, 256)},
                               **{f"fwd_tma_walk_{dt}_d128": "prefill_walk" for dt in ("fp16", "bf16")}})
        # Its q boxes are half its 128-row block.
        self.assertEqual([aot.tma_q_rows(tile, aot.TMA_TILES[("sm90", tile)][128][0]) for tile in aot.TMA_CLASSES],
                         [64, 64, 64, 64])
        for target in ("sm_80", "sm_86", "gfx942", "gfx1100", "gfx1201", "gfx1030"):
            self.assertFalse([n for n, family, _ in aot.variants(aot.POW2_DIMS, list(aot.DTYPES), target)
                              if "_prefill_short_" in n or "_decode_batch_" in n or family == "fwd_tma"])
        for target, twins, own in (("gfx1100", 106, rdna_base), ("gfx942", 130, base), ("gfx1201", 102, rdna_base)):
            names = [name for name, _, _ in aot.variants(aot.POW2_DIMS, list(aot.DTYPES), target)]
            b32 = [n for n in names if n.endswith("_b32")]
            self.assertEqual(len(b32), twins, target)
            self.assertEqual([n for n in names if not n.endswith("_b32")], own)
            self.assertTrue(all(n[:-4] in base for n in b32))
            # None for flat prefill at the exact head dim nor for the flat extras ones.
            self.assertFalse([n for n in b32 if n.startswith("fwd_prefill") and "_flat" in n
                              and ("p_flat" not in n or "_x_" in n)])
        gfx12 = [name for name, _, _ in aot.variants([128], ["fp16"], "gfx1201")]
        self.assertNotIn("fwd_decode_fp16_d128_flat_b32", gfx12)
        self.assertIn("fwd_decode_fp16_d128_paged_b32", gfx12)

    def test_pointer_range_on_every_tensor_but_the_fault_word(self):
        class Fn:
            arg_names = ["Q", "Fault", "stride_qb", "BLOCK_M"]
        pointers = {"Q": "*{dt}", "Fault": "*i32"}
        sig, attrs = aot.signature(Fn, pointers, [], "fp16", ptr32=True)
        self.assertEqual(attrs[(0,)], [["tt.divisibility", 16], ["tt.pointer_range", 32]])
        self.assertEqual(attrs[(1,)], [["tt.divisibility", 16]])
        self.assertEqual(aot.signature(Fn, pointers, [], "fp16")[1][(0,)], [["tt.divisibility", 16]])


class OneLoopTest(unittest.TestCase):
    """Which variants run every key tile in one loop (aot.one_loop): the short tile, and on sm_90
    plain flat decode (both decode tiles) and plain flat prefill from d = 128 (at d = 64 one loop
    lost on long rows); the power-of-two tiles (SplitTileTest has the split ones)."""

    def test_one_loop_variants_per_target(self):
        def one_loop_names(target):
            return {n for n, family, f in aot.variants(aot.POW2_DIMS, list(aot.DTYPES), target)
                    if family == "fwd" and aot.one_loop(target, f)}

        sm90 = one_loop_names("sm_90")
        # 16 short variants (d = 32 to 256), 20 flat decode (2 dtypes x 5 head-dim tiles x
        # exact/padded), 8 batched decode (d = 64 and 128), 12 flat prefill (d = 128, 256, 512).
        self.assertEqual(len(sm90), 56)
        for name in ("fwd_prefill_short_fp16_d64_flat", "fwd_decode_bf16_d32p_flat", "fwd_prefill_fp16_d128_flat",
                     "fwd_decode_batch_fp16_d128_flat", "fwd_decode_batch_bf16_d64p_flat",
                     "fwd_prefill_bf16_d256p_flat", "fwd_prefill_fp16_d512_flat", "fwd_decode_bf16_d512p_flat"):
            self.assertIn(name, sm90)
        for name in ("fwd_prefill_fp16_d64_flat", "fwd_prefill_fp16_d32_flat", "fwd_prefill_fp16_d128_paged",
                     "fwd_prefill_fp16_d128_flat_x", "fwd_decode_fp16_d128_paged", "fwd_decode_fp16_d64_flat_x"):
            self.assertNotIn(name, sm90)
        for target in ("sm_80", "sm_86", "gfx942", "gfx1100", "gfx1201", "gfx1030"):
            self.assertEqual(one_loop_names(target), set(), target)


class KeyHalvesTest(unittest.TestCase):
    """Which variants take KEY_HALVES' loops (aot.key_halves): gfx12's flat prefill at d = 256
    (on 128x32, unmasked tiles in halves) and at the split head dims 80, 96 and 160 (on 128x64,
    masked tiles of 32 keys first), gfx11's at 80, 96 (128x64) and 160 (128x32, 2 stages), and
    gfx12's flat decode at 160 (its 16-key tile, masked tiles of 16 keys), exact head dim, no
    extras, 64-bit addressing; nothing else."""

    def halves(self, target):
        dims = [*aot.POW2_DIMS, *aot.SPLIT_DIMS]
        return {n: aot.kernel_tile(target, f) for n, family, f in aot.variants(dims, list(aot.DTYPES), target)
                if family == "fwd" and aot.fwd_constexprs(target, f)["KEY_HALVES"]}

    def check_family(self, targets, tiles, padded, decode=None):
        for target in targets:
            want = {f"fwd_prefill_{dtype}_d{d}_flat": tile for dtype in aot.DTYPES for d, tile in tiles.items()}
            want.update({f"fwd_decode_{dtype}_d{d}_flat": tile for dtype in aot.DTYPES
                         for d, tile in (decode or {}).items()})
            self.assertEqual(self.halves(target), want, target)
            # The padded variants (and their `_b32` twins) keep their tiles.
            for d, tile in padded.items():
                for n, family, f in aot.variants([d], ["fp16"], target):
                    if n.startswith(f"fwd_prefill_fp16_d{d}p_flat") and not f["extras"]:
                        self.assertEqual(aot.kernel_tile(target, f)[:2], tile, n)
                        self.assertFalse(aot.fwd_constexprs(target, f)["KEY_HALVES"], n)
            # The padded decode variants and the `_b32` twins keep the decode tile.
            for d in decode or {}:
                for n, family, f in aot.variants([d], ["fp16"], target):
                    if n.startswith(f"fwd_decode_fp16_d{d}") and n != f"fwd_decode_fp16_d{d}_flat":
                        self.assertEqual(aot.kernel_tile(target, f), (16, 16, 1, 1, 6), n)
                        self.assertFalse(aot.fwd_constexprs(target, f)["KEY_HALVES"], n)

    def test_key_halves_variants_per_target(self):
        self.check_family(("gfx1200", "gfx1201"),
                          {256: (128, 32, 8, 1, 5), 160: (128, 64, 8, 1, 5), 96: (128, 64, 8, 1, 6), 80: (128, 64, 8, 1, 6)},
                          {256: (128, 16), 160: (128, 32), 96: (128, 64), 80: (128, 64)},
                          decode={160: (16, 16, 1, 1, 5)})
        self.check_family(("gfx1100", "gfx1101", "gfx1151"),
                          {160: (128, 32, 8, 2, 5), 96: (128, 64, 8, 2, 6), 80: (128, 64, 8, 2, 6)},
                          {256: (128, 32), 160: (128, 32), 96: (64, 32), 80: (64, 32)})
        self.check_family(("gfx1102", "gfx1103", "gfx1150"),
                          {160: (128, 32, 8, 2, 4), 96: (128, 64, 8, 1, 4), 80: (128, 64, 8, 1, 4)},
                          {256: (128, 32), 160: (128, 32), 96: (32, 32), 80: (64, 32)})
        for target in ("sm_80", "sm_90", "gfx942", "gfx1030"):
            self.assertEqual(self.halves(target), {}, target)


class TailVecTest(unittest.TestCase):
    """Which variants load the split head dim's tail in vectors of their own (aot.TAIL_VEC): gfx11's
    paged and flat prefill at 160 (2 columns), exact head dim and every `_b32` twin, not the padded
    64-bit variants nor the extras; nothing else."""

    def test_tail_vec_variants_per_target(self):
        def vec(target):
            dims = [*aot.POW2_DIMS, *aot.SPLIT_DIMS]
            return {n: aot.fwd_constexprs(target, f)["TAIL_VEC"] for n, family, f in aot.variants(dims, list(aot.DTYPES), target)
                    if family == "fwd" and aot.fwd_constexprs(target, f)["TAIL_VEC"]}

        for target in ("gfx1100", "gfx1103", "gfx1151"):
            self.assertEqual(vec(target), {f"fwd_prefill_{dtype}_d160{p}_{kind}{b}": 2 for dtype in aot.DTYPES
                                           for kind in ("paged", "flat")
                                           for p, b in (("", ""), ("", "_b32"), ("p", "_b32"))
                                           if (kind, b) != ("flat", "_b32") or p}, target)
        for target in ("sm_80", "sm_90", "gfx942", "gfx1030", "gfx1201"):
            self.assertEqual(vec(target), {}, target)


class SplitTileTest(unittest.TestCase):
    """The split head-dim tiles (aot.SPLIT_DIMS): a power of two and a smaller tail, each built
    with the variants, launch tiles and class choices of the power of two above it, but the
    launch tiles of aot.SPLIT_TILES."""

    def test_parts(self):
        for block_d, (head, tail) in aot.SPLIT_DIMS.items():
            self.assertEqual(head + tail, block_d)
            self.assertEqual(aot.dim_parts(block_d), (head, tail))
            for part in (head, tail):
                self.assertEqual(part & (part - 1), 0, block_d)
            # tl.dot takes operands of 16 columns and more; the tail is below the head.
            self.assertTrue(16 <= tail < head, block_d)
            self.assertEqual(aot.tile_dim(block_d), 1 << block_d.bit_length(), block_d)
            self.assertNotIn(block_d, aot.POW2_DIMS)
        for block_d in aot.POW2_DIMS:
            self.assertEqual((aot.dim_parts(block_d), aot.tile_dim(block_d)), ((block_d, 0), block_d))

    def test_the_kernel_gets_the_parts(self):
        # What compile_one hands attn_fwd: the power-of-two part and the tail, and the tile's
        # own width for a power of two.
        for target in ("gfx1100", "gfx942", "sm_90"):
            for block_d, parts in ((80, (64, 16)), (96, (64, 32)), (160, (128, 32)), (128, (128, 0))):
                fields = dict(tile="prefill", dtype="fp16", block_d=block_d, even_d=True, paged=False,
                              extras=False, ptr32=False)
                got = aot.fwd_constexprs(target, fields)
                self.assertEqual((got["BLOCK_D"], got["BLOCK_D2"]), parts, (target, block_d))
                self.assertEqual((got["BLOCK_M"], got["BLOCK_N"]), aot.kernel_tile(target, fields)[:2])

    def test_compile_options_only_at_cdna_split_tiles(self):
        # aot.SPLIT_OPTIONS: NVIDIA, RDNA and every power-of-two tile compile with no options of it.
        for target in ("sm_80", "sm_90", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1103", "gfx1201"):
            for name, family, fields in aot.variants(aot.BLOCK_DIMS, list(aot.DTYPES), target):
                if family == "fwd" and (aot.target_kind(target) != "cdna" or fields["block_d"] not in aot.SPLIT_DIMS):
                    self.assertEqual(aot.split_options(target, fields), {}, (target, name))
        for family, kernel_class, block_d, *dtype in aot.SPLIT_OPTIONS:
            self.assertIn(tuple(dtype), [()] + [(d,) for d in aot.DTYPES])
            if family.startswith("gfx"):
                family = aot.tile_family(family)
            self.assertIn((family, kernel_class), aot.TILES)
            self.assertIn(block_d, aot.SPLIT_DIMS)

    def test_variants_follow_the_power_of_two_above(self):
        def names(block_d, target):
            # The TMA kernels are built at exact head dims only (checked below).
            return sorted(n for n, family, f in aot.variants([block_d], list(aot.DTYPES), target) if family != "fwd_tma")

        for target in ("sm_80", "sm_86", "sm_90", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1103", "gfx1201"):
            for block_d in aot.SPLIT_DIMS:
                above = aot.tile_dim(block_d)
                if not aot.split_built(target, block_d):
                    # NVIDIA and CDNA have no 48 tile: nothing at all, not even its merge.
                    self.assertTrue(block_d == 48 and aot.target_kind(target) in ("cuda", "cdna"), (target, block_d))
                    self.assertEqual(names(block_d, target), [])
                    continue
                self.assertEqual([n.replace(f"_d{block_d}", f"_d{above}") for n in names(block_d, target)],
                                 names(above, target), (target, block_d))
                for _, family, fields in aot.variants([block_d], list(aot.DTYPES), target):
                    if family == "fwd":
                        cls = "prefill_x" if fields["tile"] == "prefill" and fields["extras"] else fields["tile"]
                        if fields["paged"] and (aot.tile_family(target), f"{cls}_paged") in aot.TILES:
                            cls = f"{cls}_paged"
                        # The most specific row wins: a target's over its family's, a dtype's
                        # over both. KEY_HALVES' tile where the variant takes it (gfx12's flat
                        # prefill at 80, 96 and 160: KeyHalvesTest), else SPLIT_TILES', else the
                        # power of two's TILES entry.
                        own = [tiles[block_d] for (fam, c, *dt), tiles in sorted(aot.SPLIT_TILES.items(),
                                                                                key=lambda kv: (len(kv[0]), kv[0][0] == target))
                               if block_d in tiles and fam in (aot.tile_family(target), target) and c == cls
                               and dt in ([], [fields["dtype"]])]
                        want = own[-1] if own else aot.TILES[aot.tile_key(target, fields)][above]
                        if aot.key_halves(target, fields):
                            want = aot.KEY_HALVES[(*aot.tile_key(target, fields), block_d)]
                        self.assertEqual(aot.kernel_tile(target, fields), want, (target, block_d))
                        self.assertEqual(aot.one_loop(target, fields), aot.one_loop(target, dict(fields, block_d=above)))
        # sm_90's TMA kernels at the split head dims: the prefill class at 80, 96 and 160, the
        # warp-specialized one at 96 and 160 (two descriptors per tensor: a power of two and a tail
        # of 16 or 32 columns), each through its class's split kernel (one parameter list for both).
        self.assertEqual(sorted(n for n, family, _ in aot.variants(list(aot.SPLIT_DIMS), list(aot.DTYPES), "sm_90")
                                if family == "fwd_tma"),
                         sorted([f"fwd_tma_{dt}_d{d}" for dt in aot.DTYPES for d in (80, 96, 160)]
                                + [f"fwd_tma_ws_{dt}_d{d}" for dt in aot.DTYPES for d in (96, 160)]))
        self.assertEqual(aot.TMA_SPLIT_KERNELS, {"prefill": "attn_fwd_tma_split", "prefill_ws": "attn_fwd_tma_ws_split"})
        self.assertEqual({tile for (family, tile), tiles in aot.TMA_TILES.items()
                          if family == "sm90" and set(tiles) & set(aot.SPLIT_DIMS)}, set(aot.TMA_SPLIT_KERNELS))
        def params(source, kernel):
            with open(os.path.join(REPO, "kernels", source)) as f:
                tree = ast.parse(f.read())
            return [a.arg for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == kernel
                    for a in node.args.args]
        self.assertEqual(params("attention_ws.py", "attn_fwd_tma_ws_split"), params("attention_tma.py", "attn_fwd_tma_split"))
        self.assertIn("q2_desc", params("attention_ws.py", "attn_fwd_tma_ws_split"))


@unittest.skipUnless(have_triton(), "needs triton (the build's venv)")
class RealKernelTest(unittest.TestCase):
    """The smallest kernel aot.py builds, compiled for gfx1100 (wave 32) through compile_one."""

    VARIANT = next(v for v in aot.variants([32], ["fp16"]) if v[1] == "merge")

    @classmethod
    def setUpClass(cls):
        # Triton's compile cache: the caller's when set, else one for this run.
        cls.cache = None
        if "TRITON_CACHE_DIR" not in os.environ:
            cls.cache = tempfile.TemporaryDirectory()
            os.environ["TRITON_CACHE_DIR"] = cls.cache.name

    @classmethod
    def tearDownClass(cls):
        if cls.cache:
            del os.environ["TRITON_CACHE_DIR"]
            cls.cache.cleanup()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(self.tmp.name, "gfx1100"))
        self.facts = []
        self.real_facts = aot.amdgpu_kernel_facts
        self.real_target = aot.gpu_target

        def record(asm, kernel):
            self.facts.append(self.real_facts(asm, kernel))
            return self.facts[-1]
        aot.amdgpu_kernel_facts = record

    def tearDown(self):
        aot.amdgpu_kernel_facts = self.real_facts
        aot.gpu_target = self.real_target
        self.tmp.cleanup()

    def compile(self):
        name, family, fields = self.VARIANT
        return aot.compile_one(("gfx1100", name, family, fields, self.tmp.name))

    def test_real_metadata_matches_the_launch(self):
        import attention

        row = dict(zip(aot.MANIFEST_COLUMNS, self.compile()))
        fn = attention.attn_merge
        facts = self.facts[-1]
        self.assertEqual(facts["threads"], aot.MERGE_WARPS * 32)
        self.assertEqual(facts["threads"], row["threads"])
        self.assertEqual(facts["wave"], 32)
        self.assertEqual(len(facts["arg_sizes"]), len(fn.arg_names) - len(fn.constexprs) + row["scratch_args"])
        self.assertLessEqual(facts["static_shared"] + row["shared"], 64 * 1024)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp.name, row["file"])))

    def test_a_wrong_wave_size_fails_the_build(self):
        from triton.backends.compiler import GPUTarget

        # Triton takes the wave size from the arch name (gfx1100: 32), whatever the target says.
        aot.gpu_target = lambda target: GPUTarget("hip", target, 64)
        with self.assertRaises(RuntimeError) as caught:
            self.compile()
        message = str(caught.exception)
        for part in (f"gfx1100/{self.VARIANT[0]}", "32-wide waves, aot.py assumed 64",
                     "compiled for 128 threads per block, launched with 256"):
            self.assertIn(part, message)
        self.assertFalse(os.listdir(os.path.join(self.tmp.name, "gfx1100")), "a refused code object was written")


if __name__ == "__main__":
    unittest.main()
