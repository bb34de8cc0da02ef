#!/usr/bin/env python3
"""scripts/kernel_report.py's parsing and metrics: matrix-instruction MACs, basic blocks and loops
of AMDGCN assembly, the hot loop and its spills, TTGIR dot layouts, the occupancy rules, the
issued/useful and instructions-per-4096-MACs figures, --check, and the manifest walk.

    python3 tests/python/test_kernel_report.py

Synthetic assembly and TTGIR, any python3. With triton importable (the build's venv), it also
compiles the smallest merge kernel for gfx1100 through aot.py's compile_one and reads the
assembly and TTGIR it writes beside the code object.
"""
import os
import sys
import tempfile
import unittest

from triton_support import have_triton

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "kernels"))
# No __pycache__ in kernels/: the build script watches that folder and would rebuild.
sys.dont_write_bytecode = True
import kernel_report as kr  # noqa: E402

METADATA = """
	.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     {agprs}
    .args:           []
    .group_segment_fixed_size: {static_lds}
    .max_flat_workgroup_size: {threads}
    .name:           attn_fwd
    .private_segment_fixed_size: {scratch}
    .sgpr_count:     {sgprs}
    .sgpr_spill_count: 3
    .symbol:         attn_fwd.kd
    .vgpr_count:     {vgprs}
    .vgpr_spill_count: {spills}
    .wavefront_size: {wave}
amdhsa.target:   amdgcn-amd-amdhsa--{target}
amdhsa.version:
  - 1
  - 2
...

	.end_amdgpu_metadata
"""


def descriptor(next_free_vgpr):
    """The kernel descriptor's block as LLVM writes it into the assembly (the fields read here)."""
    if next_free_vgpr is None:
        return ""
    return f"""	.rodata
	.p2align	6, 0x0
	.amdhsa_kernel attn_fwd
		.amdhsa_group_segment_fixed_size 0
		.amdhsa_next_free_vgpr {next_free_vgpr}
		.amdhsa_next_free_sgpr 83
	.end_amdhsa_kernel
	.text
"""


def fill(n, mnemonic="v_add_f32_e32 v0, v1, v2"):
    return "".join(f"\t{mnemonic}\n" for _ in range(n))


def kernel_asm(hot_wmma=20, hot_other=387, masked_extra=50, spill_in_hot=False, spill_in_masked=False, target="gfx1100", vgprs=237,
               agprs=0, sgprs=79, threads=256, wave=32, scratch=0, spills=0, static_lds=0, matrix=None,
               occupancy=6, descriptor_vgprs=None):
    """A kernel shaped like attn_fwd's: a masked key loop, an unmasked one (the hot loop, with an
    atomic retry loop nested in it), a masked one whose exit branches back to an epilogue laid out
    before it, and LLVM's loop annotations, .Ltmp labels and `; %bb.N:` blocks."""
    body = fill(hot_wmma, matrix or "v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]")
    hot_spill = ("\tscratch_store_b32 off, v1, off offset:4 ; 4-byte Folded Spill\n"
                 "\tscratch_load_b32 v1, off, off offset:4 ; 4-byte Folded Reload\n") if spill_in_hot else ""
    hot_other -= 2 if spill_in_hot else 0
    masked_spill = ("\tscratch_store_b32 off, v1, off offset:8 ; 4-byte Folded Spill\n"
                    "\tscratch_load_b32 v1, off, off offset:8 ; 4-byte Folded Reload\n") if spill_in_masked else ""
    return f"""	.amdgcn_target "amdgcn-amd-amdhsa--{target}"
	.text
	.globl	attn_fwd
attn_fwd:                               ; @attn_fwd
.Lfunc_begin0:
; %bb.0:
{fill(10)}.LBB0_1:                                ; =>This Inner Loop Header: Depth=1
{fill(5)}{body}{fill(hot_other - 2 + masked_extra - 5)}	s_cbranch_scc1 .LBB0_1
; %bb.2:
{fill(3)}	s_branch .LBB0_6
.LBB0_3:                                ; %._crit_edge
{fill(7)}	s_endpgm
.LBB0_4:                                ; =>This Loop Header: Depth=1
                                        ;     Child Loop BB0_5 Depth 2
{fill(3)}.Ltmp7:
	buffer_load_dwordx4 v[4:7], v3, s[0:3], 0 offen
{hot_spill}{body}{fill(hot_other - 3 - 1 - 9 - 2)}.LBB0_5:                                ; %atomicrmw.start
                                        ;   Parent Loop BB0_4 Depth=1
                                        ; =>  This Inner Loop Header: Depth=2
{fill(8)}	s_cbranch_execnz .LBB0_5
; %bb.7:                                ;   in Loop: Header=BB0_4 Depth=1
	s_nop 0
	s_cbranch_scc1 .LBB0_4
.LBB0_6:                                ; =>This Inner Loop Header: Depth=1
{fill(4)}{masked_spill}{body}{fill(hot_other - 6 + masked_extra - len(masked_spill.splitlines()))}	s_cbranch_scc0 .LBB0_3
; %bb.8:                                ;   in Loop: Header=BB0_6 Depth=1
	s_branch .LBB0_6
.Lfunc_end0:
	.size	attn_fwd, .Lfunc_end0-attn_fwd
; Kernel info:
; NumVgprs: {vgprs - agprs}
; Occupancy: {occupancy}
{descriptor(descriptor_vgprs)}""" + METADATA.format(target=target, vgprs=vgprs, agprs=agprs, sgprs=sgprs, threads=threads, wave=wave,
                      scratch=scratch, spills=spills, static_lds=static_lds)


