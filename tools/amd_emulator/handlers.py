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
# (family, mnemonic) -> predicate on the instruction word: the handler applies only where true
# (elsewhere the emulator's own instruction runs).
APPLIES = {}
# Handlers that also take the wave's raw buffers and the arch (to run the emulator's own code).
NEEDS_BUFFERS = set()
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
        self.sgpr_addr = sgpr

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


# mnemonic -> (M = N, operand conversion) of the dense MFMAs we run. 16x16x16 only with A or B in
# AccVGPRs (ACC bits 60:59): there the emulator reads the VGPRs of the same numbers; with both in
# VGPRs its own layout is right (checks.py mfma_f32_16x16x16_f16), so ours takes only the
# AccVGPR forms (LLVM's at our d = 512 tile on gfx942).
CDNA_MFMA_DENSE = {
    "V_MFMA_F32_32X32X8_F16": (32, f16_to_f32), "V_MFMA_F32_32X32X8_BF16": (32, bf16_to_f32),
    "V_MFMA_F32_32X32X8BF16_1K": (32, bf16_to_f32), "V_MFMA_F32_16X16X16_F16": (16, f16_to_f32),
    "V_MFMA_F32_16X16X16_BF16": (16, bf16_to_f32), "V_MFMA_F32_16X16X16BF16_1K": (16, bf16_to_f32),
}
for _name, (_m, _to_f32) in CDNA_MFMA_DENSE.items():
    HANDLERS[("cdna", _name)] = (lambda m, to_f32: lambda wave, word, size: _mfma_dense(wave, word, size, m, to_f32))(_m, _to_f32)
    if _m == 16:
        APPLIES[("cdna", _name)] = lambda word: bits(word, 60, 59) != 0


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


def swizzle_source_lane(lane, offset):
    """The lane DS_SWIZZLE_B32 reads for `lane` (GCN3/Vega/MI300 ISA, DS_SWIZZLE_B32): offset[15]
    set: QDMode, lane (lane & ~3) | offset[2k+1:2k] with k = lane % 4; clear: BitMode within 32
    lanes, ((lane & and_mask) | or_mask) ^ xor_mask with the masks offset[4:0], [9:5], [14:10]."""
    if offset >= 0xE000:
        raise NotImplementedError(f"ds_swizzle_b32 offset {offset:#x}: FFT/rotate modes are not implemented")
    if offset & 0x8000:
        return (lane & ~3) | (offset >> (2 * (lane % 4)) & 3)
    and_mask, or_mask, xor_mask = offset & 0x1F, offset >> 5 & 0x1F, offset >> 10 & 0x1F
    return (lane & ~0x1F) | ((((lane & 0x1F) & and_mask) | or_mask) ^ xor_mask)


@handler("cdna", "DS_SWIZZLE_B32")
def ds_swizzle_b32(wave, word, size):
    """MI300 ISA DS_SWIZZLE_B32 (DS: offset 15:0, addr 39:32 is the data VGPR, vdst 63:56): each
    active lane gets VGPR[swizzle_source_lane(lane, offset)][data]; the emulator cannot parse
    this instruction's pseudocode. The source lane is read whatever its EXEC bit (the guide
    states no rule for inactive sources; our kernels swizzle with every lane active)."""
    offset, data0, vdst = bits(word, 15, 0), bits(word, 39, 32), bits(word, 63, 56)
    data = wave.vgpr[data0].copy()
    out = np.array([data[swizzle_source_lane(lane, offset)] for lane in range(wave.wave_size)], np.uint32)
    write_lanes(wave, vdst, out)
    wave.advance(size)


# ---------------------------------------------------------------------------------------------
# LDS accesses with AccVGPR data (MI300 ISA "LDS instructions", DS encoding: offset0 7:0,
# offset1 15:8, gds 16, op 24:17, acc 25, addr 39:32, data0 47:40, data1 55:48, vdst 63:56).
# With ACC = 1 the data and destination registers are AccVGPRs: LLVM writes tiles from AGPRs to
# LDS and loads dot operands into AGPRs when the VGPRs run out (our d = 512 tile on gfx942). The
# emulator takes them from, and writes them to, the VGPRs of the same numbers.
# ---------------------------------------------------------------------------------------------

# mnemonic -> (load?, dwords per address, two addresses?)
CDNA_DS_ACC_OPS = {
    "DS_WRITE_B32": (False, 1, False), "DS_WRITE_B64": (False, 2, False), "DS_WRITE_B96": (False, 3, False),
    "DS_WRITE_B128": (False, 4, False), "DS_WRITE2_B32": (False, 1, True), "DS_WRITE2_B64": (False, 2, True),
    "DS_READ_B32": (True, 1, False), "DS_READ_B64": (True, 2, False), "DS_READ_B96": (True, 3, False),
    "DS_READ_B128": (True, 4, False), "DS_READ2_B32": (True, 1, True), "DS_READ2_B64": (True, 2, True),
}


