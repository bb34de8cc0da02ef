//! The machine's yardsticks: one core's f32 FMA peak and the memory read bandwidth.

use rayon::prelude::*;
use std::time::Instant;

/// GFLOP/s of one thread running independent FMA chains with the widest vectors the kernel
/// uses on this CPU (AVX-512, else AVX2), and that instruction set's name.
pub fn fma_peak_one_thread() -> (&'static str, f64) {
    const ITERS: usize = 20_000_000;
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked).
            let secs = best_of(3, || unsafe { x86::chains_avx512(ITERS) });
            return ("avx512", (ITERS * x86::CHAINS * 16 * 2) as f64 / secs / 1e9);
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked).
            let secs = best_of(3, || unsafe { x86::chains_avx2(ITERS) });
            return ("avx2", (ITERS * x86::CHAINS * 8 * 2) as f64 / secs / 1e9);
        }
    }
    ("none", f64::NAN)
}

fn best_of(runs: usize, mut f: impl FnMut() -> f32) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// GB/s of summing a 1 GiB buffer with every thread of the pool (best of 3).
pub fn read_bandwidth_gbs() -> f64 {
    let data = vec![1.0f32; 1 << 28];
    let secs = best_of(3, || {
        data.par_chunks(1 << 16)
            .map(|chunk| {
                let mut lanes = [0.0f32; 16];
                for c in chunk.chunks_exact(16) {
                    for (l, x) in lanes.iter_mut().zip(c) {
                        *l += x;
                    }
                }
                lanes.iter().sum::<f32>()
            })
            .sum()
    });
    (data.len() * 4) as f64 / secs / 1e9
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Independent accumulator chains: enough to cover FMA latency × ports on current cores.
    pub const CHAINS: usize = 12;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn chains_avx512(iters: usize) -> f32 {
        let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_fmadd_ps(*x, a, b);
            }
        }
        acc.iter().map(|&x| _mm512_reduce_add_ps(x)).sum()
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chains_avx2(iters: usize) -> f32 {
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        let mut out = [0.0f32; 8];
        acc.iter().for_each(|&x| _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(x, _mm256_loadu_ps(out.as_ptr()))));
        out.iter().sum()
    }
}
