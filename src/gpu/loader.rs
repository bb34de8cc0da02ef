//! Run-time loading of a driver library and of its functions: nothing of ROCm or CUDA is needed
//! to build, and a machine without them gets an `Err` instead of a link failure.

use std::ffi::{c_char, CStr};

use libloading::Library;

use super::error::{Api, GpuError, GpuResult};

/// Resolves `name` in `library` as a value of type `T` (a function pointer).
///
/// # Safety
/// `T` must be the symbol's true type: an `unsafe extern "C" fn` with the C declaration's
/// parameter and return types.
pub(super) unsafe fn symbol<T: Copy>(library: &Library, api: Api, name: &str) -> GpuResult<T> {
    // SAFETY: the caller guarantees that `T` is the symbol's type. The copied function pointer
    // outlives the `Symbol` borrow only as long as `library` stays loaded, which its owner (the
    // backend inside a never-dropped `Driver`) ensures.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|resolved| *resolved)
        .map_err(|error| GpuError::local(api, "dlsym", format!("{name}: {error}")))
}

/// Copies a C string owned by the driver (a static error name or description), or `None` for
/// a null pointer.
///
/// # Safety
/// `text` is null or points at a NUL-terminated string that stays valid during the call.
pub(super) unsafe fn driver_string(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null, and NUL-terminated and alive per the caller's contract.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Declares a table of driver functions, one field per C symbol (the field is named exactly like
/// the symbol, hence `non_snake_case`), and its `resolve` constructor, which loads every symbol
/// or fails with the first missing one.
macro_rules! driver_functions {
    (
        $(#[$meta:meta])*
        struct $table:ident {
            $( $symbol:ident : fn( $($arg:ty),* $(,)? ) -> $ret:ty; )*
        }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(super) struct $table {
            $( pub(super) $symbol: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl $table {
            /// Resolves every function of the table in `library`.
            ///
            /// # Safety
            /// The declared signatures must be the library's C signatures.
            pub(super) unsafe fn resolve(
                library: &libloading::Library,
                api: $crate::gpu::Api,
            ) -> $crate::gpu::GpuResult<Self> {
                Ok(Self {
                    $(
                        // SAFETY: the caller guarantees that the declared type is the symbol's.
                        $symbol: unsafe {
                            $crate::gpu::loader::symbol(library, api, stringify!($symbol))?
                        },
                    )*
                })
            }
        }
    };
}
pub(super) use driver_functions;

#[cfg(test)]
mod tests {
    use super::*;

    driver_functions! {
        /// Two functions of the C library, to exercise the macro against a real library.
        struct LibcFunctions {
            strlen: fn(*const c_char) -> usize;
            abs: fn(i32) -> i32;
        }
    }

    driver_functions! {
        /// Never called: resolving it must fail.
        #[allow(dead_code)]
        struct MissingFunctions {
            abs: fn(i32) -> i32;
            flash_attn_rocm_no_such_symbol: fn() -> i32;
        }
    }

    fn libc() -> Library {
        // SAFETY: the C library is loaded in every Rust program on Linux already.
        unsafe { Library::new("libc.so.6") }.expect("the C library loads on Linux")
    }

    #[test]
    fn resolves_a_table_and_calls_through_it() {
        let library = libc();
        // SAFETY: strlen and abs have exactly these C signatures.
        let functions = unsafe { LibcFunctions::resolve(&library, Api::Cuda) }.unwrap();
        // SAFETY: the argument is a NUL-terminated string.
        assert_eq!(unsafe { (functions.strlen)(c"gfx942".as_ptr()) }, 6);
        // SAFETY: abs takes any int but INT_MIN.
        assert_eq!(unsafe { (functions.abs)(-7) }, 7);
    }

    #[test]
    fn a_missing_symbol_is_a_dlsym_error_naming_it() {
        let library = libc();
        // SAFETY: abs has this signature; the other symbol does not exist, so it is never called.
        let error = unsafe { MissingFunctions::resolve(&library, Api::Cuda) }
            .err()
            .unwrap();
        assert_eq!((error.api, error.call), (Api::Cuda, "dlsym"));
        assert!(
            error
                .message
                .starts_with("flash_attn_rocm_no_such_symbol: "),
            "{error}"
        );
    }


    #[test]
    fn driver_strings() {
        // SAFETY: null, then a static NUL-terminated string.
        assert_eq!(unsafe { driver_string(std::ptr::null()) }, None);
        assert_eq!(
            unsafe { driver_string(c"hipSuccess".as_ptr()) }.as_deref(),
            Some("hipSuccess")
        );
    }
}
