#!/usr/bin/env python3
"""tools/amd_emulator/code_object.py's metadata reading, without an emulator.

    python3 tests/python/test_amd_code_object.py

A code object linked from several objects (rocBLAS's Tensile libraries: one assembled kernel
per object) carries one AMDGPU metadata note per object. Every kernel of every note must be
found; reading the first note alone left the others unlaunchable.
"""
import os
import random
import struct
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "amd_emulator"))
sys.dont_write_bytecode = True
import code_object  # noqa: E402


def pack(value):
    """MessagePack of maps, arrays, strings and small non-negative ints (what the notes hold)."""
    if isinstance(value, dict):
        assert len(value) < 16
        return bytes([0x80 | len(value)]) + b"".join(pack(k) + pack(v) for k, v in value.items())
    if isinstance(value, list):
        assert len(value) < 16
        return bytes([0x90 | len(value)]) + b"".join(pack(v) for v in value)
    if isinstance(value, str):
        data = value.encode()
        return (bytes([0xA0 | len(data)]) if len(data) < 32 else bytes([0xD9, len(data)])) + data
    assert isinstance(value, int) and 0 <= value < 128
    return bytes([value])


def note(meta):
    """One ELF note record: AMDGPU metadata (type 32, name "AMDGPU"), 4-byte aligned."""
    name, desc = b"AMDGPU\0", pack(meta)
    pad = lambda b: b + bytes(-len(b) % 4)
    return struct.pack("<III", len(name), len(desc), code_object.NT_AMDGPU_METADATA) + pad(name) + pad(desc)


class Metadata(unittest.TestCase):
    def test_kernels_of_every_note_are_merged(self):
        rng = random.Random()
        names = [f"k{rng.randrange(10**6)}_{i}" for i in range(rng.randrange(3, 9))]
        cut = rng.randrange(1, len(names))
        notes = [note({"amdhsa.target": "amdgcn-amd-amdhsa--gfx1100", "amdhsa.version": [1, 2],
                       "amdhsa.kernels": [{".name": n, ".symbol": n + ".kd"} for n in part]})
                 for part in (names[:cut], names[cut:])]
        # Both notes in one PT_NOTE segment (as a linker concatenates them), or in two.
        for segments in ([b"".join(notes)], notes):
            meta = code_object.CodeObject._metadata(segments)
            self.assertEqual([k[".name"] for k in meta["amdhsa.kernels"]], names)
            self.assertEqual(meta["amdhsa.target"], "amdgcn-amd-amdhsa--gfx1100")

    def test_no_note_is_an_error(self):
        with self.assertRaises(ValueError):
            code_object.CodeObject._metadata([b""])


if __name__ == "__main__":
    unittest.main()
