//! The f32 vectors the kernel is written over: AVX-512 (16 lanes) and AVX2 (8 lanes) on x86-64,
//! chosen at run time from the CPU's features ([`Isa::detect`]), and a portable 8-lane array for
//! every other CPU (LLVM vectorizes its loops for NEON and the like).
//!
//! The methods are `#[inline(always)]` and carry no `#[target_feature]` of their own: the kernel's
//! entry points do (`super::run`), and everything below them is inlined into those, so the
//! intrinsics are compiled for the features the entry point was checked for.
#![allow(clippy::missing_safety_doc)]

/// What the kernel may run on this CPU, detected per call (std caches the CPU's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// [`Isa::Avx512`] plus AVX512-BW, AVX512-BF16 and AMX-BF16 (with the OS's permission): bf16 prefill
    /// blocks run on AMX tiles.
    Avx512Amx,
    /// AVX-512F with AVX2, FMA and F16C (every AVX-512 CPU has them).
    Avx512,
    /// AVX2, FMA and F16C.
    Avx2,
    /// Anything else: plain Rust.
    Portable,
}

impl Isa {
    /// The best instruction set of this CPU, or the one `FLASH_ATTN_ROCM_CPU_ISA` names
    /// (`amx`, `avx512`, `avx2`, `portable`: for comparisons and tests); an `Err` when the CPU lacks the
    /// named one or the name is unknown.
    pub fn detect() -> Result<Isa, String> {
        let best = Self::best();
        let Ok(name) = std::env::var("FLASH_ATTN_ROCM_CPU_ISA") else { return Ok(best) };
        let wanted = match name.as_str() {
            "amx" => Isa::Avx512Amx,
            "avx512" => Isa::Avx512,
            "avx2" => Isa::Avx2,
            "portable" => Isa::Portable,
            other => return Err(format!("FLASH_ATTN_ROCM_CPU_ISA={other}: expected amx, avx512, avx2 or portable")),
        };
        let available = match best {
            Isa::Avx512Amx => true,
            Isa::Avx512 => wanted != Isa::Avx512Amx,
            Isa::Avx2 => matches!(wanted, Isa::Avx2 | Isa::Portable),
            Isa::Portable => wanted == Isa::Portable,
        };
        if available {
            Ok(wanted)
        } else {
            Err(format!("FLASH_ATTN_ROCM_CPU_ISA={name}: this CPU's best is {best:?}"))
        }
    }

