//! Parity of the batch-layout functions against the f64 reference, on fresh random inputs.

mod common;

use candle::{DType, IndexOp, Tensor};
use common::*;
use flash_attn_rocm as fa;

/// One batch-mode case of the grid.
#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    s_q: usize,
    s_k: usize,
    h: usize,
    h_k: usize,
    d: usize,
    dtype: DType,
    left: Option<usize>,
    right: Option<usize>,
    alibi: bool,
    softcap: Option<f32>,
    transposed: bool,
}

struct Inputs {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    slopes: Option<Tensor>,
    opts: RefOpts,
}

fn inputs(c: &Case, rng: &mut rand::rngs::StdRng) -> Inputs {
    let make = |rng: &mut _, s, h| {
        if c.transposed {
            randn_transposed(rng, c.b, s, h, c.d, c.dtype)
        } else {
            randn(rng, &[c.b, s, h, c.d], c.dtype)
        }
    };
    let (q, k, v) = (make(rng, c.s_q, c.h), make(rng, c.s_k, c.h_k), make(rng, c.s_k, c.h_k));
    let slopes = c.alibi.then(|| (randn(rng, &[c.h], DType::F32).abs().unwrap() * 0.3).unwrap());
    let opts = RefOpts {
        scale: 1.0 / (c.d as f64).sqrt(),
        softcap: c.softcap.map(f64::from),
        alibi: slopes.as_ref().map(values),
        window_left: c.left,
        window_right: c.right,
        max_seqlen_k: c.s_k,
        mm_prefix: vec![],
    };
    Inputs { q, k, v, slopes, opts }
}

/// Reference output `(b, s_q, h, d)` flattened, and LSE `(b, h, s_q)` flattened.
fn expected(c: &Case, inp: &Inputs, p: Precision) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut lse) = (Vec::new(), Vec::new());
    for b in 0..c.b {
        let seq = SeqData {
            q: values(&inp.q.i(b).unwrap()),
            k: values(&inp.k.i(b).unwrap()),
            v: values(&inp.v.i(b).unwrap()),
            s_q: c.s_q,
            s_k: c.s_k,
        };
        let (o, l) = reference(&seq, c.h, c.h_k, c.d, &inp.opts, p);
        out.extend(o);
        lse.extend(l);
    }
    (out, lse)
}

/// Calls the public function that fits the case's features.
fn call(c: &Case, inp: &Inputs) -> Tensor {
    let scale = inp.opts.scale as f32;
    let (q, k, v) = (&inp.q, &inp.k, &inp.v);
    let causal = c.left.is_none() && c.right == Some(0);
    let plain = c.left.is_none() && (c.right.is_none() || causal);
    match (&inp.slopes, c.softcap) {
        (slopes, Some(cap)) => fa::flash_attn_alibi_windowed_softcap(q, k, v, slopes.as_ref(), scale, c.left, c.right, cap),
        (Some(s), None) if plain => fa::flash_attn_alibi(q, k, v, s, scale, causal),
        (Some(s), None) => fa::flash_attn_alibi_windowed(q, k, v, s, scale, c.left, c.right),
        (None, None) if plain => fa::flash_attn(q, k, v, scale, causal),
        (None, None) => fa::flash_attn_windowed(q, k, v, scale, c.left, c.right),
    }
    .unwrap()
}

fn check(c: &Case, rng: &mut rand::rngs::StdRng) {
    let inp = inputs(c, rng);
    let out = call(c, &inp);
    assert_eq!(out.dims(), inp.q.dims());
    assert_eq!(out.dtype(), c.dtype);
    assert!(out.is_contiguous());
    let (exact, exact_lse) = expected(c, &inp, Precision::Exact);
    let (naive, _) = expected(c, &inp, Precision::Naive(c.dtype));
    let what = format!("{c:?}");
    assert_close(&what, &values(&out), &exact, &naive, c.dtype);

    // The LSE variant returns the same output and the reference log-sum-exp.
    let op = fa::FlashAttn {
        softmax_scale: inp.opts.scale as f32,
        alibi_slopes: inp.slopes.clone(),
        window_size_left: c.left,
        window_size_right: c.right,
        softcap: c.softcap,
    };
    let (out2, lse) = op.forward_with_lse(&inp.q, &inp.k, &inp.v).unwrap();
    assert_eq!(values(&out2), values(&out), "{what}: forward_with_lse output");
    assert_eq!(lse.dims(), &[c.b, c.h, c.s_q]);
    assert_eq!(lse.dtype(), DType::F32);
    assert_lse_close(&what, &values(&lse), &exact_lse, 1e-4);
}

