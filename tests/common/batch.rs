//! Batch-layout cases `(b, s, h, d)`: random inputs and their reference.

use candle::{DType, IndexOp, Tensor};
use rand::rngs::StdRng;

use super::calls::{Features, Window};
use super::expected::{expected, Expected, LseLayout};
use super::{randn, randn_transposed, values, SeqData};

/// One batch-mode call.
#[derive(Clone, Copy, Debug)]
pub struct BatchCase {
    pub b: usize,
    pub s_q: usize,
    pub s_k: usize,
    pub h: usize,
    pub h_k: usize,
    pub d: usize,
    pub dtype: DType,
    pub window: Window,
    pub alibi: bool,
    pub softcap: Option<f32>,
    /// q, k, v strided: `(b, s, h, d)` views of `(b, h, s, d)` memory.
    pub transposed: bool,
}

pub struct BatchInputs {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub slopes: Option<Tensor>,
    pub scale: f32,
}

/// Positive ALiBi slopes, one per query head.
pub fn slopes(rng: &mut StdRng, h: usize) -> Tensor {
    (randn(rng, &[h], DType::F32).abs().unwrap() * 0.3).unwrap()
}

pub fn batch_inputs(c: &BatchCase, rng: &mut StdRng) -> BatchInputs {
    let make = |rng: &mut StdRng, s, h| {
        if c.transposed {
            randn_transposed(rng, c.b, s, h, c.d, c.dtype)
        } else {
            randn(rng, &[c.b, s, h, c.d], c.dtype)
        }
    };
    let (q, k, v) = (make(rng, c.s_q, c.h), make(rng, c.s_k, c.h_k), make(rng, c.s_k, c.h_k));
    let slopes = c.alibi.then(|| slopes(rng, c.h));
    BatchInputs { q, k, v, slopes, scale: 1.0 / (c.d as f32).sqrt() }
}

impl BatchInputs {
    /// The case's features with these inputs' scale and slopes.
    pub fn features(&self, c: &BatchCase) -> Features<'_> {
        Features { scale: self.scale, window: c.window, alibi: self.slopes.as_ref(), softcap: c.softcap }
    }
}

/// Reference output `(b, s_q, h, d)` and LSE `(b, h, s_q)`, flattened.
pub fn batch_expected(c: &BatchCase, x: &BatchInputs) -> Expected {
    let seqs: Vec<SeqData> = (0..c.b)
        .map(|b| SeqData {
            q: values(&x.q.i(b).unwrap()),
            k: values(&x.k.i(b).unwrap()),
            v: values(&x.v.i(b).unwrap()),
            s_q: c.s_q,
            s_k: c.s_k,
        })
        .collect();
    let opts = x.features(c).ref_opts(c.s_k);
    expected(&seqs, &vec![opts; c.b], (c.h, c.h_k, c.d), c.dtype, LseLayout::Batch)
}
