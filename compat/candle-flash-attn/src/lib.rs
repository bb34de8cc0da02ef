//! `candle-flash-attn` 0.11.1's public API, served by `flash-attn-rocm`.
//!
//! Point `[patch.crates-io] candle-flash-attn` at this crate and every crate in the build that
//! calls `candle_flash_attn::flash_attn*` runs our kernels with no source change: on the CPU
//! always, on Candle's ROCm device (Triton, and CK on CDNA) with the `candle-rocm` feature, on
//! Candle's CUDA device (Triton) with `candle-cuda`. Everything public in
//! `flash_attn_rocm` is re-exported, which includes the eleven functions and `FlashAttn` of the
//! original crate; `tests/api_surface.rs` pins their exact signatures.

pub use flash_attn_rocm::*;