TTGIR = """#blocked = #ttg.blocked<{sizePerThread = [8, 1], threadsPerWarp = [16, 2], warpsPerCTA = [1, 8], order = [0, 1]}>
#mma = #ttg.amd_wmma<{version = 1, isTranspose = true, warpsPerCTA = [8, 1]}>
#mma1 = #ttg.amd_wmma<{version = 1, isTranspose = true, warpsPerCTA = [2, 4]}>
module attributes {"ttg.num-warps" = 8 : i32} {
  tt.func public @attn_fwd() {
      %s_1 = tt.dot %q, %k, %c : tensor<32x128xf16, #ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 16}>> * tensor<128x32xf16, #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 16}>> -> tensor<32x32xf32, #mma> loc(#loc1)
      %acc_2 = tt.dot %p, %v, %a : tensor<32x32xf16, #ttg.dot_op<{opIdx = 0, parent = #mma1, kWidth = 16}>> * tensor<32x128xf16, #ttg.dot_op<{opIdx = 1, parent = #mma1, kWidth = 16}>> -> tensor<32x128xf32, #mma1> loc(#loc2)
      %s_3 = tt.dot %q, %k, %c : tensor<32x128xf16, #ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 16}>> * tensor<128x32xf16, #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 16}>> -> tensor<32x32xf32, #mma> loc(#loc3)
  }
}
"""


class MatrixMacsTest(unittest.TestCase):
    def test_wmma(self):
        self.assertEqual(kr.matrix_macs("v_wmma_f32_16x16x16_f16"), 4096)
        self.assertEqual(kr.matrix_macs("v_wmma_f32_16x16x16_bf16"), 4096)
        self.assertEqual(kr.matrix_macs("v_wmma_i32_16x16x32_iu4"), 8192)
        self.assertEqual(kr.matrix_macs("v_swmmac_f32_16x16x32_f16"), 8192)

    def test_mfma_single_block(self):
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x8f16"), 8192)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x8_f16"), 8192)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x16f16"), 4096)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x16_bf16"), 4096)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x8bf16_1k"), 8192)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x32_f16"), 8192)  # gfx950
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x2f32"), 2048)

    def test_mfma_multi_block(self):
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x4f16"), 8192)       # 2 blocks
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x4f16"), 4096)       # 4 blocks
        self.assertEqual(kr.matrix_macs("v_mfma_f32_4x4x4f16"), 1024)         # 16 blocks
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x4_2b_f16"), 8192)   # gfx940 name
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x4_4b_f16"), 4096)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x4bf16_1k"), 8192)
        self.assertEqual(kr.matrix_macs("v_mfma_f32_32x32x2bf16"), 4096)      # gfx908 bf16, 2 blocks
        self.assertEqual(kr.matrix_macs("v_mfma_f32_16x16x1f32"), 1024)
        self.assertEqual(kr.matrix_macs("v_mfma_f64_4x4x4f64"), 256)

    def test_not_matrix(self):
        for mnemonic in ("v_add_f32_e32", "v_mfma_ld_scale_b32", "s_waitcnt", "v_wmma"):
            self.assertIsNone(kr.matrix_macs(mnemonic), mnemonic)


