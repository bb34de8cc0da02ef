//! A vectorizable `exp` for the softmax: the scalar libm call would cost as much as the GEMMs.

/// `e^x` to about 2 ulp for `x` in `[-87, 88]`; exactly 0 below (so masked `-inf` logits vanish).
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a libm call.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 88.0);
    let n = (xc * LOG2E + ROUND) - ROUND;
    let f = (xc - n * LN2_HI) - n * LN2_LO;
    // Minimax-style polynomial for e^f on [-ln2/2, ln2/2] (Taylor to degree 6 is within 2 ulp).
    let p = 1.0
        + f * (1.0
            + f * (0.5
                + f * (1.0 / 6.0 + f * (1.0 / 24.0 + f * (1.0 / 120.0 + f * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < -87.0 {
        0.0
    } else {
        p * scale
    }
}

#[inline(always)]
fn exp_shifted_sum_body(row: &mut [f32], shift: f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = row.chunks_exact_mut(8);
    for chunk in &mut chunks {
        for (a, x) in acc.iter_mut().zip(chunk.iter_mut()) {
            *x = exp_approx(*x - shift);
            *a += *x;
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for x in chunks.into_remainder() {
        *x = exp_approx(*x - shift);
        sum += *x;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_shifted_sum_avx2(row: &mut [f32], shift: f32) -> f32 {
    exp_shifted_sum_body(row, shift)
}

/// Replaces every `x` of `row` by `e^(x - shift)` and returns their sum.
pub fn exp_shifted_sum(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for (checked above).
        return unsafe { exp_shifted_sum_avx2(row, shift) };
    }
    exp_shifted_sum_body(row, shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_libm_over_the_softmax_range() {
        let mut worst = 0.0f64;
        for step in 0..200_000 {
            let x = -87.0 + step as f32 * (87.0 / 200_000.0);
            let rel = ((exp_approx(x) as f64 - (x as f64).exp()) / (x as f64).exp()).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(exp_approx(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_approx(-100.0), 0.0);
    }

    #[test]
    fn shifted_sum_is_the_sum_of_exps() {
        let input: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut row = input.clone();
        let got = exp_shifted_sum(&mut row, 1.5);
        let expected: Vec<f64> = input.iter().map(|&x| ((x - 1.5) as f64).exp()).collect();
        let total: f64 = expected.iter().sum();
        assert!(((got as f64 - total) / total).abs() < 1e-6, "{got} vs {total}");
        for (r, e) in row.iter().zip(&expected) {
            assert!(((*r as f64 - e) / e).abs() < 1e-6, "{r} vs {e}");
        }
    }
}
