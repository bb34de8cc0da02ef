#!/usr/bin/env python3
"""Builds the HIP runtime stand-in (tools/hip-standin) as `libamdhip64.so.6`, and checks its
exports against what binaries import.

    scripts/hip_standin.py build --out DIR BINARY...   link DIR/libamdhip64.so.6 (+ .so, .so.7)
    scripts/hip_standin.py check --out DIR BINARY...   every import of each BINARY is exported

What a binary imports from HIP, derived from the binary itself:
- the undefined dynamic symbols it links against `libamdhip64` (hipcc's code: CK, the guard
  kernel, the shim; Candle's ROCm device), with the symbol version each one requires, and those
  of every shared library it loads that needs `libamdhip64` (rocBLAS, rocRAND, ...);
- the names it resolves at run time with `dlsym` (the crate's HIP driver, src/gpu/hip.rs): every
  string in the binary that begins with one of HIP's exported names.

HIP's own library (Debian's HIP 6.4 in the ROCm chroot, or --hip-library) gives the names it
exports, their symbol versions and the version nodes' order. The stand-in exports each import
at HIP's version for it; an import the stand-in does not implement gets a stub that aborts
with its name. Everything else in the static library stays local.
"""

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "tools" / "hip-standin"
SONAME = "libamdhip64.so.6"
ALIASES = ["libamdhip64.so", "libamdhip64.so.7"]
# What a Rust static library needs from the system (rustc --print native-static-libs).
NATIVE_LIBS = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]
NAME = re.compile(rb"(?:__)?hip[A-Z][A-Za-z0-9_]*")


def chroot_dir():
    out = subprocess.run([str(ROOT / "scripts" / "rocm-chroot.sh"), "path"], capture_output=True, text=True)
    return Path(out.stdout.strip())


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout


def dynamic_symbols(path):
    """(name, version or None, defined) for each dynamic symbol of `path`."""
    symbols = []
    for line in readelf("--dyn-syms", str(path)).splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].endswith(":"):
            continue
        name, _, version = fields[7].replace("@@", "@").partition("@")
        symbols.append((name, version or None, fields[6] != "UND"))
    return symbols


class HipLibrary:
    """What HIP's own library exports: name -> version, and the version nodes with parents."""

    def __init__(self, path):
        self.path = path
        self.versions = {n: v for n, v, defined in dynamic_symbols(path) if defined and v and v != n}
        self.nodes = []  # (node, parent or None), in definition order
        node = None
        for line in readelf("-V", str(path)).splitlines():
            named = re.search(r"Flags: (\S+)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", line)
            parent = re.search(r"Parent 1: (\S+)", line)
            if named and named.group(1) != "BASE":
                node = named.group(2)
                self.nodes.append([node, None])
            elif parent and node:
                self.nodes[-1][1] = parent.group(1)

    def prefix_name(self, text):
        """The longest exported name that `text` begins with (a literal may run into the next)."""
        best = None
        for end in range(len(text), 3, -1):
            if text[:end] in self.versions:
                best = text[:end]
                break
        return best


