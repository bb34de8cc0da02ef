//! The Triton path's handling of side tensors on a real GPU (issue 24): rows outside every
//! sequence when the keys are split, out-of-range seqlens and block tables checked by the
//! kernels (clamped, reported through the fault word without synchronizing), and a varlen/paged
//! call that is queued without waiting for the GPU.
//!
//! Faults reach only the thread (and stream) whose call had the bad values (issue 35):
//! attribution.rs runs bad and valid calls side by side. Without a GPU the tests are reported
//! ignored, with the reason (gpu_triton/runner.rs: `harness = false`, built with the `triton`
//! feature only).

#[path = "gpu_faults/attribution.rs"]
mod attribution;
#[cfg(feature = "cuda-verify")]
#[path = "gpu_faults/contexts.rs"]
mod contexts;
#[allow(dead_code, unused_imports)] // the offload checks of the main GPU suite are not used here
#[path = "gpu_triton/check.rs"]
mod check;
mod common;
#[path = "gpu_triton/runner.rs"]
mod runner;

use candle::{DType, Device, Layout, Shape, Tensor};
use flash_attn_rocm as fa;
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
use flash_attn_rocm::device::DeviceBuffers;
use flash_attn_rocm::glue::offload::run_on_gpu;
use flash_attn_rocm::triton::{launch, plan, take_faults};
use rand::rngs::StdRng;
use std::time::Instant;

use common::ragged::{paginate, ragged, u32s};
use common::{randn, values};

const SCALE: f32 = 0.088;

/// A `#[test]` function here is never compiled (`harness = false` drops it): a test is listed here.
fn main() {
    runner::run(&[
        ("side_tensors_on_the_gpu", side_tensors_on_the_gpu),
        ("bad_calls_are_reported_to_their_own_thread", attribution::bad_calls_are_reported_to_their_own_thread),
        #[cfg(feature = "candle-cuda")]
        ("bad_calls_are_reported_to_their_own_stream", attribution::bad_calls_are_reported_to_their_own_stream),
        #[cfg(feature = "candle-cuda")]
        ("a_long_bad_call_fails_at_most_one_later_call", attribution::a_long_bad_call_fails_at_most_one_later_call),
        #[cfg(feature = "candle-cuda")]
        ("a_bad_call_of_an_ended_thread_fails_no_other_thread", attribution::a_bad_call_of_an_ended_thread_fails_no_other_thread),
        #[cfg(feature = "candle-cuda")]
        ("a_callers_own_context_is_current_again_after_a_call", contexts::a_callers_own_context_is_current_again_after_a_call),
        // Resets device 0: in a process of its own (runner.rs).
        #[cfg(feature = "cuda-verify")]
        ("isolated::a_call_after_a_device_reset_is_refused", contexts::a_call_after_a_device_reset_is_refused),
    ])
}

fn side_tensors_on_the_gpu() {
    let Some((_, mut rng)) = check::gpu_and_rng("side_tensors_on_the_gpu") else {
        return;
    };
    let driver = check::driver().unwrap();
    take_faults(driver).expect("no fault before the first call");
    rows_outside_every_sequence_with_split_keys(driver, &mut rng);
    zero_query_rows_with_keys(driver, &mut rng);
    // Pages smaller than a key tile (the table read per key) and pages of whole tiles (read
    // once per tile on NVIDIA: kernels/aot.py's page_tiles), with sequences of full tiles.
    bad_block_ids_read_block_zero_and_are_reported(driver, &mut rng, 16, [(2, 70), (1, 50), (3, 33)]);
    bad_block_ids_read_block_zero_and_are_reported(driver, &mut rng, 256, [(2, 700), (1, 500), (3, 333)]);
    bad_seqlens_empty_their_sequence_and_are_reported(driver, &mut rng);
    queued_paged_call_does_not_wait_for_the_gpu(driver);
}

/// Output and LSE of a varlen call, as f64 values.
type Result2 = (Vec<f64>, Vec<f64>);

