//! The plain attention reference: scores, mask, softmax, weighted sum, one query at a time.

use candle::DType;

/// One sequence's logical data: q `[s_q][h][d]`, k and v `[s_k][h_k][d]`.
pub struct SeqData {
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub s_q: usize,
    pub s_k: usize,
}

/// The call's options, as the user passes them.
#[derive(Clone, Default)]
pub struct RefOpts {
    pub scale: f64,
    pub softcap: Option<f64>,
    pub alibi: Option<Vec<f64>>,
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    /// `seqlen_k` (batch) or `max_seqlen_k` (varlen): flash-attn resolves windows against it.
    pub max_seqlen_k: usize,
    /// `[start, end)` ranges of this sequence inside which the mask is lifted.
    pub mm_prefix: Vec<(i64, i64)>,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Precision {
    Exact,
    /// Round scores, probabilities and outputs to this dtype as a naive implementation does.
    Naive(DType),
}

fn round(x: f64, p: Precision) -> f64 {
    match p {
        Precision::Exact => x,
        Precision::Naive(DType::F32) => x as f32 as f64,
        Precision::Naive(DType::F16) => half::f16::from_f64(x).to_f64(),
        Precision::Naive(DType::BF16) => half::bf16::from_f64(x).to_f64(),
        Precision::Naive(d) => panic!("no rounding for {d:?}"),
    }
}

/// The window bounds flash-attn applies (candle-flash-attn's launch code, restated): sizes that
/// are absent or exceed `max_seqlen_k` are unbounded; a one-sided window gets `max_seqlen_k` on
/// the other side; with mm prefix ranges a causal call becomes a local window.
fn bounds(o: &RefOpts) -> (Option<i64>, Option<i64>) {
    let max_k = o.max_seqlen_k as i64;
    let fit = |w: Option<usize>| w.map(|w| w as i64).filter(|&w| w <= max_k);
    let (mut l, mut r) = (fit(o.window_left), fit(o.window_right));
    if !o.mm_prefix.is_empty() && l.is_none() && r == Some(0) {
        l = Some(max_k);
    }
    match (l, r) {
        (None, Some(_)) => l = Some(max_k),
        (Some(_), None) => r = Some(max_k),
        _ => {}
    }
    (l, r)
}

/// Returns `(out [s_q][h][d], lse [h][s_q])`.
pub fn reference(seq: &SeqData, h: usize, h_k: usize, d: usize, o: &RefOpts, p: Precision) -> (Vec<f64>, Vec<f64>) {
    let (left, right) = bounds(o);
    let group = h / h_k;
    let mut out = vec![0.0; seq.s_q * h * d];
    let mut lse = vec![f64::NEG_INFINITY; h * seq.s_q];
    let mut scores = vec![0.0; seq.s_k];
    for head in 0..h {
        let kh = head / group;
        for i in 0..seq.s_q {
            let pos = i as i64 + seq.s_k as i64 - seq.s_q as i64;
            let qrow = &seq.q[(i * h + head) * d..][..d];
            for (j, s) in scores.iter_mut().enumerate() {
                let jj = j as i64;
                let in_window = left.map_or(true, |l| jj >= pos - l) && right.map_or(true, |r| jj <= pos + r);
                let in_prefix = o.mm_prefix.iter().any(|&(a, b)| a < b && (a..b).contains(&pos) && (a..b).contains(&jj));
                if !(in_window || in_prefix) {
                    *s = f64::NEG_INFINITY;
                    continue;
                }
                let krow = &seq.k[(j * h_k + kh) * d..][..d];
                let dot: f64 = qrow.iter().zip(krow).map(|(a, b)| a * b).sum();
                let mut x = round(dot * o.scale, p);
                if let Some(c) = o.softcap {
                    x = round(c * (x / c).tanh(), p);
                }
                if let Some(sl) = &o.alibi {
                    x = round(x - sl[head] * (pos - jj).abs() as f64, p);
                }
                *s = x;
            }
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                continue;
            }
            let sum: f64 = scores.iter().map(|s| (s - m).exp()).sum();
            lse[head * seq.s_q + i] = m + sum.ln();
            let orow = &mut out[(i * h + head) * d..][..d];
            for (j, s) in scores.iter().enumerate() {
                let w = round((s - m).exp() / sum, p);
                if w == 0.0 {
                    continue;
                }
                let vrow = &seq.v[(j * h_k + kh) * d..][..d];
                for (acc, vv) in orow.iter_mut().zip(vrow) {
                    *acc += w * vv;
                }
            }
            orow.iter_mut().for_each(|x| *x = round(*x, p));
        }
    }
    (out, lse)
}
