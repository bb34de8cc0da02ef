//! The adapter of Candle's CUDA device (released candle, feature `cuda`) to the one forward path:
//! the ops' `CustomOp3::cuda_fwd`, running our Triton kernels (compiled to cubins for the
//! NVIDIA targets of the build) on Candle CUDA tensors.
//!
//! Candle's device owns a cudarc context (the device's primary context) and a stream; our
//! kernels are loaded into that same primary context by [`crate::gpu`] and queued on that
//! stream (`CudaStream::cu_stream`). cudarc tracks each buffer's reads and writes with events
//! when several streams share it: the addresses are taken with `device_ptr`/`device_ptr_mut`,
//! whose guards record our accesses on the stream, and held until the kernels are queued.

use super::{GpuDevice, Inputs};
use crate::gpu::Driver;
use crate::params::Request;
use candle::backend::{BackendDevice, BackendStorage};
use candle::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut, SyncOnDrop};
use candle::cuda_backend::{CudaStorageSlice, CudaDevice};
use candle::{CudaStorage, DType, DeviceLocation, Layout, Result, Storage, Tensor};
use half::{bf16, f16};

/// A slice's device address and the guard that records the access on `stream` when dropped;
/// `$dtype` names the slice's dtype when it is none of the variants the path reads.
macro_rules! address {
    ($slice:expr, $method:ident, $stream:expr, $dtype:expr, [$($variant:ident),*]) => {
        match $slice {
            $(CudaStorageSlice::$variant(s) => {
                let (addr, guard) = s.$method($stream);
                (addr as usize, guard)
            })*
            _ => candle::bail!("flash-attn-rocm: the GPU path takes no {:?} tensor here", $dtype),
        }
    };
}

impl GpuDevice for CudaDevice {
    type Buffer = CudaStorageSlice;

    fn driver(&self) -> Result<&'static Driver> {
        Ok(Driver::cuda()?)
    }

    fn ordinal(&self) -> i32 {
        match self.location() {
            DeviceLocation::Cuda { gpu_id } => gpu_id as i32,
            other => unreachable!("a CUDA device at {other:?}"),
        }
    }

    fn stream(&self) -> usize {
        self.cuda_stream().cu_stream() as usize
    }

    fn alloc(&self, dtype: DType, len: usize, zeroed: bool) -> Result<CudaStorageSlice> {
        // cuMemAllocAsync refuses 0 bytes; a call without query rows gets a one-element buffer
        // (a storage may be longer than its tensor).
        let len = len.max(1);
        macro_rules! alloc {
            ($variant:ident, $t:ty) => {
                CudaStorageSlice::$variant(if zeroed {
                    self.alloc_zeros::<$t>(len)?
                } else {
                    // SAFETY: the forward path writes every element it later reads (the
                    // kernels' rows, the accumulators of the programs that read them, the
                    // prefilled LSE), or asks for a zeroed buffer.
                    unsafe { self.alloc::<$t>(len)? }
                })
            };
        }
        Ok(match dtype {
            DType::F16 => alloc!(F16, f16),
            DType::BF16 => alloc!(BF16, bf16),
            DType::F32 => alloc!(F32, f32),
            DType::U32 => alloc!(U32, u32),
            other => candle::bail!("flash-attn-rocm: no {other:?} buffers on the GPU path"),
        })
    }

    fn with_addresses<R>(
        &self,
        tensors: &[&Tensor],
        buffers: &mut [&mut CudaStorageSlice],
        queue: impl FnOnce(&[(usize, Layout)], &[usize]) -> Result<R>,
    ) -> Result<R> {
        let stream = self.cuda_stream();
        let storages: Vec<_> = tensors.iter().map(|t| t.storage_and_layout()).collect();
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(tensors.len() + buffers.len());
        let mut side = Vec::with_capacity(tensors.len());
        for ((storage, layout), t) in storages.iter().zip(tensors) {
            let Storage::Cuda(s) = &**storage else {
                candle::bail!("flash-attn-rocm: side tensors must be on q's CUDA device, got one on {:?}", t.device().location())
            };
            if !s.device.same_device(self) {
                candle::bail!("flash-attn-rocm: side tensors must be on q's CUDA device")
            }
            let (base, guard) = address!(&s.slice, device_ptr, &stream, t.dtype(), [U32, I32, F32]);
            guards.push(guard);
            side.push((base + layout.start_offset() * t.dtype().size_in_bytes(), (*layout).clone()));
        }
        let mut addrs = Vec::with_capacity(buffers.len());
        for buffer in buffers.iter_mut() {
            let (addr, guard) = address!(&mut **buffer, device_ptr_mut, &stream, "this", [F16, BF16, F32, U32]);
            guards.push(guard);
            addrs.push(addr);
        }
        let result = queue(&side, &addrs);
        drop(guards);
        result
    }
}

/// The op's forward pass on CUDA storages: the output and, when `want_lse`, the f32
/// log-sum-exp with its dims.
pub(crate) fn forward(
    req: &Request<'_>,
    (q, q_l): (&CudaStorage, &Layout),
    (k, k_l): (&CudaStorage, &Layout),
    (v, v_l): (&CudaStorage, &Layout),
    want_lse: bool,
) -> Result<(CudaStorage, Option<(CudaStorage, Vec<usize>)>)> {
    let dev = &q.device;
    for (name, s) in [("k", k), ("v", v)] {
        if !s.device.same_device(dev) {
            candle::bail!("flash-attn-rocm: {name} is on another CUDA device than q")
        }
    }
    let stream = dev.cuda_stream();
    let (q_addr, _q_read) = address!(&q.slice, device_ptr, &stream, q.dtype(), [F16, BF16, F32]);
    let (k_addr, _k_read) = address!(&k.slice, device_ptr, &stream, k.dtype(), [F16, BF16, F32]);
    let (v_addr, _v_read) = address!(&v.slice, device_ptr, &stream, v.dtype(), [F16, BF16, F32]);
    let inputs = Inputs {
        dtypes: [q.dtype(), k.dtype(), v.dtype()],
        q: (q_addr, q_l),
        k: (k_addr, k_l),
        v: (v_addr, v_l),
    };
    let (out, lse, call) = super::forward(dev, req, &inputs, want_lse)?;
    let wrap = |slice| CudaStorage { slice, device: dev.clone() };
    Ok((wrap(out), lse.map(|l| (wrap(l), call.lse_dims()))))
}
