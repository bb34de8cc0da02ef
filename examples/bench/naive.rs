//! Candle's naive attention, as models write it: matmul, (mask), softmax, matmul.

use candle::{DType, Device, Result, Tensor};

/// `q, k, v`: `(b, s, h, d)`; returns `(b, s, h, d)`.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, causal: bool) -> Result<Tensor> {
    let q = q.transpose(1, 2)?.contiguous()?;
    let k = k.transpose(1, 2)?.contiguous()?;
    let v = v.transpose(1, 2)?.contiguous()?;
    let mut att = (q.matmul(&k.t()?)? * scale)?;
    if causal {
        let (s_q, s_k) = (q.dim(2)?, k.dim(2)?);
        let mask: Vec<f32> = (0..s_q)
            .flat_map(|i| (0..s_k).map(move |j| if j + s_q > i + s_k { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (s_q, s_k), &Device::Cpu)?.to_dtype(att.dtype())?;
        att = att.broadcast_add(&mask)?;
    }
    let att = candle_nn::ops::softmax_last_dim(&att)?;
    att.matmul(&v)?.transpose(1, 2)?.contiguous()?.to_dtype(q.dtype())
}

/// f64 reference for a few query rows of head-major data, to measure errors at any length.
/// Returns `max |candidate - reference|` over the sampled rows, for each candidate.
pub fn sampled_errors(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, causal: bool, candidates: &[&Tensor], rows: &[usize]) -> Result<Vec<f64>> {
    let (_, s_q, h, d) = q.dims4()?;
    let s_k = k.dim(1)?;
    let as_f64 = |t: &Tensor| -> Result<Vec<f64>> { t.to_dtype(DType::F64)?.flatten_all()?.to_vec1() };
    let (qv, kv, vv) = (as_f64(&q.narrow(0, 0, 1)?)?, as_f64(&k.narrow(0, 0, 1)?)?, as_f64(&v.narrow(0, 0, 1)?)?);
    let cands: Vec<Vec<f64>> = candidates.iter().map(|c| as_f64(&c.narrow(0, 0, 1)?)).collect::<Result<_>>()?;
    let mut worst = vec![0.0f64; candidates.len()];
    let mut scores = vec![0.0f64; s_k];
    for &i in rows {
        let visible = if causal { (i + s_k + 1).saturating_sub(s_q).min(s_k) } else { s_k };
        for head in 0..h {
            let qrow = &qv[(i * h + head) * d..][..d];
            for (j, s) in scores[..visible].iter_mut().enumerate() {
                *s = qrow.iter().zip(&kv[(j * h + head) * d..][..d]).map(|(a, b)| a * b).sum::<f64>() * scale;
            }
            let m = scores[..visible].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores[..visible].iter().map(|s| (s - m).exp()).sum();
            for c in 0..d {
                let exact: f64 = (0..visible).map(|j| (scores[j] - m).exp() / z * vv[(j * h + head) * d + c]).sum();
                for (w, cand) in worst.iter_mut().zip(&cands) {
                    *w = w.max((cand[(i * h + head) * d + c] - exact).abs());
                }
            }
        }
    }
    Ok(worst)
}
