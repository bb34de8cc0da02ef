"""Instruction handlers (filled in as the kernels need them); see corrections.py."""


def nop_cache_invalidates(module):
    pass


def runner_for(pc, arch):
    return None
