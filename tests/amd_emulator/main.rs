//! Our AMD code objects executed on tinygrad's AMD ISA emulator, through the crate's own launch
//! path: each call runs on CPU tensors once on the CPU backend and once inside
//! `run_on_gpu(Driver::emulator(arch), ..)` (select, plan, marshal, launch, the emulator
//! driver), and the two must agree (outputs and LSE). Shapes are small: the emulator executes
//! a few million instructions a second at best.
//!
//! Needs `--features amd-emulator`, `FLASH_ATTN_ROCM_TINYGRAD` (a tinygrad checkout) and the
//! archs built (`FLASH_ATTN_ROCM_ARCHS`); without them every test is reported ignored with the
//! reason. How to run it and what it proves: docs/testing.md.

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod compare;
mod runner;
mod twins;

fn main() {
    runner::run(cases::CLASSES)
}