    /// The name [`crate::Dispatch::variant`] gives it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512Amx => "avx512-amx",
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Portable => "portable",
        }
    }

    fn best() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c");
            if avx2 && std::is_x86_feature_detected!("avx512f") {
                let amx = std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512bf16")
                    && super::amx::available();
                return if amx { Isa::Avx512Amx } else { Isa::Avx512 };
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// A vector of f32 lanes. Pointers passed to the methods must be valid for `LANES` elements.
pub trait Vector: Copy {
    const LANES: usize;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// Lanes of bf16 (as raw u16 bits) widened to f32.
    unsafe fn load_bf16(p: *const u16) -> Self;
    /// Lanes of IEEE f16 (as raw u16 bits) widened to f32.
    unsafe fn load_f16(p: *const u16) -> Self;
    /// `2 × LANES` bf16 (raw u16 bits) as f32, split by parity: the even-indexed elements,
    /// then the odd ones. One bit operation per vector, where [`Vector::load_bf16`] costs a
    /// widening shuffle and a shift; the other operand must be laid out the same way
    /// (`decode.rs`).
    unsafe fn load_bf16_pair(p: *const u16) -> (Self, Self);
    /// `self * b + c`, fused.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn max(self, b: Self) -> Self;
    /// The sum of the lanes.
    unsafe fn sum_lanes(self) -> f32;
    /// The lane sums of four vectors at once (cheaper than four `sum_lanes`).
    #[inline(always)]
    unsafe fn sum_lanes4(v: [Self; 4]) -> [f32; 4] {
        // SAFETY: forwarded contract.
        unsafe { [v[0].sum_lanes(), v[1].sum_lanes(), v[2].sum_lanes(), v[3].sum_lanes()] }
    }
    /// Lanes equal to -inf become 0: the shift of a row that has seen no key yet.
    unsafe fn neg_inf_to_zero(self) -> Self;
    /// Lanes whose `end` is at most `key` become -inf: a key past the row's visible ones.
    unsafe fn hide_from(self, key: f32, end: Self) -> Self;
    /// The transpose of an 8 × 8 block given as eight rows (vectors of 8 lanes only): lane `j` of
    /// row `i` becomes lane `i` of row `j`.
    #[inline(always)]
    unsafe fn transpose8(rows: [Self; 8]) -> [Self; 8] {
        assert_eq!(Self::LANES, 8);
        let mut block = [0.0f32; 64];
        // SAFETY: each row stores 8 lanes into its own 8 of the 64 elements, and each load reads 8.
        unsafe {
            rows.iter().enumerate().for_each(|(i, row)| row.store(block.as_mut_ptr().add(8 * i)));
            std::array::from_fn(|j| Self::load(std::array::from_fn::<f32, 8, _>(|i| block[8 * i + j]).as_ptr()))
        }
    }
    /// Per lane, the float whose exponent field holds the integer in the lane's low mantissa
    /// bits (as adding `EXP_ROUND` leaves `n + 127` there): `2^n`, or +0 for `n = -127`.
    unsafe fn exponent_to_power(self) -> Self;
    /// `e^x` per lane for `x <= 88`, [`exp_scalar`]'s algorithm: exactly 0 below about -87.7
    /// (so -inf gives 0). The AVX2 and AVX-512 vectors run this body; the portable one maps
    /// [`exp_scalar`] lane by lane.
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // SAFETY: lane-wise arithmetic only; the caller has the vector's features.
        unsafe {
            let xc = self.max(Self::splat(EXP_FLOOR));
            let biased = xc.mul(Self::splat(LOG2E)).add(Self::splat(EXP_ROUND));
            let n = biased.sub(Self::splat(EXP_ROUND));
            // x - n·ln2 in two steps, each fused: -(n·c) + x is n·(-c) + x exactly.
            let f = n.mul_add(Self::splat(-LN2_HI), xc);
            let f = n.mul_add(Self::splat(-LN2_LO), f);
            // A loop, not a fold: a closure would not inherit the caller's CPU features, and
            // the intrinsics inside it would become calls.
            let mut p = Self::splat(EXP_POLY[0]);
            for &c in &EXP_POLY[1..] {
                p = p.mul_add(f, Self::splat(c));
            }
            p.mul(biased.exponent_to_power())
        }
    }
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients of e^f on [-ln2/2, ln2/2], highest first (within 2 ulp to degree 6).
const EXP_POLY: [f32; 7] = [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// Adding this to `x·log2(e)` rounds it to an integer `n` and leaves `n + 127`, the biased
/// exponent of `2^n`, in the low mantissa bits: one add does the rounding and the exponent.
const EXP_ROUND: f32 = 12_582_912.0 + 127.0;
/// Inputs are clamped here: `n` is then -127 at the lowest, whose biased exponent 0 shifted into
/// place is the float +0, so masked `-inf` logits give exactly 0 with no compare and select.
const EXP_FLOOR: f32 = -88.0;

/// `e^x` to about 2 ulp for `x` in `[-87, 88]`, exactly 0 below about -87.7 (where the true
/// value is a subnormal); not for `x > 88`. The softmax runs it on every score, and it costs
/// as many instructions as it issues (a Zen 3 core retires about two of these vector
/// instructions per cycle here), so it has as few as the accuracy allows: no upper clamp (a
/// softmax's arguments are <= 0) and no underflow select.
#[inline(always)]
pub fn exp_scalar(x: f32) -> f32 {
    let xc = x.max(EXP_FLOOR);
    let biased = xc * LOG2E + EXP_ROUND;
    let n = biased - EXP_ROUND;
    let f = (xc - n * LN2_HI) - n * LN2_LO;
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| p * f + c);
    // n + 127 lies in [0, 254]: shifted into the exponent field it is 2^n, or 0 for n = -127.
    let scale = f32::from_bits(biased.to_bits() << 23);
    p * scale
}

/// Eight f32 lanes in plain Rust, for CPUs without AVX2 (and the reference in tests).
#[derive(Clone, Copy)]
pub struct Portable8([f32; 8]);

impl Portable8 {
    #[inline(always)]
    fn map(self, f: impl Fn(f32) -> f32) -> Self {
        Portable8(self.0.map(f))
    }
    #[inline(always)]
    fn zip(self, b: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        Portable8(std::array::from_fn(|i| f(self.0[i], b.0[i])))
    }
}

impl Vector for Portable8 {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable8([x; 8])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 8 readable f32s at `p`.
        Portable8(unsafe { p.cast::<[f32; 8]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees 8 writable f32s at `p`.
        unsafe { p.cast::<[f32; 8]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    unsafe fn load_bf16(p: *const u16) -> Self {
        // SAFETY: the caller guarantees 8 readable u16s at `p`.
        let raw = unsafe { p.cast::<[u16; 8]>().read_unaligned() };
        Portable8(raw.map(|b| f32::from_bits((b as u32) << 16)))
    }
    #[inline(always)]
    unsafe fn load_bf16_pair(p: *const u16) -> (Self, Self) {
        // SAFETY: the caller guarantees 16 readable u16s at `p`.
        let raw = unsafe { p.cast::<[u16; 16]>().read_unaligned() };
        let widen = |b: u16| f32::from_bits((b as u32) << 16);
        (Portable8(std::array::from_fn(|i| widen(raw[2 * i]))), Portable8(std::array::from_fn(|i| widen(raw[2 * i + 1]))))
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        // SAFETY: the caller guarantees 8 readable u16s at `p`.
        let raw = unsafe { p.cast::<[u16; 8]>().read_unaligned() };
        Portable8(raw.map(|b| half::f16::from_bits(b).to_f32()))
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Portable8(std::array::from_fn(|i| self.0[i].mul_add(b.0[i], c.0[i])))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        self.zip(b, |x, y| x * y)
    }
    #[inline(always)]
    unsafe fn exponent_to_power(self) -> Self {
        self.map(|x| f32::from_bits(x.to_bits() << 23))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        self.zip(b, |x, y| x + y)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        self.zip(b, |x, y| x - y)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        self.zip(b, f32::max)
    }
    #[inline(always)]
    unsafe fn sum_lanes(self) -> f32 {
        self.0.iter().sum()
    }
    #[inline(always)]
    unsafe fn hide_from(self, key: f32, end: Self) -> Self {
        self.zip(end, |x, e| if e <= key { f32::NEG_INFINITY } else { x })
    }
    #[inline(always)]
    unsafe fn neg_inf_to_zero(self) -> Self {
        self.map(|x| if x == f32::NEG_INFINITY { 0.0 } else { x })
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        self.map(exp_scalar)
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{F32x16, F32x8};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Vector;
    use std::arch::x86_64::*;

    /// Eight lanes in a ymm register (AVX2 + FMA + F16C).
    #[derive(Clone, Copy)]
    pub struct F32x8(pub(crate) __m256);

    /// The upper 16 bits of a 32-bit lane: where an odd-indexed bf16 already sits as an f32.
    const HIGH_HALF: i32 = 0xffff_0000_u32 as i32;

    /// Sixteen lanes in a zmm register (AVX-512F).
    #[derive(Clone, Copy)]
    pub struct F32x16(pub(crate) __m512);

    // SAFETY (every method of both impls): the intrinsics need the features of the entry point
    // they are inlined into, which `Isa::detect` checked; pointer validity is the caller's
    // contract, stated on the trait.
    impl Vector for F32x8 {
        const LANES: usize = 8;
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            F32x8(_mm256_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            F32x8(_mm256_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm256_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn load_bf16(p: *const u16) -> Self {
            let raw = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            F32x8(_mm256_castsi256_ps(_mm256_slli_epi32::<16>(raw)))
        }
        #[inline(always)]
        unsafe fn load_f16(p: *const u16) -> Self {
            F32x8(_mm256_cvtph_ps(_mm_loadu_si128(p.cast())))
        }
        #[inline(always)]
        unsafe fn load_bf16_pair(p: *const u16) -> (Self, Self) {
            // Each 32-bit lane holds elements 2i (low half) and 2i + 1 (high half).
            let raw = _mm256_loadu_si256(p.cast());
            let even = _mm256_slli_epi32::<16>(raw);
            let odd = _mm256_and_si256(raw, _mm256_set1_epi32(HIGH_HALF));
            (F32x8(_mm256_castsi256_ps(even)), F32x8(_mm256_castsi256_ps(odd)))
        }
        #[inline(always)]
        unsafe fn mul_add(self, b: Self, c: Self) -> Self {
            F32x8(_mm256_fmadd_ps(self.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            F32x8(_mm256_add_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            F32x8(_mm256_sub_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            F32x8(_mm256_max_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn sum_lanes4(v: [Self; 4]) -> [f32; 4] {
            // Pairwise sums within 128-bit lanes, then the two halves: [Σv0, Σv1, Σv2, Σv3].
            let h = _mm256_hadd_ps(_mm256_hadd_ps(v[0].0, v[1].0), _mm256_hadd_ps(v[2].0, v[3].0));
            let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
            let mut out = [0.0f32; 4];
            _mm_storeu_ps(out.as_mut_ptr(), s);
            out
        }
        #[inline(always)]
        unsafe fn sum_lanes(self) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(self.0), _mm256_extractf128_ps::<1>(self.0));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
        }
        #[inline(always)]
        unsafe fn transpose8(rows: [Self; 8]) -> [Self; 8] {
            let r = rows.map(|row| row.0);
            // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves swapped.
            let low: [__m256; 4] = std::array::from_fn(|i| _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]));
            let high: [__m256; 4] = std::array::from_fn(|i| _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]));
            let quads = [
                _mm256_shuffle_ps::<0x44>(low[0], low[1]),
                _mm256_shuffle_ps::<0xEE>(low[0], low[1]),
                _mm256_shuffle_ps::<0x44>(high[0], high[1]),
                _mm256_shuffle_ps::<0xEE>(high[0], high[1]),
                _mm256_shuffle_ps::<0x44>(low[2], low[3]),
                _mm256_shuffle_ps::<0xEE>(low[2], low[3]),
                _mm256_shuffle_ps::<0x44>(high[2], high[3]),
                _mm256_shuffle_ps::<0xEE>(high[2], high[3]),
            ];
            std::array::from_fn(|j| {
                let (a, b) = (quads[j % 4], quads[4 + j % 4]);
                F32x8(if j < 4 { _mm256_permute2f128_ps::<0x20>(a, b) } else { _mm256_permute2f128_ps::<0x31>(a, b) })
            })
        }
        #[inline(always)]
        unsafe fn hide_from(self, key: f32, end: Self) -> Self {
            let hidden = _mm256_cmp_ps::<_CMP_LE_OQ>(end.0, _mm256_set1_ps(key));
            F32x8(_mm256_blendv_ps(self.0, _mm256_set1_ps(f32::NEG_INFINITY), hidden))
        }
        #[inline(always)]
        unsafe fn neg_inf_to_zero(self) -> Self {
            let is_neg_inf = _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, _mm256_set1_ps(f32::NEG_INFINITY));
            F32x8(_mm256_andnot_ps(is_neg_inf, self.0))
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            F32x8(_mm256_mul_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn exponent_to_power(self) -> Self {
            F32x8(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(self.0))))
        }
    }

    impl F32x16 {
        /// The sum of the two 256-bit halves.
        #[inline(always)]
        unsafe fn halves_added(self) -> F32x8 {
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(self.0)));
            F32x8(_mm256_add_ps(_mm512_castps512_ps256(self.0), high))
        }
    }

    impl Vector for F32x16 {
        const LANES: usize = 16;
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            F32x16(_mm512_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            F32x16(_mm512_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm512_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn load_bf16(p: *const u16) -> Self {
            let raw = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
            F32x16(_mm512_castsi512_ps(_mm512_slli_epi32::<16>(raw)))
        }
        #[inline(always)]
        unsafe fn load_f16(p: *const u16) -> Self {
            F32x16(_mm512_cvtph_ps(_mm256_loadu_si256(p.cast())))
        }
        #[inline(always)]
        unsafe fn load_bf16_pair(p: *const u16) -> (Self, Self) {
            // As for F32x8.
            let raw = _mm512_loadu_si512(p.cast());
            let even = _mm512_slli_epi32::<16>(raw);
            let odd = _mm512_and_si512(raw, _mm512_set1_epi32(HIGH_HALF));
            (F32x16(_mm512_castsi512_ps(even)), F32x16(_mm512_castsi512_ps(odd)))
        }
        #[inline(always)]
        unsafe fn mul_add(self, b: Self, c: Self) -> Self {
            F32x16(_mm512_fmadd_ps(self.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            F32x16(_mm512_add_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            F32x16(_mm512_sub_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            F32x16(_mm512_max_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn sum_lanes(self) -> f32 {
            _mm512_reduce_add_ps(self.0)
        }
        #[inline(always)]
        unsafe fn sum_lanes4(v: [Self; 4]) -> [f32; 4] {
            // Each vector's two 256-bit halves added, then the 8-lane reduction. (No
            // `array::map`: it is not inlined, and its closure would not get the CPU features.)
            F32x8::sum_lanes4([v[0].halves_added(), v[1].halves_added(), v[2].halves_added(), v[3].halves_added()])
        }
        #[inline(always)]
        unsafe fn hide_from(self, key: f32, end: Self) -> Self {
            let hidden = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(end.0, _mm512_set1_ps(key));
            F32x16(_mm512_mask_mov_ps(self.0, hidden, _mm512_set1_ps(f32::NEG_INFINITY)))
        }
        #[inline(always)]
        unsafe fn neg_inf_to_zero(self) -> Self {
            let is_neg_inf = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, _mm512_set1_ps(f32::NEG_INFINITY));
            F32x16(_mm512_mask_mov_ps(self.0, is_neg_inf, _mm512_setzero_ps()))
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            F32x16(_mm512_mul_ps(self.0, b.0))
        }
        #[inline(always)]
        unsafe fn exponent_to_power(self) -> Self {
            F32x16(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(self.0))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_libm_over_the_softmax_range() {
        let mut worst = 0.0f64;
        for step in 0..200_000 {
            let x = -87.0 + step as f32 * (87.0 / 200_000.0);
            let rel = ((exp_scalar(x) as f64 - (x as f64).exp()) / (x as f64).exp()).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(exp_scalar(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_scalar(-100.0), 0.0);
        assert_eq!(exp_scalar(0.0), 1.0, "a row whose max does not move keeps its output exactly");
    }

    /// Every vector type computes the scalar function lane by lane, including -inf and the
    /// values around the -87 cut-off.
    fn vector_exp_is_lane_wise<V: Vector>() {
        let inputs: Vec<f32> = (0..64).map(|i| (i as f32 * 1.37).sin() * 30.0 - 10.0).chain([f32::NEG_INFINITY, -87.0, -86.99, -87.01, 0.0, 88.0, -0.5, 3.0]).collect();
        for chunk in inputs.chunks_exact(V::LANES) {
            let mut out = vec![0.0f32; V::LANES];
            // SAFETY: the caller checked the CPU features of V; both buffers hold LANES f32s.
            unsafe { V::load(chunk.as_ptr()).exp().store(out.as_mut_ptr()) };
            for (x, y) in chunk.iter().zip(&out) {
                let want = exp_scalar(*x);
                assert!((y - want).abs() <= want * 2e-7, "exp({x}) = {y}, scalar {want}");
            }
        }
    }

    /// Four vectors of random values sum lane by lane, each into its own result.
    fn four_sums_match_lane_sums<V: Vector>() {
        use rand::Rng;
        let (seed, mut rng) = crate::cpu::testing::seeded();
        for _ in 0..50 {
            let data: Vec<f32> = (0..4 * V::LANES).map(|_| rng.gen_range(-10.0..10.0)).collect();
            // SAFETY: the caller checked the CPU features of V; `data` holds 4 × LANES f32s.
            let sums = unsafe { V::sum_lanes4(std::array::from_fn(|i| V::load(data.as_ptr().add(i * V::LANES)))) };
            for (chunk, sum) in data.chunks_exact(V::LANES).zip(sums) {
                let want: f32 = chunk.iter().sum();
                assert!((sum - want).abs() <= 1e-4 * (1.0 + want.abs()), "seed {seed}: sum {sum}, lane by lane {want}");
            }
        }
    }

    /// An 8 × 8 transpose of random values moves lane `j` of row `i` to lane `i` of row `j`.
    fn transpose8_transposes<V: Vector>() {
        use rand::Rng;
        let (seed, mut rng) = crate::cpu::testing::seeded();
        let values: Vec<f32> = (0..64).map(|_| rng.gen_range(-500.0..500.0)).collect();
        let mut out = [0.0f32; 64];
        // SAFETY: the caller checked V's CPU features; every load and store stays in its 64.
        unsafe {
            let rows = std::array::from_fn(|i| V::load(values.as_ptr().add(8 * i)));
            V::transpose8(rows).iter().enumerate().for_each(|(j, row)| row.store(out.as_mut_ptr().add(8 * j)));
        }
        for (i, j) in (0..8).flat_map(|i| (0..8).map(move |j| (i, j))) {
            assert_eq!(out[8 * j + i], values[8 * i + j], "seed {seed}: row {i}, lane {j}");
        }
    }

    #[test]
    fn every_vector_type_agrees_with_the_scalar_exp_and_sums() {
        transpose8_transposes::<Portable8>();
        vector_exp_is_lane_wise::<Portable8>();
        four_sums_match_lane_sums::<Portable8>();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                vector_exp_is_lane_wise::<F32x8>();
                four_sums_match_lane_sums::<F32x8>();
                transpose8_transposes::<F32x8>();
            }
            if std::is_x86_feature_detected!("avx512f") {
                vector_exp_is_lane_wise::<F32x16>();
                four_sums_match_lane_sums::<F32x16>();
            }
        }
    }
}
