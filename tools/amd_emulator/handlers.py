"""Instructions we implement for the emulator, in plain Python from AMD's ISA documentation
(RDNA3 ISA reference guide, RDNA4 ISA reference guide, AMD Instinct MI300 (CDNA3) ISA reference
guide; sections named beside each handler). Each reads its fields from the instruction's bits as
the guide lays them out, and works on one wave's register files: the buffers the emulator's own
compiled instructions use (SGPRs with PC at 256/257, VGPRs as [register][lane], AccVGPRs on CDNA,
LDS; memory addresses are host addresses). checks.py runs each on a hand-assembled program.

`HANDLERS[(family, mnemonic)]` -> function(wave, word, size); registered by corrections.py.
"""

import ctypes
import struct

import numpy as np

PC_LO, PC_HI = 256, 257          # where the emulator keeps the program counter
EXEC_LO = 126                    # exec_lo is SGPR 126 in every family's operand encoding
ENDPGM_PC = 0xFFFFFFFFFFFFFFFF

HANDLERS = {}
# The mnemonics to handle (None: all of HANDLERS); checks.py narrows it to compare with the
# emulator as it is.
enabled = None
# Launch facts a handler needs that the register files do not hold (set by the driver).
launch_facts = {"lds_bytes": 0}


def handler(family, *mnemonics):
    def register(fn):
        for m in mnemonics:
            HANDLERS[(family, m)] = fn
        return fn
    return register


def bits(word, hi, lo):
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def _u32_view(addr, count):
    return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(addr))


class Wave:
    """One wave's state as the emulator holds it: `sgpr` (260 words), `vgpr[reg][lane]`,
    `acc[reg][lane]` (CDNA AccVGPRs), `lds` (bytes)."""

    def __init__(self, bufs, wave_size):
        sgpr, vgpr, _vmem, lds, _scratch, acc = (b.value if hasattr(b, "value") else b for b in bufs)
        self.wave_size = wave_size
        self.sgpr = _u32_view(sgpr, 260)
        self.vgpr = _u32_view(vgpr, 256 * wave_size).reshape(256, wave_size)
        self.acc = _u32_view(acc, 256 * wave_size).reshape(256, wave_size)
        self.lds_addr = lds

    @property
    def exec_mask(self):
        lo = int(self.sgpr[EXEC_LO])
        return lo | (int(self.sgpr[EXEC_LO + 1]) << 32) if self.wave_size == 64 else lo

    def active_lanes(self):
        mask = self.exec_mask
        return [lane for lane in range(self.wave_size) if mask >> lane & 1]

    def advance(self, size):
        pc = (int(self.sgpr[PC_LO]) | int(self.sgpr[PC_HI]) << 32) + size
        self.sgpr[PC_LO], self.sgpr[PC_HI] = pc & 0xFFFFFFFF, pc >> 32

    def scalar(self, operand):
        """A 32-bit scalar source operand (SGPR, or inline constant as the emulator stores it)."""
        return int(self.sgpr[operand])


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def bf16_to_f32(halves):
    return (np.asarray(halves, dtype=np.uint32) << 16).view(np.float32)


def f16_to_f32(halves):
    return np.asarray(halves, dtype=np.uint16).view(np.float16).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# CDNA3 MFMA, dense f16/bf16 (MI300 ISA, "Matrix fused-multiply-add instructions" and the
# operand layouts of its "Dependency / register layout" tables): D = A x B + C for M x N x K with
# 4 K-values per lane in two VGPRs. 32x32x8: A[i][k] in lane i + 32*(k // 4), element k % 4;
# B[k][j] in lane j + 32*(k // 4), element k % 4; D[i][j] in lane j + 32*((i // 4) % 2),
# register (i % 4) + 4*(i // 8). 16x16x16: A[i][k] in lane i + 16*(k // 4); B likewise;
# D[i][j] in lane j + 16*(i // 4), register i % 4.
# VOP3P-MFMA fields: vdst 7:0, cbsz 10:8, abid 14:11, acc_cd 15, op 22:16, src0 40:32,
# src1 49:41, src2 58:50, acc 60:59 (A, B from AccVGPRs), blgp 63:61.
# ---------------------------------------------------------------------------------------------

def _mfma_operand(wave, src, from_acc, count):
    """`count` consecutive registers of a 9-bit source operand, as [register][lane] u32."""
    if src < 256:
        raise NotImplementedError(f"MFMA source operand {src} is not a VGPR")
    regs = wave.acc if from_acc else wave.vgpr
    return regs[src - 256:src - 256 + count].copy()


