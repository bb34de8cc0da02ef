//! The CPU bugs reported in issue 8 (item 8), each with the input of its report.

mod common;

use candle::{DType, Device, Tensor};
use common::{randn, rng, values};
use flash_attn_rocm as fa;

/// (a) A `mm_prefix_ranges` range with a negative end, `[-3, -1)`, holds query 0's position
/// (-2: 4 queries, 2 keys) but no key: query 0 must see nothing (causal hides every key from it),
/// not every key.
#[test]
fn negative_prefix_range_end_lifts_no_mask() {
    let mut r = rng("negative_prefix_range_end_lifts_no_mask");
    let (page, h, d) = (16, 1, 8);
    let q = randn(&mut r, &[4, h, d], DType::F32);
    let k = randn(&mut r, &[1, page, h, d], DType::F32);
    let v = randn(&mut r, &[1, page, h, d], DType::F32);
    let (sq, sk) = (Tensor::new(&[0u32, 4], &Device::Cpu).unwrap(), Tensor::new(&[0u32, 2], &Device::Cpu).unwrap());
    let table = Tensor::new(&[[0u32]], &Device::Cpu).unwrap();
    let ranges = Tensor::new(&[[[-3i32, -1]]], &Device::Cpu).unwrap();
    let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
        &q, &k, &v, &sq, &sk, &table, Some(&ranges), 4, 2, 0.5, None, Some(0), page, None,
    )
    .unwrap();
    let (out, lse) = (values(&out), values(&lse));
    // Query 0 (position -2) and query 1 (position -1) see no key: output 0, LSE -inf.
    assert!(out[..2 * d].iter().all(|&x| x == 0.0), "rows 0-1: {:?}", &out[..2 * d]);
    assert_eq!(&lse[..2], &[f64::NEG_INFINITY; 2]);
    // Query 3 (position 1) sees both keys.
    assert!(lse[3].is_finite());
}

/// (b) A softcap so small that 1/cap overflows: every logit is squashed to about 0, so each row
/// is the mean of the values it sees, not NaN or zeros. Query 0 of each head is zero, so its
/// logits are exactly 0 (the reported case: 0 x inf).
#[test]
fn tiny_softcap_gives_uniform_attention() {
    let mut r = rng("tiny_softcap_gives_uniform_attention");
    let (s_q, s_k, h, d) = (3, 5, 2, 16);
    let q = randn(&mut r, &[1, s_q, h, d], DType::F32);
    let q = Tensor::cat(&[q.narrow(1, 0, 1).unwrap().zeros_like().unwrap(), q.narrow(1, 1, s_q - 1).unwrap()], 1).unwrap();
    let k = randn(&mut r, &[1, s_k, h, d], DType::F32);
    let v = randn(&mut r, &[1, s_k, h, d], DType::F32);
    let out = values(&fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, None, 0.25, None, None, 1e-39).unwrap());
    let v = values(&v);
    for i in 0..s_q {
        for hh in 0..h {
            for c in 0..d {
                let mean = (0..s_k).map(|j| v[(j * h + hh) * d + c]).sum::<f64>() / s_k as f64;
                let got = out[(i * h + hh) * d + c];
                assert!((got - mean).abs() < 1e-5, "out[{i},{hh},{c}] = {got}, mean of v = {mean}");
            }
        }
    }
}

/// (c) An output too large to allocate (a stride-0 broadcast q of 2^37 rows, 256 TiB of f32
/// output) is an `Err`, not an aborted process.
#[test]
fn unallocatable_output_is_an_error() {
    let mut r = rng("unallocatable_output_is_an_error");
    let (h, d) = (8, 64);
    let q = randn(&mut r, &[1, 1, h, d], DType::F32).broadcast_as((1, 1usize << 37, h, d)).unwrap();
    let k = randn(&mut r, &[1, 4, h, d], DType::F32);
    let err = fa::flash_attn(&q, &k, &k, 0.125, false).unwrap_err().to_string();
    assert!(err.contains("cannot allocate the output"), "{err}");
}

/// Issue 24, item 8 (found by randomized testing): q with zero heads divided by zero in the
/// CPU plan (a GQA group of 0) and panicked. It is an `Err` now, in every layout; k/v with zero
/// heads were refused already.
#[test]
fn zero_query_heads_are_refused_not_a_panic() {
    let mut r = rng("zero_query_heads_are_refused_not_a_panic");
    let d = 16;
    let q = randn(&mut r, &[2, 5, 0, d], DType::F32);
    let kv = randn(&mut r, &[2, 7, 2, d], DType::F32);
    let err = fa::flash_attn(&q, &kv, &kv, 0.25, false).unwrap_err().to_string();
    assert!(err.contains("must divide the number of q heads 0"), "{err}");
    let (q, kv) = (randn(&mut r, &[5, 0, d], DType::F32), randn(&mut r, &[7, 2, d], DType::F32));
    let (sq, sk) = (Tensor::new(&[0u32, 5], &Device::Cpu).unwrap(), Tensor::new(&[0u32, 7], &Device::Cpu).unwrap());
    let err = fa::flash_attn_varlen(&q, &kv, &kv, &sq, &sk, 5, 7, 0.25, true).unwrap_err().to_string();
    assert!(err.contains("q heads 0"), "{err}");
    // Zero k/v heads stay refused.
    let (q, kv) = (randn(&mut r, &[1, 3, 2, d], DType::F32), randn(&mut r, &[1, 3, 0, d], DType::F32));
    assert!(fa::flash_attn(&q, &kv, &kv, 0.25, false).is_err());
}
