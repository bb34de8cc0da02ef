//! Issue 35: a bad call's faults reach the caller that made it, never another caller. One fault
//! word per process made a paged call with an out-of-range block id on one thread return `Ok`
//! while the next valid call of *another* thread failed (and was not run). Each call now has a
//! fault word of its own: bad calls in a loop on one thread or stream, valid calls on another,
//! and every valid call runs and matches, every bad call is reported to its own caller.

use crate::check;
use crate::common::ragged::{paginate, ragged, Paged, Ragged};
use crate::common::{rng, values};
use candle::{DType, Device, Tensor};
use flash_attn_rocm as fa;
use flash_attn_rocm::glue::offload::run_on_gpu;
use rand::Rng;

/// Rounds of bad and valid calls on each side.
const ROUNDS: usize = 40;

/// A small paged call of three sequences, and a copy of its table whose row 1 names a block
/// outside the cache.
pub struct PagedCase {
    r: Ragged,
    p: Paged,
    bad_table: Tensor,
    page: usize,
}

impl PagedCase {
    pub fn new(seed: &str, page: usize) -> Self {
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
    pub fn call(&self, dev: &Device, bad: bool) -> candle::Result<Tensor> {
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

    pub fn cpu(&self) -> Vec<f64> {
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

/// A paged call long enough to run for tens of milliseconds (zeros: only its time matters), on
/// `dev`, whose table names a block outside the cache in every sequence's first column, so that
/// every program of its kernel reads a bad id and reports it while the call runs.
#[cfg(feature = "candle-cuda")]
struct LongBadCall {
    q: Tensor,
    cache: Tensor,
    seqlens_q: Tensor,
    seqlens_k: Tensor,
    table: Tensor,
    len: usize,
}

#[cfg(feature = "candle-cuda")]
impl LongBadCall {
    const PAGE: usize = 256;

    fn new(dev: &Device) -> Self {
        let (batch, len, h, h_k, d) = (8, 16384, 32, 8, 128);
        let blocks = len / Self::PAGE;
        let q = Tensor::zeros((batch * len, h, d), DType::F16, dev).unwrap();
        let cache = Tensor::zeros((batch * blocks, Self::PAGE, h_k, d), DType::F16, dev).unwrap();
        let cu: Vec<u32> = (0..=batch as u32).map(|b| b * len as u32).collect();
        let mut table: Vec<u32> = (0..(batch * blocks) as u32).collect();
        for b in 0..batch {
            table[b * blocks] = (batch * blocks + b) as u32;
        }
        let on = |t: Tensor| t.to_device(dev).unwrap();
        LongBadCall {
            q,
            cache,
            seqlens_q: on(Tensor::new(cu.clone(), &Device::Cpu).unwrap()),
            seqlens_k: on(Tensor::new(cu, &Device::Cpu).unwrap()),
            table: on(Tensor::from_vec(table, (batch, blocks), &Device::Cpu).unwrap()),
            len,
        }
    }

    /// Queues the call (it returns `Ok`: the values are the kernels' business).
    fn queue(&self) {
        drop(self.call());
    }

    /// Queues the call and returns its output.
    fn call(&self) -> Tensor {
        fa::flash_attn_varlen_paged_windowed(
            &self.q, &self.cache, &self.cache, &self.seqlens_q, &self.seqlens_k, &self.table, None, self.len, self.len,
            0.088, None, None, Self::PAGE, None,
        )
        .expect("bad ids are the kernels' business")
    }
}

/// A valid small paged call with its tensors already on `dev` (no copy from the host while the
/// stream is busy), and the CPU's answer.
#[cfg(feature = "candle-cuda")]
pub struct QueuedValidCall {
    args: Vec<Tensor>,
    case: PagedCase,
    cpu: Vec<f64>,
}

#[cfg(feature = "candle-cuda")]
impl QueuedValidCall {
    pub fn new(seed: &str, dev: &Device) -> Self {
        let case = PagedCase::new(seed, 16);
        let (sq, sk) = case.r.seqlens();
        let args = [&case.r.q, &case.p.k_pages, &case.p.v_pages, &sq, &sk, &case.p.table].map(|t| t.to_device(dev).unwrap()).to_vec();
        let cpu = case.cpu();
        QueuedValidCall { args, case, cpu }
    }

    pub fn call(&self) -> candle::Result<Tensor> {
        let a = &self.args;
        let max_k = self.case.r.lens.iter().map(|l| l.1).max().unwrap();
        let max_q = self.case.r.lens.iter().map(|l| l.0).max().unwrap();
        fa::flash_attn_varlen_paged_windowed(&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], None, max_q, max_k, 0.125, None, Some(0), 16, None)
    }

    /// Queues calls for `span` without synchronizing; returns those that ran and how many failed.
    fn queue_for(&self, span: std::time::Duration) -> (Vec<Tensor>, usize) {
        let (mut ran, mut failed) = (Vec::new(), 0);
        let started = std::time::Instant::now();
        while started.elapsed() < span {
            match self.call() {
                Ok(out) => ran.push(out),
                Err(e) => {
                    assert!(e.to_string().contains("block_table"), "{e}");
                    failed += 1;
                }
            }
        }
        (ran, failed)
    }

    pub fn check(&self, what: &str, ran: &[Tensor]) {
        for (i, out) in ran.iter().enumerate() {
            assert_matches(&format!("{what}: call {i}"), out, &self.cpu);
        }
    }
}

/// Issue 56: a long bad paged call, then valid calls queued on the same thread and stream for
/// 40 ms without a synchronize: 64 of 165 valid calls failed, each finding bits that the bad
/// kernel's programs had set since the last take. Now the bad call fails at most one later call
/// (exactly one, or the take after the synchronize when none ran after its fault was visible);
/// valid calls on another stream fail none. (Threads that end with a bad call in flight:
/// [`a_bad_call_of_an_ended_thread_fails_no_other_thread`].)
#[cfg(feature = "candle-cuda")]
pub fn a_long_bad_call_fails_at_most_one_later_call() {
    let Some(_) = check::gpu_and_rng("a_long_bad_call_fails_at_most_one_later_call") else {
        return;
    };
    let span = std::time::Duration::from_millis(40);
    let dev = Device::new_cuda(0).unwrap();
    let long = LongBadCall::new(&dev);
    let valid = QueuedValidCall::new("attribution/queued", &dev);
    // Load every kernel once, and time the long call.
    long.queue();
    dev.synchronize().unwrap();
    fa::take_gpu_faults().expect_err("the warm-up's bad call is reported");
    valid.call().unwrap();
    dev.synchronize().unwrap();
    let started = std::time::Instant::now();
    long.queue();
    dev.synchronize().unwrap();
    eprintln!("the long bad call runs for {:?}", started.elapsed());
    fa::take_gpu_faults().expect_err("reported");

    // One stream.
    long.queue();
    let (ran, failed) = valid.queue_for(span);
    dev.synchronize().unwrap();
    let taken_after = usize::from(fa::take_gpu_faults().is_err());
    eprintln!("one stream: {} valid calls queued behind the bad one, {failed} failed; {taken_after} report left for the take", ran.len() + failed);
    assert_eq!(failed + taken_after, 1, "the bad call is reported exactly once ({failed} valid calls failed)");
    valid.check("one stream", &ran);

    // Another stream of the same thread.
    let other = Device::new_cuda_with_stream(0).unwrap();
    let on_other = QueuedValidCall::new("attribution/other-stream", &other);
    long.queue();
    let (ran, failed) = on_other.queue_for(span);
    other.synchronize().unwrap();
    dev.synchronize().unwrap();
    eprintln!("another stream: {} valid calls, {failed} failed", ran.len() + failed);
    assert_eq!(failed, 0, "no valid call of another stream fails");
    on_other.check("another stream", &ran);
    fa::take_gpu_faults().expect_err("the bad call is reported on its own stream's thread");
}

/// Prints where a phase is and aborts the process when it has not ended within `limit`: a hang
/// on the GPU machine then shows the step it stopped at rather than the run's time limit.
#[cfg(feature = "candle-cuda")]
struct Watchdog {
    step: std::sync::Arc<std::sync::Mutex<String>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(feature = "candle-cuda")]
impl Watchdog {
    fn start(limit: std::time::Duration) -> Watchdog {
        let step = std::sync::Arc::new(std::sync::Mutex::new("start".to_owned()));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, d) = (step.clone(), done.clone());
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < limit {
                std::thread::sleep(std::time::Duration::from_millis(100));
                if d.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
            }
            eprintln!("watchdog: no progress within {limit:?}; last step: {}", s.lock().unwrap());
            dump_threads();
            std::process::abort();
        });
        Watchdog { step, done }
    }

