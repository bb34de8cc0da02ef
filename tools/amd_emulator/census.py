"""A census of the instructions in AMD code objects against what the emulator can execute: every
instruction of each kernel's code is decoded and compiled by the emulator (with our corrections
installed), as a launch would, without running it. Prints one line per distinct mnemonic:
how often it occurs, and whether the emulator compiles it, our handler runs it, or it fails (with
the reason). A mnemonic that compiles may still compute the wrong thing: the known defects are
the corrections' business (handlers.py, checked by checks.py).

    python3 tools/amd_emulator/census.py [--tinygrad DIR] CODE_OBJECT_OR_BINARY...

A binary (an executable with a `.hip_fatbin` section: hipcc's CK code) contributes every code
object of its clang offload bundles; a code object is an AMDGPU ELF (our Triton kernels).
"""

import argparse
import collections
import ctypes
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def sections(image):
    """{name: (offset, size)} of an ELF64 file."""
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + k * shentsize) for k in range(shnum)]
    names = headers[shstrndx]
    strings = image[names[4]:names[4] + names[5]]
    out = {}
    for name_off, _, _, _, offset, size, _, _, _, _ in headers:
        out[strings[name_off:strings.index(b"\0", name_off)].decode()] = (offset, size)
    return out


def bundled_code_objects(image):
    """(target id, bytes) of every device code object in the binary's clang offload bundles."""
    out = []
    start = image.find(BUNDLE_MAGIC)
    while start >= 0:
        count, = struct.unpack_from("<Q", image, start + 24)
        at = start + 32
        for _ in range(count):
            offset, size, id_len = struct.unpack_from("<QQQ", image, at)
            target = image[at + 24:at + 24 + id_len].decode()
            at += 24 + id_len
            if size and target.startswith("hipv4-amdgcn"):
                out.append((target, image[start + offset:start + offset + size]))
        start = image.find(BUNDLE_MAGIC, at)
    return out


def code_objects(path):
    image = open(path, "rb").read()
    if image[:4] == b"\x7fELF" and image[18] == 0xE0:  # EM_AMDGPU
        return [(os.path.basename(path), image)]
    return [(f"{os.path.basename(path)}:{target}", co) for target, co in bundled_code_objects(image)]


def census(objects):
    from code_object import CodeObject, emulator_arch
    import corrections
    import handlers
    emu = sys.modules["test.mockgpu.amd.emu"]
    seen = collections.OrderedDict()  # mnemonic -> [count, status, arch]
    for label, image in objects:
        code = CodeObject(image)
        arch = emulator_arch(code.target)
        text_offset, text_size = sections(image)[".text"]
        memory = ctypes.create_string_buffer(image[text_offset:text_offset + text_size] + bytes(16))
        base = ctypes.addressof(memory)
        pc = 0
        with corrections.active(arch):
            while pc < text_size:
                raw = ctypes.string_at(base + pc, 16)
                try:
                    buffer = handlers.buffer_instruction(raw, arch)
                    if buffer:
                        name, size = buffer
                    else:
                        inst = emu.decode_inst(raw, arch)
                        size = inst.size()
                        name = emu._op_name(inst).upper()
                except Exception as e:  # not decodable: stop this object, say where
                    key = f"(undecodable at {label}+{pc:#x}: {raw[:8].hex()})"
                    seen.setdefault(key, [0, f"fails: {type(e).__name__}: {e}", arch])[0] += 1
                    break
                entry = seen.setdefault(name, [0, None, arch])
                entry[0] += 1
                if entry[1] is None:
                    try:
                        ours = handlers.runner_for(base + pc, arch) is not None
                    except Exception as e:
                        entry[1], ours = f"fails: {str(e)[:160]}", None
                    if ours:
                        entry[1] = "our handler"
                    elif ours is not None:
                        try:
                            emu._decode_at(base + pc, arch)
                            entry[1] = "compiles"
                        except Exception as e:
                            entry[1] = f"fails: {str(e)[:160]}"
                pc += size
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--tinygrad", default=os.environ.get("FLASH_ATTN_ROCM_TINYGRAD"))
    args = parser.parse_args()
    if not args.tinygrad:
        sys.exit("census: --tinygrad DIR or FLASH_ATTN_ROCM_TINYGRAD (a tinygrad checkout)")
    sys.path[:0] = [HERE, args.tinygrad]
    import test.mockgpu.amd.emu  # noqa: F401
    objects = [o for p in args.paths for o in code_objects(p)]
    seen = census(objects)
    failing = [n for n, (_, status, _) in seen.items() if status.startswith("fails")]
    for name, (count, status, arch) in sorted(seen.items()):
        print(f"{name:40s} {arch:6s} {count:7d}  {status}")
    print(f"census: {len(objects)} code objects, {len(seen)} mnemonics, {len(failing)} the emulator cannot run: "
          f"{' '.join(failing) or 'none'}")


if __name__ == "__main__":
    main()
