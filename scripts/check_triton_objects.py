#!/usr/bin/env python3
"""Check the code objects kernels/aot.py wrote: every kernel there, for the right GPU, using
the GPU's matrix instructions.

Usage: check_triton_objects.py DIR --targets gfx90a,gfx942,gfx1100,gfx1201
           [--block-dims 32,64,128,256] [--dtypes fp16,bf16] [--filter GLOB,...]
           [--llvm-bin /usr/lib/llvm-21/bin]

DIR is aot.py's --out (manifest.tsv + <target>/<variant>.hsaco); --block-dims, --dtypes and
--filter must be those aot.py ran with (the defaults are aot.py's), since they decide which
variants must be there. For every AMD target:
  - each variant of aot.py's variants() that the filter keeps (the merge kernels always) has
    one manifest row, and no row is listed twice;
  - its .hsaco is an AMDGPU ELF whose metadata names that target, and it defines the kernel
    symbol (and kernel descriptor) the manifest names, the one the runtime loads;
  - every attention (`fwd`) kernel uses the matrix unit: v_wmma on gfx11/gfx12, v_mfma on gfx9
    (without them a kernel still runs, at a fraction of the speed); on RDNA 2 (gfx103x), which
    has none, its dot instructions instead: v_dot2 for fp16 (the packed f16 dot, twice the
    rate of converting to f32 and v_fma), v_fma/v_fmac_f32 for bf16 (gfx103x has no bf16 dot),
    and no v_wmma or v_mfma;
  - the manifest's VGPR spill count matches the code object's metadata.
sm_90 rows (cuda-verify builds) are only checked to exist as ELF files: there are no NVIDIA
tools here. Prints, per target, the kernel count and the VGPR spills (total and worst kernel);
exits 1 listing every problem.
"""
import argparse
import concurrent.futures
import fnmatch
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "kernels"))
# No __pycache__ in kernels/: the build script watches that folder and would rebuild.
sys.dont_write_bytecode = True
import aot  # noqa: E402  (imports no triton at module level: the check runs with any python3)

EM_AMDGPU = 224


def expected_instructions(target, dtype):
    """(mnemonic prefixes of which an attention kernel for `target` and `dtype` must contain at
    least one, prefixes it must not contain): the matrix instructions, or on RDNA 2 (no matrix
    cores) the dot/FMA ones tl.dot lowers to."""
    if aot.tile_family(target) == "rdna2":
        return (("v_dot2",) if dtype == "fp16" else ("v_fmac_f32", "v_fma_f32")), ("v_wmma", "v_mfma")
    kind = aot.target_kind(target)
    return {"cdna": (("v_mfma",), ()), "rdna": (("v_wmma",), ())}.get(kind, ((), ()))


def instruction_problems(asm, target, dtype):
    """What an attention kernel's disassembly `asm` lacks or has against expected_instructions."""
    need, spurious = expected_instructions(target, dtype)
    mnemonics = set(re.findall(r"^\s+(?:[0-9a-f]+:\s+)?(v_\w+)", asm, re.M)) if asm else set()
    problems = []
    if need and not any(m.startswith(n) for m in mnemonics for n in need):
        problems.append(f"no {' or '.join(need)} instruction: the attention kernel does not use "
                        f"{'its dot instructions' if spurious else 'the matrix unit'}")
    for prefix in spurious:
        if any(m.startswith(prefix) for m in mnemonics):
            problems.append(f"{prefix} instructions, which {target} does not have")
    return problems


def expected_variants(block_dims, dtypes, globs, target=None):
    """{variant: family}: what aot.py compiles for `target` (the same rule as its main():
    the filter selects attention kernels; the merge kernels are always built)."""
    return {
        name: family
        for name, family, _ in aot.variants(block_dims, dtypes, target)
        if family == "merge" or not globs or any(fnmatch.fnmatch(name, g) for g in globs)
    }


