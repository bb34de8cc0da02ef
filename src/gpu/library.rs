//! Which driver library the layer uses: the one the process has already loaded, if any, else one
//! loaded here; and which file that is, for error messages.
//!
//! The already-loaded runtime comes first because handles are not portable between two
//! installations: with two ROCm versions on one machine, a stream created by the HIP runtime the
//! program (or Candle) linked and passed to another libamdhip64 crashes on HIP 7.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use libloading::os::unix::{Library as UnixLibrary, RTLD_LAZY, RTLD_LOCAL};
use libloading::Library;

use super::error::{Api, GpuError, GpuResult};

/// `RTLD_NOLOAD` of glibc and musl (`dlfcn.h`), which libloading does not export: dlopen then
/// only returns a library already loaded and never loads one.
const RTLD_NOLOAD: c_int = 0x4;

/// Where the library of one API is looked for, in order; each API names its candidates in one
/// constant of this type.
pub(super) struct Candidates {
    /// Sonames looked up among the libraries already loaded in the process (no-load dlopen).
    pub(super) already_loaded: &'static [&'static str],
    /// Names loaded (dlopen) in order when none of `already_loaded` is loaded.
    pub(super) to_load: &'static [&'static str],
    /// A function every candidate exports; its address tells which file was loaded (dladdr).
    pub(super) probe_symbol: &'static str,
}

/// An open driver library and where it came from.
pub(super) struct DriverLibrary {
    library: Library,
    description: String,
}

impl DriverLibrary {
    /// The library, to resolve functions in.
    pub(super) fn library(&self) -> &Library {
        &self.library
    }

    /// What the library is, where, and who loaded it: `HIP runtime
    /// /opt/rocm-7.0.0/lib/libamdhip64.so.7.0.70000, already loaded by the process`.
    pub(super) fn description(&self) -> &str {
        &self.description
    }
}

/// Opens the library of `api`: the first of `candidates.already_loaded` that the process has
/// loaded, else the first of `candidates.to_load` that loads. The error lists every name tried
/// by the loading pass with its dlopen error.
pub(super) fn open(api: Api, candidates: &Candidates) -> GpuResult<DriverLibrary> {
    let (name, library, already_loaded) = match find_loaded(candidates.already_loaded) {
        Some((name, library)) => (name, library, true),
        None => {
            let (name, library) = open_first(api, candidates.to_load)?;
            (name, library, false)
        }
    };
    let file = file_of(&library, candidates.probe_symbol).unwrap_or_else(|| {
        // dladdr found nothing (a stripped or unusual library): the name that opened it.
        PathBuf::from(format!("{name} (file not found by dladdr)"))
    });
    let loader = if already_loaded {
        "already loaded by the process"
    } else {
        "loaded by flash-attn-rocm"
    };
    let description = format!("{} {}, {loader}", library_kind(api), file.display());
    Ok(DriverLibrary {
        library,
        description,
    })
}

/// What the API's library is called in messages.
fn library_kind(api: Api) -> &'static str {
    match api {
        Api::Hip => "HIP runtime",
        Api::Cuda => "CUDA driver",
    }
}

