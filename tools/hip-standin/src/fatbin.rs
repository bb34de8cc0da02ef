//! What hipcc's generated host code calls: each translation unit's constructor registers its
//! fat binary (`__hipRegisterFatBinary`) and its kernels (`__hipRegisterFunction`); a `<<<>>>`
//! launch pushes its configuration, and the kernel's host stub pops it and calls
//! `hipLaunchKernel` with the stub's address. The device code is a clang offload bundle of one
//! code object per target; the one for the launching device's arch is loaded on its first
//! launch there, and runs through the same launch path as a module's kernel.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::devices::current;
use crate::errors::{code, fail, ok};
use crate::modules::{kernel, load_for_current_device, run, Kernel};
use crate::{emulator, Dim3, Handle};

/// `__hipFatBinaryWrapper`'s magic ("HIPF") and version.
const WRAPPER_MAGIC: u32 = 0x4849_5046;
const WRAPPER_VERSION: u32 = 1;
const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
const COMPRESSED_MAGIC: &[u8; 4] = b"CCOB";

/// One registered fat binary: its code objects by target id, and the modules loaded from it.
struct FatBinary {
    /// (`hipv4-amdgcn-amd-amdhsa--gfx942`, address of the code object); or why the bundle cannot
    /// be read (a compressed one), said when one of its kernels is launched: libraries under
    /// Candle (rocBLAS, ...) register bundles whose kernels these tests never launch.
    entries: Result<Vec<(String, usize)>, String>,
    /// Device ordinal -> module handle.
    modules: HashMap<usize, usize>,
}

#[derive(Default)]
struct Registry {
    /// By the handle `__hipRegisterFatBinary` returned.
    binaries: HashMap<usize, FatBinary>,
    /// Host stub address -> (fat binary handle, kernel name).
    functions: HashMap<usize, (usize, String)>,
    /// (host stub, device) -> kernel, once looked up.
    kernels: HashMap<(usize, usize), Kernel>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the bundle's entries: (target id, code object address), those of size 0 left out.
///
/// # Safety
/// `bundle` points at a clang offload bundle that stays mapped (the program's own data).
unsafe fn bundle_entries(bundle: *const u8) -> Result<Vec<(String, usize)>, String> {
    // SAFETY (every read below): the bundle is the program's data, read within its own header's
    // sizes; unaligned reads are used throughout.
    let read_u64 = |at: usize| unsafe { std::ptr::read_unaligned(bundle.add(at).cast::<u64>()) } as usize;
    // SAFETY: a bundle starts with its 24-byte magic (the caller's contract).
    let magic = unsafe { std::slice::from_raw_parts(bundle, 24) };
    if &magic[..4] == COMPRESSED_MAGIC {
        return Err("a compressed offload bundle (CCOB): the stand-in reads uncompressed bundles only".to_owned());
    }
    if magic != BUNDLE_MAGIC {
        return Err(format!("not a clang offload bundle (starts {:?})", String::from_utf8_lossy(&magic[..8])));
    }
    let count = read_u64(24);
    let mut at = 32;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let (offset, size, id_len) = (read_u64(at), read_u64(at + 8), read_u64(at + 16));
        // SAFETY: the entry's id lies in the bundle's header, `id_len` bytes after its three words.
        let id = unsafe { std::slice::from_raw_parts(bundle.add(at + 24), id_len) };
        at += 24 + id_len;
        if size > 0 {
            entries.push((String::from_utf8_lossy(id).into_owned(), bundle as usize + offset));
        }
    }
    Ok(entries)
}

/// Whether bundle target id `id` (`hipv4-amdgcn-amd-amdhsa--gfx942`, maybe with `:xnack-` and
/// such after the processor) runs on `arch`.
fn id_runs_on(id: &str, arch: &str) -> bool {
    id.starts_with("hipv4-amdgcn-amd-amdhsa-")
        && id.rsplit('-').next().and_then(|target| target.split(':').next()) == Some(arch)
}

#[no_mangle]
pub unsafe extern "C" fn __hipRegisterFatBinary(wrapper: *const c_void) -> *mut *mut c_void {
    #[repr(C)]
    struct Wrapper {
        magic: u32,
        version: u32,
        bundle: *const u8,
        unused: *const c_void,
    }
    // SAFETY: hipcc's constructor passes its static `__hipFatBinaryWrapper`.
    let wrapper = unsafe { &*wrapper.cast::<Wrapper>() };
    if wrapper.magic != WRAPPER_MAGIC || wrapper.version != WRAPPER_VERSION {
        eprintln!("hip-standin: __hipRegisterFatBinary: wrapper magic {:#x} version {}", wrapper.magic, wrapper.version);
        std::process::abort();
    }
    // SAFETY: the wrapper's bundle is the program's embedded device code.
    let entries = unsafe { bundle_entries(wrapper.bundle) };
    // The handle is a leaked word whose address identifies the binary; hipcc's code only keeps
    // it and passes it back.
    let handle = Box::leak(Box::new(std::ptr::null_mut::<c_void>())) as *mut *mut c_void;
    registry().binaries.insert(handle as usize, FatBinary { entries, modules: HashMap::new() });
    handle
}

