//! The CUDA driver API (NVIDIA): `libcuda.so.1` loaded at run time. Constants are the values of
//! CUDA's `cuda.h` (`CUresult`, `CUdevice_attribute`, `CUfunction_attribute`), stable across
//! CUDA versions.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, PoisonError};

use super::library::{self, Candidates, DriverLibrary};
use super::loader::{driver_functions, symbol};
use super::{
    call, device_limits_from_attributes, GpuError, text_or_unknown, Api, Backend, DeviceLimits, GpuResult,
    Binding, Call, Handle, SharedCalls, StreamIdFn,
};
use super::{TensorMap, TiledView};

/// Where the CUDA driver is looked for: the one already loaded (by the CUDA runtime or the
/// program), else loaded here. `libcuda.so.1` is its soname; `libcuda.so` the development link.
const CANDIDATES: Candidates = Candidates {
    already_loaded: &["libcuda.so.1", "libcuda.so"],
    to_load: &["libcuda.so.1", "libcuda.so"],
    probe_symbol: "cuGetErrorName",
};

/// `CUDA_ERROR_NO_DEVICE`.
const CUDA_ERROR_NO_DEVICE: i32 = 100;
/// `cuCtxGetDevice` on a thread without a current context.
const CUDA_ERROR_INVALID_CONTEXT: i32 = 201;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: i32 = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: i32 = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: i32 = 76;
const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 1;
const CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: i32 = 86;
const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
/// `CU_MEMHOSTREGISTER_PORTABLE`: the registration belongs to every context.
const CU_MEMHOSTREGISTER_PORTABLE: u32 = 0x01;
/// `CU_MEMHOSTREGISTER_DEVICEMAP`: mapped into the devices' address space.
const CU_MEMHOSTREGISTER_DEVICEMAP: u32 = 0x02;
/// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
const INTERLEAVE_NONE: i32 = 0;
/// `CU_TENSOR_MAP_SWIZZLE_32B`, `_64B` and `_128B`: the swizzles of the TMA kernel's shared
/// layouts, over a box row's bytes ([`TiledView::swizzle_bytes`]).
const SWIZZLE_32B: i32 = 1;
const SWIZZLE_64B: i32 = 2;
const SWIZZLE_128B: i32 = 3;
/// `CU_TENSOR_MAP_L2_PROMOTION_L2_128B`, what Triton's own launcher asks for.
const L2_PROMOTION_128B: i32 = 2;
/// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`: out-of-bounds elements read as zeros.
const OOB_FILL_NONE: i32 = 0;
/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_DYNAMIC_SHARED_LIMIT: u32 = 48 * 1024;

/// `CUdeviceptr`.
type DevicePtr = u64;

driver_functions! {
    /// The CUDA functions this layer calls, with their C signatures (`CUresult`,
    /// `CUdevice_attribute` and `CUfunction_attribute` are int enums, `CUdevice` an int;
    /// `CUcontext`, `CUmodule`, `CUfunction` and `CUstream` are pointers). `_v2` names are the
    /// 64-bit entry points the `cuda.h` macros select.
    struct CudaFunctions {
        cuInit: fn(u32) -> i32;
        cuDeviceGet: fn(*mut i32, i32) -> i32;
        cuDeviceGetCount: fn(*mut i32) -> i32;
        cuDeviceGetAttribute: fn(*mut i32, i32, i32) -> i32;
        cuDevicePrimaryCtxRetain: fn(*mut Handle, i32) -> i32;
        cuCtxSetCurrent: fn(Handle) -> i32;
        cuCtxGetCurrent: fn(*mut Handle) -> i32;
        cuCtxGetDevice: fn(*mut i32) -> i32;
        cuCtxSynchronize: fn() -> i32;
        cuModuleLoadData: fn(*mut Handle, *const c_void) -> i32;
        cuModuleUnload: fn(Handle) -> i32;
        cuModuleGetFunction: fn(*mut Handle, Handle, *const c_char) -> i32;
        cuFuncSetAttribute: fn(Handle, i32, i32) -> i32;
        cuLaunchKernel: fn(Handle, u32, u32, u32, u32, u32, u32, u32, Handle,
                           *mut *mut c_void, *mut *mut c_void) -> i32;
        cuMemAlloc_v2: fn(*mut DevicePtr, usize) -> i32;
        cuMemFree_v2: fn(DevicePtr) -> i32;
        cuMemcpyHtoD_v2: fn(DevicePtr, *const c_void, usize) -> i32;
        cuMemcpyDtoH_v2: fn(*mut c_void, DevicePtr, usize) -> i32;
        cuMemsetD32Async: fn(DevicePtr, u32, usize, Handle) -> i32;
        cuMemHostRegister_v2: fn(*mut c_void, usize, u32) -> i32;
        cuMemHostGetDevicePointer_v2: fn(*mut DevicePtr, *mut c_void, u32) -> i32;
        cuGetErrorName: fn(i32, *mut *const c_char) -> i32;
        cuGetErrorString: fn(i32, *mut *const c_char) -> i32;
    }
}

