//! The low-level API: launch CK's forward kernel on raw device pointers and a HIP stream, for
//! users outside Candle (and for the Candle glue, which fills the same struct). In a `rocm`
//! build whose archs include none CK serves (RDNA only), CK and its shim are not built: the
//! functions are still here and return an `Err` that says so.
#[cfg(flash_attn_rocm_ck)]
use super::ffi::bridge;
use super::ffi::CkFwdParams;

/// The archs of this build's CK kernels, comma-separated (`gfx942,gfx950`): those of
/// `FLASH_ATTN_ROCM_ARCHS` that CK serves (gfx90a, gfx942, gfx950); empty without CK. For the
/// dispatch ([`Built`](crate::plan::dispatch::Built)).
pub const CK_ARCHS: &str = match option_env!("FLASH_ATTN_ROCM_CK_ARCHS") {
    Some(archs) => archs,
    None => "",
};
/// The head-dim tiles of this build's CK forward kernels, comma-separated (`64,128`): a call
/// runs on the smallest tile that holds its head dim. Empty without CK.
pub const CK_HDIMS: &str = match option_env!("FLASH_ATTN_ROCM_CK_HDIMS") {
    Some(hdims) => hdims,
    None => "",
};
/// The head-dim tiles of this build's CK split-KV kernels (paged K/V), as generated: empty
/// without CK or with `FLASH_ATTN_ROCM_PAGED=0`; never 96, 160 or 192 (see `rocm::splitkv`).
pub const CK_SPLITKV_HDIMS: &str = match option_env!("FLASH_ATTN_ROCM_CK_SPLITKV_HDIMS") {
    Some(hdims) => hdims,
    None => "",
};

/// Compute units of the current HIP device, for `rocm::plan_split_kv`: asked once per device
/// (hipDeviceGetAttribute through HIP loaded at run time) and cached for the process.
pub fn compute_units() -> candle::Result<usize> {
    let (_, info) = crate::gpu::current_device(crate::gpu::Driver::hip()?)?;
    Ok(info.units)
}

/// What this build holds: the requested GPU archs, then the archs with Triton kernels (head-dim
/// tiles, dtypes, filter) and those with CK kernels (head-dim tiles, dtypes, LSE and paged
/// kernels, name filter), or "no CK". Error messages quote it; rebuild with
/// `FLASH_ATTN_ROCM_*` to change it.
pub const BUILD_INFO: &str = env!("FLASH_ATTN_ROCM_BUILD_INFO");

/// Launches CK's fmha forward for `params` on `params.stream`; returns once it is queued.
///
/// Errors name the cause: no kernel built for the call (with the variables to rebuild with),
/// arguments CK rejects, a HIP error, or (builds without a CK arch) CK not being built.
///
/// # Safety
/// Every non-zero pointer in `params` must be a device allocation of the current HIP device,
/// large enough for the sizes and strides given, and stay alive (and, for inputs, unchanged)
/// until the stream has run the kernel; the output and LSE buffers must not alias inputs.
/// `params.stream` must be a live `hipStream_t` of that device, or 0 for the null stream.
#[cfg(flash_attn_rocm_ck)]
pub unsafe fn fmha_fwd(params: &CkFwdParams) -> candle::Result<()> {
    super::marshal::check_ck_params(params)?;
    // SAFETY: the caller upholds the pointer, lifetime and stream contract stated above, which
    // is exactly what the shim requires; the sizes and required pointers were checked above.
    unsafe { bridge::ck_fmha_fwd(params) }.map_err(|e| candle::Error::Msg(e.what().to_string()))
}

/// Launches CK's fmha forward: in this build, always an `Err` (CK was not built).
///
/// # Safety
/// As for the CK build's `fmha_fwd`; this one touches nothing.
#[cfg(not(flash_attn_rocm_ck))]
pub unsafe fn fmha_fwd(_params: &CkFwdParams) -> candle::Result<()> {
    Err(no_ck("fmha_fwd"))
}

/// Number of visible HIP devices (0 without a GPU or driver). Asks HIP through the CK shim, so
/// a build without CK returns an `Err`.
#[cfg(flash_attn_rocm_ck)]
pub fn device_count() -> candle::Result<usize> {
    let count = bridge::hip_device_count().map_err(|e| candle::Error::Msg(e.what().to_string()))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Number of visible HIP devices (0 without a GPU), asked through HIP loaded at run time
/// (this build has no CK shim); an `Err` when the HIP runtime cannot be loaded.
#[cfg(not(flash_attn_rocm_ck))]
pub fn device_count() -> candle::Result<usize> {
    let count = crate::gpu::Driver::hip()?.device_count()?;
    Ok(usize::try_from(count).unwrap_or(0))
}

#[cfg(not(flash_attn_rocm_ck))]
fn no_ck(what: &str) -> candle::Error {
    candle::Error::Msg(format!(
        "rocm::{what}: Composable Kernel was not built for this build's archs ({BUILD_INFO}); rebuild \
         with FLASH_ATTN_ROCM_ARCHS including gfx90a, gfx942 or gfx950 to get it"
    ))
}