def elf_machine(path):
    """The ELF e_machine of `path`, or None when it is not an ELF file."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little")


class Tools:
    def __init__(self, llvm_bin):
        self.readelf = os.path.join(llvm_bin, "llvm-readelf")
        self.objdump = os.path.join(llvm_bin, "llvm-objdump")
        for tool in (self.readelf, self.objdump):
            if not os.access(tool, os.X_OK):
                sys.exit(f"check: {tool} not found (install llvm-21, or pass --llvm-bin)")

    @staticmethod
    def run(args):
        result = subprocess.run(args, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


def check_amd_object(tools, row, path):
    """Problems with one AMD code object (a list of strings, empty when it is good)."""
    target, variant, kernel = row["target"], row["variant"], row["kernel"]
    where = f"{target} {variant}"
    if elf_machine(path) != EM_AMDGPU:
        return [f"{where}: {path} is not an AMDGPU ELF"]
    try:
        info = Tools.run([tools.readelf, "--notes", "--dyn-syms", "-W", path])
    except RuntimeError as e:
        return [f"{where}: {e}"]
    problems = []
    # The metadata's target is what the HIP runtime matches against the GPU when loading.
    found = re.search(r"amdhsa\.target:\s+amdgcn-amd-amdhsa--(\S+)", info)
    if not found or found.group(1).split(":")[0] != target:
        problems.append(f"{where}: metadata target is {found.group(1) if found else 'missing'}, not {target}")
    # hipModuleGetFunction looks the kernel up by name: it needs the function and its `.kd`.
    defined = set(re.findall(r"^\s*\d+:\s+\S+\s+\S+\s+(?:FUNC|OBJECT)\s+GLOBAL\s+\S+\s+\d+\s+(\S+)$", info, re.M))
    for symbol in (kernel, kernel + ".kd"):
        if symbol not in defined:
            problems.append(f"{where}: symbol {symbol} (from the manifest) is not defined")
    spills = sum(int(n) for n in re.findall(r"\.vgpr_spill_count:\s+(\d+)", info))
    if spills != int(row["vgpr_spills"]):
        problems.append(f"{where}: {spills} VGPR spills in the metadata, {row['vgpr_spills']} in the manifest")
    need, spurious = expected_instructions(target, row["dtype"])
    if row["family"] == "fwd" and (need or spurious):
        try:
            asm = Tools.run([tools.objdump, "-d", f"--mcpu={target}", path])
        except RuntimeError as e:
            return problems + [f"{where}: {e}"]
        problems += [f"{where}: {p}" for p in instruction_problems(asm, target, row["dtype"])]
    return problems


def read_manifest(directory):
    path = os.path.join(directory, "manifest.tsv")
    try:
        with open(path) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
    except OSError as e:
        sys.exit(f"check: cannot read the manifest: {e}")
    header = lines[0].split("\t") if lines else []
    if header != aot.MANIFEST_COLUMNS:
        sys.exit(f"check: {path}: columns {header}, expected aot.py's {aot.MANIFEST_COLUMNS}")
    rows = []
    for number, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != len(header):
            sys.exit(f"check: {path}:{number}: {len(fields)} fields, expected {len(header)}")
        rows.append(dict(zip(header, fields)))
    return rows


def check_target(tools, pool, directory, target, rows, expected):
    """(summary line, problems) for one target's rows."""
    problems = []
    names = [r["variant"] for r in rows]
    for what, offenders in (
        ("listed more than once in the manifest", sorted({n for n in names if names.count(n) > 1})),
        ("missing (no manifest row)", sorted(set(expected) - set(names))),
        ("in the manifest but not in this selection (were --block-dims/--dtypes/--filter those of aot.py?)",
         sorted(set(names) - set(expected))),
    ):
        if offenders:
            shown = ", ".join(offenders[:8]) + (f" and {len(offenders) - 8} more" if len(offenders) > 8 else "")
            problems.append(f"{target}: {len(offenders)} variant{'s' if len(offenders) > 1 else ''} {what}: {shown}")
    problems += [f"{target} {r['variant']}: family {r['family']}, expected {expected[r['variant']]}"
                 for r in rows if r["variant"] in expected and r["family"] != expected[r["variant"]]]

    jobs = {}
    for row in rows:
        path = os.path.join(directory, row["file"])
        if not os.path.isfile(path):
            problems.append(f"{target} {row['variant']}: {path} is in the manifest but missing")
        elif target.startswith("gfx"):
            jobs[row["variant"]] = pool.submit(check_amd_object, tools, row, path)
        elif elf_machine(path) is None:
            problems.append(f"{target} {row['variant']}: {path} is not an ELF file")
    for variant in sorted(jobs):
        problems += jobs[variant].result()

    fwd = sum(r["family"] == "fwd" for r in rows)
    if not target.startswith("gfx"):
        return f"{target}: {len(rows)} kernels ({fwd} fwd), files present (not inspected: no NVIDIA tools)", problems
    spills = {r["variant"]: int(r["vgpr_spills"]) for r in rows}
    worst = max(spills, key=spills.get, default=None)
    spilling = sum(s > 0 for s in spills.values())
    line = (f"{target}: {len(rows)} kernels ({fwd} fwd, {len(rows) - fwd} merge), "
            f"{'/'.join(sorted({n for d in aot.DTYPES for n in expected_instructions(target, d)[0]}))} "
            f"checked in the fwd ones; VGPR spills {sum(spills.values())} in total, "
            f"{spilling} kernels spill")
    if worst is not None and spills[worst] > 0:
        line += f", worst {worst} ({spills[worst]})"
    return line, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="aot.py's --out directory")
    parser.add_argument("--targets", required=True, help="the targets that must all be there")
    parser.add_argument("--block-dims", default=",".join(map(str, aot.BLOCK_DIMS)))
    parser.add_argument("--dtypes", default=",".join(aot.DTYPES))
    parser.add_argument("--filter", default="", help="aot.py's --filter (default: none)")
    parser.add_argument("--llvm-bin", default="/usr/lib/llvm-21/bin")
    args = parser.parse_args()

    targets = [t for t in args.targets.split(",") if t]
    for target in targets:
        aot.target_kind(target)  # exits with a message on an unknown target
    block_dims = [int(d) for d in args.block_dims.split(",") if d]
    dtypes = [d for d in args.dtypes.split(",") if d]
    globs = [g for g in args.filter.split(",") if g]
    tools = Tools(args.llvm_bin)
    rows = read_manifest(args.dir)

    problems = []
    extra = sorted({r["target"] for r in rows} - set(targets))
    if extra:
        print(f"check: the manifest also has {','.join(extra)}: not checked")
    # The llvm tools are separate processes: a thread pool keeps every core busy.
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for target in targets:
            target_rows = [r for r in rows if r["target"] == target]
            if not target_rows:
                problems.append(f"{target}: no kernels in the manifest")
                continue
            expected = expected_variants(block_dims, dtypes, globs, target)
            line, found = check_target(tools, pool, args.dir, target, target_rows, expected)
            print(line, flush=True)
            problems += found
    counts = sorted({len(expected_variants(block_dims, dtypes, globs, t)) for t in targets})
    print(f"check: {'/'.join(map(str, counts))} variants per target (tiles {','.join(map(str, block_dims))}, "
          f"dtypes {','.join(dtypes)}, filter '{args.filter}') for {','.join(targets)}")
    if problems:
        print(f"check: FAILED, {len(problems)} problems:", *problems, sep="\n  ")
        sys.exit(1)
    print("check: every kernel present, built for its target, symbols defined, matrix (RDNA 2: dot) instructions "
          "used: OK")


if __name__ == "__main__":
    main()