fn varlen(q: &Tensor, k: &Tensor, v: &Tensor, cu_q: &[u32], cu_k: &[u32], max: (usize, usize)) -> candle::Result<Result2> {
    let (out, lse) = fa::flash_attn_varlen_with_lse(q, k, v, None, &u32s(cu_q), &u32s(cu_k), max.0, max.1, SCALE, None, None, None)?;
    Ok((values(&out), values(&lse)))
}

/// `(out, lse)` of rows `rows` (of `total` rows, `h` heads of `d`), in row order.
fn rows_of((out, lse): &Result2, rows: std::ops::Range<usize>, total: usize, h: usize, d: usize) -> Result2 {
    let out = out[rows.start * h * d..rows.end * h * d].to_vec();
    let lse = (0..h).flat_map(|head| lse[head * total + rows.start..head * total + rows.end].to_vec()).collect();
    (out, lse)
}

fn assert_empty_rows(what: &str, (out, lse): &Result2) {
    assert!(out.iter().all(|&x| x == 0.0), "{what}: output rows must be 0, got {:?}", out.iter().find(|x| **x != 0.0));
    assert!(lse.iter().all(|&x| x == f64::NEG_INFINITY), "{what}: LSE must be -inf, got {:?}", lse.iter().find(|x| **x != f64::NEG_INFINITY));
}

fn assert_near(what: &str, gpu: &Result2, cpu: &Result2, dtype: DType) {
    let tol = if dtype == DType::BF16 { 3e-2 } else { 4e-3 };
    let worst = gpu.0.iter().zip(&cpu.0).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst <= tol, "{what}: output differs from the CPU by {worst:.3e} > {tol:.0e}");
    let worst_lse = gpu.1.iter().zip(&cpu.1).map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / (1.0 + b.abs()) }).fold(0.0, f64::max);
    assert!(worst_lse <= 2e-4, "{what}: LSE differs from the CPU by {worst_lse:.3e}");
}

/// Item 1: q rows before `seqlens_q[0]` or after `seqlens_q[-1]` with split keys. The merge
/// used to cover every row and read accumulators no program wrote (NaN in recycled memory,
/// which the offload's accumulators now start as).
fn rows_outside_every_sequence_with_split_keys(driver: &'static Driver, rng: &mut StdRng) {
    let (h, h_k, d, s_k) = (32, 8, 128, 5000);
    for dtype in [DType::F16, DType::BF16] {
        for (before, after) in [(0, 2), (3, 0), (1, 1)] {
            let r = ragged(rng, &[(1, s_k); 3], (h, h_k, d), dtype);
            let q = Tensor::cat(&[&randn(rng, &[before, h, d], dtype), &r.q, &randn(rng, &[after, h, d], dtype)], 0).unwrap();
            let total = before + 3 + after;
            let cu_q: Vec<u32> = r.cu_q.iter().map(|&x| x + before as u32).collect();
            let call = || varlen(&q, &r.k, &r.v, &cu_q, &r.cu_k, (1, s_k));
            let cpu = call().unwrap();
            let gpu = run_on_gpu(driver, call).unwrap();
            let what = format!("{dtype:?}, {before} rows before and {after} after 3 sequences of 1 x {s_k}");
            for rows in [0..before, before + 3..total] {
                assert_empty_rows(&format!("{what} [cpu]"), &rows_of(&cpu, rows.clone(), total, h, d));
                assert_empty_rows(&format!("{what} [gpu]"), &rows_of(&gpu, rows, total, h, d));
            }
            let inside = before..before + 3;
            assert_near(&what, &rows_of(&gpu, inside.clone(), total, h, d), &rows_of(&cpu, inside, total, h, d), dtype);
        }
    }
    take_faults(driver).expect("valid seqlens report no fault");
}

