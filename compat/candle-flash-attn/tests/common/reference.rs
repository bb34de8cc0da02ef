//! Attention written as plain tensor ops (matmul, mask, softmax, matmul), in any dtype.
//! Run in f64 it is the truth; run in the dtype under test it is the naive baseline whose
//! rounding error sets the tolerance. Semantics follow candle-flash-attn 0.11.1 / flash-attn 2:
//! masks and alibi distances are aligned bottom-right (query i sits at key i + s_k - s_q),
//! logits are `softcap * tanh(scale * q.k / softcap) - slope * |i + s_k - s_q - j|`,
//! and a query row with no visible key outputs zeros.

use candle::{DType, Device, Result, Tensor};

/// Everything but the tensors that decides what attention computes.
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub scale: f32,
    /// `None` = unbounded, as in the public API.
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    pub alibi_slopes: Option<Vec<f32>>,
    pub softcap: Option<f32>,
}

impl Spec {
    pub fn causal(scale: f32) -> Self {
        Spec {
            scale,
            window_right: Some(0),
            ..Default::default()
        }
    }
}

/// q `(b, s_q, h, d)`, k/v `(b, s_k, h_k, d)` -> `(b, s_q, h, d)`, computed in `dtype`.
pub fn batch_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spec: &Spec,
    dtype: DType,
) -> Result<Tensor> {
    let (_, s_q, h, _) = q.dims4()?;
    let (_, s_k, h_k, _) = k.dims4()?;
    let heads_first = |t: &Tensor| t.to_dtype(dtype)?.transpose(1, 2)?.contiguous();
    let q = heads_first(q)?;
    let k = repeat_kv_heads(&heads_first(k)?, h / h_k)?;
    let v = repeat_kv_heads(&heads_first(v)?, h / h_k)?;
    let mut logits = (q.matmul(&k.t()?)? * spec.scale as f64)?;
    if let Some(cap) = spec.softcap {
        logits = ((logits / cap as f64)?.tanh()? * cap as f64)?;
    }
    let (bias, visible_rows) = bias_and_mask(s_q, s_k, h, spec)?;
    let logits = logits.broadcast_add(&bias.to_dtype(dtype)?)?;
    let probs = candle_nn::ops::softmax_last_dim(&logits)?;
    let out = probs
        .matmul(&v)?
        .broadcast_mul(&visible_rows.to_dtype(dtype)?)?;
    out.transpose(1, 2)?.contiguous()
}

/// Varlen layout: q `(total_q, h, d)`, k/v `(total_k, h_k, d)`, cumulative offsets per sequence.
pub fn varlen_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_q: &[u32],
    cu_k: &[u32],
    spec: &Spec,
    dtype: DType,
) -> Result<Tensor> {
    let mut outs = Vec::new();
    for (q_range, k_range) in cu_q.windows(2).zip(cu_k.windows(2)) {
        let take = |t: &Tensor, r: &[u32]| {
            t.narrow(0, r[0] as usize, (r[1] - r[0]) as usize)?
                .unsqueeze(0)
        };
        let out = batch_attention(
            &take(q, q_range)?,
            &take(k, k_range)?,
            &take(v, k_range)?,
            spec,
            dtype,
        )?;
        outs.push(out.squeeze(0)?);
    }
    Tensor::cat(&outs, 0)
}

/// `(b, h_k, s, d)` -> `(b, h_k * n_rep, s, d)`; query head i reads kv head i / n_rep.
fn repeat_kv_heads(t: &Tensor, n_rep: usize) -> Result<Tensor> {
    let (b, h_k, s, d) = t.dims4()?;
    t.unsqueeze(2)?
        .expand((b, h_k, n_rep, s, d))?
        .reshape((b, h_k * n_rep, s, d))
}

/// Additive bias `(h, s_q, s_k)` (alibi, -inf outside the window) and a `(s_q, 1)` 0/1 factor
/// that zeroes rows with no visible key (their bias row is left finite to avoid NaN).
fn bias_and_mask(s_q: usize, s_k: usize, h: usize, spec: &Spec) -> Result<(Tensor, Tensor)> {
    let mut bias = vec![0f64; h * s_q * s_k];
    let mut visible_rows = vec![0f64; s_q];
    for i in 0..s_q {
        // Position of query i on the key axis (bottom-right alignment); may be negative.
        let diag = i as i64 + s_k as i64 - s_q as i64;
        let visible = |j: usize| {
            let j = j as i64;
            spec.window_left.map_or(true, |w| j >= diag - w as i64)
                && spec.window_right.map_or(true, |w| j <= diag + w as i64)
        };
        let any_visible = (0..s_k).any(visible);
        visible_rows[i] = if any_visible { 1.0 } else { 0.0 };
        for j in 0..s_k {
            for head in 0..h {
                let slope = spec.alibi_slopes.as_ref().map_or(0.0, |s| s[head] as f64);
                let alibi = -slope * (diag - j as i64).abs() as f64;
                let masked = any_visible && !visible(j);
                bias[(head * s_q + i) * s_k + j] = if masked { f64::NEG_INFINITY } else { alibi };
            }
        }
    }
    let bias = Tensor::from_vec(bias, (h, s_q, s_k), &Device::Cpu)?;
    let visible_rows = Tensor::from_vec(visible_rows, (s_q, 1), &Device::Cpu)?;
    Ok((bias, visible_rows))
}
