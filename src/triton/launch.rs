//! Loading the embedded code objects (once per device) and launching a [`Plan`] on a stream,
//! through either driver (HIP on AMD GPUs, CUDA for the NVIDIA verification build).
use super::args::ArgValue;
use super::marshal::{kernel_args, Plan};
use super::registry::{KernelImage, KERNELS};
use super::select::select;
use crate::device::DeviceBuffers;
use crate::gpu::{current_device, device_key, DeviceKey, Driver, Function, Module, TensorMap};
use crate::params::AttnCall;
use candle::Result;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

/// Loaded kernels per (device, image address); the modules stay loaded for the life of the
/// process.
type FunctionCache = Mutex<HashMap<(DeviceKey, usize), (Module, Function)>>;

fn functions() -> &'static FunctionCache {
    static FUNCTIONS: OnceLock<FunctionCache> = OnceLock::new();
    FUNCTIONS.get_or_init(Default::default)
}

/// The plan of `call` on the current device of `driver`.
pub fn plan(driver: &'static Driver, call: &AttnCall) -> Result<Plan> {
    let (_, info) = current_device(driver)?;
    let kernels = select(call, &info.arch, info.limits, KERNELS)?;
    Plan::new(call, kernels, info.units)
}

fn function(driver: &'static Driver, device: DeviceKey, image: &'static KernelImage) -> Result<Function> {
    // Images are statics: their address identifies them.
    let key = (device, image as *const KernelImage as usize);
    let mut cache = functions().lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, f)) = cache.get(&key) {
        return Ok(*f);
    }
    let module = driver.load_module(image.image)?;
    let f = driver.get_function(&module, image.kernel)?;
    driver.allow_shared(f, image.shared)?;
    cache.insert(key, (module, f));
    Ok(f)
}

/// Queues `plan` for `call` on `buffers.stream` of the current device: the attention kernel,
/// then the merge when the keys are split. Returns once queued; errors of the kernels surface at
/// the stream's next synchronization, out-of-range side tensors in the fault word of the call
/// (`buffers.fault`; when 0, one of this thread's for the stream from
/// [`Driver::queue_with_fault_word`], read by [`take_faults`] or the thread's next call on the
/// stream). `call` may leave its seqlens and block table unread ([`AttnCall::on_device`]): the
/// kernels check them.
///
/// # Safety
/// Every address in `buffers` must be a device allocation of the current device large enough
/// for `call` (and `plan.scratch_lens` for the accumulators), alive and unchanged (inputs) until
/// the stream has run the kernels; outputs must not alias inputs; `buffers.stream` must be a live
/// stream of that device or 0; a non-zero `buffers.fault` is a fault word that
/// [`Driver::queue_with_fault_word`] gave this call.
pub unsafe fn launch(driver: &'static Driver, call: &AttnCall, plan: &Plan, buffers: &DeviceBuffers) -> Result<()> {
    if plan.is_empty() {
        return Ok(());
    }
    let device = device_key(driver)?;
    if buffers.fault != 0 {
        // SAFETY: forwarded from the caller.
        return unsafe { launch_reporting_to(driver, device, call, plan, buffers) };
    }
    driver.queue_with_fault_word(device.1, buffers.stream, |fault| {
        // SAFETY: forwarded from the caller, with the call's own fault word.
        unsafe { launch_reporting_to(driver, device, call, plan, &DeviceBuffers { fault, ..*buffers }) }
    })
}

/// [`launch`] with `buffers.fault` set.
///
/// # Safety
/// As for [`launch`].
unsafe fn launch_reporting_to(driver: &'static Driver, device: DeviceKey, call: &AttnCall, plan: &Plan, buffers: &DeviceBuffers) -> Result<()> {
    let args = kernel_args(call, plan, buffers, |view| Ok(driver.encode_tensor_map(view)?))?;
    // SAFETY: the argument list is the kernel's parameter list (FwdArgs mirrors attn_fwd and
    // TmaFwdArgs attn_fwd_tma_split and attn_fwd_tma_ws_split, less the tail's descriptors
    // attn_fwd_tma and its warp-specialized twins, checked by a test against the sources), the
    // grid is the plan's,
    // and the caller upholds the buffer and stream contract above (the descriptors describe
    // views inside q, k and v).
    unsafe { run(driver, device, args.fwd, plan.grid, args.fwd_values, buffers.stream) }?;
    if let Some(merge) = args.merge {
        // SAFETY: as above, with MergeArgs mirroring attn_merge; the stream orders it after attn_fwd.
        unsafe { run(driver, device, plan.kernels.merge, plan.merge_grid, merge.values(), buffers.stream) }?;
    }
    Ok(())
}

/// `Err` naming the side tensors that held out-of-range values in calls this thread queued on
/// `driver` (any stream) that no check has reported yet; each bad call is reported once. The
/// kernels replaced the values (see the crate's errors). Calls of other threads are not seen.
/// Reads the calls' fault words in mapped host memory: no synchronization, so a call still
/// queued reports at a later check (synchronize its stream first to see every call so far).
pub fn take_faults(driver: &'static Driver) -> Result<()> {
    crate::params::faults::faults_to_result(driver.take_thread_faults())
}

