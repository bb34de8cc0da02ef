//! A stand-in for AMD's HIP runtime (`libamdhip64`), for tests: the crate's real HIP path, the
//! code hipcc generates (CK, the guard kernel) and Candle's ROCm device run unchanged against it,
//! and every kernel runs on tinygrad's AMD ISA emulator through `tools/amd_emulator/driver.py`.
//!
//! - Device memory is host memory: a device address is a host address of this process.
//! - Devices are emulated parts, chosen by `HIP_STANDIN_DEVICES` (e.g. `gfx942,gfx1100`;
//!   default `gfx942`), with their real compute units (`HIP_STANDIN_COMPUTE_UNITS` overrides
//!   them), LDS, wave size and limits ([`devices`]); HIP's structs and enums are written by
//!   `csrc/abi.c` through AMD's header.
//! - Streams and events exist; everything runs in call order, to completion, on the calling
//!   thread (so every asynchronous call is synchronous).
//! - Errors follow ROCm 7's per-thread rules ([`errors`]).
//! - `HIP_STANDIN_LAUNCH_LOG` names a file that gets one line per kernel launch ([`log`]).
//!
//! Exports are `#[no_mangle]` functions with HIP's C signatures; `scripts/hip_standin.py` links
//! this static library into `libamdhip64.so.6` with the symbol versions of HIP's own library,
//! adding a stub that aborts with its name for every imported function not implemented here.
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod devices;
mod emulator;
mod errors;
mod fatbin;
mod log;
mod memory;
mod modules;
mod python;
mod streams;

pub use devices::*;
pub use errors::*;
pub use fatbin::*;
pub use memory::*;
pub use modules::*;
pub use streams::*;

/// `hipStream_t`, `hipModule_t`, `hipFunction_t`, `hipEvent_t`: opaque pointers.
pub type Handle = *mut std::ffi::c_void;

/// HIP's `dim3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// Called by the stub of every imported function that the stand-in does not implement.
#[no_mangle]
pub unsafe extern "C" fn hip_standin_unimplemented(name: *const std::ffi::c_char) -> ! {
    // SAFETY: the stubs pass a NUL-terminated string literal.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    eprintln!("hip-standin: {name} is imported but not implemented by the stand-in");
    std::process::abort()
}
