//! Memory: device allocations are 256-byte aligned host memory, host allocations are host
//! memory whose device pointer is itself; copies and fills run at once, whatever the stream.
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::errors::{code, fail, ok};
use crate::Handle;

/// What hipMalloc aligns to, at least.
const ALIGN: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Device,
    /// Pinned host memory; `mapped`: a kernel may reach it (hipHostGetDevicePointer).
    Host { mapped: bool },
    /// The caller's own memory, registered (hipHostRegister): never freed here.
    Registered { mapped: bool },
}

struct Allocation {
    bytes: usize,
    kind: Kind,
}

/// Live allocations by start address.
fn allocations() -> MutexGuard<'static, BTreeMap<usize, Allocation>> {
    static ALLOCATIONS: OnceLock<Mutex<BTreeMap<usize, Allocation>>> = OnceLock::new();
    ALLOCATIONS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn layout(bytes: usize) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(bytes.max(1), ALIGN).ok()
}

/// A zeroed allocation (fresh device memory is not zero on a GPU; zero here keeps runs
/// repeatable, and the crate's tests fill what they read).
fn allocate(call: &str, out: *mut Handle, bytes: usize, kind: Kind) -> i32 {
    if out.is_null() {
        return fail(code::invalid_value(), call, "null result pointer");
    }
    if bytes == 0 {
        // SAFETY: `out` is non-null and writable (the caller's pointer variable).
        unsafe { *out = std::ptr::null_mut() };
        return ok();
    }
    let Some(layout) = layout(bytes) else {
        return fail(code::out_of_memory(), call, format!("{bytes} bytes"));
    };
    // SAFETY: the layout has a non-zero size.
    let addr = unsafe { std::alloc::alloc_zeroed(layout) };
    if addr.is_null() {
        return fail(code::out_of_memory(), call, format!("{bytes} bytes of host memory"));
    }
    allocations().insert(addr as usize, Allocation { bytes, kind });
    // SAFETY: as above.
    unsafe { *out = addr.cast() };
    ok()
}

fn release(call: &str, addr: Handle, host: bool) -> i32 {
    if addr.is_null() {
        return ok();
    }
    let mut live = allocations();
    let kind_matches = live.get(&(addr as usize)).map(|a| matches!(a.kind, Kind::Host { .. }) == host);
    match kind_matches {
        Some(true) => {
            let allocation = live.remove(&(addr as usize)).expect("present");
            // SAFETY: allocated by `allocate` with this layout, removed from the map once.
            unsafe { std::alloc::dealloc(addr.cast(), layout(allocation.bytes).expect("was valid")) };
            ok()
        }
        Some(false) => fail(code::invalid_value(), call, format!("{addr:?} is a {} allocation", if host { "device" } else { "host" })),
        None => fail(code::invalid_value(), call, format!("{addr:?} is not the start of an allocation")),
    }
}

/// The allocation holding `addr`, if any: (start, bytes, kind).
fn containing(addr: usize) -> Option<(usize, usize, Kind)> {
    let live = allocations();
    let (&start, allocation) = live.range(..=addr).next_back()?;
    (addr < start + allocation.bytes).then_some((start, allocation.bytes, allocation.kind))
}

#[no_mangle]
pub unsafe extern "C" fn hipMalloc(out: *mut Handle, bytes: usize) -> i32 {
    allocate("hipMalloc", out, bytes, Kind::Device)
}

#[no_mangle]
pub unsafe extern "C" fn hipMallocAsync(out: *mut Handle, bytes: usize, _stream: Handle) -> i32 {
    allocate("hipMallocAsync", out, bytes, Kind::Device)
}

#[no_mangle]
pub unsafe extern "C" fn hipFree(addr: Handle) -> i32 {
    release("hipFree", addr, false)
}

#[no_mangle]
pub unsafe extern "C" fn hipFreeAsync(addr: Handle, _stream: Handle) -> i32 {
    release("hipFreeAsync", addr, false)
}

