//! Which backend and kernels serve a call: [`explain`] asks without running it, and
//! `FLASH_ATTN_ROCM_LOG=1` prints one line per call to stderr.
//!
//! Both come from the one place where each backend has made its choice (the CPU entry in
//! `op.rs`, the GPU path's `glue::queue` after `plan::dispatch::choose` and the launch plan),
//! so what they report is what the call runs, never a second guess of it.

use crate::params::{AttnCall, Mode};
use crate::plan::dispatch::KernelFamily;
use crate::rocm::SplitKv;
use crate::triton::{KernelImage, Plan};
use candle::Result;
use std::cell::RefCell;
use std::fmt;

/// The environment variable that prints one line per call to stderr when set to anything but
/// empty or `0`. Read once per process.
pub const ENV_LOG: &str = "FLASH_ATTN_ROCM_LOG";

/// The family of kernels that serves a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The CPU kernel (tensors on `Device::Cpu`).
    Cpu,
    /// AMD's Composable Kernel fmha forward (CDNA: gfx90a, gfx942, gfx950; feature `rocm`).
    Ck,
    /// Our Triton kernels, ahead-of-time compiled for AMD or NVIDIA targets.
    Triton,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cpu => "cpu",
            Backend::Ck => "ck",
            Backend::Triton => "triton",
        })
    }
}

/// What serves one call: the backend, the device, the code target and kernel variant, the key
/// splits. Returned by [`explain`]; its `Display` is the line `FLASH_ATTN_ROCM_LOG=1` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dispatch {
    /// The kernel family.
    pub backend: Backend,
    /// The device: `cpu`, or the GPU API, ordinal and arch, e.g. `HIP:0:gfx1100`, `CUDA:0:sm_89`.
    pub device: String,
    /// What the kernels were compiled for. CPU: the architecture (`x86_64`, `aarch64`);
    /// Triton: the embedded target serving the device (`gfx1100`; `sm_86` on an sm_89 GPU of an
    /// sm_86 build); CK: the arch.
    pub target: String,
    /// The kernel variant. CPU: the instruction set (`avx512-amx`, `avx512`, `avx2`,
    /// `portable`); Triton: the attention image, e.g. `fwd_prefill_fp16_d128_flat`; CK:
    /// `fmha_fwd` or `fmha_fwd_splitkv` (paged K/V) with the head-dim tile, e.g. `fmha_fwd_d128`.
    pub variant: String,
    /// Key splits: programs (CPU: work items) per block of query rows, along the keys. Above 1
    /// the partial results are merged (Triton: by `merge`).
    pub splits: usize,
    /// Triton: the merge image, when `splits > 1`; `None` otherwise.
    pub merge: Option<String>,
    /// How the work is laid out: CPU work items and threads, Triton's grid, CK's split tile.
    pub work: String,
    /// The call itself: layout, dtype, batch, heads, head dim, lengths, mask and options.
    pub call: String,
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Dispatch { backend, device, target, variant, splits, merge, work, call } = self;
        write!(f, "flash-attn-rocm: backend={backend} device={device} target={target} variant={variant} splits={splits}")?;
        if let Some(merge) = merge {
            write!(f, " merge={merge}")?;
        }
        write!(f, " work=\"{work}\" call=\"{call}\"")
    }
}

impl Dispatch {
    /// The CPU kernel's choice for `call`: `isa` names the instruction set the kernel runs
    /// with, `items` and `splits` come from its work plan, over `threads` threads.
    pub(crate) fn cpu(call: &AttnCall, isa: &str, items: usize, splits: usize, threads: usize) -> Self {
        Dispatch {
            backend: Backend::Cpu,
            device: "cpu".to_owned(),
            target: std::env::consts::ARCH.to_owned(),
            variant: isa.to_owned(),
            splits,
            merge: None,
            work: format!("{items} work items on {threads} thread{}", if threads == 1 { "" } else { "s" }),
            call: describe_call(call),
        }
    }
}

