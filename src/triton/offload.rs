//! Verification: runs the flash-attention calls made on CPU tensors inside [`run_on_gpu`] on a
//! GPU through the Triton path (upload, launch, download), so that every public function can be
//! checked against the CPU backend on any machine with a GPU driver, with no Candle GPU device.
//!
//! It takes the product path's view of the side tensors: seqlens and block tables are checked by
//! shape only ([`AttnCall::on_device`]) and their values by the kernels, which report bad ones to
//! the fault word; a call reports the faults of earlier calls ([`super::take_faults`]) before it
//! runs, as a Candle device's call does. The split accumulators start as NaN, as recycled memory
//! may, so that a kernel reading an accumulator it never wrote shows.
use super::{launch, plan, take_faults};
use crate::gpu::{DeviceBuffer, Driver};
use crate::params::{AttnCall, Request};
use crate::rocm::DeviceBuffers;
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

/// A side tensor (seqlens, block table, slopes, ranges) on the device, contiguous, with its
/// row stride.
fn upload_tensor<'d>(driver: &'d Driver, t: &Tensor) -> Result<(DeviceBuffer<'d>, usize)> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle::Storage::Cpu(cpu) = &*storage else {
        candle::bail!("flash-attn-rocm: offloaded calls take CPU tensors")
    };
    let elem = t.dtype().size_in_bytes();
    let all = bytes(cpu)?;
    let data = &all[layout.start_offset() * elem..][..t.elem_count() * elem];
    let row_stride = if t.rank() > 1 { layout.stride()[0] } else { 0 };
    Ok((upload(driver, data)?, row_stride))
}

/// The offloaded forward pass: what `cpu::forward` returns, computed on the GPU.
pub(crate) fn forward(
    driver: &'static Driver,
    req: &Request<'_>,
    (q, q_l): (&CpuStorage, &Layout),
    (k, k_l): (&CpuStorage, &Layout),
    (v, v_l): (&CpuStorage, &Layout),
) -> Result<(CpuStorage, Vec<f32>, AttnCall)> {
    let call = AttnCall::on_device(req, [q.dtype(), k.dtype(), v.dtype()], q_l, k_l, v_l)?;
    take_faults(driver)?;
    let plan = plan(driver, &call)?;
    let (q_d, k_d, v_d) = (upload(driver, bytes(q)?)?, upload(driver, bytes(k)?)?, upload(driver, bytes(v)?)?);
    let out_len = call.total_q * call.num_heads * call.head_dim;
    // Rows the kernel does not write (past the last sequence) stay 0 and -inf, as on the CPU.
    let out_d = upload(driver, &vec![0u8; out_len * 2])?;
    let lse_len: usize = call.lse_dims().iter().product();
    let lse_init: Vec<f32> = vec![f32::NEG_INFINITY; lse_len];
    let lse_d = upload(driver, bytes(&CpuStorage::F32(lse_init))?)?;
    let (l_len, o_len) = plan.scratch_lens(&call);
    let (l_acc, o_acc) = (upload(driver, &vec![0xff; l_len * 4])?, upload(driver, &vec![0xff; o_len * 4])?);
    let mut buffers = DeviceBuffers {
        q: q_d.addr(),
        k: k_d.addr(),
        v: v_d.addr(),
        out: out_d.addr(),
        lse: lse_d.addr(),
        lse_acc: l_acc.addr(),
        o_acc: o_acc.addr(),
        ..DeviceBuffers::default()
    };
    let mut side = Vec::new();
    let mut put = |t: &Tensor| -> Result<(usize, usize)> {
        let (buffer, stride) = upload_tensor(driver, t)?;
        let addr = buffer.addr();
        side.push(buffer);
        Ok((addr, stride))
    };
    if let Some(alibi) = &call.alibi {
        buffers.alibi_slopes = put(&alibi.slopes)?.0;
    }
    if let Some(varlen) = &req.varlen {
        buffers.seqstart_q = put(varlen.seqlens_q)?.0;
        buffers.seqstart_k = put(varlen.seqlens_k)?.0;
        if let Some(table) = varlen.block_table {
            (buffers.block_table, buffers.block_table_row_stride) = put(table)?;
        }
    }
    if let Some(mm) = &call.mm_prefix {
        (buffers.mm_prefix, buffers.mm_prefix_row_stride) = put(&mm.ranges)?;
    }
    // SAFETY: every address is a live allocation of this device sized for `call` (inputs are
    // whole storages, the element offsets are in `call`), outputs are fresh, stream 0 is the
    // null stream, and the synchronize below keeps the buffers alive until the kernels ran.
    unsafe { launch(driver, &call, &plan, &buffers) }?;
    driver.synchronize()?;
    let mut out_bytes = vec![0u8; out_len * 2];
    driver.copy_to_host(&mut out_bytes, &out_d)?;
    let mut lse_bytes = vec![0u8; lse_len * 4];
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
