//! The Candle ops: `FlashAttn` (batch layout) and `FlashAttnVarLen` (varlen / paged), and the
//! dispatch from Candle storages to a backend.

use crate::params::{AttnCall, Request, VarLenRequest};
use candle::backend::BackendStorage;
use candle::op::BackpropOp;
use candle::{CpuStorage, Layout, Result, Shape, Storage, Tensor};

/// Flash-attention over `(batch, seq_len, heads, head_dim)` tensors; the same public fields as
/// `candle_flash_attn::FlashAttn`. Use it with `q.apply_op3(k, v, op)`, or
/// [`FlashAttn::forward_with_lse`] to also get the log-sum-exp.
pub struct FlashAttn {
    pub softmax_scale: f32,
    pub alibi_slopes: Option<Tensor>,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
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

    /// Runs the op and also returns the log-sum-exp of each query row's logits, f32 of shape
    /// `(batch, heads, seq_len_q)` (`-inf` for a row that sees no key, whose output is 0).
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
/// [`crate::triton::offload::run_on_gpu`], the same call runs on a GPU instead).
fn cpu_forward(
    req: &Request<'_>,
    (q, q_l): (&CpuStorage, &Layout),
    (k, k_l): (&CpuStorage, &Layout),
    (v, v_l): (&CpuStorage, &Layout),
    want_lse: bool,
) -> Result<(CpuStorage, Option<Vec<f32>>, AttnCall)> {
    #[cfg(feature = "triton")]
    if let Some(driver) = crate::triton::offload::active() {
        let (out, lse, call) = crate::triton::offload::forward(driver, req, (q, q_l), (k, k_l), (v, v_l))?;
        return Ok((out, want_lse.then_some(lse), call));
    }
    let call = AttnCall::new(req, [q.dtype(), k.dtype(), v.dtype()], q_l, k_l, v_l)?;
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
                let (out, _lse) = crate::rocm::candle_glue::forward(
                    &self.request(),
                    (q, q_l),
                    (k, k_l),
                    (v, v_l),
                    false,
                )?;
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
            let ((out, lse), lse_dims) = crate::rocm::candle_glue::forward_with_lse_dims(
                req,
                (q_r, q_l),
                (k_r, k_l),
                (v_r, v_l),
            )?;
            (Storage::Rocm(out), Storage::Rocm(lse), lse_dims)
        }
        _ => candle::bail!(
            "flash-attn: q, k and v must be on the same supported device (cpu{}), got {:?}, {:?}, {:?}",
            if cfg!(feature = "candle-rocm") { " or rocm" } else { "" },
            q.device().location(),
            k.device().location(),
            v.device().location()
        ),
    };
    let out = Tensor::from_storage(out, q.shape().clone(), BackpropOp::none(), false);
    let lse = Tensor::from_storage(lse, lse_dims, BackpropOp::none(), false);
    Ok((out, lse))
}
