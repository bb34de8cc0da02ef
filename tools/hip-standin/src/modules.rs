//! Code objects and kernels: `hipModuleLoadData` and friends (the crate's Triton kernels), and
//! the one launch path that `hipModuleLaunchKernel` and `hipLaunchKernel` (hipcc's kernels,
//! [`crate::fatbin`]) share.
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::devices::{current, devices};
use crate::errors::{code, fail, ok};
use crate::emulator::Arguments;
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
pub fn run(call: &str, kernel: &Kernel, grid: [u32; 3], block: [u32; 3], dynamic_lds: u32, stream: Handle, arguments: Arguments) -> i32 {
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
    if matches!(arguments, Arguments::Pointers(p) if p.is_null()) || matches!(arguments, Arguments::Buffer(b, _) if b.is_null()) {
        return fail(code::invalid_value(), call, "null kernel arguments");
    }
    let arch = devices()[kernel.device].arch;
    log::record(&log::Launch { kernel: &kernel.name, arch, grid, block, dynamic_lds, image: kernel.image });
    match emulator::launch(kernel.emulated, grid, block, dynamic_lds, arguments) {
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

/// `extra`'s keys (hip_runtime_api.h: `HIP_LAUNCH_PARAM_BUFFER_POINTER`, `_SIZE`, `_END`).
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
const PARAM_END: usize = 3;

/// A launch's arguments: `params` (kernelParams), or the kernarg buffer that `extra` names
/// (`HIP_LAUNCH_PARAM_BUFFER_POINTER`, buffer, `HIP_LAUNCH_PARAM_BUFFER_SIZE`, &size,
/// `HIP_LAUNCH_PARAM_END`), as HIP takes them; both, or `extra` without its buffer, is an error.
///
/// # Safety
/// `extra`, when not null, is a key/value list ended by `HIP_LAUNCH_PARAM_END`, whose size
/// value points at a `size_t`.
unsafe fn arguments(call: &str, params: *mut *mut c_void, extra: *mut *mut c_void) -> Result<Arguments, i32> {
    if extra.is_null() {
        return Ok(Arguments::Pointers(params));
    }
    if !params.is_null() {
        return Err(fail(code::invalid_value(), call, "both kernelParams and extra"));
    }
    let (mut buffer, mut size) = (std::ptr::null::<c_void>(), None);
    for pair in 0.. {
        // SAFETY: the list is ended by PARAM_END (the caller's contract); each key but the last
        // has its value after it.
        let key = unsafe { *extra.add(2 * pair) } as usize;
        match key {
            PARAM_END => break,
            PARAM_BUFFER_POINTER => buffer = unsafe { *extra.add(2 * pair + 1) },
            // SAFETY: the size's value points at a size_t (the caller's contract).
            PARAM_BUFFER_SIZE => size = Some(unsafe { *(*extra.add(2 * pair + 1)).cast::<usize>() }),
            other => return Err(fail(code::invalid_value(), call, format!("extra key {other:#x}"))),
        }
    }
    match size {
        Some(size) if !buffer.is_null() => Ok(Arguments::Buffer(buffer, size)),
        _ => Err(fail(code::invalid_value(), call, "extra without HIP_LAUNCH_PARAM_BUFFER_POINTER and _SIZE")),
    }
}

/// The kernel of function handle `function` and the launch's arguments ([`arguments`]).
///
/// # Safety
/// As [`arguments`].
unsafe fn kernel_and_arguments(call: &str, function: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> Result<(Kernel, Arguments), i32> {
    let kernel = loaded().kernels.get(&(function as usize)).cloned();
    let kernel = kernel.ok_or_else(|| fail(code::invalid_handle(), call, format!("function {function:?}")))?;
    // SAFETY: the caller's contract for `extra`, passed on.
    Ok((kernel, unsafe { arguments(call, params, extra) }?))
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
    // SAFETY: HIP's contract for `extra`, passed on.
    match unsafe { kernel_and_arguments(call, function, params, extra) } {
        Ok((kernel, arguments)) => run(call, &kernel, [gx, gy, gz], [bx, by, bz], dynamic_lds, stream, arguments),
        Err(status) => status,
    }
}

/// hipModuleLaunchKernel with the grid in work-items (a whole number of blocks here: partial
/// work-groups are not modelled) and events recorded around the launch (rocBLAS's Tensile
/// kernels launch this way, with `extra`).
#[no_mangle]
pub unsafe extern "C" fn hipExtModuleLaunchKernel(
    function: Handle,
    global_x: u32,
    global_y: u32,
    global_z: u32,
    bx: u32,
    by: u32,
    bz: u32,
    dynamic_lds: usize,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    start: Handle,
    stop: Handle,
    _flags: u32,
) -> i32 {
    let call = "hipExtModuleLaunchKernel";
    let (global, block) = ([global_x, global_y, global_z], [bx, by, bz]);
    if block.contains(&0) || global.iter().zip(&block).any(|(g, b)| g % b != 0) || dynamic_lds > u32::MAX as usize {
        return fail(code::invalid_configuration(), call, format!("work-items {global:?} in blocks {block:?} (partial work-groups are not modelled), LDS {dynamic_lds}"));
    }
    let grid = [global_x / bx, global_y / by, global_z / bz];
    if !start.is_null() {
        // SAFETY: an event handle, per HIP's contract.
        let status = unsafe { streams::hipEventRecord(start, stream) };
        if status != 0 {
            return status;
        }
    }
    // SAFETY: HIP's contract for `extra`, passed on.
    let status = match unsafe { kernel_and_arguments(call, function, params, extra) } {
        Ok((kernel, arguments)) => run(call, &kernel, grid, block, dynamic_lds as u32, stream, arguments),
        Err(status) => status,
    };
    if status != 0 || stop.is_null() {
        return status;
    }
    // SAFETY: as above.
    unsafe { streams::hipEventRecord(stop, stream) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_names_a_kernarg_buffer() {
        let mut kernargs = [0u8; 24];
        let mut size = kernargs.len();
        let pointers = [std::ptr::null_mut::<c_void>(); 2];
        let key = |k: usize| k as *mut c_void;
        let mut extra = [key(PARAM_BUFFER_POINTER), kernargs.as_mut_ptr().cast(), key(PARAM_BUFFER_SIZE), (&mut size as *mut usize).cast(), key(PARAM_END)];
        let mut no_size = [key(PARAM_BUFFER_POINTER), kernargs.as_mut_ptr().cast(), key(PARAM_END)];
        let mut unknown = [key(7), key(0), key(PARAM_END)];
        // SAFETY (this test's calls): each list ends with PARAM_END, and the size value points at a usize.
        unsafe {
            assert!(matches!(arguments("t", pointers.as_ptr().cast_mut(), std::ptr::null_mut()), Ok(Arguments::Pointers(p)) if p == pointers.as_ptr().cast_mut()));
            match arguments("t", std::ptr::null_mut(), extra.as_mut_ptr()) {
                Ok(Arguments::Buffer(buffer, 24)) => assert_eq!(buffer, kernargs.as_ptr().cast()),
                _ => panic!("extra's buffer and size"),
            }
            assert_eq!(arguments("t", pointers.as_ptr().cast_mut(), extra.as_mut_ptr()).err(), Some(code::invalid_value()), "both");
            assert_eq!(arguments("t", std::ptr::null_mut(), no_size.as_mut_ptr()).err(), Some(code::invalid_value()), "no size");
            assert_eq!(arguments("t", std::ptr::null_mut(), unknown.as_mut_ptr()).err(), Some(code::invalid_value()), "unknown key");
        }
    }
}