def cdna_ds_acc(name):
    load, dwords, two = CDNA_DS_ACC_OPS[name]

    def run(wave, word, size):
        """`name` with ACC = 1: addresses VGPR[ADDR] + OFFSET (16 bits), or for the 2-address
        forms + OFFSET0 and + OFFSET1 times the access size; the data of DATA0 (and DATA1) or
        into VDST, each of `dwords` AccVGPRs from that number on. An access past the
        work-group's LDS reads 0 and writes nothing (the guide: out-of-range LDS)."""
        offset0, offset1, addr = bits(word, 7, 0), bits(word, 15, 8), bits(word, 39, 32)
        data0, data1, vdst = bits(word, 47, 40), bits(word, 55, 48), bits(word, 63, 56)
        step = 4 * dwords
        offsets = [offset0 * step, offset1 * step] if two else [offset0 | offset1 << 8]
        sources = [data0, data1]
        lds = _u32_view(wave.lds_addr, launch_facts["lds_bytes"] // 4) if launch_facts["lds_bytes"] else None
        for lane in wave.active_lanes():
            for n, offset in enumerate(offsets):
                at = (int(wave.vgpr[addr, lane]) + offset) & 0xFFFFFFFF
                if at % 4:
                    raise NotImplementedError(f"{name} with ACC = 1 at LDS byte {at}: unaligned, not modelled")
                inside = lds is not None and at + step <= launch_facts["lds_bytes"]
                if load:
                    regs = slice(vdst + n * dwords, vdst + (n + 1) * dwords)
                    wave.acc[regs, lane] = lds[at // 4:at // 4 + dwords] if inside else 0
                elif inside:
                    lds[at // 4:at // 4 + dwords] = wave.acc[sources[n]:sources[n] + dwords, lane]
        wave.advance(size)
    return run


for _name in CDNA_DS_ACC_OPS:
    HANDLERS[("cdna", _name)] = cdna_ds_acc(_name)
    APPLIES[("cdna", _name)] = lambda word: bits(word, 25, 25) == 1


# ---------------------------------------------------------------------------------------------
# Scratch (private) memory, per lane of each wave (MI300 ISA "Scratch instructions", RDNA3 ISA
# "Scratch instructions"): address = (SVE ? VGPR[addr] : 0) + (saddr enabled ? SGPR[saddr] :
# 0) + signed offset, a byte offset in the lane's own private segment of
# private_segment_fixed_size bytes. The emulator gives every wave of a work-group the same
# scratch memory, so waves that spill overwrite each other; here each wave (told apart by its
# SGPR file, which the emulator allocates per wave) has its own.
# Fields: CDNA offset 12:0, SVE 13, op 24:18, addr 39:32, data 47:40, saddr 54:48 (0x7F: none),
# vdst 63:56; RDNA3 offset 12:0, op 24:18, addr 39:32, data 47:40, saddr 54:48 (NULL 0x7C: none),
# SVE 55, vdst 63:56; RDNA4 (96-bit) saddr 6:0, op 21:14, vdst 39:32, SVE 49, data 62:55,
# addr 71:64, offset 95:72 (signed).
# ---------------------------------------------------------------------------------------------

SCRATCH_LOADS = {20: 1, 21: 2, 22: 3, 23: 4}                  # op -> dwords, both families
SCRATCH_STORES = {"cdna": {28: 1, 29: 2, 30: 3, 31: 4}, "rdna3": {26: 1, 27: 2, 28: 3, 29: 4},
                  "rdna4": {26: 1, 27: 2, 28: 3, 29: 4}}
_private = {}  # SGPR file address -> [lane][byte] private memory of that wave


def forget_private_memory():
    """Drops every wave's private memory (at each launch: scratch starts undefined)."""
    _private.clear()


def private_memory(wave):
    memory = _private.get(wave.sgpr_addr)
    size = launch_facts.get("private_bytes", 0)
    if memory is None or memory.shape != (wave.wave_size, size):
        memory = _private[wave.sgpr_addr] = np.zeros((wave.wave_size, size), np.uint8)
    return memory


def decode_scratch(arch, word):
    """(op, addr VGPR, data VGPR, saddr, vdst, SVE, signed offset) of a scratch instruction."""
    if arch == "rdna4":
        offset = bits(word, 95, 72)
        return (bits(word, 21, 14), bits(word, 71, 64), bits(word, 62, 55), bits(word, 6, 0), bits(word, 39, 32),
                bits(word, 49, 49), offset - (1 << 24) if offset >> 23 else offset)
    return (bits(word, 24, 18), bits(word, 39, 32), bits(word, 47, 40), bits(word, 54, 48), bits(word, 63, 56),
            bits(word, 13, 13) if arch == "cdna" else bits(word, 55, 55),
            bits(word, 12, 0) - (1 << 13 if bits(word, 12, 12) else 0))


def scratch_access(wave, arch, word, size):
    op, addr, data, saddr, vdst, sve, offset = decode_scratch(arch, word)
    no_saddr = 0x7F if arch == "cdna" else NULL_SGPR
    base = (wave.scalar(saddr) if saddr != no_saddr else 0) + offset
    memory = private_memory(wave)
    # CDNA's ACC bit (55): the data or destination registers are AccVGPRs (LLVM spills AGPRs).
    regs = wave.acc if arch == "cdna" and bits(word, 55, 55) else wave.vgpr
    store = SCRATCH_STORES[arch].get(op)
    dwords = store or SCRATCH_LOADS[op]
    for lane in wave.active_lanes():
        at = (base + (int(wave.vgpr[addr, lane]) if sve else 0)) & 0xFFFFFFFF
        if at + 4 * dwords > memory.shape[1]:
            raise IndexError(f"scratch access at {at} + {4 * dwords} past the {memory.shape[1]}-byte private segment")
        cell = memory[lane, at:at + 4 * dwords].view(np.uint32)
        if store:
            cell[:] = regs[data:data + dwords, lane]
        else:
            regs[vdst:vdst + dwords, lane] = cell
    wave.advance(size)


for _arch, _names in (("cdna", ("DWORD", "DWORDX2", "DWORDX3", "DWORDX4")), ("rdna3", ("B32", "B64", "B96", "B128")),
                      ("rdna4", ("B32", "B64", "B96", "B128"))):
    for _kind in ("LOAD", "STORE"):
        for _name in _names:
            HANDLERS[(_arch, f"SCRATCH_{_kind}_{_name}")] = (lambda a: lambda wave, word, size: scratch_access(wave, a, word, size))(_arch)


# ---------------------------------------------------------------------------------------------
# DPP (MI300 ISA "Data Parallel Processing (DPP)", RDNA3 ISA "DPP16"): VOP1/VOP2 with src0 =
# 0xFA and a second dword: src0 VGPR 39:32, dpp_ctrl 48:40, RDNA's fetch-inactive 50 (an
# inactive source lane is read, not treated as missing), bound_ctrl 51, src0_neg 52, src0_abs 53,
# src1_neg 54, src1_abs 55, bank_mask 59:56, row_mask 63:60. A lane writes only if its row
# (lane / 16) is in row_mask and its bank ((lane / 4) % 4) in bank_mask; its source lane comes
# from dpp_ctrl; a source lane that does not exist or is not in EXEC gives 0 when bound_ctrl is
# set, else the lane is not written. All source values are read before any lane is written.
# ---------------------------------------------------------------------------------------------

def dpp_source_lane(lane, ctrl, wave_size=64):
    """Source lane of `lane` under dpp_ctrl `ctrl`, or None where there is none."""
    row, pos = lane & ~15, lane & 15
    if ctrl <= 0xFF:                                          # quad_perm
        return (lane & ~3) | (ctrl >> (2 * (lane & 3)) & 3)
    shift = ctrl & 15
    if 0x101 <= ctrl <= 0x10F:                                # row_shl
        return row + pos + shift if pos + shift < 16 else None
    if 0x111 <= ctrl <= 0x11F:                                # row_shr
        return row + pos - shift if pos >= shift else None
    if 0x121 <= ctrl <= 0x12F:                                # row_ror
        return row + (pos - shift) % 16
    if 0x150 <= ctrl <= 0x15F:                                # row_share (RDNA)
        return row + shift
    if 0x160 <= ctrl <= 0x16F:                                # row_xmask (RDNA)
        return row + (pos ^ shift)
    special = {0x130: lambda: lane + 1 if lane + 1 < wave_size else None,    # wave_shl:1
               0x134: lambda: (lane + 1) % wave_size,                        # wave_rol:1
               0x138: lambda: lane - 1 if lane > 0 else None,                # wave_shr:1
               0x13C: lambda: (lane - 1) % wave_size,                        # wave_ror:1
               0x140: lambda: row + 15 - pos,                                # row_mirror
               0x141: lambda: row + (pos & 8) + 7 - (pos & 7),               # row_half_mirror
               0x142: lambda: row - 1 if row > 0 else None,                  # row_bcast:15
               0x143: lambda: 31 if lane >= 32 else None}                    # row_bcast:31
    if ctrl not in special:
        raise NotImplementedError(f"dpp_ctrl {ctrl:#x}")
    return special[ctrl]()


def _float_mods(values, neg, absolute):
    f = values.view(np.float32).copy()
    if absolute:
        f = np.abs(f)
    if neg:
        f = -f
    return f


DPP_OPS = {"V_MOV_B32_E32": lambda a, b: a,
           "V_ADD_U32_E32": lambda a, b: (a.astype(np.uint64) + b) & 0xFFFFFFFF,
           "V_ADD_F32_E32": None}  # float: handled with the source modifiers below


def dpp_op(name):
    def run(wave, word, size):
        vop2 = name != "V_MOV_B32_E32"
        vdst, vsrc1 = bits(word, 24, 17), bits(word, 16, 9)
        src0, ctrl, bound = bits(word, 39, 32), bits(word, 48, 40), bits(word, 51, 51)
        fetch_inactive = wave.wave_size == 32 and bits(word, 50, 50)  # RDNA DPP16's FI bit
        bank_mask, row_mask = bits(word, 59, 56), bits(word, 63, 60)
        exec_mask, n = wave.exec_mask, wave.wave_size
        data = wave.vgpr[src0].copy()
        s1 = wave.vgpr[vsrc1].copy() if vop2 else None
        out = wave.vgpr[vdst].copy()
        for lane in range(n):
            if not (exec_mask >> lane & 1 and row_mask >> (lane // 16) & 1 and bank_mask >> (lane // 4 % 4) & 1):
                continue
            source = dpp_source_lane(lane, ctrl, n)
            if source is None or not (exec_mask >> source & 1 or fetch_inactive):
                if not bound:
                    continue
                a = np.uint32(0)
            else:
                a = data[source]
            if name == "V_ADD_F32_E32":
                x = _float_mods(np.array([a], np.uint32), bits(word, 52, 52), bits(word, 53, 53))
                y = _float_mods(s1[lane:lane + 1], bits(word, 54, 54), bits(word, 55, 55))
                out[lane] = (x + y).view(np.uint32)[0]
            else:
                out[lane] = DPP_OPS[name](np.array([a], np.uint32), s1[lane:lane + 1] if vop2 else None)[0]
        wave.vgpr[vdst] = out
        wave.advance(size)
    return run


for _name in DPP_OPS:
    for _arch in ("cdna", "rdna3", "rdna4"):
        HANDLERS[(_arch, _name + "@DPP")] = dpp_op(_name)


def cdna_mubuf_lanes(wave, word, width):
    """(lane, host address or None) for each lane in EXEC of a CDNA MUBUF access of `width` bytes
    (MI300 ISA MUBUF: offset 11:0, offen 12, idxen 13, op 24:18, vaddr 39:32, vdata 47:40, srsrc
    52:48, soffset 63:56): None where the access lies out of range, i.e. any byte at or past
    num_records of the buffer offset (raw V#, stride 0), or an index at or past it (stride > 0)."""
    vaddr, rsrc = bits(word, 39, 32), 4 * bits(word, 52, 48)
    offen, idxen, inst_offset, soffset = bits(word, 12, 12), bits(word, 13, 13), bits(word, 11, 0), bits(word, 63, 56)
    v = [int(x) for x in wave.sgpr[rsrc:rsrc + 4]]
    base, stride, num_records = v[0] | (v[1] & 0xFFFF) << 32, (v[1] >> 16) & 0x3FFF, v[2]
    soff = wave.scalar(soffset)
    for lane in wave.active_lanes():
        index = int(wave.vgpr[vaddr, lane]) if idxen else 0
        offset = ((int(wave.vgpr[vaddr + idxen, lane]) if offen else 0) + inst_offset) & 0xFFFFFFFF
        out_of_range = stride == 0 and offset + width > num_records or stride and index >= num_records
        yield lane, None if out_of_range else base + soff + offset + stride * index


@handler("cdna", "BUFFER_STORE_SHORT", "BUFFER_STORE_BYTE")
def cdna_buffer_store_narrow(wave, word, size):
    """MI300 ISA BUFFER_STORE_SHORT / _BYTE: `MEM[ADDR].b16 = VDATA[15:0]` (b8: [7:0]): only 2
    (1) bytes; the emulator writes a whole dword. Out-of-range lanes store nothing."""
    width = 2 if bits(word, 24, 18) == CDNA_BUFFER_STORE_SHORT else 1
    vdata = bits(word, 47, 40)
    for lane, address in cdna_mubuf_lanes(wave, word, width):
        if address is not None:
            ctypes.memmove(address, int(wave.vgpr[vdata, lane]).to_bytes(4, "little")[:width], width)
    wave.advance(size)


CDNA_BUFFER_STORE_SHORT = 26  # MI300 MUBUF opcode (BUFFER_STORE_BYTE: 24)


@handler("cdna", "BUFFER_LOAD_UBYTE", "BUFFER_LOAD_SBYTE", "BUFFER_LOAD_USHORT", "BUFFER_LOAD_SSHORT")
def cdna_buffer_load_narrow(wave, word, size):
    """MI300 ISA BUFFER_LOAD_UBYTE / _SBYTE / _USHORT / _SSHORT: `VDATA.u32 = 32'U(MEM[ADDR].u8)`
    (i8 / u16 / i16 sign- or zero-extended); the emulator loads a whole dword. Out-of-range
    lanes load 0."""
    width, signed = CDNA_NARROW_LOADS[bits(word, 24, 18)]
    vdata = bits(word, 47, 40)
    for lane, address in cdna_mubuf_lanes(wave, word, width):
        raw = ctypes.string_at(address, width) if address is not None else bytes(width)
        wave.vgpr[vdata, lane] = int.from_bytes(raw, "little", signed=signed) & 0xFFFFFFFF
    wave.advance(size)


# MI300 MUBUF opcodes of the narrow loads: (bytes, sign-extended).
CDNA_NARROW_LOADS = {16: (1, False), 17: (1, True), 18: (2, False), 19: (2, True)}
for _name in ("BUFFER_LOAD_UBYTE", "BUFFER_LOAD_SBYTE", "BUFFER_LOAD_USHORT", "BUFFER_LOAD_SSHORT"):
    APPLIES[("cdna", _name)] = lambda word: bits(word, 16, 16) == 0  # into VGPRs, not LDS


@handler("cdna", "BUFFER_LOAD_DWORD")
def cdna_buffer_load_dword_to_lds(wave, word, size):
    """MI300 ISA MUBUF BUFFER_LOAD_DWORD with LDS = 1 (bit 16; fields as in `cdna_mubuf_lanes`):
    the dword goes to LDS instead of VGPRs, at M0 (SGPR 124) + TID * 4 for each lane in EXEC; a
    lane whose buffer offset lies at or past num_records (raw V#) loads 0. Only lanes in EXEC
    that are in range read memory: the emulator reads every lane's address, and an out-of-range
    or inactive lane's substituted address 0 faults the process (CK's async K/V loads, which
    rely on the 0 for their padded tiles). The instruction offset must be 0 here (CK's loads):
    its part in the LDS address is not modelled."""
    inst_offset, idxen = bits(word, 11, 0), bits(word, 13, 13)
    if inst_offset or idxen:
        raise NotImplementedError(f"buffer_load_dword lds with offset {inst_offset}, idxen {idxen}: not modelled")
    lds_base = int(wave.sgpr[CDNA_M0]) & 0x3FFFF
    for lane, address in cdna_mubuf_lanes(wave, word, 4):
        value = ctypes.c_uint32.from_address(address).value if address is not None else 0
        at = lds_base + 4 * lane
        if at + 4 > launch_facts["lds_bytes"]:
            raise IndexError(f"buffer_load_dword lds: LDS byte {at} past the work-group's {launch_facts['lds_bytes']}")
        ctypes.c_uint32.from_address(wave.lds_addr + at).value = value
    wave.advance(size)


APPLIES[("cdna", "BUFFER_LOAD_DWORD")] = lambda word: bits(word, 16, 16) == 1
CDNA_M0 = 124  # M0's SGPR index in the CDNA operand encoding


def run_patched(wave, patched_word, size, bufs, arch):
    """Runs the emulator's own compiled instruction for `patched_word` (the instruction at PC with
    some fields changed), then continues after the original. The emulator's compiled
    instructions read their fields from the code at PC, so the patched copy runs from a buffer
    of its own."""
    from test.mockgpu.amd import emu
    patched = patched_word.to_bytes(size, "little") + bytes(8)
    ctypes.memmove(_patched_code, patched, len(patched))
    pc = int(wave.sgpr[PC_LO]) | int(wave.sgpr[PC_HI]) << 32
    wave.sgpr[PC_LO], wave.sgpr[PC_HI] = ctypes.addressof(_patched_code) & 0xFFFFFFFF, ctypes.addressof(_patched_code) >> 32
    prg, runtime = emu._get_runner(patched, arch)
    runtime.fxn(*[bufs[g] for g in prg.arg.globals])
    wave.sgpr[PC_LO], wave.sgpr[PC_HI] = pc & 0xFFFFFFFF, pc >> 32
    wave.advance(size)


def cdna_flat_ignores_saddr(wave, word, size, bufs, arch):
    """MI300 ISA FLAT instructions (SEG = 0, bits 15:14; fields offset 11:0, addr 39:32, data
    47:40, saddr 54:48, vdst 63:56): the address is the 64-bit VGPR pair plus the offset; SADDR
    serves the GLOBAL and SCRATCH segments only. LLVM encodes FLAT with SADDR = 0, which the
    emulator takes as s[0:1] + a 32-bit VGPR offset (the guard kernel's flat loads then read
    the kernarg pointer plus garbage). Runs the emulator's own instruction with SADDR = 0x7F
    (off), which is what the field means for FLAT."""
    run_patched(wave, (word & ~(0x7F << 48)) | (0x7F << 48), size, bufs, arch)


CDNA_FLAT_NAMES = ["FLAT_LOAD_DWORD", "FLAT_LOAD_DWORDX2", "FLAT_LOAD_DWORDX3", "FLAT_LOAD_DWORDX4", "FLAT_LOAD_UBYTE",
                   "FLAT_LOAD_USHORT", "FLAT_STORE_DWORD", "FLAT_STORE_DWORDX2", "FLAT_STORE_DWORDX3", "FLAT_STORE_DWORDX4",
                   "FLAT_STORE_BYTE", "FLAT_STORE_SHORT", "FLAT_ATOMIC_OR", "FLAT_ATOMIC_ADD", "FLAT_ATOMIC_OR_X2"]
for _name in CDNA_FLAT_NAMES:
    HANDLERS[("cdna", _name)] = cdna_flat_ignores_saddr
    # FLAT segment (bits 15:14 = 0) with a SADDR other than "off": GLOBAL shares the mnemonics' opcodes.
    APPLIES[("cdna", _name)] = lambda word: bits(word, 15, 14) == 0 and bits(word, 54, 48) != 0x7F
    NEEDS_BUFFERS.add(("cdna", _name))


@handler("cdna", "S_GETPC_B64")
def cdna_s_getpc_b64(wave, word, size):
    """MI300 ISA S_GETPC_B64 (SOP1: sdst 22:16): `D0.i64 = PC + 4`, the address of the next
    instruction (the emulator has no PC variable in its pseudocode: not compiled). CK reads
    constants of its code object PC-relative."""
    pc = (int(wave.sgpr[PC_LO]) | int(wave.sgpr[PC_HI]) << 32) + 4
    sdst = bits(word, 22, 16)
    wave.sgpr[sdst], wave.sgpr[sdst + 1] = pc & 0xFFFFFFFF, pc >> 32
    wave.advance(size)


@handler("cdna", "S_SETREG_IMM32_B32")
def cdna_s_setreg_imm32_b32(wave, word, size):
    """MI300 ISA S_SETREG_IMM32_B32 (SOPK + literal; simm16 15:0 = hwreg id 5:0, offset 10:6,
    size - 1 15:11): writes bits of a hardware register. The emulator models none of them (its
    pseudocode has no WAVE_STATUS / MODE variables: not compiled). Only HW_REG_MODE (id 1) is
    accepted, and the write has no effect: the emulator's arithmetic has fixed denormal and
    rounding behaviour whatever MODE says (CK sets MODE's FP32 denormal bits 5:4)."""
    hwreg = bits(word, 5, 0)
    if hwreg != 1:
        raise NotImplementedError(f"s_setreg_imm32_b32 of hardware register {hwreg}: not modelled")
    wave.advance(size)


@handler("rdna3", "S_SETPRIO")
def rdna3_s_setprio(wave, word, size):
    """RDNA3 ISA S_SETPRIO (SOPP, simm16 1:0): sets the wave's priority for instruction issue
    among the SIMD's waves, which changes no register or memory value (the emulator cannot
    compile it for RDNA3: "Failed to compile s_setprio"; its RDNA4 one runs). rocBLAS's Tensile
    kernels raise it around their loads."""
    wave.advance(size)


# ---------------------------------------------------------------------------------------------
# RDNA4 WMMA with an inline-constant accumulator (RDNA4 ISA, WMMA: "SRC2 may be an inline
# constant", every element of C is then that constant). The emulator reads VGPRs at the
# constant's index instead. We run the emulator's own instruction with C taken from eight VGPRs
# that hold the constant (v248-v255, saved and restored around it, unless D is written there):
# the same computation the ISA defines. VOP3P fields: vdst 7:0, src0 40:32, src1 49:41,
# src2 58:50.
# ---------------------------------------------------------------------------------------------

WMMA_C_REGS = 248  # eight VGPRs the accumulator constant is staged in
_patched_code = ctypes.create_string_buffer(32)


def wmma_inline_accumulator(wave, word, size, bufs, arch):
    vdst, src2 = bits(word, 7, 0), bits(word, 58, 50)
    staged = slice(WMMA_C_REGS, WMMA_C_REGS + 8)
    saved = wave.vgpr[staged].copy()
    wave.vgpr[staged] = wave.scalar(src2)  # the inline constant's 32-bit value, in every element
    run_patched(wave, (word & ~(0x1FF << 50)) | (256 + WMMA_C_REGS) << 50, size, bufs, arch)
    written = set(range(vdst, vdst + 8))
    for k, reg in enumerate(range(WMMA_C_REGS, WMMA_C_REGS + 8)):
        if reg not in written:
            wave.vgpr[reg] = saved[k]


def wmma_applies(word):
    """Only WMMA whose accumulator is not a VGPR (src2 < 256) needs the correction."""
    return bits(word, 58, 50) < 256


for _name in ("V_WMMA_F32_16X16X16_F16", "V_WMMA_F32_16X16X16_BF16"):
    HANDLERS[("rdna4", _name)] = wmma_inline_accumulator
    APPLIES[("rdna4", _name)] = wmma_applies
    NEEDS_BUFFERS.add(("rdna4", _name))


# ---------------------------------------------------------------------------------------------
# RDNA3 MUBUF / RDNA4 VBUFFER loads and stores (RDNA3 ISA "Buffer instructions", RDNA4 ISA
# "Buffer instructions"; the emulator decodes neither). Address = base + soffset + offset +
# stride * index, offset = (offen ? VGPR[vaddr + idxen] : 0) + instruction offset, index =
# idxen ? VGPR[vaddr] : 0. V#: base [47:0], stride [61:48], num_records [95:64], OOB_SELECT
# [125:124]. Out of range (loads return 0, stores are dropped): OOB_SELECT 3 (raw, what Triton
# sets): any byte of the access at or past num_records of the buffer offset (soffset excluded);
# 2: never; 0/1 (structured): index >= num_records (0 also: offset >= stride).
# ---------------------------------------------------------------------------------------------

# op -> (bytes, kind): kind "load" (whole dwords), "u16" (zero-extended), "d16"/"d16_hi" (one
# half of the VGPR, the other kept), "store", "store_hi" (the high half).
BUFFER_OPS = {18: (2, "u16"), 20: (4, "load"), 21: (8, "load"), 22: (12, "load"), 23: (16, "load"),
              24: (1, "store"), 25: (2, "store"), 26: (4, "store"), 27: (8, "store"), 28: (12, "store"),
              29: (16, "store"), 32: (2, "d16"), 35: (2, "d16_hi"), 37: (2, "store_hi")}
BUFFER_NAMES = {18: "BUFFER_LOAD_U16", 20: "BUFFER_LOAD_B32", 21: "BUFFER_LOAD_B64", 22: "BUFFER_LOAD_B96",
                23: "BUFFER_LOAD_B128", 24: "BUFFER_STORE_B8", 25: "BUFFER_STORE_B16", 26: "BUFFER_STORE_B32",
                27: "BUFFER_STORE_B64", 28: "BUFFER_STORE_B96", 29: "BUFFER_STORE_B128",
                32: "BUFFER_LOAD_D16_B16", 35: "BUFFER_LOAD_D16_HI_B16", 37: "BUFFER_STORE_D16_HI_B16"}
CACHE_INVALIDATES = {43: "BUFFER_GL0_INV", 44: "BUFFER_GL1_INV"}
NULL_SGPR = 124  # RDNA's NULL operand: reads 0


def decode_buffer(arch, word):
    """(op, vdata, vaddr, first SGPR of the V#, soffset operand, offset, offen, idxen)."""
    if arch == "rdna3":
        return (bits(word, 25, 18), bits(word, 47, 40), bits(word, 39, 32), 4 * bits(word, 52, 48),
                bits(word, 63, 56), bits(word, 11, 0), bits(word, 54, 54), bits(word, 55, 55))
    offset = bits(word, 95, 72)
    return (bits(word, 21, 14), bits(word, 39, 32), bits(word, 71, 64), bits(word, 49, 41),
            bits(word, 6, 0), offset - (1 << 24) if offset >> 23 else offset, bits(word, 62, 62), bits(word, 63, 63))


def buffer_access(wave, arch, word, size):
    op, vdata, vaddr, rsrc, soffset, inst_offset, offen, idxen = decode_buffer(arch, word)
    width, kind = BUFFER_OPS[op]
    v = [int(x) for x in wave.sgpr[rsrc:rsrc + 4]]
    base, stride, num_records, oob_select = v[0] | (v[1] & 0xFFFF) << 32, (v[1] >> 16) & 0x3FFF, v[2], (v[3] >> 28) & 3
    soff = 0 if soffset == NULL_SGPR else wave.scalar(soffset)
    for lane in wave.active_lanes():
        index = int(wave.vgpr[vaddr, lane]) if idxen else 0
        offset = ((int(wave.vgpr[vaddr + idxen, lane]) if offen else 0) + inst_offset) & 0xFFFFFFFF
        if oob_select == 3:
            out = offset + width > num_records
        elif oob_select == 2:
            out = False
        else:
            out = index >= num_records or (oob_select == 0 and stride and offset >= stride)
        address = base + soff + offset + stride * index
        if kind.startswith("store"):
            if out:
                continue
            data = b"".join(struct.pack("<I", int(wave.vgpr[vdata + k, lane])) for k in range((width + 3) // 4))
            if kind == "store_hi":
                data = data[2:4]
            ctypes.memmove(address, data[:width], width)
            continue
        raw = bytes(width) if out else ctypes.string_at(address, width)
        if kind == "load":
            for k in range(width // 4):
                wave.vgpr[vdata + k, lane] = struct.unpack_from("<I", raw, 4 * k)[0]
        else:
            half = struct.unpack("<H", raw)[0]
            old = int(wave.vgpr[vdata, lane])
            wave.vgpr[vdata, lane] = {"u16": half, "d16": (old & 0xFFFF0000) | half,
                                      "d16_hi": (old & 0xFFFF) | half << 16}[kind]
    wave.advance(size)


def cache_invalidate(wave, word, size):
    """Invalidates a cache level; the emulator has no caches, so nothing but the PC changes."""
    wave.advance(size)


for _arch in ("rdna3", "rdna4"):
    for _name in BUFFER_NAMES.values():
        HANDLERS[(_arch, _name)] = (lambda a: lambda wave, word, size: buffer_access(wave, a, word, size))(_arch)
for _name in CACHE_INVALIDATES.values():
    HANDLERS[("rdna3", _name)] = cache_invalidate
HANDLERS[("rdna4", "GLOBAL_INV")] = cache_invalidate


def _lds_read_u16(wave, address):
    if address + 2 > launch_facts["lds_bytes"]:
        return 0  # out-of-range LDS reads return 0
    return ctypes.c_uint16.from_address(wave.lds_addr + address).value


@handler("rdna3", "DS_LOAD_U16_D16", "DS_LOAD_U16_D16_HI")
@handler("rdna4", "DS_LOAD_U16_D16", "DS_LOAD_U16_D16_HI")
def ds_load_u16_d16(wave, word, size):
    """RDNA3/RDNA4 ISA DS_LOAD_U16_D16: `RETURN_DATA[15:0].u16 = MEM[ADDR].u16`, bits 31:16
    preserved; _HI: `RETURN_DATA[31:16].u16 = MEM[ADDR].u16`, bits 15:0 preserved. DS fields:
    offset0 7:0, offset1 15:8, op 25:18, addr 39:32, vdst 63:56; ADDR = VGPR[addr] + offset."""
    high = bits(word, 25, 18) == DS_LOAD_U16_D16_HI_OP
    offset, addr, vdst = bits(word, 15, 0), bits(word, 39, 32), bits(word, 63, 56)
    for lane in wave.active_lanes():
        value = _lds_read_u16(wave, (int(wave.vgpr[addr, lane]) + offset) & 0xFFFFFFFF)
        old = int(wave.vgpr[vdst, lane])
        wave.vgpr[vdst, lane] = (old & 0xFFFF) | value << 16 if high else (old & 0xFFFF0000) | value
    wave.advance(size)


DS_LOAD_U16_D16_HI_OP = 167  # RDNA3 and RDNA4 opcode of DS_LOAD_U16_D16_HI (DS_LOAD_U16_D16: 166)


# op -> dwords of the RDNA3/RDNA4 DS loads of whole dwords (same opcodes in both families).
DS_LOAD_DWORDS = {54: 1, 118: 2, 254: 3, 255: 4}


@handler("rdna3", "DS_LOAD_B32", "DS_LOAD_B64", "DS_LOAD_B96", "DS_LOAD_B128")
@handler("rdna4", "DS_LOAD_B32", "DS_LOAD_B64", "DS_LOAD_B96", "DS_LOAD_B128")
def ds_load_dwords(wave, word, size):
    """RDNA3/RDNA4 ISA DS_LOAD_B32 (B64, B96, B128): `RETURN_DATA[32n-1:0] = MEM[ADDR]` for the
    lanes in EXEC; a lane not in EXEC neither reads LDS nor has its VGPRs written (the emulator
    reads LDS at every lane's address, so an inactive lane holding a stale value faults the
    process). ADDR = VGPR[addr] + {offset1, offset0}; a dword at or past the LDS size reads 0.
    DS fields: offset0 7:0, offset1 15:8, op 25:18, addr 39:32, vdst 63:56."""
    dwords = DS_LOAD_DWORDS[bits(word, 25, 18)]
    offset, addr, vdst = bits(word, 15, 0), bits(word, 39, 32), bits(word, 63, 56)
    lanes = np.array(wave.active_lanes(), np.int64)
    if lanes.size:
        lds = np.ctypeslib.as_array((ctypes.c_uint8 * max(launch_facts["lds_bytes"], 1)).from_address(wave.lds_addr))
        at = (wave.vgpr[addr, lanes].astype(np.int64) + offset) & 0xFFFFFFFF
        for i in range(dwords):
            where = at + 4 * i
            inside = where + 4 <= launch_facts["lds_bytes"]
            got = np.zeros((lanes.size, 4), np.uint8)
            got[inside] = lds[where[inside, None] + np.arange(4)]
            wave.vgpr[vdst + i, lanes] = got.view(np.uint32)[:, 0]
    wave.advance(size)


@handler("rdna3", "V_PERMLANEX16_B32")
@handler("rdna4", "V_PERMLANEX16_B32")
def permlanex16_b32(wave, word, size):
    """RDNA3/RDNA4 ISA V_PERMLANEX16_B32 (VOP3: vdst 7:0, src0 40:32, src1 49:41, src2 58:50; a
    32-bit literal follows when a source is 255): lanesel = {S2, S1}; lane 16 * row + i of each
    row takes tmp[16 * altrow + lanesel[4i+3:4i]], altrow = row ^ 1, tmp = S0 of every lane as
    before the instruction; written where EXEC."""
    literal = (word >> 64) & 0xFFFFFFFF if size == 12 else None
    vdst, src0 = bits(word, 7, 0), bits(word, 40, 32)
    s1 = int(read_src(wave, bits(word, 49, 41), literal)[0])
    s2 = int(read_src(wave, bits(word, 58, 50), literal)[0])
    lanesel = s1 | s2 << 32
    tmp = read_src(wave, src0, literal)
    out = tmp.copy()
    for lane in range(wave.wave_size):
        row, i = lane // 16, lane % 16
        out[lane] = tmp[16 * (row ^ 1) + (lanesel >> (4 * i) & 0xF)]
    write_lanes(wave, vdst, out)
    wave.advance(size)


class _Program:
    """What run_asm reads of a compiled program: which of its buffers the function takes."""

    class arg:
        globals = [0, 1, 2, 3, 4, 5]


class _Runtime:
    def __init__(self, fxn):
        self.fxn = fxn


def buffer_instruction(raw, arch):
    """(name, size) of an RDNA3 MUBUF / RDNA4 VBUFFER instruction (which the emulator does not
    decode) in the bytes `raw`, else None."""
    first = int.from_bytes(raw[:4], "little")
    buffer_encoding = {"rdna3": (0b111000, 8), "rdna4": (0b110001, 12)}.get(arch)
    if not buffer_encoding or first >> 26 != buffer_encoding[0]:
        return None
    size = buffer_encoding[1]
    op = bits(int.from_bytes(raw[:size], "little"), 25, 18) if arch == "rdna3" else bits(first, 21, 14)
    return BUFFER_NAMES.get(op) or CACHE_INVALIDATES.get(op) or f"buffer op {op}", size


def runner_for(pc, arch):
    """The emulator's (program, runtime) pair for the instruction at `pc` when we handle it."""
    from tinygrad.renderer.amd import decode_inst
    raw = ctypes.string_at(pc, 16)
    buffer = buffer_instruction(raw, arch)
    if buffer:
        name, size = buffer
        if (arch, name) not in HANDLERS:
            raise NotImplementedError(f"{arch} {name}: neither the emulator nor our handlers implement it")
        inst = None
    else:
        inst = decode_inst(raw, arch)
        name = inst.op.name if hasattr(inst, "op") and hasattr(inst.op, "name") else None
        if type(inst).__name__.endswith("_DPP16"):
            name = f"{name}@DPP"
    fn = HANDLERS.get((arch, name))
    if fn is None or (enabled is not None and name not in enabled):
        return None
    size = inst.size() if inst is not None else size
    word = int.from_bytes(raw[:size], "little")
    if (arch, name) in APPLIES and not APPLIES[(arch, name)](word):
        return None
    wave_size = 64 if arch == "cdna" else 32
    if (arch, name) in NEEDS_BUFFERS:
        return (_Program(), _Runtime(lambda *bufs: fn(Wave(bufs, wave_size), word, size, bufs, arch))), inst
    return (_Program(), _Runtime(lambda *bufs: fn(Wave(bufs, wave_size), word, size))), inst
