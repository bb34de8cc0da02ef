//! Candle glue: runs the ops' `CustomOp3::rocm_fwd` on a candle ROCm device.
//!
//! Written against the ROCm backend of candle PR #3801 (`huggingface/candle`,
//! `refs/pull/3801/head`, compile-checked at 8a17ca0a4c66b43d933b7e192db6860ee68f9c71), which
//! the released candle 0.11 does not have: the `candle-rocm` feature only compiles when the user
//! patches `candle-core` to that branch and enables its `rocm` feature (see the README). What
//! this file relies on from that branch: `RocmStorage { slice, device }`, `RocmStorageSlice::
//! {F16, BF16, F32, as_ptr, as_mut_ptr}`, `RocmDevice::{alloc, alloc_zeros, stream, id}` and
//! `candle::rocm_backend::rocm_rs`. Each call goes to CK or to our Triton kernels
//! ([`super::dispatch`]); the Triton ones are launched through HIP loaded at run time
//! ([`crate::gpu`]) on the same stream.
//!
//! Side tensors: the call is validated by shape only ([`AttnCall::on_device`]): no call copies
//! seqlens or block tables to the host. On the CK path the device-side guard
//! ([`super::guard`]) clamps them on the stream before CK reads them; the Triton kernels check
//! them as they read them. Both report out-of-range values through mapped host memory, read
//! by the next call.
//!
//! Ordering: that backend queues every operation of a device on the device's single stream and
//! recycles a freed buffer into the next allocation without synchronizing. Launching on that
//! same stream (`RocmDevice::stream().as_raw()`) is what makes reading q/k/v and writing the
//! freshly allocated output sound without any host synchronization.

use super::dispatch::{choose, Built, KernelChoice, KernelFamily};
use super::marshal::{ck_fwd_params, lse_buffer_required, DeviceBuffers};
use super::guard::{guard_params, guard_scratch_len, guard_side_tensors, guarded_buffers};
use super::splitkv::{plan_split_kv, split_kv_scratch_lens};
use crate::params::{AttnCall, Mode, Request};
use candle::rocm_backend::rocm_rs::hip::bindings as hip;
use candle::rocm_backend::RocmStorageSlice;
use candle::backend::BackendDevice;
use candle::{DType, DeviceLocation, Layout, Result, RocmDevice, RocmStorage, Storage, Tensor};
use half::{bf16, f16};

/// The op's forward pass: the output (q's dtype and shape, contiguous) and, when `want_lse`,
/// the f32 log-sum-exp laid out as [`AttnCall::lse_dims`].
pub(crate) fn forward(
    req: &Request<'_>,
    q: (&RocmStorage, &Layout),
    k: (&RocmStorage, &Layout),
    v: (&RocmStorage, &Layout),
    want_lse: bool,
) -> Result<(RocmStorage, Option<RocmStorage>)> {
    let (out, lse, _) = run(req, q, k, v, want_lse)?;
    Ok((out, lse))
}

/// [`forward`] with the LSE always computed, returned with its dims.
pub(crate) fn forward_with_lse_dims(
    req: &Request<'_>,
    q: (&RocmStorage, &Layout),
    k: (&RocmStorage, &Layout),
    v: (&RocmStorage, &Layout),
) -> Result<((RocmStorage, RocmStorage), Vec<usize>)> {
    let (out, lse, call) = run(req, q, k, v, true)?;
    let lse = lse.expect("run allocates the LSE when asked for it");
    Ok(((out, lse), call.lse_dims()))
}

