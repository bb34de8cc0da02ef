"""Hand-assembled check programs for one instruction: a prologue loads each input VGPR lane by
lane from memory (`global_load` at lane * 4), the instruction under test runs, an epilogue stores
each output VGPR the same way. Encoded with tinygrad's instruction classes (its assembler DSL;
nothing of it is copied here) and run on its emulator with our corrections on or off."""

import contextlib
import ctypes

import numpy as np

import corrections
import handlers

USER_SGPRS = 4  # s[0:1] = input base, s[2:3] = output base


def isa(arch):
    if arch == "cdna":
        from tinygrad.runtime.autogen.amd.cdna import ins
    elif arch == "rdna4":
        from tinygrad.runtime.autogen.amd.rdna4 import ins
    else:
        from tinygrad.runtime.autogen.amd.rdna3 import ins
    return ins


def _load_store(arch, store, reg, offset):
    i = isa(arch)
    if arch == "cdna":
        return (i.global_store_dword(addr=i.v[1], data=i.v[reg], saddr=i.s[2:3], offset=offset) if store
                else i.global_load_dword(vdst=i.v[reg], addr=i.v[1], saddr=i.s[0:1], offset=offset))
    if arch == "rdna4":
        return (i.global_store_b32(vaddr=i.v[1:2], vsrc=i.v[reg], saddr=i.s[2:3], ioffset=offset) if store
                else i.global_load_b32(vdst=i.v[reg], vaddr=i.v[1:2], saddr=i.s[0:1], ioffset=offset))
    return (i.global_store_b32(addr=i.v[1], data=i.v[reg], saddr=i.s[2:3], offset=offset) if store
            else i.global_load_b32(vdst=i.v[reg], addr=i.v[1], saddr=i.s[0:1], offset=offset))


def _wait(arch):
    i = isa(arch)
    if arch == "rdna4":
        return [i.s_wait_loadcnt(simm16=0), i.s_wait_storecnt(simm16=0), i.s_wait_dscnt(simm16=0)]
    return [i.s_waitcnt(simm16=0)]


def barrier(arch):
    """The work-group barrier: s_barrier, or on RDNA4 s_barrier_signal -1 (SOP1 0xBE804EC1:
    op 78, ssrc0 = inline -1) then s_barrier_wait -1."""
    i = isa(arch)
    if arch == "rdna4":
        return [0xBE804EC1.to_bytes(4, "little"), i.s_barrier_wait(simm16=0xFFFF)]
    return [i.s_barrier()]


def assemble(arch, body, inputs, outputs, lanes):
    """Bytes of: v1 = lane * 4; load `inputs` registers; `body`; store `outputs` registers."""
    i = isa(arch)
    stride = lanes * 4
    code = [i.v_lshlrev_b32_e32(i.v[1], 2, i.v[0])]
    code += [_load_store(arch, False, reg, n * stride) for n, reg in enumerate(inputs)]
    code += _wait(arch) + list(body) + _wait(arch)
    code += [_load_store(arch, True, reg, n * stride) for n, reg in enumerate(outputs)]
    code += _wait(arch) + [i.s_endpgm()]
    return b"".join(x if isinstance(x, bytes) else x.to_bytes() for x in code)


@contextlib.contextmanager
def only_corrections(names):
    """Our handlers limited to `names` (mnemonics) while the block runs; () runs the emulator as
    it is."""
    saved = handlers.enabled
    handlers.enabled = set(names)
    try:
        yield
    finally:
        handlers.enabled = saved


def run(arch, body, inputs, outputs, lanes=None, lds_bytes=0, corrected=(), memory_out=None, private_bytes=0):
    """Runs the program on `lanes` lanes (the wave size by default); `inputs` maps VGPR -> u32
    per lane. Returns {VGPR: u32 per lane} for `outputs`. Offsets of the loads and stores must fit
    the instruction's field (a dozen registers of 64 lanes at most). The inputs lie at s[0:1] as
    [register][lane] u32 rows; `memory_out` (a list) receives those rows after the run, for
    programs that store there."""
    from test.mockgpu.amd.emu import run_asm
    lanes = lanes or (64 if arch == "cdna" else 32)
    regs = sorted(inputs)
    # One spare row: an emulator store that writes past the bytes it should (the defects the
    # checks show) must not corrupt this process's heap.
    src = np.zeros((len(regs) + 1, lanes), np.uint32)
    for n, reg in enumerate(regs):
        src[n] = np.asarray(inputs[reg], dtype=np.uint64).astype(np.uint32)
    dst = np.zeros((max(len(outputs), 1), lanes), np.uint32)
    code = assemble(arch, body, regs, outputs, lanes)
    memory = ctypes.create_string_buffer(code + b"\0" * 256)
    user = [src.ctypes.data & 0xFFFFFFFF, src.ctypes.data >> 32, dst.ctypes.data & 0xFFFFFFFF, dst.ctypes.data >> 32]
    granules = (lds_bytes + 511) // 512
    rsrc2 = (USER_SGPRS << 1) | (granules << 15)
    handlers.launch_facts["lds_bytes"] = granules * 512
    handlers.launch_facts["private_bytes"] = private_bytes
    handlers.forget_private_memory()
    with corrections.active(arch), only_corrections(corrected):
        run_asm(ctypes.addressof(memory), len(code), 1, 1, 1, lanes, 1, 1, 0, rsrc2, private_bytes, arch, user)
    if memory_out is not None:
        memory_out.append(src.copy())
    return {reg: dst[n].copy() for n, reg in enumerate(outputs)}
