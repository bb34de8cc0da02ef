//! The one GPU forward path of every device: a call's validation by shape, the choice of kernel
//! family, the output and log-sum-exp buffers, the rows no kernel writes, the side tensors and
//! the launch on the device's stream, written once over [`GpuDevice`].
//!
//! A device adapter only says how its memory is allocated and addressed, which driver and
//! stream it uses: candle PR #3801's ROCm device (`candle-rocm`), Candle's CUDA device
//! (`candle-cuda`), CPU tensors offloaded to a GPU for verification
//! ([`crate::glue::offload`]), and any other device (a Candle fork's, rocm-rs buffers) through
//! an implementation of [`GpuDevice`] and a call of [`forward`]; see the trait's example.

#[cfg(feature = "candle-cuda")]
pub(crate) mod candle_cuda;
#[cfg(feature = "candle-rocm")]
pub(crate) mod candle_rocm;
pub mod offload;
mod scratch;

use crate::device::DeviceBuffers;
use crate::gpu::{with_device, Api, DeviceInfo, Driver};
use crate::params::{
    block_table_for_kernels, pairs_of_each_sequence_consecutive, prefix_ranges_for_kernels, rows_of_consecutive_ids, AttnCall, Request,
};
use crate::explain::GpuWork;
use crate::plan::dispatch::{choose, KernelChoice, KernelFamily};
use crate::plan::work::{lse_buffer, side_row_strides, Work};
use crate::Dispatch;
use candle::{DType, Layout, Result, Tensor};
use scratch::Scratch;

/// A GPU device as the forward path needs it. Everything it queues goes on [`GpuDevice::stream`],
/// and the allocator must order the reuse of a freed buffer after the work queued on that
/// stream (Candle's devices do: one stream per device, or stream-ordered frees), because the
/// path drops its scratch buffers as soon as the kernels are queued, without synchronizing.
///
/// # Example: a fork's device
///
/// A fork of Candle with its own ROCm storage calls the path from its op like this (here with
/// plain HIP allocations standing in for the fork's allocator; the fork would return its own
/// buffer type and wrap the output into its storage):
///
/// ```no_run
/// use flash_attn_rocm::candle::{DType, Layout, Result, Tensor};
/// use flash_attn_rocm::glue::{forward, GpuDevice, Inputs};
/// use flash_attn_rocm::gpu::{DeviceBuffer, Driver};
/// use flash_attn_rocm::params::Request;
///
/// struct ForkDevice {
///     ordinal: i32,
///     stream: usize, // the fork's hipStream_t
/// }
///
/// impl GpuDevice for ForkDevice {
///     type Buffer = DeviceBuffer<'static>;
///     fn driver(&self) -> Result<&'static Driver> {
///         Ok(Driver::hip()?)
///     }
///     fn ordinal(&self) -> i32 {
///         self.ordinal
///     }
///     fn stream(&self) -> usize {
///         self.stream
///     }
///     fn alloc(&self, dtype: DType, len: usize, zeroed: bool) -> Result<Self::Buffer> {
///         let driver = self.driver()?;
///         // Whole u32 words, so that the fill below covers every byte.
///         let buffer = driver.malloc((len * dtype.size_in_bytes()).next_multiple_of(4))?;
///         if zeroed {
///             // SAFETY: the fill covers the buffer just allocated, on this device's stream,
///             // before any kernel that reads it.
///             unsafe { driver.fill_u32_async(buffer.addr(), 0, buffer.len() / 4, self.stream) }?;
///         }
///         Ok(buffer)
///     }
///     fn with_addresses<R>(
///         &self,
///         tensors: &[&Tensor],
///         buffers: &mut [&mut Self::Buffer],
///         queue: impl FnOnce(&[(usize, Layout)], &[usize]) -> Result<R>,
///     ) -> Result<R> {
///         // The fork resolves its side tensors (seqlens, block table) to device addresses.
///         let side = tensors.iter().map(|t| fork_address(t)).collect::<Result<Vec<_>>>()?;
///         let addrs: Vec<usize> = buffers.iter().map(|b| b.addr()).collect();
///         queue(&side, &addrs)
///     }
/// }
/// # fn fork_address(t: &Tensor) -> Result<(usize, Layout)> { unimplemented!() }
///
/// fn fork_rocm_fwd(dev: &ForkDevice, req: &Request, q: (usize, &Layout), k: (usize, &Layout), v: (usize, &Layout)) -> Result<()> {
///     let inputs = Inputs { dtypes: [DType::F16; 3], q, k, v };
///     let (out, _lse, call) = forward(dev, req, &inputs, false)?;
///     // `out` holds `call.total_q * call.num_heads * call.head_dim` f16 values, queued on the
///     // fork's stream.
///     # let _ = (out, call);
///     Ok(())
/// }
/// ```
pub trait GpuDevice {
    /// A device allocation; dropping it after the work is queued must be safe (see above).
    type Buffer;
    /// The driver of the device's API: [`Driver::hip`] or [`Driver::cuda`].
    fn driver(&self) -> Result<&'static Driver>;
    /// The device's ordinal in that driver; made current on the calling thread for the call.
    fn ordinal(&self) -> i32;
    /// The raw stream (`hipStream_t` / `CUstream`) every kernel of the call is queued on.
    fn stream(&self) -> usize;
    /// A fresh buffer of `len` elements of `dtype` (f16, bf16, f32 or u32), all zero bits when
    /// `zeroed`, else of any content.
    fn alloc(&self, dtype: DType, len: usize, zeroed: bool) -> Result<Self::Buffer>;
    /// Runs `queue` with the device addresses of `tensors` (the request's side tensors: seqlens,
    /// block table, ALiBi slopes, prefix ranges; each the address of its first element, with its
    /// layout as the kernels will read it) and of `buffers` (read and written by the kernels),
    /// keeping whatever orders their use on the stream (e.g. cudarc's access events) alive until
    /// `queue` returns. A tensor that is not on this device is an `Err`.
    fn with_addresses<R>(
        &self,
        tensors: &[&Tensor],
        buffers: &mut [&mut Self::Buffer],
        queue: impl FnOnce(&[(usize, Layout)], &[usize]) -> Result<R>,
    ) -> Result<R>;
}