/// The first of `names` that the process has already loaded, opened again (a no-load dlopen
/// only takes a reference to it), with the name that found it.
fn find_loaded(names: &[&'static str]) -> Option<(&'static str, Library)> {
    names.iter().find_map(|&name| {
        // RTLD_LAZY | RTLD_LOCAL is libloading's own default for `Library::new`: the flags only
        // matter for a library dlopen would load, which RTLD_NOLOAD never does.
        let flags = RTLD_NOLOAD | RTLD_LAZY | RTLD_LOCAL;
        // SAFETY: with RTLD_NOLOAD nothing is loaded, so no initializer runs; an already loaded
        // library only gains a reference, which is never dropped (the Driver lives forever).
        let library = unsafe { UnixLibrary::open(Some(name), flags) }.ok()?;
        Some((name, Library::from(library)))
    })
}

/// Opens the first library of `names` that loads, with its name; the error lists every name with
/// its dlopen error, so a missing runtime is reported as such.
fn open_first(api: Api, names: &[&'static str]) -> GpuResult<(&'static str, Library)> {
    let mut failures = Vec::with_capacity(names.len());
    for &name in names {
        // SAFETY: loading runs the library's initializers. The names are the vendors' driver
        // runtimes (libamdhip64, libcuda), whose initializers are sound to run in any process.
        match unsafe { Library::new(name) } {
            Ok(library) => return Ok((name, library)),
            // dlerror's text names the file already, at least on glibc.
            Err(error) => failures.push(match error.to_string() {
                text if text.contains(name) => text,
                text => format!("{name}: {text}"),
            }),
        }
    }
    Err(GpuError::local(
        api,
        "dlopen",
        format!(
            "the {api} driver library is not available ({})",
            failures.join("; ")
        ),
    ))
}

/// `Dl_info` of `dlfcn.h`: where `dladdr` found an address.
#[repr(C)]
struct DlInfo {
    /// Path of the object containing the address, as the dynamic loader opened it.
    file_name: *const c_char,
    file_base: *mut c_void,
    symbol_name: *const c_char,
    symbol_address: *mut c_void,
}

extern "C" {
    // In libc from glibc 2.34, in libdl before; libloading links libdl for dlopen anyway.
    fn dladdr(address: *const c_void, info: *mut DlInfo) -> c_int;
}

/// The file `library` was loaded from, found through the address of its function `symbol`,
/// with symbolic links resolved (`libamdhip64.so` -> `libamdhip64.so.7.0.70000`, which names the
/// version); `None` when the symbol is missing or dladdr knows no file.
fn file_of(library: &Library, symbol: &str) -> Option<PathBuf> {
    // SAFETY: the symbol is only taken as an address, never called or dereferenced.
    let address = unsafe { library.get::<*const c_void>(symbol.as_bytes()) }.ok()?;
    let mut info = DlInfo {
        file_name: std::ptr::null(),
        file_base: std::ptr::null_mut(),
        symbol_name: std::ptr::null(),
        symbol_address: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a writable Dl_info; dladdr only reads the loader's tables for `address`.
    if unsafe { dladdr(*address, &mut info) } == 0 || info.file_name.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path owned by the dynamic loader, alive while the library is
    // loaded (it is: `library` is borrowed), copied out at once.
    let loaded_as = PathBuf::from(OsStr::from_bytes(
        unsafe { CStr::from_ptr(info.file_name) }.to_bytes(),
    ));
    Some(std::fs::canonicalize(&loaded_as).unwrap_or(loaded_as))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loaded in every Rust program on Linux (glibc).
    const LIBC: &str = "libc.so.6";
    /// glibc libraries that no test and no dependency loads, so the first present one is not
    /// loaded yet when a test asks.
    const RARELY_LOADED: [&str; 3] = ["libBrokenLocale.so.1", "libanl.so.1", "libutil.so.1"];

    #[test]
    fn the_no_load_pass_finds_a_library_already_loaded() {
        let (name, _) = find_loaded(&["libflash-attn-absent.so", LIBC]).expect("libc is loaded");
        assert_eq!(name, LIBC);
        assert!(find_loaded(&["libflash-attn-absent.so"]).is_none());
    }

    #[test]
    fn the_no_load_pass_never_loads() {
        // Held until the end: dropping it would unload the library again.
        let (name, _loaded_here) = RARELY_LOADED
            .into_iter()
            .filter(|&name| find_loaded(&[name]).is_none())
            .find_map(|name| open_first(Api::Hip, &[name]).ok())
            .expect("a glibc library that is present and not loaded yet");
        // Only now that `open_first` loaded it does the no-load pass find it.
        assert_eq!(find_loaded(&[name]).map(|(found, _)| found), Some(name));
    }

    #[test]
    fn open_names_the_real_file_and_says_who_loaded_it() {
        let candidates = Candidates {
            already_loaded: &["libflash-attn-absent.so", LIBC],
            to_load: &["libflash-attn-absent.so"],
            probe_symbol: "getpid",
        };
        let library = open(Api::Hip, &candidates).unwrap();
        let description = library.description();
        let path = description
            .strip_prefix("HIP runtime ")
            .and_then(|rest| rest.strip_suffix(", already loaded by the process"))
            .unwrap_or_else(|| panic!("{description}"));
        let path = PathBuf::from(path);
        assert!(path.is_absolute() && path.is_file(), "{description}");
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("libc"),
            "{description}"
        );
    }

    #[test]
    fn a_library_loaded_here_says_so() {
        let candidates = Candidates {
            already_loaded: &["libflash-attn-absent.so"],
            to_load: &["libflash-attn-absent.so", LIBC],
            probe_symbol: "getpid",
        };
        let description = open(Api::Cuda, &candidates)
            .unwrap()
            .description()
            .to_owned();
        assert!(description.starts_with("CUDA driver /"), "{description}");
        assert!(
            description.ends_with(", loaded by flash-attn-rocm"),
            "{description}"
        );
    }

    #[test]
    fn file_of_a_missing_symbol_is_none() {
        let (_, library) = find_loaded(&[LIBC]).unwrap();
        assert_eq!(file_of(&library, "flash_attn_rocm_no_such_symbol"), None);
    }

    #[test]
    fn open_first_names_every_library_tried() {
        let error = open_first(
            Api::Hip,
            &["libflash-attn-absent-1.so", "libflash-attn-absent-2.so"],
        )
        .expect_err("no such libraries");
        assert_eq!(
            (error.api, error.call, error.code),
            (Api::Hip, "dlopen", -1)
        );
        assert!(
            error
                .message
                .contains("HIP driver library is not available"),
            "{error}"
        );
        for name in ["libflash-attn-absent-1.so: ", "libflash-attn-absent-2.so: "] {
            assert!(error.message.contains(name), "{error}");
        }
    }
}