fn run(
    req: &Request<'_>,
    (q, q_l): (&RocmStorage, &Layout),
    (k, k_l): (&RocmStorage, &Layout),
    (v, v_l): (&RocmStorage, &Layout),
    want_lse: bool,
) -> Result<(RocmStorage, Option<RocmStorage>, AttnCall)> {
    let dev = &q.device;
    for (name, s) in [("k", k), ("v", v)] {
        if s.device.id() != dev.id() {
            candle::bail!("flash-attn-rocm: {name} is on another ROCm device than q")
        }
    }
    let dtypes = [q.slice.dtype(), k.slice.dtype(), v.slice.dtype()];
    let call = AttnCall::on_device(req, dtypes, q_l, k_l, v_l)?;
    // HIP's current device is per thread: make q's current so that the device queries and
    // launches below act on it, and give the caller's thread its own device back afterwards.
    let driver = crate::gpu::Driver::hip()?;
    let DeviceLocation::Rocm { gpu_id } = dev.location() else {
        candle::bail!("flash-attn-rocm: q's storage is not on a ROCm device")
    };
    let (out, lse) = crate::gpu::with_device(driver, gpu_id as i32, || queue(driver, req, &call, q, k, v, want_lse))?;
    Ok((out, lse, call))
}

/// Allocates the outputs of `call` and queues its kernels on q's device, which is current.
fn queue(
    driver: &'static crate::gpu::Driver,
    req: &Request<'_>,
    call: &AttnCall,
    q: &RocmStorage,
    k: &RocmStorage,
    v: &RocmStorage,
    want_lse: bool,
) -> Result<(RocmStorage, Option<RocmStorage>)> {
    let dev = &q.device;
    let out_len = call.total_q * call.num_heads * call.head_dim;
    let stream = dev.stream().as_raw();
    let (_, info) = crate::triton::current_device(driver)?;
    let built = Built { ck_archs: super::CK_ARCHS, ck_hdims: super::CK_HDIMS, ck_splitkv_hdims: super::CK_SPLITKV_HDIMS, triton: crate::triton::KERNELS };
    let family = choose(call, &info.arch, KernelChoice::from_env()?, &built)?;
    // Both families read the seqlens and block table where they lie, on the device, and check
    // them there (CK: the guard kernel; Triton: the kernels themselves). Out-of-range values
    // found by an earlier call of either family fail this one, without synchronizing.
    super::take_side_tensor_errors()?;
    crate::triton::take_faults(driver)?;
    // Rows of sequences are written by the kernels; rows past the last sequence get what the
    // CPU backend returns (output 0, LSE -inf). CK is not launched for a call without keys
    // (flash-attention's CK backend skips seqlen_k == 0), so its rows are prefilled too. With
    // the seqlens left on the device, every row is prefilled (the guard may empty sequences).
    let (rows_written, any_keys) = match call.seqs.unread() {
        None => (
            call.seqs.iter().map(|s| s.q_len).sum(),
            call.seqs.iter().any(|s| s.q_len > 0 && s.k_len > 0),
        ),
        Some(_) => (0, call.max_seqlen_q > 0 && call.max_seqlen_k > 0),
    };
    let launched = match family {
        KernelFamily::Ck => any_keys,
        KernelFamily::Triton(_) => true,
    };
    let prefill = !launched || rows_written < call.total_q;
    let mut out = alloc_out(dev, call.dtype, out_len, prefill)?;
    let lse_len = call.lse_dims().iter().product();
    // Scratch when the kernel needs one the caller does not want (CK's LSE-writing build, and
    // the Triton kernels always); dropped after the call, the stream orders its reuse.
    let lse_buffer = want_lse || matches!(family, KernelFamily::Triton(_)) || lse_buffer_required(call);
    let lse = lse_buffer.then(|| dev.alloc::<f32>(lse_len)).transpose()?;
    if let (true, Some(lse)) = (prefill, &lse) {
        fill_f32(lse.as_ptr(), f32::NEG_INFINITY, lse_len, stream)?;
    }
    if launched {
        let mut buffers = DeviceBuffers {
            q: q.slice.as_ptr() as usize,
            k: k.slice.as_ptr() as usize,
            v: v.slice.as_ptr() as usize,
            out: out.as_mut_ptr() as usize,
            lse: lse.as_ref().map_or(0, |l| l.as_ptr() as usize),
            stream: stream as usize,
            ..DeviceBuffers::default()
        };
        attach_side_tensors(req, call, dev, &mut buffers)?;
        match family {
            KernelFamily::Ck => launch_ck(call, dev, info.units, buffers)?,
            KernelFamily::Triton(kernels) => launch_triton(driver, call, dev, kernels, info.units, buffers)?,
        }
    }
    let out = RocmStorage { slice: out, device: dev.clone() };
    let lse = lse.filter(|_| want_lse).map(|l| RocmStorage { slice: RocmStorageSlice::F32(l), device: dev.clone() });
    Ok((out, lse))
}

