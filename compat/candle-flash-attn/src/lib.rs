//! `candle-flash-attn` 0.11.1's public API, served by `flash-attn-rocm`.
//!
//! Point `[patch.crates-io] candle-flash-attn` at this crate and every crate in the build that
//! calls `candle_flash_attn::flash_attn*` runs our kernels (AMD CK on ROCm with the `rocm`
//! feature, flash attention on the CPU always) with no source change. Everything public in
//! `flash_attn_rocm` is re-exported, which includes the eleven functions and `FlashAttn` of the
//! original crate; `tests/api_surface.rs` pins their exact signatures.

pub use flash_attn_rocm::*;
