//! A small GPU driver layer loaded at run time (dlopen): HIP on AMD, the CUDA driver API on
//! NVIDIA, behind one [`Driver`]. It loads the ahead-of-time compiled Triton code objects (HSACO,
//! cubin), launches their kernels, and gives tests device memory and copies.
//!
//! Nothing of ROCm or CUDA is needed to build: each API is a table of function pointers
//! resolved from its library on first use ([`Driver::hip`], [`Driver::cuda`]), and a machine
//! without the library gets an `Err` naming it. Every driver status is checked and becomes a
//! [`GpuError`] carrying the driver's own error name and description.
//!
//! All operations but [`Driver::set_device`] and the device queries act on the calling thread's
//! current device (CUDA: its current context), so a thread calls `set_device` first.

mod buffer;
mod compute_units;
mod cuda;
mod device_info;
mod error;
mod fault_words;
mod hip;
mod library;
mod loader;
mod module;
mod scope;

use std::ffi::{c_char, c_void};
use std::sync::{Arc, OnceLock};

pub use buffer::DeviceBuffer;
pub use device_info::{current_device, device_key, DeviceInfo, DeviceKey};
pub use error::{Api, GpuError, GpuResult, NOT_A_DRIVER_STATUS};
pub use fault_words::FaultWord;
pub use hip::{HIP_DEVICE_PROP_R0600_SIZE, HIP_GCN_ARCH_NAME_OFFSET, HIP_HEADER_CHECK};
pub use crate::device::{DeviceLimits, MapElement, TensorMap, TiledView};
pub use module::{Function, Module};
pub use scope::with_device;

/// An opaque driver handle (module, function, context, stream, HIP device pointer).
type Handle = *mut c_void;

/// A driver function and its name, for error messages.
#[derive(Clone, Copy)]
struct Call<F> {
    name: &'static str,
    function: F,
}

/// `Call { name: "hipGetDevice", function: table.hipGetDevice }` from `call!(table.hipGetDevice)`.
macro_rules! call {
    ($table:ident . $symbol:ident) => {
        $crate::gpu::Call {
            name: stringify!($symbol),
            function: $table.$symbol,
        }
    };
}
use call;

type UnloadFn = unsafe extern "C" fn(Handle) -> i32;
/// A stream's identity: `hipStream_t` / `CUstream`, `unsigned long long *`.
type StreamIdFn = unsafe extern "C" fn(Handle, *mut u64) -> i32;
type LaunchFn = unsafe extern "C" fn(
    Handle,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    Handle,
    *mut *mut c_void,
    *mut *mut c_void,
) -> i32;

/// The driver functions whose C signatures are the same in HIP and CUDA, so that [`Driver`]
/// calls them with one piece of code for both.
struct SharedCalls {
    /// `hipGetDevice` / `cuCtxGetDevice`.
    current_device: Call<unsafe extern "C" fn(*mut i32) -> i32>,
    synchronize: Call<unsafe extern "C" fn() -> i32>,
    load_module: Call<unsafe extern "C" fn(*mut Handle, *const c_void) -> i32>,
    /// Kept by each [`Module`], which has no driver to check statuses with (see its Drop).
    unload_module: UnloadFn,
    get_function: Call<unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> i32>,
    launch: Call<LaunchFn>,
    /// `hipStreamGetId` (HIP 7) / `cuStreamGetId` (CUDA 12): `None` where the driver lacks it.
    stream_id: Option<Call<StreamIdFn>>,
}

/// What a thread has current, so that [`with_device`] gives exactly that back: nothing (CUDA:
/// no current context), a device (HIP, and CUDA's primary contexts as this layer makes them
/// current), or a context of the caller's own (CUDA: one it created, by its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// No current device (a CUDA thread without a current context).
    Nothing,
    /// A device by its ordinal, bound as [`Driver::set_device`] binds it.
    Device(i32),
    /// A CUDA context by its address: a device's primary context or one of the caller's own.
    Context(usize),
}