/// What a GPU call launches, as the GPU path planned it (`glue::queue`).
#[cfg_attr(not(feature = "triton"), allow(dead_code))]
pub(crate) enum GpuWork<'a> {
    /// Nothing (a call without keys or query rows): the family that would have served it.
    Nothing(KernelFamily),
    /// Our Triton kernels, with their launch plan and the attention image the launch takes
    /// (the plan's 64-bit image or its 32-bit twin).
    Triton { plan: &'a Plan, fwd: &'static KernelImage },
    /// CK: the forward head-dim tile, or the split-KV plan of a paged call.
    Ck { tile: usize, split: Option<&'a SplitKv> },
}

#[cfg_attr(not(feature = "triton"), allow(dead_code))]
impl Dispatch {
    /// A GPU call's choice: `device` names the API, ordinal and arch (`HIP:0:gfx1100`).
    pub(crate) fn gpu(device: String, arch: &str, call: &AttnCall, work: GpuWork) -> Self {
        let (backend, target, variant, splits, merge, work) = match work {
            GpuWork::Triton { plan, fwd } => {
                let merge = (plan.num_splits > 1).then(|| plan.kernels.merge.variant.to_owned());
                let layout = format!("grid {:?}, {} keys per split", plan.grid, plan.split_len);
                (Backend::Triton, fwd.target.to_owned(), fwd.variant.to_owned(), plan.num_splits, merge, layout)
            }
            GpuWork::Ck { tile, split } => {
                let mode = if call.mode == Mode::Batch { "batch mode" } else { "group mode" };
                let (variant, splits) = match split {
                    Some(split) => (format!("fmha_fwd_splitkv_d{}", split.tile.hdim), split.num_splits),
                    None => (format!("fmha_fwd_d{tile}"), 1),
                };
                (Backend::Ck, arch.to_owned(), variant, splits, None, mode.to_owned())
            }
            GpuWork::Nothing(family) => {
                let backend = if matches!(family, KernelFamily::Ck) { Backend::Ck } else { Backend::Triton };
                (backend, arch.to_owned(), "none".to_owned(), 0, None, "no keys or rows: nothing launched".to_owned())
            }
        };
        Dispatch { backend, device, target, variant, splits, merge, work, call: describe_call(call) }
    }
}

/// A call in one line: `batch bf16 b=2 h=8 h_k=2 d=64 s_q=256 s_k=256 causal`.
pub(crate) fn describe_call(call: &AttnCall) -> String {
    let (mode, q_len, k_len) = match call.mode {
        Mode::Batch => ("batch", "s_q", "s_k"),
        Mode::VarLen => ("varlen", "max_seqlen_q", "max_seqlen_k"),
        Mode::Paged => ("paged", "max_seqlen_q", "max_seqlen_k"),
    };
    let dtype = format!("{:?}", call.dtype).to_lowercase();
    let mut line = format!(
        "{mode} {dtype} b={} h={} h_k={} d={} {q_len}={} {k_len}={}",
        call.batch, call.num_heads, call.num_heads_k, call.head_dim, call.max_seqlen_q, call.max_seqlen_k
    );
    let window = call.window;
    match (window.left, window.right) {
        (-1, -1) => {}
        (_, 0) if window.left >= call.max_seqlen_k as i32 => line.push_str(" causal"),
        (left, right) => line.push_str(&format!(" window=({left},{right})")),
    }
    if call.alibi.is_some() {
        line.push_str(" alibi");
    }
    if let Some(cap) = call.softcap {
        line.push_str(&format!(" softcap={cap}"));
    }
    if call.mm_prefix.is_some() {
        line.push_str(" mm_prefix_ranges");
    }
    line
}

thread_local! {
    /// `Some` while [`explain`] runs on this thread: the dispatch of the first call it makes.
    static EXPLAINING: RefCell<Option<Option<Dispatch>>> = const { RefCell::new(None) };
}

fn log_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var(ENV_LOG).is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Whether a backend that has chosen should describe its choice: under [`explain`] or with
/// `FLASH_ATTN_ROCM_LOG` set. Describing costs a little (the CPU plans its work twice), so the
/// backends skip it otherwise.
fn wanted() -> bool {
    EXPLAINING.with(|e| e.borrow().is_some()) || log_enabled()
}