/// Queues CK's kernels; paged calls split their keys over the device's `units` compute units
/// (cached per device), with accumulators from candle's allocator, freed once queued, which
/// the stream orders after the kernel.
fn launch_ck(call: &AttnCall, dev: &RocmDevice, units: usize, mut buffers: DeviceBuffers) -> Result<()> {
    let guard_scratch = (call.mode != Mode::Batch).then(|| dev.alloc::<u32>(guard_scratch_len(call))).transpose()?;
    let guard = match &guard_scratch {
        Some(scratch) => guard_params(call, &buffers, scratch.as_ptr() as usize)?,
        None => None,
    };
    if let Some(guard) = guard {
        // SAFETY: the inputs are the caller's seqlens/table (checked by shape against `call`),
        // the outputs the scratch just allocated with `guard_scratch_len` elements; all stay
        // alive until the stream has run the guard (as for the kernels below).
        unsafe { guard_side_tensors(&guard) }?;
        buffers = guarded_buffers(&buffers, &guard);
    }
    let split = match call.mode {
        Mode::Paged => Some(plan_split_kv(call, super::CK_SPLITKV_HDIMS, units)?),
        _ => None,
    };
    let scratch = match &split {
        Some(split) => {
            let (lse_len, o_len) = split_kv_scratch_lens(call, split);
            Some((dev.alloc::<f32>(lse_len)?, dev.alloc::<f32>(o_len)?))
        }
        None => None,
    };
    if let Some((lse_acc, o_acc)) = &scratch {
        buffers.lse_acc = lse_acc.as_ptr() as usize;
        buffers.o_acc = o_acc.as_ptr() as usize;
    }
    let params = ck_fwd_params(call, &buffers, split.as_ref())?;
    // SAFETY: q/k/v and the side tensors are live allocations of this device that
    // `AttnCall::new` checked against the sizes and strides in `params`; the output and LSE
    // were just allocated with the sizes CK writes and alias nothing. All of them stay valid
    // until the kernel has run: it is queued on the device's own stream, and the allocator
    // hands a freed block only to work queued later on that same stream. The device is
    // current on this thread (set by `run`), as the stream requires.
    unsafe { super::fmha_fwd(&params) }
}

/// Queues the Triton `kernels` the dispatch selected, with split accumulators from candle's allocator (ordered by the
/// stream as in `launch_ck`).
fn launch_triton(
    driver: &'static crate::gpu::Driver,
    call: &AttnCall,
    dev: &RocmDevice,
    kernels: crate::triton::Kernels,
    units: usize,
    mut buffers: DeviceBuffers,
) -> Result<()> {
    let plan = crate::triton::Plan::new(call, kernels, units)?;
    let (l_len, o_len) = plan.scratch_lens(call);
    let scratch = (plan.num_splits > 1)
        .then(|| Ok::<_, candle::Error>((dev.alloc::<f32>(l_len)?, dev.alloc::<f32>(o_len)?)))
        .transpose()?;
    if let Some((l_acc, o_acc)) = &scratch {
        buffers.lse_acc = l_acc.as_ptr() as usize;
        buffers.o_acc = o_acc.as_ptr() as usize;
    }
    // SAFETY: as in `launch_ck`: every address is a live allocation of this device checked
    // against `call` (the accumulators sized by the plan), queued on the device's own stream,
    // with the device current on this thread.
    unsafe { crate::triton::launch(driver, call, &plan, &buffers) }
}

