"""The launch contract of the compiled kernels: what src/triton/launch.rs passes (threads per
block, the argument list, dynamic LDS) checked against what a code object says it takes, read
from its AMDGPU metadata (or, for sm_90, its PTX). kernels/aot.py refuses any kernel that
disagrees, so a mismatch fails the build instead of a launch on a user's GPU.

Standard library only: the build's venv has triton and nothing else, and
scripts/check_triton_objects.py imports aot.py (and so this module) with any python3.
"""

import re


def launch_args(sig, scratch_args):
    """(name, bytes) of every argument src/triton/launch.rs passes, in order: the kernel's
    non-constexpr parameters (the order of `sig`, the kernel's own), then `scratch_args` null
    pointers for the scratch buffers Triton appends. A host TMA descriptor (`tensordesc<...>`)
    is passed as Triton's launcher passes it: the 128-byte CUtensorMap, then the view's shape
    (i32 each) and strides (i64 each)."""
    sizes = {"i32": 4, "i64": 8, "fp32": 4}
    args = []
    for arg, ty in sig.items():
        if ty == "constexpr":
            continue
        if ty.startswith("tensordesc<"):
            rank = ty.split("]")[0].count(",") + 1
            args.append((arg, 128))
            args += [(f"{arg} shape {i}", 4) for i in range(rank)] + [(f"{arg} stride {i}", 8) for i in range(rank)]
            continue
        if not ty.startswith("*") and ty not in sizes:
            raise ValueError(f"no launch size for parameter {arg} of type {ty}")
        args.append((arg, 8 if ty.startswith("*") else sizes[ty]))
    return args + [(f"scratch pointer {i + 1}", 8) for i in range(scratch_args)]


