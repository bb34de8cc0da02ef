#!/usr/bin/env python3
"""Inspect the GPU code objects of the CK library and of a binary that links it.

Usage: check_code_objects.py --cargo-json MESSAGES --arch gfx942 [--llvm-bin DIR]
   or: check_code_objects.py --archive LIB.a --manifest manifest.txt --binary BIN --arch gfx942

MESSAGES is the output of `cargo build/test --message-format=json` for a build that linked the
library: the archive and manifest are found from flash-attn-rocm's build-script link path, the
binary from the last executable artifact.

For every kernel instance the build generated (manifest.txt, written by build/ck_codegen.py):
  - its object is in the archive and its device code object for ARCH holds a kernel of the
    expected CK class (FmhaFwdKernel, FmhaFwdSplitKVKernel, FmhaFwdSplitKVCombineKernel);
  - the attention kernels use MFMA (v_mfma*) instructions;
  - no kernel makes a function call (s_swappc), i.e. everything was inlined;
and every one of those kernel symbols is present in the linked binary's .hip_fatbin, so the
linker kept all instances. With --require-tiles 32,64,...: every listed head-dim tile has a
forward batch and a forward group instance, and those with split-KV kernels in this CK
(SPLITKV_TILES) a split-KV and a combine instance. Prints a per-kernel table (VGPRs, VGPR
spills) with a spill summary; exits non-zero on the first class of failure found, listing
every offender.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
ARCHIVE_NAME = "libflash_attn_rocm_ck.a"
KERNEL_CLASS = {
    "fwd": "FmhaFwdKernel",
    "fwd_splitkv": "FmhaFwdSplitKVKernel",
    "fwd_splitkv_combine": "FmhaFwdSplitKVCombineKernel",
}
# The combine kernel only rescales and sums partial outputs: no matrix multiply.
NEEDS_MFMA = {"fwd", "fwd_splitkv"}
# Head-dim tiles with split-KV kernels in this CK (src/rocm/splitkv.rs, CK_SPLITKV_TILES).
SPLITKV_TILES = {32, 64, 128, 256}


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"check: {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


class Tools:
    def __init__(self, llvm_bin, arch):
        self.bin = llvm_bin
        self.arch = arch

    def tool(self, name):
        return os.path.join(self.bin, name)

    def device_objects(self, host_file, workdir, tag):
        """Code objects for self.arch inside host_file's .hip_fatbin, one per bundle."""
        fatbin = os.path.join(workdir, f"{tag}.fatbin")
        run([self.tool("llvm-objcopy"), "--dump-section", f".hip_fatbin={fatbin}", host_file,
             os.path.join(workdir, f"{tag}.discard")])
        with open(fatbin, "rb") as f:
            data = f.read()
        starts = [m.start() for m in re.finditer(re.escape(BUNDLE_MAGIC), data)]
        objects = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(data)
            bundle = os.path.join(workdir, f"{tag}.{i}.bundle")
            with open(bundle, "wb") as f:
                f.write(data[start:end])
            code_object = os.path.join(workdir, f"{tag}.{i}.co")
            run([self.tool("clang-offload-bundler"), "--unbundle", "--type=o",
                 f"--input={bundle}", f"--targets=hipv4-amdgcn-amd-amdhsa--{self.arch}",
                 f"--output={code_object}"])
            objects.append(code_object)
        return objects

    def kernels(self, code_object):
        """{kernel symbol: {"vgpr": n, "vgpr_spill": n, "sgpr_spill": n}} from the notes."""
        notes = run([self.tool("llvm-readelf"), "--notes", code_object])
        kernels = {}
        current = None
        for line in notes.splitlines():
            line = line.strip().lstrip("- ")
            key, _, value = line.partition(":")
            value = value.strip()
            if key == ".name" and value.startswith("_Z"):
                current = kernels.setdefault(value, {})
            elif current is not None and key in (".vgpr_count", ".vgpr_spill_count", ".sgpr_spill_count"):
                current[key.strip(".").replace("_count", "")] = int(value)
        return kernels

    def disassembly(self, code_object):
        return run([self.tool("llvm-objdump"), "-d", f"--mcpu={self.arch}", code_object])

    def demangle(self, symbol):
        return run([self.tool("llvm-cxxfilt"), symbol]).strip()


def archive_members(tools, archive, workdir):
    """Extracts the archive; returns {member name: path}."""
    members = run([tools.tool("llvm-ar"), "t", archive]).split()
    run([tools.tool("llvm-ar"), "x", os.path.abspath(archive)], cwd=workdir)
    return {m: os.path.join(workdir, m) for m in members}


