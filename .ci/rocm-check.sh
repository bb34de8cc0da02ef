#!/usr/bin/env bash
# Builds and links the `rocm` feature in the Debian sid ROCm chroot (created or reused outside
# the repo by scripts/rocm-chroot.sh), then checks the GPU code objects: every generated kernel
# present in the linked test binary, MFMA instructions used, no calls inside kernels.
#
# Kernel set: FLASH_ATTN_ROCM_ARCHS/HDIMS/DTYPES/FILTER, by default gfx942, hdim 128, fp16 and a
# handful of instances, one per kernel family the API reaches: batch with a mask, varlen with
# ALiBi, softcap, paged K/V (split-KV, with its combine kernels). Set FLASH_ATTN_ROCM_FILTER=
# (empty) to build every variant of that head dim and dtype (35 instances). Needs root.
set -euo pipefail

CI_FILTER='fmha_fwd_d128_fp16_batch_*_psskddv_nlogits_nbias_mask_lse_*'
CI_FILTER+=',fmha_fwd_d128_fp16_group_*_nlogits_alibi_nmask_lse_*'
CI_FILTER+=',fmha_fwd_d128_fp16_batch_*_psddv_logits_nbias_nmask_lse_*'
CI_FILTER+=',fmha_fwd_splitkv_d128_fp16_group_*_pssk_nlogits_nbias_mask_*_pagedkv'

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chroot_sh="$repo/scripts/rocm-chroot.sh"
target="$repo/target/chroot"
arch="${FLASH_ATTN_ROCM_ARCHS:-gfx942}"
start=$SECONDS

step=$SECONDS
"$chroot_sh" create
echo "rocm-check: chroot ready in $((SECONDS - step)) s"

step=$SECONDS
mkdir -p "$target"
# The dev profile: this build is for inspection and linking, and the test profile's opt-level 3
# would make compiling the dependencies a lot slower.
messages="$target/rocm-check-messages.json"
# Inside the chroot the repo is mounted at the same path, so these paths hold there too.
"$chroot_sh" run -- env \
    CARGO_TARGET_DIR="$target" \
    CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
    FLASH_ATTN_ROCM_ARCHS="$arch" \
    FLASH_ATTN_ROCM_HDIMS="${FLASH_ATTN_ROCM_HDIMS:-128}" \
    FLASH_ATTN_ROCM_DTYPES="${FLASH_ATTN_ROCM_DTYPES:-fp16}" \
    FLASH_ATTN_ROCM_FILTER="${FLASH_ATTN_ROCM_FILTER-$CI_FILTER}" \
    cargo test --profile dev --features rocm --test rocm_kernels --no-run \
    --message-format=json-render-diagnostics >"$messages"
echo "rocm-check: cargo build + link (--features rocm, $arch) in $((SECONDS - step)) s"

step=$SECONDS
"$chroot_sh" run -- python3 "$repo/scripts/check_code_objects.py" \
    --cargo-json "$messages" --arch "${arch%%,*}"
echo "rocm-check: code-object check in $((SECONDS - step)) s"

step=$SECONDS
binary="$(python3 -c 'import json,sys
exe=[m["executable"] for m in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith("{"))) if m.get("executable")]
print(exe[-1])' "$messages")"
# No GPU here: the tests report that they skip; this proves the binary loads and the bridge runs.
"$chroot_sh" run -- "$binary" --nocapture
echo "rocm-check: test binary ran in $((SECONDS - step)) s"

echo "rocm-check: passed in $((SECONDS - start)) s"
