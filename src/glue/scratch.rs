//! The scratch a kernel family needs for one call, allocated from the device before the launch
//! (so that its addresses come from [`super::GpuDevice::with_addresses`] like the outputs'),
//! and the launch that uses it. Dropped once the kernels are queued; the stream orders reuse.

use super::GpuDevice;
use crate::gpu::Driver;
use crate::params::AttnCall;
use crate::rocm::dispatch::KernelFamily;
use crate::rocm::DeviceBuffers;
use crate::triton::Plan;
use candle::{DType, Result};

/// What the family's launch does with the scratch buffers, in their order.
pub(super) enum Work {
    /// Nothing is launched.
    Nothing,
    /// Our Triton kernels; with the split accumulators (log-sum-exp, output) when the plan
    /// splits the keys.
    Triton(Plan),
    /// CK: the side-tensor guard's scratch when the call has seqlens, and the split-KV plan with
    /// its accumulators for paged calls.
    #[cfg_attr(not(feature = "rocm"), allow(dead_code))]
    Ck { guard: bool, split: Option<crate::rocm::SplitKv> },
}

/// The work of one launch and the scratch buffers it uses (fields apart, so that the buffers'
/// addresses can be taken while the work is read).
pub(super) struct Scratch<B> {
    pub(super) work: Work,
    pub(super) buffers: Vec<B>,
}

impl<B> Scratch<B> {
    /// Allocates the scratch buffers `work` (planned for `call`) uses, in its order.
    pub(super) fn allocate<D: GpuDevice<Buffer = B>>(device: &D, call: &AttnCall, work: Work) -> Result<Self> {
        let f32_buffer = |len: usize| device.alloc(DType::F32, len, false);
        let mut buffers = Vec::new();
        match &work {
            Work::Nothing => {}
            Work::Triton(plan) => {
                if plan.num_splits > 1 {
                    let (l_len, o_len) = plan.scratch_lens(call);
                    buffers.extend([f32_buffer(l_len)?, f32_buffer(o_len)?]);
                }
            }
            Work::Ck { guard, split } => {
                if *guard {
                    buffers.push(device.alloc(DType::U32, crate::rocm::guard_scratch_len(call), false)?);
                }
                if let Some(split) = split {
                    let (lse_len, o_len) = crate::rocm::split_kv_scratch_lens(call, split);
                    buffers.extend([f32_buffer(lse_len)?, f32_buffer(o_len)?]);
                }
            }
        }
        Ok(Scratch { work, buffers })
    }
}

impl Work {
    /// Plans `family`'s launch of `call` over `units` compute units (pure: no allocation), so
    /// that what the call will run can be told ([`crate::explain`]) before anything is done.
    pub(super) fn plan(call: &AttnCall, family: KernelFamily, units: usize) -> Result<Self> {
        match family {
            KernelFamily::Triton(kernels) => Ok(Work::Triton(Plan::new(call, kernels, units)?)),
            KernelFamily::Ck => plan_ck(call, units),
        }
    }

    /// Queues the family's kernels on `buffers.stream`, with `addrs` the device addresses of
    /// the scratch buffers planned with this work. The device is current, and every address in `buffers` is a live
    /// allocation of it checked against `call` (the caller's contract, see `super::queue`).
    pub(super) fn launch(
        &self,
        driver: &'static Driver,
        call: &AttnCall,
        family: KernelFamily,
        mut buffers: DeviceBuffers,
        addrs: &[usize],
    ) -> Result<()> {
        match (self, family) {
            (Work::Nothing, _) => Ok(()),
            (Work::Triton(plan), KernelFamily::Triton(_)) => {
                if let [l_acc, o_acc] = addrs {
                    (buffers.lse_acc, buffers.o_acc) = (*l_acc, *o_acc);
                }
                // SAFETY: every address is a live allocation of the current device checked
                // against `call` (the accumulators sized by the plan), queued on the device's
                // stream, which orders the buffers' reuse after the kernels.
                unsafe { crate::triton::launch(driver, call, plan, &buffers) }
            }
            (Work::Ck { guard, split }, KernelFamily::Ck) => launch_ck(call, *guard, split.as_ref(), buffers, addrs),
            _ => unreachable!("the scratch was planned for this family"),
        }
    }
}

/// CK's work for `call`: the side-tensor guard when the call has seqlens, and the split-KV plan
/// for paged calls.
#[cfg(feature = "rocm")]
fn plan_ck(call: &AttnCall, units: usize) -> Result<Work> {
    use crate::params::Mode;
    let split = match call.mode {
        Mode::Paged => Some(crate::rocm::plan_split_kv(call, crate::rocm::CK_SPLITKV_HDIMS, units)?),
        _ => None,
    };
    Ok(Work::Ck { guard: call.mode != Mode::Batch, split })
}

#[cfg(not(feature = "rocm"))]
fn plan_ck(_call: &AttnCall, _units: usize) -> Result<Work> {
    candle::bail!("flash-attn-rocm: CK kernels are only built with the `rocm` feature")
}

/// Queues CK's kernels, the side-tensor guard first when the call has seqlens.
#[cfg(feature = "rocm")]
fn launch_ck(
    call: &AttnCall,
    guard: bool,
    split: Option<&crate::rocm::SplitKv>,
    mut buffers: DeviceBuffers,
    mut addrs: &[usize],
) -> Result<()> {
    use crate::rocm::{ck_fwd_params, fmha_fwd, guard_params, guard_side_tensors, guarded_buffers};
    if guard {
        let guard = guard_params(call, &buffers, addrs[0])?;
        addrs = &addrs[1..];
        if let Some(guard) = guard {
            // SAFETY: the inputs are the caller's seqlens/table (checked by shape against
            // `call`), the outputs the scratch allocated with `guard_scratch_len` elements; all
            // stay alive until the stream has run the guard (as for the kernels below).
            unsafe { guard_side_tensors(&guard) }?;
            buffers = guarded_buffers(&buffers, &guard);
        }
    }
    if let [lse_acc, o_acc] = addrs {
        (buffers.lse_acc, buffers.o_acc) = (*lse_acc, *o_acc);
    }
    let params = ck_fwd_params(call, &buffers, split)?;
    // SAFETY: q/k/v and the side tensors are live allocations of this device that
    // `AttnCall::on_device` checked against the sizes and strides in `params`; the output and
    // LSE were just allocated with the sizes CK writes and alias nothing. All of them stay
    // valid until the kernel has run: it is queued on the device's own stream, which orders the
    // reuse of freed blocks after it. The device is current on this thread.
    unsafe { fmha_fwd(&params) }
}

#[cfg(not(feature = "rocm"))]
fn launch_ck(_: &AttnCall, _: bool, _: Option<&crate::rocm::SplitKv>, _: DeviceBuffers, _: &[usize]) -> Result<()> {
    candle::bail!("flash-attn-rocm: CK kernels are only built with the `rocm` feature")
}
