//! The normalized description of one attention call.
//!
//! Every public entry point turns its arguments into a [`Request`] (what the caller asked for) and
//! then, given the layouts of q/k/v, into an [`AttnCall`]: validated shapes, element strides and
//! offsets, per-sequence lengths, the resolved mask window, paging. Both backends consume this one
//! description: the CPU kernel walks it directly, the ROCm backend marshals it into CK's arguments.
//! Nothing here touches device memory except reading the small integer side tensors (seqlens and
//! block table) to the host for validation.

mod layout;
mod sequences;
mod side;
mod window;

#[cfg(test)]
mod tests;

use candle::{DType, Layout, Result, Tensor};

pub use layout::TensorView;
pub use sequences::{Paging, Sequence, Sequences, UnreadSequences};
pub use side::{AlibiSpec, MmPrefixSpec};
pub use window::Window;

/// Largest head dimension accepted, as candle-flash-attn.
pub const MAX_HEAD_DIM: usize = 512;

/// What the caller asked for, before looking at q/k/v.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub softmax_scale: f32,
    pub alibi_slopes: Option<&'a Tensor>,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
    /// `None` for the batch layout `(b, s, h, d)`.
    pub varlen: Option<VarLenRequest<'a>>,
}

/// The variable-length (and optionally paged) part of a request.
#[derive(Debug, Clone, Copy)]
pub struct VarLenRequest<'a> {
    pub seqlens_q: &'a Tensor,
    pub seqlens_k: &'a Tensor,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    pub block_table: Option<&'a Tensor>,
    pub page_block_size: Option<usize>,
    pub mm_prefix_ranges: Option<&'a Tensor>,
}

/// How q/k/v are laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `(b, s, h, d)` tensors, every sequence of the same length.
    Batch,
    /// `(total, h, d)` tensors holding ragged sequences back to back.
    VarLen,
    /// q as `VarLen`; k/v as `(num_blocks, page_block_size, h_k, d)` pages.
    Paged,
}

/// A validated, normalized attention call.
#[derive(Debug, Clone)]
pub struct AttnCall {
    pub mode: Mode,
    pub dtype: DType,
    pub batch: usize,
    pub num_heads: usize,
    pub num_heads_k: usize,
    pub head_dim: usize,
    pub softmax_scale: f32,
    pub softcap: Option<f32>,
    pub window: Window,
    pub alibi: Option<AlibiSpec>,
    pub mm_prefix: Option<MmPrefixSpec>,
    pub q: TensorView,
    pub k: TensorView,
    pub v: TensorView,
    pub seqs: Sequences,
    /// The flash-attn `seqlen_q`/`seqlen_k` (batch mode) or `max_seqlen_q/k` (varlen).
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    /// Rows of q (`b * s_q` or `total_q`).
    pub total_q: usize,
}

impl AttnCall {
    /// Validates a request against the q/k/v dtypes and layouts and normalizes it, reading the
    /// varlen seqlens and block table (a device-to-host copy when they live on a GPU).
    pub fn new(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
    ) -> Result<Self> {
        Self::build(req, dtypes, q, k, v, true)
    }

    /// As [`AttnCall::new`], but the varlen seqlens and block table are checked by shape only
    /// and left unread (`seqs.unread()` is `Some`): no device-to-host copy. Whoever launches
    /// the call must then keep out-of-range values from reaching a kernel (the ROCm CK path
    /// does so on the device: `rocm::guard`).
    pub fn on_device(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
    ) -> Result<Self> {
        Self::build(req, dtypes, q, k, v, false)
    }

