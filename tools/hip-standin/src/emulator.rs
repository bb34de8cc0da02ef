//! The emulator side of module loading and launches: `tools/amd_emulator/driver.py` (the one
//! launch implementation: code object segments, kernel descriptor, kernargs from the metadata,
//! user SGPRs, LDS, scratch) in a CPython embedded in this process, with tinygrad's emulator and
//! our corrections to it.
//!
//! Needs at run time: `FLASH_ATTN_ROCM_TINYGRAD` (a tinygrad checkout: the emulator is
//! `test/mockgpu/amd/emu.py` there), a python3 built with a shared libpython, numpy and clang
//! (`FLASH_ATTN_ROCM_EMULATOR_PYTHON` names the interpreter, default `python3`).
use std::ffi::{c_char, c_void, CString};
use std::sync::OnceLock;

use crate::python::Python;

/// The variable that names the tinygrad checkout.
pub const TINYGRAD_VAR: &str = "FLASH_ATTN_ROCM_TINYGRAD";
/// The variable that names the Python interpreter (default `python3`).
pub const PYTHON_VAR: &str = "FLASH_ATTN_ROCM_EMULATOR_PYTHON";
/// The Python side: the driver, the corrections and their checks.
const TOOLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../amd_emulator");

fn python() -> Result<&'static Python, String> {
    static PYTHON: OnceLock<Result<Python, String>> = OnceLock::new();
    PYTHON.get_or_init(start_python).as_ref().map_err(Clone::clone)
}

fn start_python() -> Result<Python, String> {
    let tinygrad = std::env::var(TINYGRAD_VAR).map_err(|_| format!("{TINYGRAD_VAR} is not set (a tinygrad checkout)"))?;
    let emu = std::path::Path::new(&tinygrad).join("test/mockgpu/amd/emu.py");
    if !emu.exists() {
        return Err(format!("{TINYGRAD_VAR}={tinygrad}: no {} there", emu.display()));
    }
    let interpreter = std::env::var(PYTHON_VAR).unwrap_or_else(|_| "python3".to_owned());
    let init = format!(
        "import faulthandler\nfaulthandler.enable()\nsys.path[:0] = [{TOOLS_DIR:?}, {tinygrad:?}]\nimport test.mockgpu.amd.emu\nimport driver as _flash_attn_emulator\n"
    );
    Python::start(&interpreter, &init)
}

/// Runs `driver.entry(op, ...args)`; the driver's traceback text on failure.
fn call(op: &str, args: &[usize]) -> Result<(), String> {
    let python = python()?;
    let mut status: u32 = u32::MAX;
    let mut error = vec![0u8; 16 * 1024];
    let args: Vec<String> = args.iter().map(usize::to_string).collect();
    let code = format!(
        "_flash_attn_emulator.entry({op:?}, {}, {}, {}, {})",
        &mut status as *mut u32 as usize,
        error.as_mut_ptr() as usize,
        error.len(),
        args.join(", ")
    );
    python.run(&code)?;
    if status == 0 {
        return Ok(());
    }
    let end = error.iter().position(|&b| b == 0).unwrap_or(error.len());
    Err(String::from_utf8_lossy(&error[..end]).into_owned())
}

/// Loads the code object (an AMDGPU ELF) at `image`; its module id and its target (`gfx942`).
pub fn load(image: *const c_void) -> Result<(usize, String), String> {
    let mut module = 0usize;
    call("load", &[image as usize, &mut module as *mut usize as usize])?;
    let mut target = [0u8; 64];
    call("target", &[module, target.as_mut_ptr() as usize, target.len()])?;
    let end = target.iter().position(|&b| b == 0).unwrap_or(target.len());
    Ok((module, String::from_utf8_lossy(&target[..end]).into_owned()))
}

pub fn unload(module: usize) -> Result<(), String> {
    call("unload", &[module])
}

/// The kernel `name` of a loaded module; its function id.
pub fn get_function(module: usize, name: &str) -> Result<usize, String> {
    let name = CString::new(name).map_err(|_| "a kernel name with a NUL".to_owned())?;
    let mut function = 0usize;
    call("get_function", &[module, name.as_ptr() as usize, &mut function as *mut usize as usize])?;
    Ok(function)
}

/// A launch's explicit arguments.
#[derive(Clone, Copy)]
pub enum Arguments {
    /// One pointer per explicit argument (hipModuleLaunchKernel's kernelParams, hipLaunchKernel's
    /// args).
    Pointers(*mut *mut c_void),
    /// A kernarg buffer the launcher laid out at the metadata's offsets, and its size (`extra`'s
    /// `HIP_LAUNCH_PARAM_BUFFER_POINTER` and `_SIZE`: rocBLAS's Tensile kernels).
    Buffer(*const c_void, usize),
}

/// Runs a grid of `function` to completion with `arguments`.
pub fn launch(function: usize, grid: [u32; 3], block: [u32; 3], dynamic_lds: u32, arguments: Arguments) -> Result<(), String> {
    let dims = [grid[0], grid[1], grid[2], block[0], block[1], block[2], dynamic_lds].map(|x| x as usize);
    let args = match arguments {
        Arguments::Pointers(params) => [params as usize, 0, 0],
        Arguments::Buffer(buffer, size) => [0, buffer as usize, size],
    };
    call("launch", &[&[function][..], &dims, &args].concat())
}

/// A C string argument as text (kernel names).
///
/// # Safety
/// `text` is a NUL-terminated string alive during the call.
pub unsafe fn text(text: *const c_char) -> String {
    // SAFETY: per the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned()
}