def hip_dependents(binary):
    """`binary` and every shared library it loads (ldd) that itself needs libamdhip64 (rocBLAS,
    rocRAND, ... under Candle's ROCm device): each of them imports from HIP."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    found = [Path(binary)]
    for line in out.splitlines():
        match = re.search(r"=> (/\S+)", line)
        if not match or "libamdhip64" in match.group(1):
            continue
        needed = readelf("-d", match.group(1))
        if "libamdhip64" in needed:
            found.append(Path(match.group(1)))
    return found


def imports(binary, hip):
    """{name: version or None}: what `binary` and the libraries it loads take from HIP (see the
    module docstring)."""
    found = {}
    for path in hip_dependents(binary):
        for name, version in own_imports(Path(path), hip).items():
            found.setdefault(name, version)
    return found


@functools.lru_cache(maxsize=None)
def own_imports(binary, hip):
    """{name: version or None}: what `binary` itself takes from HIP. Cached: rocBLAS (1 GB,
    under every Candle binary) is read once per run."""
    found = {}
    for name, version, defined in dynamic_symbols(binary):
        if not defined and (name in hip.versions or (version or "").startswith("hip_")):
            found[name] = version
    data = Path(binary).read_bytes()
    for match in NAME.finditer(data):
        for piece in re.split(rb"(?=(?:__)?hip[A-Z])", match.group()):
            name = hip.prefix_name(piece.decode())
            if name and name not in found:
                found[name] = None
    return found


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR") or CRATE / "target")


def implemented():
    """The HIP functions the static library defines."""
    lib = target_dir() / "release" / "libhip_standin.a"
    out = subprocess.run(["nm", "-g", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return lib, {line.split()[-1] for line in out.splitlines()
                 if len(line.split()) == 3 and re.match(r"(?:__)?hip[A-Z]", line.split()[-1])}


def build_static(include):
    env = dict(os.environ, HIP_STANDIN_INCLUDE=str(include))
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path", str(CRATE / "Cargo.toml"),
                    "--target-dir", str(target_dir())], env=env, check=True)


def link(out, hip, wanted):
    lib, defined = implemented()
    unknown = sorted(n for n in defined if n not in hip.versions)
    if unknown:
        sys.exit(f"hip_standin: the stand-in defines names HIP does not export: {unknown}")
    foreign = sorted(f"{n}@{v}" for n, v in wanted.items() if n not in hip.versions)
    if foreign:
        sys.exit(f"hip_standin: the binaries import names {hip.path} does not export: {foreign}")
    exports = defined | set(wanted)
    stubs = sorted(n for n in wanted if n not in defined)
    by_node = {}
    for name in exports:
        by_node.setdefault(hip.versions[name], []).append(name)
    with tempfile.TemporaryDirectory() as tmp:
        stub_c, script = Path(tmp) / "stubs.c", Path(tmp) / "exports.map"
        stub_c.write_text('_Noreturn void hip_standin_unimplemented(const char *name);\n' + "".join(
            f'void {n}(void) {{ hip_standin_unimplemented("{n}"); }}\n' for n in stubs))
        lines = []
        for i, (node, parent) in enumerate(hip.nodes):
            names = "".join(f" {n};" for n in sorted(by_node.get(node, [])))
            body = (f"global:{names}" if names else "") + (" local: *;" if i == 0 else "")
            lines.append(f"{node} {{ {body} }}{' ' + parent if parent else ''};")
        script.write_text("\n".join(lines) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        target = out / SONAME
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(target), f"-Wl,-soname,{SONAME}", str(stub_c),
                        "-Wl,--whole-archive", str(lib), "-Wl,--no-whole-archive",
                        f"-Wl,--version-script={script}", *NATIVE_LIBS], check=True)
    for alias in ALIASES:
        link_path = out / alias
        if link_path.is_symlink() or link_path.exists():
            link_path.unlink()
        link_path.symlink_to(SONAME)
    print(f"hip_standin: {target}: {len(exports)} exports ({len(defined)} implemented, "
          f"{len(stubs)} stubs that abort: {' '.join(stubs) or 'none'})")


def check(out, hip, binaries):
    exported = {n: v for n, v, defined in dynamic_symbols(out / SONAME) if defined}
    missing = []
    for binary in binaries:
        for name, version in sorted(imports(binary, hip).items()):
            if name not in exported or name not in hip.versions:
                missing.append(f"{Path(binary).name}: {name} is not exported")
            elif exported[name] != hip.versions[name] or (version and version != exported[name]):
                missing.append(f"{Path(binary).name}: {name}@{exported[name]}, HIP has it at "
                               f"{hip.versions[name]}, the binary needs {version}")
    if missing:
        sys.exit("hip_standin: exports do not match the imports:\n  " + "\n  ".join(missing))
    counts = ", ".join(f"{Path(b).name}: {len(imports(b, hip))}" for b in binaries)
    print(f"hip_standin: every import is exported at HIP's version ({counts})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("binaries", nargs="*", help="the binaries the stand-in serves")
    parser.add_argument("--out", type=Path, required=True, help="where libamdhip64.so.6 goes")
    parser.add_argument("--chroot", type=Path, help="the ROCm chroot (default: scripts/rocm-chroot.sh path; "
                        "/ inside it)")
    parser.add_argument("--hip-library", type=Path, help="HIP's own libamdhip64.so.6 (default: the chroot's)")
    args = parser.parse_intermixed_args()
    chroot = args.chroot or (Path("/") if Path("/usr/include/hip/hip_runtime_api.h").exists() else chroot_dir())
    hip = HipLibrary(args.hip_library or chroot / "usr/lib/x86_64-linux-gnu" / SONAME)
    if args.command == "build":
        build_static(chroot / "usr" / "include")
        wanted = {}
        for binary in args.binaries:
            wanted.update(imports(binary, hip))
        link(args.out, hip, wanted)
    check(args.out, hip, args.binaries)


if __name__ == "__main__":
    main()
