#!/usr/bin/env bash
# tests/rocm_candle (every public function on Candle's ROCm device) on the HIP stand-in, in the
# ROCm chroot: candle PR #3801 built with Debian's ROCm -dev packages, its rocBLAS/rocRAND loaded
# for real, every kernel on tinygrad's emulator (docs/testing.md, "Candle's ROCm device on the
# stand-in").
#
#   FLASH_ATTN_ROCM_TINYGRAD=/path/to/tinygrad CANDLE_PR=/path/to/candle scripts/hip-emu-candle.sh [arch]
#
# CANDLE_PR: a checkout of candle PR #3801 (8a17ca0a). arch: gfx1100 (default), or another the
# stand-in emulates. On a CK arch the build embeds hip-emu-tests.sh's CK instances, too few for
# every call of the suite, so its GPU-vs-CPU tests run with FLASH_ATTN_ROCM_KERNELS=triton and
# the refusals test under both `auto` and `ck`. The test binary builds from a copy of the
# working tree without Cargo.lock (the patch must replace the locked candle 0.11.1).
# Logs and the table: $OUT (default target/hip-emu-candle).
set -u
: "${FLASH_ATTN_ROCM_TINYGRAD:?set FLASH_ATTN_ROCM_TINYGRAD to a tinygrad checkout}"
: "${CANDLE_PR:?set CANDLE_PR to a checkout of candle PR #3801}"
arch=${1:-gfx1100}
root=$(cd "$(dirname "$0")/.." && pwd)
candle=$(cd "$CANDLE_PR" && pwd -P)
out=${OUT:-$root/target/hip-emu-candle}
if [ -z "${HIP_EMU_INSIDE_CHROOT:-}" ]; then
  # The copy on the host (the chroot has no git).
  mkdir -p "$out"
  rm -rf "$out/tree" && mkdir -p "$out/tree"
  (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$out/tree") || exit 1
  rm -f "$out/tree/Cargo.lock"
  "$root/scripts/rocm-chroot.sh" create || exit 1
  # rocm-rs's bindgen: libclang and the headers of every ROCm library it binds; the emulator:
  # clang, numpy, a shared libpython.
  packages="libclang-dev librocblas-dev librocrand-dev librocsolver-dev librocfft-dev librocsparse-dev libmiopen-dev clang python3-numpy libpython3-dev"
  "$root/scripts/rocm-chroot.sh" run -- bash -c "apt-get install -y -qq $packages >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq $packages >/dev/null; }" || exit 1
  binds="$FLASH_ATTN_ROCM_TINYGRAD:$candle:$out${CARGO_TARGET_DIR:+:$CARGO_TARGET_DIR}"
  FLASH_ATTN_ROCM_CHROOT_BINDS="$binds" exec "$root/scripts/rocm-chroot.sh" run -- \
    env HIP_EMU_INSIDE_CHROOT=1 FLASH_ATTN_ROCM_TINYGRAD="$FLASH_ATTN_ROCM_TINYGRAD" CANDLE_PR="$candle" OUT="$out" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-}" \
    "$root/scripts/hip-emu-candle.sh" "$arch"
fi

copy=$out/tree
export ROCM_PATH=/usr FLASH_ATTN_ROCM_ARCHS=$arch CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/hip-emu-candle-build}
export FLASH_ATTN_ROCM_TRITON_DIMS=${FLASH_ATTN_ROCM_TRITON_DIMS:-32,48,64,80,96,128,160,256,512}
export FLASH_ATTN_ROCM_DTYPES=${FLASH_ATTN_ROCM_DTYPES:-fp16,bf16}
# hip-emu-tests.sh's CK instances (its build cache serves both scripts).
export FLASH_ATTN_ROCM_HDIMS=${FLASH_ATTN_ROCM_HDIMS:-128}
export FLASH_ATTN_ROCM_FILTER=${FLASH_ATTN_ROCM_FILTER:-$(sed -n "s/^CK_TRIAL_FILTER+\{0,1\}='\(.*\)'$/\1/p" "$root/scripts/hip-emu-tests.sh" | tr -d '\n')}
build=(cargo test --features candle-rocm,candle/rocm --test rocm_candle --no-run
       --config "patch.crates-io.candle-core.path=\"$candle/candle-core\""
       --config "patch.crates-io.candle-nn.path=\"$candle/candle-nn\"")
echo "== building tests/rocm_candle for $arch against $candle"
(cd "$copy" && "${build[@]}") >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
bin=$(cd "$copy" && "${build[@]}" --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "rocm_candle" and m.get("executable"): print(m["executable"])')

echo "== the HIP stand-in, linked with what the binary and the libraries under Candle import"
python3 "$root/scripts/hip_standin.py" build --out "$out/standin" "$bin" || exit 1
export LD_LIBRARY_PATH=$out/standin HIP_STANDIN_DEVICES=$arch
# Candle compiles its own kernels with hipcc at run time and unbundles them with LLVM's bundler.
export PATH=/usr/lib/llvm-21/bin:$PATH

case "$arch" in gfx90a|gfx942|gfx950) data_kernels=triton ;; *) data_kernels=auto ;; esac
runs=("auto refusals::calls_ck_cannot_serve_are_errors_or_triton")
[ "$data_kernels" = triton ] && runs+=("ck refusals::calls_ck_cannot_serve_are_errors_or_triton")
for t in batch::batch_functions_match_cpu varlen::paged_functions_match_cpu varlen::varlen_functions_match_cpu; do
  runs+=("$data_kernels $t")
done
printf '| test | kernels | result | seconds | launches |\n|---|---|---|---|---|\n' >"$out/table.md"
for run in "${runs[@]}"; do
  kernels=${run%% *} trial=${run#* }
  log="$out/$arch.$kernels.${trial//::/.}.log"
  t0=$(date +%s)
  HIP_STANDIN_LAUNCH_LOG=$log.launches FLASH_ATTN_ROCM_KERNELS=$kernels "$bin" --exact "$trial" --nocapture >"$log" 2>&1
  if grep -q "1 passed" "$log"; then result="ran, matched"; else result="failed: $(grep -m1 -A1 'panicked at' "$log" | tail -1 | cut -c1-160)"; fi
  printf '| %s | %s | %s | %s | %s |\n' "$trial" "$kernels" "$result" "$(( $(date +%s) - t0 ))" \
    "$(wc -l <"$log.launches" 2>/dev/null || echo 0)" | tee -a "$out/table.md"
done
echo "== table: $out/table.md; tinygrad $(git -C "$FLASH_ATTN_ROCM_TINYGRAD" rev-parse HEAD 2>/dev/null || cat "$FLASH_ATTN_ROCM_TINYGRAD/SNAPSHOT" 2>/dev/null || echo "(unknown snapshot)")"
