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

/// A kernel's `atomic_or` of `bits` into the fault word at `word` (the mock's device address is
/// the host's).
fn kernel_reports(word: usize, bits: u32) {
    // SAFETY: the mapped word is a live, 4-aligned u32 that is only accessed atomically.
    unsafe { AtomicU32::from_ptr(word as *mut u32) }.fetch_or(bits, Ordering::SeqCst);
}

/// Queues a call (no kernels: the mock's) on `stream` of `device`; returns its fault word.
fn queue_call(driver: &Driver, device: i32, stream: usize) -> usize {
    driver.queue_with_fault_word(device, stream, |word| GpuResult::Ok(word)).unwrap()
}

/// Issue 56: one bad call failed 64 valid calls queued behind it. Its kernel's programs set the
/// bits over its whole run; each take cleared what had arrived, and the next found more. Now each
/// call has a word of its own, reported once, whatever arrives later.
#[test]
fn a_bad_call_fails_one_later_call_however_late_its_bits_arrive() {
    let (driver, state) = mock_driver();
    state.hold_streams();
    let bad = queue_call(&driver, 3, 7);
    let mut words = vec![bad];
    let mut failed = 0;
    for step in 0..40 {
        // The bad kernel's programs keep reporting while the valid calls queue behind it.
        kernel_reports(bad, if step % 2 == 0 { 0b100 } else { 0b010 });
        let bits = driver.take_stream_faults(3, 7).unwrap();
        if bits != 0 {
            failed += 1;
            assert_eq!(bits & 0b100, 0b100, "step {step}: the first bits that arrived");
            continue;
        }
        words.push(queue_call(&driver, 3, 7));
    }
    assert_eq!(failed, 1, "one later call fails, not every call that finds new bits");
    assert_eq!(driver.take_thread_faults(), 0, "an explicit take after the report finds nothing new");
    let distinct: std::collections::HashSet<_> = words.iter().collect();
    assert_eq!(distinct.len(), words.len(), "every call in flight has its own word");
    assert_eq!(driver.calls_in_flight(), words.len());
    // The stream runs the calls' fills: every call is seen finished and its word goes back.
    state.run_streams();
    assert_eq!(driver.take_stream_faults(3, 7).unwrap(), 0);
    assert_eq!(driver.calls_in_flight(), 0);
    assert_eq!(driver.fault_words.free_words(), 1024, "every word back in the pool, the record's too");
    // A bad call whose bits arrived only after its kernels finished is still reported once.
    let late = queue_call(&driver, 3, 7);
    kernel_reports(late, 0b001);
    assert_eq!(driver.take_stream_faults(3, 7).unwrap(), 0b001);
    assert_eq!(driver.take_stream_faults(3, 7).unwrap(), 0);
    assert_eq!((state.copies_to_host.load(Ordering::SeqCst), state.synchronizes.load(Ordering::SeqCst)), (0, 0));
}

/// Each (device, stream) of a thread has its own calls: faults of one never fail another's,
/// the null streams of two devices included (issue 56: HIP's shared one slot).
#[test]
fn faults_stay_with_their_device_and_stream() {
    let (driver, state) = mock_driver();
    state.hold_streams();
    let calls = [(0, 0), (1, 0), (0, 7), (0, 8)].map(|(device, stream)| (device, stream, queue_call(&driver, device, stream)));
    for (i, &(_, _, word)) in calls.iter().enumerate() {
        kernel_reports(word, 1 << i);
    }
    for (i, &(device, stream, _)) in calls.iter().enumerate() {
        assert_eq!(driver.take_stream_faults(device, stream).unwrap(), 1 << i, "device {device}, stream {stream}");
    }
    assert_eq!(driver.take_stream_faults(0, 9).unwrap(), 0, "a stream never launched on has no faults");
    assert_eq!(driver.take_thread_faults(), 0);
    state.run_streams();
    assert_eq!(driver.take_thread_faults(), 0);
    assert_eq!(driver.calls_in_flight(), 0, "idle records are dropped, not kept per stream handle");
}

/// Issue 35: one fault word per process reported a thread's bad call to another thread's next
/// call. Each thread's calls have their own words, and a thread sees only its own kernels' bits.
#[test]
fn threads_on_one_stream_see_only_their_own_faults() {
    let (driver, state) = mock_driver();
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for t in 0..8u32 {
            let (driver, barrier) = (&driver, &barrier);
            scope.spawn(move || {
                let word = queue_call(driver, 0, 0);
                barrier.wait();
                kernel_reports(word, 1 << t);
                barrier.wait();
                assert_eq!(driver.take_stream_faults(0, 0).unwrap(), 1 << t, "thread {t}");
                assert_eq!(driver.take_thread_faults(), 0, "thread {t}");
            });
        }
    });
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 1, "the threads share one allocation");
}

