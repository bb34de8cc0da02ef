//! Issue 56: the driver layer beside a caller's own CUDA context, and after a device reset.
//! Both drive the CUDA driver directly (`libcuda.so.1`, as the crate loads it), so they are
//! built with `cuda-verify` only.

use crate::attribution::PagedCase;
#[cfg(feature = "candle-cuda")]
use crate::attribution::QueuedValidCall;
use crate::check;
use candle::Device;
use flash_attn_rocm as fa;
use flash_attn_rocm::gpu::{Driver, GpuResult};
#[cfg(feature = "candle-cuda")]
use std::ffi::c_void;

#[cfg(feature = "candle-cuda")]
type Context = *mut c_void;

/// The CUDA driver functions these tests call on their own.
struct Cu {
    library: libloading::Library,
}

impl Cu {
    fn open() -> Cu {
        // SAFETY: loading the CUDA driver runs its initializers, as the crate's own loading does.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }.expect("libcuda.so.1");
        Cu { library }
    }

    /// The driver function `name`, whose C signature is `T`; the status it returns is checked.
    fn call<T: Copy>(&self, name: &str) -> T {
        // SAFETY: each caller names a function of cuda.h with the signature it gives as `T`.
        *unsafe { self.library.get::<T>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn check(name: &str, status: i32) {
        assert_eq!(status, 0, "{name} failed with CUresult {status}");
    }

    #[cfg(feature = "candle-cuda")]
    fn current(&self) -> Context {
        let get: unsafe extern "C" fn(*mut Context) -> i32 = self.call("cuCtxGetCurrent");
        let mut context = std::ptr::null_mut();
        // SAFETY: a writable pointer.
        Self::check("cuCtxGetCurrent", unsafe { get(&mut context) });
        context
    }
}

/// A context of the caller's own on device 0 (`cuCtxCreate`), current on this thread while a
/// call runs on Candle CUDA tensors: the call runs (in the device's primary context, where the
/// tensors and our kernels are) and matches the CPU, and the caller's context is current again
/// afterwards. Before, the driver layer saw "device 0 is current" and ran the call there, and
/// left the primary context current.
#[cfg(feature = "candle-cuda")]
pub fn a_callers_own_context_is_current_again_after_a_call() {
    let Some(_) = check::gpu_and_rng("a_callers_own_context_is_current_again_after_a_call") else {
        return;
    };
    let cu = Cu::open();
    let dev = Device::new_cuda(0).unwrap();
    let valid = QueuedValidCall::new("contexts/own", &dev);
    let create: unsafe extern "C" fn(*mut Context, u32, i32) -> i32 = cu.call("cuCtxCreate_v2");
    let destroy: unsafe extern "C" fn(Context) -> i32 = cu.call("cuCtxDestroy_v2");
    let mut own = std::ptr::null_mut();
    // SAFETY: a writable pointer, flags 0, device 0; the new context is pushed current.
    Cu::check("cuCtxCreate_v2", unsafe { create(&mut own, 0, 0) });
    let set: unsafe extern "C" fn(Context) -> i32 = cu.call("cuCtxSetCurrent");
    for round in 0..3 {
        // Candle's own calls (the CPU copy below) bind its context: ours again for each round.
        // SAFETY: our live context.
        Cu::check("cuCtxSetCurrent", unsafe { set(own) });
        let out = valid.call().unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(cu.current(), own, "round {round}: the caller's own context is current again");
        valid.check(&format!("round {round}"), &[out]);
    }
    // SAFETY: our own context, current on this thread and used by nothing else.
    Cu::check("cuCtxDestroy_v2", unsafe { destroy(own) });
}

/// A device reset (`cudaDeviceReset` is `cuDevicePrimaryCtxReset`) undoes the fault words'
/// registration. Before, the words were the driver's pinned pages, freed by the reset while the
/// host kept reading them. Now the host's reads stay valid and a call is refused, with the reason,
/// before anything is queued. Resets device 0: run last.
pub fn a_call_after_a_device_reset_is_refused() {
    let Some(_) = check::gpu_and_rng("a_call_after_a_device_reset_is_refused") else {
        return;
    };
    let driver = check::driver().unwrap();
    let case = PagedCase::new("contexts/reset", 16);
    let cpu = case.cpu();
    let out = fa::glue::offload::run_on_gpu(driver, || case.call(&Device::Cpu, false)).unwrap();
    let worst = crate::common::values(&out).iter().zip(&cpu).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 4e-3, "before the reset: differs from the CPU by {worst:.3e}");
    let cu = Cu::open();
    let reset: unsafe extern "C" fn(i32) -> i32 = cu.call("cuDevicePrimaryCtxReset_v2");
    // SAFETY: device 0; nothing of this process uses it while the reset runs.
    Cu::check("cuDevicePrimaryCtxReset_v2", unsafe { reset(0) });
    eprintln!("device 0 reset");
    fa::take_gpu_faults().expect("no fault, and the words are still readable");
    let refused = queue_nothing(driver).expect_err("a call after the reset is refused");
    eprintln!("refused: {refused}");
    assert!(refused.to_string().contains("device reset"), "{refused}");
    let through_api = fa::glue::offload::run_on_gpu(driver, || case.call(&Device::Cpu, false));
    eprintln!("a public call after the reset: {:?}", through_api.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    assert!(through_api.is_err(), "a public call after the reset returns an Err, never a wrong result");
    fa::take_gpu_faults().expect("still readable");
}

/// What a call does first: take a fault word on the null stream of the current device.
fn queue_nothing(driver: &'static Driver) -> GpuResult<usize> {
    driver.queue_with_fault_word(0, 0, |word| GpuResult::Ok(word))
}
