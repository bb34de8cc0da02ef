//! The Candle ops: `FlashAttn` (batch layout) and `FlashAttnVarLen` (varlen / paged), and the
//! dispatch from Candle storages to a backend.

use crate::params::{AttnCall, Request, VarLenRequest};
use candle::backend::BackendStorage;
use candle::op::BackpropOp;
use candle::{CpuStorage, Layout, Result, Shape, Storage, Tensor};

/// The batch-layout attention op behind [`flash_attn`](crate::flash_attn) and its variants, with
/// the same public fields as `candle_flash_attn::FlashAttn`: every option at once.
///
/// Use it as a Candle `CustomOp3` with `q.apply_op3(k, v, op)` (returns the output), or call
/// [`FlashAttn::forward_with_lse`] to also get the log-sum-exp. q is `(b, s_q, h, d)`, k and v
/// `(b, s_k, h_k, d)` with `h_k` dividing `h`, one dtype (CPU: f32, f16, bf16; GPU: f16, bf16);
/// the output is `(b, s_q, h, d)` in q's dtype. Positions before heads: a `(b, h, s, d)` tensor
/// whose dims fit runs without an `Err` and gives a wrong result. See the crate's
/// [layouts and dtypes](crate#layouts-and-dtypes), [masks](crate#masks-and-options) and
/// [errors](crate#errors).
///
/// # Example
///
/// ```
/// use flash_attn_rocm::candle::{Device, Tensor};
/// use flash_attn_rocm::{flash_attn_windowed, FlashAttn};
///
/// let dev = Device::Cpu;
/// let (b, s, h, h_k, d) = (1, 12, 4, 1, 16); // MQA: one k/v head
/// let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// let k = Tensor::randn(0f32, 1.0, (b, s, h_k, d), &dev)?;
/// let v = Tensor::randn(0f32, 1.0, (b, s, h_k, d), &dev)?;
/// let op = FlashAttn {
///     softmax_scale: 0.25,
///     alibi_slopes: None,
///     window_size_left: Some(3), // causal sliding window of 4 keys
///     window_size_right: Some(0),
///     softcap: None,
/// };
/// let (out, lse) = op.forward_with_lse(&q, &k, &v)?;
/// assert_eq!(lse.dims(), &[b, h, s]);
///
/// let expected = flash_attn_windowed(&q, &k, &v, 0.25, Some(3), Some(0))?;
/// let diff = (&out - &expected)?.abs()?.max_all()?.to_scalar::<f32>()?;
/// assert!(diff < 1e-6);
/// assert_eq!(q.apply_op3(&k, &v, op)?.dims(), &[b, s, h, d]);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub struct FlashAttn {
    /// Multiplies the logits `q · k`; usually `1 / sqrt(head_dim)`. Must be finite.
    pub softmax_scale: f32,
    /// f32 `(h,)` ALiBi slopes, one per query head: the logit of query `i`, key `j` gets
    /// `-slope * |i + s_k - s_q - j|`.
    pub alibi_slopes: Option<Tensor>,
    /// Keys left of the query's position it may see; `None` (or more than `s_k`) is unbounded.
    pub window_size_left: Option<usize>,
    /// Keys right of the query's position it may see; `Some(0)` with `window_size_left: None`
    /// is causal (bottom-right aligned), `None` (or more than `s_k`) is unbounded.
    pub window_size_right: Option<usize>,
    /// `Some(cap)` maps each scaled logit `x` to `cap * tanh(x / cap)` before the ALiBi bias
    /// and the softmax; `cap` must be finite and > 0.
    pub softcap: Option<f32>,
}

impl FlashAttn {
    fn request(&self) -> Request<'_> {
        Request {
            softmax_scale: self.softmax_scale,
            alibi_slopes: self.alibi_slopes.as_ref(),
            window_size_left: self.window_size_left,
            window_size_right: self.window_size_right,
            softcap: self.softcap,
            varlen: None,
        }
    }

    /// Runs the op and also returns the log-sum-exp of each query row's logits: `(out, lse)`,
    /// `out` as `q.apply_op3(k, v, op)` gives it, `lse` f32 of shape `(b, h, s_q)` (`-inf`
    /// for a row that sees no key, whose output is 0). See
    /// [`flash_attn_with_lse`](crate::flash_attn_with_lse) for how to merge partial results.
    pub fn forward_with_lse(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        forward_with_lse(&self.request(), q, k, v)
    }
}

/// The varlen op behind `flash_attn_varlen*`; private in candle-flash-attn too. `base` holds
/// the options shared with the batch op.
pub(crate) struct FlashAttnVarLen {
    pub base: FlashAttn,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    pub seqlens_q: Tensor,
    pub seqlens_k: Tensor,
    pub block_table: Option<Tensor>,
    pub mm_prefix_ranges: Option<Tensor>,
    pub page_block_size: Option<usize>,
}

impl FlashAttnVarLen {
    pub(crate) fn request(&self) -> Request<'_> {
        Request {
            varlen: Some(VarLenRequest {
                seqlens_q: &self.seqlens_q,
                seqlens_k: &self.seqlens_k,
                max_seqlen_q: self.max_seqlen_q,
                max_seqlen_k: self.max_seqlen_k,
                block_table: self.block_table.as_ref(),
                page_block_size: self.page_block_size,
                mm_prefix_ranges: self.mm_prefix_ranges.as_ref(),
            }),
            ..self.base.request()
        }
    }
}

