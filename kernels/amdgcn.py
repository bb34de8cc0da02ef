"""AMDGPU assembly as LLVM prints it for a Triton kernel: basic blocks, loops (from LLVM's loop
annotations) and accesses to the private segment (spills and reloads). kernels/aot.py counts a
code object's scratch accesses inside loops with it (the manifest's `loop_spills`, which the
build's warning reports), scripts/kernel_report.py reads the key loop's instructions with it.

Standard library only, like launch_contract.py.
"""

import collections
import re

Insn = collections.namedtuple("Insn", "mnemonic operands comment")


class Block:
    def __init__(self, name, comment=""):
        self.name = name          # "BB0_14" for `.LBB0_14:`, "%bb.15" for `; %bb.15:`
        self.comment = comment    # the label line's comment and the comment lines under it
        self.insns = []


def kernel_body(asm, kernel=None):
    """The lines of `kernel`'s function body (from its label to .Lfunc_end), or every line."""
    lines = asm.splitlines()
    if kernel:
        start = next((i for i, line in enumerate(lines) if line.partition(";")[0].strip() == f"{kernel}:"), None)
        if start is not None:
            end = next((i for i in range(start, len(lines)) if re.match(r"\.Lfunc_end\d*:", lines[i].strip())),
                       len(lines))
            return lines[start + 1:end]
    return lines


def parse_blocks(asm, kernel=None):
    """The basic blocks of the kernel, in layout order, with their instructions."""
    blocks = [Block("entry")]
    for raw in kernel_body(asm, kernel):
        code, _, comment = raw.partition(";")
        code = code.strip()
        if not code:
            bb = re.match(r"\s*;\s*(%bb\.\d+):(.*)$", raw)
            if bb:
                blocks.append(Block(bb.group(1), bb.group(2)))
            elif comment and not blocks[-1].insns:
                blocks[-1].comment += "\n" + comment
            continue
        label = re.match(r"([.\w$]+):$", code)
        if label:
            # Basic blocks start at `.LBB` labels and `; %bb.N:` lines; other labels (.Ltmp
            # line-table marks, .Lfunc_begin) lie inside blocks.
            if label.group(1).startswith(".LBB"):
                blocks.append(Block(label.group(1)[2:], comment))
            continue
        if code.startswith("."):
            continue
        mnemonic, _, operands = code.partition(" ")
        blocks[-1].insns.append(Insn(mnemonic, operands.strip(), comment.strip()))
    return [b for b in blocks if b.insns or b.name != "entry"]


def branch_target(insn):
    """The block name a branch (`s_branch`, `s_cbranch_*`) jumps to, or None for another
    instruction."""
    if not (insn.mnemonic == "s_branch" or insn.mnemonic.startswith("s_cbranch")):
        return None
    target = insn.operands.split(",")[-1].strip()
    return target[2:] if target.startswith(".LBB") else target


def find_loops(blocks):
    """{header: [block indices]} of every loop, nested loops' blocks included, from LLVM's loop
    annotations. Without annotations (hand-stripped assembly), a label and the last backward
    branch to it delimit a loop."""
    innermost, parent = {}, {}
    for i, block in enumerate(blocks):
        header = re.search(r"Loop Header: Depth=(\d+)", block.comment)
        if header:
            innermost[i] = block.name
            depth = int(header.group(1))
            parents = {int(d): h for h, d in re.findall(r"Parent Loop (\S+) Depth=(\d+)", block.comment)}
            if depth - 1 in parents:
                parent[block.name] = parents[depth - 1]
            continue
        member = re.search(r"in Loop: Header=(\S+) Depth=\d+", block.comment)
        if member:
            innermost[i] = member.group(1)
    loops = collections.defaultdict(list)
    if innermost:
        for i, header in innermost.items():
            seen = set()
            while header and header not in seen:
                seen.add(header)
                loops[header].append(i)
                header = parent.get(header)
        return dict(loops)
    index = {b.name: i for i, b in enumerate(blocks)}
    for i, block in enumerate(blocks):
        for insn in block.insns:
            target = branch_target(insn)
            if target is not None and index.get(target, i + 1) <= i:
                loops[target] = list(range(index[target], i + 1))
    return dict(loops)


def buffer_resource(insn):
    """The resource descriptor operand (an SGPR quad) of a `buffer_*` load or store, or None."""
    if not (insn.mnemonic.startswith("buffer_") and ("load" in insn.mnemonic or "store" in insn.mnemonic)):
        return None
    fields = [f.strip() for f in insn.operands.split(",")]
    return fields[2] if len(fields) > 2 else None


def scratch_resources(blocks):
    """The resource descriptors through which the kernel reaches its private segment: those of
    the `buffer_*` stores and loads LLVM comments as a Spill or Reload."""
    return {buffer_resource(i) for b in blocks for i in b.insns
            if buffer_resource(i) and ("Spill" in i.comment or "Reload" in i.comment)}


def is_scratch_access(insn, resources=()):
    """A store to or load from the private segment: any `scratch_*` instruction (a spill, a
    reload or a stack object; gfx940+ and gfx11+ address scratch that way), or a `buffer_*` one
    that LLVM marks as a spill or reload or that uses the same resource descriptor as those
    (`resources`: scratch_resources; gfx90a and older and gfx10 spill through buffer
    instructions, and LLVM comments only some of the reloads; Triton's own buffer loads and
    stores, with a resource of their own, are not scratch)."""
    if insn.mnemonic.startswith("scratch_"):
        return True
    resource = buffer_resource(insn)
    if resource:
        return "Spill" in insn.comment or "Reload" in insn.comment or resource in resources
    return False


def loop_scratch_accesses(asm, kernel=None):
    """Scratch stores and loads of `kernel` that sit inside a loop. In attn_fwd every loop is a
    key loop (the masked and unmasked passes over key tiles), so these run once per key tile,
    where a spill costs time; the others run once per program."""
    blocks = parse_blocks(asm, kernel)
    resources = scratch_resources(blocks)
    in_loops = {i for indices in find_loops(blocks).values() for i in indices}
    return sum(is_scratch_access(insn, resources) for i in sorted(in_loops) for insn in blocks[i].insns)