/// `cuTensorMapEncodeTiled` (CUDA 12 drivers on): `CUtensorMap *`, `CUtensorMapDataType`, rank,
/// global address, dims, strides (bytes, rank - 1 of them), box dims, element strides, and the
/// interleave, swizzle, L2 promotion and out-of-bounds fill enums.
type EncodeTiledFn = unsafe extern "C" fn(
    *mut TensorMap,
    i32,
    u32,
    *mut c_void,
    *const u64,
    *const u64,
    *const u32,
    *const u32,
    i32,
    i32,
    i32,
    i32,
) -> i32;

struct Cuda {
    functions: CudaFunctions,
    /// Older drivers lack it: only the TMA kernels need it, so its absence is an `Err` at their
    /// launch rather than at opening the driver.
    encode_tiled: Option<EncodeTiledFn>,
    shared: SharedCalls,
    /// `cuInit` answered `CUDA_ERROR_NO_DEVICE`: the driver works but sees no GPU.
    no_device: bool,
    /// Each device's primary context (a `CUcontext` as an address), retained once on first
    /// `set_device` and never released: the Driver lives as long as the process.
    primary_contexts: Mutex<HashMap<i32, usize>>,
    /// Keeps the function pointers valid; never unloaded (the Driver is never dropped).
    library: DriverLibrary,
}

/// Finds or loads the CUDA driver, resolves its functions and initializes it.
pub(super) fn open() -> GpuResult<Box<dyn Backend>> {
    let library = library::open(Api::Cuda, &CANDIDATES)?;
    // SAFETY: the table declares each function with its C signature from cuda.h.
    let functions = unsafe { CudaFunctions::resolve(library.library(), Api::Cuda) }?;
    // SAFETY: cuInit takes flags that must be 0.
    let status = unsafe { (functions.cuInit)(0) };
    let shared = SharedCalls {
        current_device: call!(functions.cuCtxGetDevice),
        synchronize: call!(functions.cuCtxSynchronize),
        load_module: call!(functions.cuModuleLoadData),
        unload_module: functions.cuModuleUnload,
        get_function: call!(functions.cuModuleGetFunction),
        launch: call!(functions.cuLaunchKernel),
        // CUDA 12 drivers on: older ones know streams by their handles alone.
        // SAFETY: StreamIdFn is cuStreamGetId's C signature from cuda.h.
        stream_id: unsafe { symbol::<StreamIdFn>(library.library(), Api::Cuda, "cuStreamGetId") }
            .ok()
            .map(|function| Call { name: "cuStreamGetId", function }),
    };
    // SAFETY: EncodeTiledFn is cuTensorMapEncodeTiled's C signature from cuda.h.
    let encode_tiled = unsafe { symbol::<EncodeTiledFn>(library.library(), Api::Cuda, "cuTensorMapEncodeTiled") }.ok();
    let cuda = Cuda {
        functions,
        encode_tiled,
        shared,
        no_device: status == CUDA_ERROR_NO_DEVICE,
        primary_contexts: Mutex::new(HashMap::new()),
        library,
    };
    if !cuda.no_device {
        cuda.check("cuInit", status)?;
    }
    Ok(Box::new(cuda))
}