def check_instance(tools, kind, name, obj, workdir):
    """Returns (kernel symbols, problems, summary line) for one generated instance."""
    problems = []
    symbols = set()
    vgprs, spills = [], []
    for code_object in tools.device_objects(obj, workdir, name[:40] + str(abs(hash(name)))):
        kernels = tools.kernels(code_object)
        asm = tools.disassembly(code_object)
        if kernels and kind in NEEDS_MFMA and "v_mfma" not in asm:
            problems.append(f"{name}: no v_mfma instruction")
        if "s_swappc" in asm:
            problems.append(f"{name}: s_swappc (a function call) in the kernel code")
        for symbol, info in kernels.items():
            if KERNEL_CLASS[kind] + "<" not in tools.demangle(symbol):
                continue
            symbols.add(symbol)
            vgprs.append(info.get("vgpr", -1))
            spills.append(info.get("vgpr_spill", 0))
    if not symbols:
        problems.append(f"{name}: no {KERNEL_CLASS[kind]} kernel for {tools.arch}")
    spill = max(spills, default=0)
    line = f"  {kind:20} {max(vgprs, default=-1):5} {spill:6}  {name}"
    return symbols, problems, line, spill


def tile_of(name):
    """The head-dim tile of a generated kernel name (fmha_fwd[_splitkv[_combine]]_d<hdim>_...)."""
    match = re.search(r"_d(\d+)_", name)
    return int(match.group(1)) if match else None


def missing_families(expected, tiles):
    """For each required tile, the kernel families the manifest lacks."""
    have = {(kind, tile_of(name), "_group_" in name) for kind, name in expected}
    problems = []
    for tile in tiles:
        wanted = [("fwd", True), ("fwd", False)]
        if tile in SPLITKV_TILES:
            wanted += [("fwd_splitkv", True), ("fwd_splitkv_combine", True)]
        for kind, group in wanted:
            if (kind, tile, group) not in have:
                mode = "group" if group else "batch"
                problems.append(f"tile d{tile}: no {kind} ({mode} mode) instance was built")
    return problems


def paths_from_cargo_json(messages_file):
    """(archive, manifest, binary) from cargo's JSON messages."""
    lib_dir = binary = None
    with open(messages_file) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            message = json.loads(line)
            if message.get("reason") == "build-script-executed" and \
                    message.get("package_id", "").find("flash-attn-rocm") >= 0:
                for path in message.get("linked_paths", []):
                    path = path.split("=", 1)[-1]
                    if os.path.exists(os.path.join(path, ARCHIVE_NAME)):
                        lib_dir = path
            if message.get("reason") == "compiler-artifact" and message.get("executable"):
                binary = message["executable"]
    if lib_dir is None or binary is None:
        sys.exit(f"check: {messages_file} names no {ARCHIVE_NAME} link path or no executable")
    # The build cache layout of build/native.rs and build/codegen.rs: <key>/cmake/lib, <key>/gen.
    manifest = os.path.join(os.path.dirname(os.path.dirname(lib_dir)), "gen", "manifest.txt")
    return os.path.join(lib_dir, ARCHIVE_NAME), manifest, binary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cargo-json")
    parser.add_argument("--archive")
    parser.add_argument("--manifest")
    parser.add_argument("--binary")
    parser.add_argument("--arch", required=True)
    parser.add_argument("--llvm-bin", default="/usr/lib/llvm-21/bin")
    parser.add_argument("--require-tiles", default="",
                        help="comma-separated head-dim tiles that must have every kernel family")
    args = parser.parse_args()
    if args.cargo_json:
        args.archive, args.manifest, args.binary = paths_from_cargo_json(args.cargo_json)
    elif not (args.archive and args.manifest and args.binary):
        parser.error("give --cargo-json, or --archive, --manifest and --binary")
    tools = Tools(args.llvm_bin, args.arch)

    with open(args.manifest) as f:
        expected = [line.split() for line in f if line.strip() and not line.startswith("api ")]
    tiles = [int(t) for t in args.require_tiles.split(",") if t]
    problems, expected_symbols, spills = missing_families(expected, tiles), set(), {}
    print(f"  {'family':20} {'vgprs':>5} {'spills':>6}  instance ({args.arch})")
    with tempfile.TemporaryDirectory() as workdir:
        members = archive_members(tools, args.archive, workdir)
        for kind, name in expected:
            obj = members.get(f"{name}.cpp.o")
            if obj is None:
                problems.append(f"{name}: object missing from {args.archive}")
                continue
            symbols, found, line, spills[name] = check_instance(tools, kind, name, obj, workdir)
            print(line)
            problems += found
            expected_symbols |= symbols
        linked = set()
        for code_object in tools.device_objects(args.binary, workdir, "binary"):
            linked |= set(tools.kernels(code_object))
    spilling = {n: s for n, s in spills.items() if s > 0}
    worst = max(spilling, key=spilling.get, default=None)
    print(f"check: VGPR spills: {sum(spills.values())} in total, {len(spilling)} of {len(spills)} instances spill"
          + (f", worst {spilling[worst]} ({worst})" if worst else ""))
    missing = expected_symbols - linked
    problems += [f"kernel missing from the linked binary: {s}" for s in sorted(missing)]
    print(f"check: {len(expected)} instances, {len(expected_symbols)} kernel symbols for "
          f"{args.arch}, {len(linked)} kernels in {os.path.basename(args.binary)}")
    if problems:
        print("check: FAILED", *problems, sep="\n  ")
        sys.exit(1)
    print("check: every expected kernel present, MFMA used, no calls in kernels: OK")


if __name__ == "__main__":
    main()
