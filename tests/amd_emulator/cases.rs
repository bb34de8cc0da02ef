//! The kernel classes, each on small shapes that still take every code path of its variants.
use candle::DType;
use flash_attn_rocm as fa;
use flash_attn_rocm::gpu::Driver;
use rand::SeedableRng;

use crate::common::randn;
use crate::compare::check;
use crate::runner::ClassTest;

pub const CLASSES: &[ClassTest] = &[("prefill", prefill)];

const DTYPES: [DType; 2] = [DType::F16, DType::BF16];

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(34)
}

/// Batch prefill: each head-dim tile (and a head dim below its tile), causal, a window, GQA.
fn prefill(driver: &'static Driver) {
    let mut rng = rng();
    for dtype in DTYPES {
        for d in [64] {
            let (b, s_q, s_k, h, h_k) = (1, 40, 56, 2, 1);
            let q = randn(&mut rng, &[b, s_q, h, d], dtype);
            let k = randn(&mut rng, &[b, s_k, h_k, d], dtype);
            let v = randn(&mut rng, &[b, s_k, h_k, d], dtype);
            let scale = 1.0 / (d as f32).sqrt();
            check(&format!("prefill {dtype:?} d{d} causal"), driver, || Ok((fa::flash_attn(&q, &k, &v, scale, true)?, None)));
        }
    }
}
