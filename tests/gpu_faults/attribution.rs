//! Issue 35: a bad call's faults reach the caller that made it, never another caller. One fault
//! word per process made a paged call with an out-of-range block id on one thread return `Ok`
//! while the next valid call of *another* thread failed (and was not run). Each thread now has a
//! fault slot per stream: bad calls in a loop on one thread or stream, valid calls on another,
//! and every valid call runs and matches, every bad call is reported to its own caller.

use crate::check;
use crate::common::ragged::{paginate, ragged, Paged, Ragged};
use crate::common::{rng, values};
use candle::{DType, Device, Tensor};
use flash_attn_rocm as fa;
use flash_attn_rocm::triton::offload::run_on_gpu;
use rand::Rng;

/// Rounds of bad and valid calls on each side.
const ROUNDS: usize = 40;

/// A small paged call of three sequences, and a copy of its table whose row 1 names a block
/// outside the cache.
struct PagedCase {
    r: Ragged,
    p: Paged,
    bad_table: Tensor,
    page: usize,
}

impl PagedCase {
    fn new(seed: &str, page: usize) -> Self {
        let mut rng = rng(seed);
        let lens: Vec<(usize, usize)> = (0..3).map(|_| (rng.gen_range(1..4), rng.gen_range(20..90))).collect();
        let r = ragged(&mut rng, &lens, (8, 2, 64), DType::F16);
        let p = paginate(&mut rng, &r, page, 1);
        let mut table: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
        table[1][0] = p.k_pages.dim(0).unwrap() as u32 + rng.gen_range(0..1000);
        let bad_table = Tensor::new(table, &Device::Cpu).unwrap();
        PagedCase { r, p, bad_table, page }
    }

    /// The call on `dev` (its tensors copied there), with the good or the bad table.
    fn call(&self, dev: &Device, bad: bool) -> candle::Result<Tensor> {
        let on = |t: &Tensor| t.to_device(dev);
        let (sq, sk) = self.r.seqlens();
        let table = if bad { &self.bad_table } else { &self.p.table };
        let max_k = self.r.lens.iter().map(|l| l.1).max().unwrap();
        let max_q = self.r.lens.iter().map(|l| l.0).max().unwrap();
        fa::flash_attn_varlen_paged_windowed(
            &on(&self.r.q)?, &on(&self.p.k_pages)?, &on(&self.p.v_pages)?, &on(&sq)?, &on(&sk)?, &on(table)?, None,
            max_q, max_k, 0.125, None, Some(0), self.page, None,
        )
    }

    fn cpu(&self) -> Vec<f64> {
        values(&self.call(&Device::Cpu, false).unwrap())
    }
}

fn assert_matches(what: &str, gpu: &Tensor, cpu: &[f64]) {
    let worst = values(gpu).iter().zip(cpu).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= 4e-3, "{what}: differs from the CPU by {worst:.3e}");
}

/// Two threads on the null stream through the offload: one makes a bad paged call, then a
/// valid one (which must fail with the bad call's report and not run), in a loop; the other
/// makes valid calls only, none of which may fail.
pub fn bad_calls_are_reported_to_their_own_thread() {
    let Some(_) = check::gpu_and_rng("bad_calls_are_reported_to_their_own_thread") else {
        return;
    };
    let driver = check::driver().unwrap();
    let (bad, good) = (PagedCase::new("attribution/bad", 16), PagedCase::new("attribution/good", 7));
    let good_cpu = good.cpu();
    let reports = std::thread::scope(|scope| {
        let culprit = scope.spawn(|| {
            let mut reports = 0;
            for round in 0..ROUNDS {
                run_on_gpu(driver, || bad.call(&Device::Cpu, true)).expect("bad ids are the kernels' business");
                // The offload waits for its kernels, so the report is in this thread's slot now.
                let err = run_on_gpu(driver, || bad.call(&Device::Cpu, false)).expect_err("the bad call is reported").to_string();
                assert!(err.contains("block_table") && err.contains("earlier call of this thread"), "round {round}: {err}");
                reports += 1;
                // Every other round the report is taken explicitly instead.
                run_on_gpu(driver, || bad.call(&Device::Cpu, true)).unwrap();
                fa::take_gpu_faults().expect_err("the bad call is reported to its thread");
                fa::take_gpu_faults().expect("taking clears");
                reports += 1;
            }
            reports
        });
        let bystander = scope.spawn(|| {
            for round in 0..2 * ROUNDS {
                let out = run_on_gpu(driver, || good.call(&Device::Cpu, false)).unwrap_or_else(|e| panic!("round {round}: a valid call failed: {e}"));
                assert_matches(&format!("round {round}"), &out, &good_cpu);
            }
            fa::take_gpu_faults().expect("no fault reached the thread of valid calls");
        });
        bystander.join().unwrap();
        culprit.join().unwrap()
    });
    assert_eq!(reports, 2 * ROUNDS, "every bad call was reported to its caller");
}

/// One thread, two Candle CUDA devices with a stream each: bad calls on one stream, valid calls
/// on the other. The valid stream's calls never fail; each bad call's report fails the next
/// call on its own stream only.
#[cfg(feature = "candle-cuda")]
pub fn bad_calls_are_reported_to_their_own_stream() {
    let Some(_) = check::gpu_and_rng("bad_calls_are_reported_to_their_own_stream") else {
        return;
    };
    let (culprit, bystander) = (Device::new_cuda_with_stream(0).unwrap(), Device::new_cuda_with_stream(0).unwrap());
    let (bad, good) = (PagedCase::new("attribution/stream-bad", 16), PagedCase::new("attribution/stream-good", 7));
    let good_cpu = good.cpu();
    for round in 0..ROUNDS {
        bad.call(&culprit, true).expect("bad ids are the kernels' business");
        culprit.synchronize().unwrap();
        let out = good.call(&bystander, false).unwrap_or_else(|e| panic!("round {round}: a valid call on the other stream failed: {e}"));
        assert_matches(&format!("round {round}"), &out, &good_cpu);
        let err = bad.call(&culprit, false).expect_err("the bad call is reported on its stream").to_string();
        assert!(err.contains("block_table"), "round {round}: {err}");
        let again = good.call(&culprit, false).unwrap();
        assert_matches(&format!("round {round}, the culprit's stream after the report"), &again, &good_cpu);
    }
    fa::take_gpu_faults().expect("every report was delivered");
}
