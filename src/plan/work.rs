//! What a GPU call runs once [`choose`] has picked its family: the work planned before anything
//! is allocated (so that [`crate::explain`] can tell it and the glue can size the scratch), the
//! scratch it needs, and the arguments of every kernel it launches. Pure Rust: the glue's launch
//! and [`dry_run`] (the device path without a device) build their arguments here.
use super::dispatch::{choose, Built, KernelChoice, KernelFamily};
use crate::device::{DeviceBuffers, DeviceLimits, TensorMap, TiledView};
use crate::params::{pairs_of_each_sequence_consecutive, rows_of_consecutive_ids, AttnCall, Mode, Request};
use crate::rocm::{
    check_ck_params, ck_fwd_params, guard_params, guard_scratch_len, guarded_buffers, lse_buffer_required, plan_split_kv,
    split_kv_scratch_lens, CkFwdParams, CkSideTensorGuard, SplitKv,
};
use crate::triton::{kernel_args, KernelArgs, Plan};
use candle::{DType, Layout, Result, Tensor};

/// The kernels one call launches, planned.
#[derive(Debug, Clone)]
pub enum Work {
    /// Nothing is launched: CK for a call without a sequence that has both query rows and
    /// keys (flash-attention's CK backend skips `seqlen_k == 0`). The outputs are prefilled.
    Nothing,
    /// Our Triton kernels; with the split accumulators (log-sum-exp, output) when the plan
    /// splits the keys. A plan without programs launches nothing.
    Triton(Plan),
    /// CK: the side-tensor guard when the call has seqlens, and the split-KV plan for paged
    /// calls.
    Ck {
        /// Whether the side-tensor guard runs first (varlen and paged calls).
        guard: bool,
        /// The split-KV plan of a paged call.
        split: Option<SplitKv>,
    },
}

/// The arguments of the kernels of one [`Work`].
#[derive(Debug)]
pub enum WorkArgs {
    /// Nothing is launched.
    Nothing,
    /// The Triton forward kernel's arguments, and the merge's when the keys are split.
    Triton(KernelArgs),
    /// CK: the side-tensor guard's arguments (varlen and paged calls), then `fmha_fwd`'s.
    Ck {
        /// The guard's arguments; `None` for batch-mode calls.
        guard: Option<CkSideTensorGuard>,
        /// What CK's forward gets, pointed at the guard's copies of the side tensors.
        params: CkFwdParams,
    },
}

impl Work {
    /// Plans `family`'s launch of `call` over `units` compute units, with the split-KV tiles of
    /// `built` for CK's paged calls. No allocation, no driver.
    pub fn plan(call: &AttnCall, family: KernelFamily, units: usize, built: &Built) -> Result<Self> {
        match family {
            KernelFamily::Triton(kernels) => Ok(Work::Triton(Plan::new(call, kernels, units)?)),
            KernelFamily::Ck if !ck_computes(call) => Ok(Work::Nothing),
            KernelFamily::Ck => {
                let split = match call.mode {
                    Mode::Paged => Some(plan_split_kv(call, built.ck_splitkv_hdims, units)?),
                    _ => None,
                };
                Ok(Work::Ck { guard: call.mode != Mode::Batch, split })
            }
        }
    }

    /// Whether a kernel runs.
    pub fn launches(&self) -> bool {
        match self {
            Work::Nothing => false,
            Work::Triton(plan) => !plan.is_empty(),
            Work::Ck { .. } => true,
        }
    }

    /// The scratch buffers the kernels use for `call`, in the order [`Work::args`] takes their
    /// addresses: dtype and elements of each.
    pub fn scratch(&self, call: &AttnCall) -> Vec<(DType, usize)> {
        let mut buffers = Vec::new();
        match self {
            Work::Nothing => {}
            Work::Triton(plan) => {
                if plan.num_splits > 1 {
                    let (l_len, o_len) = plan.scratch_lens(call);
                    buffers.extend([(DType::F32, l_len), (DType::F32, o_len)]);
                }
            }
            Work::Ck { guard, split } => {
                if *guard {
                    buffers.push((DType::U32, guard_scratch_len(call)));
                }
                if let Some(split) = split {
                    let (lse_len, o_len) = split_kv_scratch_lens(call, split);
                    buffers.extend([(DType::F32, lse_len), (DType::F32, o_len)]);
                }
            }
        }
        buffers
    }

