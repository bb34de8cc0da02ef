//! Helpers shared by the compat crate's tests: seeded random tensors, an attention reference
//! built from plain tensor ops (so it runs in f64 as the truth and in the test dtype as the
//! "naive" baseline), and the tolerance rule of the parity tests.
#![allow(dead_code)] // each test binary uses its own subset

pub mod reference;
pub mod tolerance;

use candle::{DType, Device, Tensor};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// A fresh seed per run (printed, so a failure can be replayed), or `FLASH_TEST_SEED` if set.
pub fn seeded_rng(test_name: &str) -> StdRng {
    let seed = std::env::var("FLASH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("{test_name}: seed {seed} (replay with FLASH_TEST_SEED={seed})");
    StdRng::seed_from_u64(seed)
}

/// Uniform values in [-scale, scale), created in f64 so every dtype starts from the same numbers.
pub fn uniform(rng: &mut StdRng, shape: &[usize], scale: f64) -> candle::Result<Tensor> {
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|_| rng.gen_range(-scale..scale)).collect();
    Tensor::from_vec(data, shape, &Device::Cpu)
}

pub fn max_abs(t: &Tensor) -> candle::Result<f64> {
    t.to_dtype(DType::F64)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f64>()
}

pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> candle::Result<f64> {
    max_abs(&(a.to_dtype(DType::F64)? - b.to_dtype(DType::F64)?)?)
}