/// Item 5: a varlen call with no query rows but many keys is empty results, not an `Err`.
fn zero_query_rows_with_keys(driver: &'static Driver, rng: &mut StdRng) {
    let (h, h_k, d) = (32, 8, 128);
    let q = randn(rng, &[0, h, d], DType::F16);
    let kv = randn(rng, &[6000, h_k, d], DType::F16);
    let (out, lse) = run_on_gpu(driver, || varlen(&q, &kv, &kv, &[0, 0, 0], &[0, 3000, 6000], (1, 3000))).unwrap();
    assert!(out.is_empty() && lse.is_empty());
}

/// A paged call of three sequences (`lens`: query rows, keys) whose table row 1 names a block
/// outside the cache (also as a u32 that reads as a negative i32): the call runs, the other
/// sequences are right, the bad id reads block 0, and the next check reports `block_table`.
fn bad_block_ids_read_block_zero_and_are_reported(driver: &'static Driver, rng: &mut StdRng, page: usize, lens: [(usize, usize); 3]) {
    let (h, h_k, d) = (8, 2, 64);
    let max_k = lens.iter().map(|l| l.1).max().unwrap();
    let r = ragged(rng, &lens, (h, h_k, d), DType::F16);
    let p = paginate(rng, &r, page, 1);
    let num_blocks = p.k_pages.dim(0).unwrap() as u32;
    let (sq, sk) = r.seqlens();
    let paged = |table: &Tensor| -> candle::Result<Result2> {
        let (out, lse) = fa::flash_attn_varlen_paged_windowed_with_lse(
            &r.q, &p.k_pages, &p.v_pages, &sq, &sk, table, None, 3, max_k, SCALE, None, Some(0), page, None,
        )?;
        Ok((values(&out), values(&lse)))
    };
    let good = paged(&p.table).unwrap();
    let total = r.q.dim(0).unwrap();
    // What the bad sequence must give: its table row with the bad id replaced by block 0 (the CPU
    // backend, which refuses the bad id itself).
    let mut zeroed: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
    zeroed[1][0] = 0;
    let block_zero = paged(&Tensor::new(zeroed, &Device::Cpu).unwrap()).unwrap();
    for bad_id in [num_blocks, num_blocks + 1000, u32::MAX - 2] {
        let mut table: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
        table[1][0] = bad_id;
        let table = Tensor::new(table, &Device::Cpu).unwrap();
        // The CPU backend reads the table and refuses it; the GPU path does not read it on the host.
        assert!(paged(&table).is_err());
        let gpu = run_on_gpu(driver, || paged(&table)).expect("bad ids are the kernels' business");
        for rows in [0..2, 3..total] {
            assert_near(&format!("block id {bad_id}: good rows {rows:?}"), &rows_of(&gpu, rows.clone(), total, h, d), &rows_of(&good, rows, total, h, d), DType::F16);
        }
        assert_near(&format!("block id {bad_id}: the bad sequence reads block 0"), &rows_of(&gpu, 2..3, total, h, d), &rows_of(&block_zero, 2..3, total, h, d), DType::F16);
        let err = take_faults(driver).expect_err("the kernels report the bad id").to_string();
        assert!(err.contains("block_table") && !err.contains("seqlens"), "{err}");
        take_faults(driver).expect("taking the faults clears them");
    }
    // A fault not yet taken fails the next call (without running it), as on a Candle device.
    let mut table: Vec<Vec<u32>> = p.table.to_vec2().unwrap();
    table[2][1] = num_blocks + 7;
    let table = Tensor::new(table, &Device::Cpu).unwrap();
    run_on_gpu(driver, || paged(&table)).unwrap();
    let err = run_on_gpu(driver, || paged(&p.table)).unwrap_err().to_string();
    assert!(err.contains("earlier call") && err.contains("block_table"), "{err}");
    let again = run_on_gpu(driver, || paged(&p.table)).unwrap();
    assert_near("after the reported fault", &again, &good, DType::F16);
}