def _mfma_dense(wave, word, size, m, to_f32):
    vdst, cbsz, abid, acc_cd = bits(word, 7, 0), bits(word, 10, 8), bits(word, 14, 11), bits(word, 15, 15)
    src0, src1, src2, acc, blgp = bits(word, 40, 32), bits(word, 49, 41), bits(word, 58, 50), bits(word, 60, 59), bits(word, 63, 61)
    if cbsz or abid or blgp:
        raise NotImplementedError("MFMA broadcast controls (cbsz/abid/blgp) are not implemented")
    groups = wave.wave_size // m           # lane groups: 2 for 32x32, 4 for 16x16
    k = 4 * groups
    out_regs = m * m // wave.wave_size
    a_raw, b_raw = _mfma_operand(wave, src0, acc & 1, 2), _mfma_operand(wave, src1, acc & 2, 2)

    def unpack(raw):  # -> [lane][4] f32
        halves = np.stack([raw[0] & 0xFFFF, raw[0] >> 16, raw[1] & 0xFFFF, raw[1] >> 16], axis=1)
        return to_f32(halves).reshape(wave.wave_size, 4)

    a_lanes, b_lanes = unpack(a_raw), unpack(b_raw)
    a = np.zeros((m, k), np.float32)
    b = np.zeros((k, m), np.float32)
    for g in range(groups):
        a[:, 4 * g:4 * g + 4] = a_lanes[m * g:m * (g + 1)]
        b[4 * g:4 * g + 4, :] = b_lanes[m * g:m * (g + 1)].T
    dst = wave.acc if acc_cd else wave.vgpr
    if src2 >= 256:
        c_raw = (wave.acc if acc_cd else wave.vgpr)[src2 - 256:src2 - 256 + out_regs].copy()
    else:
        c_raw = np.full((out_regs, wave.wave_size), wave.scalar(src2), np.uint32)
    c = c_raw.view(np.float32)
    d = np.zeros_like(c)
    prod = a.astype(np.float64) @ b.astype(np.float64)
    for lane in range(wave.wave_size):
        j, lane_group = lane % m, lane // m
        for r in range(out_regs):
            i = (r % 4) + 4 * lane_group + (4 * groups) * (r // 4) if m == 32 else (r % 4) + 4 * lane_group
            d[r, lane] = np.float32(prod[i, j] + c[r, lane])
    # MFMA writes every lane regardless of EXEC (the guide: matrix ops ignore the exec mask).
    dst[vdst:vdst + out_regs] = d.view(np.uint32)
    wave.advance(size)


@handler("cdna", "V_MFMA_F32_32X32X8_F16")
def mfma_f32_32x32x8_f16(wave, word, size):
    _mfma_dense(wave, word, size, 32, f16_to_f32)


@handler("cdna", "V_MFMA_F32_32X32X8_BF16", "V_MFMA_F32_32X32X8BF16_1K")
def mfma_f32_32x32x8_bf16(wave, word, size):
    _mfma_dense(wave, word, size, 32, bf16_to_f32)


# ---------------------------------------------------------------------------------------------
# Source operands of VOP encodings (all three guides): 0-255 SGPR / special / inline constant
# (the emulator keeps their values at the same SGPR index), 255 = 32-bit literal after the
# instruction word, 256-511 = VGPR n - 256.
# ---------------------------------------------------------------------------------------------

def read_src(wave, src, literal=None):
    """A 32-bit source operand for every lane, as u32."""
    if src >= 256:
        return wave.vgpr[src - 256].copy()
    value = literal if src == 255 else wave.scalar(src)
    return np.full(wave.wave_size, value, np.uint32)


def write_lanes(wave, reg, values, lanes=None):
    lanes = wave.active_lanes() if lanes is None else lanes
    wave.vgpr[reg, lanes] = np.asarray(values, np.uint32)[lanes]


@handler("cdna", "V_CVT_F16_F32_E32")
def cvt_f16_f32_e32(wave, word, size):
    """MI300 ISA V_CVT_F16_F32 (VOP1: src0 8:0, vdst 24:17): `D0.f16 = f32_to_f16(S0.f32)`,
    round to nearest even; only D0[15:0] is written. On CDNA every vdst is a whole VGPR: the
    RDNA rule that a 16-bit operand at v128+ names the high half of v(n - 128) does not exist."""
    literal = (word >> 32) & 0xFFFFFFFF if size == 8 else None
    src = read_src(wave, bits(word, 8, 0), literal).view(np.float32)
    vdst = bits(word, 24, 17)
    half = src.astype(np.float16).view(np.uint16).astype(np.uint32)
    write_lanes(wave, vdst, (wave.vgpr[vdst] & 0xFFFF0000) | half)
    wave.advance(size)


@handler("cdna", "DS_BPERMUTE_B32")
def ds_bpermute_b32(wave, word, size):
    """MI300 ISA DS_BPERMUTE_B32 (DS: offset 15:0, addr 39:32, data0 47:40, vdst 63:56): for
    every lane i, src_lane = (VGPR[i][ADDR] + OFFSET) / 4 % 64 (high-order bits ignored); the
    value is VGPR[src_lane][DATA0] if EXEC[src_lane], else 0; written where EXEC[i]."""
    offset, addr, data0, vdst = bits(word, 15, 0), bits(word, 39, 32), bits(word, 47, 40), bits(word, 63, 56)
    exec_mask, n = wave.exec_mask, wave.wave_size
    src_lanes = ((wave.vgpr[addr].astype(np.uint64) + offset) // 4 % n).astype(np.int64)
    data = wave.vgpr[data0].copy()
    out = np.array([data[j] if exec_mask >> int(j) & 1 else 0 for j in src_lanes], np.uint32)
    write_lanes(wave, vdst, out)
    wave.advance(size)


def nop_cache_invalidates(module):
    pass


class _Program:
    """What run_asm reads of a compiled program: which of its buffers the function takes."""

    class arg:
        globals = [0, 1, 2, 3, 4, 5]


class _Runtime:
    def __init__(self, fxn):
        self.fxn = fxn


def runner_for(pc, arch):
    """The emulator's (program, runtime) pair for the instruction at `pc` when we handle it."""
    from tinygrad.renderer.amd import decode_inst
    raw = ctypes.string_at(pc, 16)
    inst = decode_inst(raw, arch)
    name = inst.op.name if hasattr(inst, "op") and hasattr(inst.op, "name") else None
    fn = HANDLERS.get((arch, name))
    if fn is None or (enabled is not None and name not in enabled):
        return None
    size = inst.size()
    word = int.from_bytes(raw[:size], "little")
    wave_size = 64 if arch == "cdna" else 32
    return (_Program(), _Runtime(lambda *bufs: fn(Wave(bufs, wave_size), word, size))), inst
