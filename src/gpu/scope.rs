//! Running work with a chosen device current on the calling thread, then giving the thread its
//! device back: HIP's current device is per thread and other HIP code on the caller's thread
//! (Candle's own backend re-binds, user code need not) expects to find the device it chose.

use super::{Driver, GpuResult};

/// Runs `work` with device `ordinal` current on this thread and makes exactly what was current
/// before current again afterwards, on success and on error alike: the thread's previous
/// device; with CUDA, no context for a thread that had none, and the caller's own context where
/// it had made one current (our kernels run in the device's primary context, so a caller's
/// context on the same device is switched away from too). No other device's context is created
/// or touched. The error of `work` wins over one of the restoring call.
pub fn with_device<R, E: From<super::GpuError>>(
    driver: &Driver,
    ordinal: i32,
    work: impl FnOnce() -> Result<R, E>,
) -> Result<R, E> {
    let previous = driver.current_binding()?;
    if driver.binding_is_device(previous, ordinal)? {
        return work();
    }
    driver.set_device(ordinal)?;
    let result = work();
    let restored: GpuResult<()> = driver.restore_binding(previous);
    let value = result?;
    restored?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::tests::mock::{mock_driver, mock_make_own_context_current, mock_thread_without_device};
    use crate::gpu::Binding;

    /// Issue 24, item 7: the glue made q's device current and left it so. The caller's device
    /// comes back after the work, whether it succeeds or fails, and a failing restore is
    /// reported when the work itself succeeded.
    #[test]
    fn the_callers_device_is_current_again_after_the_work() {
        let (driver, _) = mock_driver();
        driver.set_device(2).unwrap();
        let seen = with_device(&driver, 5, || driver.current_device().map_err(candle::Error::from)).unwrap();
        assert_eq!((seen, driver.current_device().unwrap()), (5, 2));
        let failed: candle::Result<()> = with_device(&driver, 6, || candle::bail!("the work failed"));
        assert!(failed.unwrap_err().to_string().contains("the work failed"));
        assert_eq!(driver.current_device().unwrap(), 2);
        // The same device: nothing to switch.
        assert_eq!(with_device(&driver, 2, || driver.current_device().map_err(candle::Error::from)).unwrap(), 2);
        // A device that cannot be made current is an error before any work runs.
        let mut ran = false;
        let err = with_device(&driver, 99, || -> candle::Result<()> {
            ran = true;
            Ok(())
        })
        .unwrap_err();
        assert!(!ran && err.to_string().contains("mockSetDevice"), "{err}");
        assert_eq!(driver.current_device().unwrap(), 2);
    }

    /// Issue 35: a CUDA thread without a context that called on device 1 first made device 0's
    /// primary context current (retaining it) to learn the device to restore. Only device 1 is
    /// made current, and the thread has no current device again afterwards.
    #[test]
    fn a_thread_without_a_device_touches_only_the_one_it_calls_on() {
        let (driver, state) = mock_driver();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    mock_thread_without_device();
                    let seen = with_device(&driver, 1, || driver.current_device().map_err(candle::Error::from)).unwrap();
                    assert_eq!(seen, 1);
                    assert_eq!(driver.current_device_if_any().unwrap(), None, "the thread has no device again");
                })
                .join()
                .unwrap()
        });
        assert_eq!(*state.devices_made_current.lock().unwrap(), [1]);
    }

    /// Issue 56: a CUDA thread that had made a context of its own current got the device's
    /// primary context back after a call, and a call on the device of that context ran in it
    /// (where our kernels are not loaded). The call runs in the device's context as this layer
    /// makes it current, and the caller's own context is current again afterwards.
    #[test]
    fn a_callers_own_context_is_current_again_after_the_work() {
        let (driver, _) = mock_driver();
        let own = mock_make_own_context_current(2);
        assert_eq!(driver.current_binding().unwrap(), Binding::Context(own));
        for ordinal in [2, 5] {
            let seen = with_device(&driver, ordinal, || driver.current_binding().map_err(candle::Error::from)).unwrap();
            assert_eq!(seen, Binding::Device(ordinal), "the work runs on the device as the driver layer binds it");
            assert_eq!(driver.current_binding().unwrap(), Binding::Context(own), "after a call on device {ordinal}");
        }
        let failed: candle::Result<()> = with_device(&driver, 2, || candle::bail!("the work failed"));
        assert!(failed.is_err());
        assert_eq!(driver.current_binding().unwrap(), Binding::Context(own));
    }
}
