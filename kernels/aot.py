"""Ahead-of-time compiler for the kernels of attention.py (run by the build script).

    python3 kernels/aot.py --targets gfx1100,gfx942,sm_90 --out DIR \
        [--block-dims 32,64,128,256] [--dtypes fp16,bf16] [--jobs N] [--filter GLOB,...]

For every target and variant it writes DIR/<target>/<variant>.<hsaco|cubin> and one line of
DIR/manifest.tsv (the columns are in MANIFEST_COLUMNS). AMD targets get HSACO code objects,
with their AMDGCN assembly and TTGIR beside them (<variant>.amdgcn, .ttgir: for
scripts/kernel_report.py, never embedded), `sm_90` a cubin (the NVIDIA check of the same
sources) with its PTX and TTGIR. Needs only the `triton` wheel: no ROCm, no CUDA toolkit.
"""

import argparse
import fnmatch
import multiprocessing
import os
import re
import sys
import time

from amdgcn import loop_scratch_accesses
from launch_contract import amdgpu_kernel_facts, launch_args, launch_problems, ptx_kernel_facts, shared_limit

MANIFEST_COLUMNS = [
    "target", "variant", "kernel", "family", "tile", "dtype", "block_d", "even_d", "paged", "extras", "ptr32",
    "block_m", "block_n", "threads", "shared", "scratch_args", "vgpr_spills", "sgpr_spills", "loop_spills", "seconds",
    "file",
]

# Head-dim tiles and dtypes the build can select. A tile is a power of two, or a split one
# (SPLIT_DIMS): a power of two and a tail, attention.py's BLOCK_D + BLOCK_D2, for the head dims
# between powers of two that models use (Stable Diffusion 1.x 40, 80, 160; phi-2 80; Phi-3-mini
# 96), whose matrix work then follows the head dim instead of the next power of two (80 computes
# 80 columns, not 128). tl.dot takes operands of 16 columns and more, so 40 runs the 48 tile.
# A split tile takes the launch tile (TILES) of the power of two above it: it holds fewer
# registers and less shared memory than that one.
POW2_DIMS = [32, 64, 128, 256, 512]
SPLIT_DIMS = {48: (32, 16), 80: (64, 16), 96: (64, 32), 160: (128, 32), 192: (128, 64)}
BLOCK_DIMS = sorted(POW2_DIMS + list(SPLIT_DIMS))
DTYPES = {"fp16": "fp16", "bf16": "bf16"}

