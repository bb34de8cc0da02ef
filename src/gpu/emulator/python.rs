//! CPython embedded through its shared library, loaded at run time: the emulator is Python and
//! must run in this process, because the addresses our kernels get are this process's.
//!
//! Only five functions of the C API are used; every call runs under the GIL
//! (`PyGILState_Ensure`), and calls are serialized by a lock because the emulator's caches are
//! not meant for concurrent launches.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

type RunString = unsafe extern "C" fn(*const c_char) -> c_int;
type GilEnsure = unsafe extern "C" fn() -> c_int;
type GilRelease = unsafe extern "C" fn(c_int);

/// An initialized interpreter (process-wide; never finalized).
pub(super) struct Python {
    run_string: RunString,
    gil_ensure: GilEnsure,
    gil_release: GilRelease,
    /// Held while a call runs: one emulator launch at a time.
    serial: Mutex<()>,
    _library: Library,
}

/// Asks `python` (an executable) where its shared library is and what its `sys.path` is.
fn locate(python: &str) -> Result<(String, String), String> {
    let script = "import sysconfig, sys, json\n\
                  print(sysconfig.get_config_var('LIBDIR') + '/' + sysconfig.get_config_var('INSTSONAME'))\n\
                  print(json.dumps(sys.path))";
    let out = Command::new(python)
        .args(["-c", script])
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{python} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(lib), Some(path)) => Ok((lib.to_owned(), path.to_owned())),
        _ => Err(format!("{python} printed {text:?}")),
    }
}

impl Python {
    /// Loads the libpython of `python` (with global symbols, which extension modules such as
    /// numpy's resolve against), initializes it with that interpreter's `sys.path`, then runs
    /// `init` (Python source).
    pub(super) fn start(python: &str, init: &str) -> Result<Python, String> {
        let (libpython, sys_path) = locate(python)?;
        if !Path::new(&libpython).exists() {
            return Err(format!("{python} has no shared library ({libpython} is missing)"));
        }
        // SAFETY: loading libpython runs no initialization code of consequence (its
        // constructors only set up static data); RTLD_GLOBAL is required for its extension modules.
        let library = unsafe { Library::open(Some(&libpython), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("dlopen {libpython}: {e}"))?;
        // SAFETY: the types are the C API's declarations: void Py_InitializeEx(int),
        // int Py_IsInitialized(void), PyThreadState *PyEval_SaveThread(void),
        // int PyRun_SimpleString(const char *), PyGILState_STATE PyGILState_Ensure(void) (an
        // enum, int-sized), void PyGILState_Release(PyGILState_STATE).
        let (initialize, is_initialized, save_thread, run_string, gil_ensure, gil_release) = unsafe {
            let get = |name: &[u8]| -> Result<*const c_void, String> {
                library
                    .get::<*const c_void>(name)
                    .map(|s| *s)
                    .map_err(|e| format!("{libpython}: {e}"))
            };
            (
                std::mem::transmute::<*const c_void, unsafe extern "C" fn(c_int)>(get(b"Py_InitializeEx")?),
                std::mem::transmute::<*const c_void, unsafe extern "C" fn() -> c_int>(get(b"Py_IsInitialized")?),
                std::mem::transmute::<*const c_void, unsafe extern "C" fn() -> *mut c_void>(get(b"PyEval_SaveThread")?),
                std::mem::transmute::<*const c_void, RunString>(get(b"PyRun_SimpleString")?),
                std::mem::transmute::<*const c_void, GilEnsure>(get(b"PyGILState_Ensure")?),
                std::mem::transmute::<*const c_void, GilRelease>(get(b"PyGILState_Release")?),
            )
        };
        // SAFETY: no interpreter exists in this process unless one is (checked); initializing
        // leaves this thread holding the GIL, which SaveThread gives up so that any thread can
        // take it with PyGILState_Ensure. The interpreter is never finalized.
        unsafe {
            if is_initialized() == 0 {
                initialize(0);
                save_thread();
            }
        }
        let python = Python { run_string, gil_ensure, gil_release, serial: Mutex::new(()), _library: library };
        python.run(&format!("import sys, json\nsys.path[:0] = [p for p in json.loads({sys_path:?}) if p not in sys.path]\n{init}"))?;
        Ok(python)
    }

    /// Runs Python source at module level of `__main__`; `Err` when an exception escaped it
    /// (Python prints its traceback to stderr).
    pub(super) fn run(&self, code: &str) -> Result<(), String> {
        let code = CString::new(code).map_err(|_| "Python source with a NUL byte".to_owned())?;
        let _serial = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the interpreter is initialized (start); the GIL is taken for the call and given
        // back; `code` is NUL-terminated and outlives the call.
        let status = unsafe {
            let gil = (self.gil_ensure)();
            let status = (self.run_string)(code.as_ptr());
            (self.gil_release)(gil);
            status
        };
        match status {
            0 => Ok(()),
            _ => Err("the emulator's Python raised (traceback on stderr)".to_owned()),
        }
    }
}