def _yaml_scalar(text):
    if text in ("[]", "{}"):
        return [] if text == "[]" else {}
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _yaml_node(lines, i, indent):
    """The sequence or mapping whose entries start at lines[i] at `indent` (lines are
    (indent, text) pairs); returns (value, index of the first line after it)."""
    if lines[i][1] == "-" or lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1] == "-" or lines[i][1].startswith("- ")):
            text = lines[i][1]
            rest = text[1:].lstrip()
            if not rest:
                nested = i + 1 < len(lines) and lines[i + 1][0] > indent
                item, i = _yaml_node(lines, i + 1, lines[i + 1][0]) if nested else (None, i + 1)
            elif re.match(r"[^\s'\"][^:]*:(\s|$)", rest):
                # "- key: value" opens a mapping whose keys line up with this first one.
                lines[i] = (indent + len(text) - len(rest), rest)
                item, i = _yaml_node(lines, i, lines[i][0])
            else:
                item, i = _yaml_scalar(rest), i + 1
            items.append(item)
        return items, i
    mapping = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        found = re.match(r"([^\s'\"][^:]*):(?:\s+(.*))?$", lines[i][1])
        if not found:
            raise ValueError(f"unexpected YAML line {lines[i][1]!r}")
        key, value = found.group(1), (found.group(2) or "").strip()
        i += 1
        nested = i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1].startswith("- ")))
        if value:
            mapping[key] = _yaml_scalar(value)
        elif nested:
            mapping[key], i = _yaml_node(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i


def parse_yaml_block(text):
    """The block-style YAML that LLVM writes for AMDGPU metadata: mappings, sequences and plain
    or quoted scalars (as strings); no flow collections but empty ones, no multi-line scalars.
    (The build's venv has triton only, no YAML library.)"""
    lines = [(len(raw) - len(raw.lstrip(" ")), raw.strip()) for raw in text.splitlines()
             if raw.strip() and raw.strip() not in ("---", "...") and not raw.lstrip().startswith("#")]
    if not lines:
        return {}
    value, end = _yaml_node(lines, 0, lines[0][0])
    if end != len(lines):
        raise ValueError(f"unexpected YAML line {lines[end][1]!r}")
    return value


def amdgpu_kernel_facts(asm, kernel):
    """What launching `kernel` depends on, from the `.amdgpu_metadata` block of its AMDGCN
    assembly: the largest work-group it was compiled for, its wave size, the byte size of each
    explicit argument (the runtime fills the `hidden_*` ones), its static LDS, its scratch per
    work-item and whether it needs a dynamic stack."""
    start = asm.find(".amdgpu_metadata")
    end = asm.find(".end_amdgpu_metadata", start)
    if start < 0 or end < 0:
        raise ValueError("no .amdgpu_metadata block in the AMDGCN assembly")
    doc = parse_yaml_block(asm[start + len(".amdgpu_metadata"):end])
    entries = [k for k in (doc.get("amdhsa.kernels") or []) if k.get(".name") == kernel]
    if len(entries) != 1:
        raise ValueError(f"{len(entries)} metadata entries for kernel {kernel}")
    md = entries[0]

    def number(key):
        if key not in md:
            raise ValueError(f"no {key} in the metadata of kernel {kernel}")
        return int(md[key])

    args = [a for a in (md.get(".args") or []) if not a.get(".value_kind", "").startswith("hidden_")]
    return {"threads": number(".max_flat_workgroup_size"), "wave": number(".wavefront_size"),
            "arg_sizes": [int(a[".size"]) for a in args], "static_shared": number(".group_segment_fixed_size"),
            "private": number(".private_segment_fixed_size"),
            "dynamic_stack": md.get(".uses_dynamic_stack", "false") == "true"}


def ptx_kernel_facts(ptx, kernel):
    """amdgpu_kernel_facts for an NVIDIA kernel, from the PTX that ptxas turned into its cubin:
    the block size of `.reqntid` (or `.maxntid`) and the byte size of each `.param`. Triton
    declares its shared memory dynamic (`extern .shared`): no static part to add."""
    entry = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\(([^)]*)\)([^{]*)\{", ptx)
    if not entry:
        raise ValueError(f"no .entry {kernel} in the PTX")
    sizes = []
    for param in filter(None, (p.strip() for p in entry.group(1).split(","))):
        # A by-value CUtensorMap: `.param .align 64 .b8 name[128]`.
        blob = re.match(r"\.param\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]$", param)
        if blob:
            sizes.append(int(blob.group(1)))
            continue
        width = re.match(r"\.param\s+\.[bsuf](\d+)\b", param)
        if not width or "[" in param:
            raise ValueError(f"unexpected PTX parameter {param!r}")
        sizes.append(int(width.group(1)) // 8)
    block = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", entry.group(2))
    threads = 1
    for dim in block.groups() if block else ():
        threads *= int(dim or 1)
    return {"threads": threads if block else None, "wave": None, "arg_sizes": sizes, "static_shared": 0,
            "private": 0, "dynamic_stack": False}


# Shared memory one block may opt into on the NVIDIA targets (cudaDevAttrMaxSharedMemoryPerBlockOptin).
CUDA_SHARED = {"sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}


def shared_limit(target):
    """Bytes of LDS / shared memory one work-group of `target` may use: 64 KiB on every gfx9,
    gfx11 and gfx12 GPU; on NVIDIA what a block may opt into: 163 KiB on sm_80, 99 KiB on sm_86
    and sm_89, 227 KiB on sm_90."""
    return CUDA_SHARED.get(target, 64 * 1024)


def launch_problems(facts, threads, wave, args, shared, limit):
    """How a compiled kernel (`facts`, from amdgpu_kernel_facts or ptx_kernel_facts) disagrees
    with its launch by src/triton/launch.rs: `threads` per block, Triton compiled for `wave`-wide
    waves, `args` (launch_args) and `shared` bytes of dynamic LDS. [] when they agree."""
    problems = []
    # Triton compiles for exactly num_warps waves ("amdgpu-flat-work-group-size" 1,num_warps*wave;
    # PTX .reqntid num_warps*32) and its layouts assume that many: fewer threads than the maximum
    # leave part of every tile uncomputed, more make the launch fail.
    if facts["threads"] is not None and facts["threads"] != threads:
        problems.append(f"compiled for {facts['threads']} threads per block, launched with {threads}")
    if facts["wave"] is not None and facts["wave"] != wave:
        problems.append(f"compiled for {facts['wave']}-wide waves, aot.py assumed {wave} (threads = warps x {wave})")
    sizes = [size for _, size in args]
    if len(facts["arg_sizes"]) != len(args):
        problems.append(f"{len(facts['arg_sizes'])} kernel arguments, the launcher passes {len(args)} "
                        f"(its non-constexpr parameters, then the scratch pointers: {', '.join(n for n, _ in args)})")
    elif facts["arg_sizes"] != sizes:
        problems += [f"argument {i} ({name}) is {got} bytes in the kernel, the launcher passes {size}"
                     for i, ((name, size), got) in enumerate(zip(args, facts["arg_sizes"])) if got != size]
    if facts["static_shared"] + shared > limit:
        problems.append(f"{facts['static_shared']} bytes of static and {shared} of dynamic LDS/shared memory, "
                        f"more than the {limit} a work-group may have")
    # The runtime sizes scratch from the private segment size; a dynamic stack it cannot size.
    if facts["dynamic_stack"]:
        problems.append(f"needs a dynamic stack (calls or recursion; {facts['private']} bytes of fixed scratch)")
    return problems