/// q, k and v of a call: the base address of each storage on the device (the layouts' start
/// offsets are added by the path) with its layout, and their dtypes (which must agree).
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// q's, k's and v's dtypes; f16 or bf16, all three the same (an `Err` otherwise).
    pub dtypes: [DType; 3],
    /// q: `(b, s_q, h, d)` in batch mode, `(total_q, h, d)` otherwise.
    pub q: (usize, &'a Layout),
    /// k: `(b, s_k, h_k, d)`, `(total_k, h_k, d)`, or paged `(num_blocks, page, h_k, d)`.
    pub k: (usize, &'a Layout),
    /// v: k's shape.
    pub v: (usize, &'a Layout),
}

/// The forward pass of `req` on `device`: the output (q's dtype, `(b, s_q, h, d)` or
/// `(total_q, h, d)`, contiguous), the f32 log-sum-exp laid out as [`AttnCall::lse_dims`] when
/// `want_lse`, and the validated call. Everything is queued on the device's stream; nothing
/// waits for the GPU. Side tensors are checked by shape here and by the kernels for their
/// values, which report out-of-range ones to this thread: its next call on the same stream
/// fails (see the crate's [errors](crate#errors) and [`crate::take_gpu_faults`]). On a device
/// whose atomics on host memory the bus may drop ([`reports_faults_to_the_host`]), the values
/// are read and checked on the host first instead, as [`AttnCall::new`] does.
pub fn forward<D: GpuDevice>(
    device: &D,
    req: &Request<'_>,
    inputs: &Inputs<'_>,
    want_lse: bool,
) -> Result<(D::Buffer, Option<D::Buffer>, AttnCall)> {
    let on_device = AttnCall::on_device(req, inputs.dtypes, inputs.q.1, inputs.k.1, inputs.v.1)?;
    let driver = device.driver()?;
    // The device's API keeps a current device per thread: make this one current for the
    // queries and launches, and give the caller's thread its own back afterwards.
    with_device(driver, device.ordinal(), || {
        let (_, info) = crate::gpu::current_device(driver)?;
        let call = match on_device.seqs.unread() {
            Some(_) if !reports_faults_to_the_host(driver, &info) => {
                AttnCall::new(req, inputs.dtypes, inputs.q.1, inputs.k.1, inputs.v.1)?
            }
            _ => on_device,
        };
        let (out, lse) = queue(device, driver, &info, req, &call, inputs, want_lse)?;
        Ok((out, lse, call))
    })
}

/// Whether the kernels' fault bits reach the host's fault words on this device. HIP requires
/// PCIe atomics (host-native atomics) for device atomics on host memory: without them an
/// `atomic_or` may be dropped. CUDA performs such atomics without them, only not atomically with
/// respect to the host, which the host's swap tolerates (a bit may be read twice, never lost).
pub fn reports_faults_to_the_host(driver: &Driver, info: &DeviceInfo) -> bool {
    info.limits.host_native_atomics || driver.api() == Api::Cuda
}

/// The build's kernels as [`choose`] weighs them: CK where this build has it, and the
/// embedded Triton images.
fn built() -> crate::plan::dispatch::Built<'static> {
    #[cfg(feature = "rocm")]
    let (ck_archs, ck_hdims, ck_splitkv_hdims) = (crate::rocm::CK_ARCHS, crate::rocm::CK_HDIMS, crate::rocm::CK_SPLITKV_HDIMS);
    #[cfg(not(feature = "rocm"))]
    let (ck_archs, ck_hdims, ck_splitkv_hdims) = ("", "", "");
    crate::plan::dispatch::Built { ck_archs, ck_hdims, ck_splitkv_hdims, triton: crate::triton::KERNELS }
}

/// Allocates the outputs of `call` and queues its kernels on `device`, which is current.
fn queue<D: GpuDevice>(
    device: &D,
    driver: &'static Driver,
    info: &DeviceInfo,
    req: &Request<'_>,
    call: &AttnCall,
    inputs: &Inputs<'_>,
    want_lse: bool,
) -> Result<(D::Buffer, Option<D::Buffer>)> {
    let built = built();
    let family = choose(call, &info.arch, info.limits, KernelChoice::from_env()?, &built)?;
    let work = Work::plan(call, family, info.units, &built)?;
    let launched = !matches!(work, Work::Nothing);
    // Rows of sequences are written by the kernels; rows past the last sequence get what the
    // CPU backend returns (output 0, LSE -inf), and so do all rows when nothing is launched.
    // With the seqlens left on the device, every row is prefilled (the kernels may empty
    // sequences).
    let rows_written: usize = match call.seqs.unread() {
        None => call.seqs.iter().map(|s| s.q_len).sum(),
        Some(_) => 0,
    };
    // Told (and, under `explain`, stopped) before anything with a side effect: the fault words
    // below, the allocations.
    crate::explain::chosen(|| Ok(dispatch(driver, device.ordinal(), info, req, call, (family, &built), &work)))?;
    // Both families read the seqlens and block table where they lie and check them there (CK:
    // the guard kernel; Triton: the kernels themselves), reporting to the call's own fault word.
    // Out-of-range values found in this thread's earlier calls on this stream fail this one,
    // once per bad call, without synchronizing; other threads' and streams' calls are not seen.
    let stream = device.stream();
    crate::params::faults::faults_to_result(driver.take_stream_faults(device.ordinal(), stream)?)?;
    let prefill = !launched || rows_written < call.total_q;
    let mut out = device.alloc(call.dtype, call.total_q * call.num_heads * call.head_dim, prefill)?;
    let lse_len: usize = call.lse_dims().iter().product();
    // An LSE buffer also when the kernels write one the caller does not want; dropped after the
    // call.
    let writes_lse = lse_buffer(call, family, want_lse);
    let mut lse = writes_lse.then(|| device.alloc(DType::F32, lse_len, false)).transpose()?;
    let mut scratch = Scratch::allocate(device, call, work)?;
    let table = req.varlen.and_then(|v| v.block_table).map(block_table_for_kernels).transpose()?;
    let ranges = call.mm_prefix.as_ref().map(prefix_ranges_for_kernels).transpose()?;
    let side = side_tensors(req, call, table.as_ref(), ranges.as_ref());
    let mut buffers: Vec<&mut D::Buffer> = std::iter::once(&mut out).chain(lse.as_mut()).chain(scratch.buffers.iter_mut()).collect();
    device.with_addresses(&side, &mut buffers, |side_addrs, addrs| {
        let lse_addr = if writes_lse { addrs[1] } else { 0 };
        if prefill && lse_addr != 0 {
            // SAFETY: the LSE buffer was just allocated with `lse_len` f32 values on this
            // device, and the fill is queued on its stream before any kernel that writes it.
            unsafe { driver.fill_u32_async(lse_addr, f32::NEG_INFINITY.to_bits(), lse_len, stream) }?;
        }
        if !launched {
            return Ok(());
        }
        let mut buffers = DeviceBuffers {
            q: inputs.q.0,
            k: inputs.k.0,
            v: inputs.v.0,
            out: addrs[0],
            lse: lse_addr,
            stream,
            ..DeviceBuffers::default()
        };
        attach_side_tensors(req, call, side_addrs, &mut buffers)?;
        let scratch_addrs = &addrs[1 + usize::from(writes_lse)..];
        driver.queue_with_fault_word(device.ordinal(), stream, |fault| {
            scratch::launch(driver, call, &scratch.work, DeviceBuffers { fault, ..buffers }, scratch_addrs)
        })
    })?;
    drop(scratch);
    Ok((out, lse.filter(|_| want_lse)))
}

/// What `work` (planned for `call` on the current device of `driver`, `ordinal`) runs, as
/// [`crate::explain`] reports it.
fn dispatch(
    driver: &Driver,
    ordinal: i32,
    info: &DeviceInfo,
    req: &Request<'_>,
    call: &AttnCall,
    (family, built): (KernelFamily, &crate::plan::dispatch::Built),
    work: &Work,
) -> Dispatch {
    let device = format!("{}:{ordinal}:{}", driver.api(), info.arch);
    let work = match work {
        Work::Nothing => GpuWork::Nothing(family),
        // The image the launch takes (`Kernels::fwd_for`): the 32-bit twin when every tensor
        // spans under 2 GiB, which depends on the side tensors' row strides as attached below.
        Work::Triton(plan) => GpuWork::Triton { plan, fwd: plan.kernels.fwd_for(call, plan.num_splits, &side_row_strides(req, call)) },
        Work::Ck { split, .. } => GpuWork::Ck { tile: built.ck_fwd_tile(call.head_dim).unwrap_or(call.head_dim), split: split.as_ref() },
    };
    Dispatch::gpu(device, &info.arch, call, work)
}

/// The request's side tensors the kernels read in place, in the order
/// [`attach_side_tensors`] takes their addresses; `table` and `ranges` are the request's block
/// table and prefix ranges as the kernels read them ([`block_table_for_kernels`],
/// [`prefix_ranges_for_kernels`]).
fn side_tensors<'a>(req: &Request<'a>, call: &'a AttnCall, table: Option<&'a Tensor>, ranges: Option<&'a Tensor>) -> Vec<&'a Tensor> {
    let mut side = Vec::new();
    side.extend(call.alibi.as_ref().map(|a| &a.slopes));
    side.extend(ranges);
    if let Some(varlen) = req.varlen {
        side.extend([varlen.seqlens_q, varlen.seqlens_k]);
        side.extend(table);
    }
    side
}

/// Points `buffers` at the side tensors (addresses of [`side_tensors`]' list): the ALiBi slopes
/// (f32), the `mm_prefix_ranges` (i32, Triton only) with their row stride, the cumulative
/// seqlens (u32, read as i32: they index q/k rows, so they fit) and the block table (u32 or i32,
/// read as i32) with its row stride.
fn attach_side_tensors(
    req: &Request<'_>,
    call: &AttnCall,
    side: &[(usize, Layout)],
    buffers: &mut DeviceBuffers,
) -> Result<()> {
    let mut side = side.iter();
    let mut next = || side.next().expect("one address per side tensor");
    if call.alibi.is_some() {
        buffers.alibi_slopes = next().0;
    }
    if call.mm_prefix.is_some() {
        let (addr, layout) = next();
        if !pairs_of_each_sequence_consecutive(layout) {
            candle::bail!("flash-attn-rocm: each sequence's mm_prefix_ranges must be consecutive pairs")
        }
        (buffers.mm_prefix, buffers.mm_prefix_row_stride) = (*addr, layout.stride()[0]);
    }
    let Some(varlen) = req.varlen else {
        return Ok(());
    };
    buffers.seqstart_q = next().0;
    buffers.seqstart_k = next().0;
    if varlen.block_table.is_some() {
        let (addr, layout) = next();
        if !rows_of_consecutive_ids(layout) {
            candle::bail!("flash-attn-rocm: block_table's last dim must be contiguous")
        }
        (buffers.block_table, buffers.block_table_row_stride) = (*addr, layout.stride()[0]);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
