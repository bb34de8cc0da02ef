//! Device memory and synchronous copies, for the host round trip and the tests.

use super::{Driver, GpuError, GpuResult};

/// Device memory of one [`Driver`] on the device current at allocation, freed on drop.
/// A zero-byte buffer holds the null address and involves no driver call.
pub struct DeviceBuffer<'d> {
    driver: &'d Driver,
    addr: usize,
    len: usize,
}

impl DeviceBuffer<'_> {
    /// The device address (`hipDeviceptr_t` / `CUdeviceptr`); 0 for an empty buffer.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frees the memory now and reports the driver's status, which dropping cannot.
    pub fn free(self) -> GpuResult<()> {
        let buffer = std::mem::ManuallyDrop::new(self);
        match buffer.addr {
            0 => Ok(()),
            addr => buffer.driver.backend.free(addr),
        }
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        if self.addr != 0 {
            // A failing free cannot be returned from drop; it leaves the memory allocated until
            // the process ends, so the status is deliberately ignored here (and only here: call
            // `free` to see it).
            let _ = self.driver.backend.free(self.addr);
        }
    }
}

impl Driver {
    /// Allocates `bytes` on the current device (`hipMalloc` / `cuMemAlloc_v2`).
    pub fn malloc(&self, bytes: usize) -> GpuResult<DeviceBuffer<'_>> {
        let addr = if bytes == 0 {
            0
        } else {
            self.backend.malloc(bytes)?
        };
        Ok(DeviceBuffer {
            driver: self,
            addr,
            len: bytes,
        })
    }

    /// Copies `src` to the start of `dst` and waits for the copy (`hipMemcpyHtoD` /
    /// `cuMemcpyHtoD_v2`); `src` may be shorter than `dst`, not longer.
    pub fn copy_to_device(&self, dst: &DeviceBuffer, src: &[u8]) -> GpuResult<()> {
        self.check_copy("copy_to_device", dst, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is a live allocation of this driver (checked) of at least src.len() bytes.
        unsafe { self.backend.copy_to_device(dst.addr, src) }
    }

    /// Copies the first `dst.len()` bytes of `src` into `dst` and waits for the copy
    /// (`hipMemcpyDtoH` / `cuMemcpyDtoH_v2`).
    pub fn copy_to_host(&self, dst: &mut [u8], src: &DeviceBuffer) -> GpuResult<()> {
        self.check_copy("copy_to_host", src, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` is a live allocation of this driver (checked) of at least dst.len() bytes.
        unsafe { self.backend.copy_to_host(dst, src.addr) }
    }

    /// Refuses a copy of `bytes` that would leave `buffer`, or a buffer of another driver.
    fn check_copy(&self, call: &'static str, buffer: &DeviceBuffer, bytes: usize) -> GpuResult<()> {
        if !std::ptr::eq(buffer.driver, self) {
            let message = format!("the buffer belongs to the {} driver", buffer.driver.api());
            return Err(GpuError::local(self.api(), call, message));
        }
        if bytes > buffer.len {
            let message = format!("{bytes} bytes do not fit a buffer of {} bytes", buffer.len);
            return Err(GpuError::local(self.api(), call, message));
        }
        Ok(())
    }
}
