//! Our AMD code objects executed on tinygrad's AMD ISA emulator, through the crate's own launch
//! path and its real HIP driver: each call runs on CPU tensors once on the CPU backend and once
//! inside `run_on_gpu(Driver::hip(), ..)` (select, plan, marshal, launch, `src/gpu/hip.rs`),
//! with the HIP stand-in (tools/hip-standin) as `libamdhip64`, which runs the kernels on the
//! emulator; the two must agree (outputs and LSE). Shapes are small: the emulator executes a
//! few million instructions a second at best.
//!
//! Needs `--features rocm` with the archs built (`FLASH_ATTN_ROCM_ARCHS`), and the stand-in:
//! `scripts/hip-emu-tests.sh` builds it and runs each trial with it. Without it every test is
//! reported ignored with the reason. How to run it and what it proves: docs/testing.md.

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod ck_cases;
mod compare;
mod launches;
mod runner;
mod twins;

fn main() {
    runner::run(&[cases::CLASSES, ck_cases::CK_CLASSES])
}
