//! The Triton kernels on a real GPU: every public function (candle-flash-attn's eleven,
//! `FlashAttn::forward_with_lse` and the `*_with_lse` functions) runs on CPU tensors once on the
//! CPU backend and once offloaded to the GPU through the Triton path
//! (`flash_attn_rocm::triton::offload::run_on_gpu`: upload, plan, launch, download). Both outputs
//! must pass the parity rule against the f64 reference and the GPU LSE must match the CPU's.
//!
//! The GPU: with `cuda-verify`, device 0 of the CUDA driver (the NVIDIA check of the same kernel
//! sources, compiled to sm_90); with `rocm` alone, device 0 of HIP. Without a GPU every test
//! prints why it skips, and passes.
#![cfg(feature = "triton")]

#[path = "../common/mod.rs"]
mod common;

// The GPU-vs-CPU cases of the Candle ROCm suite, run here through the offload.
#[path = "../rocm_candle/batch.rs"]
mod batch;
mod check;
mod triton_cases;
#[path = "../rocm_candle/varlen.rs"]
mod varlen;
