//! Input element types of the CPU kernel: f32, f16 and bf16, all computed in f32.

use super::block::Inputs;
use super::simd::Vector;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Plain data whose all-zero bit pattern is the value +0: zeroing a buffer's bytes makes a
/// buffer of zeros.
///
/// # Safety
/// Every bit pattern of an implementor must be a valid value, and all-zero bits must be +0.
pub unsafe trait ZeroBits {}

// SAFETY: IEEE binary32 and binary16 and bfloat16: every bit pattern is a value, and all-zero
// bits are +0.
unsafe impl ZeroBits for f32 {}
// SAFETY: as above.
unsafe impl ZeroBits for f16 {}
// SAFETY: as above.
unsafe impl ZeroBits for bf16 {}

pub trait Element: Copy + Send + Sync + ZeroBits + 'static {
    /// True for f32, whose K/V rows the products can read in place.
    const IS_F32: bool;
    /// `src` widened into `dst` (of equal length), vectorized where the CPU allows.
    fn to_f32_slice(src: &[Self], dst: &mut [f32]);
    /// `src` rounded (to nearest even) into `dst` (of equal length), vectorized where the CPU
    /// allows.
    fn from_f32_slice(src: &[f32], dst: &mut [Self]);
    /// `V::LANES` elements at `p`, widened to f32.
    ///
    /// # Safety
    /// `p` must be valid for `V::LANES` elements, and the CPU must have `V`'s features.
    unsafe fn load<V: Vector>(p: *const Self) -> V;
    /// True when [`Element::load_pair`] splits by parity (bf16), false when it loads in order.
    const PAIRS_BY_PARITY: bool;
    /// `2 × V::LANES` elements at `p` as f32, in two vectors: in order, or for bf16 the
    /// even-indexed elements then the odd ones ([`Vector::load_bf16_pair`]).
    ///
    /// # Safety
    /// `p` must be valid for `2 × V::LANES` elements, and the CPU must have `V`'s features.
    #[inline(always)]
    unsafe fn load_pair<V: Vector>(p: *const Self) -> (V, V) {
        // SAFETY: forwarded contract.
        unsafe { (Self::load::<V>(p), Self::load::<V>(p.add(V::LANES))) }
    }
    /// These inputs as bf16 inputs, when they are: the AMX products serve only those.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn as_bf16<'a, 'b>(_inputs: &'b Inputs<'a, Self>) -> Option<&'b Inputs<'a, bf16>> {
        None
    }
}

impl Element for f32 {
    const IS_F32: bool = true;
    const PAIRS_BY_PARITY: bool = false;
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const Self) -> V {
        // SAFETY: forwarded contract.
        unsafe { V::load(p) }
    }
}

impl Element for f16 {
    const IS_F32: bool = false;
    const PAIRS_BY_PARITY: bool = false;
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const Self) -> V {
        // SAFETY: forwarded contract; f16 is a transparent u16.
        unsafe { V::load_f16(p.cast()) }
    }
}

impl Element for bf16 {
    const IS_F32: bool = false;
    const PAIRS_BY_PARITY: bool = true;
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        assert_eq!(src.len(), dst.len());
        // `half` narrows bf16 one element at a time, with branches; this formula is the same
        // rounding without them, so the compiler vectorizes it. The writer narrows every output
        // row: on the Xeon (AMX, bf16, s=1024, 2 and 16 threads) writing took 8% as long as the
        // blocks; with this, 16-thread calls (s=1024 and 4096) ran 1-3% faster by the minimum
        // (2 threads: within the box's noise).
        for (out, &x) in dst.iter_mut().zip(src) {
            *out = bf16::from_bits(bf16_bits(x));
        }
    }
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const Self) -> V {
        // SAFETY: forwarded contract; bf16 is a transparent u16.
        unsafe { V::load_bf16(p.cast()) }
    }
    #[inline(always)]
    unsafe fn load_pair<V: Vector>(p: *const Self) -> (V, V) {
        // SAFETY: forwarded contract; bf16 is a transparent u16.
        unsafe { V::load_bf16_pair(p.cast()) }
    }
    fn as_bf16<'a, 'b>(inputs: &'b Inputs<'a, Self>) -> Option<&'b Inputs<'a, bf16>> {
        Some(inputs)
    }
}

/// The bits of `x` rounded to bfloat16, to nearest even, as `half::bf16::from_f32` rounds:
/// adding 0x7FFF plus the kept part's lowest bit carries into it exactly when the dropped half
/// is above one half, or equal to it with that bit odd. A NaN keeps its sign and top mantissa
/// bits and becomes quiet.
#[inline(always)]
fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = (bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16) as u16;
    let quiet_nan = ((bits >> 16) | 0x40) as u16;
    if bits & 0x7FFF_FFFF > 0x7F80_0000 {
        quiet_nan
    } else {
        rounded
    }
}

/// Copies `src` into `dst` as f32, eight lanes at a time (`src.len()` is a multiple of 8: head
/// dims are).
///
/// # Safety
/// The CPU must have `V`'s features.
#[inline(always)]
pub unsafe fn widen<T: Element, V: Vector>(src: &[T], dst: &mut [f32]) {
    debug_assert!(src.len() % V::LANES == 0 && dst.len() >= src.len());
    for (s, d) in src.chunks_exact(V::LANES).zip(dst.chunks_exact_mut(V::LANES)) {
        // SAFETY: both chunks hold V::LANES elements; features per the caller.
        unsafe { T::load::<V>(s.as_ptr()).store(d.as_mut_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::{bf16_bits, Element};
    use crate::cpu::testing::seeded;
    use half::bf16;
    use rand::Rng;

    /// The branch-free rounding agrees with `half` bit for bit: on random bit patterns (NaNs and
    /// subnormals among them), on ties (exactly half way between two bf16s), on the edges
    /// (zeros, infinities, the largest floats), and through the slice conversion.
    #[test]
    fn bf16_narrowing_matches_half() {
        let (seed, mut rng) = seeded();
        for _ in 0..1_000_000 {
            let x = f32::from_bits(rng.gen());
            assert_eq!(bf16_bits(x), bf16::from_f32(x).to_bits(), "seed {seed}, bits {:#010x}", x.to_bits());
        }
        for _ in 0..100_000 {
            let tie = f32::from_bits((rng.gen::<u32>() & 0xFFFF_0000) | 0x8000);
            assert_eq!(bf16_bits(tie), bf16::from_f32(tie).to_bits(), "seed {seed}, tie {:#010x}", tie.to_bits());
        }
        let edges = [0.0, -0.0, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MIN_POSITIVE, 1e-45];
        for x in edges {
            assert_eq!(bf16_bits(x), bf16::from_f32(x).to_bits(), "{x:e}");
        }
        let src: Vec<f32> = (0..1000).map(|_| rng.gen_range(-1e4f32..1e4)).collect();
        let mut ours = vec![bf16::ZERO; src.len()];
        bf16::from_f32_slice(&src, &mut ours);
        let theirs: Vec<bf16> = src.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(ours, theirs, "seed {seed}");
    }
}
