//! The adapter of candle PR #3801's ROCm device (`huggingface/candle`, `refs/pull/3801/head`,
//! compile-checked at 8a17ca0a4c66b43d933b7e192db6860ee68f9c71) to the one forward path: the
//! ops' `CustomOp3::rocm_fwd`. The released candle 0.11 has no ROCm device: the `candle-rocm`
//! feature only compiles with `candle-core` patched to that branch with its `rocm` feature (see
//! the README). What it relies on from that branch: `RocmStorage { slice, device }`,
//! `RocmStorageSlice::{F16, BF16, F32, U32, as_ptr, as_mut_ptr}`,
//! `RocmDevice::{alloc, alloc_zeros, stream, id}`.
//!
//! Ordering: that backend queues every operation of a device on the device's single stream and
//! recycles a freed buffer into the next allocation without synchronizing. Launching on that
//! same stream (`RocmDevice::stream().as_raw()`) is what makes reading q/k/v and writing the
//! freshly allocated output sound without any host synchronization.

use super::{GpuDevice, Inputs};
use crate::gpu::Driver;
use crate::params::Request;
use candle::backend::BackendDevice;
use candle::rocm_backend::RocmStorageSlice;
use candle::{DType, DeviceLocation, Layout, Result, RocmDevice, RocmStorage, Storage, Tensor};
use half::{bf16, f16};

impl GpuDevice for RocmDevice {
    type Buffer = RocmStorageSlice;

    fn driver(&self) -> Result<&'static Driver> {
        Ok(Driver::hip()?)
    }

    fn ordinal(&self) -> i32 {
        match self.location() {
            DeviceLocation::Rocm { gpu_id } => gpu_id as i32,
            other => unreachable!("a ROCm device at {other:?}"),
        }
    }

    fn stream(&self) -> usize {
        self.stream().as_raw() as usize
    }

    fn alloc(&self, dtype: DType, len: usize, zeroed: bool) -> Result<RocmStorageSlice> {
        macro_rules! alloc {
            ($variant:ident, $t:ty) => {
                RocmStorageSlice::$variant(if zeroed { self.alloc_zeros::<$t>(len)? } else { self.alloc::<$t>(len)? })
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

    /// The storages' read guards are released before `queue` runs. They would protect nothing
    /// the kernels need: the kernels run later anyway, ordered by the device's stream, and the
    /// tensors (borrowed from the request) keep their allocations alive until they are queued.
    fn with_addresses<R>(
        &self,
        tensors: &[&Tensor],
        buffers: &mut [&mut RocmStorageSlice],
        queue: impl FnOnce(&[(usize, Layout)], &[usize]) -> Result<R>,
    ) -> Result<R> {
        let side = tensors.iter().map(|t| tensor_address(self, t)).collect::<Result<Vec<_>>>()?;
        let addrs: Vec<usize> = buffers.iter_mut().map(|b| b.as_mut_ptr() as usize).collect();
        queue(&side, &addrs)
    }
}

/// Address of the first element of `t` on `dev`, and its layout.
fn tensor_address(dev: &RocmDevice, t: &Tensor) -> Result<(usize, Layout)> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Rocm(s) if s.device.id() == dev.id() => {
            let addr = s.slice.as_ptr() as usize + layout.start_offset() * t.dtype().size_in_bytes();
            Ok((addr, layout.clone()))
        }
        _ => candle::bail!(
            "flash-attn-rocm: side tensors must be on q's ROCm device, got one on {:?}",
            t.device().location()
        ),
    }
}

/// The op's forward pass on ROCm storages: the output and, when `want_lse`, the f32
/// log-sum-exp with its dims.
pub(crate) fn forward(
    req: &Request<'_>,
    (q, q_l): (&RocmStorage, &Layout),
    (k, k_l): (&RocmStorage, &Layout),
    (v, v_l): (&RocmStorage, &Layout),
    want_lse: bool,
) -> Result<(RocmStorage, Option<(RocmStorage, Vec<usize>)>)> {
    let dev = &q.device;
    for (name, s) in [("k", k), ("v", v)] {
        if s.device.id() != dev.id() {
            candle::bail!("flash-attn-rocm: {name} is on another ROCm device than q")
        }
    }
    let inputs = Inputs {
        dtypes: [q.slice.dtype(), k.slice.dtype(), v.slice.dtype()],
        q: (q.slice.as_ptr() as usize, q_l),
        k: (k.slice.as_ptr() as usize, k_l),
        v: (v.slice.as_ptr() as usize, v_l),
    };
    let (out, lse, call) = super::forward(dev, req, &inputs, want_lse)?;
    let wrap = |slice| RocmStorage { slice, device: dev.clone() };
    Ok((wrap(out), lse.map(|l| (wrap(l), call.lse_dims()))))
}