class LoopTest(unittest.TestCase):
    def test_blocks(self):
        blocks = kr.parse_blocks(kernel_asm(), "attn_fwd")
        names = [b.name for b in blocks]
        # .Ltmp7 and .Lfunc_begin0 lie inside blocks; `; %bb.N:` lines start blocks.
        self.assertEqual(names, ["%bb.0", "BB0_1", "%bb.2", "BB0_3", "BB0_4", "BB0_5", "%bb.7", "BB0_6", "%bb.8"])
        self.assertNotIn("Kernel info", "".join(b.comment for b in blocks))  # stops at .Lfunc_end0

    def test_loops_from_annotations(self):
        blocks = kr.parse_blocks(kernel_asm(), "attn_fwd")
        loops = {h: sorted(blocks[i].name for i in idx) for h, idx in kr.find_loops(blocks).items()}
        self.assertEqual(loops, {"BB0_1": ["BB0_1"], "BB0_4": ["%bb.7", "BB0_4", "BB0_5"], "BB0_5": ["BB0_5"],
                                 "BB0_6": ["%bb.8", "BB0_6"]})
        # The exit of BB0_6 back to BB0_3 (an epilogue laid out before the loop) is no loop.
        self.assertNotIn("BB0_3", loops)

    def test_loops_without_annotations(self):
        asm = "\n".join(line.split(";")[0].rstrip() if "Loop" in line else line
                        for line in kernel_asm().splitlines())
        blocks = kr.parse_blocks(asm, "attn_fwd")
        loops = kr.find_loops(blocks)
        self.assertIn("BB0_1", loops)
        self.assertIn("BB0_5", loops)

    def test_hot_loop_is_the_leanest_with_most_matrix_instructions(self):
        header, hot, others = kr.hot_loop(kr.parse_blocks(kernel_asm(), "attn_fwd"))
        self.assertEqual(header, "BB0_4")
        self.assertEqual(hot["matrix"], {"v_wmma_f32_16x16x16_f16": 20})
        self.assertEqual(hot["macs"], 20 * 4096)
        self.assertEqual(hot["insns"], 407)
        # The Triton buffer load through its own resource is not scratch.
        self.assertEqual((hot["stores"], hot["loads"]), (0, 0))
        self.assertEqual(len(others), 2)

    def test_spills_in_the_hot_loop(self):
        header, hot, _ = kr.hot_loop(kr.parse_blocks(kernel_asm(spill_in_hot=True), "attn_fwd"))
        self.assertEqual((header, hot["insns"], hot["stores"], hot["loads"]), ("BB0_4", 407, 1, 1))

    def test_loop_spills_count_only_scratch_inside_loops(self):
        """aot.py's manifest column `loop_spills` (kernels/amdgcn.py): the hot loop's spill and
        reload count, a spill before the first loop does not."""
        import amdgcn
        self.assertEqual(amdgcn.loop_scratch_accesses(kernel_asm(), "attn_fwd"), 0)
        self.assertEqual(amdgcn.loop_scratch_accesses(kernel_asm(spill_in_hot=True), "attn_fwd"), 2)
        outside = kernel_asm().replace(
            "; %bb.0:\n", "; %bb.0:\n\tscratch_store_b32 off, v1, off offset:8 ; 4-byte Folded Spill\n", 1)
        self.assertIn("offset:8", outside)
        self.assertEqual(amdgcn.loop_scratch_accesses(outside, "attn_fwd"), 0)
        both = kernel_asm(spill_in_hot=True).replace(
            "; %bb.0:\n", "; %bb.0:\n\tscratch_store_b32 off, v1, off offset:8 ; 4-byte Folded Spill\n", 1)
        self.assertEqual(amdgcn.loop_scratch_accesses(both, "attn_fwd"), 2)

    def test_scratch_access(self):
        insn = kr.Insn
        self.assertTrue(kr.is_scratch_access(insn("scratch_store_dwordx2", "off, v[12:13], off offset:24", "")))
        self.assertTrue(kr.is_scratch_access(insn("buffer_store_dword", "v1, off, s[0:3], 0 offset:4",
                                                  "4-byte Folded Spill")))
        self.assertTrue(kr.is_scratch_access(insn("buffer_load_dword", "v1, off, s[0:3], 0", "4-byte Folded Reload")))
        self.assertFalse(kr.is_scratch_access(insn("buffer_load_dwordx4", "v[4:7], v3, s[0:3], 0 offen", "")))
        self.assertFalse(kr.is_scratch_access(insn("global_store_dword", "v0, v1, s[2:3]", "")))

    def test_no_matrix_loop(self):
        self.assertEqual(kr.hot_loop(kr.parse_blocks(kernel_asm(matrix="v_fma_f32 v0, v1, v2, v3"), "attn_fwd")), (None, None, []))

    def test_fma_macs(self):
        # Per wave32 instruction: v_dot2 2 MACs a lane, v_fma/v_fmac 1; nothing else counts.
        self.assertEqual(kr.fma_macs("v_dot2c_f32_f16", 32), 64)
        self.assertEqual(kr.fma_macs("v_dot2c_f32_f16_e32", 32), 64)
        self.assertEqual(kr.fma_macs("v_dot2_f32_f16", 32), 64)
        self.assertEqual(kr.fma_macs("v_dot2_f32_bf16", 32), 64)
        self.assertEqual(kr.fma_macs("v_fmac_f32_e32", 32), 32)
        self.assertEqual(kr.fma_macs("v_fma_f32", 64), 64)
        self.assertEqual(kr.fma_macs("v_fma_mix_f32", 32), 32)
        self.assertEqual(kr.fma_macs("v_pk_fma_f32", 32), 64)
        for other in ("v_fma_f16", "v_fmac_f16_e32", "v_pk_fma_f16", "v_dot4_i32_i8", "v_dot2_f16_f16", "v_fmaak_f32",
                      "v_fma_f64", "v_mul_f32_e32", "v_wmma_f32_16x16x16_f16"):
            self.assertIsNone(kr.fma_macs(other, 32), other)

    def test_fma_hot_loop(self):
        # gfx1030 (no matrix cores): the loop with the most v_dot2 MACs, the leanest among equals.
        asm = kernel_asm(hot_wmma=128, hot_other=152, target="gfx1030", matrix="v_dot2c_f32_f16 v0, v1, v2")
        blocks = kr.parse_blocks(asm, "attn_fwd")
        self.assertEqual(kr.hot_loop(blocks), (None, None, []))  # no matrix instructions
        header, hot, others = kr.hot_loop(blocks, 32)
        self.assertEqual((header, hot["insns"], hot["matrix"], hot["macs"]),
                         ("BB0_4", 280, {"v_dot2c_f32_f16": 128}, 128 * 64))
        self.assertEqual(len(others), 2)

    def test_unlabeled_reloads_through_the_scratch_resource(self):
        # gfx10 spills through buffer instructions on the private segment's resource, and LLVM
        # comments only some of its reloads: the resource tells them apart from Triton's loads.
        spills = ("\tbuffer_store_dword v1, off, s[52:55], 0 offset:4 ; 4-byte Folded Spill\n"
                  "\tbuffer_load_dword v1, off, s[52:55], 0 offset:8\n"
                  "\tbuffer_load_dword v2, off, s[52:55], 0 offset:12\n")
        asm = kernel_asm().replace(".Ltmp7:\n", ".Ltmp7:\n" + spills)
        blocks = kr.parse_blocks(asm, "attn_fwd")
        self.assertEqual(kr.scratch_resources(blocks), {"s[52:55]"})
        _, hot, _ = kr.hot_loop(blocks)
        # Two unlabeled reloads and the spill; the buffer load through s[0:3] is Triton's.
        self.assertEqual((hot["stores"], hot["loads"]), (1, 2))
        insn = kr.Insn("buffer_load_dword", "v1, off, s[52:55], 0 offset:8", "")
        self.assertFalse(kr.is_scratch_access(insn))
        self.assertTrue(kr.is_scratch_access(insn, {"s[52:55]"}))


