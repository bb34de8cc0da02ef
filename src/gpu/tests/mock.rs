//! A backend whose "device" is host memory and whose driver functions are small `extern "C"`
//! stand-ins, to test the common `Driver` logic without a GPU.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::gpu::*;

/// What the host-memory backend records, shared with the test that owns the Driver.
#[derive(Default)]
pub(crate) struct MockState {
    /// What every mock device allows ([`Driver::device_limits`]); a test may change it.
    pub(crate) limits: MockLimits,
    /// Live allocations: address -> size.
    pub(super) allocations: Mutex<HashMap<usize, usize>>,
    pub(super) mallocs: AtomicUsize,
    /// Host round trips, so that a test can assert that a launch path made none.
    pub(crate) copies_to_host: AtomicUsize,
    pub(crate) synchronizes: AtomicUsize,
    /// Host memory registered ([`Backend::register_mapped_host`]): start address -> bytes, until
    /// [`MockState::reset_devices`] undoes every registration, as a device reset does.
    registered: Mutex<HashMap<usize, usize>>,
    /// Registrations made so far.
    pub(super) mapped_host_allocations: AtomicUsize,
    /// Each stream handle's identity ([`Backend::stream_id`]); a handle not listed has id 0.
    stream_ids: Mutex<HashMap<usize, u64>>,
    /// What every mock device reports as its multiprocessor count.
    pub(crate) multiprocessors: std::sync::atomic::AtomicI32,
    /// Every device made current, in order (a CUDA context created or bound).
    pub(crate) devices_made_current: Mutex<Vec<i32>>,
    /// The fills queued while the streams are held ([`MockState::hold_streams`]), run by
    /// [`MockState::run_streams`], as a GPU busy with earlier work runs them later.
    held_fills: Mutex<Option<Vec<(usize, u32, usize)>>>,
}

impl MockState {
    /// As `hipDeviceReset` or `cuDevicePrimaryCtxReset`: every host registration is undone.
    pub(crate) fn reset_devices(&self) {
        self.registered.lock().unwrap().clear();
    }

    /// Stream handle `stream` now names a stream of identity `id`, as when a stream is destroyed
    /// and a new one gets its handle.
    pub(crate) fn set_stream_id(&self, stream: usize, id: u64) {
        self.stream_ids.lock().unwrap().insert(stream, id);
    }

    /// From now on fills wait, as work queued behind long kernels, until [`MockState::run_streams`].
    pub(crate) fn hold_streams(&self) {
        self.held_fills.lock().unwrap().get_or_insert_with(Vec::new);
    }

    /// Runs the fills held so far, in order, and no longer holds new ones.
    pub(crate) fn run_streams(&self) {
        for (addr, value, count) in self.held_fills.lock().unwrap().take().unwrap_or_default() {
            // SAFETY: queued by `fill_u32_async`, whose caller keeps the words allocated until
            // the stream ran the fill (the fault words are never freed).
            unsafe { write_words(addr, value, count) };
        }
    }
}

/// Writes `value` to the `count` u32 words at `addr`.
///
/// # Safety
/// `addr..addr + 4 * count` lies in a live allocation.
unsafe fn write_words(addr: usize, value: u32, count: usize) {
    for i in 0..count {
        // SAFETY: as the caller guarantees; the mock's allocations are byte vectors, so the
        // words are written unaligned.
        unsafe { std::ptr::write_unaligned((addr as *mut u32).add(i), value) };
    }
}

/// The mock devices' limits: those of an MI300X (gfx942, the arch they report) until a test
/// sets others.
pub(crate) struct MockLimits(Mutex<DeviceLimits>);

impl Default for MockLimits {
    fn default() -> Self {
        MockLimits(Mutex::new(DeviceLimits {
            max_shared_per_block: 64 * 1024,
            max_threads_per_block: 1024,
            host_native_atomics: true,
        }))
    }
}

