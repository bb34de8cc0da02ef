//! The ROCm backend on a real AMD GPU, through Candle: every public function (candle-flash-attn's
//! eleven, `FlashAttn::forward_with_lse` and the `*_with_lse` functions) runs on
//! `Device::new_rocm(0)` with f16 and bf16 inputs, and again on the CPU backend with the same
//! inputs. Both outputs must pass the CPU parity tests' rule against the f64 reference
//! (`max|out - ref| <= 2 * max|naive_lowprec - ref| + eps`), and the GPU LSE must match the CPU's.
//! Calls CK cannot serve run on our Triton kernels, or, under `FLASH_ATTN_ROCM_KERNELS=ck`, must
//! return an `Err` that says why.
//!
//! Build: `--features candle-rocm` with candle-core patched to PR #3801 and its `rocm` feature on
//! (see the README). The default kernel set serves every case here. Under
//! `FLASH_ATTN_ROCM_KERNELS=ck`, the batch and varlen LSE cases also need CK's LSE kernels
//! (`FLASH_ATTN_ROCM_LSE=1`), and without them they check that the call fails naming them.
//! Without an AMD GPU every test prints why it skips, and passes. Run on HIP's stand-in
//! (emulated GPUs): docs/testing.md.
#![cfg(feature = "candle-rocm")]

// One test binary in a folder: `common` is the other test files' shared support.
#[path = "../common/mod.rs"]
mod common;

mod batch;
mod check;
mod refusals;
mod varlen;