/// The build's target name of compute capability `major.minor` (9.0 -> `sm_90`).
pub(super) fn sm_name(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

type ErrorLookup = unsafe extern "C" fn(i32, *mut *const c_char) -> i32;

impl Cuda {
    /// The `CUdevice` of `ordinal`; when `cuInit` found no device, that status.
    fn device(&self, ordinal: i32) -> GpuResult<i32> {
        if self.no_device {
            self.check("cuInit", CUDA_ERROR_NO_DEVICE)?;
        }
        let mut device = 0;
        // SAFETY: `device` is a writable int; the driver validates the ordinal.
        self.check("cuDeviceGet", unsafe {
            (self.functions.cuDeviceGet)(&mut device, ordinal)
        })?;
        Ok(device)
    }

    /// Device `ordinal`'s primary context, retained on first use (not made current) and never
    /// released: the Driver lives as long as the process.
    fn primary_context(&self, ordinal: i32) -> GpuResult<usize> {
        let mut contexts = self.primary_contexts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&context) = contexts.get(&ordinal) {
            return Ok(context);
        }
        let device = self.device(ordinal)?;
        let mut context = std::ptr::null_mut();
        // SAFETY: `context` is a writable pointer; `device` came from cuDeviceGet.
        let status = unsafe { (self.functions.cuDevicePrimaryCtxRetain)(&mut context, device) };
        self.check("cuDevicePrimaryCtxRetain", status)?;
        Ok(*contexts.entry(ordinal).or_insert(context as usize))
    }

    fn attribute(&self, attribute: i32, ordinal: i32) -> GpuResult<i32> {
        let device = self.device(ordinal)?;
        let mut value = 0;
        // SAFETY: `value` is a writable int; the driver validates the attribute.
        let status =
            unsafe { (self.functions.cuDeviceGetAttribute)(&mut value, attribute, device) };
        self.check("cuDeviceGetAttribute", status)?;
        Ok(value)
    }

    fn lookup(lookup: ErrorLookup, status: i32) -> String {
        let mut text = std::ptr::null();
        // SAFETY: `text` is a writable pointer; the driver stores a static string in it.
        match unsafe { lookup(status, &mut text) } {
            0 => text_or_unknown(text),
            lookup_status => format!("not a status this driver knows (lookup: {lookup_status})"),
        }
    }
}

impl Backend for Cuda {
    fn api(&self) -> Api {
        Api::Cuda
    }

    fn shared(&self) -> &SharedCalls {
        &self.shared
    }

    fn library(&self) -> &str {
        self.library.description()
    }

    fn describe(&self, status: i32) -> (String, String) {
        let name = Self::lookup(self.functions.cuGetErrorName, status);
        (name, Self::lookup(self.functions.cuGetErrorString, status))
    }

    fn set_device(&self, ordinal: i32) -> GpuResult<()> {
        let context = self.primary_context(ordinal)?;
        // SAFETY: a primary context retained by `primary_context` and never released.
        self.check("cuCtxSetCurrent", unsafe {
            (self.functions.cuCtxSetCurrent)(context as Handle)
        })
    }

    fn device_count(&self) -> GpuResult<i32> {
        if self.no_device {
            return Ok(0);
        }
        let mut count = 0;
        // SAFETY: `count` is a writable int.
        match unsafe { (self.functions.cuDeviceGetCount)(&mut count) } {
            CUDA_ERROR_NO_DEVICE => Ok(0),
            status => self.check("cuDeviceGetCount", status).map(|()| count),
        }
    }

