//! Flash attention for Candle on AMD GPUs and on the CPU, with `candle-flash-attn`'s API.
//!
//! Layers: [`params`] validates a call and normalizes it into one [`params::AttnCall`]; the
//! [`cpu`] backend runs it with a tiled online-softmax kernel; the `rocm` backend (feature
//! `rocm`) marshals the same description into Composable Kernel's `fmha_fwd` arguments, and
//! [`triton`] into our own Triton kernels' arguments (every AMD GPU; NVIDIA for verification).

mod api;
pub mod cpu;
#[cfg(feature = "triton")]
pub mod gpu;
mod op;
pub mod params;
pub mod rocm;
pub mod triton;

pub use api::*;
pub use op::FlashAttn;