    /// The arguments of every kernel of this work for `call` on `buffers`, with `scratch` the
    /// addresses of the [`Work::scratch`] buffers and `encode` the maker of the TMA kernel's
    /// descriptors; checked as the launch checks them.
    pub fn args(
        &self,
        call: &AttnCall,
        mut buffers: DeviceBuffers,
        mut scratch: &[usize],
        encode: impl FnMut(&TiledView) -> Result<TensorMap>,
    ) -> Result<WorkArgs> {
        match self {
            Work::Nothing => Ok(WorkArgs::Nothing),
            Work::Triton(plan) if plan.is_empty() => Ok(WorkArgs::Nothing),
            Work::Triton(plan) => {
                if let [l_acc, o_acc] = scratch {
                    (buffers.lse_acc, buffers.o_acc) = (*l_acc, *o_acc);
                }
                Ok(WorkArgs::Triton(kernel_args(call, plan, &buffers, encode)?))
            }
            Work::Ck { guard, split } => {
                let guard = match guard {
                    true => {
                        let guard = guard_params(call, &buffers, scratch[0])?;
                        scratch = &scratch[1..];
                        guard
                    }
                    false => None,
                };
                if let Some(guard) = &guard {
                    buffers = guarded_buffers(&buffers, guard);
                }
                if let [lse_acc, o_acc] = scratch {
                    (buffers.lse_acc, buffers.o_acc) = (*lse_acc, *o_acc);
                }
                let params = ck_fwd_params(call, &buffers, split.as_ref())?;
                check_ck_params(&params)?;
                Ok(WorkArgs::Ck { guard, params })
            }
        }
    }
}

/// Whether CK has anything to compute for `call`: a sequence with query rows and keys (with
/// the seqlens left unread, both maxima above 0).
fn ck_computes(call: &AttnCall) -> bool {
    match call.seqs.unread() {
        None => call.seqs.iter().any(|s| s.q_len > 0 && s.k_len > 0),
        Some(_) => call.max_seqlen_q > 0 && call.max_seqlen_k > 0,
    }
}

/// Whether `family`'s launch of `call` writes an LSE buffer: the caller's, or scratch where the
/// caller wants none but the kernels write one anyway (the Triton kernels always; CK's
/// LSE-writing build for non-paged calls).
pub fn lse_buffer(call: &AttnCall, family: KernelFamily, want_lse: bool) -> bool {
    want_lse || matches!(family, KernelFamily::Triton(_)) || lse_buffer_required(call)
}

/// The side tensors' row strides as the glue attaches them to `buffers` (after
/// [`crate::params::block_table_for_kernels`] and [`crate::params::prefix_ranges_for_kernels`]), in otherwise empty buffers: what the
/// 32-bit twin's choice reads before anything is allocated.
pub fn side_row_strides(req: &Request<'_>, call: &AttnCall) -> DeviceBuffers {
    let table = req.varlen.and_then(|v| v.block_table).map(Tensor::layout);
    let table_row_stride = |l: &Layout| if rows_of_consecutive_ids(l) { l.stride()[0] } else { l.dims()[1] };
    DeviceBuffers {
        block_table_row_stride: table.map_or(0, table_row_stride),
        mm_prefix_row_stride: call.mm_prefix.as_ref().map_or(0, |m| match pairs_of_each_sequence_consecutive(m.ranges.layout()) {
            true => m.ranges.stride()[0],
            false => 2 * m.max_ranges,
        }),
        ..DeviceBuffers::default()
    }
}

/// A GPU device as the planning sees it: its code-object target, what one block may use, and
/// its compute units.
#[derive(Debug, Clone, Copy)]
pub struct DeviceShape<'a> {
    /// `gfx942`, `gfx1100`, `sm_90`, ...
    pub arch: &'a str,
    /// Shared memory and threads one block may use.
    pub limits: DeviceLimits,
    /// Compute units (AMD) or SMs (NVIDIA).
    pub units: usize,
}

/// The device path without a device: the family that `choice` and `built` give `call` (validated
/// from `req`) on `device`, its work, and the arguments of every kernel it would launch at
/// `buffers` (made-up addresses will do: the side tensors' row strides are the glue's, the
/// scratch gets addresses after `buffers.fault`, and the LSE's is 0 where [`lse_buffer`] says
/// the glue passes none for a caller who does not `want_lse`). An `Err` is the one the
/// GPU call returns before launching anything. The host test that every backend accepts and
/// refuses a call alike (tests/backends_agree.rs) runs it for random calls.
pub fn dry_run(
    req: &Request<'_>,
    call: &AttnCall,
    device: DeviceShape,
    choice: KernelChoice,
    built: &Built,
    buffers: &DeviceBuffers,
    want_lse: bool,
) -> Result<(KernelFamily, Work, WorkArgs)> {
    let family = choose(call, device.arch, device.limits, choice, built)?;
    let work = Work::plan(call, family, device.units, built)?;
    let scratch: Vec<usize> = (1..=work.scratch(call).len()).map(|n| buffers.fault + n * 0x1000_0000).collect();
    let strides = side_row_strides(req, call);
    let buffers = DeviceBuffers {
        block_table_row_stride: strides.block_table_row_stride,
        mm_prefix_row_stride: strides.mm_prefix_row_stride,
        lse: if lse_buffer(call, family, want_lse) { buffers.lse } else { 0 },
        ..*buffers
    };
    let args = work.args(call, buffers, &scratch, |_| Ok(TensorMap::default()))?;
    Ok((family, work, args))
}
