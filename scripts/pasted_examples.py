#!/usr/bin/env python3
"""Builds and runs the rustdoc examples of src/ and the README's Rust examples as a user's crate would: pasted into a crate of
its own that depends on `candle-core` (the version in Cargo.lock) and on this crate by path.

Doctests compile inside this crate, where candle-core is renamed `candle`; a user's crate sees
`candle_core` and `flash_attn_rocm::candle`. This check catches an example that only compiles
as a doctest (say, one that writes `candle::` for candle-core).

    python3 scripts/pasted_examples.py [--features F1,F2] [--no-run] [--gated-only]

Writes the scratch crate to target/pasted-examples/ (one Cargo example per rustdoc example,
named after its file and line), builds them with the repository's target directory (so candle
and this crate's build are shared with `cargo test`), then runs every example that is not
`no_run`. Examples of modules that a feature gates (src/glue, src/gpu: `triton`) are built only
when that feature is on; `--gated-only` builds only those (the others do not change with the
features: a run without features covers them). Exits non-zero on the first failure, naming the example's source line.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "target", "pasted-examples")
# Modules compiled only with a feature (see src/lib.rs), and the features that turn it on.
GATED = {"src/glue/": {"triton", "rocm", "candle-rocm", "cuda-verify", "candle-cuda"},
         "src/gpu/": {"triton", "rocm", "candle-rocm", "cuda-verify", "candle-cuda"}}
DOC_LINE = re.compile(r"^\s*(///|//!) ?(.*)$")


def examples(path):
    """Yields (line, info string, code) for each fenced code block of the file's doc comments."""
    block, start, info = None, 0, ""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = DOC_LINE.match(line.rstrip("\n"))
            text = m.group(2) if m else None
            if block is None:
                if text is not None and text.strip().startswith("```"):
                    block, start, info = [], number, text.strip()[3:].strip()
                continue
            if text is None or text.strip() == "```":
                yield start, info, block
                block = None
                continue
            block.append(text)


def markdown_examples(path):
    """Yields (line, info string, code) for each ```rust block of a Markdown file (a fragment
    that is not a program is marked ```rust,ignore)."""
    block, start, info = None, 0, ""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.rstrip("\n")
            if block is None:
                if text.startswith("```rust"):
                    block, start, info = [], number, text[3:].strip()
                continue
            if text.strip() == "```":
                info_attrs = [a.strip() for a in info.split(",")][1:]
                yield start, ",".join(info_attrs), block
                block = None
                continue
            block.append(text)


def unhide(lines):
    """Rustdoc's hidden lines (`# code`) are part of the example; `##` escapes a `#`."""
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped == "#":
            out.append("")
        elif stripped.startswith("# "):
            out.append(line.replace("# ", "", 1))
        elif stripped.startswith("##"):
            out.append(line.replace("##", "#", 1))
        else:
            out.append(line)
    return "\n".join(out)


def as_program(code):
    """A `main` around the example, as rustdoc makes one: a trailing `Ok::<(), E>(())` makes
    the body a fallible closure whose error fails the run."""
    if re.search(r"^\s*(pub\s+)?fn main\s*\(", code, re.M):
        return code
    body = "\n".join("    " + line if line else "" for line in code.split("\n"))
    if re.search(r"Ok::<.*>\(\(\)\)\s*$", code.strip()):
        return "#![allow(unused)]\nfn main() {\n    let run = || {\n" + body + "\n    };\n    run().unwrap();\n}\n"
    return "#![allow(unused)]\nfn main() {\n" + body + "\n}\n"


def dev_dependencies():
    """The repository's dev-dependencies as `[dependencies]` lines. Cargo unifies a dependency's
    features over everything one build compiles, and `cargo test --workspace` compiles these
    too: without them here, crates they turn features on in (rand, half, serde, ...) resolve with
    other features, get other hashes, and candle and its tree compile a second time in the
    shared target directory. The examples do not use them."""
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        deps = tomllib.load(f).get("dev-dependencies", {})

    def value(v):
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"

    return "\n".join(f"{name} = {value(spec)}" for name, spec in deps.items())


