//! Shared test support: seeded random inputs, an f64 SDPA reference with flash-attn's mask
//! semantics (written from the spec, independent of the crate's code), and the tolerance rule;
//! batch and ragged (varlen, paged) inputs, and the public function that fits a case (`calls`).
#![allow(dead_code)]

pub mod batch;
pub mod calls;
pub mod expected;
pub mod images;
pub mod outcome;
pub mod ragged;
pub mod reference;
pub mod tma_rule;

use candle::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[allow(unused_imports)] // not every test binary uses the reference
pub use reference::{reference, Precision, RefOpts, SeqData};

/// A fresh seed per run (printed so a failure can be replayed with FLASH_ATTN_TEST_SEED).
pub fn rng(test: &str) -> StdRng {
    let seed = std::env::var("FLASH_ATTN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("{test}: seed {seed} (replay with FLASH_ATTN_TEST_SEED={seed})");
    StdRng::seed_from_u64(seed)
}

/// Standard normal values in `dtype`, on the CPU.
pub fn randn(rng: &mut StdRng, dims: &[usize], dtype: DType) -> Tensor {
    let n: usize = dims.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| {
            // Box-Muller: rand 0.8 has no normal distribution without rand_distr.
            let (u1, u2): (f32, f32) = (rng.gen_range(1e-7..1.0), rng.gen());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
        })
        .collect();
    Tensor::from_vec(data, dims, &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
}

/// A `(b, s, h, d)` tensor whose memory is `(b, h, s, d)`: strided, last dim contiguous.
pub fn randn_transposed(rng: &mut StdRng, b: usize, s: usize, h: usize, d: usize, dtype: DType) -> Tensor {
    let t = randn(rng, &[b, h, s, d], dtype).transpose(1, 2).unwrap();
    assert!(h == 1 || s == 1 || !t.is_contiguous());
    t
}

/// Values of a tensor as f64, in logical row-major order.
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// flash-attn's rule: `max|out - ref| <= 2 * max|naive_lowprec - ref| + eps`.
pub fn assert_close(what: &str, out: &[f64], exact: &[f64], naive: &[f64], dtype: DType) {
    assert_eq!(out.len(), exact.len(), "{what}: length");
    let max_diff = |a: &[f64]| a.iter().zip(exact).map(|(x, r)| (x - r).abs()).fold(0.0, f64::max);
    let err = max_diff(out);
    let base = max_diff(naive);
    let scale = exact.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let eps = match dtype {
        DType::F32 => 1e-5 * scale.max(1.0),
        _ => 1e-4,
    };
    assert!(
        err <= 2.0 * base + eps,
        "{what}: max|out-ref| = {err:e} > 2 * {base:e} (naive {dtype:?} error) + {eps:e}"
    );
}

/// LSE agreement: equal infinities, finite values within `tol`.
pub fn assert_lse_close(what: &str, lse: &[f64], exact: &[f64], tol: f64) {
    assert_eq!(lse.len(), exact.len(), "{what}: lse length");
    for (i, (a, b)) in lse.iter().zip(exact).enumerate() {
        if b.is_infinite() {
            assert_eq!(a, b, "{what}: lse[{i}]");
        } else {
            assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: lse[{i}] = {a} vs {b}");
        }
    }
}

pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => "other",
    }
}
