//! Repeated calls, from many threads at once, give bit-identical results.

mod common;

use candle::DType;
use common::{randn, rng};
use flash_attn_rocm as fa;

#[test]
fn concurrent_calls_are_bit_identical() {
    let mut rng = rng("concurrent_calls_are_bit_identical");
    for dtype in [DType::F32, DType::BF16] {
        let q = randn(&mut rng, &[2, 300, 4, 64], dtype);
        let k = randn(&mut rng, &[2, 257, 2, 64], dtype);
        let v = randn(&mut rng, &[2, 257, 2, 64], dtype);
        let bits = |t: &candle::Tensor| -> Vec<u32> {
            t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
        };
        let first = bits(&fa::flash_attn(&q, &k, &v, 0.125, true).unwrap());
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| (0..3).map(|_| bits(&fa::flash_attn(&q, &k, &v, 0.125, true).unwrap())).collect::<Vec<_>>())
                })
                .collect();
            for h in handles {
                for run in h.join().unwrap() {
                    assert!(run == first, "{dtype:?}: a concurrent call differs from the first");
                }
            }
        });
    }
}

/// The same call in thread pools of different sizes gives the same bits: blocks and key splits
/// (decode) depend on the shapes only.
#[test]
fn thread_count_does_not_change_the_bits() {
    let mut rng = rng("thread_count_does_not_change_the_bits");
    // Prefill with GQA packing, and decode long enough to be split over its keys.
    for (s_q, s_k) in [(333, 333), (1, 6000)] {
        let q = randn(&mut rng, &[2, s_q, 8, 64], DType::BF16);
        let k = randn(&mut rng, &[2, s_k, 2, 64], DType::BF16);
        let v = randn(&mut rng, &[2, s_k, 2, 64], DType::BF16);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let out = pool.install(|| fa::flash_attn(&q, &k, &v, 0.125, true).unwrap());
            out.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            let other = run(threads);
            assert!(
                one.iter().zip(&other).all(|(a, b)| a.to_bits() == b.to_bits()),
                "s_q={s_q} s_k={s_k}: {threads} threads differ from 1"
            );
        }
    }
}