/// Cumulative seqlens that step back, pass the rows of q or k, or exceed max_seqlen: that
/// sequence is computed as empty (output 0, LSE -inf), the others as given.
fn bad_seqlens_empty_their_sequence_and_are_reported(driver: &'static Driver, rng: &mut StdRng) {
    let (h, h_k, d) = (4, 2, 64);
    let q = randn(rng, &[6, h, d], DType::BF16);
    let kv = randn(rng, &[300, h_k, d], DType::BF16);
    let run = |cu_q: &[u32], cu_k: &[u32], max| run_on_gpu(driver, || varlen(&q, &kv, &kv, cu_q, cu_k, max)).unwrap();
    let cpu_seq0 = varlen(&q.narrow(0, 0, 2).unwrap(), &kv, &kv, &[0, 2], &[0, 100], (2, 100)).unwrap();
    // (cu_q, cu_k, max, the bad sequence, its rows, the tensor named)
    let cases: [(&[u32], &[u32], (usize, usize), usize, std::ops::Range<usize>, &str); 4] = [
        (&[0, 2, 4, 6], &[0, 100, 50, 300], (2, 250), 1, 2..4, "seqlens_k"),
        (&[0, 2, 4, 6], &[0, 100, 200, 301], (2, 250), 2, 4..6, "seqlens_k"),
        (&[0, 2, 4, 9], &[0, 100, 200, 300], (5, 100), 2, 4..6, "seqlens_q"),
        (&[0, 2, 3, 6], &[0, 100, 200, 300], (2, 100), 2, 3..6, "seqlens_q"),
    ];
    for (cu_q, cu_k, max, bad, rows, name) in cases {
        let what = format!("cu_q {cu_q:?} cu_k {cu_k:?} max {max:?}: sequence {bad}");
        let gpu = run(cu_q, cu_k, max);
        let empty_rows = rows.start..rows.end.min(6);
        assert_empty_rows(&what, &rows_of(&gpu, empty_rows, 6, h, d));
        assert_near(&format!("{what}: sequence 0"), &rows_of(&gpu, 0..2, 6, h, d), &cpu_seq0, DType::BF16);
        let err = take_faults(driver).expect_err("reported").to_string();
        assert!(err.contains(name), "{what}: {err}");
    }
}

/// No host round trip: a paged decode call with its seqlens and table on the device, queued
/// behind long prefill work on the same stream, returns while that work still runs (a call
/// that copied the side tensors to the host would wait for it).
fn queued_paged_call_does_not_wait_for_the_gpu(driver: &'static Driver) {
    let long = DeviceCall::prefill(driver, 8192);
    let started = Instant::now();
    long.queue();
    driver.synchronize().unwrap();
    let one = started.elapsed();
    let repeats = (300.0 / one.as_secs_f64().max(1e-4) / 1000.0).ceil().max(1.0) as usize;
    let decode = DeviceCall::paged_decode(driver);
    // The first launch of a kernel loads its module, which the CUDA driver may do only on an
    // idle device: once per kernel and process, not per call.
    decode.queue();
    driver.synchronize().unwrap();
    let started = Instant::now();
    for _ in 0..repeats {
        long.queue();
    }
    let queued_long = started.elapsed();
    let before_decode = Instant::now();
    decode.queue();
    let decode_returned = before_decode.elapsed();
    let before_sync = Instant::now();
    driver.synchronize().unwrap();
    let waited = before_sync.elapsed();
    eprintln!(
        "queued {repeats} prefills of {one:?} each in {queued_long:?}; the paged decode call returned in \
         {decode_returned:?}; the GPU then needed {waited:?} more"
    );
    // The GPU work queued ahead of the call was ~300 ms; had the call waited for it, nothing
    // (or only the decode) would be left to wait for.
    assert!(waited.as_secs_f64() > 0.3 * repeats as f64 * one.as_secs_f64(), "the paged call waited for the GPU");
    take_faults(driver).expect("valid side tensors");
}

/// A call on device buffers (contents left as allocated), queued through the raw launch.
struct DeviceCall {
    driver: &'static Driver,
    call: AttnCall,
    buffers: DeviceBuffers,
    _memory: Vec<fa::gpu::DeviceBuffer<'static>>,
}

