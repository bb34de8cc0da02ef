//! HIP (AMD): `libamdhip64` loaded at run time.
//!
//! The numbers below are ABI facts of HIP 6.x/7.x, measured with `offsetof`/`sizeof` and the
//! enum values themselves by compiling a C program against Debian sid's `libamdhip64-dev`
//! 6.4.3 (`HIP_VERSION` 6.4.43484, x86-64, gcc and clang-21; `scripts/rocm-chroot.sh`), and
//! matching a count by hand in ROCm/HIP's `include/hip/hip_runtime_api.h` (develop of October
//! 2024, c5e11fc). [`HIP_HEADER_CHECK`] asserts them against a header. The physical
//! multiprocessor count attribute and the host allocation flags are the values of ROCm's
//! `hip_runtime_api.h` (HIP 6.x and the 7.x headers of ROCm/rocm-systems), added to the check.
//! The device limit attributes (threads 56, shared memory 74, host-native atomics 15) were
//! printed by a C program compiled against `hipDeviceAttribute_t` of ROCm/HIP at rocm-6.0.0,
//! rocm-6.2.2 and c5e11fc, and of HIP 7.1.25424 (the headers triton 3.6 ships).

use std::ffi::{c_char, c_void};

use super::compute_units::{compute_units, wgp_mode_from_environment};
use super::library::{self, Candidates, DriverLibrary};
use super::loader::{driver_functions, symbol};
use super::{
    call, device_limits_from_attributes, text_or_unknown, Api, Backend, Call, DeviceLimits,
    GpuError, GpuResult, Handle, SharedCalls, StreamIdFn,
};

/// Where the HIP runtime is looked for. The versioned sonames are what a program linked against
/// ROCm carries in its `DT_NEEDED`, so the no-load pass finds the runtime it uses; loading
/// prefers `libamdhip64.so`, the installation's default, as before.
const CANDIDATES: Candidates = Candidates {
    already_loaded: &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"],
    to_load: &["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"],
    probe_symbol: "hipGetErrorName",
};

/// `hipHostRegisterPortable`: the registration belongs to every device.
const HIP_HOST_REGISTER_PORTABLE: u32 = 0x1;
/// `hipHostRegisterMapped`: kernels reach the memory through `hipHostGetDevicePointer`. Without
/// `hipExtHostRegisterCoarseGrained` the registration is fine-grained, so device writes reach the
/// host while kernels run.
const HIP_HOST_REGISTER_MAPPED: u32 = 0x2;

/// `hipErrorNoDevice`.
const HIP_ERROR_NO_DEVICE: i32 = 100;
/// `hipDeviceAttributeMultiprocessorCount` in HIP 6's renumbered `hipDeviceAttribute_t` (HIP 5
/// numbered the attributes differently).
const HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: i32 = 63;
/// `hipDeviceAttributePhysicalMultiProcessorCount`, in the AMD-specific block of
/// `hipDeviceAttribute_t` that starts at 10000.
const HIP_DEVICE_ATTRIBUTE_PHYSICAL_MULTIPROCESSOR_COUNT: i32 = 10015;
/// `hipDeviceAttributeMaxThreadsPerBlock`.
const HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 56;
/// `hipDeviceAttributeMaxSharedMemoryPerBlock`: the LDS of a workgroup, which ROCm's clr reports
/// in every HIP 6/7 (`sharedMemPerBlock`). Not `hipDeviceAttributeSharedMemPerBlockOptin` (75):
/// the header marks it CUDA only, and some clr releases answer 0 for it.
const HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: i32 = 74;
/// `hipDeviceAttributeHostNativeAtomicSupported`.
const HIP_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: i32 = 15;
/// Byte offset of `char gcnArchName[256]` in `hipDeviceProp_tR0600` on x86-64.
pub const HIP_GCN_ARCH_NAME_OFFSET: usize = 1160;
/// `sizeof(hipDeviceProp_tR0600)` on x86-64.
pub const HIP_DEVICE_PROP_R0600_SIZE: usize = 1472;
const GCN_ARCH_NAME_LEN: usize = 256;
/// What `hipGetDevicePropertiesR0600` writes into: far larger than the struct, so that a later
/// HIP that grows it still writes inside this buffer; u64 elements give its 8-byte alignment.
const PROPERTIES_BUFFER_WORDS: usize = 1024;

// The name lies inside the struct, and the buffer leaves room for a struct grown fourfold.
const _: () = assert!(HIP_GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN <= HIP_DEVICE_PROP_R0600_SIZE);
const _: () = assert!(HIP_DEVICE_PROP_R0600_SIZE * 4 <= PROPERTIES_BUFFER_WORDS * 8);