/// What differs between HIP and CUDA: each API implements this over its function table.
trait Backend: Send + Sync {
    fn api(&self) -> Api;
    fn shared(&self) -> &SharedCalls;
    /// Which library answers, for error messages ([`Driver::library`]).
    fn library(&self) -> &str;
    /// The driver's error name and description of `status`.
    fn describe(&self, status: i32) -> (String, String);
    fn set_device(&self, ordinal: i32) -> GpuResult<()>;
    fn device_count(&self) -> GpuResult<i32>;
    fn multiprocessor_count(&self, ordinal: i32) -> GpuResult<i32>;
    fn arch_name(&self, ordinal: i32) -> GpuResult<String>;
    /// What device `ordinal` allows one block ([`Driver::device_limits`]).
    fn device_limits(&self, ordinal: i32) -> GpuResult<DeviceLimits>;
    fn allow_shared(&self, function: Handle, bytes: u32) -> GpuResult<()>;
    /// Allocates `bytes` (> 0) on the current device; returns the device address.
    fn malloc(&self, bytes: usize) -> GpuResult<usize>;
    fn free(&self, addr: usize) -> GpuResult<()>;
    /// # Safety
    /// `dst..dst + src.len()` lies in one live allocation of this driver.
    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> GpuResult<()>;
    /// # Safety
    /// `src..src + dst.len()` lies in one live allocation of this driver.
    unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> GpuResult<()>;
    /// Page-locks `bytes` (> 0) of host memory at `host` and maps them into the address space of
    /// every device (portable); returns the address kernels use. Needs a current device (CUDA:
    /// context), whose reset undoes the registration. Never unregistered: the fault words in it
    /// are reused for the life of the process.
    /// # Safety
    /// `host..host + bytes` is memory of this process that is never freed.
    unsafe fn register_mapped_host(&self, host: *mut c_void, bytes: usize) -> GpuResult<usize>;
    /// The device address of registered host memory at `host` as the driver maps it now: an
    /// `Err` once a device reset (`hipDeviceReset`, `cuDevicePrimaryCtxReset`) has undone the
    /// registration. Needs a current device (CUDA: context).
    fn mapped_device_addr(&self, host: *mut c_void) -> GpuResult<usize>;
    /// The stream's identity for the life of the process where the driver has one
    /// (`cuStreamGetId`, CUDA 12; `hipStreamGetId`, HIP 7): a stream created where a destroyed
    /// one's handle was gets another. `None` where the driver lacks it.
    fn stream_id(&self, stream: usize) -> GpuResult<Option<u64>> {
        let Some(Call { name, function }) = self.shared().stream_id else {
            return Ok(None);
        };
        let mut id = 0;
        // SAFETY: `id` is a writable u64; the caller passes a live stream of the current device.
        self.check(name, unsafe { function(stream as Handle, &mut id) })?;
        Ok(Some(id))
    }
    /// What this thread has current ([`Binding`]), changing nothing.
    fn current_binding(&self) -> GpuResult<Binding> {
        Ok(self.current_device_if_any()?.map_or(Binding::Nothing, Binding::Device))
    }
    /// Whether `binding` is device `ordinal` as [`Backend::set_device`] makes it current.
    fn binding_is_device(&self, binding: Binding, ordinal: i32) -> GpuResult<bool> {
        Ok(binding == Binding::Device(ordinal))
    }
    /// Makes `binding` current again, exactly.
    fn restore_binding(&self, binding: Binding) -> GpuResult<()> {
        match binding {
            Binding::Nothing => self.clear_current_device(),
            Binding::Device(ordinal) => self.set_device(ordinal),
            Binding::Context(_) => {
                let message = "this driver has no contexts of the caller's own".to_owned();
                Err(GpuError::local(self.api(), "restore_binding", message))
            }
        }
    }
    /// Queues on `stream` the write of `value` to `count` u32 words at `addr`.
    /// # Safety
    /// `addr..addr + 4 * count` lies in one live allocation of the stream's device.
    unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, stream: usize) -> GpuResult<()>;

    /// Encodes a TMA descriptor of `view` (CUDA 12 drivers; an `Err` elsewhere).
    fn encode_tensor_map(&self, view: &TiledView) -> GpuResult<TensorMap> {
        let _ = view;
        let message = "this driver has no TMA descriptors (CUDA 12 on sm_90 or later has)".to_owned();
        Err(GpuError::local(self.api(), "cuTensorMapEncodeTiled", message))
    }

    /// The ordinal of this thread's current device. A CUDA thread that never chose one has no
    /// current context; its backend overrides this to start it on device 0, as HIP does.
    fn current_device(&self) -> GpuResult<i32> {
        let Call { name, function } = self.shared().current_device;
        let mut ordinal = 0;
        // SAFETY: `ordinal` is a writable int.
        self.check(name, unsafe { function(&mut ordinal) })?;
        Ok(ordinal)
    }

    /// This thread's current device, or `None` where the API has a state without one and the
    /// thread is in it (CUDA: no current context), without leaving that state.
    fn current_device_if_any(&self) -> GpuResult<Option<i32>> {
        self.current_device().map(Some)
    }

    /// Returns the thread to the state without a current device (CUDA: unbinds its context).
    /// HIP has no such state: a thread always has a current device, so nothing changes.
    fn clear_current_device(&self) -> GpuResult<()> {
        Ok(())
    }

    /// Waits for all work on the current device. A method, not only a shared call, so that the
    /// mock backend can count the host round trips it stands for.
    fn synchronize(&self) -> GpuResult<()> {
        synchronize_through_shared_call(self)
    }

    /// `Ok` for a zero status, else the [`GpuError`] of `call` with the driver's wording.
    fn check(&self, call: &'static str, status: i32) -> GpuResult<()> {
        if status == 0 {
            return Ok(());
        }
        let (name, description) = self.describe(status);
        Err(GpuError::from_status(
            self.api(),
            call,
            status,
            &name,
            &description,
            self.library(),
        ))
    }
}