/// The host allocations of HIP 6: every flag combination clr takes (mapped or not; coherent
/// and non-coherent are exclusive). HIP 6.4 as Debian builds it has no `hipExtHostAlloc` (the
/// name ROCm 6.3+ adds), so the stand-in has none either, and the crate takes `hipHostMalloc`.
fn host_alloc(call: &str, out: *mut Handle, bytes: usize, flags: u32) -> i32 {
    extern "C" {
        static standin_hipHostMallocMapped: u32;
        static standin_hipHostMallocPortable: u32;
        static standin_hipHostMallocCoherent: u32;
        static standin_hipHostMallocNonCoherent: u32;
        static standin_hipHostMallocWriteCombined: u32;
        static standin_hipHostMallocNumaUser: u32;
    }
    // SAFETY: `const unsigned` values of abi.c.
    let (mapped, portable, coherent, non_coherent, write_combined, numa) = unsafe {
        (
            standin_hipHostMallocMapped,
            standin_hipHostMallocPortable,
            standin_hipHostMallocCoherent,
            standin_hipHostMallocNonCoherent,
            standin_hipHostMallocWriteCombined,
            standin_hipHostMallocNumaUser,
        )
    };
    let known = mapped | portable | coherent | non_coherent | write_combined | numa;
    if flags & !known != 0 || (flags & coherent != 0 && flags & non_coherent != 0) {
        return fail(code::invalid_value(), call, format!("flags {flags:#x}"));
    }
    // clr maps every pinned host allocation into the device's address space.
    allocate(call, out, bytes, Kind::Host { mapped: true })
}

#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(out: *mut Handle, bytes: usize, flags: u32) -> i32 {
    host_alloc("hipHostMalloc", out, bytes, flags)
}

#[no_mangle]
pub unsafe extern "C" fn hipHostFree(addr: Handle) -> i32 {
    release("hipHostFree", addr, true)
}

#[no_mangle]
pub unsafe extern "C" fn hipFreeHost(addr: Handle) -> i32 {
    release("hipFreeHost", addr, true)
}

/// Registers the caller's `bytes` at `host` (hipHostRegister): its device pointer is itself. A
/// range that overlaps an allocation or another registration is refused, as clr refuses it.
#[no_mangle]
pub unsafe extern "C" fn hipHostRegister(host: Handle, bytes: usize, flags: u32) -> i32 {
    let call = "hipHostRegister";
    extern "C" {
        static standin_hipHostRegisterPortable: u32;
        static standin_hipHostRegisterMapped: u32;
        static standin_hipExtHostRegisterCoarseGrained: u32;
    }
    // SAFETY: `const unsigned` values of abi.c.
    let (portable, mapped, coarse) =
        unsafe { (standin_hipHostRegisterPortable, standin_hipHostRegisterMapped, standin_hipExtHostRegisterCoarseGrained) };
    if host.is_null() || bytes == 0 || flags & !(portable | mapped | coarse) != 0 {
        return fail(code::invalid_value(), call, format!("{host:?}, {bytes} bytes, flags {flags:#x}"));
    }
    let (start, end) = (host as usize, host as usize + bytes);
    let mut live = allocations();
    let overlaps = live.range(..end).next_back().is_some_and(|(&s, a)| s + a.bytes > start);
    if overlaps {
        return fail(code::host_memory_already_registered(), call, format!("{host:?} + {bytes} overlaps a live allocation or registration"));
    }
    // hipHostRegisterDefault (0) is mapped and portable too (hip_runtime_api.h).
    live.insert(start, Allocation { bytes, kind: Kind::Registered { mapped: true } });
    ok()
}

