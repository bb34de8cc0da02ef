"""The emulator half of the HIP runtime stand-in (tools/hip-standin): loads code objects into
host memory and launches their kernels on tinygrad's AMD ISA emulator, doing what a command
processor does: kernarg segment from the kernel's metadata and the launcher's values,
user SGPRs from the kernel descriptor, LDS size (static + dynamic) into RSRC2, work-group ids.
Device memory is host memory: every address a kernel gets is a host address of this process.

Called from the stand-in's Rust side through `entry` (one call per driver function), which never raises: it writes
a status word and, on failure, the error text into buffers the caller passes.
"""

import ctypes
import os
import sys
import struct
import time
import traceback

from code_object import CodeObject, elf_size, emulator_arch

_modules = {}      # module id -> LoadedModule
_functions = {}    # function id -> (LoadedModule, Kernel)
_next_id = [1]
# One line per launch when set (FLASH_ATTN_ROCM_EMULATOR_TRACE): kernel, grid, seconds.
trace = []


def _new_id():
    _next_id[0] += 1
    return _next_id[0]


class LoadedModule:
    """A code object's PT_LOAD segments copied at their vaddrs into page-aligned host memory."""

    def __init__(self, image):
        self.code = CodeObject(image)
        self.arch = emulator_arch(self.code.target)
        size = self.code.image_size()
        self.memory = ctypes.create_string_buffer(size + 4096)
        self.base = (ctypes.addressof(self.memory) + 4095) & ~4095
        for vaddr, data, _ in self.code.segments:
            ctypes.memmove(self.base + vaddr, bytes(data), len(data))


def _read_u64(addr):
    return ctypes.c_uint64.from_address(addr).value


HIDDEN_U32 = {"hidden_block_count_x": 0, "hidden_block_count_y": 1, "hidden_block_count_z": 2}
HIDDEN_U16 = {"hidden_group_size_x": 0, "hidden_group_size_y": 1, "hidden_group_size_z": 2}


def build_kernargs(kernel, params, grid, block, dynamic_lds, buffer=(0, 0)):
    """The kernarg segment: explicit arguments copied from the launcher's `params` (one host
    pointer per argument, as hipModuleLaunchKernel's kernelParams), or from `buffer` (address,
    size: a kernarg buffer the launcher laid out itself, passed through `extra`; used when its
    address is not 0), hidden ones filled as the HIP runtime fills them (grid in blocks, block
    sizes, grid dims, dynamic LDS)."""
    size = max(kernel.metadata.get(".kernarg_segment_size", 0), kernel.descriptor.kernarg_size, 8)
    buf = bytearray(size)
    address, length = buffer
    if address:
        if length > size:
            raise ValueError(f"{kernel.name}: a kernarg buffer of {length} bytes for a segment of {size}")
        buf[:length] = ctypes.string_at(address, length)
    explicit = 0
    for arg in kernel.metadata.get(".args", []):
        kind, offset, width = arg[".value_kind"], arg[".offset"], arg[".size"]
        if kind in ("by_value", "global_buffer"):
            if not address:
                buf[offset:offset + width] = ctypes.string_at(_read_u64(params + 8 * explicit), width)
            explicit += 1
        elif kind in HIDDEN_U32:
            struct.pack_into("<I", buf, offset, grid[HIDDEN_U32[kind]])
        elif kind in HIDDEN_U16:
            struct.pack_into("<H", buf, offset, block[HIDDEN_U16[kind]])
        elif kind == "hidden_grid_dims":
            struct.pack_into("<H", buf, offset, 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1)
        elif kind == "hidden_dynamic_lds_size":
            struct.pack_into("<I", buf, offset, dynamic_lds)
        # Other hidden arguments (queue, hostcall, multigrid sync, ...) are left 0: none of this
        # crate's kernels read them, and a kernel that did would fault on the null address.
    return buf


def dispatch_packet(grid, block, kernel, kernarg_addr):
    """An hsa_kernel_dispatch_packet_t (64 bytes) for kernels that read the dispatch pointer."""
    packet = bytearray(64)
    struct.pack_into("<HH", packet, 0, 2, 3)
    struct.pack_into("<HHH", packet, 4, *block)
    struct.pack_into("<III", packet, 12, *(g * b for g, b in zip(grid, block)))
    struct.pack_into("<II", packet, 24, kernel.descriptor.private_segment_fixed_size,
                     kernel.descriptor.group_segment_fixed_size)
    struct.pack_into("<Q", packet, 40, kernarg_addr)
    return packet


def user_sgprs(kernel, kernarg_addr, packet_addr):
    """The user SGPRs the kernel descriptor's code properties enable, in AMD's order."""
    props, data = kernel.descriptor.code_properties, []
    pair = lambda addr: [addr & 0xFFFFFFFF, addr >> 32]
    if props & 1:   # private segment buffer: unused with flat (architected) scratch
        data += [0, 0, 0, 0]
    if props & 2:   # dispatch ptr
        data += pair(packet_addr)
    if props & 4:   # queue ptr
        data += [0, 0]
    if props & 8:   # kernarg segment ptr
        data += pair(kernarg_addr)
    if props & 16:  # dispatch id
        data += [0, 0]
    if props & 32:  # flat scratch init
        data += [0, 0]
    if props & 64:  # private segment size
        data += [kernel.descriptor.private_segment_fixed_size]
    # gfx9 kernarg preload SGPRs are left to the kernel's own prologue: execution starts at the
    # code entry, whose first instructions load them (the path of firmware without preload).
    return data