#[no_mangle]
pub unsafe extern "C" fn __hipUnregisterFatBinary(handle: *mut *mut c_void) {
    // Runs at exit: the modules stay (the process ends), the registration goes.
    let mut registry = registry();
    registry.binaries.remove(&(handle as usize));
    registry.functions.retain(|_, (binary, _)| *binary != handle as usize);
}

#[no_mangle]
pub unsafe extern "C" fn __hipRegisterFunction(
    handle: *mut *mut c_void,
    host_function: *const c_void,
    _device_function: *mut c_char,
    device_name: *const c_char,
    _thread_limit: u32,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block_dim: *mut Dim3,
    _grid_dim: *mut Dim3,
    _wave_size: *mut i32,
) {
    // SAFETY: hipcc passes the kernel's mangled name, a string literal.
    let name = unsafe { emulator::text(device_name) };
    registry().functions.insert(host_function as usize, (handle as usize, name));
}

/// Device variables: hipcc registers each `__device__`/`__constant__` variable. The stand-in
/// keeps none (no kernel of this crate's binaries has one); a registration says so and aborts,
/// rather than run a kernel whose variable lives elsewhere.
#[no_mangle]
pub unsafe extern "C" fn __hipRegisterVar(
    _handle: *mut *mut c_void,
    _host_var: *mut c_char,
    _device_var: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    _size: usize,
    _constant: i32,
    _global: i32,
) {
    // SAFETY: hipcc passes the variable's name, a string literal.
    let name = unsafe { emulator::text(device_name) };
    eprintln!("hip-standin: __hipRegisterVar({name}): device variables are not modelled");
    std::process::abort();
}

/// A `<<<grid, block, shmem, stream>>>` configuration, pushed by the caller and popped by the
/// kernel's host stub.
#[derive(Clone, Copy)]
struct Configuration {
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: Handle,
}

thread_local! {
    static CONFIGURATIONS: RefCell<Vec<Configuration>> = const { RefCell::new(Vec::new()) };
}

#[no_mangle]
pub extern "C" fn __hipPushCallConfiguration(grid: Dim3, block: Dim3, shared: usize, stream: Handle) -> i32 {
    CONFIGURATIONS.with(|c| c.borrow_mut().push(Configuration { grid, block, shared, stream }));
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn __hipPopCallConfiguration(grid: *mut Dim3, block: *mut Dim3, shared: *mut usize, stream: *mut Handle) -> i32 {
    let Some(configuration) = CONFIGURATIONS.with(|c| c.borrow_mut().pop()) else {
        return fail(code::invalid_value(), "__hipPopCallConfiguration", "nothing pushed");
    };
    // SAFETY: the host stub passes its four local variables.
    unsafe {
        *grid = configuration.grid;
        *block = configuration.block;
        *shared = configuration.shared;
        *stream = configuration.stream;
    }
    ok()
}

/// The kernel of host stub `stub` on the current device, its code object loaded on first use.
fn registered_kernel(call: &str, stub: usize) -> Result<Kernel, i32> {
    let (ordinal, device) = current().map_err(|status| fail(status, call, "no device"))?;
    if let Some(kernel) = registry().kernels.get(&(stub, ordinal)) {
        return Ok(kernel.clone());
    }
    let Some((binary, name)) = registry().functions.get(&stub).cloned() else {
        return Err(fail(code::invalid_device_function(), call, format!("{stub:#x} is not a registered kernel")));
    };
    let (module, image, ids) = {
        let registry = registry();
        let fat = &registry.binaries[&binary];
        let entries = match &fat.entries {
            Ok(entries) => entries,
            Err(why) => return Err(fail(code::no_binary_for_gpu(), call, format!("{name}: {why}"))),
        };
        let image = entries.iter().find(|(id, _)| id_runs_on(id, device.arch)).map(|&(_, addr)| addr);
        let ids: Vec<String> = entries.iter().map(|(id, _)| id.clone()).collect();
        (fat.modules.get(&ordinal).copied(), image, ids)
    };
    let module = match (module, image) {
        (Some(module), _) => module,
        (None, Some(image)) => {
            let module = load_for_current_device(call, image as *const c_void)?;
            registry().binaries.get_mut(&binary).expect("registered").modules.insert(ordinal, module);
            module
        }
        (None, None) => {
            return Err(fail(code::no_binary_for_gpu(), call, format!("{name}: no code object for {} (bundle has {ids:?})", device.arch)));
        }
    };
    let (_, kernel) = kernel(call, module, &name)?;
    registry().kernels.insert((stub, ordinal), kernel.clone());
    Ok(kernel)
}

#[no_mangle]
pub unsafe extern "C" fn hipLaunchKernel(
    stub: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Handle,
) -> i32 {
    let call = "hipLaunchKernel";
    let kernel = match registered_kernel(call, stub as usize) {
        Ok(kernel) => kernel,
        Err(status) => return status,
    };
    let Ok(shared) = u32::try_from(shared) else {
        return fail(code::invalid_value(), call, format!("{shared} bytes of dynamic LDS"));
    };
    run(call, &kernel, [grid.x, grid.y, grid.z], [block.x, block.y, block.z], shared, stream, crate::emulator::Arguments::Pointers(args))
}
