//! The error of every failed driver call, and of the loader around them.

use std::fmt;

/// Which driver API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// AMD's HIP runtime (`libamdhip64.so`).
    Hip,
    /// NVIDIA's CUDA driver API (`libcuda.so.1`).
    Cuda,
}

impl Api {
    /// The API's name in messages: "HIP" or "CUDA".
    pub fn name(self) -> &'static str {
        match self {
            Api::Hip => "HIP",
            Api::Cuda => "CUDA",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// [`GpuError::code`] of an error found by this layer rather than returned by the driver: a
/// library or symbol that cannot be loaded, or an argument refused before any driver call.
/// Both drivers use only non-negative statuses, so it never collides with a real one.
pub const NOT_A_DRIVER_STATUS: i32 = -1;

/// A failed driver call: which API, which function, the status code and the driver's own name
/// and description of that status.
#[derive(Debug, Clone)]
pub struct GpuError {
    /// The API whose call failed.
    pub api: Api,
    /// The driver function (`"hipModuleLoadData"`), or `"dlopen"`/`"dlsym"` for the loader, or
    /// the [`Driver`](super::Driver) method that refused an argument.
    pub call: &'static str,
    /// The driver's status, or [`NOT_A_DRIVER_STATUS`].
    pub code: i32,
    /// For a driver status: `"<error name> (<code>): <error string> (<library>)"`, the driver's
    /// wording followed by which library answered ([`Driver::library`](super::Driver::library)).
    pub message: String,
}

impl GpuError {
    /// A failed driver status, described with the driver's error name and string and with the
    /// library that returned it: with two installations of a runtime on one machine, which one
    /// answered is often the cause.
    pub(crate) fn from_status(
        api: Api,
        call: &'static str,
        code: i32,
        name: &str,
        description: &str,
        library: &str,
    ) -> Self {
        GpuError {
            api,
            call,
            code,
            message: format!("{name} ({code}): {description} ({library})"),
        }
    }

    /// An error this layer found itself (loader, argument checks).
    pub(crate) fn local(api: Api, call: &'static str, message: String) -> Self {
        GpuError {
            api,
            call,
            code: NOT_A_DRIVER_STATUS,
            message,
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.message)
    }
}

impl std::error::Error for GpuError {}

impl From<GpuError> for candle::Error {
    fn from(error: GpuError) -> Self {
        candle::Error::Msg(format!("flash-attn-rocm: {error}"))
    }
}

/// The result of every driver operation.
pub type GpuResult<T> = Result<T, GpuError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn no_binary() -> GpuError {
        GpuError::from_status(
            Api::Hip,
            "hipModuleLoadData",
            209,
            "hipErrorNoBinaryForGpu",
            "no kernel image is available for execution on the device",
            "HIP runtime /opt/rocm/lib/libamdhip64.so.7, already loaded by the process",
        )
    }

    #[test]
    fn display_names_call_status_name_code_description_and_library() {
        assert_eq!(
            no_binary().to_string(),
            "hipModuleLoadData failed: hipErrorNoBinaryForGpu (209): \
             no kernel image is available for execution on the device \
             (HIP runtime /opt/rocm/lib/libamdhip64.so.7, already loaded by the process)"
        );
    }

    #[test]
    fn local_errors_carry_the_sentinel_code() {
        let error = GpuError::local(Api::Cuda, "dlopen", "libcuda.so.1: not found".into());
        assert_eq!(error.code, NOT_A_DRIVER_STATUS);
        assert_eq!(error.api, Api::Cuda);
        assert_eq!(error.to_string(), "dlopen failed: libcuda.so.1: not found");
    }

    #[test]
    fn converts_into_a_candle_error_with_the_crate_prefix() {
        let candle_error: candle::Error = no_binary().into();
        let text = candle_error.to_string();
        assert!(
            text.starts_with(
                "flash-attn-rocm: hipModuleLoadData failed: hipErrorNoBinaryForGpu (209)"
            ),
            "{text}"
        );
    }

    #[test]
    fn api_names() {
        assert_eq!(Api::Hip.to_string(), "HIP");
        assert_eq!(Api::Cuda.to_string(), "CUDA");
    }
}
