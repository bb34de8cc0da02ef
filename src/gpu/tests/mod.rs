//! Tests without a GPU: the real loaders against absent libraries here, and the common
//! `Driver` logic in [`driver`], over the host-memory backend of [`mock`].

mod driver;
pub(crate) mod mock;

use super::*;

#[test]
fn hip_is_an_error_naming_the_library_when_absent() {
    match Driver::hip() {
        Err(error) => {
            assert_eq!(
                (error.api, error.call, error.code),
                (Api::Hip, "dlopen", NOT_A_DRIVER_STATUS)
            );
            for name in [
                "libamdhip64.so: ",
                "libamdhip64.so.7: ",
                "libamdhip64.so.6: ",
            ] {
                assert!(error.message.contains(name), "{error}");
            }
        }
        // A machine with ROCm: the driver must then answer as HIP.
        Ok(driver) => assert_eq!(driver.api(), Api::Hip),
    }
}

#[test]
fn cuda_is_an_error_naming_the_library_when_absent() {
    match Driver::cuda() {
        Err(error) if error.call == "dlopen" => {
            assert_eq!((error.api, error.code), (Api::Cuda, NOT_A_DRIVER_STATUS));
            for name in ["libcuda.so.1: ", "libcuda.so: "] {
                assert!(error.message.contains(name), "{error}");
            }
        }
        // A driver without a usable GPU fails in cuInit with the driver's own wording.
        Err(error) => assert_eq!((error.api, error.call), (Api::Cuda, "cuInit"), "{error}"),
        Ok(driver) => assert_eq!(driver.api(), Api::Cuda),
    }
}

#[test]
fn the_cached_result_is_the_same_on_every_call() {
    let first = Driver::hip()
        .map(|driver| driver as *const Driver)
        .map_err(|e| e.to_string());
    let second = Driver::hip()
        .map(|driver| driver as *const Driver)
        .map_err(|e| e.to_string());
    assert_eq!(first, second);
}

/// With a real device (the verification machines), the real driver: it names its library file,
/// counts its units, maps a call's fault word and sees the call finish. Passes without checking
/// anything elsewhere.
#[test]
fn a_present_device_maps_a_fault_word_and_names_its_library() {
    for driver in [Driver::hip(), Driver::cuda()].into_iter().flatten() {
        if driver.device_count().unwrap() == 0 {
            continue;
        }
        let kind = match driver.api() {
            Api::Hip => "HIP runtime /",
            Api::Cuda => "CUDA driver /",
        };
        assert!(driver.library().starts_with(kind), "{}", driver.library());
        driver.set_device(0).unwrap();
        assert!(driver.multiprocessor_count(0).unwrap() > 0);
        let word = driver.queue_with_fault_word(0, 0, |word| GpuResult::Ok(word)).unwrap();
        assert_ne!(word, 0);
        assert_eq!(driver.calls_in_flight(), 1);
        driver.synchronize().unwrap();
        assert_eq!(driver.take_thread_faults(), 0, "allocated zeroed");
        assert_eq!(driver.calls_in_flight(), 0, "the stream's fill showed the call finished");
    }
}