    fn multiprocessor_count(&self, ordinal: i32) -> GpuResult<i32> {
        self.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal)
    }

    fn arch_name(&self, ordinal: i32) -> GpuResult<String> {
        let major = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal)?;
        let minor = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ordinal)?;
        Ok(sm_name(major, minor))
    }

    fn device_limits(&self, ordinal: i32) -> GpuResult<DeviceLimits> {
        let shared = self.attribute(
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            ordinal,
        )?;
        let threads = self.attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, ordinal)?;
        let atomics = self.attribute(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, ordinal)?;
        device_limits_from_attributes(Api::Cuda, "cuDeviceGetAttribute", shared, threads, atomics)
    }

    fn allow_shared(&self, function: Handle, bytes: u32) -> GpuResult<()> {
        if bytes <= DEFAULT_DYNAMIC_SHARED_LIMIT {
            return Ok(());
        }
        // Beyond i32 the driver refuses the value itself (CUDA_ERROR_INVALID_VALUE).
        let value = i32::try_from(bytes).unwrap_or(i32::MAX);
        let attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `function` is a kernel of a live module; the driver validates the value.
        let status = unsafe { (self.functions.cuFuncSetAttribute)(function, attribute, value) };
        self.check("cuFuncSetAttribute", status)
    }

    fn malloc(&self, bytes: usize) -> GpuResult<usize> {
        let mut addr: DevicePtr = 0;
        // SAFETY: `addr` is a writable CUdeviceptr.
        self.check("cuMemAlloc_v2", unsafe {
            (self.functions.cuMemAlloc_v2)(&mut addr, bytes)
        })?;
        Ok(addr as usize)
    }

    fn free(&self, addr: usize) -> GpuResult<()> {
        // SAFETY: `addr` came from cuMemAlloc_v2 and is freed once (DeviceBuffer).
        self.check("cuMemFree_v2", unsafe {
            (self.functions.cuMemFree_v2)(addr as DevicePtr)
        })
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range; `src` is readable for its length.
        let status = unsafe {
            (self.functions.cuMemcpyHtoD_v2)(dst as DevicePtr, src.as_ptr().cast(), src.len())
        };
        self.check("cuMemcpyHtoD_v2", status)
    }

    unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, stream: usize) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range and the stream.
        let status = unsafe {
            (self.functions.cuMemsetD32Async)(addr as DevicePtr, value, count, stream as Handle)
        };
        self.check("cuMemsetD32Async", status)
    }

    fn encode_tensor_map(&self, view: &TiledView) -> GpuResult<TensorMap> {
        let Some(encode) = self.encode_tiled else {
            let message = "the CUDA driver has no cuTensorMapEncodeTiled (CUDA 12 or later has)".to_owned();
            return Err(GpuError::local(Api::Cuda, "cuTensorMapEncodeTiled", message));
        };
        let mut map = TensorMap::default();
        // Innermost dimension first.
        let dims = [view.cols, view.rows];
        let strides = [view.row_stride_bytes];
        let boxes = [view.box_cols, view.box_rows];
        let element_strides = [1u32, 1];
        let swizzle = match view.swizzle_bytes() {
            32 => SWIZZLE_32B,
            64 => SWIZZLE_64B,
            _ => SWIZZLE_128B,
        };
        // SAFETY: `map` is a writable, 64-byte aligned CUtensorMap; the arrays hold `rank` (2)
        // entries (strides rank - 1) and outlive the call, which only reads them; the address is
        // not dereferenced here (the kernel reads through the descriptor).
        let status = unsafe {
            encode(
                &mut map,
                view.element.cuda_enum(),
                2,
                view.base as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                INTERLEAVE_NONE,
                swizzle,
                L2_PROMOTION_128B,
                OOB_FILL_NONE,
            )
        };
        self.check("cuTensorMapEncodeTiled", status)?;
        Ok(map)
    }

    /// A thread with no current context starts on device 0 (its primary context), as a HIP
    /// thread does; any other status of `cuCtxGetDevice` is an error.
    fn current_device(&self) -> GpuResult<i32> {
        match self.current_device_if_any()? {
            Some(ordinal) => Ok(ordinal),
            None => self.set_device(0).map(|()| 0),
        }
    }

    fn current_device_if_any(&self) -> GpuResult<Option<i32>> {
        let mut ordinal = 0;
        // SAFETY: `ordinal` is a writable int.
        match unsafe { (self.functions.cuCtxGetDevice)(&mut ordinal) } {
            CUDA_ERROR_INVALID_CONTEXT => Ok(None),
            status => self.check("cuCtxGetDevice", status).map(|()| Some(ordinal)),
        }
    }

    fn clear_current_device(&self) -> GpuResult<()> {
        // SAFETY: a null context unbinds the thread's current context (the primary contexts
        // stay retained).
        self.check("cuCtxSetCurrent", unsafe { (self.functions.cuCtxSetCurrent)(std::ptr::null_mut()) })
    }

    unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range; `dst` is writable for its length.
        let status = unsafe {
            (self.functions.cuMemcpyDtoH_v2)(dst.as_mut_ptr().cast(), src as DevicePtr, dst.len())
        };
        self.check("cuMemcpyDtoH_v2", status)
    }

    /// Needs a current context on this thread (`set_device`), which the registration joins:
    /// portable makes it every context's, and unified addressing gives it one device address.
    unsafe fn register_mapped_host(&self, host: *mut c_void, bytes: usize) -> GpuResult<usize> {
        let flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller guarantees that the range is this process's memory for good.
        self.check("cuMemHostRegister_v2", unsafe { (self.functions.cuMemHostRegister_v2)(host, bytes, flags) })?;
        self.mapped_device_addr(host)
    }

    fn mapped_device_addr(&self, host: *mut c_void) -> GpuResult<usize> {
        let mut device: DevicePtr = 0;
        // SAFETY: `device` is a writable CUdeviceptr; the driver looks `host` up among the
        // registrations (an error for none) and never dereferences it; flags must be 0.
        let status = unsafe { (self.functions.cuMemHostGetDevicePointer_v2)(&mut device, host, 0) };
        self.check("cuMemHostGetDevicePointer_v2", status)?;
        Ok(device as usize)
    }

    /// The current context, whoever made it: ours (a primary context) or the caller's own.
    fn current_binding(&self) -> GpuResult<Binding> {
        let mut context = std::ptr::null_mut();
        // SAFETY: `context` is a writable pointer; nothing is created or bound.
        self.check("cuCtxGetCurrent", unsafe { (self.functions.cuCtxGetCurrent)(&mut context) })?;
        Ok(if context.is_null() { Binding::Nothing } else { Binding::Context(context as usize) })
    }

    /// Only device `ordinal`'s primary context is that device as this layer uses it: our
    /// modules live there, not in a context the caller made on the same device.
    fn binding_is_device(&self, binding: Binding, ordinal: i32) -> GpuResult<bool> {
        match binding {
            Binding::Context(context) => Ok(context == self.primary_context(ordinal)?),
            Binding::Nothing | Binding::Device(_) => Ok(false),
        }
    }

    fn restore_binding(&self, binding: Binding) -> GpuResult<()> {
        let context = match binding {
            Binding::Nothing => std::ptr::null_mut(),
            Binding::Context(context) => context as Handle,
            Binding::Device(ordinal) => self.primary_context(ordinal)? as Handle,
        };
        // SAFETY: a context that was current on this thread when `binding` was taken (the
        // caller keeps its own contexts alive while it calls us), a retained primary context,
        // or null, which unbinds.
        self.check("cuCtxSetCurrent", unsafe { (self.functions.cuCtxSetCurrent)(context) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sm_names_from_compute_capabilities() {
        assert_eq!(sm_name(9, 0), "sm_90");
        assert_eq!(sm_name(8, 6), "sm_86");
        assert_eq!(sm_name(10, 0), "sm_100");
    }
}
