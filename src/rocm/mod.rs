//! The ROCm backend: AMD Composable Kernel's fmha forward kernels behind a C++ shim, beside our
//! Triton kernels ([`crate::triton`]); [`crate::plan::dispatch`] picks the family that serves a
//! call.
//!
//! [`ffi`] holds the shared argument struct ([`CkFwdParams`]), compiled in every build so the
//! marshalling is testable on any machine; [`marshal`] fills it from a validated
//! [`crate::params::AttnCall`]. With the `rocm` feature, `fmha_fwd` launches it: the low-level
//! API over raw device pointers and a `hipStream_t` (an `Err` in builds whose archs include no
//! CK arch, where CK is not built; see `BUILD_INFO`).

pub mod ffi;
pub mod guard;
#[cfg(feature = "rocm")]
mod launch;
pub mod marshal;
pub mod splitkv;

pub use ffi::{CkBias, CkDtype, CkFwdParams, CkMask, CkSideTensorGuard, SideTensorFault};
pub use guard::{guard_params, guard_scratch_len, guard_side_tensors, guarded_buffers};
pub use crate::device::DeviceBuffers;
pub use marshal::{check_ck_params, check_supported, ck_fwd_params, lse_buffer_required, LSE_KERNELS};
pub use splitkv::{
    num_splits, plan_split_kv, split_kv_scratch_lens, splitkv_tile, AccumulatorStrides, SplitKv, SplitKvTile, CK_MAX_SPLITS,
};
#[cfg(feature = "rocm")]
pub use launch::{compute_units, device_count, fmha_fwd, BUILD_INFO, CK_ARCHS, CK_HDIMS, CK_SPLITKV_HDIMS};