/// # Safety
/// `values` must match `image`'s kernel parameters, and the addresses in them the launch contract.
unsafe fn run(
    driver: &'static Driver,
    device: DeviceKey,
    image: &'static KernelImage,
    grid: [u32; 3],
    mut values: Vec<ArgValue>,
    stream: usize,
) -> Result<()> {
    let f = function(driver, device, image)?;
    // Triton appends its scratch pointers; the build refuses kernels that need scratch memory.
    values.extend((0..image.scratch_args).map(|_| ArgValue::Ptr(0)));
    let mut pointers: Vec<*mut c_void> = values
        .iter_mut()
        .map(|v| match v {
            ArgValue::Ptr(p) => p as *mut u64 as *mut c_void,
            ArgValue::I32(x) => x as *mut i32 as *mut c_void,
            ArgValue::I64(x) => x as *mut i64 as *mut c_void,
            ArgValue::F32(x) => x as *mut f32 as *mut c_void,
            ArgValue::TensorMap(map) => map as *mut TensorMap as *mut c_void,
        })
        .collect();
    // SAFETY: `pointers` point into `values`, alive until the driver has copied them (at the
    // launch call); the caller guarantees they match the kernel's parameters.
    unsafe { driver.launch(f, grid, [image.threads, 1, 1], image.shared, stream, &mut pointers) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::tests::mock::mock_driver;
    use crate::params::{Request, VarLenRequest};
    use crate::triton::{Family, KernelDtype, Kernels, Tile};
    use candle::{DType, Device, Tensor};
    use std::sync::atomic::Ordering;

    fn image(family: Family, tile: Tile, block_m: u32, block_n: u32) -> &'static KernelImage {
        let image = KernelImage {
            target: "gfx942",
            variant: "test",
            kernel: "k",
            family,
            tile,
            dtype: KernelDtype::F16,
            block_d: 128,
            even_d: true,
            paged: family == Family::Fwd,
            extras: false,
            ptr32: false,
            block_m,
            block_n,
            threads: 256,
            shared: 0,
            scratch_args: 2,
            image: &[],
        };
        Box::leak(Box::new(image))
    }

    /// The product path's launch of a paged decode call whose seqlens and table stay on the
    /// device: on a driver that counts host round trips, nothing is copied to the host and
    /// nothing waits for the device, with the keys split (both kernels queued). Faults the
    /// kernels report surface at the next check, without synchronizing either.
    #[test]
    fn a_paged_call_with_device_side_tensors_makes_no_host_round_trip() {
        let (driver, state) = mock_driver();
        let driver: &'static Driver = Box::leak(Box::new(driver));
        let dev = &Device::Cpu;
        let (b, h, h_k, d, page, max_blocks) = (4, 32, 8, 128, 16, 300);
        // Only their shapes are looked at: the values would be on the device.
        let seqlens = Tensor::zeros(b + 1, DType::U32, dev).unwrap();
        let table = Tensor::zeros((b, max_blocks), DType::U32, dev).unwrap();
        let varlen = VarLenRequest {
            seqlens_q: &seqlens,
            seqlens_k: &seqlens,
            max_seqlen_q: 1,
            max_seqlen_k: page * max_blocks,
            block_table: Some(&table),
            page_block_size: Some(page),
            mm_prefix_ranges: None,
        };
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let q = Tensor::zeros((b, h, d), DType::F16, dev).unwrap();
        let kv = Tensor::zeros((b * max_blocks, page, h_k, d), DType::F16, dev).unwrap();
        let call = AttnCall::on_device(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        let kernels = Kernels { fwd: image(Family::Fwd, Tile::Decode, 16, 64), fwd_b32: None, merge: image(Family::Merge, Tile::Merge, 1, 16), batched: None, tma: None };
        let plan = Plan::new(&call, kernels, 304).unwrap();
        assert!(plan.num_splits > 1, "{plan:?}");
        // The mock reads the low 32 bits of a launch's first argument (q, out) as its status:
        // addresses at multiples of 2^32 launch cleanly.
        let buffers = DeviceBuffers {
            q: 1 << 32,
            k: 0x2000,
            v: 0x3000,
            out: 2 << 32,
            lse: 0x5000,
            seqstart_q: 0x6000,
            seqstart_k: 0x7000,
            block_table: 0x8000,
            block_table_row_stride: max_blocks,
            lse_acc: 0x9000,
            o_acc: 0xa000,
            ..DeviceBuffers::default()
        };
        // SAFETY: the mock driver dereferences no device address.
        unsafe { launch(driver, &call, &plan, &buffers) }.unwrap();
        take_faults(driver).unwrap();
        assert_eq!(state.copies_to_host.load(Ordering::SeqCst), 0);
        assert_eq!(state.synchronizes.load(Ordering::SeqCst), 0);
        // A call given its fault word, and a kernel's report into it as attn_fwd's atomic_or
        // writes it; read in place by the next check.
        let device = driver.current_device().unwrap();
        let word = driver
            .queue_with_fault_word(device, buffers.stream, |fault| {
                // SAFETY: as above.
                unsafe { launch(driver, &call, &plan, &DeviceBuffers { fault, ..buffers }) }.map(|()| fault)
            })
            .unwrap();
        // SAFETY: the mock's device address of the word is its host address, alive for good.
        unsafe { (*(word as *const std::sync::atomic::AtomicU32)).fetch_or(4, Ordering::SeqCst) };
        let err = take_faults(driver).unwrap_err().to_string();
        assert!(err.contains("block_table") && err.contains("earlier call"), "{err}");
        take_faults(driver).unwrap();
        assert_eq!(state.copies_to_host.load(Ordering::SeqCst) + state.synchronizes.load(Ordering::SeqCst), 0);
    }
}
