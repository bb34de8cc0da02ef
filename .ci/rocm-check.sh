#!/usr/bin/env bash
# The ROCm compile checks, in the Debian sid ROCm chroot (created or reused outside the repo by
# scripts/rocm-chroot.sh); no GPU needed. Needs root.
#
#  0. The side-tensor guard's clamping rules (tests/cpp/side_tensor_clamp.cpp, g++, a second), and
#     the shim's HIP error checks (csrc/hip_check.h) against a model of ROCm 6 and 7's last-error
#     rules (tests/cpp/hip_last_error.cpp with tests/cpp/fake_hip, g++).
#  1. CK + Triton for gfx942: build and link `--features rocm` (tests/rocm_kernels.rs), check
#     the CK code objects (scripts/check_code_objects.py: every generated kernel in the linked
#     binary, MFMA used, no calls in kernels), run the test binary (its tests report a skip).
#     CK kernel set: FLASH_ATTN_ROCM_ARCHS/HDIMS/DTYPES/FILTER, by default gfx942, hdim 128, fp16
#     and a handful of instances, one per kernel family the API reaches: batch with a mask,
#     varlen with ALiBi, softcap, paged K/V (split-KV, with its combine kernels); set
#     FLASH_ATTN_ROCM_FILTER= (empty) for every variant of that head dim and dtype (35
#     instances). Triton here: FLASH_ATTN_ROCM_TRITON_DIMS and FLASH_ATTN_ROCM_TRITON_FILTER, by
#     default the plain prefill kernels of the 128 tile only, since step 3 covers the full set.
#  1b. More head-dim tiles (64, the default build's other tile; 96, one without split-KV
#     kernels; 256, the largest), fp16, one instance per kernel family it selects: forward
#     batch, forward group (varlen), split-KV (paged) and its combine kernels, the last two only
#     for the tiles this CK has split-KV kernels for (build/ck_codegen.py skips the others);
#     built, linked and checked like step 1 (its own build cache key: a warm rerun compiles
#     nothing). Not every tile the build accepts (32-256): cold, the seven took about 17 of CI's
#     90 minutes, and the instances of a tile come from CK's own templates (the pinned
#     flash-attention builds them all); what is ours, the selection and the shim's dispatch per
#     tile, these three and step 1's 128 exercise.
#  2. RDNA (gfx1100, gfx1201): the Triton-only build (no CK, no hipcc) and link, and its test
#     binary. The plain prefill kernels of tile 64 only (fp16 and bf16): this proves the build
#     path, embedding and the no-CK API; step 3 compiles every kernel for these archs.
#  2b. After steps 1 and 2: the HIP runtime stand-in (tools/hip-standin, scripts/hip_standin.py)
#     linked with what each test binary imports, its exports checked against those imports, and
#     each binary started on it (--list; no kernel runs without the emulator).
#  3. Triton AOT check: the test of aot.py's launch-contract check (tests/python/
#     test_aot_metadata.py, in the triton venv: it compiles one small kernel for gfx1100), then
#     kernels/aot.py for each kernel set of AOT_SETS (below: every power-of-two tile of one
#     target per tile family in fp16, RDNA 2's own bf16 tiles, the other register-file classes
#     and the split tiles at the tiles the check covers),
#     then
#     scripts/check_triton_objects.py on the code objects (every kernel present and built for
#     its target, WMMA on gfx11/gfx12, MFMA on gfx9, v_dot2 / v_fma and no matrix instructions
#     on gfx1030; spills reported), then the
#     static kernel report (tested first by tests/python/test_kernel_report.py, in the venv: it
#     compiles the same small kernel through aot.py), scripts/kernel_report.py:
#     registers, spills, occupancy, warp layouts, issued/useful matrix work and instructions per
#     4096 useful MACs of every code object, a table in kernel_report.md beside them and a
#     summary per target; with KERNEL_REPORT_CHECK=1, the default, it fails on any attn_fwd that
#     issues more matrix work than it uses (gfx1030: repeats its dot/FMA products) or spills in
#     its key loop at head dim <= 128). Cached
#     under the chroot's ~/.cache by a hash of kernels/*.py: an unchanged rerun compiles nothing.
set -euo pipefail

