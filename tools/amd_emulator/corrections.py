"""Our corrections to tinygrad's AMD ISA emulator, registered at run time (nothing of tinygrad is
copied or edited): instructions it does not decode or gets wrong, each implemented here in plain
Python from AMD's ISA documentation and checked on its own by a hand-assembled program in
checks.py. `active(arch)` installs them around one launch.

An instruction handled here runs as a Python function of the wave's register files (the same
buffers the emulator's compiled instructions use), instead of the emulator's compiled code.
"""

import contextlib
import ctypes
import mmap
import os

import numpy as np

import handlers

_installed = {"on": False}

# FLASH_ATTN_ROCM_EMULATOR_LAST_PC=<file>: every instruction first writes its address into this
# memory-mapped file (then its 16 bytes), which survives a crash of the process (an emulated access that faults):
# the last address names the instruction. Slow; for diagnosis only.
_last_pc = None
if os.environ.get("FLASH_ATTN_ROCM_EMULATOR_LAST_PC"):
    with open(os.environ["FLASH_ATTN_ROCM_EMULATOR_LAST_PC"], "wb") as f:
        f.write(bytes(24))
    with open(os.environ["FLASH_ATTN_ROCM_EMULATOR_LAST_PC"], "r+b") as f:
        _last_pc = np.frombuffer(mmap.mmap(f.fileno(), 24), dtype=np.uint64)


def _traced(runner, pc):
    (prg, runtime), inst = runner
    raw = np.frombuffer(ctypes.string_at(pc, 16), dtype=np.uint64)

    class Traced:
        @staticmethod
        def fxn(*bufs):
            _last_pc[0] = pc
            _last_pc[1:] = raw
            return runtime.fxn(*bufs)
    return (prg, Traced), inst


def _emu():
    import test.mockgpu.amd.emu as emu
    return emu


@contextlib.contextmanager
def active(arch):
    """Routes the instructions `handlers` implements to them while the emulator runs."""
    emu = _emu()
    if not _installed["on"]:
        original = emu._decode_at

        def decode_with_corrections(pc, arch_name):
            runner = handlers.runner_for(pc, arch_name)
            runner = runner if runner is not None else original(pc, arch_name)
            return _traced(runner, pc) if _last_pc is not None else runner

        emu._decode_at = decode_with_corrections
        _installed["on"] = True
    yield
