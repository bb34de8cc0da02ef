//! "Call the public function that fits these features": the tests pick the function from the
//! case (window, ALiBi, softcap) so that every public function is exercised by the same grid.

use candle::{Result, Tensor};
use flash_attn_rocm as fa;

use super::{values, RefOpts};

/// `(window_size_left, window_size_right)` as the public functions take them.
pub type Window = (Option<usize>, Option<usize>);
pub const NONE: Window = (None, None);
pub const CAUSAL: Window = (None, Some(0));

pub fn is_causal(w: Window) -> bool {
    w == CAUSAL
}

/// Whether the window is expressible as the `causal` flag of the non-windowed functions.
pub fn is_plain(w: Window) -> bool {
    w == NONE || is_causal(w)
}

/// What a call computes besides its tensors; `alibi` holds the slopes on the call's device.
#[derive(Clone, Copy)]
pub struct Features<'a> {
    pub scale: f32,
    pub window: Window,
    pub alibi: Option<&'a Tensor>,
    pub softcap: Option<f32>,
}

impl Features<'_> {
    /// The same features with other slopes: the copy of the slopes on the call's device.
    pub fn with_alibi<'b>(&self, alibi: Option<&'b Tensor>) -> Features<'b> {
        Features { scale: self.scale, window: self.window, alibi, softcap: self.softcap }
    }

    /// The reference's options for the same call; `max_seqlen_k` is `s_k` in batch mode.
    pub fn ref_opts(&self, max_seqlen_k: usize) -> RefOpts {
        RefOpts {
            scale: self.scale as f64,
            softcap: self.softcap.map(f64::from),
            alibi: self.alibi.map(values),
            window_left: self.window.0,
            window_right: self.window.1,
            max_seqlen_k,
            mm_prefix: vec![],
        }
    }
}

/// The varlen functions' cumulative lengths and maxima.
pub struct Seqlens<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub max_q: usize,
    pub max_k: usize,
}

/// Paged K/V `(num_blocks, page, h_k, d)` and the block table `(b, max_blocks)`.
pub struct PagedKv<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub table: &'a Tensor,
    pub page: usize,
}

/// The public batch function that fits `f`.
pub fn batch(q: &Tensor, k: &Tensor, v: &Tensor, f: Features) -> Result<Tensor> {
    let (left, right) = f.window;
    let causal = is_causal(f.window);
    match (f.alibi, f.softcap) {
        (s, Some(cap)) => fa::flash_attn_alibi_windowed_softcap(q, k, v, s, f.scale, left, right, cap),
        (Some(s), None) if is_plain(f.window) => fa::flash_attn_alibi(q, k, v, s, f.scale, causal),
        (Some(s), None) => fa::flash_attn_alibi_windowed(q, k, v, s, f.scale, left, right),
        (None, None) if is_plain(f.window) => fa::flash_attn(q, k, v, f.scale, causal),
        (None, None) => fa::flash_attn_windowed(q, k, v, f.scale, left, right),
    }
}

/// The `CustomOp3` behind the batch functions, for `forward_with_lse`.
pub fn batch_op(f: Features) -> fa::FlashAttn {
    fa::FlashAttn {
        softmax_scale: f.scale,
        alibi_slopes: f.alibi.cloned(),
        window_size_left: f.window.0,
        window_size_right: f.window.1,
        softcap: f.softcap,
    }
}

/// The public varlen function that fits `f`.
pub fn varlen(q: &Tensor, k: &Tensor, v: &Tensor, s: &Seqlens, f: Features) -> Result<Tensor> {
    let (left, right) = f.window;
    let causal = is_causal(f.window);
    let (sq, sk, max_q, max_k, scale) = (s.q, s.k, s.max_q, s.max_k, f.scale);
    match (f.alibi, f.softcap) {
        (a, Some(cap)) => {
            fa::flash_attn_varlen_alibi_windowed_softcap(q, k, v, a, sq, sk, max_q, max_k, scale, left, right, cap)
        }
        (Some(a), None) if is_plain(f.window) => {
            fa::flash_attn_varlen_alibi(q, k, v, a, sq, sk, max_q, max_k, scale, causal)
        }
        (Some(a), None) => fa::flash_attn_varlen_alibi_windowed(q, k, v, a, sq, sk, max_q, max_k, scale, left, right),
        (None, None) if is_plain(f.window) => fa::flash_attn_varlen(q, k, v, sq, sk, max_q, max_k, scale, causal),
        (None, None) => fa::flash_attn_varlen_windowed(q, k, v, sq, sk, max_q, max_k, scale, left, right),
    }
}

pub fn varlen_with_lse(q: &Tensor, k: &Tensor, v: &Tensor, s: &Seqlens, f: Features) -> Result<(Tensor, Tensor)> {
    let (left, right) = f.window;
    fa::flash_attn_varlen_with_lse(q, k, v, f.alibi, s.q, s.k, s.max_q, s.max_k, f.scale, left, right, f.softcap)
}

/// `flash_attn_varlen_paged_windowed`; the paged functions take no ALiBi slopes.
pub fn paged(q: &Tensor, kv: &PagedKv, mm_prefix: Option<&Tensor>, s: &Seqlens, f: Features) -> Result<Tensor> {
    assert!(f.alibi.is_none(), "the paged functions take no ALiBi slopes");
    let (left, right) = f.window;
    fa::flash_attn_varlen_paged_windowed(
        q, kv.k, kv.v, s.q, s.k, kv.table, mm_prefix, s.max_q, s.max_k, f.scale, left, right, kv.page, f.softcap,
    )
}

pub fn paged_with_lse(
    q: &Tensor,
    kv: &PagedKv,
    mm_prefix: Option<&Tensor>,
    s: &Seqlens,
    f: Features,
) -> Result<(Tensor, Tensor)> {
    assert!(f.alibi.is_none(), "the paged functions take no ALiBi slopes");
    let (left, right) = f.window;
    fa::flash_attn_varlen_paged_windowed_with_lse(
        q, kv.k, kv.v, s.q, s.k, kv.table, mm_prefix, s.max_q, s.max_k, f.scale, left, right, kv.page, f.softcap,
    )
}