def rsrc2_with_lds(rsrc2, lds_bytes):
    granules = (lds_bytes + 511) // 512
    if granules > 0x1FF:
        raise ValueError(f"{lds_bytes} bytes of LDS do not fit RSRC2")
    return (rsrc2 & ~(0x1FF << 15)) | (granules << 15)


def load(image_addr, handle_out):
    header = ctypes.string_at(image_addr, 64)
    module = LoadedModule(ctypes.string_at(image_addr, elf_size(header)))
    module_id = _new_id()
    _modules[module_id] = module
    ctypes.c_uint64.from_address(handle_out).value = module_id


def target(module_id, out_addr, capacity):
    """The module's target (`gfx942`), NUL-terminated, at `out_addr`."""
    name = _modules[module_id].code.target.encode()[:capacity - 1]
    ctypes.memmove(out_addr, name + b"\0", len(name) + 1)


def unload(module_id):
    module = _modules.pop(module_id)
    for fid in [f for f, (m, _) in _functions.items() if m is module]:
        del _functions[fid]


def get_function(module_id, name_addr, handle_out):
    module = _modules[module_id]
    name = ctypes.string_at(name_addr).decode()
    if name not in module.code.kernels:
        raise KeyError(f"no kernel {name} in the code object (has {sorted(module.code.kernels)})")
    fid = _new_id()
    _functions[fid] = (module, module.code.kernels[name])
    ctypes.c_uint64.from_address(handle_out).value = fid


def launch(fid, gx, gy, gz, bx, by, bz, dynamic_lds, params, buffer_addr=0, buffer_size=0):
    from test.mockgpu.amd.emu import run_asm
    import corrections
    module, kernel = _functions[fid]
    kd = kernel.descriptor
    grid, block = (gx, gy, gz), (bx, by, bz)
    kernargs = ctypes.create_string_buffer(bytes(build_kernargs(kernel, params, grid, block, dynamic_lds,
                                                                (buffer_addr, buffer_size))))
    packet = ctypes.create_string_buffer(bytes(dispatch_packet(grid, block, kernel, ctypes.addressof(kernargs))))
    entry = module.base + kernel.descriptor_vaddr + kd.entry_offset
    rsrc2 = rsrc2_with_lds(kd.rsrc2, kd.group_segment_fixed_size + dynamic_lds)
    import handlers
    handlers.launch_facts["lds_bytes"] = kd.group_segment_fixed_size + dynamic_lds
    handlers.launch_facts["private_bytes"] = kd.private_segment_fixed_size
    handlers.forget_private_memory()
    if os.environ.get("FLASH_ATTN_ROCM_EMULATOR_LAST_PC"):
        print(f"emu-debug {kernel.name} {module.code.target}: code {module.base:#x}..{module.base + module.code.image_size():#x}, "
              f"entry {entry:#x}, kernargs {bytes(kernargs.raw[:128]).hex()}, args {kernel.metadata.get('.args')}",
              file=sys.stderr, flush=True)
    # FLASH_ATTN_ROCM_EMULATOR_DUMP=<kernel substring>:<kernarg offset>:<count>: before such a
    # kernel runs, print `count` f32 at the pointer its kernargs hold at that offset (a buffer an
    # earlier kernel wrote). For diagnosis.
    dump = os.environ.get("FLASH_ATTN_ROCM_EMULATOR_DUMP")
    if dump and dump.split(":")[0] in kernel.name:
        _, at, count = dump.split(":")
        pointer = _read_u64(ctypes.addressof(kernargs) + int(at))
        values = (ctypes.c_float * int(count)).from_address(pointer)
        print(f"emu-dump {kernel.name[:60]} kernarg {at} -> {pointer:#x}: {list(values)}", file=sys.stderr, flush=True)
    start = time.time()
    waves = os.environ.get("FLASH_ATTN_ROCM_EMULATOR_WAVES", "sequential")
    user = user_sgprs(kernel, ctypes.addressof(kernargs), ctypes.addressof(packet))
    with corrections.active(module.arch):
        if waves == "lockstep":
            import scheduler
            scheduler.run_lockstep(entry, gx, gy, gz, bx, by, bz, ctypes.addressof(kernargs), rsrc2,
                                   kd.private_segment_fixed_size, module.arch, user)
        elif waves == "sequential":
            run_asm(entry, module.base + module.code.image_size() - entry, gx, gy, gz, bx, by, bz,
                    ctypes.addressof(kernargs), rsrc2, kd.private_segment_fixed_size, module.arch, user)
        else:
            raise ValueError(f"FLASH_ATTN_ROCM_EMULATOR_WAVES={waves}: sequential (the default) or lockstep")
    trace.append(f"{kernel.name} {module.code.target} grid {grid} block {block} lds {dynamic_lds}: "
                 f"{time.time() - start:.2f} s")


def entry(op, status_addr, error_addr, error_capacity, *args):
    """Runs driver function `op`; status 0 on success, else 1 and the error text (UTF-8,
    NUL-terminated, cut to the buffer) at `error_addr`."""
    try:
        globals()[op](*args)
        status = 0
    except BaseException:
        message = traceback.format_exc().encode()[-(error_capacity - 1):]
        ctypes.memmove(error_addr, message + b"\0", len(message) + 1)
        status = 1
    ctypes.c_uint32.from_address(status_addr).value = status