    fn at(&self, step: impl Into<String>) {
        let step = step.into();
        eprintln!("step: {step}");
        *self.step.lock().unwrap() = step;
    }
}

/// Where each thread of this process waits (no debugger on the lent machines): its name, wait
/// channel and system call as the kernel tells them, then its own backtrace, which each thread
/// writes to stderr from a signal handler (glibc's `backtrace_symbols_fd`: module and offset,
/// resolved against the unstripped binary with addr2line).
#[cfg(feature = "candle-cuda")]
fn dump_threads() {
    use std::ffi::{c_int, c_long, c_void};
    extern "C" {
        fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
        fn backtrace_symbols_fd(buffer: *const *mut c_void, size: c_int, fd: c_int);
        fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
        fn syscall(number: c_long, ...) -> c_long;
    }
    // x86-64 Linux numbers: the GPU machines this runs on.
    const SIGUSR1: c_int = 10;
    const SYS_GETTID: c_long = 186;
    const SYS_TGKILL: c_long = 234;
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return;
    }
    extern "C" fn write_backtrace(_: c_int) {
        let mut frames = [std::ptr::null_mut(); 48];
        // SAFETY: the buffer holds 48 frames; backtrace_symbols_fd writes to stderr without
        // allocating. backtrace itself is not async-signal-safe (the unwinder is loaded by the
        // first call below, outside the handler); a diagnostic right before an abort accepts it.
        unsafe { backtrace_symbols_fd(frames.as_ptr(), backtrace(frames.as_mut_ptr(), 48), 2) };
    }
    let mut warm = [std::ptr::null_mut(); 1];
    // SAFETY: loads the unwinder outside a signal handler; installs a handler that only unwinds
    // and writes (the process aborts right after the dump).
    unsafe {
        backtrace(warm.as_mut_ptr(), 1);
        signal(SIGUSR1, write_backtrace);
    }
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
    let pid = std::process::id();
    // SAFETY: gettid takes no arguments.
    let own = unsafe { syscall(SYS_GETTID) };
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let dir = task.path();
        let tid: c_long = task.file_name().to_string_lossy().parse().unwrap_or(0);
        eprintln!(
            "watchdog: thread {tid} {}: wchan {}, syscall {}",
            read(dir.join("comm")).trim(),
            read(dir.join("wchan")).trim(),
            read(dir.join("syscall")).trim(),
        );
        if tid == own {
            continue; // the watchdog itself: its abort must not wait on its own handler
        }
        // SAFETY: tgkill to a thread of this process, whose handler is installed above.
        unsafe { syscall(SYS_TGKILL, pid as c_long, tid, SIGUSR1 as c_long) };
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[cfg(feature = "candle-cuda")]
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Issue 56: a thread that queues a long bad call, waits for its stream and ends without taking
/// the fault, then new threads queuing valid calls on the same stream: no valid call fails and
/// the ended thread's fault reaches nobody. A thread cannot end here while its call runs: on
/// CUDA such a thread hangs in the driver's thread-exit handler, whatever it queued
/// (docs/testing.md); the mock driver's test `an_ended_threads_calls_in_flight_keep_their_words`
/// checks that the words of calls in flight at a thread's end come back once they finish.
#[cfg(feature = "candle-cuda")]
pub fn a_bad_call_of_an_ended_thread_fails_no_other_thread() {
    let Some(_) = check::gpu_and_rng("a_bad_call_of_an_ended_thread_fails_no_other_thread") else {
        return;
    };
    let watchdog = Watchdog::start(std::time::Duration::from_secs(90));
    let span = std::time::Duration::from_millis(40);
    let dev = Device::new_cuda(0).unwrap();
    let long = LongBadCall::new(&dev);
    let valid = QueuedValidCall::new("attribution/ended-thread", &dev);
    watchdog.at("warm-up");
    long.queue();
    dev.synchronize().unwrap();
    fa::take_gpu_faults().expect_err("the warm-up's bad call is reported");
    for round in 0..3 {
        watchdog.at(format!("round {round}: the bad call's thread"));
        // The thread waits for its stream before it ends: a thread that ends with Candle CUDA
        // work in flight hangs in the CUDA driver's thread-exit handler, with or without a call
        // of ours (seen on the H200 with plain matmuls: docs/testing.md). Its bad call's word
        // is still unreported when the thread ends. The output is dropped here, not there: that
        // thread may have no current context, and Candle frees a buffer without binding its own.
        let output = std::thread::scope(|scope| {
            let thread = scope.spawn(|| {
                let output = long.call();
                watchdog.at(format!("round {round}: the bad call is queued; its thread waits for it and ends"));
                dev.synchronize().unwrap();
                output
            });
            thread.join().unwrap()
        });
        watchdog.at(format!("round {round}: the bad call's thread ended; its output is dropped"));
        drop(output);
        watchdog.at(format!("round {round}: four new threads queue valid calls"));
        let results: Vec<(Vec<Tensor>, usize)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (valid, watchdog) = (&valid, &watchdog);
                    scope.spawn(move || {
                        let out = valid.queue_for(span / 4);
                        watchdog.at(format!("round {round}: thread {t} queued {} calls", out.0.len() + out.1));
                        fa::take_gpu_faults().expect("no fault reaches a thread of valid calls");
                        out
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        watchdog.at(format!("round {round}: synchronize"));
        dev.synchronize().unwrap();
        let failed: usize = results.iter().map(|r| r.1).sum();
        let queued: usize = results.iter().map(|r| r.0.len() + r.1).sum();
        eprintln!("round {round}: after the bad call's thread ended, {queued} valid calls on 4 new threads, {failed} failed");
        assert_eq!(failed, 0, "no valid call of another thread fails");
        watchdog.at(format!("round {round}: check"));
        for (t, (ran, _)) in results.iter().enumerate() {
            valid.check(&format!("round {round}, new thread {t}"), ran);
        }
        fa::take_gpu_faults().expect("the ended thread's fault reaches nobody");
    }
    watchdog.at("done");
}
