#!/usr/bin/env python3
"""Static kernel report: what the compiler emitted for every AMD code object kernels/aot.py wrote,
measured from its AMDGCN assembly and TTGIR (aot.py writes both beside each code object), no GPU.

Usage: kernel_report.py DIR [--out FILE] [--targets gfx1100,...] [--check]
           [--reference AITER_FWD_PREFILL_PY [--reference-targets gfx1100,gfx1201,gfx942] [--jobs N]]

DIR is aot.py's --out (manifest.tsv, <target>/<variant>.hsaco, .amdgcn, .ttgir). One table row per
AMD code object (sm_90 rows are skipped), written as markdown to --out (default
DIR/kernel_report.md); a summary per target is printed. Standard library only, any python3,
except --reference, which needs triton (the build's venv).

Columns and definitions:
  tile        BLOCK_M x BLOCK_N, warps (waves per work-group = threads / wave size).
  VGPR        metadata .vgpr_count; on gfx9 with MFMA "arch+acc=total" (arch: LLVM's `; NumVgprs:`,
              acc: .agpr_count; on gfx90a/gfx94x/gfx950 both share one 512-entry file per lane and
              .vgpr_count is their unified total, arch rounded up to 4, that occupancy uses).
  SGPR        metadata .sgpr_count (its SGPR spills to VGPR lanes in parentheses).
  spills      metadata .vgpr_spill_count (whole kernel).
  loop st/ld  scratch stores/loads in the hot loop (see below): `scratch_*` instructions, and
              `buffer_*` ones LLVM comments as a "Spill" or "Reload" (gfx90a and older). In
              parentheses the same in the other loops that issue matrix instructions (the masked
              key loops), when there are any.
  scratch     metadata .private_segment_fixed_size (bytes per lane).
  LDS         metadata .group_segment_fixed_size (static) + the manifest's `shared` (the dynamic
              LDS the launcher passes), bytes per work-group.
  waves/SIMD  from registers and from LDS, computed below (arch_facts). The registers are those
              the kernel descriptor asks for (`.amdhsa_next_free_vgpr`, what the hardware
              allocates), not .vgpr_count: LLVM raises the descriptor's count to hold a kernel to
              its `amdgpu-waves-per-eu` (Triton asks 6 on RDNA). In parentheses the `; Occupancy:`
              the compiler printed; --check fails where it differs from the waves the descriptor's
              registers and the static LDS allow (LLVM does not know the dynamic LDS).
  hot loop    the loop (LLVM's `Loop Header` / `in Loop: Header=` annotations of the assembly; a
              backward branch alone is not one: LLVM places loop exits before the loop too) that
              contains the most matrix instructions (`v_wmma*`, `v_swmmac*`, `v_mfma*`,
              `v_smfmac*`); among equals the one with the fewest instructions, which for attn_fwd
              is the unmasked `_attend` loop (the masked ones add the mask). A loop's instructions
              are those of its blocks and nested loops, counted once (static, per wave).
              On a target without matrix cores (RDNA 2, gfx103x: Triton lowers tl.dot to
              `v_dot2*` for f16 and `v_fma*`/`v_fmac*` for bf16), the loop with the most dot/FMA
              MACs (fma_macs) instead.
              The hot loop's stats also count its LDS operations (`ds_*`) and the fewest and
              most instructions of one pass from its header back to it (loop_paths: a loop that
              branches around per-tile work, as CK's masked key loop does, has two figures;
              scripts/ck_gfx12_reference.py reports them).
  matrix      the hot loop's matrix instructions by mnemonic, and their MACs per wave (without
              matrix cores: its dot/FMA instructions).
  dots        per distinct `tt.dot` of the TTGIR: MxNxK and the warpsPerCTA of its result's
              #ttg.amd_wmma / #ttg.amd_mfma encoding.
  issued/useful  (MACs of the hot loop's matrix instructions x waves per work-group) /
              (2 x BLOCK_M x BLOCK_N x BLOCK_D): the matrix work all waves issue per key tile over
              what one key tile needs (Q.K^T and P.V). 1.00 = no repeated work. Without matrix
              cores "n/a (no matrix cores; FMA x.xx)": x.xx is the same ratio for the hot loop's
              dot/FMA MACs, which also count the softmax's own v_fma (about 1/(2 x BLOCK_D) more
              for bf16; f16's dots are v_dot2, the softmax's are not).
  instr/4096  (hot-loop instructions per wave x waves per work-group) / (2 x BLOCK_M x BLOCK_N x
              BLOCK_D / 4096): instructions the work-group issues per 4096 useful MACs (one
              16x16x16 WMMA's worth). Checked against issue 23's figures: gfx1100 d=128 prefill
              2.50 and 50.9 (20 WMMA and 407 instructions per wave, 8 waves, 32x32 tile); gfx942
              d=128 1.50 and 7.0 (48 MFMA 32x32x8 and 446 instructions, 8 waves, 128x64).
  MACs per matrix instruction (per wave): M x N x K of the mnemonic times its blocks. WMMA
  (v_wmma_f32_16x16x16_f16 and the rest) = M x N x K = 4096. MFMA: the `_<n>b` suffix of the
  gfx940 names gives the blocks; the gfx908/gfx90a names (v_mfma_f32_32x32x4f16: 2 blocks,
  16x16x4f16: 4, 4x4x4f16: 16) are told apart by K against the single-block K of the type
  (so v_mfma_f32_32x32x8f16 = 8192 MACs, v_mfma_f32_16x16x16f16 = 4096).
  Dot/FMA MACs per instruction (per wave), targets without matrix cores: v_dot2*_f32_{f16,bf16}
  2 x wave size, v_fma_f32 / v_fmac_f32 / v_fma_mix_f32 1 x wave size, v_pk_fma_f32 2 x wave size.
  The floor is then 64 instructions per 4096 MACs for f16 (v_dot2c, wave32), 128 for bf16.

--check (for CI): exits 1 listing every `fwd` kernel of ours (not the reference rows) whose
occupancy from its descriptor disagrees with LLVM's, or whose
issued/useful is above 1.00 (without matrix cores: whose dot/FMA issued/useful is above
FMA_REPEAT_LIMIT, well above the softmax's own FMAs and below the 2.00 of any repeated
product), or whose head-dim tile is <= 128 and any of whose key loops (the hot one, or a masked
one before or after it) has scratch stores or loads.

--reference FILE compiles AMD's own Triton flash-attention forward (`attn_fwd` of aiter's
flash_attn_triton_amd/fwd_prefill.py, a fetched copy, never part of this repo; its sibling
modules must sit beside it) with the same triton for the --reference-targets, f16 and bf16, batch mode,
non-causal and causal, at AMD's per-arch configs (REFERENCE_CONFIGS), with the argument
specialization its launcher gets from Triton's JIT, and adds its rows ("AMD aiter") to the same
table. The compiled files go to DIR/aiter-reference/.
"""
import argparse
import collections
import math
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "kernels"))
# No __pycache__ in kernels/: the build script watches that folder and would rebuild.
sys.dont_write_bytecode = True
from amdgcn import (Insn, branch_target, buffer_resource, find_loops, is_scratch_access,  # noqa: E402,F401
                    parse_blocks, scratch_resources)
