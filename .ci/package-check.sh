#!/usr/bin/env bash
# The crates as a registry would get them: `cargo package` for both, then each packaged crate
# built and tested from its unpacked .crate in a directory outside the repository, so that a
# file the build or the tests need and `include` leaves out fails here.
#
#  1. `cargo package --workspace --no-verify`: both .crate files, and their sizes against the
#     registry's 10 MB limit. `--workspace` because the compat crate depends on flash-attn-rocm
#     0.1.0, which no registry has: cargo resolves it against the crate packaged just before.
#     `--no-verify` because cargo's own verification builds each library only, and the compat
#     crate's at the default opt-level (its package has no profile), a second build of every
#     dependency; steps 2-4 build and test both packages instead.
#  2. flash-attn-rocm unpacked: `cargo check --locked --all-targets` with the packaged Cargo.lock:
#     the library, every test, example and bench compiles from the package, and the build
#     script runs, so a source or build file `include` leaves out fails here. (The CPU tests'
#     sources are the repository's, which `cargo test --workspace` ran; compiling them once more
#     with code generation would find no missing file that checking does not.)
#  3. flash-attn-rocm unpacked: the Triton AOT for one AMD target, `--features rocm` with
#     FLASH_ATTN_ROCM_ARCHS=gfx1100 (RDNA: Triton only, no CK, no ROCm needed), a small kernel
#     set (one tile, one dtype): it proves the package holds what the kernel compile reads
#     (kernels/*.py); .ci/rocm-check.sh compiles the full set from the repository. Built as the
#     library's unit tests and the tests that read the package's files at run time (build/,
#     kernels/, Cargo.lock), which then run, with the package's dev profile for the dependencies
#     (optimized: step 4 reuses them), and this crate alone at opt-level 0 (it is compiled here
#     for the build script's work), which must print the build's warning that it is
#     unoptimized.
#  4. candle-flash-attn unpacked, its flash-attn-rocm dependency patched to the unpacked package
#     of step 2: `cargo test` (its API and model tests, on the packaged library).
#
# The build artifacts go to a cache outside the repository ($FLASH_ATTN_ROCM_PACKAGE_CACHE, by
# default ~/.cache/flash-attn-rocm/package-check), so a rerun recompiles only the two crates;
# the first run on a machine compiles the dependency tree once more. Not the repository's
# target directory: the unpacked crate has the same name, version and place in its workspace as
# the repository's, so cargo gives their artifacts the same names, and only file times would
# keep the repository's from being taken for the package's. The Triton venv and kernel caches
# are the build's usual ones (~/.cache/flash-attn-rocm).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${FLASH_ATTN_ROCM_PACKAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flash-attn-rocm/package-check}"
target="$cache/target"
# Registry limit on a .crate file (crates.io: 10 MB).
limit=$((10 * 1000 * 1000))
mkdir -p "$target"
work="$(mktemp -d "${TMPDIR:-/tmp}/flash-attn-rocm-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT
case "$work/" in "$repo"/*) echo "package-check: $work is inside the repository" >&2; exit 1 ;; esac
export CARGO_TARGET_DIR="$target"
start=$SECONDS
timings=()

# step NAME CMD...: runs CMD and records how long it took.
step() {
    local name="$1" begin=$SECONDS
    shift
    echo "package-check: $name"
    "$@"
    timings+=("$(printf '%5d s  %s' $((SECONDS - begin)) "$name")")
}

package() {
    # --allow-dirty: a developer's uncommitted edits are packaged too (CI's clone is clean).
    (cd "$repo" && cargo package --workspace --no-verify --allow-dirty)
    local name crate size status=0
    for name in flash-attn-rocm-0.1.0 candle-flash-attn-0.11.1; do
        crate="$target/package/$name.crate"
        size=$(stat -c %s "$crate")
        echo "package-check: $name.crate: $size bytes ($((size / 1024)) KiB; registry limit $((limit / 1000000)) MB), $(tar -tzf "$crate" | grep -vc '/$') files"
        if [ "$size" -gt "$limit" ]; then
            echo "package-check: $name.crate is over the registry limit" >&2
            status=1
        fi
        # -m: the files get the time of extraction. cargo package stamps every file with one fixed
        # date, so with the original times a rerun would reuse the build script and library
        # compiled from an earlier package in the shared target directory.
        tar -xmzf "$crate" -C "$work"
    done
    return $status
}

main_check() {
    (cd "$work/flash-attn-rocm-0.1.0" && cargo check --locked --all-targets)
}

# The build prints one `Triton <target>: N kernels` line per target; it must have embedded some.
triton_aot() {
    local log="$work/rdna-build.log"
    (cd "$work/flash-attn-rocm-0.1.0" &&
        FLASH_ATTN_ROCM_ARCHS=gfx1100 FLASH_ATTN_ROCM_TRITON_DIMS=64 FLASH_ATTN_ROCM_DTYPES=fp16 \
            cargo test --locked --features rocm --lib --test build_candle_check --test build_paths \
                --test triton_marshalling --config 'profile.dev.package.flash-attn-rocm.opt-level=0' 2>&1) |
        tee "$log"
    if ! grep -Eq 'Triton gfx1100: [1-9][0-9]* kernels' "$log"; then
        echo "package-check: the gfx1100 build embedded no Triton kernels" >&2
        return 1
    fi
    # This build is at opt-level 0, as a dependent crate's dev profile builds the crate: it must
    # say so and name the profile override (build/main.rs).
    if ! grep -q 'compiled without optimization.*\[profile.dev.package.flash-attn-rocm\] opt-level = 3' "$log"; then
        echo "package-check: the opt-level 0 build did not warn that it is unoptimized" >&2
        return 1
    fi
}

# The patch replaces the registry dependency by the unpacked package; the profile is the
# repository's, so the dependencies built in step 3 are reused, with flash-attn-rocm at
# opt-level 0 as there (compiled in a third of the time; the compat tests' CPU calls are small).
compat_tests() {
    (cd "$work/candle-flash-attn-0.11.1" && cargo test \
        --config "patch.crates-io.flash-attn-rocm.path='$work/flash-attn-rocm-0.1.0'" \
        --config 'profile.dev.opt-level=3' --config 'profile.dev.package."*".debug=false' \
        --config 'profile.dev.package.flash-attn-rocm.opt-level=0')
}

step "cargo package (both crates)" package
step "flash-attn-rocm package: cargo check --all-targets" main_check
step "flash-attn-rocm package: Triton AOT for gfx1100 (--features rocm, no ROCm) and the file-reading tests" triton_aot
step "candle-flash-attn package: cargo test" compat_tests

echo "package-check: step times"
printf '  %s\n' "${timings[@]}"
echo "package-check: passed in $((SECONDS - start)) s"