CI_FILTER='fmha_fwd_d128_fp16_batch_*_psskddv_nlogits_nbias_mask_lse_*'
CI_FILTER+=',fmha_fwd_d128_fp16_group_*_nlogits_alibi_nmask_lse_*'
CI_FILTER+=',fmha_fwd_d128_fp16_batch_*_psddv_logits_nbias_nmask_lse_*'
CI_FILTER+=',fmha_fwd_splitkv_d128_fp16_group_*_pssk_nlogits_nbias_mask_*_pagedkv'
# Step 1b: one fp16 instance per head-dim tile and kernel family (12 with the combine kernels).
TILE_HDIMS=64,96,256
TILE_FILTER='fmha_fwd_d*_fp16_batch_*_psskddv_nlogits_nbias_nmask_lse_*'
TILE_FILTER+=',fmha_fwd_d*_fp16_group_*_psskddv_nlogits_nbias_nmask_lse_*'
TILE_FILTER+=',fmha_fwd_splitkv_d*_fp16_group_*_psskddv_nlogits_nbias_nmask_*_pagedkv'
RDNA_ARCHS=gfx1100,gfx1201
# The builds of steps 1 and 2 embed the plain flat prefill kernels of their tile (exact and padded
# head dim) per dtype, and the merge kernels (always kept): they prove the build, the embedding
# and the linking; step 3 compiles every Triton kernel.
TRITON_BUILD_FILTER='fwd_prefill_*_flat'
# Step 3's kernel sets, one per line: targets, head-dim tiles, dtypes. Each is compiled by
# kernels/aot.py into a directory of its own (cached by a hash of kernels/*.py), checked by
# scripts/check_triton_objects.py and reported by scripts/kernel_report.py.
AOT_SETS=(
    # One target per tile family of kernels/aot.py, every power-of-two tile: CDNA (gfx942), RDNA 2
    # (gfx1030), RDNA 3 (gfx1100), RDNA 4 (gfx1201). fp16: bf16 takes the same tiles on these.
    "gfx942,gfx1030,gfx1100,gfx1201 32,64,128,256 fp16"
    # RDNA 2's bf16, which has tiles of its own (family rdna2_bf16: no matrix cores, Q converted
    # to f32).
    "gfx1030 32,64,128,256 bf16"
    # The targets whose code differs from their family's or register file's at the tiles the
    # report's --check covers (d <= 128): gfx90a, CDNA 2 with gfx942's tiles (its MFMA set and
    # buffer-addressed scratch differ); gfx1103, the RDNA 3 parts with 128 KiB of VGPRs per SIMD
    # and tiles of their own (family rdna3_small); gfx1151, gfx1100's tiles on RDNA 3.5, for
    # which AMD's kernel has a config of its own.
    "gfx90a,gfx1103,gfx1151 32,64,128 fp16"
    # The split head-dim tiles below 128 (kernels/aot.py SPLIT_DIMS): they take the launch tiles
    # of the power of two above them or their own (SPLIT_TILES; gfx1103's differ from gfx1100's),
    # so the report's check is what keeps their key loops out of scratch and their matrix work
    # unrepeated. 160 and 192, like 256, would only be reported.
    "gfx942,gfx1030,gfx1100,gfx1103,gfx1201 48,80,96 fp16"
)
# bf16 on the other targets and every tile of the second and third lines would about double the
# AOT step, the longest of this script (in CI as long as the rest of it together).
# 1: step 3's kernel report fails the run on repeated matrix work or key-loop spills (--check);
# 0: it only reports.
KERNEL_REPORT_CHECK="${KERNEL_REPORT_CHECK:-1}"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chroot_sh="$repo/scripts/rocm-chroot.sh"
target="$repo/target/chroot"
arch="${FLASH_ATTN_ROCM_ARCHS:-gfx942}"
# The chroot's own cache, at this path inside it (HOME is the host's there, ~/.cache is not):
# the build's triton venv and kernel caches, and the AOT check's output.
cache="$HOME/.cache/flash-attn-rocm"
triton_version="$(sed -n 's/^pub const TRITON_VERSION: &str = "\(.*\)";/\1/p' "$repo/build/python_env.rs")"
[ -n "$triton_version" ] || { echo "rocm-check: no TRITON_VERSION in build/python_env.rs" >&2; exit 1; }
# The venv the gfx942 build creates (build/python_env.rs), inside the chroot.
triton_python="$cache/triton-$triton_version/bin/python"
start=$SECONDS
timings=()

