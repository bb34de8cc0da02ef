#!/usr/bin/env bash
# The crate's AMD path on tinygrad's AMD ISA emulator, behind the HIP runtime stand-in
# (tools/hip-standin): the release code, its real HIP driver (src/gpu/hip.rs) and, for CK archs,
# CK's own launcher, with `libamdhip64` replaced by the stand-in (docs/testing.md).
#
#   FLASH_ATTN_ROCM_TINYGRAD=/path/to/tinygrad scripts/hip-emu-tests.sh [archs] [trial filter]
#
# 1. the instruction checks of our emulator corrections (tools/amd_emulator/checks.py);
# 2. `cargo test --features rocm --test amd_emulator --no-run` for the archs (default
#    gfx942,gfx1100,gfx1201; every head-dim tile, both dtypes; the Triton build is cached);
# 3. the stand-in linked with the exports those binaries import, and the exports checked;
# 4. every arch x class trial in its own process and the table (scripts/hip-emu-trials.sh).
# Exits 1 when a step fails, a trial fails or crashes, or no trial matches.
#
# A CK arch (gfx90a, gfx942, gfx950) needs hipcc: then everything runs in the ROCm chroot
# (scripts/rocm-chroot.sh), which gets the emulator's needs (numpy, clang, a shared libpython);
# the tinygrad checkout is bind-mounted there. Logs: $OUT (default target/hip-emu), one per trial.
# FLASH_ATTN_ROCM_EMULATOR_WAVES=lockstep runs the waves of a work-group in lockstep instead of
# each to its next barrier (tools/amd_emulator/scheduler.py).
set -u
: "${FLASH_ATTN_ROCM_TINYGRAD:?set FLASH_ATTN_ROCM_TINYGRAD to a tinygrad checkout}"
archs=${1:-gfx942,gfx1100,gfx1201}
filter=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

needs_ck=
case ",$archs," in *,gfx90a,*|*,gfx942,*|*,gfx950,*) needs_ck=1 ;; esac
if [ -n "$needs_ck" ] && [ -z "${HIP_EMU_INSIDE_CHROOT:-}" ]; then
  scripts/rocm-chroot.sh create || exit 1
  scripts/rocm-chroot.sh run -- bash -c 'command -v clang >/dev/null && python3 -c "import numpy" 2>/dev/null ||
    { apt-get install -y -qq clang python3-numpy libpython3-dev >/dev/null || { apt-get update -qq && apt-get install -y -qq clang python3-numpy libpython3-dev >/dev/null; }; }' || exit 1
  FLASH_ATTN_ROCM_CHROOT_BINDS=$FLASH_ATTN_ROCM_TINYGRAD exec scripts/rocm-chroot.sh run -- \
    env HIP_EMU_INSIDE_CHROOT=1 FLASH_ATTN_ROCM_TINYGRAD="$FLASH_ATTN_ROCM_TINYGRAD" OUT="${OUT:-}" \
    FLASH_ATTN_ROCM_TRITON_DIMS="${FLASH_ATTN_ROCM_TRITON_DIMS:-}" FLASH_ATTN_ROCM_DTYPES="${FLASH_ATTN_ROCM_DTYPES:-}" \
    FLASH_ATTN_ROCM_HDIMS="${FLASH_ATTN_ROCM_HDIMS:-}" FLASH_ATTN_ROCM_FILTER="${FLASH_ATTN_ROCM_FILTER:-}" \
    FLASH_ATTN_ROCM_EMULATOR_WAVES="${FLASH_ATTN_ROCM_EMULATOR_WAVES:-sequential}" \
    scripts/hip-emu-tests.sh "$archs" "$filter"
fi

# Inside the chroot, a target directory of its own: its binaries link against sid's libraries.
[ -n "${HIP_EMU_INSIDE_CHROOT:-}" ] && export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/hip-emu-chroot}
out=${OUT:-$root/target/hip-emu}
mkdir -p "$out"
export FLASH_ATTN_ROCM_ARCHS=$archs
export FLASH_ATTN_ROCM_TRITON_DIMS=${FLASH_ATTN_ROCM_TRITON_DIMS:-32,48,64,80,96,128,160,256,512}
export FLASH_ATTN_ROCM_DTYPES=${FLASH_ATTN_ROCM_DTYPES:-fp16,bf16}
# CK: the instances the ck_* trials call, f16 and bf16 at head dim 128: batch with a mask (causal,
# windows) and with softcap, group mode with ALiBi, paged split-KV with a mask (and its combine).
CK_TRIAL_FILTER='fmha_fwd_d128_*_batch_*_psskddv_nlogits_nbias_mask_lse_*,fmha_fwd_d128_*_batch_*_psskddv_logits_nbias_nmask_lse_*'
CK_TRIAL_FILTER+=',fmha_fwd_d128_*_group_*_nlogits_alibi_nmask_lse_*,fmha_fwd_splitkv_d128_*_group_*_nlogits_nbias_mask_*_pagedkv'
export FLASH_ATTN_ROCM_HDIMS=${FLASH_ATTN_ROCM_HDIMS:-128}
export FLASH_ATTN_ROCM_FILTER=${FLASH_ATTN_ROCM_FILTER:-$CK_TRIAL_FILTER}
started=$(date +%s)

echo "== instruction checks of the emulator corrections"
python3 tools/amd_emulator/checks.py >"$out/checks.log" 2>&1 || { cat "$out/checks.log"; exit 1; }
cat "$out/checks.log"

echo "== building (cargo test --features rocm --test amd_emulator --no-run, $archs)"
build=(cargo test --features rocm --test amd_emulator --no-run)
"${build[@]}" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
bin=$("${build[@]}" --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "amd_emulator" and m.get("executable"): print(m["executable"])')

echo "== the HIP stand-in, linked with what the binary imports"
python3 scripts/hip_standin.py build --out "$out/standin" "$bin" || exit 1
export LD_LIBRARY_PATH=$out/standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== trials (one process each)"
scripts/hip-emu-trials.sh "$bin" "$out" "$archs" "$filter"
status=$?
echo "== done in $(( $(date +%s) - started )) s; table: $out/table.md; tinygrad $(git -C "$FLASH_ATTN_ROCM_TINYGRAD" rev-parse HEAD 2>/dev/null || cat "$FLASH_ATTN_ROCM_TINYGRAD/SNAPSHOT" 2>/dev/null || echo "(unknown snapshot)")"
exit $status