def lock_version(package):
    with open(os.path.join(ROOT, "Cargo.lock"), encoding="utf-8") as f:
        lock = f.read()
    m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(package), lock)
    return m.group(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", default="", help="features of flash-attn-rocm (comma-separated)")
    parser.add_argument("--no-run", action="store_true", help="build only")
    parser.add_argument("--gated-only", action="store_true",
                        help="only the examples of modules a feature gates (with --features)")
    args = parser.parse_args()
    features = {f for f in args.features.split(",") if f}
    if args.gated_only and not features:
        sys.exit("pasted examples: --gated-only needs --features")

    found, skipped = [], []
    for directory, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, ROOT)
            for line, info, lines in examples(path):
                attrs = {a.strip() for a in info.split(",") if a.strip()}
                if attrs - {"rust", "no_run", "should_panic"} or attrs & {"ignore", "compile_fail", "text"}:
                    skipped.append(f"{rel}:{line} ({info})")
                    continue
                gate = next((g for prefix, g in GATED.items() if rel.startswith(prefix)), None)
                if gate is not None and not gate & features:
                    skipped.append(f"{rel}:{line} (needs one of the features {', '.join(sorted(gate))})")
                    continue
                if gate is None and args.gated_only:
                    skipped.append(f"{rel}:{line} (not feature-gated: --gated-only)")
                    continue
                stem = re.sub(r"[^A-Za-z0-9]+", "_", rel[len("src/"):-len(".rs")])
                found.append((f"{stem}_{line}", f"{rel}:{line}", "no_run" in attrs, as_program(unhide(lines))))

    # The README's examples are what a user pastes first (none is feature-gated).
    for line, info, lines in ([] if args.gated_only else markdown_examples(os.path.join(ROOT, "README.md"))):
        if "ignore" in info:
            skipped.append(f"README.md:{line} ({info}: a fragment)")
            continue
        found.append((f"readme_{line}", f"README.md:{line}", "no_run" in info, as_program("\n".join(lines))))

    shutil.rmtree(os.path.join(SCRATCH, "examples"), ignore_errors=True)
    os.makedirs(os.path.join(SCRATCH, "examples"))
    feature_list = ", ".join(f'"{f}"' for f in sorted(features))
    # The same dev profile as the repository's Cargo.toml, so that the dependencies' artifacts in
    # the shared target directory are reused rather than rebuilt.
    manifest = f"""[package]
name = "pasted-examples"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
candle-core = "={lock_version('candle-core')}"
flash-attn-rocm = {{ path = "{ROOT}", features = [{feature_list}] }}
{dev_dependencies()}

[profile.dev]
opt-level = 3
# The examples themselves: no debuginfo, which halves their link time (dependencies keep theirs).
debug = false

[profile.dev.package."*"]
debug = false

[workspace]
"""
    with open(os.path.join(SCRATCH, "Cargo.toml"), "w", encoding="utf-8") as f:
        f.write(manifest)
    os.makedirs(os.path.join(SCRATCH, "src"), exist_ok=True)
    with open(os.path.join(SCRATCH, "src", "lib.rs"), "w", encoding="utf-8") as f:
        f.write("//! The rustdoc examples of flash-attn-rocm, one Cargo example each.\n")
    # The repository's lockfile pins the same versions of everything (cargo drops what is unused).
    shutil.copy(os.path.join(ROOT, "Cargo.lock"), os.path.join(SCRATCH, "Cargo.lock"))
    for name, _, _, program in found:
        with open(os.path.join(SCRATCH, "examples", name + ".rs"), "w", encoding="utf-8") as f:
            f.write(program)

    env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")))
    start = time.time()
    build = ["cargo", "build", "--examples", "--manifest-path", os.path.join(SCRATCH, "Cargo.toml")]
    if subprocess.run(build, env=env).returncode != 0:
        sys.exit("pasted examples: the build failed (each example is named <file>_<line> after its source)")
    print(f"pasted examples: built {len(found)} in {time.time() - start:.0f} s")
    ran = 0
    for name, source, no_run, _ in found:
        if no_run or args.no_run:
            continue
        binary = os.path.join(env["CARGO_TARGET_DIR"], "debug", "examples", name)
        result = subprocess.run([binary], env=env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stdout.write(result.stdout + result.stderr)
            sys.exit(f"pasted examples: {source} failed when run")
        ran += 1
    print(f"pasted examples: {len(found)} built, {ran} ran, {len(skipped)} skipped, {time.time() - start:.0f} s in all")
    for entry in skipped:
        print(f"  skipped {entry}")


if __name__ == "__main__":
    main()
