#!/usr/bin/env bash
# CI step: the Candle CUDA glue compiles (candle's `cuda` feature needs nvcc: a CUDA 13.0 toolkit
# folder built from PyPI wheels by scripts/cuda-toolkit.sh, cached outside the repository), and
# the API docs build with every public item documented and every link resolving, for the
# default build, the NVIDIA build and the ROCm build (DOCS_RS: no native code, no ROCm needed);
# the doc examples of the GPU path (glue::GpuDevice) compile; every NVIDIA target's kernels
# compile within its shared memory and launch contract (kernels/aot.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A small Triton kernel set: the glue, not the kernels, is what these steps check.
export FLASH_ATTN_ROCM_TRITON_DIMS=64 FLASH_ATTN_ROCM_DTYPES=fp16

step_start=$(date +%s)
# pip from the Triton venv the build creates under the cache root (.ci/run's earlier steps made
# it; this build is a no-op then).
cache=${FLASH_ATTN_ROCM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flash-attn-rocm}
[ -x "$cache/triton-3.6.0/bin/python" ] || cargo build --features cuda-verify --lib

# First what reuses the `cuda-verify` library .ci/run's Triton step built: the toolkit's
# environment below changes PATH, which the build script reads (nvidia-smi), so after it the
# library would be compiled again.
echo "== cargo doc -D warnings (missing docs denied by the crate)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib --features cuda-verify
DOCS_RS=1 RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib --features rocm
# The GPU path's doc examples (glue::GpuDevice, no_run), pasted into a user's crate and
# compiled: .ci/run built and ran the others, which no feature gates, as doctests and pasted.
# (Doctests with the feature on would only repeat those: the pasted build is the stricter one.)
echo "== doc examples of the GPU path"
python3 scripts/pasted_examples.py --features cuda-verify --gated-only
echo "== docs and GPU-path examples took $(( $(date +%s) - step_start )) s"

# The toolkit script reads cudarc's sources from cargo's registry, and no build before this one
# needed candle's `cuda` dependencies: on a fresh machine they are not there yet.
cargo fetch --locked
PYTHON=$cache/triton-3.6.0/bin/python scripts/cuda-toolkit.sh
eval "$(scripts/cuda-toolkit.sh --env)"
# Every variant of the NVIDIA targets the build does not compile in full elsewhere (sm_90's run
# on the GPU) at the tiles of the most shared memory, 128 and 256, and one split tile; fp16 only:
# bf16 tiles take the same shared memory and arguments. A split tile (80, 96, 160) takes the
# launch tile of the power of two above it with less shared memory (kernels/aot.py), so 80 stands
# for the others' launch contract; the 64 tile is built by .ci/run's cuda-verify step for every
# NVIDIA target, and 32 takes less than 64. sm_89 takes sm_86's tiles and has its shared memory
# (kernels/aot.py, tile_family), so its shared memory and launch contract are sm_86's: checked
# once.
nvidia_dims=80,128,256
echo "== kernels/aot.py --targets sm_80,sm_86 (fp16, every variant of the tiles $nvidia_dims)"
aot_out=$cache/ci-aot-nvidia
rm -rf "$aot_out"
"$cache/triton-3.6.0/bin/python" kernels/aot.py --targets sm_80,sm_86 --dtypes fp16 --block-dims "$nvidia_dims" --out "$aot_out" \
  --jobs "$(nproc)" > "$aot_out.log" 2>&1 || { tail -40 "$aot_out.log"; exit 1; }
tail -1 "$aot_out.log"
echo "== NVIDIA AOT check took $(( $(date +%s) - step_start )) s"
echo "== cargo check --features candle-cuda (the Candle CUDA glue, its tests and examples)"
cargo check --features candle-cuda --lib --tests --examples
cargo check -p candle-flash-attn --features candle-cuda --examples
echo "== candle-cuda check took $(( $(date +%s) - step_start )) s"

echo "== cuda and doc checks took $(( $(date +%s) - step_start )) s"
