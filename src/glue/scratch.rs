//! The scratch a call's [`Work`] needs, allocated from the device before the launch (so that its
//! addresses come from [`super::GpuDevice::with_addresses`] like the outputs'), and the launch
//! that uses it. Dropped once the kernels are queued; the stream orders reuse.

use super::GpuDevice;
use crate::device::DeviceBuffers;
use crate::gpu::Driver;
use crate::params::AttnCall;
use crate::plan::work::Work;
use candle::Result;

/// The work of one launch and the scratch buffers it uses (fields apart, so that the buffers'
/// addresses can be taken while the work is read).
pub(super) struct Scratch<B> {
    pub(super) work: Work,
    pub(super) buffers: Vec<B>,
}

impl<B> Scratch<B> {
    /// Allocates the scratch buffers `work` (planned for `call`) uses, in its order.
    pub(super) fn allocate<D: GpuDevice<Buffer = B>>(device: &D, call: &AttnCall, work: Work) -> Result<Self> {
        let buffers = work.scratch(call).into_iter().map(|(dtype, len)| device.alloc(dtype, len, false)).collect::<Result<_>>()?;
        Ok(Scratch { work, buffers })
    }
}

/// Queues `work`'s kernels on `buffers.stream`, with `addrs` the device addresses of its
/// scratch buffers. The device is current, and every address in `buffers` is a live allocation
/// of it checked against `call` (the caller's contract, see `super::queue`).
pub(super) fn launch(driver: &'static Driver, call: &AttnCall, work: &Work, buffers: DeviceBuffers, addrs: &[usize]) -> Result<()> {
    match work {
        Work::Nothing => Ok(()),
        Work::Triton(plan) => {
            let mut buffers = buffers;
            if let [l_acc, o_acc] = addrs {
                (buffers.lse_acc, buffers.o_acc) = (*l_acc, *o_acc);
            }
            // SAFETY: every address is a live allocation of the current device checked
            // against `call` (the accumulators sized by the plan), queued on the device's
            // stream, which orders the buffers' reuse after the kernels.
            unsafe { crate::triton::launch(driver, call, plan, &buffers) }
        }
        Work::Ck { .. } => launch_ck(call, work, buffers, addrs),
    }
}

/// Queues CK's kernels, the side-tensor guard first when the call has seqlens.
#[cfg(feature = "rocm")]
fn launch_ck(call: &AttnCall, work: &Work, buffers: DeviceBuffers, addrs: &[usize]) -> Result<()> {
    use crate::plan::work::WorkArgs;
    use crate::rocm::{fmha_fwd, guard_side_tensors};
    let WorkArgs::Ck { guard, params } = work.args(call, buffers, addrs, |_| unreachable!("CK takes no TMA descriptors"))? else {
        unreachable!("CK's work has CK's arguments")
    };
    if let Some(guard) = guard {
        // SAFETY: the inputs are the caller's seqlens/table (checked by shape against
        // `call`), the outputs the scratch allocated with `guard_scratch_len` elements; all
        // stay alive until the stream has run the guard (as for the kernels below).
        unsafe { guard_side_tensors(&guard) }?;
    }
    // SAFETY: q/k/v and the side tensors are live allocations of this device that
    // `AttnCall::on_device` checked against the sizes and strides in `params`; the output and
    // LSE were just allocated with the sizes CK writes and alias nothing. All of them stay
    // valid until the kernel has run: it is queued on the device's own stream, which orders the
    // reuse of freed blocks after it. The device is current on this thread.
    unsafe { fmha_fwd(&params) }
}

#[cfg(not(feature = "rocm"))]
fn launch_ck(_: &AttnCall, _: &Work, _: DeviceBuffers, _: &[usize]) -> Result<()> {
    candle::bail!("flash-attn-rocm: CK kernels are only built with the `rocm` feature")
}