def branching_loop_asm():
    """A key loop shaped like CK's masked gfx12 forward: the edge tiles branch into a per-pixel
    mask block that the interior tiles skip (header 17 instructions, mask 30, tail 23, latch 1)."""
    wmma = fill(4, "v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]")
    return f"""	.text
attn_fwd:
{fill(6)}.LBB0_1:                                ; =>This Inner Loop Header: Depth=1
{fill(10)}{wmma}	ds_load_b128 v[0:3], v4
	ds_load_b128 v[4:7], v4 offset:16
	s_cbranch_vccnz .LBB0_3
; %bb.2:                                ;   in Loop: Header=BB0_1 Depth=1
{fill(30, "v_cndmask_b32_e32 v0, v1, v2, vcc_lo")}.LBB0_3:                                ;   in Loop: Header=BB0_1 Depth=1
{fill(20)}	ds_store_b64 v4, v[0:1]
	ds_bpermute_b32 v5, v6, v7
	s_cbranch_scc0 .LBB0_5
; %bb.4:                                ;   in Loop: Header=BB0_1 Depth=1
	s_branch .LBB0_1
.LBB0_5:
	s_endpgm
.Lfunc_end0:
""" + METADATA.format(target="gfx1201", vgprs=254, agprs=0, sgprs=47, threads=128, wave=32, scratch=0, spills=0,
                      static_lds=9216)


class LoopPathTest(unittest.TestCase):
    def test_interior_and_edge_paths(self):
        blocks = kr.parse_blocks(branching_loop_asm(), "attn_fwd")
        header, hot, _ = kr.hot_loop(blocks)
        self.assertEqual((header, hot["insns"], hot["lds"]), ("BB0_1", 71, 4))
        self.assertEqual((hot["path_min"], hot["path_max"]), (41, 71))

    def test_one_path_through_a_nested_loop(self):
        # attn_fwd's hot loop holds an atomic retry loop: its back edge is not followed, its
        # blocks count once, so both paths are the whole loop.
        _, hot, _ = kr.hot_loop(kr.parse_blocks(kernel_asm(), "attn_fwd"))
        self.assertEqual((hot["path_min"], hot["path_max"], hot["lds"]), (407, 407, 0))

    def test_ck_reference_cells(self):
        """scripts/ck_gfx12_reference.py's line: instructions per 4096 MACs without a mask, then
        the masked instance's interior and edge tiles, LDS operations per 4096 MACs."""
        import ck_gfx12_reference as ck
        # 4 WMMAs per wave x 4 waves = 2 x 64 x 64 x 8 useful MACs per key tile.
        row = kr.analyze(ck.CK, "gfx1201", "attn_fwd", "fwd", 64, 64, 8, 128, 0, branching_loop_asm(), None)
        self.assertEqual((row["issued_useful"], row["insns_per_4096"]), (1.0, 71 * 4 / 16))
        cells = ck.cells(row, row)
        self.assertEqual(cells[:4], ["64x64, 4", "1.00", "17.8 / 10.2 (edge tiles 17.8)", "1.00"])
        self.assertEqual(cells[4:], ["254", "5/14 (?)", "0/0", "0"])


class TtgirTest(unittest.TestCase):
    def test_dot_layouts(self):
        self.assertEqual(kr.dot_layouts(TTGIR), [(32, 32, 128, "wmma", (8, 1), None), (32, 128, 32, "wmma", (2, 4), None)])
        self.assertEqual(kr.format_dots(kr.dot_layouts(TTGIR)), "32x32x128 wmma[8,1]; 32x128x32 wmma[2,4]")

    def test_inline_mfma_encoding(self):
        line = ("%s = tt.dot %a, %b, %c, inputPrecision = tf32 : tensor<128x128xf16, #ttg.dot_op<{opIdx = 0, "
                "parent = #mma, kWidth = 4}>> * tensor<128x64xf16, #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 4}>>"
                " -> tensor<128x64xf32, #ttg.amd_mfma<{version = 3, warpsPerCTA = [4, 1], instrShape = [32, 32, 8], "
                "isTransposed = true}>>")
        self.assertEqual(kr.dot_layouts(line), [(128, 64, 128, "mfma", (4, 1), (32, 32, 8))])
        self.assertEqual(kr.format_dots(kr.dot_layouts(line)), "128x64x128 mfma[4,1] 32x32x8")


