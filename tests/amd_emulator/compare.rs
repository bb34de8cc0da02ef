//! Emulator against CPU backend: the same call on the same CPU tensors, once on each.
use candle::{DType, Result, Tensor};
use flash_attn_rocm::gpu::Driver;
use flash_attn_rocm as fa;
use flash_attn_rocm::glue::offload::run_on_gpu;

use crate::launches::new_launches;

use crate::common::values;

/// What a call returns: the output and, for the `*_with_lse` functions, the LSE.
pub type Outcome = Result<(Tensor, Option<Tensor>)>;

/// Largest |emulated - cpu| allowed, relative to `1 + |cpu|`: a few units in the last place of
/// the output type (both sides round an f32 accumulation once).
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2e-2,
        _ => 3e-3,
    }
}
const LSE_TOLERANCE: f64 = 2e-4;

/// Worst |a - b| / (1 + |b|), and where; NaNs count as infinitely wrong.
fn worst(a: &[f64], b: &[f64]) -> (f64, usize) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).enumerate().fold((0.0, 0), |(w, at), (i, (x, y))| {
        let e = if x.is_nan() != y.is_nan() { f64::INFINITY } else if x.is_nan() { 0.0 } else { (x - y).abs() / (1.0 + y.abs()) };
        if e > w { (e, i) } else { (w, at) }
    })
}

/// Runs `f` on the CPU backend and on the emulated GPU of `driver`; panics naming the worst
/// element when they differ beyond the tolerance, or when the kernels the stand-in launched are
/// not the ones `explain` names for the call. Prints one `emu-diff` line per call.
pub fn check(what: &str, driver: &'static Driver, f: impl Fn() -> Outcome) {
    let (cpu_out, cpu_lse) = f().unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    let dispatch = run_on_gpu(driver, || fa::explain(&f)).unwrap_or_else(|e| panic!("{what}: explain: {e}"));
    new_launches();
    let started = std::time::Instant::now();
    let (emu_out, emu_lse) = run_on_gpu(driver, &f).unwrap_or_else(|e| panic!("{what}: emulator: {e}"));
    let seconds = started.elapsed().as_secs_f64();
    explained(what, &dispatch, &new_launches());
    agree(&format!("{what} ({seconds:.1} s)"), (&emu_out, emu_lse.as_ref()), (&cpu_out, cpu_lse.as_ref()));
}

/// Panics unless the launches are the kernels `dispatch` names: its variant (CK: `ck_fwd` for
/// `fmha_fwd_*`, `ck_splitkv` for `fmha_fwd_splitkv_*`) and its merge (Triton) or combine (CK)
/// when it splits the keys.
fn explained(what: &str, dispatch: &fa::Dispatch, launched: &[&str]) {
    let mut named = vec![];
    match dispatch.backend {
        fa::Backend::Ck if dispatch.variant.starts_with("fmha_fwd_splitkv") => named.push("ck_splitkv"),
        fa::Backend::Ck => named.push("ck_fwd"),
        _ => named.push(dispatch.variant.as_str()),
    }
    named.extend(dispatch.merge.as_deref());
    for name in named {
        let ran = launched.iter().any(|variants| variants.split('|').any(|v| v == name));
        assert!(ran, "{what}: explain names {name} ({dispatch}), the stand-in launched {launched:?}");
    }
}

/// The variants of the last `launched_must_include` (for assertions on what did not run).
pub fn last_launched() -> Vec<&'static str> {
    LAST.with(|l| l.borrow().clone())
}

thread_local! {
    pub static LAST: std::cell::RefCell<Vec<&'static str>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Panics naming the worst element when the emulated output or LSE differ from the CPU's beyond
/// the tolerance; prints one `emu-diff` line.
pub fn agree(what: &str, (emu_out, emu_lse): (&Tensor, Option<&Tensor>), (cpu_out, cpu_lse): (&Tensor, Option<&Tensor>)) {
    assert_eq!(emu_out.dims(), cpu_out.dims(), "{what}: dims");
    let (emu, cpu) = (values(emu_out), values(cpu_out));
    let (err, at) = worst(&emu, &cpu);
    let (lse_err, lse_at, lse_values) = match (cpu_lse, emu_lse) {
        (Some(c), Some(e)) => {
            let (c, e) = (values(c), values(e));
            let (err, at) = worst(&e, &c);
            (err, at, Some((e, c)))
        }
        (None, None) => (0.0, 0, None),
        _ => panic!("{what}: an LSE on one side only"),
    };
    eprintln!("emu-diff {err:.2e} lse {lse_err:.2e} {what}");
    assert!(err <= tolerance(cpu_out.dtype()), "{what}: element {at}: emulated {} cpu {} (relative error {err:.3e})", emu[at], cpu[at]);
    if let Some((e, c)) = lse_values.filter(|_| lse_err > LSE_TOLERANCE) {
        panic!("{what}: LSE relative error {lse_err:.3e} at {lse_at} of {:?}: emulated {e:?}, cpu {c:?}", cpu_lse.map(|l| l.dims().to_vec()));
    }
}
