//! The emulated devices: which parts (`HIP_STANDIN_DEVICES`), the calling thread's current
//! device, and what HIP reports about them.
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

use crate::errors::{code, fail, ok};

/// The variable that lists the devices, by arch, in ordinal order.
pub const DEVICES_VAR: &str = "HIP_STANDIN_DEVICES";
/// Overrides every device's compute units (a smaller part of the same arch: fewer key splits).
pub const COMPUTE_UNITS_VAR: &str = "HIP_STANDIN_COMPUTE_UNITS";
const DEFAULT_DEVICES: &str = "gfx942";

/// One AMD part, as its datasheet and clr describe it.
struct Part {
    arch: &'static str,
    gcn_arch_name: &'static str,
    marketing_name: &'static str,
    compute_units: i32,
    wave_size: i32,
    /// Waves a compute unit holds at once (CDNA: 8 per SIMD; RDNA: 16 per SIMD32, 2 SIMDs).
    max_waves_per_cu: i32,
    lds_per_cu_kib: i32,
    clock_mhz: i32,
    memory_clock_mhz: i32,
    memory_bus_width: i32,
    l2_mib: i32,
    memory_gib: usize,
}

/// CDNA (gfx9): 64 KiB of LDS per CU and per work-group; RDNA: 64 KiB per work-group, 128 KiB
/// per work-group processor (two CUs).
const PARTS: [Part; 6] = [
    Part { arch: "gfx942", gcn_arch_name: "gfx942:sramecc+:xnack-", marketing_name: "AMD Instinct MI300X", compute_units: 304, wave_size: 64, max_waves_per_cu: 32, lds_per_cu_kib: 64, clock_mhz: 2100, memory_clock_mhz: 1300, memory_bus_width: 8192, l2_mib: 4, memory_gib: 192 },
    Part { arch: "gfx90a", gcn_arch_name: "gfx90a:sramecc+:xnack-", marketing_name: "AMD Instinct MI250X", compute_units: 110, wave_size: 64, max_waves_per_cu: 32, lds_per_cu_kib: 64, clock_mhz: 1700, memory_clock_mhz: 1600, memory_bus_width: 4096, l2_mib: 8, memory_gib: 64 },
    Part { arch: "gfx1100", gcn_arch_name: "gfx1100", marketing_name: "AMD Radeon RX 7900 XTX", compute_units: 96, wave_size: 32, max_waves_per_cu: 32, lds_per_cu_kib: 64, clock_mhz: 2482, memory_clock_mhz: 1250, memory_bus_width: 384, l2_mib: 6, memory_gib: 24 },
    Part { arch: "gfx1201", gcn_arch_name: "gfx1201", marketing_name: "AMD Radeon RX 9070 XT", compute_units: 64, wave_size: 32, max_waves_per_cu: 32, lds_per_cu_kib: 64, clock_mhz: 2970, memory_clock_mhz: 1258, memory_bus_width: 256, l2_mib: 8, memory_gib: 16 },
    Part { arch: "gfx1103", gcn_arch_name: "gfx1103", marketing_name: "AMD Radeon 780M", compute_units: 12, wave_size: 32, max_waves_per_cu: 32, lds_per_cu_kib: 64, clock_mhz: 2700, memory_clock_mhz: 2800, memory_bus_width: 128, l2_mib: 2, memory_gib: 8 },
    Part { arch: "gfx1030", gcn_arch_name: "gfx1030", marketing_name: "AMD Radeon RX 6800 XT", compute_units: 72, wave_size: 32, max_waves_per_cu: 40, lds_per_cu_kib: 64, clock_mhz: 2250, memory_clock_mhz: 2000, memory_bus_width: 256, l2_mib: 4, memory_gib: 16 },
];

/// The struct `csrc/abi.c` writes HIP's structs from (csrc/abi.h).
#[repr(C)]
pub struct StandinDevice {
    marketing_name: *const c_char,
    gcn_arch_name: *const c_char,
    gfx_major: c_int,
    gfx_minor: c_int,
    compute_units: c_int,
    reported_multiprocessors: c_int,
    wave_size: c_int,
    lds_per_block: c_int,
    lds_per_cu: c_int,
    max_threads_per_block: c_int,
    max_waves_per_cu: c_int,
    clock_khz: c_int,
    memory_clock_khz: c_int,
    memory_bus_width: c_int,
    l2_bytes: c_int,
    pci_bus_id: c_int,
    global_memory: usize,
    host_native_atomics: c_int,
}

// SAFETY: the pointers are to leaked, never-changed C strings.
unsafe impl Send for StandinDevice {}
// SAFETY: as above; the struct is never written after it is made.
unsafe impl Sync for StandinDevice {}

/// An emulated device.
pub struct Device {
    /// `gfx942`, `gfx1100`, ...: the code objects it runs.
    pub arch: &'static str,
    abi: StandinDevice,
}

extern "C" {
    fn standin_fill_properties(properties: *mut c_void, device: *const StandinDevice);
    fn standin_device_attribute(attribute: c_int, device: *const StandinDevice, value: *mut c_int) -> c_int;
    static standin_hip_version: c_int;
}

fn leak(text: &str) -> *const c_char {
    CString::new(text).expect("no NUL").into_raw()
}

/// `gfx942` -> (9, 4), `gfx1100` -> (11, 0), `gfx90a` -> (9, 0): major, then the minor digit.
fn gfx_version(arch: &str) -> (i32, i32) {
    let digits = &arch[3..];
    let (major, rest) = digits.split_at(digits.len() - 2);
    (major.parse().unwrap_or(0), i32::from_str_radix(&rest[..1], 16).unwrap_or(0))
}

impl Device {
    /// The part's memory in bytes.
    pub fn global_memory(&self) -> usize {
        self.abi.global_memory
    }