from launch_contract import parse_yaml_block  # noqa: E402  (standard library only)

OURS = "ours"
AITER = "AMD aiter"
REFERENCE_DIR = "aiter-reference"


# ---------------------------------------------------------------------------------------------
# Occupancy rules
# ---------------------------------------------------------------------------------------------

def arch_facts(target):
    """The register file, wave limits and LDS of an AMD target, as LLVM's AMDGPU backend models
    them (llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp, IsaInfo::getTotalNumVGPRs,
    getVGPRAllocGranule, getMaxWavesPerEU, getNumWavesPerEUWithNumVGPRs, getEUsPerCU,
    getMaxWorkGroupsPerCU; GCNSubtarget/AMDGPUSubtarget occupancy with SGPRs and LDS):

    - gfx90a, gfx94x, gfx950 (FeatureGFX90AInsts): one 512-entry file per lane holds the arch
      VGPRs and the AGPRs (.vgpr_count is their unified total), granule 8, at most 8 waves per
      SIMD. gfx908 and older gfx9: 256 VGPRs (and 256 separate AGPRs on gfx908), granule 4, at
      most 10 waves. gfx9 waves are also limited by SGPRs (800 per SIMD: <=80 -> 10, <=88 -> 9,
      <=100 -> 8, else 7; getOccupancyWithNumSGPRs). LDS: 64 KiB per CU (160 KiB on gfx950),
      4 SIMDs per CU, at most 16 work-groups per CU (barriers).
    - gfx11/gfx12, wave32: 1536 VGPRs per SIMD lane-slice in granules of 24 on the parts with
      Feature1_5xVGPRs (gfx1100, gfx1101, gfx1151, gfx1200, gfx1201: LLVM's `; Occupancy:` for
      gfx1201 confirms it), else 1024 in granules of 16 (gfx1102, gfx1103, gfx1150, gfx1152, gfx103x);
      at most 16 waves per SIMD (20 on gfx101x). SGPRs do not limit occupancy. LDS: 128 KiB per
      WGP in WGP mode (Triton's default), 4 SIMDs per WGP, at most 32 work-groups per WGP.
    - "matrix": whether the target has matrix cores (MFMA from gfx908, WMMA from gfx11); gfx10
      (RDNA 1/2) has none.
    waves(VGPRs) = min(max waves, total // roundup(VGPRs, granule)) (at least 1).
    waves(LDS) = min(max waves, work-groups that fit x waves per work-group // SIMDs), LDS per
    work-group rounded up to 512 bytes (LDS_SIZE's 128-dword blocks)."""
    found = re.fullmatch(r"gfx(\d{1,2})([0-9a-f])([0-9a-f])", target)
    if not found:
        return None
    major, minor = int(found.group(1)), found.group(2)
    if major == 9:
        unified = target in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
        return {"wave": 64, "vgprs": 512 if unified else 256, "granule": 8 if unified else 4,
                "separate_agprs": target == "gfx908",
                "max_waves": 8 if unified else 10, "sgpr_limit": True, "matrix": target in ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"),
                "lds": (160 if target == "gfx950" else 64) * 1024, "simds": 4, "max_groups": 16}
    if major in (10, 11, 12):
        big = target in ("gfx1100", "gfx1101", "gfx1151", "gfx1200", "gfx1201")
        gfx101 = major == 10 and minor in "01"
        return {"wave": 32, "vgprs": 1536 if big else 1024,
                "granule": 24 if big else (8 if gfx101 else 16), "separate_agprs": False,
                "max_waves": 20 if gfx101 else 16, "sgpr_limit": False, "matrix": major >= 11,
                "lds": 128 * 1024, "simds": 4, "max_groups": 32}
    return None


