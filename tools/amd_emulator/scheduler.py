"""A second way to schedule the waves of a work-group on tinygrad's emulator: in lockstep.

The emulator runs each wave of a work-group on its own until it reaches `s_barrier`, then the
next. That is stricter than hardware for code that relies on all waves reading a buffer before
any of them writes it without a barrier in between (a write-after-read race that concurrent
waves normally win): CK's split-KV combine reads its LSE accumulators from LDS in every wave,
then overwrites them with the scales. In lockstep, every wave executes one instruction per round
(a wave at a barrier waits for the others), which is how the waves of one work-group progress
on a compute unit when nothing stalls them. Neither model shows real timing.

`FLASH_ATTN_ROCM_EMULATOR_WAVES=lockstep` makes driver.py launch through `run_lockstep`; the
default stays the emulator's own `run_asm`. Built from the emulator's own pieces (its wave
setup, instruction decoding, buffers), with our corrections active as for `run_asm`.
"""

import ctypes
import itertools


def run_lockstep(lib, gx, gy, gz, lx, ly, lz, args_ptr, rsrc2, scratch_size, arch, user_data):
    import test.mockgpu.amd.emu as emu
    from tinygrad.device import Buffer, BufferSpec
    from tinygrad.dtype import dtypes
    lds_bytes = ((rsrc2 >> 15) & 0x1FF) * 512
    wave_size = emu._wave_size(arch)
    threads = lx * ly * lz
    memory = Buffer("CPU", 1 << 40, dtypes.uint32, options=BufferSpec(external_ptr=0)).ensure_allocated()
    lds = Buffer("CPU", max(lds_bytes // 4, 1), dtypes.uint32).ensure_allocated()
    scratch = Buffer("CPU", scratch_size * wave_size, dtypes.uint8).ensure_allocated() if scratch_size else None
    compiled = {}

    def instruction(pc):
        if pc not in compiled:
            (prg, runtime), inst = emu._decode_at(pc, arch)  # the corrections' wrapper when active
            barrier = (hasattr(inst, "op") and (inst.op in emu._BARRIER_OPS or inst.op in emu._BARRIER_SOP1_OPS))
            compiled[pc] = (runtime.fxn, prg.arg.globals, barrier)
        return compiled[pc]

    def buffers(state):
        address = lambda b: ctypes.c_uint64(b._buf.va_addr)
        return [address(state.sgpr_buf), address(state.vgpr_buf), address(memory), address(lds),
                ctypes.c_uint64(scratch._buf.va_addr if scratch else 0), address(state.accvgpr_buf)]

    def work_group(gidx, gidy, gidz):
        waves = [emu._init_wave(lib, start, threads, lx, ly, lz, args_ptr, rsrc2, scratch_size, arch, gidx, gidy, gidz,
                                user_data, wave_size) for start in range(0, threads, wave_size)]
        bufs = [buffers(w) for w in waves]
        waiting = [False] * len(waves)   # stopped past an s_barrier
        finished = [False] * len(waves)
        for _ in range(1 << 24):
            running = [i for i in range(len(waves)) if not finished[i] and not waiting[i]]
            if not running:
                if all(finished):
                    return
                waiting = [False] * len(waves)   # every live wave reached the barrier: release them
                continue
            for i in running:
                pc = waves[i].pc
                if pc == emu.ENDPGM_PC:
                    finished[i] = True
                    continue
                fxn, globals_list, barrier = instruction(pc)
                fxn(*[bufs[i][g] for g in globals_list])
                waiting[i] = barrier
        raise RuntimeError("lockstep: 16M rounds in one work-group, likely an endless loop")

    with emu._MXCSRContext():
        for gidz, gidy, gidx in itertools.product(range(gz), range(gy), range(gx)):
            work_group(gidx, gidy, gidz)
            if lds_bytes:
                ctypes.memset(lds._buf.va_addr, 0, lds_bytes)
