//! Code objects and kernels: `hipModuleLoadData` and friends (the crate's Triton kernels), and
//! the one launch path that `hipModuleLaunchKernel` and `hipLaunchKernel` (hipcc's kernels,
//! [`crate::fatbin`]) share.
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::devices::{current, devices};
use crate::errors::{code, fail, ok};
use crate::{emulator, log, streams, Handle};

/// A loaded code object.
struct Module {
    /// The emulator's id of it.
    emulated: usize,
    /// Where its image was (the caller's copy), for the launch log.
    image: usize,
    /// The device it was loaded for.
    device: usize,
}

/// A kernel of a loaded module.
#[derive(Clone)]
pub struct Kernel {
    emulated: usize,
    name: String,
    image: usize,
    device: usize,
}

#[derive(Default)]
struct Loaded {
    /// By module handle (the emulator's module id).
    modules: HashMap<usize, Module>,
    /// By function handle (the emulator's function id).
    kernels: HashMap<usize, Kernel>,
}

fn loaded() -> MutexGuard<'static, Loaded> {
    static LOADED: OnceLock<Mutex<Loaded>> = OnceLock::new();
    LOADED.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Loads the code object at `image` for the current device: its module handle, or the status.
/// A code object of another target is refused, as the HSA loader refuses it.
pub fn load_for_current_device(call: &str, image: *const c_void) -> Result<usize, i32> {
    let (ordinal, device) = current().map_err(|status| fail(status, call, "no device"))?;
    let (emulated, target) = emulator::load(image).map_err(|why| fail(code::invalid_image(), call, why))?;
    if target != device.arch {
        // The module is not kept; an unload failure changes nothing for the caller.
        let _ = emulator::unload(emulated);
        return Err(fail(code::no_binary_for_gpu(), call, format!("a {target} code object on device {ordinal} ({})", device.arch)));
    }
    loaded().modules.insert(emulated, Module { emulated, image: image as usize, device: ordinal });
    Ok(emulated)
}

/// The kernel `name` of module `module`.
pub fn kernel(call: &str, module: usize, name: &str) -> Result<(usize, Kernel), i32> {
    let (emulated, image, device) = match loaded().modules.get(&module) {
        Some(m) => (m.emulated, m.image, m.device),
        None => return Err(fail(code::invalid_handle(), call, format!("module {module:#x}"))),
    };
    let function = emulator::get_function(emulated, name).map_err(|why| fail(code::not_found(), call, why))?;
    let kernel = Kernel { emulated: function, name: name.to_owned(), image, device };
    loaded().kernels.insert(function, kernel.clone());
    Ok((function, kernel))
}

/// Runs one grid of `kernel` on the stream's device, to completion.
pub fn run(call: &str, kernel: &Kernel, grid: [u32; 3], block: [u32; 3], dynamic_lds: u32, stream: Handle, params: *mut *mut c_void) -> i32 {
    if let Err(status) = streams::check_stream(call, stream) {
        return status;
    }
    let device_now = streams::device_of(stream).or_else(|| current().ok().map(|(o, _)| o));
    if device_now != Some(kernel.device) {
        return fail(code::invalid_device_function(), call, format!("{} was loaded on device {}, launched on {device_now:?}", kernel.name, kernel.device));
    }
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    if grid.contains(&0) || block.contains(&0) || threads > 1024 {
        return fail(code::invalid_configuration(), call, format!("grid {grid:?}, block {block:?}"));
    }
    if params.is_null() {
        return fail(code::invalid_value(), call, "null kernel arguments");
    }
    let arch = devices()[kernel.device].arch;
    log::record(&log::Launch { kernel: &kernel.name, arch, grid, block, dynamic_lds, image: kernel.image });
    match emulator::launch(kernel.emulated, grid, block, dynamic_lds, params) {
        Ok(()) => ok(),
        Err(why) => fail(code::launch_failure(), call, why),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(out: *mut Handle, image: *const c_void) -> i32 {
    if out.is_null() || image.is_null() {
        return fail(code::invalid_value(), "hipModuleLoadData", "null module or image");
    }
    match load_for_current_device("hipModuleLoadData", image) {
        Ok(module) => {
            // SAFETY: non-null, the caller's writable module variable.
            unsafe { *out = module as Handle };
            ok()
        }
        Err(status) => status,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipModuleUnload(module: Handle) -> i32 {
    let Some(removed) = loaded().modules.remove(&(module as usize)) else {
        return fail(code::invalid_handle(), "hipModuleUnload", format!("module {module:?}"));
    };
    loaded().kernels.retain(|_, k| k.image != removed.image || k.device != removed.device);
    match emulator::unload(removed.emulated) {
        Ok(()) => ok(),
        Err(why) => fail(code::invalid_handle(), "hipModuleUnload", why),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(out: *mut Handle, module: Handle, name: *const c_char) -> i32 {
    if out.is_null() || name.is_null() {
        return fail(code::invalid_value(), "hipModuleGetFunction", "null function or name");
    }
    // SAFETY: non-null, NUL-terminated per HIP's contract.
    let name = unsafe { emulator::text(name) };
    match kernel("hipModuleGetFunction", module as usize, &name) {
        Ok((function, _)) => {
            // SAFETY: non-null, the caller's writable function variable.
            unsafe { *out = function as Handle };
            ok()
        }
        Err(status) => status,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    function: Handle,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    dynamic_lds: u32,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> i32 {
    let call = "hipModuleLaunchKernel";
    if !extra.is_null() {
        return fail(code::not_supported(), call, "arguments through `extra` are not modelled (use kernelParams)");
    }
    let Some(kernel) = loaded().kernels.get(&(function as usize)).cloned() else {
        return fail(code::invalid_handle(), call, format!("function {function:?}"));
    };
    run(call, &kernel, [gx, gy, gz], [bx, by, bz], dynamic_lds, stream, params)
}