class OccupancyTest(unittest.TestCase):
    def waves(self, target, vgprs, agprs=0, sgprs=50):
        return kr.waves_from_registers(kr.arch_facts(target), vgprs, agprs, sgprs)

    def test_registers(self):
        # The `; Occupancy:` LLVM printed for these kernels (triton 3.6).
        self.assertEqual(self.waves("gfx1100", 237), 6)    # 1536 / roundup(237, 24) = 1536 / 240
        self.assertEqual(self.waves("gfx1100", 256), 5)
        self.assertEqual(self.waves("gfx1100", 61), 16)
        self.assertEqual(self.waves("gfx1201", 183), 8)    # 1536 / 192
        self.assertEqual(self.waves("gfx1201", 130), 10)
        self.assertEqual(self.waves("gfx1102", 130), 7)    # 1024 / 144
        # The register-file classes of kernels/aot.py's RDNA tiles: 1536 VGPRs on gfx1100, gfx1101,
        # gfx1151, gfx1200 and gfx1201; 1024 on the other gfx11 parts (and every gfx103x).
        for target in ("gfx1100", "gfx1101", "gfx1151", "gfx1200", "gfx1201"):
            self.assertEqual(self.waves(target, 240), 6, target)
        for target in ("gfx1102", "gfx1103", "gfx1150", "gfx1152"):
            self.assertEqual(self.waves(target, 240), 4, target)   # 1024 / 240
            self.assertEqual(self.waves(target, 160), 6, target)   # waves_per_eu 6's budget
            self.assertEqual(self.waves(target, 144), 7, target)
        self.assertEqual(self.waves("gfx942", 212, 32), 2)  # unified 512 / 216
        self.assertEqual(self.waves("gfx942", 323, 67), 1)
        self.assertEqual(self.waves("gfx942", 28), 8)
        self.assertEqual(self.waves("gfx942", 128, 20, sgprs=106), 4)
        self.assertEqual(self.waves("gfx942", 28, sgprs=106), 7)   # gfx9: SGPRs limit too
        self.assertEqual(self.waves("gfx942", 28, sgprs=96), 8)
        self.assertEqual(self.waves("gfx908", 100, 200), 1)  # separate files: the larger one counts
        self.assertEqual(self.waves("gfx908", 100, 40), 2)
        self.assertIsNone(kr.arch_facts("sm_90"))
        # RDNA 2: 1024 VGPRs in granules of 16, 16 waves; 160 VGPRs (waves_per_eu 6) give 6.
        self.assertEqual(self.waves("gfx1030", 160), 6)
        self.assertEqual(self.waves("gfx1030", 256), 4)
        self.assertEqual(self.waves("gfx1031", 111), 9)

    def test_registers_of_the_descriptor(self):
        # Issue 59: triton's gfx1201 d = 64 prefill (waves_per_eu 6) uses 133 VGPRs; LLVM's
        # descriptor asks for 217, and occupancy is that of 217 (LLVM's own `; Occupancy: 6`), not
        # the 10 waves of 133.
        asm = kernel_asm(hot_wmma=8, target="gfx1201", vgprs=133, descriptor_vgprs=217)
        self.assertEqual(kr.descriptor_vgprs(asm, "attn_fwd"), 217)
        self.assertIsNone(kr.descriptor_vgprs(asm, "another_kernel"))
        self.assertIsNone(kr.descriptor_vgprs(kernel_asm(), "attn_fwd"))
        row = analyze(asm, target="gfx1201")
        row.update(variant="fwd_prefill_fp16_d64_flat", tile="prefill", dtype="fp16", even_d=True, paged=False,
                   extras=False)
        self.assertEqual((row["vgprs"], row["descriptor_vgprs"], row["waves_regs"]), (133, 217, 6))
        self.assertEqual(kr.check([row]), [])
        # Without the descriptor's count the registers give 10 waves, and the check names the
        # disagreement with LLVM's remark.
        unpadded = analyze(kernel_asm(hot_wmma=8, target="gfx1201", vgprs=133), target="gfx1201")
        unpadded.update(row, descriptor_vgprs=None, allocated_vgprs=133, waves_regs=unpadded["waves_regs"])
        problems = kr.check([unpadded])
        self.assertEqual(unpadded["waves_regs"], 10)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("gfx1201 fwd_prefill_fp16_d64_flat: 10 waves/SIMD from 133 VGPRs", problems[0])
        self.assertIn("LLVM's `; Occupancy:` 6", problems[0])

    def test_matrix_cores(self):
        for target in ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"):
            self.assertTrue(kr.arch_facts(target)["matrix"], target)
        for target in ("gfx900", "gfx906", "gfx1010", "gfx1030", "gfx1036"):
            self.assertFalse(kr.arch_facts(target)["matrix"], target)

    def test_lds(self):
        rdna, cdna = kr.arch_facts("gfx1100"), kr.arch_facts("gfx942")
        self.assertEqual(kr.waves_from_lds(rdna, 8192, 8), 16)   # 16 work-groups of 8 waves on 4 SIMDs, capped
        self.assertEqual(kr.waves_from_lds(rdna, 32768, 8), 8)   # 128 KiB per WGP / 32 KiB = 4 groups
        self.assertEqual(kr.waves_from_lds(rdna, 65536, 8), 4)
        self.assertEqual(kr.waves_from_lds(cdna, 32768, 8), 4)   # 64 KiB per CU / 32 KiB = 2 groups
        self.assertEqual(kr.waves_from_lds(cdna, 32768, 4), 2)
        self.assertEqual(kr.waves_from_lds(cdna, 16384 + 1, 4), 3)  # rounded to 512 bytes: 3 groups fit
        self.assertEqual(kr.waves_from_lds(cdna, 0, 4), 8)
        self.assertEqual(kr.waves_from_lds(kr.arch_facts("gfx950"), 32768, 4), 5)