/// [`Backend::synchronize`] through [`SharedCalls::synchronize`] (`hipDeviceSynchronize` /
/// `cuCtxSynchronize`).
fn synchronize_through_shared_call<B: Backend + ?Sized>(backend: &B) -> GpuResult<()> {
    let Call { name, function } = backend.shared().synchronize;
    // SAFETY: no arguments.
    backend.check(name, unsafe { function() })
}

/// A loaded driver library with its function pointers resolved once. Only the process-wide
/// instances of [`Driver::hip`] and [`Driver::cuda`] exist, and they are never dropped, so the
/// library and every function pointer taken from it stay valid for the whole process.
pub struct Driver {
    backend: Box<dyn Backend>,
    /// The fault words of the calls queued ([`Driver::queue_with_fault_word`]); shared with the
    /// threads' records of their calls in flight, which give the words back once finished.
    fault_words: Arc<fault_words::WordPool>,
}

/// The process-wide drivers, opened on first use.
static HIP: OnceLock<GpuResult<Driver>> = OnceLock::new();
static CUDA: OnceLock<GpuResult<Driver>> = OnceLock::new();

/// Returns the driver cached in `cell`, opening it on first use; a failure is cached too (the
/// library does not appear later in a running process).
fn cached(
    cell: &'static OnceLock<GpuResult<Driver>>,
    open: fn() -> GpuResult<Box<dyn Backend>>,
) -> GpuResult<&'static Driver> {
    let driver = cell.get_or_init(|| open().map(Driver::new));
    driver.as_ref().map_err(Clone::clone)
}

impl Driver {
    fn new(backend: Box<dyn Backend>) -> Driver {
        Driver {
            backend,
            fault_words: Arc::default(),
        }
    }