    fn build(
        req: &Request<'_>,
        dtypes: [DType; 3],
        q: &Layout,
        k: &Layout,
        v: &Layout,
        read_values: bool,
    ) -> Result<Self> {
        let [q_dtype, k_dtype, v_dtype] = dtypes;
        if q_dtype != k_dtype || q_dtype != v_dtype {
            candle::bail!(
                "flash-attn: q, k and v must share one dtype, got q {q_dtype:?}, k {k_dtype:?}, v {v_dtype:?}"
            )
        }
        if !matches!(q_dtype, DType::F32 | DType::F16 | DType::BF16) {
            candle::bail!("flash-attn: unsupported dtype {q_dtype:?}, expected f32, f16 or bf16")
        }
        let mode = match req.varlen {
            None => Mode::Batch,
            Some(VarLenRequest { block_table: None, .. }) => Mode::VarLen,
            Some(_) => Mode::Paged,
        };
        let shapes = layout::Shapes::check(mode, q, k, v)?;
        let num_heads = shapes.num_heads;
        let (seqs, max_seqlen_q, max_seqlen_k) = match &req.varlen {
            None => {
                let seqs = Sequences::uniform(shapes.batch, shapes.seqlen_q, shapes.seqlen_k);
                (seqs, shapes.seqlen_q, shapes.seqlen_k)
            }
            Some(varlen) => {
                let seqs = if read_values {
                    Sequences::from_varlen(varlen, &shapes, k)?
                } else {
                    Sequences::from_varlen_unread(varlen, &shapes, k)?
                };
                (seqs, varlen.max_seqlen_q, varlen.max_seqlen_k)
            }
        };
        let batch = seqs.len();
        let softcap = match req.softcap {
            Some(c) if !(c.is_finite() && c > 0.0) => {
                candle::bail!("flash-attn: softcap must be finite and > 0, got {c}")
            }
            other => other,
        };
        if !req.softmax_scale.is_finite() {
            candle::bail!("flash-attn: softmax_scale must be finite, got {}", req.softmax_scale)
        }
        let alibi = req.alibi_slopes.map(|t| AlibiSpec::check(t, num_heads)).transpose()?;
        let mm_prefix = match req.varlen.and_then(|v| v.mm_prefix_ranges) {
            Some(t) => Some(MmPrefixSpec::check(t, batch)?),
            None => None,
        };
        let window = Window::resolve(
            req.window_size_left,
            req.window_size_right,
            max_seqlen_k,
            mm_prefix.is_some(),
        );
        Ok(Self {
            mode,
            dtype: q_dtype,
            batch,
            num_heads,
            num_heads_k: shapes.num_heads_k,
            head_dim: shapes.head_dim,
            softmax_scale: req.softmax_scale,
            softcap,
            window,
            alibi,
            mm_prefix,
            q: TensorView::of(mode, q, false),
            k: TensorView::of(mode, k, mode == Mode::Paged),
            v: TensorView::of(mode, v, mode == Mode::Paged),
            seqs,
            max_seqlen_q,
            max_seqlen_k,
            total_q: shapes.rows_q,
        })
    }

    /// Query heads per k/v head (1 for MHA).
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_heads_k
    }

    /// Shape of the log-sum-exp output: `(b, h, s_q)` in batch mode, `(h, total_q)` otherwise.
    pub fn lse_dims(&self) -> Vec<usize> {
        match self.mode {
            Mode::Batch => vec![self.batch, self.num_heads, self.max_seqlen_q],
            Mode::VarLen | Mode::Paged => vec![self.num_heads, self.total_q],
        }
    }

    /// Index in the LSE buffer of query row `i` of sequence `b`, head `h`.
    pub fn lse_index(&self, b: usize, h: usize, i: usize) -> usize {
        match self.mode {
            Mode::Batch => (b * self.num_heads + h) * self.max_seqlen_q + i,
            Mode::VarLen | Mode::Paged => h * self.total_q + self.seqs.get(b).out_row + i,
        }
    }

    /// Element offset of query row `i` of sequence `b`, head `h`, in the contiguous output.
    pub fn out_offset(&self, b: usize, h: usize, i: usize) -> usize {
        let row = self.seqs.get(b).out_row + i;
        (row * self.num_heads + h) * self.head_dim
    }
}
