//! The reference over several sequences, laid out as the functions under test return it.

use candle::DType;

use super::{reference, Precision, RefOpts, SeqData};

/// How the functions lay out the LSE.
#[derive(Clone, Copy, PartialEq)]
pub enum LseLayout {
    /// `(b, h, s_q)`: one block per sequence.
    Batch,
    /// `(h, total_q)`: each head's rows of all sequences back to back.
    VarLen,
}

/// The f64 reference of one call and the naive low-precision output.
pub struct Expected {
    pub exact: Vec<f64>,
    pub exact_lse: Vec<f64>,
    pub naive: Vec<f64>,
}

/// The reference over `seqs` (sequence `i` with options `opts[i]`), output rows back to back.
pub fn expected(
    seqs: &[SeqData],
    opts: &[RefOpts],
    (h, h_k, d): (usize, usize, usize),
    dtype: DType,
    layout: LseLayout,
) -> Expected {
    assert_eq!(seqs.len(), opts.len());
    let total_q: usize = seqs.iter().map(|s| s.s_q).sum();
    // NaN marks a slot no sequence wrote: it fails every comparison.
    let mut e = Expected { exact: vec![], exact_lse: vec![f64::NAN; h * total_q], naive: vec![] };
    let mut row0 = 0;
    for (seq, o) in seqs.iter().zip(opts) {
        let (out, lse) = reference(seq, h, h_k, d, o, Precision::Exact);
        e.exact.extend(out);
        e.naive.extend(reference(seq, h, h_k, d, o, Precision::Naive(dtype)).0);
        for head in 0..h {
            let dst = match layout {
                LseLayout::VarLen => head * total_q + row0,
                LseLayout::Batch => row0 * h + head * seq.s_q,
            };
            e.exact_lse[dst..][..seq.s_q].copy_from_slice(&lse[head * seq.s_q..][..seq.s_q]);
        }
        row0 += seq.s_q;
    }
    e
}
