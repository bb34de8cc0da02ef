//! Test-only: a driver backend that executes our AMD code objects on tinygrad's AMD ISA emulator
//! (RDNA3, RDNA4, CDNA) in this process, so that the crate's real launch path (select, plan,
//! marshal, launch, driver) runs against code that no AMD GPU here can run.
//!
//! Device memory is host memory (a device address is a host address), copies are memcpy, and
//! the driver functions (module load, kernel lookup, launch) are done by
//! `tools/amd_emulator/driver.py` in an embedded CPython: it loads the code object's segments,
//! reads the kernel descriptor and the metadata note, builds the kernarg segment from the
//! launcher's argument values, and runs the grid on the emulator with the user SGPRs, LDS size
//! and block size a HIP dispatch would give. Our corrections to the emulator
//! (`tools/amd_emulator/corrections.py`) are registered into it at run time.
//!
//! Needs at run time: `FLASH_ATTN_ROCM_TINYGRAD` (a tinygrad checkout: the emulator is
//! `test/mockgpu/amd/emu.py` there), a python3 built with a shared libpython, numpy and clang
//! (`FLASH_ATTN_ROCM_EMULATOR_PYTHON` names the interpreter, default `python3`).

mod python;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, OnceLock};

use super::{Api, Backend, Call, Driver, GpuError, GpuResult, Handle, MappedHostMemory, SharedCalls};
use python::Python;

/// The variable that names the tinygrad checkout.
pub const TINYGRAD_VAR: &str = "FLASH_ATTN_ROCM_TINYGRAD";
/// The variable that names the Python interpreter (default `python3`).
pub const PYTHON_VAR: &str = "FLASH_ATTN_ROCM_EMULATOR_PYTHON";
/// Our Python side: the driver, the corrections and their checks.
const TOOLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/amd_emulator");

/// Archs the emulator runs, with the compute units the split plan sees (the real parts':
/// MI300X, MI250X die, RX 7900 XTX, RX 9070 XT, RX 6800 XT, Radeon 780M), and the device
/// ordinal each reports (distinct, so that the launcher's per-device caches keep them apart).
const ARCHS: [(&str, i32); 6] =
    [("gfx942", 304), ("gfx90a", 110), ("gfx1100", 96), ("gfx1201", 64), ("gfx1030", 72), ("gfx1103", 12)];
const FIRST_ORDINAL: i32 = 1000;

/// Allocation alignment: what hipMalloc gives at least.
const ALIGN: usize = 256;

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

thread_local! {
    /// The text of this thread's last failed emulator call, for [`Backend::describe`].
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The status the driver functions return when the Python side failed.
const PYTHON_FAILED: i32 = 1;

/// Runs `driver.entry(op, ...args)`; 0, or [`PYTHON_FAILED`] with the message kept for describe.
fn call_driver(op: &str, args: &[usize]) -> i32 {
    let python = match python() {
        Ok(python) => python,
        Err(message) => return fail(message),
    };
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
    if let Err(message) = python.run(&code) {
        return fail(message);
    }
    if status == 0 {
        return 0;
    }
    let end = error.iter().position(|&b| b == 0).unwrap_or(error.len());
    fail(String::from_utf8_lossy(&error[..end]).into_owned())
}

fn fail(message: String) -> i32 {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
    PYTHON_FAILED
}

unsafe extern "C" fn emulator_current_device(ordinal: *mut i32) -> i32 {
    // SAFETY: Driver passes a writable int. (Unused: the backend overrides current_device.)
    unsafe { *ordinal = FIRST_ORDINAL };
    0
}

unsafe extern "C" fn emulator_synchronize() -> i32 {
    // Launches run to completion before they return.
    0
}

/// What each loaded module and kernel is (the embedded image's variant name, by its address),
/// and the variants launched since the last [`take_launches`]: a run's record of what executed.
#[derive(Default)]
struct LaunchRecord {
    modules: HashMap<usize, &'static str>,
    functions: HashMap<usize, &'static str>,
    launched: Vec<&'static str>,
}

fn record() -> std::sync::MutexGuard<'static, LaunchRecord> {
    static RECORD: OnceLock<Mutex<LaunchRecord>> = OnceLock::new();
    RECORD.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The variants (`fwd_decode_fp16_d64_flat_b32`, `merge_fp16_d64`, ...) launched on any
/// emulated device since the last call, in launch order.
pub fn take_launches() -> Vec<&'static str> {
    std::mem::take(&mut record().launched)
}

