//! The parity rule of the root crate's parity tests (the same inequality; this crate's floor
//! `eps` is sized for model logits rather than attention outputs):
//! `max|flash - ref| <= 2 * max|naive_lowprec - ref| + eps`, where `ref` is computed in f64 and
//! `naive_lowprec` is plain matmul-softmax in the dtype under test. The factor 2 allows a
//! different but equally good rounding order; `eps` is a floor relative to the output's size,
//! for when the naive error happens to be tiny.

use super::{max_abs, max_abs_diff};
use candle::{DType, Tensor};

/// Relative floor per dtype: 1e-4 for f32; two ulps at 1.0 for the half types (2^-9, 2^-6).
pub fn relative_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 1.95e-3,
        DType::BF16 => 1.56e-2,
        other => panic!("no tolerance defined for {other:?}"),
    }
}

/// Checks the rule and returns (flash error, naive error, bound) for the caller's report.
pub fn assert_within_rule(
    what: &str,
    flash: &Tensor,
    naive_lowprec: &Tensor,
    reference: &Tensor,
) -> candle::Result<(f64, f64, f64)> {
    assert_eq!(flash.dims(), reference.dims(), "{what}: shape");
    assert_eq!(naive_lowprec.dims(), reference.dims(), "{what}: shape");
    let flash_err = max_abs_diff(flash, reference)?;
    let naive_err = max_abs_diff(naive_lowprec, reference)?;
    let eps = relative_eps(flash.dtype()) * max_abs(reference)?;
    let bound = 2.0 * naive_err + eps;
    println!("{what}: flash err {flash_err:.3e}, naive err {naive_err:.3e}, bound {bound:.3e}");
    assert!(
        flash_err.is_finite() && flash_err <= bound,
        "{what}: max|flash - ref| = {flash_err:e} > 2 * {naive_err:e} + {eps:e}"
    );
    Ok((flash_err, naive_err, bound))
}