impl MockLimits {
    /// What every mock device reports from now on.
    pub(crate) fn set(&self, limits: DeviceLimits) {
        *self.0.lock().unwrap() = limits;
    }

    pub(crate) fn get(&self) -> DeviceLimits {
        *self.0.lock().unwrap()
    }
}

/// What [`Driver::library`] says of the mock, and what its errors end with.
pub(super) const MOCK_LIBRARY: &str = "mock driver library";

/// A backend over host memory: device addresses are host addresses.
struct MockBackend {
    state: Arc<MockState>,
    shared: SharedCalls,
}

pub(super) const MOCK_OUT_OF_MEMORY: i32 = 2;
pub(super) const MOCK_LIMIT: usize = 1 << 20;
pub(super) static MODULES_UNLOADED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The mock's current device of this thread, as HIP keeps one per thread (3 until set), or
    /// [`NO_DEVICE`].
    static MOCK_DEVICE: std::cell::Cell<i32> = const { std::cell::Cell::new(3) };
}

/// The mock thread's state without a current device, as a CUDA thread without a context.
const NO_DEVICE: i32 = -1;

thread_local! {
    /// A context of the caller's own (by its address) current on this thread, over
    /// [`MOCK_DEVICE`]'s device, as a CUDA program may make one; `None` when the mock's own
    /// binding of the device is current.
    static MOCK_OWN_CONTEXT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Makes a context of the caller's own on `device` current on this thread, as a CUDA program
/// that created one (`cuCtxCreate`) does; returns its address.
pub(crate) fn mock_make_own_context_current(device: i32) -> usize {
    let context = 0xc0_0000 + device as usize;
    MOCK_DEVICE.with(|d| d.set(device));
    MOCK_OWN_CONTEXT.with(|c| c.set(Some(context)));
    context
}

/// Puts the calling thread in the state a fresh CUDA thread is in: no current device. The mock
/// then behaves as the CUDA backend: `current_device` makes device 0 current.
pub(crate) fn mock_thread_without_device() {
    MOCK_DEVICE.with(|d| d.set(NO_DEVICE));
}

/// The mock's device ordinals are 0..MOCK_DEVICES.
pub(super) const MOCK_DEVICES: i32 = 8;

unsafe extern "C" fn mock_current_device(ordinal: *mut i32) -> i32 {
    // SAFETY: Driver::current_device passes a writable int.
    unsafe { *ordinal = MOCK_DEVICE.with(std::cell::Cell::get) };
    0
}

unsafe extern "C" fn mock_synchronize() -> i32 {
    0
}

/// The module handle is the image's address.
unsafe extern "C" fn mock_load(module: *mut Handle, image: *const c_void) -> i32 {
    // SAFETY: Driver::load_module passes a writable handle.
    unsafe { *module = image as Handle };
    0
}

unsafe extern "C" fn mock_unload(_module: Handle) -> i32 {
    MODULES_UNLOADED.fetch_add(1, Ordering::SeqCst);
    0
}

/// The function handle is the module handle.
unsafe extern "C" fn mock_get_function(f: *mut Handle, module: Handle, _: *const c_char) -> i32 {
    // SAFETY: Driver::get_function passes a writable handle.
    unsafe { *f = module };
    0
}

/// Fails with status grid.x when given no parameters, else with the value of the first one
/// (an i32): shows what reached the driver.
unsafe extern "C" fn mock_launch(
    _: Handle,
    grid_x: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: u32,
    _: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> i32 {
    assert!(extra.is_null());
    if params.is_null() {
        return grid_x as i32;
    }
    // SAFETY: the tests pass one parameter pointing at an i32.
    unsafe { *(*params as *const i32) }
}

pub(crate) fn mock_driver() -> (Driver, Arc<MockState>) {
    let state = Arc::new(MockState::default());
    let shared = SharedCalls {
        current_device: Call {
            name: "mockGetDevice",
            function: mock_current_device,
        },
        synchronize: Call {
            name: "mockSynchronize",
            function: mock_synchronize,
        },
        load_module: Call {
            name: "mockLoad",
            function: mock_load,
        },
        unload_module: mock_unload,
        get_function: Call {
            name: "mockGetFunction",
            function: mock_get_function,
        },
        launch: Call {
            name: "mockLaunch",
            function: mock_launch,
        },
        stream_id: None,
    };
    let backend = MockBackend {
        state: state.clone(),
        shared,
    };
    (Driver::new(Box::new(backend)), state)
}

impl Backend for MockBackend {
    fn api(&self) -> Api {
        Api::Hip
    }
    fn shared(&self) -> &SharedCalls {
        &self.shared
    }
    fn library(&self) -> &str {
        MOCK_LIBRARY
    }
    fn describe(&self, status: i32) -> (String, String) {
        let name = format!("mockError{status}");
        (name, "described by the mock driver".to_owned())
    }
    fn set_device(&self, ordinal: i32) -> GpuResult<()> {
        if !(0..MOCK_DEVICES).contains(&ordinal) {
            return self.check("mockSetDevice", 101);
        }
        MOCK_DEVICE.with(|d| d.set(ordinal));
        MOCK_OWN_CONTEXT.with(|c| c.set(None));
        self.state.devices_made_current.lock().unwrap().push(ordinal);
        Ok(())
    }
    fn current_binding(&self) -> GpuResult<Binding> {
        if let Some(context) = MOCK_OWN_CONTEXT.with(std::cell::Cell::get) {
            return Ok(Binding::Context(context));
        }
        Ok(self.current_device_if_any()?.map_or(Binding::Nothing, Binding::Device))
    }
    fn restore_binding(&self, binding: Binding) -> GpuResult<()> {
        match binding {
            Binding::Context(context) => {
                MOCK_DEVICE.with(|d| d.set((context - 0xc0_0000) as i32));
                MOCK_OWN_CONTEXT.with(|c| c.set(Some(context)));
                Ok(())
            }
            Binding::Device(ordinal) => self.set_device(ordinal),
            Binding::Nothing => self.clear_current_device(),
        }
    }
    fn stream_id(&self, stream: usize) -> GpuResult<Option<u64>> {
        Ok(Some(self.state.stream_ids.lock().unwrap().get(&stream).copied().unwrap_or(0)))
    }
    fn current_device(&self) -> GpuResult<i32> {
        match self.current_device_if_any()? {
            Some(ordinal) => Ok(ordinal),
            None => self.set_device(0).map(|()| 0),
        }
    }
    fn current_device_if_any(&self) -> GpuResult<Option<i32>> {
        let ordinal = MOCK_DEVICE.with(std::cell::Cell::get);
        Ok((ordinal != NO_DEVICE).then_some(ordinal))
    }
    fn clear_current_device(&self) -> GpuResult<()> {
        MOCK_DEVICE.with(|d| d.set(NO_DEVICE));
        MOCK_OWN_CONTEXT.with(|c| c.set(None));
        Ok(())
    }
    fn device_count(&self) -> GpuResult<i32> {
        Ok(1)
    }
    fn multiprocessor_count(&self, _: i32) -> GpuResult<i32> {
        Ok(self.state.multiprocessors.load(Ordering::SeqCst))
    }
    fn arch_name(&self, _: i32) -> GpuResult<String> {
        Ok("gfx942".to_owned())
    }
    fn device_limits(&self, ordinal: i32) -> GpuResult<DeviceLimits> {
        if !(0..MOCK_DEVICES).contains(&ordinal) {
            self.check("mockDeviceGetAttribute", 101)?;
        }
        Ok(self.state.limits.get())
    }
    fn allow_shared(&self, _: Handle, _: u32) -> GpuResult<()> {
        Ok(())
    }
    fn malloc(&self, bytes: usize) -> GpuResult<usize> {
        assert!(
            bytes > 0,
            "Driver::malloc must not ask the driver for 0 bytes"
        );
        self.state.mallocs.fetch_add(1, Ordering::SeqCst);
        if bytes > MOCK_LIMIT {
            self.check("mockMalloc", MOCK_OUT_OF_MEMORY)?;
        }
        let addr = Box::into_raw(vec![0u8; bytes].into_boxed_slice()) as *mut u8 as usize;
        self.state.allocations.lock().unwrap().insert(addr, bytes);
        Ok(addr)
    }
    fn free(&self, addr: usize) -> GpuResult<()> {
        let Some(bytes) = self.state.allocations.lock().unwrap().remove(&addr) else {
            return self.check("mockFree", 1);
        };
        let slice = std::ptr::slice_from_raw_parts_mut(addr as *mut u8, bytes);
        // SAFETY: made by Box::into_raw in malloc with this length, removed from the map once.
        drop(unsafe { Box::from_raw(slice) });
        Ok(())
    }
    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> GpuResult<()> {
        // SAFETY: the caller guarantees that dst..dst+len lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
    unsafe fn fill_u32_async(&self, addr: usize, value: u32, count: usize, _stream: usize) -> GpuResult<()> {
        if let Some(held) = self.state.held_fills.lock().unwrap().as_mut() {
            held.push((addr, value, count));
            return Ok(());
        }
        // SAFETY: the caller guarantees that addr..addr+4*count lies in a live allocation.
        unsafe { write_words(addr, value, count) };
        Ok(())
    }
    unsafe fn copy_to_host(&self, dst: &mut [u8], src: usize) -> GpuResult<()> {
        self.state.copies_to_host.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller guarantees that src..src+len lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    /// The device address of registered memory is its host address, as on the real drivers
    /// under unified addressing.
    unsafe fn register_mapped_host(&self, host: *mut c_void, bytes: usize) -> GpuResult<usize> {
        assert!(bytes > 0, "a registration of 0 bytes");
        self.state.mapped_host_allocations.fetch_add(1, Ordering::SeqCst);
        self.state.registered.lock().unwrap().insert(host as usize, bytes);
        Ok(host as usize)
    }
    fn mapped_device_addr(&self, host: *mut c_void) -> GpuResult<usize> {
        match self.state.registered.lock().unwrap().contains_key(&(host as usize)) {
            true => Ok(host as usize),
            false => self.check("mockHostGetDevicePointer", 1).map(|()| 0),
        }
    }
    fn synchronize(&self) -> GpuResult<()> {
        self.state.synchronizes.fetch_add(1, Ordering::SeqCst);
        synchronize_through_shared_call(self)
    }
}

#[test]
fn device_limits_are_what_the_backend_reports_for_a_valid_ordinal() {
    let (driver, state) = mock_driver();
    assert_eq!(
        driver.device_limits(0).unwrap().max_shared_per_block,
        64 * 1024
    );
    let rtx = DeviceLimits {
        max_shared_per_block: 101_376,
        max_threads_per_block: 1024,
        host_native_atomics: false,
    };
    state.limits.set(rtx);
    assert_eq!(driver.device_limits(MOCK_DEVICES - 1).unwrap(), rtx);
    let error = driver.device_limits(MOCK_DEVICES).unwrap_err();
    assert_eq!((error.call, error.code), ("mockDeviceGetAttribute", 101));
}

#[test]
fn device_limits_from_driver_attributes_refuse_negative_sizes() {
    let limits = device_limits_from_attributes(Api::Cuda, "cuDeviceGetAttribute", 101_376, 1024, 1);
    let expected = DeviceLimits {
        max_shared_per_block: 101_376,
        max_threads_per_block: 1024,
        host_native_atomics: true,
    };
    assert_eq!(limits.unwrap(), expected);
    let error = device_limits_from_attributes(Api::Hip, "hipDeviceGetAttribute", 65_536, -1, 0)
        .unwrap_err();
    assert_eq!(error.call, "hipDeviceGetAttribute");
    assert!(
        error.message.contains("-1 for the threads per block"),
        "{error}"
    );
}
