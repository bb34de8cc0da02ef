//! Our own Triton flash-attention kernels (kernels/attention.py), compiled ahead of time by the
//! build script for every requested GPU target and embedded in the library.
//!
//! Layers: [`registry`] lists the embedded code objects, [`targets`] says which target's serve a
//! device, [`mod@select`] picks the ones that serve a call, [`marshal`] computes the grid, the key splits ([`split`]) and the exact kernel
//! arguments ([`args`]) from a validated [`crate::params::AttnCall`]. These are pure Rust and
//! tested in every build. With the `triton` feature (enabled by `rocm` and `cuda-verify`),
//! `launch` loads the code objects once per device and queues them on the caller's stream
//! through `crate::gpu` (HIP on AMD GPUs, the CUDA driver for the NVIDIA verification build).

pub mod args;
#[cfg(feature = "triton")]
mod launch;
pub mod marshal;
pub mod registry;
pub mod select;
pub mod span;
pub mod split;
pub mod targets;
pub mod tma;

pub use args::{ArgValue, FwdArgs, MergeArgs, TensorDescArg, TmaFwdArgs};
#[cfg(feature = "triton")]
pub use launch::{launch, plan, take_faults};
pub use marshal::{fwd_args, kernel_args, merge_args, KernelArgs, Plan, BATCHED_DECODE_WAVES};
pub use registry::{Family, KernelDtype, KernelImage, Tile, KERNELS};
pub use select::{embedded_targets, needs_extras, select, BatchedDecode, Kernels, DECODE_ROWS};