/// CPU entry shared by both ops' `cpu_fwd` and the LSE variants (inside
/// [`crate::glue::offload::run_on_gpu`], the same call runs on a GPU instead).
fn cpu_forward(
    req: &Request<'_>,
    (q, q_l): (&CpuStorage, &Layout),
    (k, k_l): (&CpuStorage, &Layout),
    (v, v_l): (&CpuStorage, &Layout),
    want_lse: bool,
) -> Result<(CpuStorage, Option<Vec<f32>>, AttnCall)> {
    #[cfg(feature = "triton")]
    if let Some(driver) = crate::glue::offload::active() {
        let (out, lse, call) = crate::glue::offload::forward(driver, req, (q, q_l), (k, k_l), (v, v_l))?;
        return Ok((out, want_lse.then_some(lse), call));
    }
    let call = AttnCall::new(req, [q.dtype(), k.dtype(), v.dtype()], q_l, k_l, v_l)?;
    crate::explain::chosen(|| crate::cpu::dispatch(&call))?;
    let (out, lse) = crate::cpu::forward(&call, q, k, v, want_lse)?;
    Ok((out, lse, call))
}

macro_rules! impl_custom_op3 {
    ($op:ty, $name:literal) => {
        impl candle::CustomOp3 for $op {
            fn name(&self) -> &'static str {
                $name
            }

            fn cpu_fwd(
                &self,
                q: &CpuStorage,
                q_l: &Layout,
                k: &CpuStorage,
                k_l: &Layout,
                v: &CpuStorage,
                v_l: &Layout,
            ) -> Result<(CpuStorage, Shape)> {
                let (out, _, _) = cpu_forward(&self.request(), (q, q_l), (k, k_l), (v, v_l), false)?;
                Ok((out, q_l.shape().clone()))
            }

            #[cfg(feature = "candle-rocm")]
            fn rocm_fwd(
                &self,
                q: &candle::RocmStorage,
                q_l: &Layout,
                k: &candle::RocmStorage,
                k_l: &Layout,
                v: &candle::RocmStorage,
                v_l: &Layout,
            ) -> Result<(candle::RocmStorage, Shape)> {
                let (out, _) = crate::glue::candle_rocm::forward(&self.request(), (q, q_l), (k, k_l), (v, v_l), false)?;
                Ok((out, q_l.shape().clone()))
            }

            #[cfg(feature = "candle-cuda")]
            fn cuda_fwd(
                &self,
                q: &candle::CudaStorage,
                q_l: &Layout,
                k: &candle::CudaStorage,
                k_l: &Layout,
                v: &candle::CudaStorage,
                v_l: &Layout,
            ) -> Result<(candle::CudaStorage, Shape)> {
                let (out, _) = crate::glue::candle_cuda::forward(&self.request(), (q, q_l), (k, k_l), (v, v_l), false)?;
                Ok((out, q_l.shape().clone()))
            }
        }
    };
}

impl_custom_op3!(FlashAttn, "flash-attn");
impl_custom_op3!(FlashAttnVarLen, "flash-attn-varlen");

/// Runs a request on whatever device q/k/v live on and returns `(out, lse)`.
pub(crate) fn forward_with_lse(
    req: &Request<'_>,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (q_s, q_l) = q.storage_and_layout();
    let (k_s, k_l) = k.storage_and_layout();
    let (v_s, v_l) = v.storage_and_layout();
    let (out, lse, lse_dims) = match (&*q_s, &*k_s, &*v_s) {
        (Storage::Cpu(q_c), Storage::Cpu(k_c), Storage::Cpu(v_c)) => {
            let (out, lse, call) = cpu_forward(req, (q_c, q_l), (k_c, k_l), (v_c, v_l), true)?;
            let lse = CpuStorage::F32(lse.expect("requested"));
            (Storage::Cpu(out), Storage::Cpu(lse), call.lse_dims())
        }
        #[cfg(feature = "candle-rocm")]
        (Storage::Rocm(q_r), Storage::Rocm(k_r), Storage::Rocm(v_r)) => {
            let (out, lse) = crate::glue::candle_rocm::forward(req, (q_r, q_l), (k_r, k_l), (v_r, v_l), true)?;
            let (lse, lse_dims) = lse.expect("requested");
            (Storage::Rocm(out), Storage::Rocm(lse), lse_dims)
        }
        #[cfg(feature = "candle-cuda")]
        (Storage::Cuda(q_c), Storage::Cuda(k_c), Storage::Cuda(v_c)) => {
            let (out, lse) = crate::glue::candle_cuda::forward(req, (q_c, q_l), (k_c, k_l), (v_c, v_l), true)?;
            let (lse, lse_dims) = lse.expect("requested");
            (Storage::Cuda(out), Storage::Cuda(lse), lse_dims)
        }
        _ => candle::bail!(
            "flash-attn-rocm: q, k and v must be on the same supported device (cpu{}{}), got {:?}, {:?}, {:?}",
            if cfg!(feature = "candle-rocm") { ", rocm" } else { "" },
            if cfg!(feature = "candle-cuda") { ", cuda" } else { "" },
            q.device().location(),
            k.device().location(),
            v.device().location()
        ),
    };
    let out = Tensor::from_storage(out, q.shape().clone(), BackpropOp::none(), false);
    let lse = Tensor::from_storage(lse, lse_dims, BackpropOp::none(), false);
    Ok((out, lse))
}
