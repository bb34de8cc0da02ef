//! Many threads calling at once, each fresh: none of them chose a device, as a thread pool's
//! workers do not. Every call must run on device 0 (where HIP starts a thread; a CUDA thread
//! starts with no context at all) and give the CPU backend's answer, offloaded and, with
//! `candle-cuda`, on one Candle CUDA device shared by all the threads.

use crate::check::{check_gpu_vs_cpu, gpu_and_rng, out_only, with_lse, DTYPES};
use crate::common::batch::{batch_expected, batch_inputs, BatchCase};
use crate::common::calls::{self, CAUSAL, NONE};
use crate::common::rng;

const THREADS: usize = 8;

pub fn fresh_threads_calling_at_once_match_cpu() {
    let Some((cpu, _)) = gpu_and_rng("fresh_threads_calling_at_once_match_cpu") else {
        return;
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let cpu = cpu.clone();
                scope.spawn(move || {
                    let mut rng = rng(&format!("fresh_threads_calling_at_once_match_cpu/{t}"));
                    let window = if t % 2 == 0 { CAUSAL } else { NONE };
                    let (s_q, s_k) = (17 + 9 * t, 150 + 61 * t);
                    let c = BatchCase { b: 2, s_q, s_k, h: 8, h_k: 2, d: 64, dtype: DTYPES[t % 2], window, alibi: false, softcap: None, transposed: t % 3 == 0 };
                    let x = batch_inputs(&c, &mut rng);
                    let exp = batch_expected(&c, &x);
                    let f = x.features(&c);
                    let args = [&x.q, &x.k, &x.v];
                    for _ in 0..4 {
                        check_gpu_vs_cpu(&format!("thread {t}: {c:?}"), &cpu, &args, &exp, |a| out_only(calls::batch(&a[0], &a[1], &a[2], f)));
                        check_gpu_vs_cpu(&format!("thread {t}: {c:?} with lse"), &cpu, &args, &exp, |a| {
                            with_lse(calls::batch_op(f).forward_with_lse(&a[0], &a[1], &a[2]))
                        });
                    }
                })
            })
            .collect();
        for (t, worker) in workers.into_iter().enumerate() {
            if let Err(panic) = worker.join() {
                std::panic::panic_any(format!("thread {t} failed: {:?}", panic.downcast_ref::<String>()));
            }
        }
    });
}