def analyze(asm, ttgir=TTGIR, target="gfx1100", block=(32, 32, 128), threads=256, shared=8192):
    return kr.analyze(kr.OURS, target, "attn_fwd", "fwd", *block, threads, shared, asm, ttgir)


class MetricsTest(unittest.TestCase):
    def test_issue_23_gfx1100_d128(self):
        # 20 WMMA 16x16x16 and 407 instructions per wave, 8 waves, 32x32 tile, d=128: the issue's
        # 2.50 and 50.9.
        row = analyze(kernel_asm())
        self.assertAlmostEqual(row["issued_useful"], 2.5)
        self.assertAlmostEqual(row["insns_per_4096"], 407 * 8 / (2 * 32 * 32 * 128 / 4096))
        self.assertEqual(f"{row['insns_per_4096']:.1f}", "50.9")
        self.assertEqual((row["warps"], row["waves_regs"], row["waves_lds"], row["llvm_occupancy"]), (8, 6, 16, 6))
        self.assertEqual(row["sgpr_spills"], 3)

    def test_issue_23_gfx942_d128(self):
        asm = kernel_asm(hot_wmma=48, hot_other=398, target="gfx942", vgprs=237, sgprs=106, threads=512, wave=64,
                         matrix="v_mfma_f32_32x32x8_f16 a[0:15], v[2:3], v[18:19], a[0:15]")
        row = analyze(asm, ttgir="", target="gfx942", block=(128, 64, 128), threads=512, shared=32768)
        self.assertAlmostEqual(row["issued_useful"], 1.5)
        self.assertEqual(f"{row['insns_per_4096']:.1f}", "7.0")
        self.assertEqual((row["waves_regs"], row["waves_lds"], row["dots"]), (2, 4, []))

    def test_table_and_check(self):
        good = analyze(kernel_asm(hot_wmma=8, target="gfx1100"))
        good.update(variant="fwd_prefill_fp16_d128_flat", tile="prefill", dtype="fp16", even_d=True, paged=False,
                    extras=False)
        self.assertAlmostEqual(good["issued_useful"], 1.0)
        self.assertEqual(kr.check([good]), [])
        spilling = analyze(kernel_asm(hot_wmma=8, spill_in_hot=True))
        spilling.update(good, hot=spilling["hot"], variant="spilling")
        repeated = dict(good, issued_useful=2.5, variant="repeated")
        big = dict(spilling, block_d=256, variant="d256")  # d=256 may spill
        reference = dict(repeated, source=kr.AITER)
        problems = kr.check([good, spilling, repeated, big, reference])
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("gfx1100 spilling: 1 scratch stores and 1 loads in the key loop", problems[1])
        self.assertIn("gfx1100 repeated: issued/useful matrix work 2.50 > 1.00", problems[0])
        cells = kr.table_cells(good)
        self.assertEqual(cells[:5], ["gfx1100", "ours", "fwd_prefill_fp16_d128_flat", "32x32, 8", "128"])
        self.assertEqual(cells[-3:], ["32x32x128 wmma[8,1]; 32x128x32 wmma[2,4]", "1.00", "49.4"])
        self.assertIn("| gfx1100 | ours | fwd_prefill_fp16_d128_flat |", kr.markdown([good], "/tmp/x"))

    def test_check_covers_the_masked_key_loops(self):
        """A reload in a masked key loop, not the hot one, fails --check at d <= 128 as one in the
        hot loop does (gfx1201's paged extras `_b32` at d = 128 had one before the window mask
        became scalar offsets, issue 59); at d = 256 it may."""
        row = analyze(kernel_asm(hot_wmma=8, spill_in_masked=True, target="gfx1201"), target="gfx1201")
        row.update(variant="fwd_prefill_fp16_d128_paged_x_b32", tile="prefill", dtype="fp16", even_d=True, paged=True,
                   extras=True)
        self.assertEqual((row["hot"]["stores"], row["hot"]["loads"], row["other_stores"], row["other_loads"]),
                         (0, 0, 1, 1))
        problems = kr.check([row, dict(row, block_d=256, variant="fwd_prefill_fp16_d256_paged_x_b32")])
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("gfx1201 fwd_prefill_fp16_d128_paged_x_b32: 1 scratch stores and 1 loads in its other key loops",
                      problems[0])

    def test_check_on_the_small_register_parts(self):
        # gfx1103 (1024 VGPRs) is checked as gfx1100 is: key-loop scratch at d <= 128 fails.
        good = analyze(kernel_asm(hot_wmma=8, target="gfx1103", vgprs=144, occupancy=7), target="gfx1103")
        good.update(variant="fwd_prefill_fp16_d64_flat", tile="prefill", dtype="fp16", even_d=True, paged=False,
                    extras=False)
        self.assertEqual((good["waves_regs"], kr.check([good])), (7, []))
        spilling = analyze(kernel_asm(hot_wmma=8, spill_in_hot=True, target="gfx1103"), target="gfx1103")
        spilling.update(good, hot=spilling["hot"], variant="fwd_decode_fp16_d128_paged", block_d=128)
        problems = kr.check([good, spilling])
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("gfx1103 fwd_decode_fp16_d128_paged: 1 scratch stores and 1 loads in the key loop", problems[0])

    def test_fma_target_rows_and_check(self):
        # gfx1030, 16x16 tile, 8 waves, d=128: 128 v_dot2c per wave are the 65536 useful MACs once.
        asm = kernel_asm(hot_wmma=128, hot_other=152, target="gfx1030", vgprs=158,
                         matrix="v_dot2c_f32_f16 v0, v1, v2")
        good = analyze(asm, ttgir="", target="gfx1030", block=(16, 16, 128), threads=256, shared=4096)
        good.update(variant="fwd_prefill_fp16_d128_flat", tile="prefill", dtype="fp16", even_d=True, paged=False,
                    extras=False)
        self.assertIsNone(good["issued_useful"])
        self.assertAlmostEqual(good["fma_issued_useful"], 1.0)
        self.assertEqual(f"{good['insns_per_4096']:.1f}", "140.0")
        self.assertEqual((good["waves_regs"], good["matrix_cores"]), (6, False))
        cells = kr.table_cells(good)
        self.assertEqual(cells[-2:], ["n/a (no matrix cores; FMA 1.00)", "140.0"])
        self.assertEqual(cells[12], "128 v_dot2c_f32_f16")
        self.assertEqual(kr.check([good]), [])
        # Products repeated over the waves (a tile smaller than the layout), and key-loop spills.
        repeated = dict(good, fma_issued_useful=2.0, variant="repeated")
        spilling = analyze(kernel_asm(hot_wmma=128, hot_other=152, target="gfx1030", spill_in_hot=True,
                                      matrix="v_dot2c_f32_f16 v0, v1, v2"),
                           ttgir="", target="gfx1030", block=(16, 16, 128), threads=256, shared=4096)
        spilling.update(good, hot=spilling["hot"], variant="spilling")
        problems = kr.check([good, repeated, spilling])
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("gfx1030 repeated: issued/useful dot/FMA work 2.00 > 1.5", problems[0])
        self.assertIn("gfx1030 spilling: 1 scratch stores and 1 loads in the key loop", problems[1])
        # No dot/FMA loop at all is a problem too.
        none = analyze(kernel_asm(target="gfx1030", matrix="v_mul_f32_e32 v0, v1, v2"), ttgir="", target="gfx1030",
                       block=(16, 16, 128))
        none.update(good, hot=None, fma_issued_useful=None, variant="none")
        self.assertIn("no loop with dot/FMA instructions", kr.check([none])[0])

    def test_agpr_cells(self):
        asm = kernel_asm(target="gfx942", vgprs=212, agprs=32, sgprs=106, wave=64,
                         matrix="v_mfma_f32_32x32x8_f16 a[0:15], v[2:3], v[18:19], a[0:15]")
        row = analyze(asm, target="gfx942", block=(128, 64, 64), threads=256, shared=16384)
        row.update(variant="v", tile="prefill")
        self.assertEqual(kr.table_cells(row)[5], "180+32=212")


