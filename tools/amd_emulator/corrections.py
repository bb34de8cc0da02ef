"""Our corrections to tinygrad's AMD ISA emulator, registered at run time (nothing of tinygrad is
copied or edited): instructions it does not decode or gets wrong, each implemented here in plain
Python from AMD's ISA documentation and checked on its own by a hand-assembled program in
checks.py. `active(arch)` installs them around one launch.

An instruction handled here runs as a Python function of the wave's register files (the same
buffers the emulator's compiled instructions use), instead of the emulator's compiled code.
"""

import contextlib

import handlers

_installed = {"on": False}


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
            return runner if runner is not None else original(pc, arch_name)

        emu._decode_at = decode_with_corrections
        _installed["on"] = True
    yield