/// Called by each backend once it has chosen and before it does any work: prints the line when
/// logging, and under [`explain`] records the dispatch and stops the call with an `Err` that
/// `explain` replaces by the dispatch.
pub(crate) fn chosen(describe: impl FnOnce() -> Result<Dispatch>) -> Result<()> {
    if !wanted() {
        return Ok(());
    }
    let dispatch = describe()?;
    let explaining = EXPLAINING.with(|e| match &mut *e.borrow_mut() {
        Some(slot) => {
            slot.get_or_insert(dispatch.clone());
            true
        }
        None => false,
    });
    if explaining {
        candle::bail!("flash-attn-rocm: explain(): the call was planned, not run")
    }
    eprintln!("{dispatch}");
    Ok(())
}

/// Which backend and kernels the flash-attention call made by `call` would use, without running
/// it: the closure's first call of this crate (any of its functions, or
/// `q.apply_op3(k, v, op)` with [`FlashAttn`](crate::FlashAttn)) is validated and its kernels
/// chosen as for a real call, then stopped before any work.
///
/// An `Err` when the call itself is invalid (the error it would return) or when no kernel of
/// this build serves it (the same `Err` the call would return: say, an arch or head dim that was
/// not built), and when the closure makes no call at all. To see what every call of a program
/// runs, set `FLASH_ATTN_ROCM_LOG=1`: each call prints this line to stderr.
///
/// # Example
///
/// ```
/// use flash_attn_rocm::candle::{DType, Device, Tensor};
/// use flash_attn_rocm::{explain, flash_attn, Backend};
///
/// let dev = Device::Cpu; // a CUDA or ROCm device in a GPU build
/// let q = Tensor::zeros((1, 128, 8, 64), DType::BF16, &dev)?;
/// let k = Tensor::zeros((1, 128, 2, 64), DType::BF16, &dev)?;
///
/// let dispatch = explain(|| flash_attn(&q, &k, &k, 0.125, true))?;
/// println!("{dispatch}");
/// // flash-attn-rocm: backend=cpu device=cpu target=x86_64 variant=avx2 splits=1 work="..." call="batch bf16 b=1 h=8 h_k=2 d=64 s_q=128 s_k=128 causal"
/// assert_eq!(dispatch.backend, Backend::Cpu);
/// assert_eq!(dispatch.call, "batch bf16 b=1 h=8 h_k=2 d=64 s_q=128 s_k=128 causal");
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn explain<T>(call: impl FnOnce() -> Result<T>) -> Result<Dispatch> {
    /// Puts back what an enclosing `explain` had recorded, also when `call` panics.
    struct Restore(Option<Option<Dispatch>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            EXPLAINING.with(|e| *e.borrow_mut() = self.0.take());
        }
    }
    // `Some(None)`: explaining, nothing recorded yet; the enclosing state is put back after.
    let outer = Restore(EXPLAINING.with(|e| e.borrow_mut().replace(None)));
    let result = call();
    let recorded = EXPLAINING.with(|e| e.borrow_mut().take()).flatten();
    drop(outer);
    match (recorded, result) {
        (Some(dispatch), _) => Ok(dispatch),
        (None, Err(e)) => Err(e),
        (None, Ok(_)) => candle::bail!("flash-attn-rocm: explain(): the closure made no flash-attention call"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{flash_attn, flash_attn_varlen_paged_windowed};
    use candle::{DType, Device, Tensor};

    fn zeros(dims: &[usize]) -> Tensor {
        Tensor::zeros(dims, DType::F16, &Device::Cpu).unwrap()
    }

    #[test]
    fn a_cpu_call_is_explained_not_run() {
        let (q, k) = (zeros(&[2, 64, 8, 64]), zeros(&[2, 64, 2, 64]));
        let dispatch = explain(|| flash_attn(&q, &k, &k, 0.125, true)).unwrap();
        assert_eq!(dispatch.backend, Backend::Cpu);
        assert_eq!(dispatch.device, "cpu");
        assert_eq!(dispatch.target, std::env::consts::ARCH);
        assert_eq!(dispatch.call, "batch f16 b=2 h=8 h_k=2 d=64 s_q=64 s_k=64 causal");
        assert_eq!((dispatch.splits, dispatch.merge.as_deref()), (1, None));
        let line = dispatch.to_string();
        assert!(line.starts_with("flash-attn-rocm: backend=cpu device=cpu target="), "{line}");
        assert!(line.ends_with("call=\"batch f16 b=2 h=8 h_k=2 d=64 s_q=64 s_k=64 causal\""), "{line}");
        // The thread is back to normal: the same call runs and returns its output.
        assert_eq!(flash_attn(&q, &k, &k, 0.125, true).unwrap().dims(), &[2, 64, 8, 64]);
    }

    #[test]
    fn the_variant_is_the_instruction_set_the_kernel_runs_with() {
        let (q, k) = (zeros(&[1, 4, 2, 32]), zeros(&[1, 4, 2, 32]));
        let dispatch = explain(|| flash_attn(&q, &k, &k, 0.125, false)).unwrap();
        let isa = crate::cpu::dispatch_isa_name().unwrap();
        assert_eq!(dispatch.variant, isa);
        assert!(["avx512-amx", "avx512", "avx2", "portable"].contains(&isa), "{isa}");
    }

    #[test]
    fn a_long_decode_splits_its_keys() {
        // One query row against 32k keys: the CPU plan splits the keys over work items.
        let (q, k) = (zeros(&[1, 1, 8, 64]), zeros(&[1, 32768, 2, 64]));
        let dispatch = explain(|| flash_attn(&q, &k, &k, 0.125, true)).unwrap();
        assert!(dispatch.splits > 1, "{dispatch}");
    }

    #[test]
    fn paged_calls_name_their_layout_and_options() {
        let dev = &Device::Cpu;
        let (q, cache) = (zeros(&[2, 4, 64]), zeros(&[4, 16, 2, 64]));
        let seqlens_q = Tensor::new(&[0u32, 1, 2], dev).unwrap();
        let seqlens_k = Tensor::new(&[0u32, 20, 32], dev).unwrap();
        let table = Tensor::new(&[[2u32, 0], [3, 1]], dev).unwrap();
        let call = || {
            flash_attn_varlen_paged_windowed(&q, &cache, &cache, &seqlens_q, &seqlens_k, &table, None, 1, 20, 0.1, Some(8), Some(0), 16, Some(30.0))
        };
        let dispatch = explain(call).unwrap();
        assert_eq!(dispatch.call, "paged f16 b=2 h=4 h_k=2 d=64 max_seqlen_q=1 max_seqlen_k=20 window=(8,0) softcap=30");
    }

    #[test]
    fn an_invalid_call_gives_its_own_error_and_no_call_is_an_error() {
        let (q, k) = (zeros(&[1, 4, 2, 64]), zeros(&[1, 4, 2, 32]));
        let err = explain(|| flash_attn(&q, &k, &k, 0.125, true)).unwrap_err().to_string();
        assert!(err.contains("head"), "{err}");
        let err = explain(|| Ok(())).unwrap_err().to_string();
        assert!(err.contains("made no flash-attention call"), "{err}");
    }

    #[test]
    fn nested_explains_each_see_their_own_call() {
        let (q, k) = (zeros(&[1, 4, 2, 32]), zeros(&[1, 4, 2, 32]));
        let outer = explain(|| {
            let inner = explain(|| flash_attn(&q, &k, &k, 0.125, false))?;
            assert_eq!(inner.call, "batch f16 b=1 h=2 h_k=2 d=32 s_q=4 s_k=4");
            flash_attn(&q, &k, &k, 0.125, true)
        })
        .unwrap();
        assert_eq!(outer.call, "batch f16 b=1 h=2 h_k=2 d=32 s_q=4 s_k=4 causal");
    }
}
