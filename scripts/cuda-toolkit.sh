#!/usr/bin/env bash
# A CUDA 13.0 toolkit folder built from NVIDIA's PyPI wheels, enough to *build* candle's `cuda`
# feature (and so our `candle-cuda` feature) on a machine without CUDA or an NVIDIA GPU:
# nvcc for candle-kernels' PTX, headers, and libraries to link against (cudarc links libcuda,
# libnvrtc, libcurand, libcublas, libcublasLt). No wheel ships libcuda (it comes with the GPU
# driver), so a stub exporting the driver's cu* names (those cudarc declares) stands in for it
# at link time; the real driver answers at run time.
#
# Versions: those of the wheels torch 2.11 (cu130) uses, so the built binaries run next to it;
# nvcc 13.0 emits PTX that drivers from 580 load.
#
# Usage: scripts/cuda-toolkit.sh [DIR]   (default ~/.cache/flash-attn-rocm/cuda-13.0)
# Then, in the shell that builds:  eval "$(scripts/cuda-toolkit.sh --env [DIR])"
# The binaries need an NVIDIA driver of the 580 series or newer (CUDA 13.0).
set -euo pipefail

print_env=0
if [ "${1:-}" = "--env" ]; then print_env=1; shift; fi
dir=${1:-${FLASH_ATTN_ROCM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flash-attn-rocm}/cuda-13.0}
toolkit=$dir/toolkit

# The compute capability candle-kernels compiles Candle's own kernels for (CUDA_COMPUTE_CAP,
# digits only), that of the card being built for: the lowest target of FLASH_ATTN_ROCM_CUDA_ARCHS,
# else the lowest GPU nvidia-smi lists (the targets this crate's build takes then), else 80, the
# lowest target this crate builds when it sees no GPU. With several, the lowest: Candle's PTX
# runs on higher compute capabilities, not on lower ones.
compute_cap() {
  local caps
  if [ -n "${FLASH_ATTN_ROCM_CUDA_ARCHS:-}" ]; then
    caps=$(tr ',' '\n' <<<"$FLASH_ATTN_ROCM_CUDA_ARCHS" | sed -n 's/^ *sm_\([0-9][0-9]*\) *$/\1/p')
  elif command -v nvidia-smi >/dev/null 2>&1; then
    caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ')
  fi
  sort -n <<<"${caps:-80}" | grep -m1 . || echo 80
}

env_lines() {
  echo "export CUDA_HOME='$toolkit'"
  echo "export PATH='$toolkit/bin':\"\$PATH\""
  echo "export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-$(compute_cap)}"
}

if [ -f "$toolkit/.complete" ]; then
  if [ $print_env = 1 ]; then env_lines; else echo "CUDA toolkit ready at $toolkit"; fi
  exit 0
fi

python=${PYTHON:-python3}
wheels=$dir/wheels
echo "installing the CUDA 13.0 wheels into $wheels (about 1.3 GB)" >&2
"$python" -m pip install --quiet --target "$wheels" \
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.1.0.3 \
  nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88 >&2
cu13=$wheels/nvidia/cu13

rm -rf "$toolkit"
mkdir -p "$toolkit/lib64/stubs"
for sub in bin include nvvm; do ln -s "$cu13/$sub" "$toolkit/$sub"; done
# The linker looks for unversioned names; the wheels ship only the versioned ones.
for lib in "$cu13"/lib/lib*.so.*; do
  name=$(basename "$lib")
  ln -sf "$lib" "$toolkit/lib64/$name"
  ln -sf "$lib" "$toolkit/lib64/${name%%.so.*}.so"
done

# The libcuda stub: one empty function per driver entry point cudarc declares.
# `|| true`: without a match ls fails, and under pipefail the assignment would end the script
# before the message below.
cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* 2>/dev/null | tail -n 1 || true)
if [ -z "$cudarc" ]; then
  echo "cudarc's sources are not in the cargo registry: run 'cargo fetch' first" >&2
  exit 1
fi
grep -rhoE "pub (unsafe )?fn cu[A-Za-z0-9_]+" "$cudarc/src/driver/sys" | sed -E 's/.* fn //' | sort -u \
  | sed 's/.*/void &(void) {}/' > "$toolkit/lib64/stubs/libcuda_stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$toolkit/lib64/stubs/libcuda.so" \
  "$toolkit/lib64/stubs/libcuda_stub.c"
touch "$toolkit/.complete"
if [ $print_env = 1 ]; then env_lines; else echo "CUDA toolkit ready at $toolkit"; fi