/// A C program asserting this module's ABI numbers against a HIP header, for CI:
/// `cc -D__HIP_PLATFORM_AMD__ -fsyntax-only -x c -` with this text on stdin.
pub const HIP_HEADER_CHECK: &str = "#include <stddef.h>
#include <hip/hip_runtime_api.h>
_Static_assert(offsetof(hipDeviceProp_tR0600, gcnArchName) == 1160, \"gcnArchName offset\");
_Static_assert(sizeof(((hipDeviceProp_tR0600 *)0)->gcnArchName) == 256, \"gcnArchName size\");
_Static_assert(sizeof(hipDeviceProp_tR0600) == 1472, \"hipDeviceProp_tR0600 size\");
_Static_assert(hipDeviceAttributeMultiprocessorCount == 63, \"multiprocessor count attribute\");
_Static_assert(hipDeviceAttributePhysicalMultiProcessorCount == 10015, \"physical count attribute\");
_Static_assert(hipDeviceAttributeMaxThreadsPerBlock == 56, \"max threads per block attribute\");
_Static_assert(hipDeviceAttributeMaxSharedMemoryPerBlock == 74, \"max shared memory per block attribute\");
_Static_assert(hipDeviceAttributeHostNativeAtomicSupported == 15, \"host native atomics attribute\");
_Static_assert(hipErrorNoDevice == 100, \"hipErrorNoDevice\");
_Static_assert(hipHostRegisterPortable == 0x1, \"hipHostRegisterPortable\");
_Static_assert(hipHostRegisterMapped == 0x2, \"hipHostRegisterMapped\");
";

driver_functions! {
    /// The HIP functions this layer calls, with their C signatures (`hipError_t` is an int
    /// enum; `hipModule_t`, `hipFunction_t`, `hipStream_t` and `hipDeviceptr_t` are pointers).
    struct HipFunctions {
        hipSetDevice: fn(i32) -> i32;
        hipGetDevice: fn(*mut i32) -> i32;
        hipGetDeviceCount: fn(*mut i32) -> i32;
        hipDeviceGetAttribute: fn(*mut i32, i32, i32) -> i32;
        hipGetDevicePropertiesR0600: fn(*mut c_void, i32) -> i32;
        hipModuleLoadData: fn(*mut Handle, *const c_void) -> i32;
        hipModuleUnload: fn(Handle) -> i32;
        hipModuleGetFunction: fn(*mut Handle, Handle, *const c_char) -> i32;
        hipModuleLaunchKernel: fn(Handle, u32, u32, u32, u32, u32, u32, u32, Handle,
                                  *mut *mut c_void, *mut *mut c_void) -> i32;
        hipMalloc: fn(*mut Handle, usize) -> i32;
        hipFree: fn(Handle) -> i32;
        hipMemcpyHtoD: fn(Handle, *const c_void, usize) -> i32;
        hipMemcpyDtoH: fn(*mut c_void, Handle, usize) -> i32;
        hipMemsetD32Async: fn(Handle, i32, usize, Handle) -> i32;
        hipHostRegister: fn(*mut c_void, usize, u32) -> i32;
        hipHostGetDevicePointer: fn(*mut Handle, *mut c_void, u32) -> i32;
        hipDeviceSynchronize: fn() -> i32;
        hipGetErrorName: fn(i32) -> *const c_char;
        hipGetErrorString: fn(i32) -> *const c_char;
    }
}

struct Hip {
    functions: HipFunctions,
    shared: SharedCalls,
    /// Keeps the function pointers valid; never unloaded (the Driver is never dropped).
    library: DriverLibrary,
}

/// Finds or loads the HIP runtime and resolves its functions.
pub(super) fn open() -> GpuResult<Box<dyn Backend>> {
    let library = library::open(Api::Hip, &CANDIDATES)?;
    // SAFETY: the table declares each function with its C signature from hip_runtime_api.h.
    let functions = unsafe { HipFunctions::resolve(library.library(), Api::Hip) }?;
    let shared = SharedCalls {
        current_device: call!(functions.hipGetDevice),
        synchronize: call!(functions.hipDeviceSynchronize),
        load_module: call!(functions.hipModuleLoadData),
        unload_module: functions.hipModuleUnload,
        get_function: call!(functions.hipModuleGetFunction),
        launch: call!(functions.hipModuleLaunchKernel),
        // HIP 7's; absent from HIP 6.
        // SAFETY: StreamIdFn is hipStreamGetId's C signature from HIP 7's hip_runtime_api.h.
        stream_id: unsafe { symbol::<StreamIdFn>(library.library(), Api::Hip, "hipStreamGetId") }
            .ok()
            .map(|function| Call { name: "hipStreamGetId", function }),
    };
    Ok(Box::new(Hip {
        functions,
        shared,
        library,
    }))
}

/// The build's target name from `gcnArchName`: up to the NUL, without the `:feature±` suffixes
/// (`gfx90a:sramecc+:xnack-` -> `gfx90a`).
pub(super) fn target_from_gcn_arch_name(raw: &[u8]) -> String {
    let end = raw.iter().position(|&byte| byte == 0).unwrap_or(raw.len());
    let name = String::from_utf8_lossy(&raw[..end]);
    name.split(':').next().unwrap_or_default().to_owned()
}

impl Hip {
    fn attribute(&self, attribute: i32, ordinal: i32) -> GpuResult<i32> {
        let mut value = 0;
        // SAFETY: `value` is a writable int; the driver validates the attribute and ordinal.
        let status =
            unsafe { (self.functions.hipDeviceGetAttribute)(&mut value, attribute, ordinal) };
        self.check("hipDeviceGetAttribute", status)?;
        Ok(value)
    }
}

impl Backend for Hip {
    fn api(&self) -> Api {
        Api::Hip
    }

    fn shared(&self) -> &SharedCalls {
        &self.shared
    }

    fn library(&self) -> &str {
        self.library.description()
    }

    fn describe(&self, status: i32) -> (String, String) {
        // SAFETY: both take any status and return a static string (or null).
        let (name, description) = unsafe {
            (
                (self.functions.hipGetErrorName)(status),
                (self.functions.hipGetErrorString)(status),
            )
        };
        (text_or_unknown(name), text_or_unknown(description))
    }

    fn set_device(&self, ordinal: i32) -> GpuResult<()> {
        // SAFETY: plain value argument, validated by the driver.
        self.check("hipSetDevice", unsafe {
            (self.functions.hipSetDevice)(ordinal)
        })
    }

    fn device_count(&self) -> GpuResult<i32> {
        let mut count = 0;
        // SAFETY: `count` is a writable int.
        match unsafe { (self.functions.hipGetDeviceCount)(&mut count) } {
            HIP_ERROR_NO_DEVICE => Ok(0),
            status => self.check("hipGetDeviceCount", status).map(|()| count),
        }
    }

    fn multiprocessor_count(&self, ordinal: i32) -> GpuResult<i32> {
        let multiprocessors = self.attribute(HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal)?;
        // Every HIP 6/7 answers this AMD attribute; a runtime that refuses it still has the
        // multiprocessor count, so the refusal is not an error here.
        let physical = self
            .attribute(HIP_DEVICE_ATTRIBUTE_PHYSICAL_MULTIPROCESSOR_COUNT, ordinal)
            .ok();
        let arch = self.arch_name(ordinal)?;
        Ok(compute_units(
            &arch,
            multiprocessors,
            physical,
            wgp_mode_from_environment(),
        ))
    }

    fn arch_name(&self, ordinal: i32) -> GpuResult<String> {
        let mut properties = vec![0u64; PROPERTIES_BUFFER_WORDS];
        // SAFETY: the buffer is 8-aligned and several times sizeof(hipDeviceProp_tR0600).
        let status = unsafe {
            (self.functions.hipGetDevicePropertiesR0600)(properties.as_mut_ptr().cast(), ordinal)
        };
        self.check("hipGetDevicePropertiesR0600", status)?;
        // SAFETY: a u64 slice viewed as its bytes: same memory, alignment 1, no padding.
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(properties.as_ptr().cast(), properties.len() * 8) };
        let raw = &bytes[HIP_GCN_ARCH_NAME_OFFSET..HIP_GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN];
        let target = target_from_gcn_arch_name(raw);
        // A layout other than the measured one would read another field: say so, rather than
        // look for kernels of a nonsense target.
        if !target.starts_with("gfx") {
            let message = format!(
                "gcnArchName at byte {HIP_GCN_ARCH_NAME_OFFSET} reads {target:?}, not a gfx target: \
                 this HIP's hipDeviceProp_tR0600 layout differs from HIP 6.x/7.x's ({})",
                self.library()
            );
            return Err(GpuError::local(
                Api::Hip,
                "hipGetDevicePropertiesR0600",
                message,
            ));
        }
        Ok(target)
    }

    fn device_limits(&self, ordinal: i32) -> GpuResult<DeviceLimits> {
        let shared = self.attribute(HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, ordinal)?;
        let threads = self.attribute(HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, ordinal)?;
        let atomics = self.attribute(HIP_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, ordinal)?;
        device_limits_from_attributes(Api::Hip, "hipDeviceGetAttribute", shared, threads, atomics)
    }

    fn allow_shared(&self, _function: Handle, _bytes: u32) -> GpuResult<()> {
        // hipModuleLaunchKernel checks the dynamic LDS size against the device's LDS alone, never
        // against a per-kernel limit; and hipFuncSetAttribute looks its argument up among the
        // host program's registered kernels, so ROCm/clr of late 2024 answers
        // hipErrorInvalidSymbol for a module kernel (hipamd/src/hip_module.cpp). Nothing to allow.
        Ok(())
    }

    fn malloc(&self, bytes: usize) -> GpuResult<usize> {
        let mut addr = std::ptr::null_mut();
        // SAFETY: `addr` is a writable pointer.
        self.check("hipMalloc", unsafe {
            (self.functions.hipMalloc)(&mut addr, bytes)
        })?;
        Ok(addr as usize)
    }

    fn free(&self, addr: usize) -> GpuResult<()> {
        // SAFETY: `addr` came from hipMalloc and is freed once (DeviceBuffer).
        self.check("hipFree", unsafe {
            (self.functions.hipFree)(addr as Handle)
        })
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range; `src` is readable for its length.
        let status = unsafe {
            (self.functions.hipMemcpyHtoD)(dst as Handle, src.as_ptr().cast(), src.len())
        };
        self.check("hipMemcpyHtoD", status)
    }

    unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, stream: usize) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range and the stream; the int takes the
        // word's bits unchanged.
        let status = unsafe {
            (self.functions.hipMemsetD32Async)(addr as Handle, value as i32, count, stream as Handle)
        };
        self.check("hipMemsetD32Async", status)
    }

    unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> GpuResult<()> {
        // SAFETY: the caller guarantees the device range; `dst` is writable for its length.
        let status = unsafe {
            (self.functions.hipMemcpyDtoH)(dst.as_mut_ptr().cast(), src as Handle, dst.len())
        };
        self.check("hipMemcpyDtoH", status)
    }

    unsafe fn register_mapped_host(&self, host: *mut c_void, bytes: usize) -> GpuResult<usize> {
        let flags = HIP_HOST_REGISTER_MAPPED | HIP_HOST_REGISTER_PORTABLE;
        // SAFETY: the caller guarantees that the range is this process's memory for good.
        self.check("hipHostRegister", unsafe { (self.functions.hipHostRegister)(host, bytes, flags) })?;
        self.mapped_device_addr(host)
    }

    fn mapped_device_addr(&self, host: *mut c_void) -> GpuResult<usize> {
        let mut device = std::ptr::null_mut();
        // SAFETY: `device` is a writable pointer; the driver looks `host` up among its
        // registrations (an error for none) and never dereferences it; flags must be 0.
        let status = unsafe { (self.functions.hipHostGetDevicePointer)(&mut device, host, 0) };
        self.check("hipHostGetDevicePointer", status)?;
        Ok(device as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_drop_feature_suffixes_and_stop_at_nul() {
        let mut raw = [0u8; GCN_ARCH_NAME_LEN];
        raw[..22].copy_from_slice(b"gfx90a:sramecc+:xnack-");
        assert_eq!(target_from_gcn_arch_name(&raw), "gfx90a");
        assert_eq!(
            target_from_gcn_arch_name(b"gfx942:sramecc+:xnack-\0garbage"),
            "gfx942"
        );
        assert_eq!(target_from_gcn_arch_name(b"gfx1100\0\0\0"), "gfx1100");
        assert_eq!(target_from_gcn_arch_name(b"gfx950"), "gfx950");
        assert_eq!(target_from_gcn_arch_name(&[0u8; 8]), "");
    }

    #[test]
    fn the_header_check_asserts_the_constants_in_use() {
        let offset = format!("gcnArchName) == {HIP_GCN_ARCH_NAME_OFFSET},");
        let size = format!("sizeof(hipDeviceProp_tR0600) == {HIP_DEVICE_PROP_R0600_SIZE},");
        let attribute =
            format!("MultiprocessorCount == {HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},");
        let physical = format!(
            "PhysicalMultiProcessorCount == {HIP_DEVICE_ATTRIBUTE_PHYSICAL_MULTIPROCESSOR_COUNT},"
        );
        let threads =
            format!("MaxThreadsPerBlock == {HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},");
        let shared = format!(
            "MaxSharedMemoryPerBlock == {HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},"
        );
        let atomics = format!(
            "HostNativeAtomicSupported == {HIP_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED},"
        );
        let no_device = format!("hipErrorNoDevice == {HIP_ERROR_NO_DEVICE},");
        let portable = format!("hipHostRegisterPortable == {HIP_HOST_REGISTER_PORTABLE:#x},");
        let mapped = format!("hipHostRegisterMapped == {HIP_HOST_REGISTER_MAPPED:#x},");
        for needle in [
            offset, size, attribute, physical, threads, shared, atomics, no_device, portable,
            mapped,
        ] {
            assert!(HIP_HEADER_CHECK.contains(&needle), "{needle}");
        }
    }
}
