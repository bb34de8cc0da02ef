//! Error codes, their names, and the per-thread error state of ROCm 7's clr: every call records
//! its status on its way out (`HIP_RETURN`); `hipGetLastError` takes the last error that is not
//! `hipSuccess` or `hipErrorNotReady` and resets it; `hipExtGetLastError` takes the status of
//! the last call; `hipPeekAtLastError` reads the last error and records it as its own status.
use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};

/// The error codes by their header names, read from `csrc/abi.c`.
pub mod code {
    macro_rules! codes {
        ($($name:ident = $symbol:ident;)*) => {
            extern "C" { $(static $symbol: std::ffi::c_int;)* }
            $(pub fn $name() -> i32 {
                // SAFETY: a `const int` defined in abi.c, initialized before any code runs.
                unsafe { $symbol }
            })*
        };
    }
    codes! {
        success = standin_hipSuccess;
        invalid_value = standin_hipErrorInvalidValue;
        host_memory_already_registered = standin_hipErrorHostMemoryAlreadyRegistered;
        host_memory_not_registered = standin_hipErrorHostMemoryNotRegistered;
        out_of_memory = standin_hipErrorOutOfMemory;
        invalid_device = standin_hipErrorInvalidDevice;
        invalid_device_pointer = standin_hipErrorInvalidDevicePointer;
        invalid_handle = standin_hipErrorInvalidResourceHandle;
        invalid_image = standin_hipErrorInvalidImage;
        invalid_device_function = standin_hipErrorInvalidDeviceFunction;
        not_found = standin_hipErrorNotFound;
        no_device = standin_hipErrorNoDevice;
        no_binary_for_gpu = standin_hipErrorNoBinaryForGpu;
        launch_failure = standin_hipErrorLaunchFailure;
        not_supported = standin_hipErrorNotSupported;
        not_ready = standin_hipErrorNotReady;
        invalid_configuration = standin_hipErrorInvalidConfiguration;
    }
}

extern "C" {
    fn standin_error_name(status: c_int) -> *const c_char;
}

thread_local! {
    /// clr's `hip::tls.last_error_`.
    static LAST_ERROR: Cell<i32> = const { Cell::new(0) };
    /// clr's `hip::tls.last_command_error_`.
    static LAST_COMMAND_STATUS: Cell<i32> = const { Cell::new(0) };
}

/// Records `status` as the calling thread's last call, as `HIP_RETURN` does, and returns it.
pub fn api_return(status: i32) -> i32 {
    LAST_COMMAND_STATUS.set(status);
    if status != code::success() && status != code::not_ready() {
        LAST_ERROR.set(status);
    }
    status
}

/// A failed call: says why on stderr (the stand-in's only account of a refusal), then records
/// and returns `status`.
pub fn fail(status: i32, call: &str, why: impl std::fmt::Display) -> i32 {
    eprintln!("hip-standin: {call}: {} ({why})", error_name(status));
    api_return(status)
}

/// Records success.
pub fn ok() -> i32 {
    api_return(code::success())
}

/// Records `Ok` as success and `Err((status, why))` as a failure of `call`.
pub fn result(call: &str, outcome: Result<(), (i32, String)>) -> i32 {
    match outcome {
        Ok(()) => ok(),
        Err((status, why)) => fail(status, call, why),
    }
}

pub fn error_name(status: i32) -> String {
    // SAFETY: abi.c returns a string literal for every status.
    unsafe { CStr::from_ptr(standin_error_name(status)) }.to_string_lossy().into_owned()
}

#[no_mangle]
pub extern "C" fn hipGetLastError() -> i32 {
    LAST_ERROR.replace(code::success())
}

#[no_mangle]
pub extern "C" fn hipExtGetLastError() -> i32 {
    LAST_COMMAND_STATUS.replace(code::success())
}

#[no_mangle]
pub extern "C" fn hipPeekAtLastError() -> i32 {
    api_return(LAST_ERROR.get())
}

#[no_mangle]
pub extern "C" fn hipGetErrorName(status: i32) -> *const c_char {
    // SAFETY: abi.c returns a string literal for every status.
    unsafe { standin_error_name(status) }
}

/// The description of a status: the stand-in's own words, made once per status and kept for
/// the process (the caller holds the pointer as a static string).
#[no_mangle]
pub extern "C" fn hipGetErrorString(status: i32) -> *const c_char {
    static TEXTS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<i32, &'static CStr>>> =
        std::sync::OnceLock::new();
    let mut texts = TEXTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let text = texts.entry(status).or_insert_with(|| {
        let text = format!("{} (HIP stand-in on an ISA emulator)", error_name(status));
        Box::leak(std::ffi::CString::new(text).expect("no NUL").into_boxed_c_str())
    });
    text.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ROCm 7's rules, on the stand-in's own calls: an error sticks until hipGetLastError takes
    /// it, later successes leave it; hipExtGetLastError is the last call's status; each thread
    /// has its own.
    #[test]
    fn last_error_rules_are_rocm_7s_and_per_thread() {
        assert_eq!(crate::hipSetDevice(10_000), code::invalid_device());
        assert_eq!(crate::hipSetDevice(0), code::success());
        assert_eq!(hipPeekAtLastError(), code::invalid_device());
        // hipPeekAtLastError recorded its own (failed) status.
        assert_eq!(hipExtGetLastError(), code::invalid_device());
        assert_eq!(hipExtGetLastError(), code::success());
        let other = std::thread::spawn(|| hipGetLastError()).join().unwrap();
        assert_eq!(other, code::success(), "another thread sees its own state");
        assert_eq!(hipGetLastError(), code::invalid_device());
        assert_eq!(hipGetLastError(), code::success());
    }

    #[test]
    fn every_status_has_a_name_and_a_description() {
        for status in [code::success(), code::invalid_value(), code::no_binary_for_gpu(), 123_456] {
            let name = error_name(status);
            assert!(name.starts_with("hip"), "{status}: {name}");
            // SAFETY: hipGetErrorString returns a NUL-terminated string kept for the process.
            let text = unsafe { CStr::from_ptr(hipGetErrorString(status)) }.to_string_lossy().into_owned();
            assert!(text.contains(&name), "{text}");
        }
        assert_eq!(error_name(code::invalid_value()), "hipErrorInvalidValue");
    }
}
