"""Instruction-level checks of our emulator corrections: each runs a hand-assembled program
(programs.py) whose expected values come from AMD's ISA documentation (the layout or rule quoted
beside it), once on the emulator as it is and once with our handler. A check passes when our
handler gives the documented values; the report also says whether the emulator alone did.

    FLASH_ATTN_ROCM_TINYGRAD=/path/to/tinygrad python3 tools/amd_emulator/checks.py
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.environ.get("FLASH_ATTN_ROCM_TINYGRAD", "")]

import programs  # noqa: E402

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def halves_to_words(lo, hi):
    return (np.asarray(lo, np.uint32) & 0xFFFF) | (np.asarray(hi, np.uint32) << 16)


def mfma_operands(a, b, m, dtype="f16"):
    """The two VGPRs of A and of B for a dense f16 (or bf16) MFMA with M = N = `m` (MI300 ISA):
    lane i + m * g holds A[i][4g..4g+3] and B[4g..4g+3][i], two halves per VGPR, low half first.
    bf16 halves are the top 16 bits of the f32 values (exact for the small integers used here)."""
    if dtype == "bf16":
        bits = lambda x: np.asarray(x, np.float32).view(np.uint32) >> 16
    else:
        bits = lambda x: np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)
    a_regs, b_regs = np.zeros((2, 64), np.uint32), np.zeros((2, 64), np.uint32)
    for lane in range(64):
        ks = range(4 * (lane // m), 4 * (lane // m) + 4)
        av, bv = [a[lane % m, k] for k in ks], [b[k, lane % m] for k in ks]
        a_regs[:, lane] = halves_to_words(bits(av[0::2]), bits(av[1::2]))
        b_regs[:, lane] = halves_to_words(bits(bv[0::2]), bits(bv[1::2]))
    return a_regs, b_regs


@check
def mfma_f32_32x32x8_f16():
    """MI300 ISA, dense MFMA 32x32x8: A[i][k] is element k % 4 of lane i + 32 * (k // 4), B[k][j]
    of lane j + 32 * (k // 4) (two f16 per VGPR, low half first); D[i][j] is register
    (i % 4) + 4 * (i // 8) of lane j + 32 * ((i // 4) % 2). C = inline 0."""
    ins = programs.isa("cdna")
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (32, 8)).astype(np.float16)   # small integers: exact in f16 and f32
    b = rng.integers(-4, 5, (8, 32)).astype(np.float16)
    a_regs, b_regs = mfma_operands(a, b, 32)
    d = a.astype(np.float32) @ b.astype(np.float32)
    expected = np.zeros((16, 64), np.float32)
    for lane in range(64):
        for r in range(16):
            expected[r, lane] = d[(r % 4) + 8 * (r // 4) + 4 * (lane // 32), lane % 32]
    body = [ins.v_mfma_f32_32x32x8_f16(ins.v[20:35], ins.v[2:3], ins.v[4:5], 0)]
    inputs = {2: a_regs[0], 3: a_regs[1], 4: b_regs[0], 5: b_regs[1]}
    return dict(arch="cdna", body=body, inputs=inputs, outputs=list(range(20, 32)), expected=expected[:12].view(np.uint32),
                names=["V_MFMA_F32_32X32X8_F16"])


@check
def mfma_f32_16x16x16_f16():
    """MI300 ISA, dense MFMA 16x16x16 (CK's f16 GEMM tile): A[i][k] is element k % 4 of lane
    i + 16 * (k // 4), B[k][j] of lane j + 16 * (k // 4); D[i][j] is register i % 4 of lane
    j + 16 * (i // 4). C = inline 0. No handler of ours: this checks the emulator's own."""
    ins = programs.isa("cdna")
    rng = np.random.default_rng(2)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    a_regs, b_regs = mfma_operands(a, b, 16)
    d = a.astype(np.float32) @ b.astype(np.float32)
    expected = np.array([[d[r + 4 * (lane // 16), lane % 16] for lane in range(64)] for r in range(4)], np.float32)
    body = [ins.v_mfma_f32_16x16x16_f16(ins.v[20:23], ins.v[2:3], ins.v[4:5], 0)]
    inputs = {2: a_regs[0], 3: a_regs[1], 4: b_regs[0], 5: b_regs[1]}
    return dict(arch="cdna", body=body, inputs=inputs, outputs=[20, 21, 22, 23], expected=expected.view(np.uint32),
                names=["V_MFMA_F32_16X16X16_F16"])



def _mfma_16x16x16_b_from_accvgprs(opcode, dtype, name):
    """A 16x16x16 MFMA whose B operand is in AccVGPRs (ACC bit 60): B is copied from v[4:5] to
    a[4:5] and v[4:5] zeroed, then `v_mfma_f32_16x16x16_<dtype> v[20:23], v[2:3], a[4:5], 0`
    (gfx942 encoding, llvm-mc 21: the VOP3P-MAI word with `opcode`). Layout as in
    mfma_f32_16x16x16_f16."""
    rng = np.random.default_rng(4)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float32)   # small integers: exact in f16, bf16, f32
    b = rng.integers(-4, 5, (16, 16)).astype(np.float32)
    a_regs, b_regs = mfma_operands(a, b, 16, dtype)
    d = a @ b
    expected = np.array([[d[r + 4 * (lane // 16), lane % 16] for lane in range(64)] for r in range(4)], np.float32)
    body = [bytes.fromhex(h) for h in ("0440d9d304010018", "0540d9d305010018",   # v_accvgpr_write a4, v4; a5, v5
                                       "8002087e", "80020a7e",                    # v_mov_b32 v4, 0; v5, 0
                                       f"1400{opcode}d302090212", "070080bf")]    # the MFMA; s_nop 7
    inputs = {2: a_regs[0], 3: a_regs[1], 4: b_regs[0], 5: b_regs[1]}
    return dict(arch="cdna", body=body, inputs=inputs, outputs=[20, 21, 22, 23], expected=expected.view(np.uint32),
                names=[name])


@check
def cdna_mfma_16x16x16_f16_b_from_accvgprs():
    """MI300 ISA VOP3P-MAI ACC (bits 60:59): the A / B operand from AccVGPRs."""
    return _mfma_16x16x16_b_from_accvgprs("cd", "f16", "V_MFMA_F32_16X16X16_F16")


@check
def cdna_mfma_16x16x16_bf16_b_from_accvgprs():
    return _mfma_16x16x16_b_from_accvgprs("e1", "bf16", "V_MFMA_F32_16X16X16_BF16")

@check
def cdna_buffer_load_dword_lds_reads_only_active_in_range_lanes():
    """MI300 ISA BUFFER_LOAD_DWORD with LDS = 1: lane l's dword goes to LDS byte M0 + 4 * l;
    a lane past num_records loads 0; a lane not in EXEC leaves its LDS word. The V# covers the
    inputs' row of v3 (256 bytes, raw); lanes 0-47 read word l, lanes 48-55 lie past num_records
    (offset 0x80000000), lanes 56-63 are not in EXEC. LDS bytes 256.. start as the sentinels of
    v4; ds_read_b32 brings them back to v6."""
    ins = programs.isa("cdna")
    lane = np.arange(64, dtype=np.uint32)
    data, sentinel = 0x5EED0000 + 3 * lane, 0xA0A00000 + lane
    offsets = np.where(lane < 48, 4 * lane, 0x80000000).astype(np.uint32)
    expected = np.where(lane < 48, data, np.where(lane < 56, 0, sentinel)).astype(np.uint32)
    body = [ins.ds_write_b32(addr=ins.v[1], data0=ins.v[4], offset0=0, offset1=1),
            ins.s_waitcnt(simm16=0),
            ins.s_add_u32(ins.s[8], ins.s[0], 64 * 4), ins.s_addc_u32(ins.s[9], ins.s[1], 0),
            ins.s_and_b32(ins.s[9], ins.s[9], 0xFFFF), ins.s_mov_b32(ins.s[10], 256), ins.s_mov_b32(ins.s[11], 0x00020000),
            ins.s_mov_b32(ins.src[124], 256), ins.s_mov_b32(ins.EXEC_HI, 0x00FFFFFF),  # src 124 is M0 on CDNA
            ins.MUBUF(ins.MUBUFOp.BUFFER_LOAD_DWORD, vdata=ins.v[0], vaddr=ins.v[2], srsrc=ins.s[8:11], soffset=0x80, offen=1, lds=1),
            ins.s_waitcnt(simm16=0), ins.s_mov_b32(ins.EXEC_HI, -1),
            ins.ds_read_b32(vdst=ins.v[6], addr=ins.v[1], offset0=0, offset1=1), ins.s_waitcnt(simm16=0)]
    return dict(arch="cdna", body=body, inputs={2: offsets, 3: data, 4: sentinel}, outputs=[6], expected=expected[None, :],
                names=["BUFFER_LOAD_DWORD"], lds_bytes=1024, may_fault=True)


@check
def cdna_buffer_load_ushort_sshort_read_two_bytes():
    """MI300 ISA BUFFER_LOAD_USHORT / _SSHORT: `VDATA.u32 = 32'U(MEM[ADDR].u16)` (i16: sign-
    extended): lane l reads the 2 bytes at byte 4 * l + 2 of the inputs' row of v3, over a raw
    V# of 256 bytes; lanes 60-63 read at offset 255, past num_records, and get 0."""
    ins = programs.isa("cdna")
    lane = np.arange(64, dtype=np.uint32)
    data = (0x8000 + 0x111 * lane) << 16 | 0x1234
    offsets = np.where(lane < 60, 4 * lane + 2, 255).astype(np.uint32)
    hi = data >> 16
    unsigned = np.where(lane < 60, hi, 0).astype(np.uint32)
    signed = np.where(lane < 60, (hi.astype(np.int64) - 0x10000) & 0xFFFFFFFF, 0).astype(np.uint32)
    load = lambda op, dst: ins.MUBUF(op, vdata=ins.v[dst], vaddr=ins.v[2], srsrc=ins.s[8:11], soffset=0x80, offen=1)
    body = [ins.s_add_u32(ins.s[8], ins.s[0], 64 * 4), ins.s_addc_u32(ins.s[9], ins.s[1], 0),
            ins.s_and_b32(ins.s[9], ins.s[9], 0xFFFF), ins.s_mov_b32(ins.s[10], 256), ins.s_mov_b32(ins.s[11], 0x00020000),
            load(ins.MUBUFOp.BUFFER_LOAD_USHORT, 6), load(ins.MUBUFOp.BUFFER_LOAD_SSHORT, 7), ins.s_waitcnt(simm16=0)]
    return dict(arch="cdna", body=body, inputs={2: offsets, 3: data}, outputs=[6, 7], expected=np.stack([unsigned, signed]),
                names=["BUFFER_LOAD_USHORT", "BUFFER_LOAD_SSHORT"])


@check
def cdna_flat_load_store_ignore_saddr():
    """MI300 ISA FLAT_LOAD_DWORD / FLAT_STORE_DWORD (SEG = 0) with SADDR = 0, as LLVM encodes
    them: the address is the VGPR pair v[6:7] (lane l: word l of the inputs' first row, v3's),
    SADDR plays no part. Lane l loads word l of v3's row into v8, then stores v4 there; v9 reloads it."""
    ins = programs.isa("cdna")
    lane = np.arange(64, dtype=np.uint32)
    data, stored = 0x0DD00000 + lane, 0x5E000000 + lane
    flat = lambda op, **kw: ins.FLAT(op, addr=ins.v[6], saddr=ins.s[0], offset=0, **kw)
    body = [ins.v_mov_b32_e32(ins.v[7], ins.s[1]), ins.v_add_co_u32_e32(ins.v[6], ins.s[0], ins.v[1]),
            ins.v_addc_co_u32_e32(ins.v[7], 0, ins.v[7]),
            flat(ins.FLATOp.FLAT_LOAD_DWORD, vdst=ins.v[8]), ins.s_waitcnt(simm16=0),
            flat(ins.FLATOp.FLAT_STORE_DWORD, data=ins.v[4]), ins.s_waitcnt(simm16=0),
            flat(ins.FLATOp.FLAT_LOAD_DWORD, vdst=ins.v[9]), ins.s_waitcnt(simm16=0)]
    return dict(arch="cdna", body=body, inputs={3: data, 4: stored}, outputs=[8, 9], expected=np.stack([data, stored]),
                names=["FLAT_LOAD_DWORD", "FLAT_STORE_DWORD"], may_fault=True)


@check
def cdna_s_getpc_b64_is_the_next_instruction():
    """MI300 ISA S_GETPC_B64: `D0.i64 = PC + 4`: 4 bytes before the address it returns lies the
    s_getpc_b64 itself, whose encoding v6 reads back from there."""
    ins = programs.isa("cdna")
    getpc = ins.s_getpc_b64(ins.s[10:11])
    word = int.from_bytes(getpc.to_bytes()[:4], "little")
    body = [getpc, ins.s_sub_u32(ins.s[10], ins.s[10], 4), ins.s_subb_u32(ins.s[11], ins.s[11], 0),
            ins.v_mov_b32_e32(ins.v[7], 0), ins.global_load_dword(vdst=ins.v[6], addr=ins.v[7], saddr=ins.s[10:11], offset=0),
            ins.s_waitcnt(simm16=0)]
    return dict(arch="cdna", body=body, inputs={}, outputs=[6], expected=np.full((1, 64), word, np.uint32), names=["S_GETPC_B64"])


@check
def cdna_s_setreg_imm32_b32_mode_runs():
    """MI300 ISA S_SETREG_IMM32_B32 hwreg(HW_REG_MODE, 4, 2), 3 (CK's FP32-denormal setting):
    executes, and the program goes on (v6 = 7 after it)."""
    ins = programs.isa("cdna")
    body = [ins.s_setreg_imm32_b32(ins.s[0], 1 | 4 << 6 | 1 << 11, 3), ins.v_mov_b32_e32(ins.v[6], 7)]
    return dict(arch="cdna", body=body, inputs={}, outputs=[6], expected=np.full((1, 64), 7, np.uint32),
                names=["S_SETREG_IMM32_B32"])


@check
def cvt_f16_f32_to_v128_and_up():
    """MI300 ISA V_CVT_F16_F32: `D0.f16 = f32_to_f16(S0.f32)` (round to nearest even), into
    v130: a whole VGPR on CDNA (no RDNA-style high-half aliasing of v2); D0[31:16] kept."""
    ins = programs.isa("cdna")
    x = np.linspace(-3.0, 3.0, 64, dtype=np.float32) + np.float32(1e-3)
    old = np.full(64, 0xABCD0000, np.uint32)
    keep = np.full(64, 0x12345678, np.uint32)
    expected = np.stack([(old & 0xFFFF0000) | x.astype(np.float16).view(np.uint16), keep])
    body = [ins.v_mov_b32_e32(ins.v[130], ins.v[3]), ins.v_cvt_f16_f32_e32(ins.v[130], ins.v[2])]
    return dict(arch="cdna", body=body, inputs={2: x.view(np.uint32), 3: old, 4: keep}, outputs=[130, 4],
                expected=expected, names=["V_CVT_F16_F32_E32"])


@check
def ds_bpermute_b32_wraps_lanes():
    """MI300 ISA DS_BPERMUTE_B32: src_lane = (ADDR + OFFSET) / 4 % 64, so byte addresses at and
    above 256 wrap to lane (addr / 4) % 64; here lane i reads lane (i + 37) % 64 through
    addresses 4 * (i + 37) + 256 * (i % 3)."""
    ins = programs.isa("cdna")
    lanes = np.arange(64, dtype=np.uint32)
    addr = 4 * (lanes + 37) + 256 * (lanes % 3)
    data = lanes * 1000 + 7
    expected = data[(lanes + 37) % 64][None, :]
    body = [ins.DS(ins.DSOp.DS_BPERMUTE_B32, addr=ins.v[2], data0=ins.v[3], vdst=ins.v[4])]
    return dict(arch="cdna", body=body, inputs={2: addr, 3: data}, outputs=[4], expected=expected,
                names=["DS_BPERMUTE_B32"])


@check
def ds_load_u16_d16_and_hi(arch="rdna3"):
    """RDNA3/RDNA4 ISA DS_LOAD_U16_D16: `RETURN_DATA[15:0].u16 = MEM[ADDR].u16`, bits 31:16
    preserved; DS_LOAD_U16_D16_HI: `RETURN_DATA[31:16].u16 = MEM[ADDR].u16`, bits 15:0 preserved.
    The LDS is filled by ds_store_b32 first; each lane reads the high half of its own word."""
    ins = programs.isa(arch)
    lanes = np.arange(32, dtype=np.uint32)
    data = 0x1000 * lanes + 0x50000 * (lanes + 1) + 0x0123
    old = 0xA5A50000 + 0x11 * lanes
    high = data >> 16
    expected = np.stack([(old & 0xFFFF) | (high << 16), (old & 0xFFFF0000) | high])
    body = [ins.DS(ins.DSOp.DS_STORE_B32, addr=ins.v[1], data0=ins.v[2]), *programs._wait(arch),
            ins.v_mov_b32_e32(ins.v[5], ins.v[4]),
            ins.DS(ins.DSOp.DS_LOAD_U16_D16_HI, addr=ins.v[1], vdst=ins.v[4], offset0=2),
            ins.DS(ins.DSOp.DS_LOAD_U16_D16, addr=ins.v[1], vdst=ins.v[5], offset0=2)]
    return dict(arch=arch, body=body, inputs={2: data, 4: old}, outputs=[4, 5], expected=expected,
                names=["DS_LOAD_U16_D16", "DS_LOAD_U16_D16_HI"], lds_bytes=512)


@check
def ds_load_u16_d16_and_hi_rdna4():
    return ds_load_u16_d16_and_hi("rdna4")


@check
def ds_load_b32_b128_inactive_lanes_do_not_read(arch="rdna3"):
    """RDNA3/RDNA4 ISA DS_LOAD_B32 / DS_LOAD_B128: `RETURN_DATA = MEM[ADDR + OFFSET]` for the
    lanes in EXEC only; a lane not in EXEC does not access LDS and keeps its VGPRs. The LDS is
    filled by ds_store_b32 (lane l: word l); then EXEC = lanes 0-23 (as the kernel's last
    ds_load_b32 of fwd_prefill_*_d256_flat has it), whose addresses are 4 * lane, while lanes
    24-31 hold 0xFFFF0000 + 4 * lane, far past the 512-byte LDS (a stale value, as a VGPR
    that an EXEC-masked reload did not write holds). Expected: lane l < 24 reads word l + 1 (B32,
    offset 4) and words l + 4 .. l + 7 (B128, offset 16); lanes 24-31 keep their old values."""
    ins = programs.isa(arch)
    lanes = np.arange(32, dtype=np.uint32)
    data = 0x01010101 * (lanes + 1) + 0x7000
    active = lanes < 24
    address = np.where(active, 4 * lanes, 0xFFFF0000 + 4 * lanes).astype(np.uint32)
    old = [0xA5A50000 + 0x100 * r + lanes for r in range(5)]
    shifted = lambda k: np.array([data[l + k] if l + k < 32 else 0 for l in lanes], np.uint32)
    expected = np.stack([np.where(active, shifted(1), old[0])] + [np.where(active, shifted(4 + i), old[1 + i]) for i in range(4)])
    body = [ins.DS(ins.DSOp.DS_STORE_B32, addr=ins.v[1], data0=ins.v[2]), *programs._wait(arch),
            ins.s_mov_b32(ins.EXEC_LO, 0x00FFFFFF),
            ins.DS(ins.DSOp.DS_LOAD_B32, addr=ins.v[3], vdst=ins.v[4], offset0=4),
            ins.DS(ins.DSOp.DS_LOAD_B128, addr=ins.v[3], vdst=ins.v[8:11], offset0=16), *programs._wait(arch),
            ins.s_mov_b32(ins.EXEC_LO, -1)]
    inputs = {2: data, 3: address, 4: old[0], 8: old[1], 9: old[2], 10: old[3], 11: old[4]}
    return dict(arch=arch, body=body, inputs=inputs, outputs=[4, 8, 9, 10, 11], expected=expected,
                names=["DS_LOAD_B32", "DS_LOAD_B128"], lds_bytes=512, may_fault=True)


@check
def ds_load_b32_b128_inactive_lanes_do_not_read_rdna4():
    return ds_load_b32_b128_inactive_lanes_do_not_read("rdna4")


def permlanex16_expected(src, lanesel):
    """RDNA3 ISA V_PERMLANEX16_B32 pseudocode: lane 16 * row + i <- tmp[16 * (row ^ 1) +
    lanesel[4i+3:4i]]."""
    return np.array([src[16 * ((l // 16) ^ 1) + (lanesel >> (4 * (l % 16)) & 0xF)] for l in range(len(src))], np.uint32)


@check
def permlanex16_b32_with_literal_select(arch="rdna3"):
    """V_PERMLANEX16_B32 v4, v2, <literal 0x0f1e2d3c>, s5 (s5 = 0x8796a5b4): the literal is the
    low 32 select bits; each lane takes its select nibble's lane of the other row."""
    ins = programs.isa(arch)
    src = np.arange(32, dtype=np.uint32) * 3 + 100
    s1, s2 = 0x0F1E2D3C, 0x8796A5B4
    body = [ins.s_mov_b32(ins.s[5], s2), ins.v_permlanex16_b32(ins.v[4], ins.v[2], s1, ins.s[5])]
    expected = permlanex16_expected(src, s1 | s2 << 32)[None, :]
    return dict(arch=arch, body=body, inputs={2: src}, outputs=[4], expected=expected, names=["V_PERMLANEX16_B32"])


@check
def permlanex16_b32_with_literal_select_rdna4():
    return permlanex16_b32_with_literal_select("rdna4")


RAW_V_SHARP_WORD3 = 0x31027000  # what Triton's gfx11 kernels put in V# word 3: OOB_SELECT 3 (raw)


def _v_sharp(ins, first, base_lo, base_hi, num_records):
    """s[first:first+3] = a raw buffer resource over the address in (base_lo, base_hi)."""
    return [ins.s_mov_b32(ins.s[first], base_lo), ins.s_and_b32(ins.s[first + 1], base_hi, 0xFFFF),
            ins.s_mov_b32(ins.s[first + 2], num_records), ins.s_mov_b32(ins.s[first + 3], RAW_V_SHARP_WORD3)]


def _buffer_op(arch, op, vdata, vaddr, rsrc):
    """`op` (a MUBUF/VBUFFER opcode name) with `offen`, soffset NULL, from V# s[rsrc:rsrc+3]."""
    ins = programs.isa(arch)
    if arch == "rdna4":
        return ins.VBUFFER(getattr(ins.VBUFFEROp, op), vdata=vdata, vaddr=vaddr, rsrc=rsrc, soffset=ins.NULL, offen=1, ioffset=0)
    return ins.MUBUF(getattr(ins.MUBUFOp, op), vdata=vdata, vaddr=vaddr, srsrc=ins.s[rsrc:rsrc + 3], soffset=ins.NULL, offen=1)


@check
def buffer_load_b32_b128_out_of_range_read_zero(arch="rdna3"):
    """RDNA3 ISA MUBUF BUFFER_LOAD_B32 / _B128 `offen` over a raw V# (OOB_SELECT 3) of 100 bytes
    at the inputs: a lane whose access reaches byte 100 or beyond (offsets 96 for 16 bytes,
    0x80000000 as Triton's masked lanes) reads 0; the others read memory at base + offset."""
    ins = programs.isa(arch)
    lanes = np.arange(32, dtype=np.uint32)
    offsets = np.where(lanes % 4 == 3, 0x80000000, (lanes * 8) % 112).astype(np.uint32)
    memory = np.arange(32, dtype=np.uint32) * 0x01010101 + 0x0A0B0C0D
    blob = np.concatenate([offsets, memory]).view(np.uint8)  # rows as the program's inputs lie
    num_records = 100
    def load(offset, width):
        if offset + width > num_records:
            return np.zeros(width // 4, np.uint32)
        return blob[offset:offset + width].view(np.uint32)
    b32 = np.array([load(int(o), 4)[0] for o in offsets], np.uint32)
    b128 = np.stack([load(int(o), 16) for o in offsets], axis=1)
    body = _v_sharp(ins, 8, ins.s[0], ins.s[1], num_records) + [
        _buffer_op(arch, "BUFFER_LOAD_B32", ins.v[6], ins.v[2], 8), _buffer_op(arch, "BUFFER_LOAD_B128", ins.v[8:11], ins.v[2], 8)]
    return dict(arch=arch, body=body, inputs={2: offsets, 3: memory}, outputs=[6, 8, 9, 10, 11],
                expected=np.concatenate([b32[None, :], b128]),
                names=["BUFFER_LOAD_B32", "BUFFER_LOAD_B128"])


@check
def buffer_load_b32_b128_out_of_range_read_zero_rdna4():
    """RDNA4 ISA VBUFFER BUFFER_LOAD_B32 / _B128: as on RDNA3 (same V# and range rule)."""
    return buffer_load_b32_b128_out_of_range_read_zero("rdna4")


@check
def buffer_store_b16_writes_two_bytes_in_range_only(arch="rdna3"):
    """RDNA3 ISA BUFFER_STORE_B16: `MEM[ADDR].b16 = VDATA[15:0]`, two bytes, nothing else; dropped
    out of range. Lanes store at byte 2 * lane of a raw V# of 40 bytes over the inputs' row of
    v3, so lanes 20.. (and every 5th lane, at 0x80000000) write nothing."""
    ins = programs.isa(arch)
    lanes = np.arange(32, dtype=np.uint32)
    offsets = np.where(lanes % 5 == 4, 0x80000000, 2 * lanes).astype(np.uint32)
    values = 0xBEEF0000 + lanes
    target = np.full(32, 0x77777777, np.uint32)
    after = target.view(np.uint16).copy()
    for lane in range(32):
        if offsets[lane] + 2 <= 40:
            after[offsets[lane] // 2] = values[lane] & 0xFFFF
    add, add_carry = (ins.s_add_co_u32, ins.s_add_co_ci_u32) if arch == "rdna4" else (ins.s_add_u32, ins.s_addc_u32)
    body = [add(ins.s[12], ins.s[0], 2 * 32 * 4), add_carry(ins.s[13], ins.s[1], 0)]
    body += _v_sharp(ins, 8, ins.s[12], ins.s[13], 40)
    body += [_buffer_op(arch, "BUFFER_STORE_B16", ins.v[3], ins.v[2], 8), *programs._wait(arch), ins.v_mov_b32_e32(ins.v[6], 1)]
    return dict(arch=arch, body=body, inputs={2: offsets, 3: values, 4: target}, outputs=[6],
                expected=np.ones((1, 32), np.uint32), names=["BUFFER_STORE_B16"],
                memory_row=(4, after.view(np.uint32)))


@check
def buffer_store_b16_writes_two_bytes_in_range_only_rdna4():
    return buffer_store_b16_writes_two_bytes_in_range_only("rdna4")


@check
def buffer_gl0_gl1_inv_change_nothing():
    """RDNA3 ISA BUFFER_GL0_INV / BUFFER_GL1_INV invalidate caches: no register or memory value
    changes; execution continues at the next instruction."""
    ins = programs.isa("rdna3")
    body = [ins.MUBUF(ins.MUBUFOp.BUFFER_GL0_INV), ins.MUBUF(ins.MUBUFOp.BUFFER_GL1_INV),
            ins.v_add_nc_u32_e32(ins.v[4], 5, ins.v[2])]
    src = np.arange(32, dtype=np.uint32)
    return dict(arch="rdna3", body=body, inputs={2: src}, outputs=[4], expected=(src + 5)[None, :],
                names=["BUFFER_GL0_INV", "BUFFER_GL1_INV"])


@check
def rdna3_s_setprio_changes_nothing():
    """RDNA3 ISA S_SETPRIO: the wave's issue priority only; registers are unchanged and
    execution continues at the next instruction (v4 = v2 + 5 between two of them)."""
    ins = programs.isa("rdna3")
    body = [ins.s_setprio(simm16=3), ins.v_add_nc_u32_e32(ins.v[4], 5, ins.v[2]), ins.s_setprio(simm16=0)]
    src = np.arange(32, dtype=np.uint32)
    return dict(arch="rdna3", body=body, inputs={2: src}, outputs=[4, 2], expected=np.stack([src + 5, src]),
                names=["S_SETPRIO"])


@check
def ds_swizzle_b32_bit_and_quad_modes():
    """MI300 ISA DS_SWIZZLE_B32: offset 0x401F (BitMode: and 0x1F, or 0, xor 0x10) gives lane
    i the value of lane i ^ 16 within its 32 lanes; offset 0x801B (QDMode, selects 3,2,1,0)
    reverses each quad."""
    ins = programs.isa("cdna")
    lanes = np.arange(64, dtype=np.uint32)
    data = lanes * 7 + 1000
    swap = data[(lanes & 0x20) | ((lanes & 0x1F) ^ 0x10)]
    reverse = data[(lanes & 0x3C) | (3 - lanes % 4)]
    body = [ins.DS(ins.DSOp.DS_SWIZZLE_B32, addr=ins.v[2], vdst=ins.v[4], offset0=0x1F, offset1=0x40),
            ins.DS(ins.DSOp.DS_SWIZZLE_B32, addr=ins.v[2], vdst=ins.v[5], offset0=0x1B, offset1=0x80)]
    return dict(arch="cdna", body=body, inputs={2: data}, outputs=[4, 5], expected=np.stack([swap, reverse]),
                names=["DS_SWIZZLE_B32"])


def _scratch_round_trip(arch, store, load):
    """Two waves: each lane stores its value at private offset 16, the work-group meets at
    s_barrier (so the other wave stores too), then each lane loads it back. Scratch is private
    to each lane of each wave: every lane must read its own value."""
    ins = programs.isa(arch)
    lanes = 2 * (64 if arch == "cdna" else 32)
    values = np.arange(lanes, dtype=np.uint32) * 3 + 11
    body = [store, *programs._wait(arch), *programs.barrier(arch), load, *programs._wait(arch)]
    return dict(arch=arch, body=body, inputs={2: values}, outputs=[4], expected=values[None, :], lanes=lanes,
                private_bytes=64)


def _without_saddr(inst, none):
    """`inst` with its saddr field (54:48) set to `none` (the encoding of "off")."""
    word = int.from_bytes(inst.to_bytes(), "little")
    return ((word & ~(0x7F << 48)) | none << 48).to_bytes(8, "little")


@check
def scratch_is_private_to_each_wave_cdna():
    ins = programs.isa("cdna")
    store = _without_saddr(ins.SCRATCH(ins.SCRATCHOp.SCRATCH_STORE_DWORD, addr=ins.v[0], data=ins.v[2], offset=16), 0x7F)
    load = _without_saddr(ins.SCRATCH(ins.SCRATCHOp.SCRATCH_LOAD_DWORD, addr=ins.v[0], vdst=ins.v[4], offset=16), 0x7F)
    return dict(_scratch_round_trip("cdna", store, load), names=["SCRATCH_STORE_DWORD", "SCRATCH_LOAD_DWORD"])


@check
def scratch_is_private_to_each_wave_rdna3():
    ins = programs.isa("rdna3")
    store = ins.SCRATCH(ins.SCRATCHOp.SCRATCH_STORE_B32, addr=ins.v[0], data=ins.v[2], saddr=ins.NULL, offset=16)
    load = ins.SCRATCH(ins.SCRATCHOp.SCRATCH_LOAD_B32, addr=ins.v[0], vdst=ins.v[4], saddr=ins.NULL, offset=16)
    return dict(_scratch_round_trip("rdna3", store, load), names=["SCRATCH_STORE_B32", "SCRATCH_LOAD_B32"])


def _dpp(op_vop, vdst, src0, ctrl, row_mask, bank_mask, bound=0, vsrc1=None, fetch_inactive=0):
    """A VOP1 (vsrc1 None, op 16:9) or VOP2 (op 30:25) instruction with the DPP source (src0 =
    0xFA) and its DPP dword, encoded from the MI300 / RDNA3 ISA field tables (same layout;
    RDNA3 adds FI at bit 18 of the DPP dword)."""
    if vsrc1 is None:
        word0 = 0xFA | op_vop << 9 | vdst << 17 | 0x3F << 25
    else:
        word0 = 0xFA | vsrc1 << 9 | vdst << 17 | op_vop << 25
    word1 = src0 | ctrl << 8 | fetch_inactive << 18 | bound << 19 | bank_mask << 24 | row_mask << 28
    return word0.to_bytes(4, "little") + word1.to_bytes(4, "little")


@check
def dpp_row_bank_masks_bcast_and_same_register():
    """MI300 ISA DPP: v_mov_b32_dpp v4, v4 row_shr:4 bank_mask:0xa (banks 1 and 3 take the lane
    4 below, reading v4 as it was; banks 0 and 2 keep v4); v_mov_b32_dpp v5, v2 row_bcast:15
    row_mask:0xa (rows 1 and 3 take the last lane of the row below; rows 0 and 2 keep v5);
    v_mov_b32_dpp v6, v2 wave_shl:1 bound_ctrl (lane 63 has no source: 0); v_add_u32_dpp v7,
    v2, v3 row_shr:2 bound_ctrl (the first two lanes of each row add 0)."""
    ins = programs.isa("cdna")
    lane = np.arange(64, dtype=np.uint32)
    a, b, old4, old5 = lane * 5 + 3, lane * 1000, lane + 77, lane + 500
    bank, row, pos = (lane // 4) % 4, lane // 16, lane % 16
    e4 = np.where(np.isin(bank, [1, 3]), old4[np.maximum(lane.astype(int) - 4, 0)], old4)
    e5 = np.where(np.isin(row, [1, 3]), a[np.maximum(16 * row.astype(int) - 1, 0)], old5)
    e6 = np.where(lane < 63, a[np.minimum(lane + 1, 63)], 0)
    e7 = np.where(pos >= 2, a[np.maximum(lane.astype(int) - 2, 0)], 0) + b
    mov, add_u32 = 1, 52
    body = [_dpp(mov, 4, 4, 0x114, 0xF, 0xA), _dpp(mov, 5, 2, 0x142, 0xA, 0xF),
            _dpp(mov, 6, 2, 0x130, 0xF, 0xF, bound=1), _dpp(add_u32, 7, 2, 0x112, 0xF, 0xF, bound=1, vsrc1=3)]
    return dict(arch="cdna", body=body, inputs={2: a, 3: b, 4: old4, 5: old5}, outputs=[4, 5, 6, 7],
                expected=np.stack([e4, e5, e6, e7]).astype(np.uint32), names=["V_MOV_B32_E32@DPP", "V_ADD_U32_E32@DPP"])


@check
def cdna_buffer_store_short_writes_two_bytes():
    """MI300 ISA BUFFER_STORE_SHORT: `MEM[ADDR].b16 = VDATA[15:0]`: lane i stores at byte 4 * i
    + 2 of a raw V# of 256 bytes; bytes 0-1 of each word stay as they were."""
    ins = programs.isa("cdna")
    lane = np.arange(64, dtype=np.uint32)
    values, target = 0xCAFE0000 + lane, np.full(64, 0x11112222, np.uint32)
    offsets = 4 * lane + 2
    after = (target & 0xFFFF) | ((values & 0xFFFF) << 16)
    body = [ins.s_add_u32(ins.s[12], ins.s[0], 2 * 64 * 4), ins.s_addc_u32(ins.s[13], ins.s[1], 0),
            ins.s_mov_b32(ins.s[8], ins.s[12]), ins.s_and_b32(ins.s[9], ins.s[13], 0xFFFF),
            ins.s_mov_b32(ins.s[10], 256), ins.s_mov_b32(ins.s[11], 0x00020000),
            ins.MUBUF(ins.MUBUFOp.BUFFER_STORE_SHORT, vdata=ins.v[3], vaddr=ins.v[2], srsrc=ins.s[8:11], soffset=0x80, offen=1),
            ins.s_waitcnt(simm16=0), ins.v_mov_b32_e32(ins.v[6], 1)]
    return dict(arch="cdna", body=body, inputs={2: offsets, 3: values, 4: target}, outputs=[6],
                expected=np.ones((1, 64), np.uint32), names=["BUFFER_STORE_SHORT"], memory_row=(4, after))


@check
def wmma_gfx12_inline_zero_accumulator():
    """RDNA4 ISA V_WMMA_F32_16X16X16_F16, C = inline constant 0 (D = A x B): A[m][k] in lane
    m + 16 * (k // 8), VGPR (k % 8) // 2, half k % 2; B[k][n] in lane n + 16 * (k // 8) likewise;
    D[m][n] in lane n + 16 * (m // 8), VGPR m % 8. v128-v135 hold 1.0, which a reader of VGPRs
    at the constant's index would add."""
    ins = programs.isa("rdna4")
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    bits16 = lambda x: np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)
    a_regs, b_regs = np.zeros((4, 32), np.uint32), np.zeros((4, 32), np.uint32)
    for lane in range(32):
        for j in range(4):
            k = 8 * (lane // 16) + 2 * j
            a_regs[j, lane] = bits16(a[lane % 16, k]) | bits16(a[lane % 16, k + 1]) << 16
            b_regs[j, lane] = bits16(b[k, lane % 16]) | bits16(b[k + 1, lane % 16]) << 16
    d = a.astype(np.float32) @ b.astype(np.float32)
    expected = np.array([[d[r + 8 * (lane // 16), lane % 16] for lane in range(32)] for r in range(8)], np.float32)
    inputs = {2 + j: a_regs[j] for j in range(4)} | {6 + j: b_regs[j] for j in range(4)}
    inputs |= {128 + j: np.full(32, 0x3F800000, np.uint32) for j in range(8)}
    body = [ins.v_wmma_f32_16x16x16_f16(ins.v[20:27], ins.v[2:5], ins.v[6:9], 0)]
    return dict(arch="rdna4", body=body, inputs=inputs, outputs=list(range(20, 28)), expected=expected.view(np.uint32),
                names=["V_WMMA_F32_16X16X16_F16"])


@check
def dpp16_rdna3_same_register_and_float_add():
    """RDNA3 ISA DPP16: v_mov_b32_dpp v4, v4 quad_perm:[2,3,0,1] (every lane reads v4 as it was
    before the instruction: the quad's halves swap); v_add_f32_dpp v5, v2, v3 row_shr:4
    bound_ctrl (lanes 0-3 of each 16-lane row add 0.0 to v3)."""
    ins = programs.isa("rdna3")
    lane = np.arange(32, dtype=np.uint32)
    old4 = lane * 11 + 5
    a, b = (lane.astype(np.float32) * 0.5 + 1.0), (lane.astype(np.float32) * -0.25)
    e4 = old4[(lane & 0x1C) | ((lane % 4) ^ 2)]
    pos = lane % 16
    e5 = (np.where(pos >= 4, a[np.maximum(lane.astype(int) - 4, 0)], np.float32(0)) + b).astype(np.float32)
    mov, add_f32 = 1, 3
    body = [_dpp(mov, 4, 4, 0b01001110, 0xF, 0xF), _dpp(add_f32, 5, 2, 0x114, 0xF, 0xF, bound=1, vsrc1=3)]
    return dict(arch="rdna3", body=body, inputs={2: a.view(np.uint32), 3: b.view(np.uint32), 4: old4}, outputs=[4, 5],
                expected=np.stack([e4, e5.view(np.uint32)]), names=["V_MOV_B32_E32@DPP", "V_ADD_F32_E32@DPP"])


@check
def scratch_is_private_to_each_wave_rdna4():
    ins = programs.isa("rdna4")
    store = ins.VSCRATCH(ins.VSCRATCHOp.SCRATCH_STORE_B32, vaddr=ins.v[0], vsrc=ins.v[2], saddr=ins.NULL, ioffset=16)
    load = ins.VSCRATCH(ins.VSCRATCHOp.SCRATCH_LOAD_B32, vaddr=ins.v[0], vdst=ins.v[4], saddr=ins.NULL, ioffset=16)
    return dict(_scratch_round_trip("rdna4", store, load), names=["SCRATCH_STORE_B32", "SCRATCH_LOAD_B32"])


@check
def dpp16_rdna4_same_register():
    """RDNA4 ISA DPP16, as RDNA3: v_mov_b32_dpp v4, v4 quad_perm:[2,3,0,1] reads v4 as it was."""
    c = dpp16_rdna3_same_register_and_float_add()
    return dict(c, arch="rdna4")


# gfx942 (llvm-mc 21, -mcpu=gfx942) encodings of a program that moves AccVGPR data through LDS
# and scratch: a[0:3] = v[2:5]; LDS writes from AGPRs (b64 at 8 x lane, b128 at 16 x lane +
# 1024); reads back into VGPRs and AGPRs (b64, read2 b64, b128, b32); a scratch spill and
# reload of a[2:3]; then the AGPRs read into v30-v38.
ACC_PROGRAM = (
    ("v_lshlrev_b32_e32 v10, 4, v0", "84001424"),
    ("v_lshlrev_b32_e32 v11, 3, v0", "83001624"),
    ("v_accvgpr_write_b32 a0, v2", "0040d9d302010018"),
    ("v_accvgpr_write_b32 a1, v3", "0140d9d303010018"),
    ("v_accvgpr_write_b32 a2, v4", "0240d9d304010018"),
    ("v_accvgpr_write_b32 a3, v5", "0340d9d305010018"),
    ("ds_write_b64 v11, a[0:1]", "00009ada0b000000"),
    ("ds_write_b128 v10, a[0:3] offset:1024", "0004bedb0a000000"),
    ("s_waitcnt lgkmcnt(0)", "7fc08cbf"),
    ("ds_read_b64 v[28:29], v11", "0000ecd80b00001c"),
    ("ds_read2_b64 a[4:7], v10 offset0:128 offset1:129", "8081eeda0a000004"),
    ("ds_read_b128 a[8:11], v10 offset:1024", "0004fedb0a000008"),
    ("ds_read_b32 a12, v11 offset:4", "04006cda0b00000c"),
    ("s_waitcnt lgkmcnt(0)", "7fc08cbf"),
    ("v_accvgpr_read_b32 v30, a4", "1e40d8d304010018"),
    ("v_accvgpr_read_b32 v31, a5", "1f40d8d305010018"),
    ("v_accvgpr_read_b32 v32, a6", "2040d8d306010018"),
    ("v_accvgpr_read_b32 v33, a7", "2140d8d307010018"),
    ("v_accvgpr_read_b32 v34, a8", "2240d8d308010018"),
    ("v_accvgpr_read_b32 v35, a11", "2340d8d30b010018"),
    ("v_accvgpr_read_b32 v36, a12", "2440d8d30c010018"),
    ("scratch_store_dwordx2 off, a[2:3], off offset:16", "104074dc0002ff00"),
    ("s_waitcnt vmcnt(0)", "700f8cbf"),
    ("scratch_load_dwordx2 a[14:15], off, off offset:16", "104054dc0000ff0e"),
    ("s_waitcnt vmcnt(0)", "700f8cbf"),
    ("v_accvgpr_read_b32 v37, a14", "2540d8d30e010018"),
    ("v_accvgpr_read_b32 v38, a15", "2640d8d30f010018"),
)


@check
def cdna_lds_and_scratch_with_accvgpr_data():
    """MI300 ISA, LDS instructions and scratch with ACC = 1 (DS bit 25, FLAT/scratch bit 55): the
    data and destination registers are AccVGPRs (what LLVM emits for our d = 512 tile on gfx942);
    2-address forms step OFFSET0/1 by the access size. Lane L of v28/v29 reads its b64 write
    back, v30-v33 the b128 write through read2_b64, v34/v35 the b128 read's first and last
    dwords, v36 a dword of the b64 write, v37/v38 the scratch round trip."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 2**32, (4, 64), dtype=np.uint64).astype(np.uint32)
    body = [bytes.fromhex(code) for _, code in ACC_PROGRAM]
    d = data
    expected = np.stack([d[0], d[1], d[0], d[1], d[2], d[3], d[0], d[3], d[1], d[2], d[3]])
    names = ["DS_WRITE_B64", "DS_WRITE_B128", "DS_READ2_B64", "DS_READ_B128", "DS_READ_B32", "SCRATCH_STORE_DWORDX2",
             "SCRATCH_LOAD_DWORDX2"]
    return dict(arch="cdna", body=body, inputs={2 + k: data[k] for k in range(4)}, outputs=[28, 29, *range(30, 39)],
                expected=expected, lds_bytes=2048, private_bytes=64, names=names)


def run_one(c, corrected):
    """'right', 'wrong (...)' or 'fails: ...' for check `c` with the handlers `corrected`; a check
    whose program may fault the process (`may_fault`) runs in a child process."""
    if c.get("may_fault"):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, _run_one(c, corrected).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            text = f.read()
        _, status = os.waitpid(pid, 0)
        return text if os.WIFEXITED(status) else f"fails: the process died (signal {os.WTERMSIG(status)})"
    return _run_one(c, corrected)


def _run_one(c, corrected):
    memory = []
    try:
        out = programs.run(c["arch"], c["body"], c["inputs"], c["outputs"], lanes=c.get("lanes"),
                           lds_bytes=c.get("lds_bytes", 0), corrected=corrected, memory_out=memory,
                           private_bytes=c.get("private_bytes", 0))
    except Exception as e:  # the emulator as it is may not decode the instruction
        return f"fails: {type(e).__name__}: {str(e)[:100]}"
    got = np.stack([out[r] for r in c["outputs"]])
    wrong = int((got != c["expected"]).sum())
    if "memory_row" in c:
        row, want = c["memory_row"]
        wrong += int((memory[0][sorted(c["inputs"]).index(row)] != want).sum())
    return "right" if wrong == 0 else f"wrong ({wrong} words)"


def run_all():
    failed = 0
    for fn in CHECKS:
        c = fn()
        emulator, corrected = run_one(c, ()), run_one(c, c["names"])
        ok = corrected == "right"
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {fn.__name__} ({c['arch']}, {', '.join(c['names'])}): "
              f"emulator alone {emulator}; with our handler {corrected}")
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} checks pass")
    return failed


if __name__ == "__main__":
    sys.exit(1 if run_all() else 0)