    fn new(part: &Part, ordinal: usize) -> Device {
        let (gfx_major, gfx_minor) = gfx_version(part.arch);
        let compute_units = match std::env::var(COMPUTE_UNITS_VAR).map(|v| v.parse::<i32>()) {
            Ok(Ok(units)) if units > 0 => units,
            Ok(_) => {
                eprintln!("hip-standin: {COMPUTE_UNITS_VAR} must be a positive count");
                std::process::abort()
            }
            Err(_) => part.compute_units,
        };
        // clr halves both CU counts it reports on RDNA, where it runs in WGP mode by default
        // (two CUs per work-group processor).
        let reported = if gfx_major >= 10 { (compute_units / 2).max(1) } else { compute_units };
        let lds = part.lds_per_cu_kib * 1024;
        Device {
            arch: part.arch,
            abi: StandinDevice {
                marketing_name: leak(part.marketing_name),
                gcn_arch_name: leak(part.gcn_arch_name),
                gfx_major,
                gfx_minor,
                compute_units,
                reported_multiprocessors: reported,
                wave_size: part.wave_size,
                lds_per_block: lds,
                lds_per_cu: if gfx_major >= 10 { 2 * lds } else { lds },
                max_threads_per_block: 1024,
                max_waves_per_cu: part.max_waves_per_cu,
                clock_khz: part.clock_mhz * 1000,
                memory_clock_khz: part.memory_clock_mhz * 1000,
                memory_bus_width: part.memory_bus_width,
                l2_bytes: part.l2_mib << 20,
                pci_bus_id: 3 + ordinal as c_int,
                global_memory: part.memory_gib << 30,
                host_native_atomics: 1,
            },
        }
    }
}

/// The devices of this process, from `HIP_STANDIN_DEVICES`; an unknown arch aborts with the
/// list of known ones (a test setup error, not a HIP error).
pub fn devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let list = std::env::var(DEVICES_VAR).unwrap_or_else(|_| DEFAULT_DEVICES.to_owned());
        let known: Vec<&str> = PARTS.iter().map(|p| p.arch).collect();
        list.split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .enumerate()
            .map(|(ordinal, arch)| match PARTS.iter().find(|p| p.arch == arch) {
                Some(part) => Device::new(part, ordinal),
                None => {
                    eprintln!("hip-standin: {DEVICES_VAR}: {arch} is not an emulated part ({known:?})");
                    std::process::abort()
                }
            })
            .collect()
    })
}

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's current device.
pub fn current() -> Result<(usize, &'static Device), i32> {
    let ordinal = CURRENT.get();
    devices().get(ordinal).map(|d| (ordinal, d)).ok_or_else(code::no_device)
}

fn device(ordinal: c_int) -> Option<&'static Device> {
    usize::try_from(ordinal).ok().and_then(|o| devices().get(o))
}

#[no_mangle]
pub extern "C" fn hipInit(_flags: u32) -> i32 {
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> i32 {
    if count.is_null() {
        return fail(code::invalid_value(), "hipGetDeviceCount", "null count");
    }
    // SAFETY: non-null; the caller passes a writable int.
    unsafe { *count = devices().len() as c_int };
    if devices().is_empty() { fail(code::no_device(), "hipGetDeviceCount", DEVICES_VAR) } else { ok() }
}

#[no_mangle]
pub extern "C" fn hipSetDevice(ordinal: c_int) -> i32 {
    match device(ordinal) {
        Some(_) => {
            CURRENT.set(ordinal as usize);
            ok()
        }
        None => fail(code::invalid_device(), "hipSetDevice", format!("device {ordinal} of {}", devices().len())),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(ordinal: *mut c_int) -> i32 {
    if ordinal.is_null() {
        return fail(code::invalid_value(), "hipGetDevice", "null ordinal");
    }
    match current() {
        Ok((index, _)) => {
            // SAFETY: non-null; the caller passes a writable int.
            unsafe { *ordinal = index as c_int };
            ok()
        }
        Err(status) => fail(status, "hipGetDevice", "no device"),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(value: *mut c_int, attribute: c_int, ordinal: c_int) -> i32 {
    let Some(device) = device(ordinal) else {
        return fail(code::invalid_device(), "hipDeviceGetAttribute", format!("device {ordinal}"));
    };
    if value.is_null() {
        return fail(code::invalid_value(), "hipDeviceGetAttribute", "null value");
    }
    // SAFETY: `value` is a writable int; the device struct lives for the process.
    match unsafe { standin_device_attribute(attribute, &device.abi, value) } {
        0 => ok(),
        status => fail(status, "hipDeviceGetAttribute", format!("attribute {attribute} is not modelled")),
    }
}

#[no_mangle]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(properties: *mut c_void, ordinal: c_int) -> i32 {
    let Some(device) = device(ordinal) else {
        return fail(code::invalid_device(), "hipGetDevicePropertiesR0600", format!("device {ordinal}"));
    };
    if properties.is_null() {
        return fail(code::invalid_value(), "hipGetDevicePropertiesR0600", "null properties");
    }
    // SAFETY: the caller passes a hipDeviceProp_tR0600 (abi.c writes exactly its size).
    unsafe { standin_fill_properties(properties, &device.abi) };
    ok()
}

#[no_mangle]
pub extern "C" fn hipDeviceSynchronize() -> i32 {
    // Every call has run to completion before it returned.
    ok()
}

#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> i32 {
    if version.is_null() {
        return fail(code::invalid_value(), "hipRuntimeGetVersion", "null version");
    }
    // SAFETY: non-null, a writable int; HIP_VERSION of the header the stand-in is built with.
    unsafe { *version = standin_hip_version };
    ok()
}
