//! Verification: runs the flash-attention calls made on CPU tensors inside [`run_on_gpu`] on a
//! GPU through the Triton path (upload, launch, download), so that every public function can be
//! checked against the CPU backend on any machine with a GPU driver, with no Candle GPU device.
//!
//! It runs the product path itself ([`crate::glue::forward`]) over a device whose buffers are
//! plain driver allocations: seqlens and block tables are checked by shape only and their
//! values by the kernels, and a call reports the faults of earlier calls, as a Candle device's
//! call does. Buffers the path does not ask to be zeroed (the output when every row is written,
//! the split accumulators) start as NaN, as recycled memory may, so that a kernel reading an
//! element it never wrote shows.
use crate::glue::{GpuDevice, Inputs};
use crate::gpu::{DeviceBuffer, Driver};
use crate::params::{AttnCall, Request};
use candle::backend::BackendStorage;
use candle::{CpuStorage, DType, Layout, Result, Tensor};
use std::cell::Cell;

thread_local! {
    static OFFLOAD: Cell<Option<&'static Driver>> = const { Cell::new(None) };
}

/// Runs `f` with every flash-attention call on CPU tensors made by this thread executed on the
/// current GPU of `driver` instead of the CPU backend. Results come back as CPU tensors.
pub fn run_on_gpu<R>(driver: &'static Driver, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<&'static Driver>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OFFLOAD.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OFFLOAD.with(|o| o.replace(Some(driver))));
    f()
}

/// The driver calls are offloaded to on this thread, if any.
pub(crate) fn active() -> Option<&'static Driver> {
    OFFLOAD.with(Cell::get)
}

/// The bytes of a CPU storage (f16/bf16/f32/u32/i32 as the kernels read them).
fn bytes(storage: &CpuStorage) -> Result<&[u8]> {
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: plain-old-data element types (f16, bf16, f32, u32, i32) have no padding and
        // every byte pattern is a valid u8; the slice borrows `v`.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    Ok(match storage {
        CpuStorage::F16(v) => raw(v),
        CpuStorage::BF16(v) => raw(v),
        CpuStorage::F32(v) => raw(v),
        CpuStorage::U32(v) => raw(v),
        CpuStorage::I32(v) => raw(v),
        other => candle::bail!("flash-attn-rocm: cannot offload a {:?} storage", other.dtype()),
    })
}

fn upload<'d>(driver: &'d Driver, data: &[u8]) -> Result<DeviceBuffer<'d>> {
    let buffer = driver.malloc(data.len())?;
    driver.copy_to_device(&buffer, data)?;
    Ok(buffer)
}

/// The thread's current device of a driver, with allocations copied from host memory and the
/// null stream; nothing here is stream-ordered, so uploads finish before the kernels start and
/// the path's buffers are read back after a synchronize.
struct Offload {
    driver: &'static Driver,
    ordinal: i32,
}

impl GpuDevice for Offload {
    type Buffer = DeviceBuffer<'static>;

    fn driver(&self) -> Result<&'static Driver> {
        Ok(self.driver)
    }

    fn ordinal(&self) -> i32 {
        self.ordinal
    }

    fn stream(&self) -> usize {
        0
    }

    fn alloc(&self, dtype: DType, len: usize, zeroed: bool) -> Result<DeviceBuffer<'static>> {
        upload(self.driver, &vec![if zeroed { 0 } else { 0xff }; len * dtype.size_in_bytes()])
    }

    /// Uploads the side tensors (contiguous), and waits for the kernels before freeing them.
    fn with_addresses<R>(
        &self,
        tensors: &[&Tensor],
        buffers: &mut [&mut DeviceBuffer<'static>],
        queue: impl FnOnce(&[(usize, Layout)], &[usize]) -> Result<R>,
    ) -> Result<R> {
        let uploads = tensors.iter().map(|t| upload_tensor(self.driver, t)).collect::<Result<Vec<_>>>()?;
        let side: Vec<(usize, Layout)> = uploads.iter().map(|(b, layout)| (b.addr(), layout.clone())).collect();
        let addrs: Vec<usize> = buffers.iter().map(|b| b.addr()).collect();
        let result = queue(&side, &addrs)?;
        self.driver.synchronize()?;
        Ok(result)
    }
}

/// A side tensor (seqlens, block table, slopes, ranges) on the device, contiguous, with its
/// contiguous layout.
fn upload_tensor(driver: &'static Driver, t: &Tensor) -> Result<(DeviceBuffer<'static>, Layout)> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle::Storage::Cpu(cpu) = &*storage else {
        candle::bail!("flash-attn-rocm: offloaded calls take CPU tensors")
    };
    let elem = t.dtype().size_in_bytes();
    let all = bytes(cpu)?;
    let data = &all[layout.start_offset() * elem..][..t.elem_count() * elem];
    Ok((upload(driver, data)?, Layout::contiguous(t.shape())))
}

/// The offloaded forward pass: what `cpu::forward` returns, computed on the GPU.
pub(crate) fn forward(
    driver: &'static Driver,
    req: &Request<'_>,
    (q, q_l): (&CpuStorage, &Layout),
    (k, k_l): (&CpuStorage, &Layout),
    (v, v_l): (&CpuStorage, &Layout),
) -> Result<(CpuStorage, Vec<f32>, AttnCall)> {
    let device = Offload { driver, ordinal: driver.current_device()? };
    let (q_d, k_d, v_d) = (upload(driver, bytes(q)?)?, upload(driver, bytes(k)?)?, upload(driver, bytes(v)?)?);
    let inputs = Inputs {
        dtypes: [q.dtype(), k.dtype(), v.dtype()],
        q: (q_d.addr(), q_l),
        k: (k_d.addr(), k_l),
        v: (v_d.addr(), v_l),
    };
    let (out_d, lse_d, call) = crate::glue::forward(&device, req, &inputs, true)?;
    let lse_d = lse_d.expect("requested");
    driver.synchronize()?;
    let mut out_bytes = vec![0u8; out_d.len()];
    driver.copy_to_host(&mut out_bytes, &out_d)?;
    let mut lse_bytes = vec![0u8; lse_d.len()];
    driver.copy_to_host(&mut lse_bytes, &lse_d)?;
    let halves: Vec<u16> = out_bytes.chunks_exact(2).map(|b| u16::from_ne_bytes([b[0], b[1]])).collect();
    let out = match call.dtype {
        DType::F16 => CpuStorage::F16(halves.into_iter().map(half::f16::from_bits).collect()),
        DType::BF16 => CpuStorage::BF16(halves.into_iter().map(half::bf16::from_bits).collect()),
        other => candle::bail!("flash-attn-rocm: no GPU output for {other:?}"),
    };
    let lse = lse_bytes.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok((out, lse, call))
}