const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];
const HEADS: [(usize, usize); 3] = [(4, 4), (4, 1), (6, 2)];
/// (left, right) windows: none, causal, two-sided, left-only, right-only.
const WINDOWS: [(Option<usize>, Option<usize>); 5] =
    [(None, None), (None, Some(0)), (Some(17), Some(5)), (Some(40), None), (None, Some(3))];

#[test]
fn head_dims_and_lengths_grid() {
    let mut rng = rng("head_dims_and_lengths_grid");
    let lengths = [(113, 203), (203, 113), (1, 147), (128, 128), (65, 1)];
    let mut n = 0;
    for d in [32, 40, 64, 96, 128, 256, 512] {
        for &(s_q, s_k) in &lengths {
            let (h, h_k) = HEADS[n % 3];
            let (left, right) = WINDOWS[n % 5];
            let c = Case {
                b: 1 + n % 2,
                s_q,
                s_k,
                h: if d >= 256 { 2 } else { h },
                h_k: if d >= 256 { 1 + n % 2 } else { h_k },
                d,
                dtype: DTYPES[n % 3],
                left,
                right,
                alibi: false,
                softcap: None,
                transposed: n % 4 == 1,
            };
            check(&c, &mut rng);
            n += 1;
        }
    }
}

#[test]
fn long_sequences() {
    let mut rng = rng("long_sequences");
    for (i, causal) in [false, true].into_iter().enumerate() {
        let c = Case {
            b: 1,
            s_q: 1023,
            s_k: 1024,
            h: 2,
            h_k: 1,
            d: 64,
            dtype: DTYPES[i + 1],
            left: None,
            right: causal.then_some(0),
            alibi: false,
            softcap: None,
            transposed: causal,
        };
        check(&c, &mut rng);
    }
}

#[test]
fn alibi_softcap_and_windows() {
    let mut rng = rng("alibi_softcap_and_windows");
    let mut n = 0;
    for alibi in [false, true] {
        for softcap in [None, Some(5.0f32)] {
            for &(left, right) in &WINDOWS {
                let (h, h_k) = HEADS[n % 3];
                let c = Case {
                    b: 2,
                    s_q: [77, 150, 1][n % 3],
                    s_k: [150, 77, 99][n % 3],
                    h,
                    h_k,
                    d: [64, 128, 40][n % 3],
                    dtype: DTYPES[n % 3],
                    left,
                    right,
                    alibi,
                    softcap,
                    transposed: n % 2 == 0,
                };
                if alibi || softcap.is_some() {
                    check(&c, &mut rng);
                }
                n += 1;
            }
        }
    }
}

#[test]
fn windows_wider_than_the_keys_are_unbounded() {
    let mut rng = rng("windows_wider_than_the_keys_are_unbounded");
    let c = Case {
        b: 1, s_q: 40, s_k: 50, h: 2, h_k: 2, d: 32, dtype: DType::F32,
        left: Some(51), right: Some(1000), alibi: false, softcap: None, transposed: false,
    };
    let inp = inputs(&c, &mut rng);
    let windowed = call(&c, &inp);
    let full = fa::flash_attn(&inp.q, &inp.k, &inp.v, inp.opts.scale as f32, false).unwrap();
    assert_eq!(values(&windowed), values(&full));
    check(&c, &mut rng);
}

#[test]
fn empty_keys_give_zero_output_and_neg_inf_lse() {
    let mut rng = rng("empty_keys_give_zero_output_and_neg_inf_lse");
    let q = randn(&mut rng, &[1, 5, 2, 16], DType::F32);
    let kv = randn(&mut rng, &[1, 0, 2, 16], DType::F32);
    let (out, lse) = fa::flash_attn_with_lse(&q, &kv, &kv, 0.25, true).unwrap();
    assert!(values(&out).iter().all(|&x| x == 0.0));
    assert!(values(&lse).iter().all(|&x| x == f64::NEG_INFINITY));
    // Rows whose window holds no key: causal with s_q > s_k leaves the first rows empty.
    let k = randn(&mut rng, &[1, 3, 2, 16], DType::BF16);
    let q = randn(&mut rng, &[1, 6, 2, 16], DType::BF16);
    let out = fa::flash_attn(&q, &k, &k, 0.25, true).unwrap();
    let rows = values(&out.i((0, ..3)).unwrap());
    assert!(rows.iter().all(|&x| x == 0.0), "rows before the first key must be 0");
    assert!(values(&out).iter().all(|x| x.is_finite()));
    assert!(values(&out.i((0, 3..)).unwrap()).iter().any(|&x| x != 0.0));
}