impl DeviceCall {
    fn prefill(driver: &'static Driver, s: usize) -> Self {
        let (h, d) = (32, 128);
        let layout = Layout::contiguous(Shape::from((1, s, h, d)));
        let req = Request { softmax_scale: SCALE, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
        let call = AttnCall::on_device(&req, [DType::F16; 3], &layout, &layout, &layout).unwrap();
        Self::new(driver, call, &[])
    }

    fn paged_decode(driver: &'static Driver) -> Self {
        let (b, h, h_k, d, page, max_blocks) = (4, 32, 8, 128, 16, 256);
        let cu_q: Vec<u32> = (0..=b as u32).collect();
        let cu_k: Vec<u32> = (0..=b as u32).map(|i| i * 4000).collect();
        let table: Vec<u32> = (0..(b * max_blocks) as u32).collect();
        // Only the shapes of these host tensors are looked at; the values go to the device.
        let (sq, sk, t) = (u32s(&cu_q), u32s(&cu_k), Tensor::from_vec(table.clone(), (b, max_blocks), &Device::Cpu).unwrap());
        let varlen = VarLenRequest { seqlens_q: &sq, seqlens_k: &sk, max_seqlen_q: 1, max_seqlen_k: 4000, block_table: Some(&t), page_block_size: Some(page), mm_prefix_ranges: None };
        let req = Request { softmax_scale: SCALE, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let q = Layout::contiguous(Shape::from((b, h, d)));
        let kv = Layout::contiguous(Shape::from((b * max_blocks, page, h_k, d)));
        let call = AttnCall::on_device(&req, [DType::F16; 3], &q, &kv, &kv).unwrap();
        assert!(call.seqs.unread().is_some());
        let bytes = |v: &[u32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        Self::new(driver, call, &[bytes(&cu_q), bytes(&cu_k), bytes(&table)])
    }

    /// Allocates q/k/v/out/LSE/scratch for `call` and uploads `side` (seqlens q, k, table).
    fn new(driver: &'static Driver, call: AttnCall, side: &[Vec<u8>]) -> Self {
        let plan = plan(driver, &call).unwrap();
        let kv_rows = call.seqs.paging.as_ref().map_or(call.max_seqlen_k * call.batch, |p| p.num_blocks * p.page_block_size);
        let (l_len, o_len) = plan.scratch_lens(&call);
        let sizes = [
            call.total_q * call.num_heads * call.head_dim * 2,
            kv_rows * call.num_heads_k * call.head_dim * 2,
            kv_rows * call.num_heads_k * call.head_dim * 2,
            call.total_q * call.num_heads * call.head_dim * 2,
            call.total_q * call.num_heads * 4,
            l_len * 4,
            o_len * 4,
        ];
        let mut memory: Vec<_> = sizes.iter().map(|&n| driver.malloc(n).unwrap()).collect();
        for data in side {
            let buffer = driver.malloc(data.len()).unwrap();
            driver.copy_to_device(&buffer, data).unwrap();
            memory.push(buffer);
        }
        let addr = |i: usize| memory.get(i).map_or(0, |m| m.addr());
        let buffers = DeviceBuffers {
            q: addr(0),
            k: addr(1),
            v: addr(2),
            out: addr(3),
            lse: addr(4),
            lse_acc: addr(5),
            o_acc: addr(6),
            seqstart_q: addr(7),
            seqstart_k: addr(8),
            block_table: addr(9),
            block_table_row_stride: call.seqs.paging.as_ref().map_or(0, |p| p.max_blocks),
            ..DeviceBuffers::default()
        };
        Self { driver, call, buffers, _memory: memory }
    }

    fn queue(&self) {
        let plan = plan(self.driver, &self.call).unwrap();
        // SAFETY: every buffer was allocated for this call's shapes on the current device and
        // lives as long as `self`; the test synchronizes before dropping it; stream 0.
        unsafe { launch(self.driver, &self.call, &plan, &self.buffers) }.unwrap();
    }
}