/// A fresh output buffer of `dtype`; zeroed when the kernel will not write every row.
fn alloc_out(dev: &RocmDevice, dtype: DType, len: usize, zeroed: bool) -> Result<RocmStorageSlice> {
    macro_rules! alloc {
        ($variant:ident, $t:ty) => {
            RocmStorageSlice::$variant(if zeroed {
                dev.alloc_zeros::<$t>(len)?
            } else {
                dev.alloc::<$t>(len)?
            })
        };
    }
    Ok(match dtype {
        DType::F16 => alloc!(F16, f16),
        DType::BF16 => alloc!(BF16, bf16),
        other => candle::bail!("flash-attn-rocm: no CK output for dtype {other:?}"),
    })
}

/// Fills `len` f32 values at `ptr` with `value`, queued on `stream`.
fn fill_f32(
    ptr: *mut std::ffi::c_void,
    value: f32,
    len: usize,
    stream: hip::hipStream_t,
) -> Result<()> {
    // SAFETY: `ptr` is a device allocation of at least `len` f32 values, and `stream` is the
    // owning device's stream, which orders the fill before anything that reads the buffer.
    let status = unsafe {
        hip::hipMemsetD32Async(
            ptr as hip::hipDeviceptr_t,
            value.to_bits() as i32,
            len,
            stream,
        )
    };
    if status != hip::hipError_t_hipSuccess {
        candle::bail!("flash-attn-rocm: hipMemsetD32Async failed with HIP error {status}")
    }
    Ok(())
}

/// Points `buffers` at the side tensors the kernels read in place: the ALiBi slopes (f32), the
/// `mm_prefix_ranges` (i32, Triton only), the cumulative seqlens (u32, read as i32: they index
/// q/k rows, so they fit) and the block table (u32 or i32, read as i32) with its row stride.
fn attach_side_tensors(
    req: &Request<'_>,
    call: &AttnCall,
    dev: &RocmDevice,
    buffers: &mut DeviceBuffers,
) -> Result<()> {
    if let Some(alibi) = &call.alibi {
        buffers.alibi_slopes = device_addr(&alibi.slopes, "alibi_slopes", dev)?.0;
    }
    if let Some(mm) = &call.mm_prefix {
        let (addr, layout) = device_addr(&mm.ranges, "mm_prefix_ranges", dev)?;
        buffers.mm_prefix = addr;
        buffers.mm_prefix_row_stride = layout.stride()[0];
    }
    let Some(varlen) = req.varlen else {
        return Ok(());
    };
    buffers.seqstart_q = device_addr(varlen.seqlens_q, "seqlens_q", dev)?.0;
    buffers.seqstart_k = device_addr(varlen.seqlens_k, "seqlens_k", dev)?.0;
    if let Some(table) = varlen.block_table {
        let (addr, layout) = device_addr(table, "block_table", dev)?;
        if layout.stride()[1] != 1 {
            candle::bail!("flash-attn-rocm: block_table's last dim must be contiguous")
        }
        buffers.block_table = addr;
        buffers.block_table_row_stride = layout.stride()[0];
    }
    Ok(())
}

/// Address of the first element of `t` on `dev`, and its layout.
///
/// The storage's read guard is released on return. It would protect nothing the kernel needs:
/// the kernel runs later anyway, ordered by the device stream, and `t` (borrowed from the
/// request) keeps its allocation alive until the kernel has been queued.
fn device_addr(t: &Tensor, name: &str, dev: &RocmDevice) -> Result<(usize, Layout)> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Rocm(s) if s.device.id() == dev.id() => {
            let addr =
                s.slice.as_ptr() as usize + layout.start_offset() * t.dtype().size_in_bytes();
            Ok((addr, layout.clone()))
        }
        _ => candle::bail!(
            "flash-attn-rocm: {name} must be on the same ROCm device as q, got {:?}",
            t.device().location()
        ),
    }
}