/// Issue 56: a just-released slot went first to the next new thread, with the late bits of the
/// ended thread's bad call still to come. An ended thread's calls in flight keep their words
/// until the stream shows them finished; bits they set meanwhile reach nobody.
#[test]
fn an_ended_threads_calls_in_flight_keep_their_words() {
    let (driver, state) = mock_driver();
    state.hold_streams();
    let orphan = std::thread::scope(|scope| scope.spawn(|| queue_call(&driver, 0, 0)).join().unwrap());
    let free_before = driver.fault_words.free_words();
    let words: Vec<usize> = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let words: Vec<usize> = (0..4).map(|_| queue_call(&driver, 0, 0)).collect();
                kernel_reports(orphan, 0b100);
                assert_eq!(driver.take_thread_faults(), 0, "the ended thread's late bits reach no other thread");
                words
            })
            .join()
            .unwrap()
    });
    assert!(!words.contains(&orphan), "a word of a call in flight is never handed on");
    assert_eq!(driver.fault_words.free_words(), free_before - 5, "four calls and a record in flight");
    state.run_streams();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            queue_call(&driver, 0, 0);
            assert_eq!(driver.take_thread_faults(), 0);
        });
    });
    assert_eq!(driver.fault_words.free_words(), 1024, "the ended threads' words came back once their calls finished");
}

/// Issue 56: a stream made where a destroyed one's handle was inherited the unreported faults
/// of the destroyed stream's calls. Where the driver names streams (`cuStreamGetId`,
/// `hipStreamGetId`), the new stream's first call finds nothing, and the old stream's bits stay
/// with the thread's explicit take.
#[test]
fn a_stream_made_on_a_destroyed_streams_handle_inherits_nothing() {
    let (driver, state) = mock_driver();
    state.hold_streams();
    state.set_stream_id(7, 1);
    let bad = queue_call(&driver, 0, 7);
    kernel_reports(bad, 0b100);
    // Stream 1 is destroyed; a new stream, identity 2, gets its handle.
    state.set_stream_id(7, 2);
    assert_eq!(driver.take_stream_faults(0, 7).unwrap(), 0, "the new stream's first call is not failed");
    queue_call(&driver, 0, 7);
    assert_eq!(driver.take_thread_faults(), 0b100, "the destroyed stream's call is still reported to its thread");
    state.run_streams();
    assert_eq!(driver.take_thread_faults(), 0);
    assert_eq!(driver.calls_in_flight(), 0);
}

/// Issue 56: a device reset (`hipDeviceReset`, `cudaDeviceReset`) freed the driver's pinned
/// fault pages while the host kept reading them, and kernels would have written to addresses the
/// device no longer maps. The pages are the process's own: reads stay valid, and a call after
/// the reset is refused with an error that says why instead of launching.
#[test]
fn calls_after_a_device_reset_are_refused_and_takes_stay_valid() {
    let (driver, state) = mock_driver();
    let bad = queue_call(&driver, 0, 0);
    kernel_reports(bad, 0b010);
    state.reset_devices();
    assert_eq!(driver.take_thread_faults(), 0b010, "the words are still readable after the reset");
    let mut queued = false;
    let refused = driver
        .queue_with_fault_word(0, 0, |word| {
            queued = true;
            GpuResult::Ok(word)
        })
        .unwrap_err();
    assert!(!queued, "nothing is queued that would write to an unmapped word");
    assert!(refused.message.contains("device reset") && refused.message.contains("mockHostGetDevicePointer"), "{refused}");
    assert_eq!(driver.calls_in_flight(), 0, "a refused call leaves nothing in flight");
    let again = driver.queue_with_fault_word(3, 5, |word| GpuResult::Ok(word)).unwrap_err();
    assert!(again.message.contains("device reset"), "{again}");
}

#[test]
fn words_past_one_allocation_come_from_another() {
    let (driver, state) = mock_driver();
    state.hold_streams();
    let words: std::collections::HashSet<usize> = (0..1500).map(|_| queue_call(&driver, 0, 0)).collect();
    assert_eq!(words.len(), 1500);
    assert_eq!(state.mapped_host_allocations.load(Ordering::SeqCst), 2);
    state.run_streams();
    assert_eq!(driver.take_thread_faults(), 0);
    assert_eq!(driver.fault_words.free_words(), 2048);
}
