//! The low-level API: launch CK's forward kernel on raw device pointers and a HIP stream, for
//! users outside Candle (and for the Candle glue, which fills the same struct).
use super::ffi::{bridge, CkFwdParams};

/// What the native library was built with: GPU archs, head-dim tiles, dtypes, LSE and paged
/// kernels, name filter. Error messages quote it; rebuild with `FLASH_ATTN_ROCM_*` to change it.
pub const BUILD_INFO: &str = env!("FLASH_ATTN_ROCM_BUILD_INFO");

/// Launches CK's fmha forward for `params` on `params.stream`; returns once it is queued.
///
/// Errors name the cause: no kernel built for the call (with the variables to rebuild with),
/// arguments CK rejects, or a HIP error.
///
/// # Safety
/// Every non-zero pointer in `params` must be a device allocation of the current HIP device,
/// large enough for the sizes and strides given, and stay alive (and, for inputs, unchanged)
/// until the stream has run the kernel; the output and LSE buffers must not alias inputs.
/// `params.stream` must be a live `hipStream_t` of that device, or 0 for the null stream.
pub unsafe fn fmha_fwd(params: &CkFwdParams) -> candle::Result<()> {
    // SAFETY: the caller upholds the pointer, lifetime and stream contract stated above, which
    // is exactly what the shim requires.
    unsafe { bridge::ck_fmha_fwd(params) }.map_err(|e| candle::Error::Msg(e.what().to_string()))
}

/// Number of visible HIP devices (0 without a GPU or driver).
pub fn device_count() -> candle::Result<usize> {
    let count = bridge::hip_device_count().map_err(|e| candle::Error::Msg(e.what().to_string()))?;
    Ok(usize::try_from(count).unwrap_or(0))
}