# step NAME CMD...: runs CMD and records how long it took.
step() {
    local name="$1" begin=$SECONDS
    shift
    "$@"
    timings+=("$(printf '%5d s  %s' $((SECONDS - begin)) "$name")")
    echo "rocm-check: $name in $((SECONDS - begin)) s"
}

# Runs CMD in the chroot. Inside it the repo is mounted at the same path, so repo paths hold
# there too; host settings that name host paths are replaced or dropped.
in_chroot() {
    "$chroot_sh" run -- env -u FLASH_ATTN_ROCM_PYTHON -u FLASH_ATTN_ROCM_BUILD_DIR \
        FLASH_ATTN_ROCM_CACHE="$cache" CARGO_TARGET_DIR="$target" \
        CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" "$@"
}

# cargo_build MESSAGES VAR=VALUE...: builds and links tests/rocm_kernels.rs with the `rocm`
# feature, unoptimized: this build is for inspection and linking, and the crate's optimized dev
# profile would make compiling the dependencies a lot slower.
cargo_build() {
    local messages="$1"
    shift
    in_chroot env CARGO_PROFILE_DEV_OPT_LEVEL=0 "$@" cargo test --profile dev --features rocm --test rocm_kernels --no-run \
        --message-format=json-render-diagnostics >"$messages"
}

# run_tests MESSAGES: runs the test binary the build named last. No GPU here: the tests that
# need one report that they skip; this proves the binary loads and its no-GPU tests pass.
run_tests() {
    in_chroot "$(last_binary "$1")" --nocapture
}

# last_binary MESSAGES: the test executable the build named last.
last_binary() {
    in_chroot python3 -c 'import json, sys
exe = [m["executable"] for m in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith("{")))
       if m.get("executable")]
print(exe[-1])' "$1"
}

# standin_check MESSAGES: the HIP runtime stand-in (tools/hip-standin) linked with the exports
# the test binary the build named last imports, the exports checked against those imports, then
# the binary started on it with --list: every import resolves at its symbol version, and hipcc's
# constructors register their fat binaries with it. No kernel runs here: the emulator is in no
# package registry (scripts/hip-emu-tests.sh runs them).
standin_check() {
    local binary
    binary="$(last_binary "$1")"
    in_chroot python3 "$repo/scripts/hip_standin.py" build --out "$target/hip-standin" "$binary"
    in_chroot env LD_LIBRARY_PATH="$target/hip-standin" "$binary" --list >/dev/null
}

