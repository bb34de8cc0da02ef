//! The common `Driver` logic (status checks, buffers, modules, launches) over the mock backend.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use super::mock::{mock_driver, MOCK_LIBRARY, MOCK_LIMIT, MOCK_OUT_OF_MEMORY, MODULES_UNLOADED};
use crate::gpu::*;

#[test]
fn buffers_round_trip_and_free_once() {
    let (driver, state) = mock_driver();
    let buffer = driver.malloc(8).unwrap();
    assert_eq!(buffer.len(), 8);
    driver.copy_to_device(&buffer, &[1, 2, 3, 4, 5]).unwrap();
    let mut back = [0u8; 8];
    driver.copy_to_host(&mut back, &buffer).unwrap();
    assert_eq!(back, [1, 2, 3, 4, 5, 0, 0, 0]);
    let mut prefix = [0u8; 2];
    driver.copy_to_host(&mut prefix, &buffer).unwrap();
    assert_eq!(prefix, [1, 2]);
    drop(buffer);
    assert!(state.allocations.lock().unwrap().is_empty());

    let explicit = driver.malloc(4).unwrap();
    explicit.free().unwrap(); // a second free (from drop) would be a mockFree error
    assert!(state.allocations.lock().unwrap().is_empty());
}

#[test]
fn empty_buffers_never_reach_the_driver() {
    let (driver, state) = mock_driver();
    let empty = driver.malloc(0).unwrap();
    assert_eq!((empty.addr(), empty.len(), empty.is_empty()), (0, 0, true));
    driver.copy_to_device(&empty, &[]).unwrap();
    driver.copy_to_host(&mut [], &empty).unwrap();
    empty.free().unwrap();
    assert_eq!(state.mallocs.load(Ordering::SeqCst), 0);
}

#[test]
fn copies_beyond_the_buffer_are_refused() {
    let (driver, _state) = mock_driver();
    let buffer = driver.malloc(4).unwrap();
    let error = driver.copy_to_device(&buffer, &[0; 5]).unwrap_err();
    assert_eq!(
        (error.call, error.code),
        ("copy_to_device", NOT_A_DRIVER_STATUS)
    );
    assert!(
        error
            .message
            .contains("5 bytes do not fit a buffer of 4 bytes"),
        "{error}"
    );
    let error = driver.copy_to_host(&mut [0; 5], &buffer).unwrap_err();
    assert_eq!(error.call, "copy_to_host");
}

#[test]
fn buffers_of_another_driver_are_refused() {
    let (driver, _state) = mock_driver();
    let (other, _other_state) = mock_driver();
    let foreign = other.malloc(4).unwrap();
    let error = driver.copy_to_device(&foreign, &[0; 4]).unwrap_err();
    assert!(
        error.message.contains("belongs to the HIP driver"),
        "{error}"
    );
}

#[test]
fn driver_statuses_become_errors_with_the_driver_wording() {
    let (driver, _state) = mock_driver();
    let error = driver.malloc(MOCK_LIMIT + 1).err().unwrap();
    assert_eq!(
        (error.api, error.call, error.code),
        (Api::Hip, "mockMalloc", MOCK_OUT_OF_MEMORY)
    );
    assert_eq!(
        error.to_string(),
        "mockMalloc failed: mockError2 (2): described by the mock driver (mock driver library)"
    );
    assert_eq!(driver.library(), MOCK_LIBRARY);
}

#[test]
fn modules_unload_on_drop_and_names_with_nul_are_refused() {
    let (driver, _state) = mock_driver();
    let image = [0x7fu8, b'E', b'L', b'F'];
    let module = driver.load_module(&image).unwrap();
    driver.get_function(&module, "attn_fwd").unwrap();
    let error = driver.get_function(&module, "attn\0fwd").unwrap_err();
    assert_eq!(error.call, "get_function");
    let before = MODULES_UNLOADED.load(Ordering::SeqCst);
    drop(module);
    assert_eq!(MODULES_UNLOADED.load(Ordering::SeqCst), before + 1);
}

#[test]
fn a_negative_multiprocessor_count_is_an_error() {
    let (driver, state) = mock_driver();
    state.multiprocessors.store(-1, Ordering::SeqCst);
    let error = driver.multiprocessor_count(0).unwrap_err();
    assert_eq!(
        (error.call, error.message.as_str()),
        ("multiprocessor_count", "the driver reported -1")
    );
}

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Module>();
    assert_send_sync::<Function>();
    assert_send_sync::<Driver>();
    assert_send_sync::<FaultSlot>();
}

