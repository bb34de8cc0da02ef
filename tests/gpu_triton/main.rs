//! The Triton kernels on a real GPU: every public function (candle-flash-attn's eleven,
//! `FlashAttn::forward_with_lse` and the `*_with_lse` functions) runs on CPU tensors once on the
//! CPU backend and once offloaded to the GPU through the Triton path
//! (`flash_attn_rocm::glue::offload::run_on_gpu`: upload, plan, launch, download). Both outputs
//! must pass the parity rule against the f64 reference and the GPU LSE must match the CPU's.
//!
//! With `candle-cuda`, every check also runs on Candle CUDA tensors (check.rs).
//!
//! The GPU: with `cuda-verify`, device 0 of the CUDA driver (the NVIDIA check of the same kernel
//! sources, compiled to the NVIDIA targets); with `rocm` alone, device 0 of HIP. Without a GPU every test is
//! reported ignored, with the reason (runner.rs: `harness = false`, built with the `triton`
//! feature only).

#[path = "../common/mod.rs"]
mod common;

// The GPU-vs-CPU cases of the Candle ROCm suite, run here through the offload.
#[path = "../rocm_candle/batch.rs"]
mod batch;
mod check;
mod runner;
mod threads;
mod triton_cases;
#[path = "../rocm_candle/varlen.rs"]
mod varlen;

/// Every test of this binary, under the name libtest gave it before this runner. A `#[test]`
/// function here is never compiled (`harness = false` drops it): a new test is a `pub fn`
/// listed here.
const TESTS: &[runner::GpuTest] = &[
    ("batch::batch_functions_match_cpu", batch::check_batch_functions),
    ("triton_cases::odd_head_dims_and_softcap_with_alibi_match_cpu", triton_cases::odd_head_dims_and_softcap_with_alibi_match_cpu),
    ("triton_cases::any_page_size_with_prefix_ranges_matches_cpu", triton_cases::any_page_size_with_prefix_ranges_matches_cpu),
    ("triton_cases::split_decode_matches_cpu", triton_cases::split_decode_matches_cpu),
    ("triton_cases::decode_with_extras_matches_cpu", triton_cases::decode_with_extras_matches_cpu),
    ("triton_cases::paged_decode_of_every_head_dim_tile_matches_cpu", triton_cases::paged_decode_of_every_head_dim_tile_matches_cpu),
    ("triton_cases::head_dims_above_256_match_cpu", triton_cases::head_dims_above_256_match_cpu),
    ("triton_cases::calls_the_triton_path_cannot_serve_are_errors", triton_cases::calls_the_triton_path_cannot_serve_are_errors),
    ("triton_cases::strided_block_table_matches_cpu", triton_cases::strided_block_table_matches_cpu),
    ("triton_cases::short_masked_prompts_match_cpu", triton_cases::short_masked_prompts_match_cpu),
    ("triton_cases::batched_decode_matches_cpu", triton_cases::batched_decode_matches_cpu),
    ("triton_cases::tma_prompts_match_cpu", triton_cases::tma_prompts_match_cpu),
    ("triton_cases::tma_split_head_dims_match_cpu", triton_cases::tma_split_head_dims_match_cpu),
    ("varlen::paged_functions_match_cpu", varlen::check_paged_functions),
    ("varlen::varlen_functions_match_cpu", varlen::check_varlen_functions),
    ("threads::fresh_threads_calling_at_once_match_cpu", threads::fresh_threads_calling_at_once_match_cpu),
];

fn main() {
    runner::run(TESTS)
}