unsafe extern "C" fn emulator_load(module: *mut Handle, image: *const c_void) -> i32 {
    let status = call_driver("load", &[image as usize, module as usize]);
    if status == 0 {
        let variant = crate::triton::KERNELS
            .iter()
            .find(|k| k.image.as_ptr() == image.cast())
            .map_or("(not an embedded image)", |k| k.variant);
        // SAFETY: the Python side wrote the module handle on success.
        record().modules.insert(unsafe { *module } as usize, variant);
    }
    status
}

unsafe extern "C" fn emulator_unload(module: Handle) -> i32 {
    call_driver("unload", &[module as usize])
}

unsafe extern "C" fn emulator_get_function(f: *mut Handle, module: Handle, name: *const c_char) -> i32 {
    let status = call_driver("get_function", &[module as usize, name as usize, f as usize]);
    if status == 0 {
        let mut record = record();
        let variant = record.modules.get(&(module as usize)).copied().unwrap_or("?");
        // SAFETY: the Python side wrote the function handle on success.
        record.functions.insert(unsafe { *f } as usize, variant);
    }
    status
}

unsafe extern "C" fn emulator_launch(
    f: Handle,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shared: u32,
    _stream: Handle,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> i32 {
    let dims = [gx, gy, gz, bx, by, bz, shared].map(|x| x as usize);
    {
        let mut record = record();
        let variant = record.functions.get(&(f as usize)).copied().unwrap_or("?");
        record.launched.push(variant);
    }
    call_driver("launch", &[&[f as usize][..], &dims, &[params as usize]].concat())
}

/// The emulator's backend for one arch: host memory as device memory.
struct EmulatorBackend {
    arch: &'static str,
    units: i32,
    ordinal: i32,
    library: String,
    shared: SharedCalls,
    /// Live allocations: address -> size.
    allocations: Mutex<HashMap<usize, usize>>,
}

impl Driver {
    /// Test-only: a driver whose one device is an emulated `arch` (gfx942, gfx90a, gfx1100,
    /// gfx1201, gfx1030, gfx1103), executing the code objects on tinygrad's AMD ISA emulator in
    /// this process. `Err` saying why when the emulator cannot start (no
    /// `FLASH_ATTN_ROCM_TINYGRAD`, no shared libpython, an import failing). One driver per
    /// arch per process, never dropped.
    pub fn emulator(arch: &str) -> GpuResult<&'static Driver> {
        static DRIVERS: OnceLock<Mutex<HashMap<&'static str, &'static Driver>>> = OnceLock::new();
        let local = |message: String| GpuError::local(Api::Hip, "emulator", message);
        let (index, &(arch, units)) = ARCHS
            .iter()
            .enumerate()
            .find(|(_, (name, _))| *name == arch)
            .ok_or_else(|| local(format!("{arch} is not an emulated arch")))?;
        python().map_err(local)?;
        let mut drivers = DRIVERS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        Ok(*drivers.entry(arch).or_insert_with(|| {
            let backend = EmulatorBackend {
                arch,
                units,
                ordinal: FIRST_ORDINAL + index as i32,
                library: format!("AMD ISA emulator ({TINYGRAD_VAR}={})", std::env::var(TINYGRAD_VAR).unwrap_or_default()),
                shared: SharedCalls {
                    current_device: Call { name: "emulatorGetDevice", function: emulator_current_device },
                    synchronize: Call { name: "emulatorSynchronize", function: emulator_synchronize },
                    load_module: Call { name: "emulatorModuleLoad", function: emulator_load },
                    unload_module: emulator_unload,
                    get_function: Call { name: "emulatorModuleGetFunction", function: emulator_get_function },
                    launch: Call { name: "emulatorLaunchKernel", function: emulator_launch },
                },
                allocations: Mutex::new(HashMap::new()),
            };
            Box::leak(Box::new(Driver::new(Box::new(backend))))
        }))
    }
}