#[test]
fn launches_pass_args_as_kernel_params_and_check_the_status() {
    let (driver, _state) = mock_driver();
    let image = [0u8; 4];
    let module = driver.load_module(&image).unwrap();
    let kernel = driver.get_function(&module, "attn_fwd").unwrap();
    let launch = |grid_x: u32, args: &mut [*mut c_void]| {
        // SAFETY: the mock kernel reads at most one i32 parameter.
        unsafe { driver.launch(kernel, [grid_x, 1, 1], [64, 1, 1], 0, 0, args) }
    };
    launch(0, &mut []).unwrap();
    let error = launch(5, &mut []).unwrap_err();
    assert_eq!((error.call, error.code), ("mockLaunch", 5));
    let mut value = 0i32;
    launch(5, &mut [&mut value as *mut i32 as *mut c_void]).unwrap();
    value = 42;
    let error = launch(0, &mut [&mut value as *mut i32 as *mut c_void]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "mockLaunch failed: mockError42 (42): described by the mock driver (mock driver library)"
    );
}

#[test]
fn shared_calls_reach_the_driver() {
    let (driver, _state) = mock_driver();
    assert_eq!(driver.current_device().unwrap(), 3);
    driver.synchronize().unwrap();
}

#[test]
fn host_round_trips_are_counted() {
    let (driver, state) = mock_driver();
    let buffer = driver.malloc(4).unwrap();
    driver.copy_to_device(&buffer, &[1, 2, 3, 4]).unwrap();
    assert_eq!(state.copies_to_host.load(Ordering::SeqCst), 0);
    assert_eq!(state.synchronizes.load(Ordering::SeqCst), 0);
    driver.copy_to_host(&mut [0; 4], &buffer).unwrap();
    driver.copy_to_host(&mut [], &buffer).unwrap(); // empty: never reaches the driver
    driver.synchronize().unwrap();
    assert_eq!(state.copies_to_host.load(Ordering::SeqCst), 1);
    assert_eq!(state.synchronizes.load(Ordering::SeqCst), 1);
}

/// A kernel's `atomic_or` of `bits` into `slot` (the mock's device address is the host's).
fn kernel_reports(slot: FaultSlot, bits: u32) {
    // SAFETY: the mapped word is a live, 4-aligned u32 that is only accessed atomically.
    unsafe { AtomicU32::from_ptr(slot.device_addr() as *mut u32) }.fetch_or(bits, Ordering::SeqCst);
}

#[test]
fn a_threads_fault_slot_is_kept_per_stream_and_read_in_place() {
    let (driver, state) = mock_driver();
    let slot = driver.fault_slot(7).unwrap();
    assert_eq!(driver.fault_slot(7).unwrap().device_addr(), slot.device_addr());
    let other_stream = driver.fault_slot(8).unwrap();
    assert_ne!(other_stream.device_addr(), slot.device_addr());
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 1);
    assert_eq!(slot.take(), 0, "allocated zeroed");
    kernel_reports(slot, 0b0101);
    kernel_reports(slot, 0b0010);
    kernel_reports(other_stream, 0b1000);
    assert_eq!(driver.take_stream_faults(7), 0b0111);
    assert_eq!(driver.take_stream_faults(7), 0, "take clears");
    assert_eq!(driver.take_stream_faults(9), 0, "a stream never launched on has no faults");
    assert_eq!(driver.take_thread_faults(), 0b1000);
    assert_eq!(state.copies_to_host.load(Ordering::SeqCst), 0);
    assert_eq!(state.synchronizes.load(Ordering::SeqCst), 0);
}

/// Issue 35: one fault word per process reported a thread's bad call to another thread's next
/// call. Each thread has its own slot for a stream, and sees only its own kernels' bits.
#[test]
fn threads_on_one_stream_see_only_their_own_faults() {
    let (driver, state) = mock_driver();
    let barrier = std::sync::Barrier::new(8);
    let addresses: Vec<usize> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let (driver, barrier) = (&driver, &barrier);
                scope.spawn(move || {
                    let slot = driver.fault_slot(0).unwrap();
                    barrier.wait();
                    kernel_reports(slot, 1 << t);
                    barrier.wait();
                    assert_eq!(driver.take_stream_faults(0), 1 << t, "thread {t}");
                    assert_eq!(driver.take_thread_faults(), 0, "thread {t}");
                    slot.device_addr()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let distinct: std::collections::HashSet<_> = addresses.iter().collect();
    assert_eq!(distinct.len(), 8, "one slot per thread");
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 1, "the threads share one allocation");
    // The ended threads gave their slots back: a new thread reuses one, zeroed.
    let reused = std::thread::scope(|scope| scope.spawn(|| driver.fault_slot(0).unwrap().device_addr()).join().unwrap());
    assert!(addresses.contains(&reused));
}

#[test]
fn slots_past_one_allocation_come_from_another() {
    let (driver, state) = mock_driver();
    let addresses: std::collections::HashSet<usize> = (0..1500).map(|stream| driver.fault_slot(stream).unwrap().device_addr()).collect();
    assert_eq!(addresses.len(), 1500);
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 2);
}
