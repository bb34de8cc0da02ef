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
    let (driver, _state) = mock_driver();
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
    assert_send_sync::<FaultWord>();
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

#[test]
fn the_fault_word_is_allocated_once_and_read_in_place() {
    let (driver, state) = mock_driver();
    let word = driver.fault_word().unwrap();
    assert!(std::ptr::eq(word, driver.fault_word().unwrap()));
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 1);
    assert_eq!(word.take(), 0, "allocated zeroed");
    // A kernel's atomic_or at the device address (the mock's device address is the host's).
    // SAFETY: the mapped word is a live, 4-aligned u32 that is only accessed atomically.
    let device_word = unsafe { AtomicU32::from_ptr(word.device_addr() as *mut u32) };
    device_word.fetch_or(0b0101, Ordering::SeqCst);
    device_word.fetch_or(0b0010, Ordering::SeqCst);
    assert_eq!(word.take(), 0b0111);
    assert_eq!(word.take(), 0, "take clears");
    assert_eq!(state.copies_to_host.load(Ordering::SeqCst), 0);
    assert_eq!(state.synchronizes.load(Ordering::SeqCst), 0);
}

#[test]
fn concurrent_first_calls_share_one_fault_word() {
    let (driver, state) = mock_driver();
    let addresses: Vec<usize> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| driver.fault_word().unwrap().device_addr()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(addresses.iter().all(|&addr| addr == addresses[0]));
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 1);
}
