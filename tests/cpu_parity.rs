//! Parity of the batch-layout functions against the f64 reference, on fresh random inputs.

mod common;

use candle::{DType, Device, IndexOp, Tensor};
use common::batch::{batch_expected, batch_inputs, BatchCase, BatchInputs};
use common::calls::{self, Window, CAUSAL, NONE};
use common::*;
use flash_attn_rocm as fa;

fn check(c: &BatchCase, rng: &mut rand::rngs::StdRng) {
    check_inputs(c, &batch_inputs(c, rng));
}

fn check_inputs(c: &BatchCase, x: &BatchInputs) {
    let out = calls::batch(&x.q, &x.k, &x.v, x.features(c)).unwrap();
    assert_eq!(out.dims(), x.q.dims());
    assert_eq!(out.dtype(), c.dtype);
    assert!(out.is_contiguous());
    let exp = batch_expected(c, x);
    let what = format!("{c:?}");
    assert_close(&what, &values(&out), &exp.exact, &exp.naive, c.dtype);

    // The LSE variant returns the same output and the reference log-sum-exp.
    let (out2, lse) = calls::batch_op(x.features(c)).forward_with_lse(&x.q, &x.k, &x.v).unwrap();
    assert_eq!(values(&out2), values(&out), "{what}: forward_with_lse output");
    assert_eq!(lse.dims(), &[c.b, c.h, c.s_q]);
    assert_eq!(lse.dtype(), DType::F32);
    assert_lse_close(&what, &values(&lse), &exp.exact_lse, 1e-4);
}

const DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];
const HEADS: [(usize, usize); 3] = [(4, 4), (4, 1), (6, 2)];
/// (left, right) windows: none, causal, two-sided, left-only, right-only.
const WINDOWS: [Window; 5] = [NONE, CAUSAL, (Some(17), Some(5)), (Some(40), None), (None, Some(3))];

#[test]
fn head_dims_and_lengths_grid() {
    let mut rng = rng("head_dims_and_lengths_grid");
    let lengths = [(113, 203), (203, 113), (1, 147), (128, 128), (65, 1)];
    let mut n = 0;
    for d in [32, 40, 64, 96, 128, 256, 512] {
        for &(s_q, s_k) in &lengths {
            let (h, h_k) = HEADS[n % 3];
            let c = BatchCase {
                b: 1 + n % 2,
                s_q,
                s_k,
                h: if d >= 256 { 2 } else { h },
                h_k: if d >= 256 { 1 + n % 2 } else { h_k },
                d,
                dtype: DTYPES[n % 3],
                window: WINDOWS[n % 5],
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
        let c = BatchCase {
            b: 1,
            s_q: 1023,
            s_k: 1024,
            h: 2,
            h_k: 1,
            d: 64,
            dtype: DTYPES[i + 1],
            window: (None, causal.then_some(0)),
            alibi: false,
            softcap: None,
            transposed: causal,
        };
        check(&c, &mut rng);
    }
}

/// Logits that grow along the keys, the last ones ~10x the first tile's: rows must move their
/// softmax shift on later tiles and rescale what they hold (the bf16 AMX kernel keeps a row's
/// shift while a tile's logits stay within e^5.5 of it, so random logits seldom take that path).
/// Then a causal call whose first block of 256 rows sees no key at all: those rows come out 0.
#[test]
fn logits_rising_along_the_keys_and_rows_before_any_key() {
    let mut rng = rng("logits_rising_along_the_keys_and_rows_before_any_key");
    for dtype in DTYPES {
        let c = BatchCase {
            b: 1, s_q: 64, s_k: 1000, h: 4, h_k: 2, d: 64, dtype,
            window: NONE, alibi: false, softcap: None, transposed: false,
        };
        let mut x = batch_inputs(&c, &mut rng);
        let ramp: Vec<f32> = (0..c.s_k).map(|j| 1.0 + j as f32 / 100.0).collect();
        let ramp = Tensor::from_vec(ramp, (1, c.s_k, 1, 1), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
        x.k = x.k.broadcast_mul(&ramp).unwrap();
        check_inputs(&c, &x);
    }
    let c = BatchCase {
        b: 1, s_q: 600, s_k: 50, h: 2, h_k: 2, d: 64, dtype: DType::BF16,
        window: CAUSAL, alibi: false, softcap: None, transposed: false,
    };
    check(&c, &mut rng);
}

#[test]
fn alibi_softcap_and_windows() {
    let mut rng = rng("alibi_softcap_and_windows");
    let mut n = 0;
    for alibi in [false, true] {
        for softcap in [None, Some(5.0f32)] {
            for window in WINDOWS {
                let (h, h_k) = HEADS[n % 3];
                let c = BatchCase {
                    b: 2,
                    s_q: [77, 150, 1][n % 3],
                    s_k: [150, 77, 99][n % 3],
                    h,
                    h_k,
                    d: [64, 128, 40][n % 3],
                    dtype: DTYPES[n % 3],
                    window,
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
    let c = BatchCase {
        b: 1, s_q: 40, s_k: 50, h: 2, h_k: 2, d: 32, dtype: DType::F32,
        window: (Some(51), Some(1000)), alibi: false, softcap: None, transposed: false,
    };
    let x = batch_inputs(&c, &mut rng);
    let windowed = calls::batch(&x.q, &x.k, &x.v, x.features(&c)).unwrap();
    let full = fa::flash_attn(&x.q, &x.k, &x.v, x.scale, false).unwrap();
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