def waves_from_registers(arch, vgprs, agprs, sgprs):
    """Waves per SIMD the registers allow (arch_facts' rule)."""
    need = max(vgprs, agprs) if arch["separate_agprs"] else vgprs
    waves = arch["max_waves"]
    if need >= arch["granule"]:
        waves = min(waves, max(1, arch["vgprs"] // (math.ceil(need / arch["granule"]) * arch["granule"])))
    if arch["sgpr_limit"]:
        waves = min(waves, 10 if sgprs <= 80 else 9 if sgprs <= 88 else 8 if sgprs <= 100 else 7)
    return waves


def waves_from_lds(arch, lds_bytes, waves_per_group):
    """Waves per SIMD the LDS allows (arch_facts' rule)."""
    groups = arch["max_groups"] if waves_per_group > 1 else arch["max_waves"] * arch["simds"]
    groups = min(groups, arch["max_waves"] * arch["simds"] // waves_per_group)
    if lds_bytes > 0:
        groups = min(groups, arch["lds"] // (math.ceil(lds_bytes / 512) * 512))
    return min(arch["max_waves"], groups * waves_per_group // arch["simds"])


# ---------------------------------------------------------------------------------------------
# Assembly (blocks, loops and scratch accesses: kernels/amdgcn.py)
# ---------------------------------------------------------------------------------------------

# Single-block K of the gfx908/gfx90a MFMA names by (M, source type): a smaller K means
# several blocks (v_mfma_f32_32x32x4f16 = 2 blocks of 32x32x4).
MFMA_FULL_K = {
    32: {"f32": 2, "xf32": 4, "f16": 8, "bf16": 4, "bf16_1k": 8, "i8": 8},
    16: {"f32": 4, "xf32": 8, "f16": 16, "bf16": 8, "bf16_1k": 16, "i8": 16, "f64": 4},
}


def matrix_macs(mnemonic):
    """MACs one wave's matrix instruction performs, or None for anything else."""
    found = re.match(r"v_(wmma|swmmac|mfma|smfmac)_(?:scale_)?[a-z0-9]+_(\d+)x(\d+)x(\d+)(.*)$", mnemonic)
    if not found:
        return None
    kind, m, n, k, rest = found.group(1), int(found.group(2)), int(found.group(3)), int(found.group(4)), found.group(5)
    macs = m * n * k
    if kind in ("wmma", "swmmac"):
        return macs
    explicit = re.match(r"_(\d+)b(?:_|$)", rest)
    if explicit:
        return macs * int(explicit.group(1))
    source = rest.lstrip("_")
    if m == 4:
        return macs * (4 if source.endswith("f64") else 16)
    full = MFMA_FULL_K.get(m, {}).get(source)
    return macs * (full // k if full and k < full else 1)


# Dot/FMA instructions of Triton's FMA lowering of tl.dot (targets without matrix cores) and
# the MACs per lane of each.
FMA_LANE_MACS = {"dot2": 2, "pk_fma": 2, "fma": 1}
# --check's limit on dot/FMA issued/useful: repeated products make it 2.00 or more; the softmax's
# own v_fma (and the _x variants' ALiBi/softcap ones) stay below (1.22 at most, bf16 d=32 _x).
FMA_REPEAT_LIMIT = 1.5


def fma_macs(mnemonic, wave):
    """MACs one wave's dot/FMA instruction performs (f32 accumulation), or None for anything
    else: v_dot2{,c}_f32_{f16,bf16} 2 per lane, v_pk_fma_f32 2, v_fma{,c}_f32 and
    v_fma_mix_f32 1."""
    found = re.match(r"v_(dot2c?|pk_fma|fmac?|fma_mix)_f32(?:_(?:f16|bf16))?(?:_e32|_e64|_dpp|_sdwa)*$", mnemonic)
    if not found:
        return None
    kind = found.group(1)
    if kind.startswith("dot2"):
        if not re.search(r"_f32_b?f16", mnemonic):
            return None
        return 2 * wave
    if kind == "pk_fma":
        return 2 * wave
    if re.search(r"_f32_b?f16", mnemonic):  # no such FMA
        return None
    return wave


def loop_stats(blocks, indices, fma_wave=None, resources=()):
    """A loop's instruction count, matrix instructions and their MACs, scratch stores and loads.
    With `fma_wave` (the wave size of a target without matrix cores) its dot/FMA instructions
    count as its matrix instructions."""
    insns = [insn for i in sorted(set(indices)) for insn in blocks[i].insns]
    macs_of = (lambda m: fma_macs(m, fma_wave)) if fma_wave else matrix_macs
    matrix = collections.Counter(i.mnemonic for i in insns if macs_of(i.mnemonic))
    scratch = [i for i in insns if is_scratch_access(i, resources)]
    memory = [i for i in insns if not is_scratch_access(i, resources)]
    return {"insns": len(insns), "matrix": dict(matrix), "lds": sum(i.mnemonic.startswith("ds_") for i in insns),
            "global_loads": sum(i.mnemonic.startswith("global_load") for i in memory),
            "buffer_loads": sum(i.mnemonic.startswith("buffer_load") for i in memory),
            "macs": sum(macs_of(m) * count for m, count in matrix.items()),
            "stores": sum("store" in i.mnemonic for i in scratch), "loads": sum("load" in i.mnemonic for i in scratch)}


def block_successors(blocks, index):
    """Indices of the blocks control may pass to from the end of blocks[index]: its branch
    targets, and the next block unless it ends in an unconditional branch or the program's end."""
    names = {b.name: i for i, b in enumerate(blocks)}
    out, last = [], None
    for insn in blocks[index].insns:
        last, target = insn.mnemonic, branch_target(insn)
        if target in names:
            out.append(names[target])
    if last not in ("s_branch", "s_endpgm", "s_setpc_b64") and index + 1 < len(blocks):
        out.append(index + 1)
    return out


def loop_paths(blocks, header, indices):
    """(fewest, most) instructions of one iteration of a loop: over the paths from its header
    through its blocks back to the header (a nested loop's back edges are not followed). Where a
    key loop branches around per-tile work (CK's per-pixel mask on the edge tiles), the fewest is
    an interior tile's path and the most an edge tile's; a loop without such branches has one."""
    members = set(indices)
    start = next(i for i in members if blocks[i].name == header)
    memo = {}

    def walk(i, on_path):
        if i in memo:
            return memo[i]
        ends = []
        for j in block_successors(blocks, i):
            if j == start:
                ends.append((0, 0))
            elif j in members and j not in on_path:
                ends.append(walk(j, on_path | {j}))
        size = len(blocks[i].insns)
        memo[i] = (size + min(e[0] for e in ends), size + max(e[1] for e in ends)) if ends else (math.inf, -math.inf)
        return memo[i]

    fewest, most = walk(start, {start})
    return (fewest, most) if most >= 0 else (None, None)


def hot_loop(blocks, fma_wave=None):
    """(header, stats, other key loops' stats) of the loop with the most matrix instructions
    (fewest instructions among equals); (None, None, []) when no loop has any. With `fma_wave`
    (a target without matrix cores), the loop with the most dot/FMA MACs."""
    resources = scratch_resources(blocks)
    stats = {h: loop_stats(blocks, idx, fma_wave, resources) for h, idx in find_loops(blocks).items()}
    keyed = {h: s for h, s in stats.items() if s["matrix"]}
    if not keyed:
        return None, None, []
    weight = (lambda h: keyed[h]["macs"]) if fma_wave else (lambda h: sum(keyed[h]["matrix"].values()))
    best = min(keyed, key=lambda h: (-weight(h), keyed[h]["insns"], h))
    # Other key loops: the matrix loops that neither contain the hot loop nor lie inside it.
    hot_blocks = set(find_loops(blocks)[best])
    loops = find_loops(blocks)
    others = [keyed[h] for h in keyed if h != best and not (set(loops[h]) & hot_blocks)]
    keyed[best]["path_min"], keyed[best]["path_max"] = loop_paths(blocks, best, loops[best])
    return best, keyed[best], others


DESCRIPTOR_BLOCK = re.compile(r"^\s*\.amdhsa_kernel\s+(\S+)\s*$(.*?)^\s*\.end_amdhsa_kernel", re.M | re.S)


def descriptor_vgprs(asm, kernel):
    """The VGPRs the kernel descriptor of `kernel` asks for (`.amdhsa_next_free_vgpr` of its
    `.amdhsa_kernel` block, from which the assembler encodes COMPUTE_PGM_RSRC1's VGPR block count,
    what the hardware allocates), or None where the assembly has no descriptor block. LLVM raises
    it above the registers used (.vgpr_count) to hold a kernel to its `amdgpu-waves-per-eu`."""
    for block in DESCRIPTOR_BLOCK.finditer(asm):
        if kernel is None or block.group(1) == kernel:
            found = re.search(r"^\s*\.amdhsa_next_free_vgpr\s+(\d+)", block.group(2), re.M)
            return int(found.group(1)) if found else None
    return None


def kernel_metadata(asm, kernel=None):
    """The `.amdhsa.kernels` entry of `kernel` (the only one when None), plus LLVM's
    `; Occupancy:` comment (None when absent)."""
    start = asm.find(".amdgpu_metadata")
    end = asm.find(".end_amdgpu_metadata", start)
    if start < 0 or end < 0:
        raise ValueError("no .amdgpu_metadata block in the AMDGCN assembly")
    doc = parse_yaml_block(asm[start + len(".amdgpu_metadata"):end])
    entries = [k for k in (doc.get("amdhsa.kernels") or []) if kernel is None or k.get(".name") == kernel]
    if len(entries) != 1:
        raise ValueError(f"{len(entries)} metadata entries for kernel {kernel}")
    md = dict(entries[0])
    occupancy = re.search(r"^; Occupancy: (\d+)", asm, re.M)
    md["llvm_occupancy"] = int(occupancy.group(1)) if occupancy else None
    arch_vgprs = re.search(r"^; NumVgprs: (\d+)", asm, re.M)
    md["arch_vgprs"] = int(arch_vgprs.group(1)) if arch_vgprs else None
    md["descriptor_vgprs"] = descriptor_vgprs(asm, md.get(".name"))
    md["target"] = (doc.get("amdhsa.target") or "").rpartition("--")[2].split(":")[0]
    return md


# ---------------------------------------------------------------------------------------------
# TTGIR
# ---------------------------------------------------------------------------------------------

ENCODING = re.compile(r"#ttg\.(amd_wmma|amd_mfma)<\{([^}]*)\}>")


def dot_layouts(ttgir):
    """[(M, N, K, kind, warpsPerCTA, instrShape or None)] of every distinct tt.dot, in order."""
    aliases = {}
    for name, body in re.findall(r"^(#\w+) = (#ttg\.\w+<\{[^}]*\}>)", ttgir, re.M):
        aliases[name] = body
    out = []
    for line in ttgir.splitlines():
        if not re.search(r"\btt\.dot\b", line) or "->" not in line:
            continue
        head, _, result = line.partition("->")
        res = re.search(r"tensor<(\d+)x(\d+)x\w+,\s*(#[\w.]+(?:<\{[^}]*\}>)?)", result)
        lhs = re.search(r":\s*tensor<(\d+)x(\d+)x", head)
        if not res:
            continue
        encoding = aliases.get(res.group(3), res.group(3))
        enc = ENCODING.search(encoding)
        kind, warps, instr = "other", None, None
        if enc:
            kind = enc.group(1)[4:]
            w = re.search(r"warpsPerCTA = \[([\d, ]+)\]", enc.group(2))
            s = re.search(r"instrShape = \[([\d, ]+)\]", enc.group(2))
            warps = [int(x) for x in w.group(1).split(",")] if w else None
            instr = [int(x) for x in s.group(1).split(",")] if s else None
        entry = (int(res.group(1)), int(res.group(2)), int(lhs.group(2)) if lhs else None, kind,
                 tuple(warps) if warps else None, tuple(instr) if instr else None)
        if entry not in out:
            out.append(entry)
    return out


def format_dots(dots):
    parts = []
    for m, n, k, kind, warps, instr in dots:
        text = f"{m}x{n}x{k if k is not None else '?'} {kind}"
        if warps:
            text += "[" + ",".join(map(str, warps)) + "]"
        if instr:
            text += " " + "x".join(map(str, instr))
        parts.append(text)
    return "; ".join(parts) or "-"


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------

def analyze(source, target, kernel, family, block_m, block_n, block_d, threads, dynamic_lds, asm, ttgir):
    """One report row (a dict) from a kernel's assembly and TTGIR."""
    md = kernel_metadata(asm, kernel)
    arch = arch_facts(target)
    wave = int(md.get(".wavefront_size") or (arch or {}).get("wave") or 64)
    waves = max(1, threads // wave)
    vgprs, agprs, sgprs = int(md.get(".vgpr_count", 0)), int(md.get(".agpr_count", 0)), int(md.get(".sgpr_count", 0))
    lds = int(md.get(".group_segment_fixed_size", 0)) + dynamic_lds
    # What the hardware allocates: the descriptor's count (at least the registers used).
    allocated = max(vgprs, md["descriptor_vgprs"] or 0)
    row = {
        "source": source, "target": target, "family": family, "block_m": block_m, "block_n": block_n,
        "block_d": block_d, "warps": waves, "vgprs": vgprs, "agprs": agprs, "sgprs": sgprs,
        "arch_vgprs": md["arch_vgprs"], "sgpr_spills": int(md.get(".sgpr_spill_count", 0)), "vgpr_spills": int(md.get(".vgpr_spill_count", 0)),
        "scratch": int(md.get(".private_segment_fixed_size", 0)), "lds": lds,
        "llvm_occupancy": md["llvm_occupancy"], "has_agprs": ".agpr_count" in md,
        "descriptor_vgprs": md["descriptor_vgprs"], "allocated_vgprs": allocated,
        "waves_regs": waves_from_registers(arch, allocated, agprs, sgprs) if arch else None,
        "waves_static_lds": waves_from_lds(arch, lds - dynamic_lds, waves) if arch else None,
        "waves_lds": waves_from_lds(arch, lds, waves) if arch else None,
        "dots": dot_layouts(ttgir) if ttgir is not None else None,
        "matrix_cores": bool(arch is None or arch["matrix"]),
    }
    blocks = parse_blocks(asm, kernel)
    header, hot, others = hot_loop(blocks, None if row["matrix_cores"] else wave)
    row.update(hot_header=header, hot=hot,
               other_stores=sum(o["stores"] for o in others), other_loads=sum(o["loads"] for o in others))
    row["issued_useful"] = row["fma_issued_useful"] = row["insns_per_4096"] = None
    if hot and family == "fwd":
        useful = 2 * block_m * block_n * block_d
        row["issued_useful" if row["matrix_cores"] else "fma_issued_useful"] = hot["macs"] * waves / useful
        row["insns_per_4096"] = hot["insns"] * waves / (useful / 4096)
    return row


def read_tsv(path):
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    if not lines:
        return []
    header = lines[0].split("\t")
    rows = []
    for number, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise SystemExit(f"kernel_report: {path}:{number}: {len(fields)} fields, expected {len(header)}")
        rows.append(dict(zip(header, fields)))
    return rows


def read_text(path):
    with open(path) as f:
        return f.read()


def our_rows(directory, targets):
    """Report rows of every AMD code object in aot.py's manifest (of `targets` when given)."""
    manifest = os.path.join(directory, "manifest.tsv")
    if not os.path.isfile(manifest):
        raise SystemExit(f"kernel_report: no {manifest} (is {directory} an aot.py --out directory?)")
    rows, missing = [], []
    for entry in read_tsv(manifest):
        target = entry["target"]
        if not target.startswith("gfx") or (targets and target not in targets):
            continue
        stem = os.path.join(directory, os.path.splitext(entry["file"])[0])
        if not os.path.isfile(stem + ".amdgcn"):
            missing.append(stem + ".amdgcn")
            continue
        ttgir = read_text(stem + ".ttgir") if os.path.isfile(stem + ".ttgir") else None
        row = analyze(OURS, target, entry["kernel"], entry["family"], int(entry["block_m"]), int(entry["block_n"]),
                      int(entry["block_d"]), int(entry["threads"]), int(entry["shared"]),
                      read_text(stem + ".amdgcn"), ttgir)
        row.update(variant=entry["variant"], tile=entry["tile"], dtype=entry["dtype"],
                   even_d=entry["even_d"] == "1", paged=entry["paged"] == "1", extras=entry["extras"] == "1",
                   ptr32=entry.get("ptr32") == "1")
        rows.append(row)
    if missing:
        raise SystemExit(f"kernel_report: {len(missing)} code objects have no assembly beside them (first: "
                         f"{missing[0]}); compile with a kernels/aot.py that writes .amdgcn and .ttgir")
    return rows


# ---------------------------------------------------------------------------------------------
# AMD's kernel (optional, needs triton)
# ---------------------------------------------------------------------------------------------

# AMD's per-arch configs of its fwd_prefill (BLOCK_M, BLOCK_N, num_warps, waves_per_eu; one
# stage, PRE_LOAD_V off) and the head dims compiled for each.
REFERENCE_CONFIGS = {
    "gfx1100": (128, 64, 8, 6, (64, 128, 256)),
    # AMD's kernel has no config of the small-register RDNA 3 parts: its RDNA default.
    "gfx1103": (128, 32, 8, 6, (64, 128, 256)),
    "gfx1151": (128, 64, 8, 2, (64, 128, 256)),
    "gfx1201": (128, 32, 8, 6, (64, 128, 256)),
    "gfx1030": (128, 32, 8, 6, (64, 128, 256)),  # AMD's RDNA default (BLOCK_N 64 is gfx1100's only)
    "gfx942": (128, 64, 4, 2, (64, 128)),
}
# The batch-mode problem whose launch is reproduced: the kernel takes the sequence lengths and
# head counts as constexprs. bshd contiguous f16 tensors, well under 2 GiB.
REF_BATCH, REF_SEQLEN, REF_HEADS = 4, 4096, 32
# Both dtypes, each beside ours of the same dtype (bf16 costs more instructions than f16 on RDNA 3,
# which converts P to bf16 without an instruction for it).
REFERENCE_DTYPES = ("fp16", "bf16")


def _install_torch_stub():
    """aiter's modules import torch for annotations and host code only: a stand-in whose every
    attribute is a class is enough to import them without torch."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    import types

    class Anything(type):
        def __getattr__(cls, name):
            return Anything(name, (), {"__init__": lambda self, *a, **k: None})

    stub = types.ModuleType("torch")
    stub.__getattr__ = lambda name: Anything(name, (), {"__init__": lambda self, *a, **k: None})
    sys.modules["torch"] = stub


def _load_reference(path):
    """aiter's attn_fwd JITFunction, its module imported as a package of its own directory (its
    relative imports find the sibling modules there)."""
    import importlib
    import types

    # aiter reads these at import: autotuning off and a config given, so that importing it asks
    # no GPU for its arch (the configs used are passed to the compiler below).
    os.environ["FLASH_ATTENTION_TRITON_AMD_AUTOTUNE"] = "0"
    os.environ.setdefault("FLASH_ATTENTION_FWD_TRITON_AMD_CONFIG_JSON", '{"BLOCK_M": 128, "BLOCK_N": 64}')
    _install_torch_stub()
    package = types.ModuleType("_aiter_reference")
    package.__path__ = [os.path.dirname(os.path.abspath(path))]
    sys.modules["_aiter_reference"] = package
    module = importlib.import_module("_aiter_reference." + os.path.splitext(os.path.basename(path))[0])
    from triton.runtime.jit import JITFunction

    fn = module.attn_fwd
    while not isinstance(fn, JITFunction):
        fn = fn.fn  # triton.autotune's Autotuner wraps the JITFunction
    return fn


def reference_launch(d, causal, rdna, dtype="fp16"):
    """The arguments of aiter's launcher for a batch-mode f16 or bf16 forward without dropout,
    ALiBi, bias, fp8 or returned scores: ({name: value} of the runtime arguments, where a tensor
    is its pointer type, and {name: value} of the constexprs)."""
    s, h = REF_SEQLEN, REF_HEADS
    tensor = f"*{dtype}"
    runtime = {"Q": tensor, "K": tensor, "V": tensor, "bias": None, "Q_Descale": None, "K_Descale": None,
               "V_Descale": None, "stride_q_descale_z": None, "stride_k_descale_z": None,
               "stride_v_descale_z": None, "LSE": "*fp32", "Out": tensor, "SD_MASK": None, "ALIBI_SLOPES": None}
    # Contiguous bshd tensors: strides (batch, head, sequence, head dim) = (s*h*d, d, h*d, 1), named
    # by the kernel's parameters (V's sequence stride is its `k`, its head-dim stride its `n`).
    for prefix, names in (("q", "zhmk"), ("k", "zhnk"), ("v", "zhkn"), ("o", "zhmn")):
        runtime.update({f"stride_{prefix}{x}": v for x, v in zip(names, (s * h * d, d, h * d, 1))})
    runtime.update({f"stride_b{x}": 0 for x in "zhmn"})
    runtime.update(stride_az=0, stride_ah=0, **{f"stride_s{x}": 0 for x in "zhmn"})
    runtime.update(stride_lse_z=h * s, stride_lse_h=s, stride_lse_m=1, cu_seqlens_q=None, cu_seqlens_k=None,
                   seqused_q=None, seqused_k=None, dropout_p=0.0, philox_seed=0x1BF58, philox_offset_base=0x1D4B49)
    constexprs = dict(HQ=h, HK=h, ACTUAL_BLOCK_DMODEL_QK=d, ACTUAL_BLOCK_DMODEL_V=d, MAX_SEQLENS_Q=s,
                      MAX_SEQLENS_K=s, IS_VARLEN=False, SM_SCALE=d ** -0.5, IS_CAUSAL=causal,
                      USE_SLIDING_WINDOW=False, WINDOW_SIZE_LEFT=-1, WINDOW_SIZE_RIGHT=-1, BLOCK_DMODEL_QK=d,
                      BLOCK_DMODEL_V=d, PRE_LOAD_V=False, USE_BIAS=False, ENABLE_DROPOUT=False,
                      RETURN_SCORES=False, USE_ALIBI=False, USE_EXP2=True, IS_FP8=False, FP8_MAX=None,
                      FP8_P_DESCALE=False, USE_SEQUSED=False, FORCE_MASKING=rdna, NUM_XCD=1 if rdna else 8,
                      HEAD_STRIDE_ALIGNED_8=True)
    return runtime, constexprs


def compile_reference(job):
    """Compiles one reference kernel into out_dir; returns its manifest fields."""
    path, target, d, causal, dtype, out_dir = job
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    class Tensor:
        """What Triton's JIT asks of a tensor argument: 16-byte aligned, under 2 GiB."""
        def data_ptr(self):
            return 1 << 21

        def ptr_range(self):
            return REF_BATCH * REF_SEQLEN * REF_HEADS * d * 2

    fn = _load_reference(path)
    block_m, block_n, warps, waves_per_eu, _ = REFERENCE_CONFIGS[target]
    rdna = not target.startswith("gfx9")
    runtime, constexprs = reference_launch(d, causal, rdna, dtype)
    constexprs.update(BLOCK_M=block_m, BLOCK_N=block_n)
    sig, attrs, consts = {}, {}, {}
    for index, name in enumerate(fn.arg_names):
        if index in fn.constexprs:
            sig[name], consts[name] = "constexpr", constexprs[name]
            continue
        value = runtime[name]
        if isinstance(value, str):  # a tensor: the JIT's own specialization of it
            ty, spec = value, HIPBackend.get_tensor_specialization(Tensor(), align=True)
        else:
            ty, spec = native_specialize_impl(HIPBackend, value, False, True, True)
        sig[name] = ty
        if ty == "constexpr":
            consts[name] = spec
        elif isinstance(spec, str) and spec:
            attrs[(index,)] = HIPBackend.parse_attr(spec)
    wave = 32 if rdna else 64
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                            target=GPUTarget("hip", target, wave),
                            options={"num_warps": warps, "num_stages": 1, "waves_per_eu": waves_per_eu})
    name = f"attn_fwd_{dtype}_d{d}{'_causal' if causal else ''}"
    os.makedirs(os.path.join(out_dir, target), exist_ok=True)
    for ext, data in (("hsaco", kernel.asm["hsaco"]), ("amdgcn", kernel.asm["amdgcn"]), ("ttgir", kernel.asm["ttgir"])):
        with open(os.path.join(out_dir, target, f"{name}.{ext}"), "wb" if ext == "hsaco" else "w") as f:
            f.write(data)
    return {"target": target, "variant": name, "kernel": kernel.metadata.name, "block_m": block_m,
            "block_n": block_n, "block_d": d, "threads": warps * wave, "shared": kernel.metadata.shared,
            "causal": int(causal), "dtype": dtype, "waves_per_eu": waves_per_eu, "file": f"{target}/{name}.hsaco"}


def reference_rows(path, targets, out_dir, jobs):
    import multiprocessing

    for target in targets:
        if target not in REFERENCE_CONFIGS:
            raise SystemExit(f"kernel_report: no AMD config for {target} (have {', '.join(REFERENCE_CONFIGS)})")
    work = [(path, t, d, causal, dtype, out_dir) for t in targets for d in REFERENCE_CONFIGS[t][4]
            for causal in (False, True) for dtype in REFERENCE_DTYPES]
    with multiprocessing.get_context("spawn").Pool(max(1, jobs)) as pool:
        entries = sorted(pool.imap_unordered(compile_reference, work), key=lambda e: (e["target"], e["variant"]))
    rows = []
    for entry in entries:
        stem = os.path.join(out_dir, os.path.splitext(entry["file"])[0])
        row = analyze(AITER, entry["target"], entry["kernel"], "fwd", entry["block_m"], entry["block_n"],
                      entry["block_d"], entry["threads"], entry["shared"], read_text(stem + ".amdgcn"),
                      read_text(stem + ".ttgir"))
        row.update(variant=entry["variant"] + f" (waves_per_eu {entry['waves_per_eu']})", tile="prefill",
                   dtype=entry["dtype"], even_d=True, paged=False, extras=False, causal=bool(entry["causal"]))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_issued(row):
    """The issued/useful cell: the matrix work, or on a target without matrix cores the dot/FMA
    work beside "n/a"."""
    if not row.get("matrix_cores", True) and row.get("fma_issued_useful") is not None:
        return f"n/a (no matrix cores; FMA {row['fma_issued_useful']:.2f})"
    return fmt(row["issued_useful"])


COLUMNS = ["target", "kernel", "variant", "tile", "d", "VGPR", "SGPR", "spills", "loop st/ld (other)", "scratch",
           "LDS", "waves/SIMD regs / LDS (LLVM)", "hot loop: matrix", "hot loop: instr", "dots", "issued/useful",
           "instr/4096 MACs"]


def table_cells(row):
    vgpr = str(row["vgprs"])
    if row["has_agprs"] and row["target"].startswith("gfx9"):
        arch_vgprs = row["arch_vgprs"] if row["arch_vgprs"] is not None else row["vgprs"] - row["agprs"]
        vgpr = f"{arch_vgprs}+{row['agprs']}={row['vgprs']}"
    hot = row["hot"]
    matrix = "-"
    loop_spills = "-"
    if hot:
        matrix = ", ".join(f"{count} {m}" for m, count in sorted(hot["matrix"].items()))
        loop_spills = f"{hot['stores']}/{hot['loads']}"
        if row["other_stores"] or row["other_loads"]:
            loop_spills += f" ({row['other_stores']}/{row['other_loads']})"
    return [row["target"], row["source"], row["variant"], f"{row['block_m']}x{row['block_n']}, {row['warps']}",
            str(row["block_d"]), vgpr, f"{row['sgprs']}" + (f" ({row['sgpr_spills']})" if row["sgpr_spills"] else ""),
            str(row["vgpr_spills"]), loop_spills, str(row["scratch"]), str(row["lds"]),
            f"{row['waves_regs'] if row['waves_regs'] is not None else '?'} / "
            f"{row['waves_lds'] if row['waves_lds'] is not None else '?'} ({row['llvm_occupancy'] or '?'})",
            matrix, str(hot["insns"]) if hot else "-", format_dots(row["dots"]) if row["dots"] is not None else "?",
            fmt_issued(row), fmt(row["insns_per_4096"], 1)]


def sort_key(row):
    order = {"prefill": 0, "decode": 1, "merge": 2}
    return (row["target"], row["source"] != OURS, order.get(row["tile"], 3), row["block_d"], row["variant"])


def loop_spills(row):
    return bool(row["hot"] and (row["hot"]["stores"] or row["hot"]["loads"]))


def comparison(rows):
    """Ours (prefill, flat, EVEN_D, no extras) beside AMD's (non-causal, causal) per target and d."""
    ours = {(r["target"], r["block_d"], r["dtype"]): r for r in rows if r["source"] == OURS and r["tile"] == "prefill"
            and r["even_d"] and not r["paged"] and not r["extras"] and not r.get("ptr32")}
    amd = {(r["target"], r["block_d"], r["dtype"], r.get("causal")): r for r in rows if r["source"] == AITER}
    if not amd:
        return []
    lines = ["| target, d | ours: tile, warps | ours: issued/useful | ours: instr/4096 | ours: waves regs/LDS | "
             "ours: key-loop scratch st/ld | AMD: tile, warps | AMD: issued/useful | "
             "AMD: instr/4096 (non-causal / causal) | AMD: waves regs/LDS | AMD: key-loop scratch st/ld |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    scratch = lambda row: f"{row['hot']['stores']}/{row['hot']['loads']}" if row["hot"] else "-"
    for (target, d, dtype), r in sorted(ours.items()):
        a, c = amd.get((target, d, dtype, False)), amd.get((target, d, dtype, True))
        if not a:
            continue
        lines.append(f"| {target}, {d} ({dtype}) | {r['block_m']}x{r['block_n']}, {r['warps']} | {fmt_issued(r)} | "
                     f"{fmt(r['insns_per_4096'], 1)} | {r['waves_regs']}/{r['waves_lds']} | {scratch(r)} | "
                     f"{a['block_m']}x{a['block_n']}, {a['warps']} | {fmt_issued(a)} | "
                     f"{fmt(a['insns_per_4096'], 1)} / {fmt(c['insns_per_4096'], 1) if c else '-'} | "
                     f"{a['waves_regs']}/{a['waves_lds']} | {scratch(a)} |")
    return lines


def twins(rows):
    """Each `_b32` twin (32-bit buffer addressing) beside its 64-bit variant."""
    ours = {(r["target"], r["variant"]): r for r in rows if r["source"] == OURS and r["family"] == "fwd" and r["hot"]}
    lines = []
    for (target, name), b in sorted(ours.items(), key=lambda kv: sort_key(kv[1])):
        a = ours.get((target, name[:-len("_b32")])) if b.get("ptr32") else None
        if not a:
            continue
        vg = lambda r: f"{r['arch_vgprs']}+{r['agprs']}" if r["has_agprs"] else str(r["vgprs"])
        loads = lambda r: f"{r['hot']['global_loads']}/{r['hot']['buffer_loads']}"
        lines.append(f"| {target} | {a['variant']} | {fmt(a['insns_per_4096'], 1)} → {fmt(b['insns_per_4096'], 1)} | "
                     f"{loads(a)} → {loads(b)} | {vg(a)} → {vg(b)} | {a['sgprs']} → {b['sgprs']} | "
                     f"{a['waves_regs']} → {b['waves_regs']} | {a['vgpr_spills']} ({a['hot']['stores']}/{a['hot']['loads']}) → "
                     f"{b['vgpr_spills']} ({b['hot']['stores']}/{b['hot']['loads']}) |")
    if not lines:
        return []
    return ["| target | variant | instr/4096, 64-bit → `_b32` | hot-loop global/buffer loads | VGPR | SGPR | "
            "waves/SIMD (regs) | spills (hot loop st/ld) |", "|---|---|---|---|---|---|---|---|"] + lines


def markdown(rows, directory):
    lines = [f"# Static kernel report: {os.path.abspath(directory)}", "",
             "Generated by scripts/kernel_report.py (definitions in its docstring). Per code object: tile "
             "(BLOCK_M x BLOCK_N, warps), head-dim tile d, VGPRs (gfx9: arch+acc=total), SGPRs (spilled), VGPR "
             "spills, scratch stores/loads in the hot key loop (in the other key loops), scratch bytes, LDS "
             "bytes per work-group, waves per SIMD from registers / from LDS (LLVM's own figure), the hot "
             "loop's matrix instructions and instruction count per wave, the warp layout of each tt.dot "
             "(MxNxK kind[warpsPerCTA]), issued/useful matrix work and instructions per 4096 useful MACs.", ""]
    compare = comparison(rows)
    if compare:
        lines += ["## Ours beside AMD's kernel (prefill, flat K/V, EVEN_D, no extras)", ""] + compare + [""]
    pairs = twins(rows)
    if pairs:
        lines += ["## 32-bit buffer addressing (`_b32` twins beside their 64-bit variants)", ""] + pairs + [""]
    lines += ["## Every code object", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in sorted(rows, key=sort_key):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in table_cells(row)) + " |")
    return "\n".join(lines) + "\n"


def summaries(rows):
    out = []
    groups = collections.OrderedDict()
    for row in sorted(rows, key=sort_key):
        groups.setdefault((row["target"], row["source"]), []).append(row)
    for (target, source), group in groups.items():
        fwd = [r for r in group if r["family"] == "fwd"]
        rated = [r for r in fwd if r["issued_useful"] is not None]
        worst = max(rated, key=lambda r: r["issued_useful"], default=None)
        fma_rated = [r for r in fwd if r.get("fma_issued_useful") is not None]
        fma_worst = max(fma_rated, key=lambda r: r["fma_issued_useful"], default=None)
        spilling = [r["variant"] for r in fwd if loop_spills(r)]
        waves = [min(r["waves_regs"], r["waves_lds"]) for r in fwd if r["waves_regs"] is not None]
        least = min(fwd, key=lambda r: min(r["waves_regs"], r["waves_lds"]), default=None) if waves else None
        line = f"{target} ({source}): {len(group)} kernels ({len(fwd)} fwd)"
        if worst:
            line += f"; worst issued/useful {worst['issued_useful']:.2f} ({worst['variant']})"
        if fma_worst:
            line += (f"; no matrix cores, worst dot/FMA issued/useful {fma_worst['fma_issued_useful']:.2f} "
                     f"({fma_worst['variant']})")
        if spilling:
            line += (f"; {len(spilling)} spill{'s' if len(spilling) == 1 else ''} in the key loop "
                     f"({', '.join(spilling[:4])}{', ...' if len(spilling) > 4 else ''})")
        else:
            line += "; no spills in the key loop"
        if least:
            line += (f"; min waves/SIMD {min(waves)} ({least['variant']}: {least['waves_regs']} from registers, "
                     f"{least['waves_lds']} from LDS)")
        out.append(line)
    return out


def occupancy_disagrees(row):
    """Whether the waves per SIMD from the descriptor's registers and the static LDS differ from
    LLVM's `; Occupancy:` (which knows no dynamic LDS): the register model is then wrong."""
    if row["llvm_occupancy"] is None or row["waves_regs"] is None:
        return False
    return min(row["waves_regs"], row["waves_static_lds"]) != row["llvm_occupancy"]


def check(rows):
    """Problems --check reports: repeated matrix work, key-loop spills at d <= 128, or waves per
    SIMD from the descriptor that LLVM's remark contradicts."""
    problems = []
    for row in sorted(rows, key=sort_key):
        if row["source"] != OURS or row["family"] != "fwd":
            continue
        where = f"{row['target']} {row['variant']}"
        if row["hot"] is None:
            what = "matrix" if row.get("matrix_cores", True) else "dot/FMA"
            problems.append(f"{where}: no loop with {what} instructions found")
            continue
        if row.get("fma_issued_useful") is not None and row["fma_issued_useful"] > FMA_REPEAT_LIMIT:
            problems.append(f"{where}: issued/useful dot/FMA work {row['fma_issued_useful']:.2f} > {FMA_REPEAT_LIMIT} "
                            f"(tile {row['block_m']}x{row['block_n']}, {row['warps']} warps: repeated products)")
        if row["issued_useful"] is not None and row["issued_useful"] > 1.0 + 1e-9:
            problems.append(f"{where}: issued/useful matrix work {row['issued_useful']:.2f} > 1.00 "
                            f"(tile {row['block_m']}x{row['block_n']}, {row['warps']} warps, dots {format_dots(row['dots'])})")
        if occupancy_disagrees(row):
            problems.append(f"{where}: {row['waves_regs']} waves/SIMD from {row['allocated_vgprs']} VGPRs "
                            f"(static LDS: {row['waves_static_lds']}), LLVM's `; Occupancy:` {row['llvm_occupancy']}")
        if row["block_d"] <= 128 and loop_spills(row):
            problems.append(f"{where}: {row['hot']['stores']} scratch stores and {row['hot']['loads']} loads in the "
                            f"key loop (head-dim tile {row['block_d']})")
        if row["block_d"] <= 128 and (row["other_stores"] or row["other_loads"]):
            problems.append(f"{where}: {row['other_stores']} scratch stores and {row['other_loads']} loads in its "
                            f"other key loops (the masked ones; head-dim tile {row['block_d']})")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="aot.py's --out directory")
    parser.add_argument("--out", help="markdown table (default DIR/kernel_report.md)")
    parser.add_argument("--targets", default="", help="only these AMD targets (default: every one in the manifest)")
    parser.add_argument("--check", action="store_true", help="exit 1 on repeated matrix work or key-loop spills")
    parser.add_argument("--reference", metavar="FWD_PREFILL_PY", help="aiter's fwd_prefill.py (needs triton)")
    parser.add_argument("--reference-targets", default=",".join(REFERENCE_CONFIGS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel reference compiles")
    args = parser.parse_args()

    targets = [t for t in args.targets.split(",") if t]
    rows = our_rows(args.dir, targets)
    if args.reference:
        ref_targets = [t for t in args.reference_targets.split(",") if t]
        rows += reference_rows(args.reference, ref_targets, os.path.join(args.dir, REFERENCE_DIR), args.jobs)
    if not rows:
        raise SystemExit(f"kernel_report: no AMD code objects in {args.dir}/manifest.tsv")
    out = args.out or os.path.join(args.dir, "kernel_report.md")
    with open(out, "w") as f:
        f.write(markdown(rows, args.dir))
    for line in summaries(rows):
        print(line)
    print(f"kernel_report: {len(rows)} kernels, table in {out}")
    if args.check:
        problems = check(rows)
        if problems:
            print(f"kernel_report: check FAILED, {len(problems)} problems:", *problems, sep="\n  ")
            sys.exit(1)
        print("kernel_report: check OK (no repeated matrix work, no key-loop spills at d <= 128)")


if __name__ == "__main__":
    main()
