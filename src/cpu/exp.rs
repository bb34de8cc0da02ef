//! Vectorized `exp` and `max` for the softmax: the scalar libm call would cost as much as the
//! GEMMs of a tile.

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

fn exp_shifted_sum_scalar(row: &mut [f32], shift: f32) -> f32 {
    row.iter_mut().fold(0.0, |sum, x| {
        *x = exp_approx(*x - shift);
        sum + *x
    })
}

fn max_scalar(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// Explicit AVX2 versions: LLVM does not vectorize the scalar forms (saturating casts, NaN-aware
/// max), and the softmax would then cost about as much as the two GEMMs of a tile.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Eight lanes of [`super::exp_approx`], same constants and the same zero below -87.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.0));
        let xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            xc,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        let f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
        let f = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), f);
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
        }
        let exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(exponent));
        _mm256_andnot_ps(underflow, _mm256_mul_ps(p, scale))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_shifted_sum(row: &mut [f32], shift: f32) -> f32 {
        let mut chunks = row.chunks_exact_mut(8);
        let shift_v = _mm256_set1_ps(shift);
        let mut acc = _mm256_setzero_ps();
        for chunk in &mut chunks {
            // SAFETY (whole block): `chunk` holds exactly 8 f32s; unaligned loads/stores.
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), shift_v));
            _mm256_storeu_ps(chunk.as_mut_ptr(), e);
            acc = _mm256_add_ps(acc, e);
        }
        hsum(acc) + super::exp_shifted_sum_scalar(chunks.into_remainder(), shift)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn max(row: &[f32]) -> f32 {
        let mut chunks = row.chunks_exact(8);
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for chunk in &mut chunks {
            // SAFETY: `chunk` holds exactly 8 f32s; unaligned load.
            m = _mm256_max_ps(m, _mm256_loadu_ps(chunk.as_ptr()));
        }
        let hi = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let hi = _mm_max_ps(hi, _mm_movehl_ps(hi, hi));
        let lanes = _mm_cvtss_f32(_mm_max_ss(hi, _mm_shuffle_ps::<1>(hi, hi)));
        lanes.max(super::max_scalar(chunks.remainder()))
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Replaces every `x` of `row` by `e^(x - shift)` and returns their sum.
pub fn exp_shifted_sum(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports the features the function was compiled for (checked above).
        return unsafe { avx2::exp_shifted_sum(row, shift) };
    }
    exp_shifted_sum_scalar(row, shift)
}

/// The largest value of `row` (`-inf` when empty).
pub fn max(row: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports the features the function was compiled for (checked above).
        return unsafe { avx2::max(row) };
    }
    max_scalar(row)
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
    fn max_finds_the_largest_value_in_any_lane() {
        for len in [0usize, 1, 7, 8, 9, 33] {
            for at in 0..len {
                let mut row: Vec<f32> = (0..len).map(|i| -(i as f32) - 1.0).collect();
                row[at] = 3.5;
                assert_eq!(max(&row), 3.5, "len {len}, max at {at}");
            }
        }
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        assert_eq!(max(&[f32::NEG_INFINITY; 9]), f32::NEG_INFINITY);
    }

    #[test]
    fn shifted_sum_is_the_sum_of_exps() {
        let mut input: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        input[5] = f32::NEG_INFINITY;
        input[30] = f32::NEG_INFINITY;
        let mut row = input.clone();
        let got = exp_shifted_sum(&mut row, 1.5);
        let expected: Vec<f64> = input.iter().map(|&x| ((x - 1.5) as f64).exp()).collect();
        let total: f64 = expected.iter().sum();
        assert!(((got as f64 - total) / total).abs() < 1e-6, "{got} vs {total}");
        for (r, e) in row.iter().zip(&expected) {
            if *e == 0.0 {
                assert_eq!(*r, 0.0, "masked entries must vanish exactly");
            } else {
                assert!(((*r as f64 - e) / e).abs() < 1e-6, "{r} vs {e}");
            }
        }
    }
}