# Launch tiles per (tile family, kernel class) and head-dim tile: BLOCK_M, BLOCK_N, num_warps,
# num_stages and an occupancy hint (0: none): waves_per_eu on AMD, maxnreg (registers per thread)
# on NVIDIA. Kernel classes: "prefill"
# (the plain variants), "prefill_short" (plain flat variants with small query blocks, for short
# masked prompts, where a family has them: short_tiles), "prefill_paged" (the plain paged ones,
# where a family has its own),
# "prefill_x" (with ALiBi/softcap/mm_prefix_ranges, which hold more registers; flat and paged),
# "decode" (16 query rows; with the extras where decode_extras allows), "decode_paged" (the
# paged decode variants, where a family has its own) and "decode_batch" (plain flat decode
# variants with small K/V tiles for grids of many programs, where a family has them:
# plain_class_built). The `_b32` twins take their variant's tile.
#
# Families follow the register file, not the product name. LLVM (AMDGPUBaseInfo.cpp,
# getTotalNumVGPRs / getVGPRAllocGranule: Feature1_5xVGPRs, formerly FeatureGFX11FullVGPRs) gives
# gfx1100, gfx1101, gfx1151 and both gfx12 parts 1536 VGPRs per SIMD lane-slice in granules of
# 24 (waves_per_eu 6: 240 VGPRs a wave), and gfx1102, gfx1103, gfx1150, gfx1152 and every gfx103x
# part 1024 in granules of 16 (waves_per_eu 6: 160). Checked with triton 3.6: gfx1200 compiles
# gfx1201's d = 128 prefill at 198 VGPRs under waves_per_eu 6 as gfx1201 does, gfx1031 caps the
# same kernel at 160 as gfx1030 does. So RDNA 3 has two families ("rdna3": gfx1100, gfx1101,
# gfx1151; "rdna3_small": the rest, RDNA3_FULL_VGPRS), RDNA 4 and RDNA 2 one each (RDNA 2's tiles
# were already chosen within 160 VGPRs; gfx1031-gfx1036 run gfx1030's code objects).
#
# Chosen from scripts/kernel_report.py's figures (triton 3.6), not from spill counts alone:
# - A matrix instruction covers 16 query rows per wave (WMMA 16x16x16; MFMA 32x32x8 or
#   16x16x16), so every AMD tile gives each wave at least 16 rows (BLOCK_M >= 16 x num_warps).
#   With fewer, Triton lays the dots out over the waves so that several compute the same products
#   (issued/useful matrix work 1.5-2.5 with the old 32x32 RDNA tiles and the 8-wave gfx942 one).
# - Among those, the fewest instructions per 4096 useful MACs without VGPR spills in the key
#   loop (d <= 128), at the occupancy AMD's own kernel runs at (waves_per_eu 6 on RDNA, 2 on
#   gfx942: without the hint LLVM spends all 256 VGPRs and spills at 128-row tiles).
# - d = 256 spills with nearly every tile that has no repeated work (so does AMD's kernel on
#   RDNA, at 128x64): gfx11 keeps 128x32 (gfx1100 21.9 instructions per 4096 MACs against AMD's
#   20.0, 39 scratch loads in the key loop against its 35; gfx1103 at waves_per_eu 4 22.0, 36
#   loads, against AMD's 26.0 with 24 stores and 84 loads); gfx12 128x16 (16.7 against 14.0; f16
#   without key-loop scratch, bf16 2 loads; 128x32 gave 14.3 with 10 before the scale fold).
#   With the in-thread transpose of V (ITT_MAX_DIM) the flat and paged prefill tiles take
#   waves_per_eu 5, which costs nothing here: their 64 KiB of LDS allow 4 waves either way.
#   gfx12 128x16 at 5 (256 VGPRs): f16 / bf16 flat 11.4 / 12.5, paged 18.9 / 20.2, no scratch in
#   any key loop (at 6 with the transpose flat 11.5 / 12.5 with 2 / 1 reloads in the hot loop;
#   128x32 at 5 9.0 with 9, at 6 9.1 with 14; 128x64 at 4 7.9 with 33; 64x16 at 5 12.9 with 1).
#   The flat EVEN_D variants now take 128x32 at 5 with KEY_HALVES (below): 11.4 / 12.5 -> 8.4 /
#   9.7 (364 / 399 instructions a wave per 16 keys -> 540 / 620 per 32), no scratch in any key
#   loop (11 spills, stored and reloaded once per program outside them; 48 bytes), 5 waves, LDS
#   ops 1.19 per 4096 MACs as before; gfx1200 the same. Tried at d = 256 (f16 / bf16, hot loop,
#   scratch loads per key tile in the hot loop, masked loops in parentheses):
#   - 128x32 plain: at 4 as at 5; schedule_hint "attention" 9.0 / 10.5 with 9; "memory-bound-
#     attention" 11.0 / 11.8 with 72 / 58 and stores; both 9.5 / 10.8 with 40 / 52; 2 stages
#     8.9 / 10.3 with 11 / 14; K loaded keys-major and transposed in tl.dot 8.8 / 10.4 with 11 /
#     12 (Q's registers reloaded); P converted before V's load 9.0 with 10; a scalar tile pointer
#     plus invariant offsets 9.2 with 10; byte pointers with u32 offsets lost the 128-bit loads
#     (14.7 with 76).
#   - 64x32 / 64x64 over 4 warps 10.9 / 9.9 with 23 / 61; 16 warps on 128x32 / 128x64 13.8 /
#     11.9, issued/useful 1.50 (the QK product's 128 rows over 16 waves).
#   - Halves (one rescale per 32 keys, operands of 16): K and V in halves, masked loops too,
#     9.1 / 10.5 (hot 0, masked 88 / 87); masked loops on 16 keys 9.2 / 10.4 (bf16 hot 1, masked
#     6); K whole and V in halves 8.9 / 10.1 (bf16 hot 1, masked 1 / 2); both masked loops first
#     8.9 / 10.2 (none); with the scalar tile pointer 8.3 / 9.5 (f16 hot 1); K's halves joined
#     into one dot (taken) 8.4 / 9.7. V's halves loaded together 8.9 with 6; pointer tensors
#     carried in the loop 9.7 with 3 (47 register moves); 128x64 with K in two 32-key dots and V
#     in quarters 8.0 / 9.3 with 20. P to bf16 written as the rounding's bit operations: LLVM
#     emits its own lowering (the same code).
#   - The padded variants keep 128x16: with KEY_HALVES the 64-bit ones reload 24 / 23 times in
#     the hot loop (9.4 / 10.5); their `_b32` twins would issue 8.3 / 9.7 without key-loop
#     scratch, but a twin takes its 64-bit variant's tile (src/triton/select.rs).
#   gfx11 128x32 at 5: flat 11.1 / 12.3 (hot-loop scratch loads 28 -> 33 / 31 per 32 keys; at 6
#   11.2 with 37; 128x16 at 5 14.8 with 28 per 16 keys; 128x64 at 5 9.5 with 50 and 20 stores in
#   the masked loops), paged 17.2 / 18.8 (26.4 / 27.7 before; loads 35 -> 37).
# - gfx1151 (RDNA 3.5) has gfx1100's register file and takes its tiles; AMD's kernel has a config
#   of its own there (128x64, waves_per_eu 2): ours issues as many at d = 128 (21.8 / 24.6 against
#   22.2 / 25.4, 6 waves against 5), 1.11x / 1.07x at d = 64 (24.8 / 28.9 against 22.3 / 26.9, 7
#   waves against 5) for gfx1100's reason below, 1.09x / 1.07x at d = 256 (6 waves against 5).
# - Waves per SIMD here are those of the registers the kernel descriptor asks for
#   (scripts/kernel_report.py), not those a kernel uses: LLVM asks for the count of waves_per_eu's
#   occupancy, so every RDNA tile at waves_per_eu 6, ours and AMD's, runs 6 waves however few
#   VGPRs it uses.
# - Where no tile gives both AMD's occupancy and at most its instructions, fewer instructions
#   win unless the occupancy gap is large. gfx12 d = 64: 128x64 (f16 15.5, bf16 19.4 per 4096
#   MACs, paged 22.7 / 27.5, no spills) against AMD's 19.2 / 23.1, 6 waves both; 128x32 issues
#   17.9 / 22.2 (paged 27.4 / 31.6) at 6 waves too; waves_per_eu 12 gives 128x32 12 waves at
#   20.4 / 25.9: at 120 VGPRs LLVM issues the K/V operand loads from LDS two at a time and waits
#   on each pair (48 s_wait_dscnt per 16 WMMAs against AMD's kernel's 25, which uses 112 VGPRs at
#   waves_per_eu 6). gfx12 d = 128: 128x64 at 14.3 / 17.1 against AMD's 14.7 / 16.7 (128x32:
#   14.3 / 16.1; waves_per_eu 7 on 128x32: 16.0 / 18.8), 6 waves both; its paged variants issue
#   fewer too (f16 20.1 against 128x32's 20.8, bf16 22.5 against 22.9). These figures predate
#   the in-thread transpose of V (in_thread_transpose below), which takes the same tiles to
#   d = 64 11.7 / 15.7 and d = 128 9.2 / 11.9 (6 waves; docs/kernel-report.md). With it the flat
#   prefill at d = 64 and 128 (and 48, on the 64 tile) fits waves_per_eu 7 (209-214 VGPRs of
#   the 216 of 7 waves) with the same instructions (0.98-1.01x; d = 64 11.6 / 15.7, d = 128
#   9.3 / 11.8, 7 waves); the paged variants keep 6 (prefill_paged: at 7 d = 128 spills 14-15
#   VGPRs and issues 1.005-1.02x, d = 48/64 1.005-1.035x) and so do d = 80 and 96 (SPLIT_TILES:
#   at 7 d = 80 issues up to 1.18x with 9-11 spills, d = 96 reloads 1-4 times in the key loop).
# - The softmax (attention.py's _attend) takes the row maximum on the unscaled scores and folds
#   the scale into the exponent's FMA, as AMD's kernel does: gfx1100 d = 64 f16 hot loop 398 to
#   394 instructions per 16 WMMAs (24.9 to 24.6 per 4096 MACs, bf16 29.4 to 29.1; d = 128 22.4 /
#   25.3 to 21.9 / 24.6, below AMD's 22.2 / 25.6). The rest of
#   the gap to AMD's 22.6 / 27.2 there is its 64-key tile: ours at 128x64 holds 168 VGPRs
#   and waits on every pair of LDS operand loads (164 s_waitcnt per 32 WMMAs against
#   AMD's 31 at 240 VGPRs), 26.3 per 4096; with triton's schedule_hint "memory-bound-attention"
#   128x64 reaches 21.3 (f16) and spills (bf16 32.3), 128x32 24.1. So gfx1100 d = 64 keeps
#   128x32, at waves_per_eu 7: its 198 VGPRs (gfx1151: 197) fit 7 waves' 216 with the same code
#   as at 6 (24.6 / 29.1, no spills), one wave more than AMD's kernel; the paged variants (211-213
#   VGPRs) keep 6 (prefill_paged). With the in-thread transpose of V (in_thread_transpose below;
#   it needs 64 keys at d = 64 on 8 waves) the rdna3 flat prefill tiles moved: d = 64 to 128x64 at
#   waves_per_eu 8 (gfx1100 16.0 / 21.6, 188 VGPRs, 8 waves; at 7: 16.0 / 21.3), d = 128 to
#   128x32 (12.5 / 15.7, 6 waves; 128x64 with the transpose spills 31 VGPRs and reloads in the
#   key loop, 11.0 for f16).
# - rdna3_small (gfx1103 figures, f16; bf16 checked without key-loop scratch): waves_per_eu is
#   the register budget, and 4 gives these parts 256 VGPRs, what 6 gives gfx1100 (240): at
#   d >= 128 every class keeps gfx1100's tile at 4 waves. No tile keeps the d = 128 key loop out
#   of scratch at 5 or 6 waves (prefill 128x64 at 5: 23 scratch loads in the loop, 128x32 at 5:
#   7, 128x16 at 6: 16, 64x16 at 6: 9); AMD's kernel, compiled for gfx1103 at its RDNA default
#   (128x32, waves_per_eu 6), runs 6 waves by reading scratch 26 times per key tile (26.3 per
#   4096 MACs against ours 21.8 at 4 waves). d = 64 prefill 128x32 at 7 (28.5 at 7 waves, against
#   AMD's 30.4 at 6: at 8 ours reloads 4 in the loop, 128x16 at 8 issues 36.0); paged at 6 (22
#   spills outside the loop at 7); extras 128x32 at 4 (77.1; at 5 and more the loop reloads,
#   64x16 at 5 issues 87.6); decode at 4 (at 5 and 6 some decode variant reloads in its loop,
#   e.g. paged_b32 4 at 6, flat_x_b32 4 at 5). Paged decode d = 128: 32x16 over 2 waves, 16 rows
#   each (the one-wave 16x16 tile reloads 14 times in its loop at every waves_per_eu from 2 to
#   4). d = 32: gfx1100's tiles at 6, but the extras at 5: at 6 the paged extras variants reload
#   twice in the key loop (since the output is normalized by one reciprocal per row, which moved
#   LLVM's register allocation), at 5 no d = 32 extras variant reads scratch in any key loop
#   (f16 paged 148.0 per 4096 MACs against 145.5 at 6, flat 145.4 against 147.8).
#   These figures predate the in-thread transpose of V (in_thread_transpose below), which
#   rdna3_small now takes (f16 / bf16 per 4096 MACs, before -> after): d = 128 prefill on the
#   same 128x64 at 4 waves 21.9 / 24.8 -> 11.0 / 13.8 (8 / 5 spills, none in a key loop), paged
#   128x32 29.1 / 31.8 -> 19.5 / 22.4, decode 0.69-0.91x. d = 64 prefill moved to 64x32 over 4
#   waves at waves_per_eu 6 (28.6 / 34.4 at 7 waves -> 19.3 / 25.6 at 6, AMD's occupancy; 128x32
#   of 8 waves covers 32 key rows per pass, too few for the transpose): 128x64 at 5 issues
#   16.0 / 21.6 at 5 waves, at 6 it reloads 9 times in the key loop (at 7 20), 64x64 at 5 17.0,
#   at 6 13 reloads, 64x32 at 7 reloads once in a masked loop. 64-row blocks read K and V twice
#   as often per query row as 128-row ones (for L2 to catch). d = 64 paged keeps 128x32 at 6 (no
#   transpose there): 128x64 at 5 (0.60-0.68x) makes the _b32 twins reload once in the hot loop
#   and 10-38 times in the masked ones, at 4 none do (19.2 / 24.6) but with 4 waves against 6;
#   64x32 at 6 reloads 4-12 times in the masked loops. d = 48 keeps 128x32 at 7 (SPLIT_TILES):
#   on 64x32 at 6 its exact-head-dim flat variants reload 4 times in a masked loop (0.995-1.015x).
#   d = 256 prefill takes the transpose at its 128x32 tile, 4 waves: 21.7 -> 11.2 (key-loop
#   scratch loads 30 -> 33, as gfx1100's below).
# - Paged variants compute a gather address per key: where the flat tile spills in the key
#   loop once paged (gfx11 and gfx942 at d = 128), the paged ones get 32-key tiles.
# - gfx12 prefill_x d = 128 (128x32 at 6): the fp16 paged `_b32` twins reloaded once per key
#   tile in the last masked loop (42.3 / 42.6 per 4096 MACs). attention.py's EXTRAS mask now
#   takes the window as two scalar offsets from the row's position and leaves the mm_prefix
#   range out of the last masked loop (two row vectors fewer live in every EXTRAS masked loop,
#   four in the last): no key-loop scratch at d = 128, hot loops 0.998-1.004x. Rejected (fp16
#   paged): waves_per_eu 5 (no scratch, 1.00-1.01x, 5 waves), 128x16 at 6 / 7 (1.08x; the
#   64-bit twin, which shares the tile, 46.4 -> 50.8), 128x32 at 7 (hot-loop reloads), 64x32 /
#   64x64 (the masked-loop load stays), 4 warps (56-66 hot-loop reloads), 2 stages (4-7),
#   schedule_hint "attention" (the same code), "memory-bound-attention" (1-14), the in-thread
#   transpose (1-2 in the 64-bit variants' hot loops, 3-5 in their masked ones).
# - Decode: one wave of 16 rows (the GQA group of one or a few tokens), so no wave repeats
#   another's products; on gfx1100 at d >= 128 only 16-key tiles stay out of the key loop's
#   scratch. More programs per CU make up for the small ones (src/triton/split.rs counts waves).
#   d = 128 flat at waves_per_eu 5 (5 waves): at 6 gfx1151's padded-head-dim variants reload 4
#   times in the key loop (f16 and bf16; gfx1100's hold 240 VGPRs with 1 spill outside it), at 5
#   neither does, and the instructions stay (f16 34.8 and 40.6 per 4096 MACs against 34.8 and
#   41.2); paged d = 128 keeps 6 (decode_paged), where 5 makes the 64-bit variants reload (gfx1100
#   f16 14 times, gfx1151 13).
# - RDNA 2 (gfx103x, family "rdna2"; bf16 has rows of its own, "rdna2_bf16"): no matrix cores.
#   tl.dot keeps a blocked layout (4x4 values per thread from 16 per thread up, 2x2 from 4, else
#   1x1) and lowers to v_dot2c_f32_f16 (64 MACs per wave32 instruction: the floor is 64
#   instructions per 4096 MACs) for f16, to bf16->f32 shifts and v_fmac_f32 (floor 128) for bf16.
#   Q sits in registers in that layout for the whole key loop: rows per thread x d/2 VGPRs (f16;
#   bf16 converted to f32 takes twice that), so at d = 128 only one row per thread (1x1: the
#   16x16 tile over 8 waves) keeps the key loop free of scratch within the 160 VGPRs of
#   waves_per_eu 6, the occupancy of AMD's own kernel (128x32, 8 warps, waves_per_eu 6 on the
#   RDNA archs but gfx1100/gfx1151; on gfx1030 it has key-loop scratch at every d). f16 prefill,
#   instructions per 4096 MACs ours / AMD's, key-loop scratch stores/loads ours / AMD's, 6 waves
#   both: d=64 119.0 / 115.9 (64x16, 2 stages; 0/0 against 32/167), d=128 140.0 / 117.4 (16x16,
#   2 stages; 0/0 against 194/457), d=256 150.5 / 133.0 (16x16: 0/53 against 850/1373; 64x16
#   gives 118.4 with 16/247). d=32 64x16 (149.0; 64x32's 144.2 reloads in the masked loops).
#   _x d=64 32x16 (196.5; 64x16 reloads in the key loop). Bigger per-thread tiles issue fewer
#   instructions per MAC but spill: 128x32 gives 119.7 at d=128 with 223/497 in the key loop.
# - RDNA 2 bf16: no tile keeps Q's f32 copy in 160 VGPRs at d >= 128, so d=128 (and 256) takes
#   waves_per_eu 4 (256 VGPRs): 16x16 232.5 without key-loop scratch, against 300.0 with 0/67
#   at 6 waves; d=64 16x16 (277.0), d=32 32x16 (303.0), the ones without key-loop scratch at 6.
# - RDNA 2 decode: the 16x16 tile of 8 waves (a one-wave 16-row tile holds 2x2 values per
#   thread, two Q rows: 0/218 scratch in the key loop at d=128).
# sm_90 keeps the tiles measured fastest on the H100/H200 (its mma needs no such rule).
# - d=128 prefill: 2 stages and maxnreg 128, so two programs share an SM (96 KiB of shared
#   memory and 128 registers per thread each): a short sequence's program spends as many
#   instructions in its prologue and epilogue as in its key loop (ncu, H200, 64 x 256 x 32
#   heads: 100.8M instructions against cuDNN's 48.0M, 1 program of 8 warps per SM at 255
#   registers), and a second resident program fills those. 3 stages at 255 registers ran 0.47
#   / 0.59 / 0.69 of cuDNN at b x s = 64 x 256 / 32 x 512 / 16 x 1024 (f16, 32 heads), this
#   tile 0.54 / 0.64 / 0.69, level from s = 4096 (JIT of the same source, one run). The spill
#   slots it takes (17 local loads/stores per key tile) stay in L1. Paged prefill keeps 3
#   stages at 255 registers: capped at 128 it spills 244 times.
# - prefill_short (src/triton/select.rs takes it for causal or windowed calls of at most 512
#   packed query rows): 64-row blocks, all key tiles in one loop (ONE_LOOP). A 128-row block of
#   a causal prompt computes a 128-key diagonal of which half is masked, and at 256 keys that is
#   a third of its work; 64-row blocks halve it, and with 4 tiles a program one pipeline
#   prologue beats three. H200, f16, h * d = 2048, causal, TFLOP/s against the prefill tile
#   (JIT of the same source, one run): d = 128 64x32 (maxnreg 128, 4 per SM) 64 x 256 154
#   against 121, 32 x 512 220 against 188, 16 x 1024 277 against 261; d = 64 64x64 129 against
#   102, 189 against 171, 16 x 1024 243 against 246 (so 512 rows); d = 256 64x32 149 against
#   133, 214 against 209. Not for unmasked calls: non-causal 32 x 512 d = 128 309 against 317,
#   d = 64 261 against 293. d <= 64 takes 3 stages (56 KiB at d = 64, 4 programs per SM):
#   against 2, d = 64 causal 128 x 128 89.3-90.1 / 85.7-86.4, 64 x 256 149.3-151.2 /
#   135.3-137.3, 32 x 512 217.8-223.1 / 193.6-195.5 (f16 and bf16, two runs each); d = 32
#   65.1 / 63.6, 107.1 / 99.4, 151.6 / 138.6. Not d = 128 (64x64 at 3 stages: 32 x 512 +1-8%,
#   but 128 x 128 97.8-98.7 / 103.2-104.7) nor d = 256 (64x32 at 3 stages 15-19% slower).
# - decode_batch (src/triton/marshal.rs launches it instead of the decode tile when the grid
#   has at least BATCHED_DECODE_WAVES programs per SM): the decode tile keeps two 128-key tiles
#   in flight in 136 KiB at d = 128 (70 at d = 64), so one program runs per SM (three) and each
#   wave of programs starts with an empty pipeline; 16x64 at 2 stages (d = 128, 38 KiB) or 3
#   (d = 64, 36 KiB) lets 5-6 programs share an SM, one's loads covering another's start.
#   H200, GQA 32/8, f16, b x s_k, us against the decode tile and cuDNN (JIT of the same source,
#   one run): d = 128 40 x 1k 42.6 / 48.1 / 48.1, 48 x 1k 49.5 / 53.3 / 52.7, 64 x 512 35.8 /
#   40.4 / 36.7, 64 x 1k 65.3 / 69.1 / 66.1, 64 x 2k 125.1 / 127.5 / 125.8, 128 x 1k 125.2 /
#   129.3 / 126.1, 256 x 512 126.8 / 133.9 / 128.3, but 96 x 1k 100.3 / 99.6 and (two programs
#   per SM) 32 x 2k 65.9 / 65.4; MHA 32/32 16 x 1k 64.3 / 68.3; d = 64 64 x 1k 35.3 / 39.8,
#   128 x 1k 65.8 / 67.1, 64 x 4k 126.3 / 139.9, 32 x 1k 19.7 / 19.5. Not d = 256: its decode
#   tile (16x64, 2 stages) was the fastest there (16x32 at 2-4 stages and 8 warps 1-30%
#   slower). Not d = 32: 16x64 at 3 stages was mixed (64 x 1k 21.8 / 23.3, 64 x 4k 75.0 /
#   96.5, but 128 x 1k 53.5 / 43.8; another run).
# - d=256 prefill: 128x64 with 8 warps and 2 stages (192 KiB of shared memory, which sm_90's 227
#   allow) doubles 64x64's throughput: H200, b*s = 16384, 8 heads, 455-501 TFLOP/s against
#   230-238 (scripts/bench_gpu.py --baseline, old binary beside new in one run).
# - sm_90 paged decode keeps the 3 stages of its 74 KiB tile: the pipeliner puts the
#   block-table load a stage before the K/V loads it addresses, so one K/V tile is in flight per
#   program where flat decode has two; 5 stages give two (140 KiB, as flat), but then one
#   program per SM. Two resident 3-stage programs (src/triton/split.rs splits for them) match
#   the 5-stage one where programs are few and beat it where they are many (H200, GQA 32/8,
#   d=128, f16, pages of 16, JIT: b=4 32k 140 us with 8 splits against 142 with 4; b=64 1k 77
#   against 100; b=32 2k 73 against 82).
# sm_80 and sm_86/sm_89 (mma.sync, no wgmma): no GPU of these was available, so their tiles
# follow shared memory alone, each the most stages that still fit the block a GPU may opt into
# (launch_contract.CUDA_SHARED: 163 KiB on sm_80, 99 KiB on sm_86/sm_89):
# - prefill d <= 64: sm_90's 128x64, 4 warps, 3 stages; d = 128: 128x64, 8 warps, 3 stages
#   (96 KiB: one block per SM either way, so a stage fewer would only prefetch less; the
#   extras variant takes 112 KiB with 3, so it keeps 2 on sm_86/sm_89);
#   d = 256: 64x64, 2 stages on sm_80 (104 KiB), 64x32 on sm_86/sm_89 (68 KiB).
# - decode: sm_90's 16x128 tiles where they fit (136 KiB at d = 128 on sm_80); on sm_86/sm_89
#   16x64 at d = 128 (70 KiB) and 16x32 at d = 256.
# Their PTX, JIT-compiled by the driver, passes the GPU suite on an H200 (FLASH_ATTN_ROCM_CUDA_PTX
# and FLASH_ATTN_ROCM_TRITON_TARGET; docs/testing.md); their speed on their own GPUs is unmeasured.
# - d = 512 (head dims 264-512; candle-flash-attn serves up to 512): the tiles with the fewest
#   scratch accesses in the key loop among those swept (triton 3.6, fp16 flat, VGPR spills / loop
#   scratch accesses): gfx942 prefill 64x16 x 4 waves 0 / 0 (64x32 40 / 19, 32x32 x 2 98 / 72),
#   decode 16x16 at waves_per_eu 1 0 / 0 (16 KiB of LDS: a wave per SIMD, where 16x32's 32 KiB
#   leave half the SIMDs without one); gfx1201 decode 16x16 x 8 waves 0 / 0 (x 4 89 / 56),
#   prefill 64x16 x 16 waves 15 / 0 (32x16 x 8 82 / 31): their waves split the output columns and
#   each computes the block's scores, 4.5x and 2.5x the useful matrix work (docs/kernel-report.md). gfx11 keeps no 16-row wave out of the key
#   loop's scratch: its WMMA A operand repeats each row in both half-waves, so one wave's Q operand
#   at d = 512 alone is 256 VGPRs. gfx1100 16x16 x 2 waves 297 / 70 (x 8 139 / 111, x 16 118 / 80,
#   32x16 x 4 357 / 261), gfx1103 16x16 x 8 133 / 104 (x 2 319 / 161), gfx1030 16x16 x 8 355 / 488
#   (x 4 607 / 1667): these run, slower than their FLOPs suggest (the build's spill warning).
#   NVIDIA: the most query rows whose Q and two K/V stages fit shared memory (sm_90 64x32 x 8 warps
#   196 KiB, sm_80 64x16 98, sm_86 32x16 65; decode 16x32 81 KiB, sm_86 16x16 49).
TILES = {
    ("cdna", "prefill"): {32: (128, 64, 4, 1, 2), 64: (128, 64, 4, 1, 2), 128: (128, 64, 4, 1, 2), 256: (128, 32, 4, 1, 2), 512: (64, 16, 4, 1, 0)},
    ("cdna", "prefill_paged"): {32: (128, 64, 4, 1, 2), 64: (128, 64, 4, 1, 2), 128: (128, 32, 4, 1, 2), 256: (128, 32, 4, 1, 2), 512: (64, 16, 4, 1, 0)},
    ("cdna", "prefill_x"): {32: (128, 64, 4, 1, 2), 64: (128, 64, 4, 1, 2), 128: (128, 32, 4, 1, 2), 256: (128, 64, 8, 1, 2), 512: (64, 16, 4, 1, 0)},
    ("cdna", "decode"): {32: (16, 64, 1, 1, 0), 64: (16, 64, 1, 1, 0), 128: (16, 64, 1, 1, 0), 256: (16, 32, 1, 1, 0), 512: (16, 16, 1, 1, 1)},
    ("rdna3", "prefill"): {32: (128, 64, 8, 1, 6), 64: (128, 64, 8, 1, 8), 128: (128, 32, 8, 1, 6), 256: (128, 32, 8, 1, 5), 512: (16, 16, 2, 1, 1)},
    ("rdna3", "prefill_paged"): {32: (128, 64, 8, 1, 6), 64: (128, 32, 8, 1, 6), 128: (128, 32, 8, 1, 6), 256: (128, 32, 8, 1, 5), 512: (16, 16, 2, 1, 1)},
    ("rdna3", "prefill_x"): {32: (128, 32, 8, 1, 6), 64: (128, 32, 8, 1, 6), 128: (64, 16, 4, 1, 6), 256: (64, 16, 4, 1, 6), 512: (16, 16, 2, 1, 1)},
    ("rdna3", "decode"): {32: (16, 32, 1, 1, 6), 64: (16, 32, 1, 1, 6), 128: (16, 16, 1, 1, 5), 256: (16, 16, 1, 1, 6), 512: (16, 16, 2, 1, 1)},
    ("rdna3", "decode_paged"): {32: (16, 32, 1, 1, 6), 64: (16, 32, 1, 1, 6), 128: (16, 16, 1, 1, 6), 256: (16, 16, 1, 1, 6), 512: (16, 16, 2, 1, 1)},
    ("rdna3_small", "prefill"): {32: (128, 64, 8, 1, 6), 64: (64, 32, 4, 1, 6), 128: (128, 64, 8, 1, 4), 256: (128, 32, 8, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna3_small", "prefill_paged"): {32: (128, 64, 8, 1, 6), 64: (128, 32, 8, 1, 6), 128: (128, 32, 8, 1, 4), 256: (128, 32, 8, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna3_small", "prefill_x"): {32: (128, 32, 8, 1, 5), 64: (128, 32, 8, 1, 4), 128: (64, 16, 4, 1, 4), 256: (64, 16, 4, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna3_small", "decode"): {32: (16, 32, 1, 1, 6), 64: (16, 32, 1, 1, 4), 128: (16, 16, 1, 1, 4), 256: (16, 16, 1, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna3_small", "decode_paged"): {32: (16, 32, 1, 1, 6), 64: (16, 32, 1, 1, 4), 128: (32, 16, 2, 1, 4), 256: (16, 16, 1, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna4", "prefill"): {32: (128, 64, 8, 1, 6), 64: (128, 64, 8, 1, 7), 128: (128, 64, 8, 1, 7), 256: (128, 16, 8, 1, 5), 512: (64, 16, 16, 1, 1)},
    ("rdna4", "prefill_paged"): {32: (128, 64, 8, 1, 6), 64: (128, 64, 8, 1, 6), 128: (128, 64, 8, 1, 6), 256: (128, 16, 8, 1, 5), 512: (64, 16, 16, 1, 1)},
    ("rdna4", "prefill_x"): {32: (128, 32, 8, 1, 6), 64: (128, 32, 8, 1, 6), 128: (128, 32, 8, 1, 6), 256: (64, 16, 4, 1, 6), 512: (64, 16, 16, 1, 1)},
    ("rdna4", "decode"): {32: (16, 32, 1, 1, 6), 64: (16, 32, 1, 1, 6), 128: (16, 32, 1, 1, 5), 256: (16, 16, 1, 1, 6), 512: (16, 16, 8, 1, 1)},
    ("rdna2", "prefill"): {32: (64, 16, 8, 2, 6), 64: (64, 16, 8, 2, 6), 128: (16, 16, 8, 2, 6), 256: (16, 16, 8, 1, 6), 512: (16, 16, 8, 1, 1)},
    ("rdna2", "prefill_x"): {32: (64, 16, 8, 2, 6), 64: (32, 16, 8, 2, 6), 128: (16, 16, 8, 2, 6), 256: (16, 16, 8, 1, 6), 512: (16, 16, 8, 1, 1)},
    ("rdna2", "decode"): {32: (16, 16, 8, 2, 6), 64: (16, 16, 8, 2, 6), 128: (16, 16, 8, 2, 6), 256: (16, 16, 8, 1, 6), 512: (16, 16, 8, 1, 1)},
    ("rdna2_bf16", "prefill"): {32: (32, 16, 8, 1, 6), 64: (16, 16, 8, 1, 6), 128: (16, 16, 8, 1, 4), 256: (16, 16, 8, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna2_bf16", "prefill_x"): {32: (32, 16, 8, 1, 6), 64: (16, 16, 8, 1, 6), 128: (16, 16, 8, 1, 4), 256: (16, 16, 8, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("rdna2_bf16", "decode"): {32: (16, 16, 8, 1, 6), 64: (16, 16, 8, 1, 6), 128: (16, 16, 8, 1, 4), 256: (16, 16, 8, 1, 4), 512: (16, 16, 8, 1, 1)},
    ("sm80", "prefill"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 3, 0), 256: (64, 64, 4, 2, 0), 512: (64, 16, 4, 2, 0)},
    ("sm80", "prefill_x"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 3, 0), 256: (64, 64, 4, 2, 0), 512: (64, 16, 4, 2, 0)},
    ("sm80", "decode"): {32: (16, 128, 4, 3, 0), 64: (16, 128, 4, 3, 0), 128: (16, 128, 4, 3, 0), 256: (16, 64, 4, 2, 0), 512: (16, 32, 4, 2, 0)},
    ("sm86", "prefill"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 3, 0), 256: (64, 32, 4, 2, 0), 512: (32, 16, 4, 2, 0)},
    ("sm86", "prefill_x"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 2, 0), 256: (64, 32, 4, 2, 0), 512: (32, 16, 4, 2, 0)},
    ("sm86", "decode"): {32: (16, 128, 4, 3, 0), 64: (16, 128, 4, 3, 0), 128: (16, 64, 4, 3, 0), 256: (16, 32, 4, 2, 0), 512: (16, 16, 4, 2, 0)},
    ("sm90", "prefill"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 2, 128), 256: (128, 64, 8, 2, 0), 512: (64, 32, 8, 2, 0)},
    ("sm90", "prefill_short"): {32: (64, 64, 4, 3, 0), 64: (64, 64, 4, 3, 0), 128: (64, 32, 4, 2, 128), 256: (64, 32, 4, 2, 0)},
    ("sm90", "prefill_paged"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 3, 0), 256: (128, 64, 8, 2, 0), 512: (64, 32, 8, 2, 0)},
    ("sm90", "prefill_x"): {32: (128, 64, 4, 3, 0), 64: (128, 64, 4, 3, 0), 128: (128, 64, 8, 3, 0), 256: (128, 64, 8, 2, 0), 512: (64, 32, 8, 2, 0)},
    ("sm90", "decode"): {32: (16, 128, 4, 3, 0), 64: (16, 128, 4, 3, 0), 128: (16, 128, 4, 3, 0), 256: (16, 64, 4, 2, 0), 512: (16, 32, 4, 2, 0)},
    ("sm90", "decode_batch"): {64: (16, 64, 4, 3, 0), 128: (16, 64, 4, 2, 0)},
}
# Split head-dim tiles whose launch tile differs from the power of two's above them (kernel_tile):
# where that one spills in the key loop or repeats matrix work with the tail's operands (the
# kernel report's --check). gfx11 d = 80 and 96 flat prefill: 128x64 (d = 128's) reloads in the
# key loop (the tail's second accumulator and Q operands); 128x32 does not at d = 80 (f16 25.1
# instructions per 4096 MACs, against 24.6 at d = 64 and 21.9 at 128), and at d = 96 only at
# waves_per_eu 5 (25.8 at 5 waves; at 6 the padded variants reload twice, 128x16 issues 29.4).
# 128x32 over 8 waves covers 32 key rows per pass of the 64 part, too few for the in-thread
# transpose of V, so gfx11 d = 80 and 96 now take 64x32 over 4 waves at 6 (f16 / bf16 d = 80
# 25.1 / 28.6 -> 21.1 / 25.0, d = 96 25.8 / 28.8 at 5 waves -> 19.7 / 23.0 at 6; 4-8 spills,
# none in a key loop; gfx1151 the same): 128x64 at 6 17.0 / 18.3 reloads 26 / 36 times in the
# hot loop, 128x32 over 4 waves 16.5 22 times, 64x64 19.6 32 times, 64x32 at 7 9 / 41 times in
# the masked loops, 32x32 over 2 waves 23.4 at d = 80 and 21 reloads at 96 (the flat EVEN_D
# variants at 80, 96 and 160 now take KEY_HALVES' tiles and loops: its comment);
# rdna3_small (gfx1103) likewise: its d = 128 tile reloads 3-41 times in the key loop at d = 80
# and 96, 128x32 at its waves_per_eu 4 not at all (f16 25.1 at d = 80, 25.8 at 96). With the
# in-thread transpose (which 128x32 over 8 waves does not take at d = 80 / 96) gfx1103 d = 80
# takes 64x32 over 4 waves at 4 (21.2: at 5 it reloads 57 times in the masked loops, at 6 13 in
# the hot one; 32x32 23.4), d = 96 32x32 over 2 waves at 4 (19.1 / 22.7, 13-14 spills outside the
# key loops: 64x32 at 4 19.8 reloads 12 times in the masked loops, 64x64 at 4 28 in the hot one).
# d = 160 (gfx11, gfx12) with the transpose: 128x32 at waves_per_eu 5, which the 128 part takes
# (16 key rows per pass of 8 waves; 128x16 does not: gfx1201 18.6 with or without it). gfx1201
# f16 flat 18.6 -> 11.6, paged 28.1 -> 19.4, 6 -> 5 waves, no key-loop scratch (at 6 flat reloads
# 26 times in the masked loops; 128x64 at 4-6 8.9-9.1 with 15-27 in the hot one); gfx1100 flat
# 23.4 -> 15.7 (hot-loop scratch loads 28 -> 25; at 6 15.8 with 28 and 7 stores in the masked
# loops; 64x32 at 5 16.1, 64x64 / 128x64 15.2-15.6 with 100+ reloads), its paged d = 160 taking
# the d = 256 tile (29.4 -> 22.8).
# RDNA, issue 57 (triton 3.6, hot key loop, f16 / bf16 per 4096 useful MACs, exact head dim; the
# ratio is to the larger neighbouring power of two's figure, which the issue asks within 1.1x):
# - rdna4 paged prefill d = 80: 128x64 at waves_per_eu 5 (6 -> 5 waves), 21.1 / 25.5 -> 19.5 / 23.2
#   (1.13x -> 1.04x of d = 64's 18.7; 13 / 10 spills -> 0 / 1); at 7 21.2, schedule_hint
#   "attention" 21.2, 128x32 28.1, 64x64 24.8 with 18 spills.
# - rdna4 prefill_x d = 160: 128x16 at 5 (6 -> 5 waves), flat 41.3 / 43.6 -> 37.0 / 39.8, paged
#   56.5 / 59.0 -> 48.2 / 50.5 (1.22x -> 1.04x of d = 128's 46.4; 8-11 spills -> 0-1); at 6
#   paged 51.7 (1.11x), at 7 51.6 with 30 spills, 64x16 at 5 53.9; 128x32 and 64x32 reload 7-26
#   times in the key loop.
# - gfx11 prefill_x d = 80: 128x16 over 8 waves with 3 stages, at waves_per_eu 5 (rdna3: 6 -> 5
#   waves) and 4 (rdna3_small, 4 as before); was 64x16 over 4 at 1 stage. gfx1100 paged f16 / bf16
#   87.0 / 92.3 -> 84.1 / 87.6 (1.12x / 1.14x -> 1.08x / 1.08x of d = 64's 77.6 / 80.8 with this
#   code), flat 73.7 / 78.7 -> 72.5 / 77.7; every d = 80 extras variant (padded, _b32) issues
#   0.92-0.99x on gfx1100, gfx1103 and gfx1151, 0-16 spills, none in a key loop. Tried (gfx1100
#   f16 paged, padded paged): 2 stages 85.0 / 89.4 (bf16 89.3, 1.10x; at waves_per_eu 6 the flat
#   ones issue 1.03x), 64x16 over 4 at 2 stages 85.0 (17 spills at 6), 128x16 at 1 stage 89.3,
#   64x32 at 5 78.7 with 2 stores / 2 loads in the masked loops (at 4 and 6 hot-loop reloads),
#   128x32 over 8 at 5 70.3 / 71.1 and without a hint 70.0 / 69.9 (256 VGPRs, 16-36 spills; at 5
#   the padded paged ones reload once in the hot loop on gfx1100, without a hint bf16 p_b32
#   does), 128x32 at 4 or 3 71.5 with the padded one's reload; at 2 stages schedule_hint
#   "memory-bound-attention" 83.2 (bf16 87.2; 128x32 with it 63.0 and 15 hot-loop reloads),
#   "attention" the same code; 64x64 at 4 74.1 with 55 reloads.
# - rdna3_small paged decode d = 80: 32x32 over 2 waves at 4, 56.4 / 60.2 -> 45.8 / 49.8 (1.21x ->
#   0.98x of d = 64's 46.8; 8 spills outside the key loop); 16x32 54.6, 16x16 75.4. (d = 96, within
#   1.1x already: 49.0 -> 42.5 there, with 12-18 spills; kept.)
# Each within 1.1x now (docs/kernel-report.md): gfx1100 flat prefill at 80 / 96 / 160 (f16 1.32x /
# 1.23x / 1.26x -> 0.96x / 0.99x / 0.94x) and gfx1103's at 160 (1.45x -> 1.06x) on KEY_HALVES' loops,
# at 160 with TAIL_VEC too; gfx1201 flat decode at 160 (1.14x -> 0.97x) on KEY_HALVES' loops; gfx11
# paged prefill at 160 (1.18x / 1.17x -> 1.10x) with TAIL_VEC. With
# _attend's loop, gfx11 d = 80 / 96 flat: 64-key tiles spill (128x64 over 8 waves 161
# VGPRs, 26 reloads in the hot loop; at waves_per_eu 4-5 123-133 and 7-20; schedule hints: 161-296
# spills), where d = 128 on 128x64 spills 31 with 1 reload. 2 stages (not yet taken): gfx1100 flat
# d = 80 21.1 -> 19.2 (18.9 at waves_per_eu 5) and d = 96 19.7 -> 19.0, with 13-33 reloads in the
# masked loops; d = 160 (128x32 at 5) f16 / bf16 15.7 / 18.8 -> 13.8 / 16.9 (hot-loop reloads 25 /
# 32 -> 3 / 5, masked loops 0/136 -> 18 stores / 165 loads; padded 64-bit 17.6 / 19.9 -> 17.6 / 20.2
# with 64 -> 74 reloads, padded _b32 16.0 / 19.6 -> 13.2 / 15.7 with 0-3), gfx1103 16.2 / 18.7
# -> 14.3 / 17.0 the same way; paged d = 160 22.8 -> 22.1 (padded 24.6 -> 24.9, 0/62 -> 5/71).
# gfx11 paged prefill d = 160 (gfx1100 f16, 128x32 at 5, 910 instructions a wave per tile against
# d = 128's 620): the 32-column V tail gives each of 256 threads 4 elements of one key row, too few
# for the in-thread transpose, so its operand is read 16 bits at a time (64 ds_load_u16(_d16_hi),
# 92 s_waitcnt against 40), and the loop reloads 31 times. Also tried: 128x32 at 6 22.6 (31
# reloads), 128x64 21.1 (27 stores / 99 loads per tile), 128x16 36.8, 64x32 / 64x64 over 4 waves
# 28.4 / 26.8, 32x32 / 32x64 over 2 40.6 / 32.0 (all reloading), schedule_hint "attention" 22.7,
# "memory-bound-attention" 24.1 (both 24.2), the V tail's head-dim contiguity hidden 24.5 (LDS
# loads 136 -> 80, but each thread gathers four keys' pages: v_mul_lo_u32 24 -> 37). Taken:
# TAIL_VEC (two columns a thread; its table stands above fwd_constexprs).
# gfx1201 flat decode d = 160, one wave of 16 rows: 16x16 at 2 stages 25.4 (waves_per_eu 5) /
# 26.9 (6) with 98-128 spills and 10-22 hot-loop reloads; schedule_hint "memory-bound-attention"
# 26.2 with 10, "attention" the same code; 16x32 with either hint 25.6-26.5 with 37-75. 32x16 over
# 2 waves issues 23.1 without spills, but the decode tile serves at most 16 rows (DECODE_ROWS), so
# the second wave's rows are always padding: per real MAC twice that.
# gfx942 d = 160 with the extras: 256's
# 8-warp 128x64 lays the 32-wide tail's PV product over 4 waves along its 32 columns, 1.30x the
# matrix work, where 128's 4-warp tile does not.
# CDNA (issue 57; triton 3.6, gfx942, hot key loop, instructions per 4096 useful MACs f16 / bf16,
# exact head dim; gfx90a checked the same way, nothing issues more, spills or loses a wave):
# - paged prefill d = 80 and 96 take d = 64's 128x64 (the 128 tile's 128x32 rescales the
#   accumulators once per 32 keys): d = 80 15.0 / 16.5 -> 10.3 / 11.9 with MFMA 16x16 for every
#   dot (SPLIT_OPTIONS; Triton's own choice at 128x64, 16x16 for the 16-wide PV tail only, 11.3
#   with 5 spills), d = 96 11.8 / 13.0 -> 8.5 / 10.0 with kpack 2 (at 1: 8.5 with 3 spills);
#   d = 64's own 10.1 / 12.6. 128x128 reloads 26 times per key tile at both.
# - decode d = 80 and 160 at waves_per_eu 2 (no hint before): 11.6 / 13.2 -> 10.3 / 11.9 and
#   11.7 / 12.7 -> 9.3 / 10.1, the paged and _b32 variants from 1 wave to 2. Without the hint
#   LLVM keeps accumulators in AGPRs and copies them each key tile (v_accvgpr_*: 56 and 88 per
#   tile of flat decode f16). d = 96 gains as much (11.3 -> 10.0) but six paged _b32 variants
#   spill one VGPR, so it keeps no hint.
# - flat prefill d = 80: MFMA 16x16 for every dot (SPLIT_OPTIONS), 6.0 / 7.6 -> 5.5 / 7.1. With
#   Triton's choice the scores come from 32x32x8 and the 16-wide PV tail takes 16x16x16, so P
#   crosses LDS in 16-bit stores and loads (ds_write_b16 32, ds_read_u16 32 per key tile); with
#   16x16 everywhere it stays in registers, at twice the MFMA instructions for the same MFMA
#   cycles (16x16x16 f16: 8 passes per 4096 MACs, 32x32x8: 16 per 8192), which this count
#   charges: d = 64 at 16x16 issues 5.9. Tried and not taken (f16 d = 80 / 160): 32x32 for every
#   dot (pads the tail to 32 columns, issued/useful 1.10: 5.4), kpack 2 (6.0 / 4.0),
#   waves_per_eu 1 (7.5 / 6.0, one wave), the in-thread transpose off (6.9 / 5.0), 2 stages
#   (5.7 with 17 spills; at 16x16 5.2 with 6), 128x128 and d = 160 at 128x64 (3.5, key-loop
#   scratch), 64x64 / 64x128 / 8-warp tiles at 16x16 (d = 80 6.4-10.8, d = 160 5.0-8.2),
#   256x32 / 256x64 on 8 waves (d = 80 7.4 / 6.1; d = 160 4.6 / 3.3 with key-loop scratch).
#   Then schedule_hint "attention,memory-bound-attention" (LLVM's iterative-ilp scheduler;
#   SPLIT_OPTIONS) 5.5 / 7.1 -> 5.3 / 6.9 (441 / 571 -> 421 / 550 per key tile and wave; 1.09x /
#   1.01x of d = 64's 4.8 / 6.8), padded and `_b32` variants 0.96-1.00x, no spills, 2 waves as
#   before; gfx90a 6.6 / 8.2 -> 6.2 / 7.9 (every d = 80 flat variant 0.94-0.99x), gfx950 4.4 ->
#   4.3 (padded 5.2 -> 5.0; f16 = bf16 there). "attention" alone 5.5 / 6.9,
#   "memory-bound-attention" alone 5.3 / 7.0, and without 16x16 6.0 / 7.5. At d = 160 the pair
#   gives 3.8 / 4.6 -> 3.7 / 4.7 (f16 1.12x of d = 128, bf16 up: not taken;
#   memory-bound-attention alone 3.8 / 4.8); 128x64 there at waves_per_eu 1 4.5 / 5.5 (1 wave,
#   AGPRs), at 2 3.6 / 4.4 with 16-20 scratch loads in the hot loop.
# - flat prefill d = 160 on gfx942, f16: 128x64 with kpack 2 (SPLIT_TILES, SPLIT_OPTIONS by dtype),
#   3.8 -> 3.4 (1.16x -> 1.02x of d = 128's 3.3; padded 4.6 -> 3.8, padded _b32 3.8 -> 3.3; 3-8
#   VGPR spills, none in a key loop; 2 waves as before). bf16 on it 4.6 -> 4.2, but its padded
#   _b32 twin reloads 16 times in a masked loop (with "attention" 1 in the hot loop), so bf16
#   keeps 128x32; gfx90a on it reloads 57-67 times in the hot loop, so the row is gfx942's. At
#   128x64: "attention" with kpack 2 3.4 (bf16 4.2 with 1 reload), "memory-bound-attention" 3.6
#   with 31 reloads, MFMA 16x16 4.5 with 25; the tail's QK or PV product first (attention.py)
#   3.5 / 3.4 with 17 / 6 hot-loop reloads. At 128x32: 2 stages 3.8 with 140 spills, MFMA 16x16
#   4.9, 128x16 8.0, 64x32 over 2 waves 4.3, no waves_per_eu 6.1 (1 wave); block pingpong,
#   buffer ops off and scalarized packed ops the same code.
# - flat prefill d = 160 on gfx942, bf16: schedule_hint "attention" (SPLIT_OPTIONS), 4.7 -> 4.6
#   (f16 3.9 -> 3.8 before the row above; d = 128 3.3 / 4.2; gfx90a keeps none, see there). Its
#   32x32 V tail (32 keys) is read from LDS 16 bits at a time (ds_read_u16 and v_perm, 32 of 312
#   instructions), as d = 80's 16-wide one is: the in-thread transpose needs two key rows per
#   thread, and a tail tile of 1024 elements gives 256 threads 4 of one row. Loading the tail with
#   its head-dim contiguity hidden from Triton (keys-contiguous LDS, 16-bit global loads) gave 305
#   (d = 80 at 16x16: 430), not worth a change to attention.py. The rest is the accumulator
#   rescale once per 32 keys (80 values per lane); a 64-key tile fits the registers only for f16
#   with kpack 2 (above).
SPLIT_TILES = {
    ("rdna3", "prefill"): {80: (64, 32, 4, 1, 6), 96: (64, 32, 4, 1, 6), 160: (128, 32, 8, 1, 5)},
    ("rdna3", "prefill_x"): {80: (128, 16, 8, 3, 5)},
    ("rdna4", "prefill"): {80: (128, 64, 8, 1, 6), 96: (128, 64, 8, 1, 6), 160: (128, 32, 8, 1, 5)},
    ("rdna4", "prefill_paged"): {80: (128, 64, 8, 1, 5), 160: (128, 32, 8, 1, 5)},
    ("rdna4", "prefill_x"): {160: (128, 16, 8, 1, 5)},
    ("rdna4", "decode"): {80: (16, 32, 1, 1, 6), 96: (16, 32, 1, 1, 6)},
    ("rdna3_small", "prefill"): {48: (128, 32, 8, 1, 7), 80: (64, 32, 4, 1, 4), 96: (32, 32, 2, 1, 4)},
    ("rdna3_small", "prefill_x"): {80: (128, 16, 8, 3, 4)},
    ("rdna3_small", "decode_paged"): {80: (32, 32, 2, 1, 4)},
    ("cdna", "prefill_x"): {160: (128, 32, 4, 1, 2)},
    ("cdna", "prefill_paged"): {80: (128, 64, 4, 1, 2), 96: (128, 64, 4, 1, 2)},
    ("cdna", "decode"): {80: (16, 64, 1, 1, 2), 160: (16, 32, 1, 1, 2)},
    ("gfx942", "prefill", "fp16"): {160: (128, 64, 4, 1, 2)},
}
# Triton compile options of the AMD backend per (tile family or target, kernel class, head-dim
# tile): matrix_instr_nonkdim (16: MFMA 16x16x16, 32: 32x32x8; 0, Triton's choice per dot),
# kpack and schedule_hint.
SPLIT_OPTIONS = {
    ("cdna", "prefill", 80): {"matrix_instr_nonkdim": 16, "schedule_hint": "attention,memory-bound-attention"},
    ("cdna", "prefill_paged", 80): {"matrix_instr_nonkdim": 16},
    ("cdna", "prefill_paged", 96): {"kpack": 2},
    # gfx942 alone: on gfx90a the same hint issues 1.02-1.09x and spills more.
    ("gfx942", "prefill", 160, "bf16"): {"schedule_hint": "attention"},
    ("gfx942", "prefill", 160, "fp16"): {"kpack": 2},
}
# attention_tma.attn_fwd_tma (Hopper, Gluon; family "fwd_tma"): BLOCK_M, BLOCK_N, num_warps,
# num_stages (K/V ring buffers) per (target, class) and head dim, built as exact-head-dim f16/bf16
# variants only (`fwd_tma_<dtype>_d<d>`, `fwd_tma_short_<dtype>_d<d>`); src/triton/tma.rs
# (short_keys) says which class a call takes. 64x64 with one warpgroup and two stages at d = 64
# and 128: 41 / 80 KiB, so two or more programs share an SM and cover each other's pipeline start.
# At d = 256 two warpgroups on 128 query rows (192 KiB, one program per SM) halve the K/V loads per
# row. Measured on an H200 (JIT, standard normal inputs, CUDA-graph timing, f16, TFLOP/s,
# non-causal / causal; b x s at 16384 tokens, 2048 / d heads): d = 256 128x64x8 against 64x64x4
# at 64 x 256 337 / 194 against 283 / 176, 1 x 16384 560 / 553 against 506 / 490; d = 128's
# 128x64x8 was slower at every length (64 x 256 266 against 308, 1 x 16384 464 against 483). The
# short class, 64x32: d = 128 64 x 256 338 / 218 against 64x64's 316 / 193 (32 x 512: 387 against
# 414); d = 256 causal 64 x 256 to 8 x 2048 214, 306, 378, 424 against 128x64's 196, 292, 350, 416
# (4 x 4096: 407 against 464; non-causal 64 x 256 333 against 336): tma.rs takes it up to 1024
# causal keys at d = 256. Three stages were slower on an H200 at every measured shape but two
# (d = 128 64 x 256 non-causal +2%, 8 x 2048 causal +1.5%).
# The split head dims (SPLIT_DIMS 80, 96, 160: two descriptors per tensor, two wgmmas per product,
# attention_tma.py's _fwd_split) take d = 128's tile: on an H100 (JIT, f16, against cuDNN, best
# of 3 alternating turns, 4 x 4096 non-causal / causal, 16 x 1024 non-causal / causal) 64x64 x 2
# stages at d = 80 1.04 / 1.08, 1.01 / 1.10, d = 96 0.96 / 0.96, 0.89 / 0.98, d = 160 0.91 / 0.89,
# 0.92 / 0.97; 128x64 x 8 warps d = 80 0.92 / 0.95, 0.94 / 0.97, d = 96 0.92 / 0.94, 0.87 / 0.90,
# d = 160 0.69 / 0.72, 0.73 / 0.79; 64x128 below 64x64 but at d = 96 4 x 4096 causal (0.97); 3
# stages slower (one run: d = 160 0.61-0.67 against 0.87-0.98). d = 40 has none: a kernel with a
# 32-column first part and a 16-column tail box over the head's last 16 (the 8 columns both hold
# zeroed in Q's tail; commit f65759a, reverted) ran and matched on an H100 but was slower than the
# `tl` kernels' 64 tile (bench_gpu old beside new, f16, TFLOP/s: 4 x 4096 x 51 heads 181.9 against
# 247.7, causal 176.7 / 218.2, 32 x 512 164.5 / 188.2; SD 1.5's 2 x 4096 x 8 176.2 / 225.8).
#
# The warp-specialized class (attention_ws.attn_fwd_tma_ws, "prefill_ws"): 128 query rows per
# program (192 at d = 64, below), each 64 one consumer warpgroup's (num_warps is a consumer's), a
# loader warp; maxnreg `ws_maxnreg` for its warps. Measured on an H200 (JIT, the same setup; f16, TFLOP/s, against
# attn_fwd_tma's tile of the prefill class, non-causal / causal): d = 128 128x128 x 2 stages at
# 32 x 512 378 / 227 against 350 / 257, 16 x 1024 462 / 330 against 404 / 324, 1 x 16384 585 /
# 569 against 480 / 481 (3 stages or 128x64 slower on all rows but one); d = 256 128x64 at 64 x 256
# 322 / 187 against 326 / 191, 32 x 512 451 / 290 against 400 / 267, 1 x 16384 647 / 638 against
# 554 / 547 (128x32 slower everywhere); d = 64 (32 heads) 128x128 x 3 stages at 8 x 2048 376 / 305
# against 399 / 349, 2 x 8192 418 / 387 against 404 / 381, 1 x 16384 430 / 416 against 406 / 393
# (2 stages 1-4% slower from 4096 keys; 128x64 and 128x256 slower everywhere, 128x256 spills), so
# only past the prefill class's keys, where the `tl` kernels ran. FlashAttention-3's ping-pong
# (the two consumers taking turns, through a pair of mbarriers, to issue each key step's wgmmas)
# was 0.96-1.01x of these kernels on an H100 at d = 128 (JIT, the same setup, f16 / bf16: walk
# 32 x 512 0.966 / 0.962, causal 0.976 / 0.978, causal 16 x 1024 0.985 / 0.979; ws 16 x 1024
# 0.987 / 1.013), so none: each consumer already overlaps its softmax with its own P V.
# Its walking twin (attention_ws.attn_fwd_tma_walk, "prefill_walk": one program per SM walking the
# blocks) at d = 128 only; src/triton/tma.rs `walk_keys` has its figures. 128x64 x 4 stages (two Q
# buffer pairs, 192 KiB) against the ws tile (128x128 x 2) on an H200 (JIT, the same setup, three
# alternating turns, f16 / bf16, non-causal): 64 x 256 341 / 361 against 319 / 335, 32 x 512
# 420 / 433 against 407 / 421, 24 x 768 457 / 470 against 457 / 470; 5 stages (224 KiB) level at
# 64 x 256 and 2-3% slower from 512 keys; 128x128 x 3 stages with one Q buffer pair 2-9% slower
# than the ws tile. At d = 64 the ws class takes 192-row blocks, three consumers (their registers
# fit: 160 each), against 128 x 128 x 3 stages (JIT, the same setup, two alternating turns, f16 /
# bf16, TFLOP/s): 192x128 x 4 stages at 4 x 4096 416 / 427 against 394 / 402, 2 x 8192 449 / 460
# against 414 / 425, 1 x 16384 466 / 477 against 434 / 447, causal 2 x 8192 403 / 412 against 387 /
# 398; 3 stages 1-3% slower than 4, 192x64 x 6 below the two-consumer tile. (Causal 4 x 4096,
# which the prefill class takes, 344 / 351 against 356 / 364.)
# At the split head dims the ws class is attention_ws.attn_fwd_tma_ws_split (TMA_SPLIT_KERNELS):
# d = 96 128x128 x 2 stages, d = 160 128x64 x 2 (168 registers; d = 160 no STL/LDL, d = 96 one
# spill store and reload in the loader warp's setup, as d = 256's, none in a key loop). On an
# H100 (JIT, standard normal inputs, CUDA graphs, best of 3 alternating turns, f16 / bf16, against
# cuDNN; the prefill class's split tile in brackets): d = 160 4 x 4096 x 12 heads 1.07 / 1.13
# (0.82 / 0.87), causal 1.08 / 1.10 (0.89 / 0.89), 16 x 1024 1.01 / 1.01 (0.91 / 0.92), causal
# 1.00 / 0.98 (0.97 / 0.97), 2 x 4096 x 8 1.05 / 1.05 (0.90 / 0.89); d = 96 4 x 4096 x 21 1.08 /
# 1.04 (0.93 / 0.92), causal 0.97 / 0.95 (0.98 / 1.00), 16 x 1024 0.83 / 0.84 (0.93 / 0.93), 2 x
# 4096 x 8 0.91 / 0.90 (0.91 / 0.91); d = 80 (128x128 x 2) 0.70-1.00x of the prefill class on
# every row, so d = 80 has none (src/triton/tma.rs ws_keys).
TMA_TILES = {
    ("sm90", "prefill"): {64: (64, 64, 4, 2), 80: (64, 64, 4, 2), 96: (64, 64, 4, 2), 128: (64, 64, 4, 2),
                          160: (64, 64, 4, 2), 256: (128, 64, 8, 2)},
    ("sm90", "prefill_short"): {128: (64, 32, 4, 2), 256: (64, 32, 4, 2)},
    ("sm90", "prefill_ws"): {64: (192, 128, 4, 4), 96: (128, 128, 4, 2), 128: (128, 128, 4, 2), 160: (128, 64, 4, 2),
                             256: (128, 64, 4, 2)},
    ("sm90", "prefill_walk"): {128: (128, 64, 4, 4)},
}
# Query rows of each consumer warpgroup of the warp-specialized classes (attention_ws.py's ROWS):
# a block of BLOCK_M rows has BLOCK_M / CONSUMER_ROWS consumers, and q's descriptor box these rows.
CONSUMER_ROWS = 64


