"""An AMD HSA code object (ELF) read as a loader does: its PT_LOAD segments, the 64-byte kernel
descriptor of each kernel (`<kernel>.kd`) and the AMDGPU metadata note (msgpack) that gives each
kernel's argument layout. Standard library only; nothing here runs code."""

import struct
from dataclasses import dataclass

PT_LOAD, PT_NOTE, SHT_SYMTAB = 1, 4, 2
NT_AMDGPU_METADATA = 32


def emulator_arch(target):
    """The emulator's name of the ISA family of `target` (gfx1100 -> rdna3)."""
    if target.startswith("gfx9"):
        return "cdna"
    if target.startswith("gfx12"):
        return "rdna4"
    if target.startswith("gfx11"):
        return "rdna3"
    raise ValueError(f"{target}: the emulator runs RDNA3, RDNA4 and CDNA code only")


def elf_size(header):
    """Bytes of an ELF image from its 64-byte header (the section table ends LLVM's output)."""
    shoff, = struct.unpack_from("<Q", header, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
    phoff, = struct.unpack_from("<Q", header, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
    return max(shoff + shentsize * shnum, phoff + phentsize * phnum)


def msgpack(data, i=0):
    """(value, next index) of the msgpack object at data[i] (the subset AMDGPU metadata uses)."""
    b = data[i]
    if b <= 0x7F:
        return b, i + 1
    if b >= 0xE0:
        return b - 0x100, i + 1
    if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
        n, i = (b & 0xF, i + 1) if b <= 0x8F else _length(data, i, 2 if b == 0xDE else 4)
        out = {}
        for _ in range(n):
            key, i = msgpack(data, i)
            out[key], i = msgpack(data, i)
        return out, i
    if 0x90 <= b <= 0x9F or b in (0xDC, 0xDD):
        n, i = (b & 0xF, i + 1) if b <= 0x9F else _length(data, i, 2 if b == 0xDC else 4)
        out = []
        for _ in range(n):
            item, i = msgpack(data, i)
            out.append(item)
        return out, i
    if 0xA0 <= b <= 0xBF or b in (0xD9, 0xDA, 0xDB):
        n, i = (b & 0x1F, i + 1) if b <= 0xBF else _length(data, i, {0xD9: 1, 0xDA: 2, 0xDB: 4}[b])
        return data[i:i + n].decode(), i + n
    if b in (0xC4, 0xC5, 0xC6):
        n, i = _length(data, i, {0xC4: 1, 0xC5: 2, 0xC6: 4}[b])
        return bytes(data[i:i + n]), i + n
    fixed = {0xC0: (None, 0), 0xC2: (False, 0), 0xC3: (True, 0)}
    if b in fixed:
        return fixed[b][0], i + 1
    formats = {0xCC: "<B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
               0xCA: ">f", 0xCB: ">d"}
    if b in formats:
        fmt = formats[b]
        return struct.unpack_from(fmt, data, i + 1)[0], i + 1 + struct.calcsize(fmt)
    raise ValueError(f"msgpack byte {b:#x} at {i} is not handled")


def _length(data, i, width):
    return int.from_bytes(data[i + 1:i + 1 + width], "big"), i + 1 + width


@dataclass
class KernelDescriptor:
    """The fields of AMD's 64-byte kernel descriptor a command processor reads."""
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int
    rsrc3: int
    rsrc1: int
    rsrc2: int
    code_properties: int
    kernarg_preload: int

    @classmethod
    def parse(cls, raw):
        group, private, kernarg = struct.unpack_from("<III", raw, 0)
        entry, = struct.unpack_from("<q", raw, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
        props, preload = struct.unpack_from("<HH", raw, 56)
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, props, preload)


@dataclass
class Kernel:
    name: str
    descriptor_vaddr: int
    descriptor: KernelDescriptor
    metadata: dict


class CodeObject:
    """The parsed image: `segments` (vaddr, bytes, memsz), `kernels` by name, `target`."""

    def __init__(self, image):
        if image[:4] != b"\x7fELF" or image[4] != 2:
            raise ValueError("not a 64-bit ELF code object")
        self.segments, notes = [], []
        phoff, = struct.unpack_from("<Q", image, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
        for k in range(phnum):
            ptype, _, offset, vaddr, _, filesz, memsz, _ = struct.unpack_from("<IIQQQQQQ", image, phoff + k * phentsize)
            if ptype == PT_LOAD:
                self.segments.append((vaddr, image[offset:offset + filesz], memsz))
            elif ptype == PT_NOTE:
                notes.append(image[offset:offset + filesz])
        metadata = self._metadata(notes)
        # "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" -> "gfx942"
        self.target = metadata.get("amdhsa.target", "").rsplit("-", 1)[-1].split(":")[0]
        symbols = self._symbols(image)
        self.kernels = {}
        for meta in metadata.get("amdhsa.kernels", []):
            name = meta[".name"]
            kd = symbols[meta[".symbol"]]
            self.kernels[name] = Kernel(name, kd, KernelDescriptor.parse(self.read(kd, 64)), meta)

    def read(self, vaddr, size):
        for base, data, _ in self.segments:
            if base <= vaddr and vaddr + size <= base + len(data):
                return data[vaddr - base:vaddr - base + size]
        raise ValueError(f"{vaddr:#x}+{size} lies in no loaded segment")

    def image_size(self):
        return max(vaddr + memsz for vaddr, _, memsz in self.segments)

    @staticmethod
    def _metadata(notes):
        """The AMDGPU metadata. A code object linked from several objects (rocBLAS's Tensile
        libraries: one assembled kernel each) carries one note per object; their kernel lists
        are merged, the rest taken from the first."""
        merged = None
        for note in notes:
            i = 0
            while i + 12 <= len(note):
                namesz, descsz, ntype = struct.unpack_from("<III", note, i)
                name_end = i + 12 + ((namesz + 3) & ~3)
                if ntype == NT_AMDGPU_METADATA and note[i + 12:i + 12 + namesz].rstrip(b"\0") == b"AMDGPU":
                    meta = msgpack(note[name_end:name_end + descsz])[0]
                    if merged is None:
                        merged = dict(meta, **{"amdhsa.kernels": list(meta.get("amdhsa.kernels", []))})
                    else:
                        merged["amdhsa.kernels"] += meta.get("amdhsa.kernels", [])
                i = name_end + ((descsz + 3) & ~3)
        if merged is None:
            raise ValueError("no AMDGPU metadata note")
        return merged

    @staticmethod
    def _symbols(image):
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + k * shentsize) for k in range(shnum)]
        out = {}
        for _, stype, _, _, offset, size, link, _, _, entsize in sections:
            if stype != SHT_SYMTAB:
                continue
            strtab = sections[link]
            strings = image[strtab[4]:strtab[4] + strtab[5]]
            for j in range(size // entsize):
                name_off, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", image, offset + j * entsize)
                out[strings[name_off:strings.index(b"\0", name_off)].decode()] = value
        return out