fn layout(bytes: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(bytes, ALIGN).expect("allocation size overflows")
}

impl Backend for EmulatorBackend {
    fn api(&self) -> Api {
        Api::Hip
    }
    fn shared(&self) -> &SharedCalls {
        &self.shared
    }
    fn library(&self) -> &str {
        &self.library
    }
    fn describe(&self, _status: i32) -> (String, String) {
        ("emulatorError".to_owned(), LAST_ERROR.with(|e| e.borrow().clone()))
    }
    fn set_device(&self, ordinal: i32) -> GpuResult<()> {
        match ordinal == self.ordinal {
            true => Ok(()),
            false => Err(GpuError::local(Api::Hip, "set_device", format!("the emulated {} is device {}", self.arch, self.ordinal))),
        }
    }
    fn current_device(&self) -> GpuResult<i32> {
        Ok(self.ordinal)
    }
    fn device_count(&self) -> GpuResult<i32> {
        Ok(1)
    }
    fn multiprocessor_count(&self, _: i32) -> GpuResult<i32> {
        Ok(self.units)
    }
    fn arch_name(&self, _: i32) -> GpuResult<String> {
        Ok(self.arch.to_owned())
    }
    /// The parts' limits (64 KiB of LDS per work-group, 1024 threads); the emulated kernels'
    /// atomics act on host memory itself, so they are atomic with respect to the host.
    fn device_limits(&self, _: i32) -> GpuResult<crate::triton::targets::DeviceLimits> {
        Ok(crate::triton::targets::DeviceLimits {
            max_shared_per_block: 64 * 1024,
            max_threads_per_block: 1024,
            host_native_atomics: true,
        })
    }
    fn allow_shared(&self, _: Handle, _: u32) -> GpuResult<()> {
        Ok(())
    }
    fn malloc(&self, bytes: usize) -> GpuResult<usize> {
        // SAFETY: the layout has a non-zero size (Driver::malloc never asks for 0 bytes).
        let addr = unsafe { std::alloc::alloc(layout(bytes)) } as usize;
        if addr == 0 {
            return Err(GpuError::local(Api::Hip, "malloc", format!("{bytes} bytes of host memory")));
        }
        self.allocations.lock().unwrap_or_else(|e| e.into_inner()).insert(addr, bytes);
        Ok(addr)
    }
    fn free(&self, addr: usize) -> GpuResult<()> {
        let Some(bytes) = self.allocations.lock().unwrap_or_else(|e| e.into_inner()).remove(&addr) else {
            return Err(GpuError::local(Api::Hip, "free", format!("{addr:#x} is not an allocation")));
        };
        // SAFETY: allocated by malloc above with this layout, removed from the map once.
        unsafe { std::alloc::dealloc(addr as *mut u8, layout(bytes)) };
        Ok(())
    }
    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> GpuResult<()> {
        // SAFETY: the caller guarantees that dst..dst+len lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
    unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> GpuResult<()> {
        // SAFETY: the caller guarantees that src..src+len lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    fn alloc_mapped_host(&self, bytes: usize) -> GpuResult<MappedHostMemory> {
        let words = Box::leak(vec![0u64; bytes.div_ceil(8)].into_boxed_slice());
        let host = words.as_mut_ptr().cast::<c_void>();
        Ok(MappedHostMemory { host, device_addr: host as usize })
    }
    unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, _stream: usize) -> GpuResult<()> {
        for i in 0..count {
            // SAFETY: the caller guarantees that addr..addr+4*count lies in a live allocation.
            unsafe { std::ptr::write_unaligned((addr as *mut u32).add(i), value) };
        }
        Ok(())
    }
}