def ws_maxnreg(block_m):
    """Registers per thread a warp-specialized kernel is compiled with: 65,536 / its warps x 32
    (four per consumer, a loader warpgroup's four), rounded down to the multiple of 8 that
    setmaxnreg counts in (168 for two consumers, 128 for three); attention_ws.py moves them to the
    consumers."""
    warps = (block_m // CONSUMER_ROWS + 1) * 4
    return 65536 // (warps * 32) // 8 * 8


# The TMA classes, their kernels and variant-name infixes.
TMA_CLASSES = {"prefill": ("attention_tma", "attn_fwd_tma", ""),
               "prefill_short": ("attention_tma", "attn_fwd_tma", "short_"),
               "prefill_ws": ("attention_ws", "attn_fwd_tma_ws", "ws_"),
               "prefill_walk": ("attention_ws", "attn_fwd_tma_walk", "walk_")}
# The kernels of the classes built at a split head dim (SPLIT_DIMS; attention_tma.py and
# attention_ws.py): three descriptors more, for the head dim's tail, in a parameter list of their
# own (the same for both), so that the power-of-two kernels keep theirs.
TMA_SPLIT_KERNELS = {"prefill": "attn_fwd_tma_split", "prefill_ws": "attn_fwd_tma_ws_split"}
# The classes whose programs split a block between consumer warpgroups of CONSUMER_ROWS rows.
WS_CLASSES = {"prefill_ws", "prefill_walk"}
# What src/triton/tma.rs encodes for every descriptor of attn_fwd_tma: CU_TENSOR_MAP_SWIZZLE_128B
# (triton's device-side enum value 3) and a box of 64 columns (128 bytes of f16/bf16, the swizzle
# span) by the tile's rows; compile_one refuses a kernel whose descriptors Triton laid out otherwise.
TMA_SWIZZLE_128B = 3
TMA_BOX_COLS = 64

# attn_merge: one packed row per program (the manifest's block_m), the splits read BLOCK_S at a
# time (its block_n): BLOCK_S x the head-dim tile = 2,048 f32 partials per load block, 16 per
# thread of its 4 warps on NVIDIA and RDNA (8 on CDNA's 64-lane waves).
MERGE_ROWS = 1
MERGE_PARTIALS = 2048
MERGE_WARPS = 4

# 32-bit buffer addressing: AMD variants compiled with every tensor argument (Fault excepted)
# marked `tt.pointer_range = 32`, which tells triton that each spans under 2 GiB from its base
# pointer. Triton's AMD backend then forms the offsets in 32 bits and turns the tensor loads and
# stores into buffer_load/buffer_store (masked lanes get an out-of-range offset instead of a
# branch), AMD's kernel's addressing. Each is a twin of a 64-bit variant (name suffix `_b32`,
# manifest column ptr32) that src/triton/span.rs picks only when every tensor of the call fits;
# the 64-bit variant serves the rest. The same attention.py source: no constexpr, no change to
# the 64-bit code. Twins only where they remove instructions in the key loop (triton 3.6, figures
# in docs/kernel-report.md): paged (9-49% fewer instructions per 4096 MACs, 3-13% with extras),
# decode (4-41%) and padded-head-dim flat prefill (4-19%) variants; not flat prefill at the exact
# head dim (1-6%) nor the flat extras ones (0-5%), which would cost compile time for little.
B32_SKIP = {
    # (family, kernel class, head-dim tile (tile_dim), paged): twins that would add scratch reloads to the
    # key loop. gfx12 flat decode at d = 128: 0/1 loop stores/loads (0/2 bf16 padded).
    ("rdna4", "decode", 128, False),
}


# NVIDIA targets and their compute capability (launch_contract.CUDA_SHARED has their shared
# memory). sm_86's cubins also run on sm_87 (same major, lower minor); sm_89 is Ada.
CUDA_TARGETS = {"sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90}


def target_kind(target):
    if target in CUDA_TARGETS:
        return "cuda"
    if target.startswith("gfx9"):
        return "cdna"
    if target.startswith("gfx103") or target.startswith("gfx11") or target.startswith("gfx12"):
        return "rdna"
    raise SystemExit(f"aot.py: unknown target {target!r} (expected gfx9xx, gfx103x, gfx11xx, gfx12xx or one "
                     f"of {', '.join(CUDA_TARGETS)})")


# The RDNA 3/3.5 parts with LLVM's Feature1_5xVGPRs (1536 VGPRs per SIMD lane-slice, granule 24):
# they take the "rdna3" tiles. The other gfx11 parts (gfx1102, gfx1103, gfx1150, gfx1152, and any
# gfx11 LLVM adds without it: a tile made for fewer registers only loses occupancy on a larger
# file, the reverse spills) have 1024 (granule 16) and take "rdna3_small".
RDNA3_FULL_VGPRS = {"gfx1100", "gfx1101", "gfx1151"}


def tile_family(target):
    """The TILES family of a target: RDNA 2 (gfx103x: no matrix cores, tl.dot lowers to v_dot2 /
    v_fma), RDNA 3/3.5 (gfx11) and RDNA 4 (gfx12) differ in how many instructions and registers
    a tile costs, so each has its own tiles; RDNA 3 has two register files (RDNA3_FULL_VGPRS).
    Every gfx12 and every gfx103x part has one register file (1536 and 1024 VGPRs)."""
    kind = target_kind(target)
    if kind == "rdna":
        if target.startswith("gfx103"):
            return "rdna2"
        if target.startswith("gfx12"):
            return "rdna4"
        return "rdna3" if target in RDNA3_FULL_VGPRS else "rdna3_small"
    if kind == "cuda":
        # sm_86 and sm_89 share their 99 KiB of shared memory per block and their mma.
        return {"sm_80": "sm80", "sm_86": "sm86", "sm_89": "sm86", "sm_90": "sm90"}[target]
    return kind


# Split tiles a target kind does not get (its head dims then run padded on the tile above). NVIDIA:
# not 48, measured slower than padding to 64 (H200, d = 40, f16, TFLOP/s of the padded 64 tile
# against 32 + 16, scripts/bench_gpu.py old binary beside new in one run: 4 x 4096 x 51 heads
# 253.3 / 234.2, causal 223.3 / 210.9, 32 x 512 187.4 / 179.4; SD 1.5's 2 x 4096 x 8 226.8 /
# 221.7): at d = 40 the key loop's time is not its matrix work, and the second dot adds to the rest.
# Nor another tile for 40 on the 64 tile's padded variant than TILES' 128x64 x 4 warps x 3 stages:
# on an H100 (scripts/jit_fwd_tiles.py, f16, median TFLOP/s of 6 alternating bursts; 2 x 4096 x 8
# heads, 4 x 4096 x 51, the same causal, 32 x 512 x 51) 230.7, 254.4, 227.2, 197.0 against at
# best 227.9, 243.2, 218.7, 190.1 (128x64 x 4 stages); 2 stages, 8 warps, 128x128, 128x32 and
# 64-row tiles 5-41% slower (cuDNN 283.8, 283.5, 266.2, 227.4).
# CDNA: not 48 either, whose gfx942 flat prefill issues 9.5 instructions per 4096 useful MACs
# against 4.8 at 64 (456 against 307 per key tile and row: more than padding; docs/kernel-report.md).
SPLIT_SKIP = {"cuda": {48}, "cdna": {48}}


def split_built(target, block_d):
    """Whether `target` (None: any) gets the head-dim tile `block_d`."""
    return block_d not in SPLIT_DIMS or target is None or block_d not in SPLIT_SKIP.get(target_kind(target), set())


def dim_parts(block_d):
    """(BLOCK_D, BLOCK_D2) of a head-dim tile: its power-of-two part and its tail (0: none)."""
    return SPLIT_DIMS.get(block_d, (block_d, 0))


def tile_dim(block_d):
    """The power-of-two head-dim tile whose launch tile (TILES) and class choices `block_d` takes:
    itself, or for a split tile the power of two above it."""
    return 1 << (block_d - 1).bit_length()


def tile_key(target, fields):
    """(tile family, kernel class): the TILES row of an attn_fwd variant."""
    family, kernel_class = tile_family(target), fields["tile"]
    if (f"{family}_{fields['dtype']}", kernel_class) in TILES:
        family = f"{family}_{fields['dtype']}"  # the dtype's own tiles (RDNA 2 bf16)
    if kernel_class == "prefill" and fields["extras"]:
        kernel_class = "prefill_x"
    if fields["paged"] and (family, f"{kernel_class}_paged") in TILES:
        kernel_class = f"{kernel_class}_paged"  # the family's own paged tiles (prefill_paged, decode_paged)
    return family, kernel_class


def split_keys(target, fields):
    """The (family or target, kernel class[, dtype]) rows of SPLIT_TILES (SPLIT_OPTIONS adds the
    head-dim tile before the dtype) that apply to an attn_fwd variant, the most specific last:
    its tile family's, its target's, and each of those for its dtype alone."""
    family, kernel_class = tile_key(target, fields)
    return [(family, kernel_class), (target, kernel_class),
            (family, kernel_class, fields["dtype"]), (target, kernel_class, fields["dtype"])]


def kernel_tile(target, fields):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, occupancy hint) of an attn_fwd variant."""
    if key_halves(target, fields):
        return KEY_HALVES[(*tile_key(target, fields), fields["block_d"])]
    own = None
    for key in split_keys(target, fields):
        own = SPLIT_TILES.get(key, {}).get(fields["block_d"], own)
    return own or TILES[tile_key(target, fields)][tile_dim(fields["block_d"])]


def split_options(target, fields):
    """The AMD compile options (SPLIT_OPTIONS, by tile family or by target, and by dtype) of an
    attn_fwd variant: none but at split tiles."""
    options = {}
    for key in split_keys(target, fields):
        options.update(SPLIT_OPTIONS.get(key[:2] + (fields["block_d"],) + key[2:], {}))
    return options


def gpu_target(target):
    from triton.backends.compiler import GPUTarget

    kind = target_kind(target)
    if kind == "cuda":
        return GPUTarget("cuda", CUDA_TARGETS[target], 32)
    return GPUTarget("hip", target, 64 if kind == "cdna" else 32)


def one_loop(target, fields):
    """Whether the attn_fwd variant `fields` runs every key tile in one loop (attention.py,
    ONE_LOOP) rather than three (masked, unmasked, masked), each of which Triton pipelines with a
    prologue that issues the first stages' loads, predicated off when the loop is empty: the
    short prefill tile, sm_90's plain flat prefill at d >= 128 and its plain flat decode (both
    decode tiles; TILES' decode_batch figures were measured with one loop), whose
    programs have few key tiles or whose masked loops are empty unless a window or the diagonal
    cuts the keys. H200, f16, h * d = 2048, prefill (JIT, CUDA-graph timing, one run per head
    dim), TFLOP/s with one loop against three: d = 128 non-causal b x s 64 x 256 272.9 against
    255.0, 32 x 512 343.8 / 330.8, 16 x 1024 401.8 / 390.4, 4 x 4096 454.3 / 452.7, 2 x 8192
    471.5 / 468.6, 1 x 16384 473.7 / 476.5; causal 16 x 1024 307.2 / 288.9, 4 x 4096 395.8 /
    390.3, 2 x 8192 420.6 / 421.1, 1 x 16384 437.1 / 429.9. Not d = 64 (and d = 32, the same
    tile): 64 x 256 253.0 against 241.3, but 2 x 8192 384.0 / 398.0, causal 346.3 / 371.8.
    GQA 32/8, d = 128, f16, flat
    decode (JIT, CUDA-graph timing, one run): b x s_k 64 x 1k 67.3 us against 74.4 with three
    loops (cuDNN 64.2), 32 x 2k 65.4 against 68.7, 16 x 4k 63.0 against 64.5, 64 x 4k 239.6
    against 244.8, 128 x 1k 127.7 against 138.3. Not paged decode: one loop would gather every
    tile per key, where PAGE_TILES reads the table once per tile. Not the decode extras: softcap
    at b = 4 with 32k keys took 0.147 ms against 0.140 with three loops. Not AMD: its decode
    tiles have one stage (nothing pipelined, so an empty loop costs only its test)."""
    if fields["tile"] == "prefill_short":
        return True
    if target_kind(target) != "cuda" or tile_family(target) != "sm90" or fields["paged"] or fields["extras"]:
        return False
    return fields["tile"] in ("decode", "decode_batch") or (fields["tile"] == "prefill" and tile_dim(fields["block_d"]) >= 128)


def page_tiles(target, fields):
    """Whether `target`'s paged variants get attn_fwd's loop for pages that hold whole key tiles
    (the table read once per tile, not once per key). NVIDIA: H200, paged decode with pages of
    256, 3-4% less time (JIT, CUDA-graph timing: b=4 32k 132.1 us against 136.0, b=16 32k 489.0
    against 502.7, b=1 32k 43.1 against 46.2). Not AMD: with triton 3.6 the second loop pushes the
    kernels into scratch (gfx1100 paged decode d=128: 0 to 280 bytes, 14 scratch loads in the
    key loop; gfx1201 paged prefill_x d=128: 20), which the kernel report's check refuses.
    Decode tiles up to d=128 only: the second loop's loads no longer wait on a table load, so
    the pipeliner gives them deeper buffers where the tile has stages to spare, which costs shared
    memory where the K/V tiles are large (sm_90 paged decode d=256: 139 KiB against 75, one
    resident program per SM instead of two; paged prefill d=256: 320 KiB, over the 227 a block
    may have); at d <= 128 the decode tiles keep their shared memory."""
    return target_kind(target) == "cuda" and fields["tile"] == "decode" and tile_dim(fields["block_d"]) <= 128


def decode_extras(target, block_d):
    """Whether `target` gets decode-tile variants with EXTRAS (softcap, ALiBi, mm_prefix_ranges
    for few query rows; without them such calls run the prefill_x tile, 4-8x the rows of work:
    H200, GQA 32/8 d=128 b=4 32k, softcap 0.31 ms and ALiBi 0.18 against 0.13 without). Not on
    RDNA from d = 128: its one-wave decode tile spills with the extras (triton 3.6, fp16 flat:
    gfx1100 125 VGPRs at d=128 and 664 at 256, gfx1201 28 and 76, gfx1030 116 at 256, bf16 7 at
    128), and tiles of more waves repeat the 16x16 product per wave; those calls keep the
    prefill_x tile. NVIDIA and CDNA compile them without spills at every head dim."""
    return target is None or target_kind(target) != "rdna" or tile_dim(block_d) <= 64


# Kernel classes built only as plain flat variants, only where TILES has them (sm_90).
PLAIN_FLAT_CLASSES = ("prefill_short", "decode_batch")


def plain_class_built(target, tile, paged, block_d):
    """Whether `target` gets the variants of `tile` at head-dim tile `block_d`: every variant of
    prefill/decode; the PLAIN_FLAT_CLASSES flat, where TILES has the class at that tile. Paged
    calls keep their tiles (a gather address per key; not measured with these)."""
    if tile not in PLAIN_FLAT_CLASSES:
        return True
    return target is not None and not paged and tile_dim(block_d) in TILES.get((tile_family(target), tile), {})


def buffer_twin(target, fields):
    """Whether `target` gets a 32-bit buffer-addressing twin of the attn_fwd variant `fields`."""
    # NVIDIA has no buffer instructions; RDNA 2's twins were never measured (it came after them).
    if target is None or target_kind(target) == "cuda" or tile_family(target) == "rdna2":
        return False
    if fields["tile"] == "prefill" and not fields["paged"] and (fields["even_d"] or fields["extras"]):
        return False
    return (tile_family(target), fields["tile"], tile_dim(fields["block_d"]), fields["paged"]) not in B32_SKIP


def variants(block_dims, dtypes, target=None):
    """Every code object of one target: (name, family, fields). Without a target, the 64-bit
    variants only (the buffer-addressing twins are per target)."""
    out = []
    for dtype in dtypes:
        for bd in block_dims:
            if not split_built(target, bd):
                continue
            for even in (True, False):
                for paged in (False, True):
                    for tile in ("prefill", "prefill_short", "decode", "decode_batch"):
                        if not plain_class_built(target, tile, paged, bd):
                            continue
                        plain_only = tile in PLAIN_FLAT_CLASSES or (tile == "decode" and not decode_extras(target, bd))
                        for extras in (False,) if plain_only else (False, True):
                            name = "fwd_{}_{}_d{}{}_{}{}".format(
                                tile, dtype, bd, "" if even else "p", "paged" if paged else "flat",
                                "_x" if extras else "")
                            fields = dict(tile=tile, dtype=dtype, block_d=bd, even_d=even, paged=paged,
                                          extras=extras, ptr32=False)
                            out.append((name, "fwd", fields))
                            if buffer_twin(target, fields):
                                out.append((name + "_b32", "fwd", dict(fields, ptr32=True)))
            for tile, (_, _, infix) in TMA_CLASSES.items():
                if target and bd in TMA_TILES.get((tile_family(target), tile), {}):
                    out.append((f"fwd_tma_{infix}{dtype}_d{bd}", "fwd_tma",
                                dict(tile=tile, dtype=dtype, block_d=bd, even_d=True, paged=False, extras=False,
                                     ptr32=False)))
        # The merges, at the power-of-two tiles: a split tile's splits are merged by the one above
        # it (the merge's time is its memory round trips, not its lanes), so a build of split
        # tiles alone still has a merge for each.
        for bd in sorted({tile_dim(bd) for bd in block_dims if split_built(target, bd)}):
            out.append((f"merge_{dtype}_d{bd}", "merge",
                        dict(tile="merge", dtype=dtype, block_d=bd, even_d=False, paged=False, extras=False,
                             ptr32=False)))
    return out


FWD_POINTERS = {"Q": "*{dt}", "K": "*{dt}", "V": "*{dt}", "Out": "*{dt}", "Lse": "*fp32", "OAcc": "*fp32",
                "LAcc": "*fp32", "CuSeqQ": "*i32", "CuSeqK": "*i32", "BlockTable": "*i32",
                "AlibiSlopes": "*fp32", "MmPrefix": "*i32", "Fault": "*i32"}
FWD_FLOATS = ["sm_scale", "softcap"]
I64 = {"stride_qb", "stride_kb", "stride_vb"}
# Element strides the host guarantees to be multiples of 8 (16 bytes of fp16/bf16), so that
# loads along the head dim vectorize; src/triton/marshal.rs checks it before every launch.
ALIGNED_INTS = {"stride_qb", "stride_qm", "stride_qh", "stride_kb", "stride_kn", "stride_kh", "stride_vb",
                "stride_vn", "stride_vh", "stride_om", "stride_oh", "head_dim"}
MERGE_POINTERS = {"Out": "*{dt}", "Lse": "*fp32", "OAcc": "*fp32", "LAcc": "*fp32", "CuSeqQ": "*i32",
                  "CuSeqK": "*i32"}


def signature(fn, pointers, floats, dtype, ptr32=False):
    sig, attrs = {}, {}
    for index, arg in enumerate(fn.arg_names):
        if arg in pointers:
            sig[arg] = pointers[arg].format(dt=dtype)
            attrs[(index,)] = [["tt.divisibility", 16]]
            # The fault word is mapped host memory, written by system-scope atomics only.
            if ptr32 and arg != "Fault":
                attrs[(index,)].append(["tt.pointer_range", 32])
        elif arg in floats:
            sig[arg] = "fp32"
        elif arg.isupper() or arg.startswith("BLOCK_"):
            sig[arg] = "constexpr"
        else:
            sig[arg] = "i64" if arg in I64 else "i32"
            if arg in ALIGNED_INTS:
                attrs[(index,)] = [["tt.divisibility", 8]]
    return sig, attrs


TMA_POINTERS = {"Out": "*{dt}", "Lse": "*fp32", "CuSeqQ": "*i32", "CuSeqK": "*i32", "Fault": "*i32"}
# Triton's device-side TMA element types (its driver maps them to CUtensorMapDataType).
TMA_ELEM_TYPES = {"fp16": 6, "bf16": 10}


def tma_q_rows(tile, block_m):
    """Rows of q's descriptor box: the warp-specialized kernel loads its block's consumer parts."""
    return CONSUMER_ROWS if tile in WS_CLASSES else block_m


def tma_source(target, fields, dtype):
    """The compile source of one TMA variant: (kernel, GluonASTSource, its TMA_TILES entry). Each
    descriptor parameter is typed by its block and shared-memory layout (the NVMMA layout Triton
    picks for the block), which fixes how Triton lays out its box."""
    import importlib
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    module, kernel, _ = TMA_CLASSES[fields["tile"]]
    bd = fields["block_d"]
    head_d, head_d2 = dim_parts(bd)
    if head_d2:
        kernel = TMA_SPLIT_KERNELS[fields["tile"]]
    fn = getattr(importlib.import_module(module), kernel)
    bm, bn, warps, stages = TMA_TILES[(tile_family(target), fields["tile"])][bd]
    element = {"fp16": gl.float16, "bf16": gl.bfloat16}[dtype]
    sig, attrs = signature(fn, TMA_POINTERS, ["sm_scale"], dtype)
    for arg, rows in (("q", tma_q_rows(fields["tile"], bm)), ("k", bn), ("v", bn)):
        # A split head dim's tail through descriptors of its own (q2_desc, ...).
        for name, cols in ((f"{arg}_desc", head_d), (f"{arg}2_desc", head_d2)):
            if cols:
                layout = gl.NVMMASharedLayout.get_default_for([rows, cols], element)
                sig[name] = f"tensordesc<{dtype}[{rows}, {cols}],{layout!r}>"
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "HEAD_D": head_d, "STAGES": stages}
    if head_d2:
        constexprs["HEAD_D2"] = head_d2
    return fn, GluonASTSource(fn, sig, constexprs=constexprs, attrs=attrs), (bm, bn, warps, stages)


def tma_box_cols(cols):
    """(box columns, swizzle) of a descriptor of `cols` head-dim columns, what src/triton/tma.rs
    encodes: boxes of TMA_BOX_COLS with the 128-byte swizzle, or a split head dim's tail (16 or 32
    columns) in one box of its width, swizzled over its 32 or 64 bytes (CU_TENSOR_MAP_SWIZZLE_32B
    and _64B, 1 and 2; Triton's NVMMA layout for such a block)."""
    if cols >= TMA_BOX_COLS:
        return TMA_BOX_COLS, TMA_SWIZZLE_128B
    return cols, {16: 1, 32: 2}[cols]


def check_tma_descriptors(what, meta, rows, dtype, block_d):
    """Refuses descriptors other than those src/triton/tma.rs encodes (`rows` per q, k and v
    descriptor pair, head dim `block_d`)."""
    head_d, head_d2 = dim_parts(block_d)
    # q_desc, k_desc, v_desc, then a split head dim's q2_desc, k2_desc, v2_desc (the kernels'
    # parameter order).
    want = [{"swizzle": swizzle, "elem_size": 2, "elem_type": TMA_ELEM_TYPES[dtype],
             "block_size": [r, box], "fp4_padded": False}
            for box, swizzle in [tma_box_cols(d) for d in (head_d, head_d2) if d] for r in rows]
    if list(meta or []) != want:
        raise RuntimeError(f"aot.py: {what}: TMA descriptors {meta}, src/triton/tma.rs encodes {want}")


# Triton's in-thread transpose (triton 3.6: TritonAMDGPUInThreadTranspose, on by default for
# gfx942 only; knobs.amd.use_in_thread_transpose, TRITON_HIP_USE_IN_THREAD_TRANSPOSE). V arrives
# from global memory with the head dim contiguous, but the PV product's WMMA B operand wants the
# keys (its K dimension) contiguous: without the pass Triton gives V the shared layout
# `swizzled_shared vec = 1` and each lane gathers its operand from LDS 16 bits at a time
# (ds_load_u16 / ds_load_u16_d16_hi). With it, each thread loads several key rows, transposes
# them in registers (v_perm_b32) and stores them keys-contiguous (ds_store_b64), so the operand
# is read with ds_load_b128, as CK's gfx12 kernel does. The pass applies only where a thread's
# load layout repeats along the keys (BLOCK_N >= 2 x the key rows one pass of the work-group's
# threads covers), so 32-key tiles at d = 64 keep the 16-bit reads. rdna3_small (gfx1103...) takes
# it too, with tiles of its own (TILES' rdna3_small bullet, SPLIT_TILES). Above d = 128 only the
# prefill class takes it (ITT_MAX_DIM; the d = 160 and 256 tiles): there it halves the hot loop
# (gfx1201 d = 256 f16 16.5 to 11.4 per 4096 MACs, gfx1100 21.5 to 11.1), where the decode tiles
# (16x16, one wave, already spilling at d = 256 on every RDNA part) reload more in their key
# loops with it (gfx1201 d = 256 f16 0/19 to 0/27 loads per key tile, paged bf16 0/16 to 0/41;
# gfx1100 0/42 to 0/54; gfx1201 d = 160, without key-loop scratch before, 13 spills and a reload
# in the masked loop).
ITT_FAMILIES = {"rdna3", "rdna3_small", "rdna4"}
# The largest head-dim tile (tile_dim) per kernel class that takes it (128 for the rest).
ITT_MAX_DIM = {"prefill": 256}


# Variants that keep the 16-bit reads, (family, kernel class, head-dim tile (block_d), paged,
# extras): where the transpose adds scratch reloads to a key loop or instructions to the hot one
# (triton 3.6, gfx1201 for rdna4, gfx1100 for rdna3, gfx1103 for rdna3_small, instructions per
# 4096 useful MACs new / old).
# - rdna4 paged decode, every tile: 1.01-1.20x (the per-key gather feeds the transposed loads);
# - rdna4 flat decode d = 128 (16x32, one wave): 8-12 scratch loads per key tile, against none;
# - rdna3 paged decode on the 128 tile (16x16; d = 80, 96, 128): 0.99-1.05x; at d = 48 and 64
#   (16x32) 0.87-0.99x, so those keep it;
# - paged extras d = 128 (128x32): gfx1201 reloads 1-2 times per key tile, gfx1100 0.99-1.00x,
#   gfx1103 (64x16) 1.03-1.05x; at d = 160 and 256 (64x16) gfx1201 1.02-1.08x with more
#   key-loop reloads (d = 256 bf16 _b32 0/6 to 0/13), gfx1100 1.00-1.02x;
# - rdna3 and rdna3_small flat decode d = 128 with 64-bit addressing (a sixth field, ptr32
#   False; 16x16 at 255 VGPRs): the transpose spills 6-8 VGPRs and the f16 variant reloads twice
#   in its masked key loops; their `_b32` twins (0.72-0.77x) keep it without spills;
# - rdna3_small paged decode extras d = 32: 0.99-1.01x (flat ones 0.95-1.02x keep it).
ITT_SKIP = {
    *{("rdna4", "decode", d, True, x) for d in BLOCK_DIMS if d <= 128 for x in (False, True)},
    ("rdna4", "decode", 128, False, False),
    *{("rdna3", "decode", d, True, False) for d in (80, 96, 128)},
    *{(f, "prefill", d, True, True) for f in ITT_FAMILIES for d in (128, 160, 256)},
    ("rdna3", "decode", 128, False, False, False),
    ("rdna3_small", "decode", 128, False, False, False),
    ("rdna3_small", "decode", 32, True, True),
}


def in_thread_transpose(target, fields):
    """Whether the attn_fwd variant `fields` of `target` is compiled with Triton's in-thread
    transpose of the V tile (ITT_FAMILIES, less ITT_SKIP)."""
    family = tile_family(target)
    if family not in ITT_FAMILIES or tile_dim(fields["block_d"]) > ITT_MAX_DIM.get(fields["tile"], 128):
        return False
    key = (family, fields["tile"], fields["block_d"], fields["paged"], fields["extras"])
    return key not in ITT_SKIP and key + (fields.get("ptr32", False),) not in ITT_SKIP


# attn_fwd's KEY_HALVES (attention.py, _attend_halves): per (tile family, kernel class, head-dim
# tile) the launch tile of its flat EVEN_D variants without EXTRAS (the padded ones, their `_b32`
# twins among them, keep TILES' or SPLIT_TILES'), whose unmasked key tiles of BLOCK_N keys load K
# in two halves joined into one dot and V in two halves with dots of their own, and whose masked
# tiles run _attend on BLOCK_N / 2 keys (16 at least, tl.dot's least: a 16-key tile's run on 16):
# the accumulator rescale (128 multiplies a wave at d = 256) once per BLOCK_N keys with the operand
# registers of BLOCK_N / 2. Figures in TILES' d = 256 bullet. Not on gfx11 at d = 256: its flat
# prefill at 128x32 with halves 11.1 / 12.3 -> 11.3 / 12.8, hot-loop reloads 33 / 31 -> 53 / 54
# (gfx1100; gfx1103 at 4 waves alike); gfx11 takes it at the split head dims (below).
# At the split head dims (issue 57) the unmasked tiles load K and V whole (the tail's V first)
# from the scalar tile pointer, the masked ones run on BLOCK_N / 2 keys first, on 128x64 (gfx1201,
# f16 / bf16, hot loop; scratch loads per tile in it): d = 160 (SPLIT_TILES' 128x32, 11.6 / 13.6,
# 1.25x / 1.15x of d = 128's 9.3 / 11.8) -> 9.2 / 11.2 (0.99x / 0.95x), no key-loop scratch (25
# / 19 spills outside them, 100 / 80 bytes), 5 waves; d = 80 11.9 / 15.0 -> 11.5 / 14.6, d = 96
# 12.4 / 15.7 -> 10.9 / 13.6 (231-238 VGPRs -> 207-220, no spills, 6 waves). Tried at d = 160:
# - 128x32 with K and V (and their tails) in 16-key halves: 16.4 / 18.6: V's 16 x 128 halves
#   (8 elements a thread) lose the in-thread transpose (160 ds_load_u16(_d16_hi) per tile, not 32).
# - 128x64, K's halves joined: tails in halves 9.6 / 11.3 with 24; V's tail whole before V's
#   halves 9.6 / 11.9, after them 9.4 / 10.9 with 22; V whole 9.8 / 12.0.
# - 128x64, K whole, V in halves (tail whole first) 9.1 / 11.4; at d = 80 / 96 15.2 / 18.1 and
#   13.8 / 16.5 (V's 32 x 64 halves lose the transpose). _attend's loop (per-tile pointer
#   tensors) for the unmasked tiles 9.0 / 10.6 with 14.
# gfx11 at the split head dims (issue 57; f16 / bf16, hot loop, scratch loads per tile in it and,
# in parentheses, in the masked loops): the scalar tile pointer and 32-key masked tiles keep a
# 64-key tile in registers where _attend's loop spilled it (SPLIT_TILES' comment: 128x64 161
# VGPRs at d = 80). gfx1100 (gfx1151 alike) d = 80 / 96 on 128x64 with 2 stages at 6: 21.1 / 25.0
# -> 15.4 / 19.9 and 19.7 / 23.0 -> 15.8 / 19.9 (0.96x / 0.99x of d = 64's 16.0; 3-7 spills, none
# in a key loop; 6 waves as on 64x32): per 64 keys 618 instructions a wave against 2 x 421, the
# rescale once per 64 keys (40 v_mul_f32 against 82) and Q's tail no longer converted in the
# loop (8 ds_bpermute_b32 per 32 keys gone). One stage at 6 16.4 / 20.9, d = 96 15.1 with 12; at
# 5 16.4 and 15.8 / 19.4 without key-loop scratch (5 waves); 2 stages at 5 d = 96 15.5 with (12);
# 128x32 at 6 24.9 / 25.4; 64x64 over 4 waves 17.4, d = 96 13.6 with 17. d = 160 on 128x32 with 2
# stages at 5: 15.7 / 18.8 -> 13.4 / 15.8 (1.07x / 1.01x of d = 128's 12.5 / 15.7; 25 / 32 (136)
# -> 2 / 2 (44), 5 waves): one stage 14.1 / 16.6 with 4 / 2 (19), schedule_hint "attention" 13.3 /
# 15.3 with 5 (38; "memory-bound-attention" fails in LLVM: "Virtual register defs don't dominate
# all uses"), 128x64 12.7 with 37 (151), 64x64 12.0 with 53 (167), 64x32 15.6 with 19 (76).
# rdna3_small (gfx1103) d = 80 / 96 on 128x64 with one stage at 4: 21.1 / 25.1 -> 16.4 / 20.4 and
# 19.1 / 22.7 -> 15.8 / 19.4 (0-1 spills, 4 waves as before); 2 stages 15.6 / 20.7 and 15.5 with
# (12), 64x64 17.1 and 13.1 with 12, 128x64 at 5 17.1 with 9 (17). d = 160 on 128x32 with 2 stages
# at 4: 16.2 / 18.7 -> 13.5 / 15.9 (1.21x of d = 256's 11.2, 1.15x of d = 128's 13.8 bf16; 32 (136)
# -> 2 (57)); one stage 14.1 with 4 (19), 3 stages 15.0 with 5 (50), "attention" 13.4 / 15.3 with
# 5 (40-44), 64x32 at 2 stages 14.4 with 10 (104), 128x64 at 2 stages 12.4 with 4 stores and 25
# loads (20 / 168). What stayed at 160: the rescale of 160 columns per 32 keys (2.0 v_mul_f32 per
# 4096 MACs, as d = 256's 128x32) and the 32-column V tail's 16-bit operand reads (1.6), which
# TAIL_VEC (below) removes.
# gfx12 flat decode d = 160 (issue 57) on its 16-key tile (the masked tiles keep 16 keys,
# tl.dot's least): the scalar tile pointer drops the 64-bit address arithmetic of its 20 128-bit
# K/V loads (about 85 of the 16x16 tile's 561 instructions a wave per tile: v_ashrrev_i32 and
# v_lshlrev_b64 20 each, 21 adds, 24 s_delay_alu / s_wait_alu):
# 28.1 / 30.6 (1.14x / 1.13x of d = 128's 24.6 / 27.0) -> 23.8 / 26.1 (0.97x / 0.97x) at
# waves_per_eu 5, no spills (6 -> 5 waves, d = 128's flat decode's 5; at 6 23.3 / 25.4, but bf16
# spills 11 and reloads 6 times per tile). Tried: 16x32 (K and V whole) at 6 / 5 / 4 22.1 / 21.4 /
# 21.2 with 39 / 29 / 27 hot-loop reloads; 16x32 with K, V and their tails in 16-key halves 22.3 /
# 21.8 (48 / 28); 16x64 20.4 (101); a lazy rescale (a row's maximum kept until passed by 2^8, the
# rescale under a branch) 30.2: the report counts the branch whether taken or not. Q's tail is
# converted to its WMMA layout in every key tile (ds_bpermute, 8 a tile; K's tail 8 more): Triton's
# AMD ReorderInstructions sinks a one-use dot-operand conversion into its user's loop, and loading
# Q's tail transposed changes nothing.
KEY_HALVES = {("rdna4", "prefill", 80): (128, 64, 8, 1, 6), ("rdna4", "prefill", 96): (128, 64, 8, 1, 6),
              ("rdna4", "prefill", 160): (128, 64, 8, 1, 5), ("rdna4", "prefill", 256): (128, 32, 8, 1, 5),
              ("rdna3", "prefill", 80): (128, 64, 8, 2, 6), ("rdna3", "prefill", 96): (128, 64, 8, 2, 6),
              ("rdna3", "prefill", 160): (128, 32, 8, 2, 5),
              ("rdna3_small", "prefill", 80): (128, 64, 8, 1, 4), ("rdna3_small", "prefill", 96): (128, 64, 8, 1, 4),
              ("rdna3_small", "prefill", 160): (128, 32, 8, 2, 4),
              ("rdna4", "decode", 160): (16, 16, 1, 1, 5)}


def key_halves(target, fields):
    """Whether the attn_fwd variant `fields` of `target` takes KEY_HALVES (and its tile)."""
    if fields["paged"] or fields["extras"] or not fields["even_d"] or fields.get("ptr32", False):
        return False
    return (*tile_key(target, fields), fields["block_d"]) in KEY_HALVES


# attn_fwd's TAIL_VEC (attention.py): per (tile family, kernel class, head-dim tile) the columns
# of each load of the split head dim's tail. gfx11 paged prefill d = 160 (128x32 over 8 waves,
# issue 57): Triton loads the 32 x 32 V tail tile 4 columns (64 bits) a thread, one key row each,
# too few for the in-thread transpose, so its WMMA operand was read from LDS 16 bits at a time (64
# ds_load_u16(_d16_hi) and about 50 s_waitcnt a wave per tile); 2 columns give each thread two
# key rows, and the transpose's ds_load_b128 (gfx1100 f16 / bf16 22.8 / 24.9 -> 21.4 / 23.9 per
# 4096 MACs, 1.10x / 1.08x of d = 128's 19.4 / 22.2; gfx1103 22.8 / 25.0 -> 21.4 / 23.9, 1.10x /
# 1.07x of 19.5 / 22.4), hot-loop scratch loads as before (31), 5 / 4 waves as before. The `_b32`
# twins gain more (gfx1100 f16 18.4 -> 15.9, hot-loop reloads 25 -> 22, masked loops 86 -> 44);
# the padded 64-bit variants keep Triton's vectors (with 2 they issue the same, 24.6 -> 24.8, and
# store to scratch in the hot loop: 0 / 62 -> 7 / 75 per tile). A run-time 1 times the tail's
# column offsets (contiguity 1) gave 24.5: each thread then gathers four keys' pages; two columns
# with that run-time 1 851 / 949 instructions a wave per tile (gfx1100 exact, 1.098x), but the
# `_b32` twins 634 -> 662. gfx1151 as gfx1100 (21.3 / 23.8).
# gfx11's flat prefill at 160 (KEY_HALVES' 128x32 loop, whose 32 x 32 V tail tile is the same):
# gfx1100 f16 / bf16 13.4 / 15.8 -> 11.8 / 14.1 (0.94x / 0.90x of d = 128's 12.5 / 15.7), gfx1103
# 13.5 / 15.9 -> 11.7 / 14.2 (1.06x / 1.03x of d = 128's 11.0 / 13.8; 1.04x / 1.15x of d = 256's
# 11.2 / 12.4), VGPR spills 91 -> 77 (gfx1103 102 -> 81), hot-loop scratch loads per tile 2 -> 3-4,
# masked loops 44 -> 32 (gfx1103 57 -> 41-43), waves as before (5; gfx1103 4). Its padded `_b32`
# twins: f16 16.0 -> 14.6 (hot-loop reloads 24 -> 31, masked 53 -> 75), bf16 19.6 -> 16.1 (27 ->
# 26, 55 -> 49); the padded 64-bit variants and the extras keep Triton's vectors.
TAIL_VEC = {("rdna3", "prefill_paged", 160): 2, ("rdna3_small", "prefill_paged", 160): 2,
            ("rdna3", "prefill", 160): 2, ("rdna3_small", "prefill", 160): 2}


def tail_vec(target, fields):
    """attn_fwd's TAIL_VEC for the variant `fields` of `target` (TAIL_VEC; 0: Triton's choice)."""
    if not fields["even_d"] and not fields.get("ptr32", False):
        return 0
    return TAIL_VEC.get((*tile_key(target, fields), fields["block_d"]), 0)


def fwd_constexprs(target, fields):
    """attn_fwd's compile-time arguments for the variant `fields` of `target`."""
    bm, bn = kernel_tile(target, fields)[:2]
    block_d, block_d2 = dim_parts(fields["block_d"])
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": block_d, "BLOCK_D2": block_d2, "EVEN_D": fields["even_d"],
            "PAGED": fields["paged"], "EXTRAS": fields["extras"], "PAGE_TILES": page_tiles(target, fields),
            "FOLD_SCALE": target_kind(target) != "cuda", "ONE_LOOP": one_loop(target, fields),
            "KEY_HALVES": key_halves(target, fields), "TAIL_VEC": tail_vec(target, fields)}