# The AOT output for the current kernels: compiled once per key, then reused.
# aot_key TARGETS DIMS DTYPES: the key of one aot.py run.
aot_key() {
    (cd "$repo" && { echo "triton $triton_version targets $1 dims $2 dtypes $3"; sha256sum kernels/*.py; } |
        sha256sum | cut -c1-16)
}
aot_dirs=()
for set in "${AOT_SETS[@]}"; do
    read -r targets dims dtypes <<<"$set"
    aot_dirs+=("$cache/ci-aot/$(aot_key "$targets" "$dims" "$dtypes")")
done

# aot_compile DIR TARGETS DIMS DTYPES: kernels/aot.py for TARGETS at the head-dim tiles DIMS and
# the dtypes DTYPES into DIR.
aot_compile() {
    local dir="$1" targets="$2" dims="$3" dtypes="$4" host_dir
    host_dir="$("$chroot_sh" path)$dir"
    if [ -f "$host_dir/complete" ]; then
        echo "rocm-check: reusing $dir (kernels/*.py unchanged)"
        return
    fi
    local python="$triton_python"
    if ! in_chroot test -x "$python"; then
        echo "rocm-check: no triton venv at $python in the chroot (the gfx942 build creates it)" >&2
        return 1
    fi
    # Compiled into a staging directory, moved into place when complete; Triton's own cache is
    # kept there until then, so an interrupted run resumes where it stopped.
    local staging="$dir.tmp"
    mkdir -p "$host_dir.tmp"
    echo "rocm-check: compiling the Triton kernels for $targets (tiles $dims, $dtypes) into $dir (log: aot.log there)"
    if ! in_chroot env PYTHONDONTWRITEBYTECODE=1 TRITON_CACHE_DIR="$staging/jit-cache" \
        "$python" "$repo/kernels/aot.py" --targets "$targets" --block-dims "$dims" --dtypes "$dtypes" --out "$staging" \
        >"$host_dir.tmp/aot.log" 2>&1; then
        tail -40 "$host_dir.tmp/aot.log" >&2
        echo "rocm-check: kernels/aot.py failed (log: $host_dir.tmp/aot.log)" >&2
        return 1
    fi
    tail -1 "$host_dir.tmp/aot.log"
    rm -rf "$host_dir.tmp/jit-cache"
    touch "$host_dir.tmp/complete"
    # Outputs for older kernel sources are of no further use (this run's other sets are kept).
    local keep=() kept
    for kept in "${aot_dirs[@]}"; do keep+=(! -name "$(basename "$kept")*"); done
    find "$(dirname "$host_dir")" -mindepth 1 -maxdepth 1 -type d "${keep[@]}" -exec rm -rf {} +
    mv "$host_dir.tmp" "$host_dir"
}

step "chroot ready" "$chroot_sh" create
mkdir -p "$target"
# The side-tensor guard's clamping rules (csrc/side_tensor_clamp.h), host-compiled and tested.
step "side-tensor clamp test (host)" in_chroot sh -c "g++ -std=c++17 -O1 -Wall -Werror -I'$repo/csrc' \
    '$repo/tests/cpp/side_tensor_clamp.cpp' -o '$target/side_tensor_clamp' && '$target/side_tensor_clamp'"
# The shim's HIP error checks on ROCm 6 and 7 rules; the fake HIP headers come first.
step "HIP last-error test (host)" in_chroot sh -c "g++ -std=c++17 -O1 -Wall -Werror \
    -I'$repo/tests/cpp/fake_hip' -I'$repo/csrc' '$repo/tests/cpp/hip_last_error.cpp' \
    -o '$target/hip_last_error' && '$target/hip_last_error'"
# Both builds share one target dir, so the dependencies compile once (switching the kernel set
# recompiles only this crate, in seconds); they also share the test binary's path, so each
# build's checks run before the next build.
mkdir -p "$target"

ck_messages="$target/rocm-check-messages.json"
step "cargo build + link (--features rocm, $arch)" cargo_build "$ck_messages" \
    FLASH_ATTN_ROCM_ARCHS="$arch" \
    FLASH_ATTN_ROCM_HDIMS="${FLASH_ATTN_ROCM_HDIMS:-128}" \
    FLASH_ATTN_ROCM_DTYPES="${FLASH_ATTN_ROCM_DTYPES:-fp16}" \
    FLASH_ATTN_ROCM_FILTER="${FLASH_ATTN_ROCM_FILTER-$CI_FILTER}" \
    FLASH_ATTN_ROCM_TRITON_DIMS="${FLASH_ATTN_ROCM_TRITON_DIMS:-128}" \
    FLASH_ATTN_ROCM_TRITON_FILTER="${FLASH_ATTN_ROCM_TRITON_FILTER-$TRITON_BUILD_FILTER}"
step "CK code-object check ($arch)" in_chroot python3 "$repo/scripts/check_code_objects.py" \
    --cargo-json "$ck_messages" --arch "${arch%%,*}"
step "test binary ($arch)" run_tests "$ck_messages"
step "HIP stand-in: unit tests" in_chroot env HIP_STANDIN_INCLUDE=/usr/include \
    cargo test --release --quiet --manifest-path "$repo/tools/hip-standin/Cargo.toml"
step "HIP stand-in: exports and start ($arch)" standin_check "$ck_messages"

tiles_messages="$target/rocm-check-tiles-messages.json"
step "cargo build + link (--features rocm, $arch, head-dim tiles $TILE_HDIMS)" cargo_build "$tiles_messages" \
    FLASH_ATTN_ROCM_ARCHS="$arch" FLASH_ATTN_ROCM_HDIMS="$TILE_HDIMS" FLASH_ATTN_ROCM_DTYPES=fp16 \
    FLASH_ATTN_ROCM_FILTER="$TILE_FILTER" FLASH_ATTN_ROCM_TRITON_DIMS=128 \
    FLASH_ATTN_ROCM_TRITON_FILTER="${FLASH_ATTN_ROCM_TRITON_FILTER-$TRITON_BUILD_FILTER}"
step "CK code-object check ($arch, head-dim tiles $TILE_HDIMS)" in_chroot python3 "$repo/scripts/check_code_objects.py" \
    --cargo-json "$tiles_messages" --arch "${arch%%,*}" --require-tiles "$TILE_HDIMS"

rdna_messages="$target/rocm-check-rdna-messages.json"
step "cargo build + link (--features rocm, $RDNA_ARCHS, Triton only)" cargo_build "$rdna_messages" \
    FLASH_ATTN_ROCM_ARCHS="$RDNA_ARCHS" FLASH_ATTN_ROCM_TRITON_DIMS=64 FLASH_ATTN_ROCM_DTYPES=fp16,bf16 \
    FLASH_ATTN_ROCM_TRITON_FILTER="$TRITON_BUILD_FILTER"
step "test binary ($RDNA_ARCHS)" run_tests "$rdna_messages"
step "HIP stand-in: exports and start ($RDNA_ARCHS)" standin_check "$rdna_messages"

step "aot.py launch-contract test" in_chroot env PYTHONDONTWRITEBYTECODE=1 \
    "$triton_python" "$repo/tests/python/test_aot_metadata.py"
step "kernel report test" in_chroot env PYTHONDONTWRITEBYTECODE=1 \
    "$triton_python" "$repo/tests/python/test_kernel_report.py"
for i in "${!AOT_SETS[@]}"; do
    read -r targets dims dtypes <<<"${AOT_SETS[$i]}"
    step "Triton AOT compile ($targets, tiles $dims, $dtypes)" aot_compile "${aot_dirs[$i]}" "$targets" "$dims" "$dtypes"
done
for i in "${!AOT_SETS[@]}"; do
    read -r targets dims dtypes <<<"${AOT_SETS[$i]}"
    step "Triton code-object check ($targets, tiles $dims, $dtypes)" in_chroot python3 \
        "$repo/scripts/check_triton_objects.py" "${aot_dirs[$i]}" --targets "$targets" --block-dims "$dims" --dtypes "$dtypes"
done
report_check=""
if [ "$KERNEL_REPORT_CHECK" = 1 ]; then report_check=--check; fi
for i in "${!AOT_SETS[@]}"; do
    read -r targets dims dtypes <<<"${AOT_SETS[$i]}"
    # shellcheck disable=SC2086  # $report_check: no argument when empty
    step "Triton kernel report ($targets, tiles $dims, $dtypes)" in_chroot env PYTHONDONTWRITEBYTECODE=1 python3 \
        "$repo/scripts/kernel_report.py" "${aot_dirs[$i]}" --targets "$targets" $report_check
done

echo "rocm-check: step times"
printf '  %s\n' "${timings[@]}"
echo "rocm-check: passed in $((SECONDS - start)) s"