    /// The HIP runtime: the one the process has loaded already (`libamdhip64.so.7`, `.so.6` or
    /// `.so`, linked by the program or by Candle), so that its streams are ours; else
    /// `libamdhip64.so`, `.so.7`, `.so.6`, loaded here. Decided once per process, on first use;
    /// an `Err` with every dlopen error when absent. [`Driver::library`] says which file it is.
    pub fn hip() -> GpuResult<&'static Driver> {
        cached(&HIP, hip::open)
    }

    /// The CUDA driver: `libcuda.so.1` or `libcuda.so`, the one already loaded in the process if
    /// any, else loaded here; initialized with `cuInit(0)`. Decided once per process; an `Err`
    /// when absent or when `cuInit` fails (except for "no device", which
    /// [`Driver::device_count`] reports as 0 devices).
    pub fn cuda() -> GpuResult<&'static Driver> {
        cached(&CUDA, cuda::open)
    }

    /// The drivers this process has opened so far ([`Driver::hip`], [`Driver::cuda`]); opens none.
    pub fn opened() -> impl Iterator<Item = &'static Driver> {
        [&HIP, &CUDA].into_iter().filter_map(|cell| cell.get()?.as_ref().ok())
    }

    /// Which API this driver speaks.
    pub fn api(&self) -> Api {
        self.backend.api()
    }

    /// Which library this driver calls and who loaded it, e.g. `HIP runtime
    /// /opt/rocm-7.0.0/lib/libamdhip64.so.7.0.70000, already loaded by the process` (or
    /// `loaded by flash-attn-rocm`). Every failed driver status's message ends with it.
    pub fn library(&self) -> &str {
        self.backend.library()
    }

    /// Makes device `ordinal` current on this thread (HIP: `hipSetDevice`; CUDA: the device's
    /// primary context, retained once per process, made current with `cuCtxSetCurrent`).
    pub fn set_device(&self, ordinal: i32) -> GpuResult<()> {
        self.backend.set_device(ordinal)
    }

    /// The ordinal of this thread's current device (`hipGetDevice` / `cuCtxGetDevice`). A
    /// thread starts on device 0 with either API: with CUDA, a thread that has no current
    /// context yet gets device 0's primary context made current, as a HIP thread starts on
    /// device 0 (so that calls from fresh threads, e.g. a thread pool's, behave alike).
    pub fn current_device(&self) -> GpuResult<i32> {
        self.backend.current_device()
    }

    /// This thread's current device, or `None` for a CUDA thread with no current context, which
    /// this leaves without one (no context is created or made current).
    pub fn current_device_if_any(&self) -> GpuResult<Option<i32>> {
        self.backend.current_device_if_any()
    }

    /// Gives a thread for which [`Driver::current_device_if_any`] was `None` that state back
    /// (CUDA: no current context); nothing on HIP, where a thread always has a current device.
    pub fn clear_current_device(&self) -> GpuResult<()> {
        self.backend.clear_current_device()
    }

    /// What this thread has current: nothing, a device, or (CUDA) a context of the caller's own.
    pub fn current_binding(&self) -> GpuResult<Binding> {
        self.backend.current_binding()
    }

    /// Whether `binding` is device `ordinal` as [`Driver::set_device`] makes it current (CUDA:
    /// its primary context, not a context the caller made on that device).
    pub fn binding_is_device(&self, binding: Binding, ordinal: i32) -> GpuResult<bool> {
        self.backend.binding_is_device(binding, ordinal)
    }

    /// Makes `binding` (from [`Driver::current_binding`]) current again, exactly.
    pub fn restore_binding(&self, binding: Binding) -> GpuResult<()> {
        self.backend.restore_binding(binding)
    }

    /// Queues on `stream` (a `hipStream_t` / `CUstream`; 0 is the null stream) the write of
    /// `value` to the `count` u32 words at device address `addr` (`hipMemsetD32Async` /
    /// `cuMemsetD32Async`); an f32 fill writes `value.to_bits()`.
    ///
    /// # Safety
    /// `addr..addr + 4 * count` lies in one live allocation of the current device, which the
    /// stream belongs to, and stays allocated until the stream has run the fill.
    pub unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, stream: usize) -> GpuResult<()> {
        if count == 0 {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.fill_u32_async(addr, value, count, stream) }
    }

    /// How many devices the driver sees; 0, not an error, when it reports that there are none.
    pub fn device_count(&self) -> GpuResult<i32> {
        self.backend.device_count()
    }

    /// The units that run workgroups side by side on device `ordinal`, counted as the key-split
    /// heuristic expects them:
    /// - NVIDIA: streaming multiprocessors (132 on an H100 SXM).
    /// - AMD CDNA (gfx9: gfx90a, gfx942, gfx950): compute units (304 on an MI300X, 110 on one
    ///   MI250X die), as HIP reports them.
    /// - AMD gfx10 and later (RDNA2/3/4): compute units too (96 on an RX 7900 XTX), although
    ///   HIP reports work-group processors (two CUs each: 48) while its default WGP mode is on.
    ///
    /// See `compute_units` in `src/gpu/compute_units.rs` for how HIP's figures are read.
    pub fn multiprocessor_count(&self, ordinal: i32) -> GpuResult<u32> {
        let count = self.backend.multiprocessor_count(ordinal)?;
        u32::try_from(count).map_err(|_| {
            let message = format!("the driver reported {count}");
            GpuError::local(self.api(), "multiprocessor_count", message)
        })
    }

    /// The code-object target of device `ordinal`, as the build names it: `gfx90a`, `gfx942`,
    /// `gfx1100`, ... (AMD, without feature suffixes such as `:sramecc+:xnack-`) or `sm_90`
    /// (NVIDIA, from the compute capability).
    pub fn arch_name(&self, ordinal: i32) -> GpuResult<String> {
        self.backend.arch_name(ordinal)
    }

    /// What device `ordinal` allows one block of a launch, and whether its link to the host
    /// has native atomics:
    /// - NVIDIA: the shared memory a kernel may opt into
    ///   (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`), which the launcher opts
    ///   into for each kernel that needs more than the default 48 KiB.
    /// - AMD: the LDS of a workgroup (`hipDeviceAttributeMaxSharedMemoryPerBlock`);
    ///   `hipDeviceAttributeSharedMemPerBlockOptin` is CUDA's notion, 0 in some ROCm releases.
    pub fn device_limits(&self, ordinal: i32) -> GpuResult<DeviceLimits> {
        self.backend.device_limits(ordinal)
    }

    /// Waits for all work on the current device; errors of earlier asynchronous launches surface
    /// here (`hipDeviceSynchronize` / `cuCtxSynchronize`).
    pub fn synchronize(&self) -> GpuResult<()> {
        self.backend.synchronize()
    }

    /// The TMA descriptor of `view`, for a kernel that takes it by value: an `Err` from drivers
    /// without them (HIP, CUDA before 12) or for a view the driver refuses.
    pub fn encode_tensor_map(&self, view: &TiledView) -> GpuResult<TensorMap> {
        self.backend.encode_tensor_map(view)
    }
}

/// [`DeviceLimits`] from the driver's attribute values (ints in both APIs); a negative size is
/// an error naming `call`.
fn device_limits_from_attributes(
    api: Api,
    call: &'static str,
    max_shared_per_block: i32,
    max_threads_per_block: i32,
    host_native_atomics: i32,
) -> GpuResult<DeviceLimits> {
    let size = |what: &str, value: i32| {
        u32::try_from(value).map_err(|_| {
            let message = format!("the driver reported {value} for {what}");
            GpuError::local(api, call, message)
        })
    };
    Ok(DeviceLimits {
        max_shared_per_block: size("the shared memory per block", max_shared_per_block)?,
        max_threads_per_block: size("the threads per block", max_threads_per_block)?,
        host_native_atomics: host_native_atomics != 0,
    })
}

/// Converts a driver's C string, or names a status the driver did not describe.
fn text_or_unknown(text: *const c_char) -> String {
    // SAFETY: the drivers' error names and strings are static NUL-terminated strings or null.
    unsafe { loader::driver_string(text) }.unwrap_or_else(|| "unknown error".to_owned())
}

#[cfg(test)]
pub(crate) mod tests;