class CodeObjectCheckTest(unittest.TestCase):
    """scripts/check_triton_objects.py's instruction rule: matrix instructions where the target
    has them, the dot/FMA ones tl.dot lowers to on RDNA 2 (and no matrix instructions there)."""

    def test_expected_instructions(self):
        import check_triton_objects as cto
        self.assertEqual(cto.expected_instructions("gfx1100", "fp16"), (("v_wmma",), ()))
        self.assertEqual(cto.expected_instructions("gfx1201", "bf16"), (("v_wmma",), ()))
        self.assertEqual(cto.expected_instructions("gfx942", "bf16"), (("v_mfma",), ()))
        for target in ("gfx1030", "gfx1031", "gfx1036"):
            self.assertEqual(cto.expected_instructions(target, "fp16"), (("v_dot2",), ("v_wmma", "v_mfma")))
            self.assertEqual(cto.expected_instructions(target, "bf16"),
                             (("v_fmac_f32", "v_fma_f32"), ("v_wmma", "v_mfma")))

    def test_instruction_problems(self):
        import check_triton_objects as cto
        # llvm-objdump -d lines: a tab, the mnemonic, operands, then the encoding comment.
        dot = "\tv_dot2c_f32_f16_e32 v1, v2, v3                            // 000000001234: 04020503\n"
        fma = "\tv_fmac_f32_e32 v1, v2, v3                                 // 000000001238: 56020503\n"
        wmma = "\tv_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]  // 00000000123C: CC404000\n"
        self.assertEqual(cto.instruction_problems(dot, "gfx1030", "fp16"), [])
        self.assertEqual(cto.instruction_problems(fma, "gfx1030", "bf16"), [])
        self.assertIn("no v_dot2 instruction", cto.instruction_problems(fma, "gfx1030", "fp16")[0])
        self.assertIn("v_wmma instructions, which gfx1030 does not have",
                      cto.instruction_problems(dot + wmma, "gfx1030", "fp16")[0])
        self.assertEqual(cto.instruction_problems(wmma, "gfx1100", "fp16"), [])
        self.assertIn("does not use the matrix unit", cto.instruction_problems(dot, "gfx1100", "fp16")[0])


