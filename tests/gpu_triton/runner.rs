//! The harness of the GPU suites (`harness = false` in Cargo.toml; libtest-mimic takes libtest's
//! arguments and prints its report). On a machine without a GPU every test is reported
//! *ignored* (the reason printed once), so the summary reads `0 passed; 0 failed; N ignored`, not N
//! tests that passed without running. Where `check::driver()` finds a GPU every test runs, and a
//! panic fails it as under libtest.
use libtest_mimic::{Arguments, Completion, Trial};
use std::sync::OnceLock;

/// A GPU test: its name in the report and its body (which panics on failure).
pub type GpuTest = (&'static str, fn());

/// Why this machine cannot run the GPU tests, or `None` when it has a GPU; checked once.
fn no_gpu() -> Option<&'static str> {
    static NO_GPU: OnceLock<Option<String>> = OnceLock::new();
    NO_GPU.get_or_init(|| crate::check::driver().err()).as_deref()
}

/// Runs `tests` and exits with libtest's status.
pub fn run(tests: &[GpuTest]) -> ! {
    let args = Arguments::from_args();
    if let (false, Some(why)) = (args.list, no_gpu()) {
        eprintln!("no GPU: {why}\nEvery test of this binary is reported ignored.");
    }
    let trials = tests
        .iter()
        .map(|&(name, test)| {
            Trial::ignorable_test(name, move || match no_gpu() {
                Some(_) => Ok(Completion::ignored_with("no GPU")),
                None => {
                    test();
                    Ok(Completion::Completed)
                }
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