/// Undoes a registration made by [`hipHostRegister`].
#[no_mangle]
pub unsafe extern "C" fn hipHostUnregister(host: Handle) -> i32 {
    let mut live = allocations();
    match live.get(&(host as usize)).map(|a| a.kind) {
        Some(Kind::Registered { .. }) => {
            live.remove(&(host as usize));
            ok()
        }
        _ => fail(code::host_memory_not_registered(), "hipHostUnregister", format!("{host:?} is not a registration's start")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipHostGetDevicePointer(device: *mut Handle, host: Handle, flags: u32) -> i32 {
    let call = "hipHostGetDevicePointer";
    if device.is_null() || flags != 0 {
        return fail(code::invalid_value(), call, format!("result {device:?}, flags {flags:#x} (must be 0)"));
    }
    match containing(host as usize) {
        Some((_, _, Kind::Host { mapped: true } | Kind::Registered { mapped: true })) => {
            // SAFETY: non-null, the caller's writable pointer variable.
            unsafe { *device = host };
            ok()
        }
        _ => fail(code::invalid_value(), call, format!("{host:?} is not in a mapped host allocation")),
    }
}

/// Copies `bytes` from `src` to `dst`: every address is a host address. Ranges are checked
/// against the allocations where they claim to be device memory.
fn copy(call: &str, dst: *mut c_void, src: *const c_void, bytes: usize) -> i32 {
    if bytes == 0 {
        return ok();
    }
    if dst.is_null() || src.is_null() {
        return fail(code::invalid_value(), call, format!("dst {dst:?}, src {src:?}"));
    }
    // SAFETY: the caller guarantees both ranges (HIP's own contract); they may overlap in a
    // device-to-device copy, which `copy` allows.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), bytes) };
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, _kind: i32) -> i32 {
    copy("hipMemcpy", dst, src, bytes)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyAsync(dst: *mut c_void, src: *const c_void, bytes: usize, _kind: i32, _stream: Handle) -> i32 {
    copy("hipMemcpyAsync", dst, src, bytes)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: Handle, src: *const c_void, bytes: usize) -> i32 {
    device_range("hipMemcpyHtoD", dst, bytes).unwrap_or_else(|| copy("hipMemcpyHtoD", dst, src, bytes))
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: Handle, bytes: usize) -> i32 {
    device_range("hipMemcpyDtoH", src, bytes).unwrap_or_else(|| copy("hipMemcpyDtoH", dst, src, bytes))
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoD(dst: Handle, src: Handle, bytes: usize) -> i32 {
    device_range("hipMemcpyDtoD", src, bytes)
        .or_else(|| device_range("hipMemcpyDtoD", dst, bytes))
        .unwrap_or_else(|| copy("hipMemcpyDtoD", dst, src, bytes))
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(dst: Handle, src: *const c_void, bytes: usize, _stream: Handle) -> i32 {
    // SAFETY: forwarded with the caller's contract.
    unsafe { hipMemcpyHtoD(dst, src, bytes) }
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(dst: *mut c_void, src: Handle, bytes: usize, _stream: Handle) -> i32 {
    // SAFETY: forwarded with the caller's contract.
    unsafe { hipMemcpyDtoH(dst, src, bytes) }
}

#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoDAsync(dst: Handle, src: Handle, bytes: usize, _stream: Handle) -> i32 {
    // SAFETY: forwarded with the caller's contract.
    unsafe { hipMemcpyDtoD(dst, src, bytes) }
}

/// `None` when `addr..addr+bytes` lies inside one allocation (device or mapped host memory, both
/// of which a device address may name); else the failure, recorded.
fn device_range(call: &str, addr: Handle, bytes: usize) -> Option<i32> {
    match containing(addr as usize) {
        Some((start, size, _)) if addr as usize + bytes <= start + size => None,
        Some((start, size, _)) => Some(fail(
            code::invalid_value(),
            call,
            format!("{bytes} bytes at {addr:?} pass the end of the allocation {start:#x} + {size}"),
        )),
        None => Some(fail(code::invalid_value(), call, format!("{addr:?} is not in an allocation"))),
    }
}

/// Fills `count` elements of `width` bytes at `dst` with the low bytes of `value`.
fn fill(call: &str, dst: Handle, value: u32, width: usize, count: usize) -> i32 {
    if let Some(failure) = device_range(call, dst, width * count) {
        return failure;
    }
    let bytes = value.to_le_bytes();
    for i in 0..count {
        // SAFETY: the range lies in one live allocation (checked); unaligned writes are fine.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>().add(i * width), width) };
    }
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipMemset(dst: Handle, value: i32, bytes: usize) -> i32 {
    fill("hipMemset", dst, value as u32, 1, bytes)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetAsync(dst: Handle, value: i32, bytes: usize, _stream: Handle) -> i32 {
    fill("hipMemsetAsync", dst, value as u32, 1, bytes)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD8(dst: Handle, value: u8, count: usize) -> i32 {
    fill("hipMemsetD8", dst, value.into(), 1, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD16(dst: Handle, value: u16, count: usize) -> i32 {
    fill("hipMemsetD16", dst, value.into(), 2, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD32(dst: Handle, value: i32, count: usize) -> i32 {
    fill("hipMemsetD32", dst, value as u32, 4, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD8Async(dst: Handle, value: u8, count: usize, _stream: Handle) -> i32 {
    fill("hipMemsetD8Async", dst, value.into(), 1, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD16Async(dst: Handle, value: u16, count: usize, _stream: Handle) -> i32 {
    fill("hipMemsetD16Async", dst, value.into(), 2, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemsetD32Async(dst: Handle, value: i32, count: usize, _stream: Handle) -> i32 {
    fill("hipMemsetD32Async", dst, value as u32, 4, count)
}

#[no_mangle]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> i32 {
    let Ok((_, device)) = crate::devices::current() else {
        return fail(code::no_device(), "hipMemGetInfo", "no device");
    };
    if free.is_null() || total.is_null() {
        return fail(code::invalid_value(), "hipMemGetInfo", "null result");
    }
    let used: usize = allocations().values().filter(|a| a.kind == Kind::Device).map(|a| a.bytes).sum();
    let memory = device.global_memory();
    // SAFETY: both non-null, the caller's writable variables.
    unsafe {
        *total = memory;
        *free = memory.saturating_sub(used);
    }
    ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_zeroed_and_checked() {
        let mut a: Handle = std::ptr::null_mut();
        // SAFETY (this test's calls): the stand-in's own functions on its own allocations.
        unsafe {
            assert_eq!(hipMalloc(&mut a, 1000), code::success());
            assert_eq!(a as usize % ALIGN, 0);
            let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
            assert_eq!(hipMemcpyHtoD(a, data.as_ptr().cast(), 1000), code::success());
            assert_eq!(hipMemsetD32Async(a, -1, 2, std::ptr::null_mut()), code::success());
            let mut back = vec![0u8; 1000];
            assert_eq!(hipMemcpyDtoH(back.as_mut_ptr().cast(), a, 1000), code::success());
            assert_eq!(&back[..8], &[0xff; 8]);
            assert_eq!(&back[8..], &data[8..]);
            // Past the end, and not an allocation at all.
            assert_eq!(hipMemcpyHtoD(a.cast::<u8>().add(999).cast(), data.as_ptr().cast(), 2), code::invalid_value());
            assert_eq!(hipMemsetD32(data.as_ptr() as Handle, 0, 1), code::invalid_value());
            assert_eq!(hipFree(a), code::success());
            assert_eq!(hipFree(a), code::invalid_value(), "a second free");
        }
    }

    #[test]
    fn host_memory_is_mapped_to_itself() {
        let mut host: Handle = std::ptr::null_mut();
        let mut device: Handle = std::ptr::null_mut();
        // SAFETY (this test's calls): the stand-in's own functions on its own allocations.
        unsafe {
            assert_eq!(hipHostMalloc(&mut host, 64, 0x2 | 0x1 | 0x4000_0000), code::success());
            assert_eq!(hipHostGetDevicePointer(&mut device, host.cast::<u8>().add(8).cast(), 0), code::success());
            assert_eq!(device as usize, host as usize + 8);
            assert_eq!(hipHostGetDevicePointer(&mut device, host, 1), code::invalid_value(), "flags must be 0");
            assert_eq!(hipFree(host), code::invalid_value(), "hipFree of host memory");
            assert_eq!(hipHostFree(host), code::success());
        }
    }
}