class ManifestTest(unittest.TestCase):
    HEADER = ["target", "variant", "kernel", "family", "tile", "dtype", "block_d", "even_d", "paged", "extras",
              "block_m", "block_n", "threads", "shared", "file"]

    def write(self, directory, asm=True):
        os.makedirs(os.path.join(directory, "gfx1100"))
        row = ["gfx1100", "fwd_prefill_fp16_d128_flat", "attn_fwd", "fwd", "prefill", "fp16", "128", "1", "0", "0",
               "32", "32", "256", "8192", "gfx1100/fwd_prefill_fp16_d128_flat.hsaco"]
        cuda = ["sm_90", "fwd_prefill_fp16_d128_flat", "attn_fwd", "fwd", "prefill", "fp16", "128", "1", "0", "0",
                "128", "64", "256", "0", "sm_90/fwd_prefill_fp16_d128_flat.cubin"]
        with open(os.path.join(directory, "manifest.tsv"), "w") as f:
            f.write("\n".join("\t".join(r) for r in (self.HEADER, row, cuda)) + "\n")
        if asm:
            with open(os.path.join(directory, "gfx1100", "fwd_prefill_fp16_d128_flat.amdgcn"), "w") as f:
                f.write(kernel_asm())
            with open(os.path.join(directory, "gfx1100", "fwd_prefill_fp16_d128_flat.ttgir"), "w") as f:
                f.write(TTGIR)

    def test_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.write(tmp)
            rows = kr.our_rows(tmp, [])
            self.assertEqual([(r["target"], r["variant"], r["paged"]) for r in rows],
                             [("gfx1100", "fwd_prefill_fp16_d128_flat", False)])  # sm_90 skipped
            self.assertAlmostEqual(rows[0]["issued_useful"], 2.5)
            self.assertEqual(kr.our_rows(tmp, ["gfx942"]), [])
            summary = kr.summaries(rows)
            self.assertEqual(len(summary), 1)
            self.assertIn("worst issued/useful 2.50 (fwd_prefill_fp16_d128_flat)", summary[0])
            self.assertIn("min waves/SIMD 6", summary[0])

    def test_missing_assembly(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.write(tmp, asm=False)
            with self.assertRaisesRegex(SystemExit, "no assembly beside them"):
                kr.our_rows(tmp, [])


@unittest.skipUnless(have_triton(), "needs triton (the build's venv)")
class RealKernelTest(unittest.TestCase):
    """aot.py writes the assembly and TTGIR beside an AMD code object, and the report reads them."""

    def test_merge_kernel(self):
        import aot

        name, family, fields = next(v for v in aot.variants([32], ["fp16"]) if v[1] == "merge")
        with tempfile.TemporaryDirectory() as tmp:
            env = os.environ.get("TRITON_CACHE_DIR")
            if env is None:
                os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "cache")
            try:
                os.makedirs(os.path.join(tmp, "gfx1100"))
                row = aot.compile_one(("gfx1100", name, family, fields, tmp))
            finally:
                if env is None:
                    del os.environ["TRITON_CACHE_DIR"]
            with open(os.path.join(tmp, "manifest.tsv"), "w") as f:
                f.write("\t".join(aot.MANIFEST_COLUMNS) + "\n" + "\t".join(map(str, row)) + "\n")
            for ext in ("hsaco", "amdgcn", "ttgir"):
                self.assertTrue(os.path.isfile(os.path.join(tmp, "gfx1100", f"{name}.{ext}")), ext)
            (report,) = kr.our_rows(tmp, [])
            self.assertEqual((report["family"], report["hot"], report["issued_useful"], report["dots"]),
                             ("merge", None, None, []))
            self.assertEqual(report["waves_regs"], report["llvm_occupancy"])
            self.assertEqual(report["lds"], row[aot.MANIFEST_COLUMNS.index("shared")])


if __name__ == "__main__":
    unittest.main()
