//! The ROCm backend on a real AMD GPU, through Candle: every public function (candle-flash-attn's
//! eleven, `FlashAttn::forward_with_lse` and the `*_with_lse` functions) runs on
//! `Device::new_rocm(0)` with f16 and bf16 inputs, and again on the CPU backend with the same
//! inputs. Both outputs must pass the CPU parity tests' rule against the f64 reference
//! (`max|out - ref| <= 2 * max|naive_lowprec - ref| + eps`), and the GPU LSE must match the CPU's.
//! Calls CK cannot serve must return an `Err`.
//!
//! Build: `--features candle-rocm` with candle-core patched to PR #3801 and its `rocm` feature on
//! (see the README). The default kernel set (head dims 64 and 128, fp16 and bf16, paged kernels)
//! serves every case here; the batch and varlen LSE cases also need `FLASH_ATTN_ROCM_LSE=1`, and
//! without it they check that the call fails naming the missing LSE kernel.
//! Without an AMD GPU every test prints why it skips, and passes.
#![cfg(feature = "candle-rocm")]

// One test binary in a folder: `common` is the other test files' shared support.
#[path = "../common/mod.rs"]
mod common;

mod batch;
mod check;
mod refusals;
mod varlen;
