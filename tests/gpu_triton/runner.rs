//! The harness of the GPU suites (`harness = false` in Cargo.toml; libtest-mimic takes libtest's
//! arguments and prints its report). On a machine without a GPU every test is reported
//! *ignored* (the reason printed once), so the summary reads `0 passed; 0 failed; N ignored`, not N
//! tests that passed without running. Where `check::driver()` finds a GPU every test runs, and a
//! panic fails it as under libtest. A test named `isolated::…` (one that leaves the device
//! unusable, e.g. by resetting it) runs in a process of its own: this binary, started again for
//! that test alone.
//!
//! `FLASH_ATTN_ROCM_GPU_SOAK_SECONDS=N` adds one more test, `soak`: for N seconds it runs the
//! other tests again and again in random order (each draws fresh inputs from its own seed), as a
//! long random run over every function they call.
use libtest_mimic::{Arguments, Completion, Trial};
use std::sync::OnceLock;

/// A GPU test: its name in the report and its body (which panics on failure).
pub type GpuTest = (&'static str, fn());

/// Set in the process that runs one isolated test.
const CHILD: &str = "FLASH_ATTN_ROCM_GPU_TEST_CHILD";

/// Runs the isolated test `name` in a new process of this binary; panics when it fails.
fn in_own_process(name: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = std::process::Command::new(exe)
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .status()
        .expect("start the test's own process");
    assert!(status.success(), "{name}, in its own process: {status}");
}

/// Why this machine cannot run the GPU tests, or `None` when it has a GPU; checked once.
fn no_gpu() -> Option<&'static str> {
    static NO_GPU: OnceLock<Option<String>> = OnceLock::new();
    NO_GPU.get_or_init(|| crate::check::driver().err()).as_deref()
}

/// Runs `tests` and exits with libtest's status.
pub fn run(tests: &'static [GpuTest]) -> ! {
    let args = Arguments::from_args();
    if let (false, Some(why)) = (args.list, no_gpu()) {
        eprintln!("no GPU: {why}\nEvery test of this binary is reported ignored.");
    }
    let trials = tests
        .iter()
        .map(|&(name, test)| {
            Trial::ignorable_test(name, move || match no_gpu() {
                Some(_) => Ok(Completion::ignored_with("no GPU")),
                None if name.starts_with("isolated::") && std::env::var_os(CHILD).is_none() => {
                    in_own_process(name);
                    Ok(Completion::Completed)
                }
                None => {
                    test();
                    Ok(Completion::Completed)
                }
            })
        })
        .collect::<Vec<_>>();
    let trials = trials.into_iter().chain(soak(tests)).collect();
    libtest_mimic::run(&args, trials).exit()
}

/// The `soak` trial when `FLASH_ATTN_ROCM_GPU_SOAK_SECONDS` asks for one.
fn soak(tests: &'static [GpuTest]) -> Option<Trial> {
    let seconds: u64 = std::env::var("FLASH_ATTN_ROCM_GPU_SOAK_SECONDS").ok()?.parse().expect("a number of seconds");
    Some(Trial::ignorable_test("soak", move || {
        if no_gpu().is_some() {
            return Ok(Completion::ignored_with("no GPU"));
        }
        let mut rng = crate::common::rng("soak");
        let pool: Vec<&GpuTest> = tests.iter().filter(|(name, _)| !name.starts_with("isolated::")).collect();
        let started = std::time::Instant::now();
        let mut runs = std::collections::BTreeMap::new();
        while started.elapsed().as_secs() < seconds {
            let (name, test) = pool[rand::Rng::gen_range(&mut rng, 0..pool.len())];
            test();
            *runs.entry(*name).or_insert(0usize) += 1;
        }
        eprintln!("soak: {} runs in {:?}: {runs:?}", runs.values().sum::<usize>(), started.elapsed());
        Ok(Completion::Completed)
    }))
}