def compile_one(job):
    target, name, family, fields, out_dir = job
    import triton
    from triton.compiler import ASTSource

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import attention

    kind = target_kind(target)
    dtype = DTYPES[fields["dtype"]]
    if family == "fwd_tma":
        fn, src, (bm, bn, warps, stages) = tma_source(target, fields, dtype)
        occupancy, sig = 0, src.signature
    elif family == "fwd":
        fn = attention.attn_fwd
        bm, bn, warps, stages, occupancy = kernel_tile(target, fields)
        sig, attrs = signature(fn, FWD_POINTERS, FWD_FLOATS, dtype, fields.get("ptr32", False))
        constexprs = fwd_constexprs(target, fields)
    else:
        fn = attention.attn_merge
        bm, bn, warps, stages, occupancy = MERGE_ROWS, MERGE_PARTIALS // fields["block_d"], MERGE_WARPS, 1, 0
        sig, attrs = signature(fn, MERGE_POINTERS, [], dtype)
        constexprs = {"BLOCK_S": bn, "BLOCK_D": fields["block_d"]}
    if family != "fwd_tma":
        for key in constexprs:
            sig[key] = "constexpr"
        src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    started = time.time()
    target_obj = gpu_target(target)
    options = {"num_warps": warps, "num_stages": stages}
    if fields["tile"] in WS_CLASSES:
        options["maxnreg"] = ws_maxnreg(bm)
    if occupancy:
        # The tile's occupancy hint: waves per EU on AMD, registers per thread (maxnreg) on NVIDIA.
        options["maxnreg" if kind == "cuda" else "waves_per_eu"] = occupancy
    if family == "fwd":
        options.update(split_options(target, fields))
    # A knob, not an option: set per job (a pool worker compiles for several targets). Setting it
    # sets its environment variable, which is part of triton's cache key; None restores triton's
    # per-arch default (on for gfx942).
    triton.knobs.amd.use_in_thread_transpose = True if family == "fwd" and in_thread_transpose(target, fields) else None
    kernel = triton.compile(src, target=target_obj, options=options)
    seconds = time.time() - started
    md = kernel.metadata
    scratch = [getattr(md, "global_scratch_size", 0) or 0, getattr(md, "profile_scratch_size", 0) or 0]
    # RuntimeError, not SystemExit: this runs in a pool worker, where SystemExit ends the worker
    # without a result and leaves main() waiting for it forever; the pool re-raises exceptions
    # in main(), which then fails.
    if any(scratch):
        raise RuntimeError(f"aot.py: {target}/{name} needs scratch memory {scratch}; the launcher passes none")
    if family == "fwd_tma":
        check_tma_descriptors(f"{target}/{name}", md.tensordesc_meta, [tma_q_rows(fields["tile"], bm), bn, bn],
                              fields["dtype"], fields["block_d"])
    # The warp-specialized kernel's partitions add warps to num_warps.
    threads = md.num_warps * target_obj.warp_size
    if kind == "cuda":
        binary, ext, vspill, sspill, loop_spills = kernel.asm["cubin"], "cubin", 0, 0, 0
        facts = ptx_kernel_facts(kernel.asm["ptx"], md.name)
    else:
        binary, ext = kernel.asm["hsaco"], "hsaco"
        text = kernel.asm["amdgcn"]
        vspill = sum(int(x) for x in re.findall(r"\.vgpr_spill_count:\s+(\d+)", text))
        sspill = sum(int(x) for x in re.findall(r"\.sgpr_spill_count:\s+(\d+)", text))
        # Where the spills are: inside a key loop they run once per key tile.
        loop_spills = loop_scratch_accesses(text, md.name)
        facts = amdgpu_kernel_facts(text, md.name)
    problems = launch_problems(facts, threads, target_obj.warp_size, launch_args(sig, len(scratch)), md.shared,
                               shared_limit(target))
    if problems:
        raise RuntimeError(f"aot.py: {target}/{name}: the code object does not fit its launch "
                           f"(src/triton/launch.rs):\n  " + "\n  ".join(problems))
    rel = f"{target}/{name}.{ext}"
    with open(os.path.join(out_dir, rel), "wb") as f:
        f.write(binary)
    # Beside the code object, for scripts/kernel_report.py and for reading what the compiler
    # did (never embedded: the build reads only the manifest's file): the assembly and the
    # layouts and pipelining Triton chose.
    for stage in ("ptx" if kind == "cuda" else "amdgcn", "ttgir"):
        with open(os.path.join(out_dir, f"{target}/{name}.{stage}"), "w") as f:
            f.write(kernel.asm[stage])
    return [target, name, md.name, family, fields["tile"], fields["dtype"], fields["block_d"],
            int(fields["even_d"]), int(fields["paged"]), int(fields["extras"]), int(fields.get("ptr32", False)),
            bm, bn, threads, md.shared,
            len(scratch), vspill, sspill, loop_spills, f"{seconds:.1f}", rel]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--block-dims", default=",".join(map(str, BLOCK_DIMS)))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--filter", default="", help="comma-separated globs on variant names (default all)")
    args = parser.parse_args()

    targets = [t for t in args.targets.split(",") if t]
    block_dims = [int(x) for x in args.block_dims.split(",") if x]
    dtypes = [d for d in args.dtypes.split(",") if d]
    for bd in block_dims:
        if bd not in BLOCK_DIMS:
            raise SystemExit(f"aot.py: head-dim tile {bd} not in {BLOCK_DIMS}")
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"aot.py: dtype {d} not in {list(DTYPES)}")
    globs = [g for g in args.filter.split(",") if g]
    jobs = []
    for target in targets:
        target_kind(target)
        os.makedirs(os.path.join(args.out, target), exist_ok=True)
        for name, family, fields in variants(block_dims, dtypes, target):
            if family == "merge" or not globs or any(fnmatch.fnmatch(name, g) for g in globs):
                jobs.append((target, name, family, fields, args.out))
    started = time.time()
    rows = []
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        try:
            for done, row in enumerate(pool.imap_unordered(compile_one, jobs), 1):
                rows.append(row)
                col = dict(zip(MANIFEST_COLUMNS, row))
                print(f"aot.py: [{done}/{len(jobs)}] {row[0]} {row[1]} {col['seconds']} s, {col['vgpr_spills']} VGPR spills",
                      flush=True)
        except RuntimeError as e:
            # compile_one's refusals (scratch memory, launch contract): the message, not a traceback.
            raise SystemExit(str(e)) from None
    rows.sort(key=lambda r: (r[0], r[1]))
    with open(os.path.join(args.out, "manifest.tsv"), "w") as f:
        f.write("\t".join(MANIFEST_COLUMNS) + "\n")
        for row in rows:
            f.write("\t".join(str(x) for x in row) + "\n")
    print(f"aot.py: {len(rows)} kernels for {','.join(targets)} in {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
