//! One trial per emulated arch and kernel class (`gfx1100::prefill`, ...), each reported ignored
//! with the reason where it cannot run: no HIP stand-in, its device another arch (one arch per
//! process: `HIP_STANDIN_DEVICES`), or the arch not among the build's targets.
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm::triton::embedded_targets;
use libtest_mimic::{Arguments, Completion, Trial};

/// A kernel class's test body, given the driver whose device 0 is the emulated arch.
pub type ClassTest = (&'static str, fn(&'static Driver));

/// The archs the harness drives, in the order of the report.
pub const ARCHS: [&str; 6] = ["gfx942", "gfx1100", "gfx1201", "gfx90a", "gfx1030", "gfx1103"];

/// The stand-in's variable that lists its devices.
const DEVICES_VAR: &str = "HIP_STANDIN_DEVICES";

fn unavailable(arch: &str) -> Option<String> {
    if arch.starts_with("gfx10") {
        return Some(format!("{arch} is RDNA2: tinygrad's emulator implements RDNA3, RDNA4 and CDNA only"));
    }
    if !embedded_targets().contains(&arch) {
        return Some(format!("{arch} is not built (FLASH_ATTN_ROCM_ARCHS; built: {:?})", embedded_targets()));
    }
    let Ok(devices) = std::env::var(DEVICES_VAR) else {
        return Some(format!("{DEVICES_VAR} is unset: run through scripts/hip-emu-tests.sh (the HIP stand-in)"));
    };
    if devices.split(',').next() != Some(arch) {
        return Some(format!("the stand-in's device 0 is {devices:?}"));
    }
    let driver = match Driver::hip() {
        Ok(driver) => driver,
        Err(e) => return Some(format!("no HIP runtime: {e}")),
    };
    match driver.arch_name(0) {
        Ok(name) if name == arch => None,
        Ok(name) => Some(format!("device 0 reports {name}, not {arch}")),
        Err(e) => Some(format!("device 0: {e}")),
    }
}

/// The kernel family a class needs on `arch`: its CK classes (`ck_*`) run with
/// `FLASH_ATTN_ROCM_KERNELS=ck` on a CK arch of the build, the others with `triton` where CK is
/// built (else the dispatch could take CK for a call the class means for Triton).
fn family_unavailable(class: &str, arch: &str) -> Option<String> {
    let ck_built = flash_attn_rocm::rocm::CK_ARCHS.split(',').any(|a| a == arch);
    let forced = std::env::var("FLASH_ATTN_ROCM_KERNELS").unwrap_or_default();
    let wanted = match (class.starts_with("ck_"), ck_built) {
        (true, false) => return Some(format!("CK is not built for {arch} ({})", flash_attn_rocm::rocm::BUILD_INFO)),
        (true, true) => "ck",
        (false, true) => "triton",
        (false, false) => return None,
    };
    (forced != wanted).then(|| format!("needs FLASH_ATTN_ROCM_KERNELS={wanted}"))
}

pub fn run(class_lists: &[&'static [ClassTest]]) -> ! {
    crate::launches::start_log();
    let mut args = Arguments::from_args();
    // One test at a time: the emulator runs one launch at a time anyway, and the fault word of
    // the device is shared by its classes (a bad call's report must reach its own test).
    args.test_threads.get_or_insert(1);
    let mut trials = Vec::new();
    for arch in ARCHS {
        let why = if args.list { None } else { unavailable(arch) };
        if let Some(why) = &why {
            eprintln!("{arch}: skipped: {why}");
        }
        for &(class, test) in class_lists.iter().copied().flatten() {
            let why = why.clone().or_else(|| if args.list { None } else { family_unavailable(class, arch) });
            trials.push(Trial::ignorable_test(format!("{arch}::{class}"), move || match why {
                Some(why) => {
                    eprintln!("{arch}::{class}: skipped: {why}");
                    Ok(Completion::ignored_with("emulated arch or family unavailable"))
                }
                None => {
                    let started = std::time::Instant::now();
                    test(Driver::hip().expect("checked"));
                    eprintln!("{arch}::{class}: {:.1} s", started.elapsed().as_secs_f64());
                    Ok(Completion::Completed)
                }
            }));
        }
    }
    libtest_mimic::run(&args, trials).exit()
}
