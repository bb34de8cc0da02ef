//! Running work with a chosen device current on the calling thread, then giving the thread its
//! device back: HIP's current device is per thread and other HIP code on the caller's thread
//! (Candle's own backend re-binds, user code need not) expects to find the device it chose.

use super::{Driver, GpuResult};

/// Runs `work` with device `ordinal` current on this thread and makes the thread's previous
/// device current again afterwards, on success and on error alike. The error of `work` wins
/// over one of the restoring call.
pub fn with_device<R, E: From<super::GpuError>>(
    driver: &Driver,
    ordinal: i32,
    work: impl FnOnce() -> Result<R, E>,
) -> Result<R, E> {
    let previous = driver.current_device()?;
    if previous == ordinal {
        return work();
    }
    driver.set_device(ordinal)?;
    let result = work();
    let restored: GpuResult<()> = driver.set_device(previous);
    let value = result?;
    restored?;
    Ok(value)
}
