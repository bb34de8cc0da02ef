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


@check
def mfma_f32_32x32x8_f16():
    """MI300 ISA, dense MFMA 32x32x8: A[i][k] is element k % 4 of lane i + 32 * (k // 4), B[k][j]
    of lane j + 32 * (k // 4) (two f16 per VGPR, low half first); D[i][j] is register
    (i % 4) + 4 * (i // 8) of lane j + 32 * ((i // 4) % 2). C = inline 0."""
    ins = programs.isa("cdna")
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (32, 8)).astype(np.float16)   # small integers: exact in f16 and f32
    b = rng.integers(-4, 5, (8, 32)).astype(np.float16)
    a_regs = np.zeros((2, 64), np.uint32)
    b_regs = np.zeros((2, 64), np.uint32)
    bits = lambda x: np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)
    for lane in range(64):
        ks = range(4 * (lane // 32), 4 * (lane // 32) + 4)
        av, bv = [a[lane % 32, k] for k in ks], [b[k, lane % 32] for k in ks]
        a_regs[:, lane] = halves_to_words(bits(av[0::2]), bits(av[1::2]))
        b_regs[:, lane] = halves_to_words(bits(bv[0::2]), bits(bv[1::2]))
    d = a.astype(np.float32) @ b.astype(np.float32)
    expected = np.zeros((16, 64), np.float32)
    for lane in range(64):
        for r in range(16):
            expected[r, lane] = d[(r % 4) + 8 * (r // 4) + 4 * (lane // 32), lane % 32]
    body = [ins.v_mfma_f32_32x32x8_f16(ins.v[20:35], ins.v[2:3], ins.v[4:5], 0)]
    inputs = {2: a_regs[0], 3: a_regs[1], 4: b_regs[0], 5: b_regs[1]}
    return "cdna", body, inputs, list(range(20, 32)), expected[:12].view(np.uint32), ["V_MFMA_F32_32X32X8_F16"]


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
    return "cdna", body, {2: x.view(np.uint32), 3: old, 4: keep}, [130, 4], expected, ["V_CVT_F16_F32_E32"]


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
    return "cdna", body, {2: addr, 3: data}, [4], expected, ["DS_BPERMUTE_B32"]


def run_all():
    failed = 0
    for fn in CHECKS:
        arch, body, inputs, outputs, expected, names = fn()
        results = {}
        for label, corrected in (("emulator", ()), ("corrected", names)):
            try:
                out = programs.run(arch, body, inputs, outputs, corrected=corrected)
                got = np.stack([out[r] for r in outputs])
                results[label] = "right" if np.array_equal(got, expected) else \
                    f"wrong ({int((got != expected).sum())} of {expected.size} words)"
            except Exception as e:  # the emulator as it is may not decode the instruction
                results[label] = f"fails: {type(e).__name__}: {str(e)[:120]}"
        ok = results["corrected"] == "right"
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {fn.__name__} ({arch}): emulator {results['emulator']}; with our handler {results['corrected']}")
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} checks pass")
    return failed


if __name__ == "__main__":
    sys.exit(1 if run_all() else 0)
