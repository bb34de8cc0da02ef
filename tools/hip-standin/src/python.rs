//! CPython embedded through its shared library, loaded at run time: the emulator is Python and
//! must run in this process, because the addresses our kernels get are this process's.
//!
//! One thread owns the interpreter: it initializes it, keeps the GIL and runs every piece of
//! source sent to it, in order (tinygrad's caches are bound to the thread that opened them, and
//! one launch at a time is what the emulator expects). Only four functions of the C API are used.

use std::ffi::{c_char, c_int, CString};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender};
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

type RunString = unsafe extern "C" fn(*const c_char) -> c_int;

/// Python source for the interpreter's thread, and where its status goes.
type Request = (CString, SyncSender<c_int>);

/// The interpreter's thread (process-wide; the interpreter is never finalized).
pub(super) struct Python {
    requests: Mutex<Sender<Request>>,
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
        let (requests, incoming) = channel::<Request>();
        let (started, start_status) = sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new()
            .name("amd-emulator-python".to_owned())
            .spawn(move || match open_interpreter(&libpython) {
                Err(message) => drop(started.send(Err(message))),
                Ok((run_string, _library)) => {
                    let _ = started.send(Ok(()));
                    for (code, reply) in incoming {
                        // SAFETY: this thread initialized the interpreter and holds its GIL;
                        // `code` is NUL-terminated and alive during the call.
                        let _ = reply.send(unsafe { run_string(code.as_ptr()) });
                    }
                }
            })
            .map_err(|e| format!("cannot start the interpreter's thread: {e}"))?;
        start_status.recv().map_err(|_| "the interpreter's thread ended".to_owned())??;
        let python = Python { requests: Mutex::new(requests) };
        python.run(&format!("import sys, json\nsys.path[:0] = [p for p in json.loads({sys_path:?}) if p not in sys.path]\n{init}"))?;
        Ok(python)
    }

    /// Runs Python source at module level of `__main__`; `Err` when an exception escaped it
    /// (Python prints its traceback to stderr).
    pub(super) fn run(&self, code: &str) -> Result<(), String> {
        let code = CString::new(code).map_err(|_| "Python source with a NUL byte".to_owned())?;
        let (reply, status) = sync_channel(1);
        let sent = self.requests.lock().unwrap_or_else(|e| e.into_inner()).send((code, reply));
        match sent.ok().and_then(|()| status.recv().ok()) {
            Some(0) => Ok(()),
            Some(_) => Err("the emulator's Python raised (traceback on stderr)".to_owned()),
            None => Err("the interpreter's thread ended".to_owned()),
        }
    }
}

/// Loads libpython (with global symbols, which extension modules such as numpy's resolve
/// against) and initializes it on the calling thread, which keeps the GIL.
fn open_interpreter(libpython: &str) -> Result<(RunString, Library), String> {
    // SAFETY: loading libpython runs only its static initializers.
    let library = unsafe { Library::open(Some(libpython), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| format!("dlopen {libpython}: {e}"))?;
    // SAFETY: the types are the C API's: void Py_InitializeEx(int), int Py_IsInitialized(void),
    // int PyRun_SimpleString(const char *).
    let (initialize, is_initialized, run_string) = unsafe {
        (
            *library.get::<unsafe extern "C" fn(c_int)>(b"Py_InitializeEx").map_err(|e| e.to_string())?,
            *library.get::<unsafe extern "C" fn() -> c_int>(b"Py_IsInitialized").map_err(|e| e.to_string())?,
            *library.get::<RunString>(b"PyRun_SimpleString").map_err(|e| e.to_string())?,
        )
    };
    // SAFETY: no other interpreter runs in this process (the emulator's is the only one this
    // crate starts; checked); initializing leaves this thread holding the GIL for good.
    unsafe {
        if is_initialized() != 0 {
            return Err("a Python interpreter already runs in this process".to_owned());
        }
        initialize(0);
    }
    Ok((run_string, library))
}
