//! Flash attention for [Candle](https://github.com/huggingface/candle), on the CPU and on AMD
//! GPUs, with the public API of [`candle-flash-attn`](https://docs.rs/candle-flash-attn/0.11.1)
//! 0.11.1: the same eleven functions, names, argument order and semantics, so a model switches
//! crates with no code change.
//!
//! # Backends
//!
//! - **CPU, always.** A tiled online-softmax flash attention (f32 accumulation, rayon-parallel,
//!   memory O(tile) instead of O(s²)) that serves every feature of the API, for f32, f16 and bf16
//!   tensors on [`candle::Device::Cpu`].
//! - **AMD GPUs, feature `rocm`.** Our own Triton kernels, compiled ahead of time at build time
//!   for RDNA2 (gfx1030–gfx1036), RDNA3 (gfx1100–gfx1103, gfx1150–gfx1152), RDNA4 (gfx1200,
//!   gfx1201) and CDNA (gfx90a, gfx942, gfx950) and embedded in the library; on CDNA also AMD's Composable Kernel (CK) fmha
//!   kernels. Each call goes to CK where a built CK instance serves it, to Triton otherwise.
//!   The archs are chosen at build time (`FLASH_ATTN_ROCM_ARCHS`; see the README).
//! - **Candle tensors on a ROCm device, feature `candle-rocm`** (implies `rocm`): the ops'
//!   `CustomOp3::rocm_fwd`, so the functions below take tensors on a Candle ROCm device. It needs
//!   a `candle-core` patched with Candle's ROCm backend (PR #3801); without it, the [`rocm`] and
//!   [`triton`] modules launch on raw device pointers.
//! - **NVIDIA, feature `cuda-verify`.** The same Triton sources compiled for sm_80, sm_86, sm_89
//!   and sm_90 (`FLASH_ATTN_ROCM_CUDA_ARCHS`), used to check the GPU kernels against the CPU
//!   backend (`glue::offload`) and by `candle-cuda`.
//! - **Candle tensors on a CUDA device, feature `candle-cuda`** (implies `cuda-verify`): the ops'
//!   `CustomOp3::cuda_fwd` on released candle, our Triton kernels on Candle's CUDA device.
//!   Building candle's `cuda` feature needs nvcc (docs/building.md).
//! - **Any other GPU device** (a Candle fork's, raw buffers): implement `glue::GpuDevice` and call
//!   `glue::forward` (features `rocm` or `cuda-verify`); every device above goes through it.
//!
//! # Quick start
//!
//! Add the crate, build q/k/v in the batch layout `(batch, seq_len, heads, head_dim)` and call
//! [`flash_attn`]. This runs on the CPU; the same code runs on an AMD GPU with feature
//! `candle-rocm` and the tensors on a ROCm device.
//!
//! ```
//! use flash_attn_rocm::candle::{DType, Device, Tensor};
//! use flash_attn_rocm::flash_attn;
//!
//! let dev = Device::Cpu;
//! let (batch, seq_len, heads, head_dim) = (2, 16, 4, 64);
//! let shape = (batch, seq_len, heads, head_dim);
//! let q = Tensor::randn(0f32, 1.0, shape, &dev)?.to_dtype(DType::F16)?;
//! let k = Tensor::randn(0f32, 1.0, shape, &dev)?.to_dtype(DType::F16)?;
//! let v = Tensor::randn(0f32, 1.0, shape, &dev)?.to_dtype(DType::F16)?;
//!
//! let softmax_scale = 1.0 / (head_dim as f32).sqrt();
//! let out = flash_attn(&q, &k, &v, softmax_scale, /* causal */ true)?;
//! assert_eq!(out.dims(), &[batch, seq_len, heads, head_dim]);
//! assert_eq!(out.dtype(), DType::F16);
//! # Ok::<(), flash_attn_rocm::candle::Error>(())
//! ```
//!
//! # Layouts and dtypes
//!
//! Three layouts, chosen by the function family; `h` is the number of query heads, `h_k` the
//! number of k/v heads (it must divide `h`: `h_k == h` is multi-head attention, `h_k < h` is
//! MQA/GQA, each k/v head serving `h / h_k` consecutive query heads), `d` the head dim.
//!
//! | family | q | k, v | sequence description | output | log-sum-exp (`*_with_lse`) |
//! |---|---|---|---|---|---|
//! | batch: [`flash_attn`], `flash_attn_{windowed,alibi,...}` | `(b, s_q, h, d)` | `(b, s_k, h_k, d)` | the shapes | q's shape and dtype | f32 `(b, h, s_q)` |
//! | varlen: `flash_attn_varlen*` | `(total_q, h, d)` | `(total_k, h_k, d)` | `seqlens_q`, `seqlens_k`: u32 `(b + 1,)`, cumulative | q's shape and dtype | f32 `(h, total_q)` |
//! | paged: [`flash_attn_varlen_paged_windowed`] | `(total_q, h, d)` | `(num_blocks, page_block_size, h_k, d)` | cumulative seqlens as varlen, `block_table`: u32 or i32 `(b, max_blocks)` | q's shape and dtype | f32 `(h, total_q)` |
//!
//! - **dtypes**: q, k and v share one dtype. CPU: f32, f16 or bf16 (computed in f32). GPU: f16 or
//!   bf16 (f32 is an `Err` there). The output has q's dtype.
//! - **head dim** `d`: a multiple of 8, at most 512 (CK serves up to 256; the Triton kernels the
//!   rest).
//! - **order of dims**: positions before heads, as in candle-flash-attn. Shapes cannot tell a
//!   `(b, h, s, d)` tensor (the layout of Candle's matmul attention) from a `(b, s, h, d)` one
//!   whose dims happen to fit (`h == s`, or `h_k` dividing `h` either way), and strides cannot
//!   either: a contiguous `(b, h, s, d)` tensor and a transposed view are both valid inputs. Such
//!   a call runs with heads and positions swapped and returns a wrong result, not an `Err`, in
//!   this crate as in candle-flash-attn. Pass `t.transpose(1, 2)?` of a `(b, h, s, d)` tensor
//!   (no copy is needed; see strides). Varlen's `(total, h, d)` likewise.
//! - **strides**: any, as long as the last dim is contiguous (stride 1): a `narrow` view, or a
//!   `(b, h, s, d)` tensor transposed to `(b, s, h, d)`, needs no copy. On the GPU each row of
//!   `d` elements must also start 16-byte aligned.
//! - **seqlens**: `seqlens_q = [0, len_0, len_0 + len_1, ...]`, non-decreasing, `b + 1` values;
//!   sequence `i` owns rows `seqlens_q[i]..seqlens_q[i + 1]` of q and of the output (likewise
//!   for k/v). `max_seqlen_q`/`max_seqlen_k` must be at least the longest sequence.
//! - **paged K/V**: key `j` of sequence `i` lives at
//!   `k[block_table[i, j / page_block_size], j % page_block_size]`; `seqlens_k` still counts
//!   each sequence's keys cumulatively. The CPU backend and the Triton kernels serve any page
//!   size; CK serves multiples of 128. The block table (u32 or i32) may have any strides, and
//!   `mm_prefix_ranges` any whose last dim is contiguous: where the GPU kernels need consecutive
//!   elements, the call copies them.
//!
//! # Masks and options
//!
//! - **Causal** is bottom-right aligned, as in flash-attention: query `i` of a sequence with `s_q`
//!   queries and `s_k` keys sits at key position `pos = i + s_k - s_q` and sees keys `j <= pos`.
//!   With `s_q == s_k` this is the usual lower triangle; a single decode query sees every key.
//! - **Windows** (`window_size_left`, `window_size_right`): query `i` sees keys in
//!   `[pos - left, pos + right]`. `None`, or a size larger than `s_k` (`max_seqlen_k` for
//!   varlen), is unbounded on that side; `(None, Some(0))` is causal, `(None, None)` no mask; a
//!   window bounded on one side only gets `s_k` (`max_seqlen_k`) on the other, as in
//!   candle-flash-attn.
//! - **ALiBi**: `alibi_slopes` is an f32 tensor of shape `(h,)`, one slope per query head; the
//!   logit of query `i`, key `j` gets `-slope[head] * |pos - j|`.
//! - **softcap**: a logit `x` (already scaled by `softmax_scale`) becomes
//!   `softcap * tanh(x / softcap)` before the ALiBi bias and the softmax (Gemma 2); it must be
//!   finite and > 0.
//! - **`softmax_scale`**: the logits are `q · k * softmax_scale`, usually `1 / sqrt(d)`; it must
//!   be finite.
//! - A query row that sees no key (an empty sequence, a window past the keys) gets an output of
//!   0 and a log-sum-exp of `-inf`.
//!
//! # Errors
//!
//! Every function returns a [`candle::Error`] naming the argument and what was expected for bad
//! input: a wrong rank, mixed or unsupported dtypes, head dims that differ or are not a multiple
//! of 8, `h_k` not dividing `h`, a non-contiguous last dim, malformed seqlens (dtype, rank,
//! length, decreasing, past the end of q/k, longer than `max_seqlen`), a block table out of
//! range or too short, a `page_block_size` that is not k's dim 1, bad ALiBi slopes, a bad
//! softcap or scale; also q, k and v on different devices. On a GPU, a call no built kernel
//! serves is an `Err` that says why and which build variable to change. Nothing is silently
//! ignored; dropout and backward are not implemented.
//!
//! **Seqlens and block tables on a GPU.** A GPU call checks its side tensors' shapes at once
//! but leaves their values on the device (no host round trip per call): the kernels check them,
//! replace an out-of-range value and record the fault in the call's own fault word, which the
//! thread that queued the call reads. Cumulative seqlens out of range make their sequence empty
//! (output rows 0, LSE `-inf`); a block id outside the cache is read as block 0, so that
//! sequence's rows hold attention over the wrong keys: the fault says to discard the output.
//! The call itself has returned `Ok`; the fault surfaces, once per bad call however long its
//! kernels run, as an `Err` naming the tensor
//! - at that thread's next call on the same stream (which is then not run), or
//! - at [`take_gpu_faults`], which that thread calls after synchronizing the device (e.g. before
//!   answering a request; see its example).
//!
//! A fault never reaches another thread's call, nor a call on another stream. One exception: a
//! runtime that cannot tell streams apart but by their handle (HIP before 7, which has no
//! `hipStreamGetId`; CUDA before 12, no `cuStreamGetId`) passes a destroyed stream's untaken
//! fault to a new stream that gets the same handle; take the faults (or make a call) on a
//! stream before destroying it. Where the device
//! cannot write host memory atomically (an AMD GPU on a bus without PCIe atomics), the values
//! are read and checked on the host before the call instead, as on the CPU: an out-of-range
//! value fails the call itself, at the cost of a copy that waits for the device.
//!
//! # Where to go next
//!
//! - The functions, each with its shapes and, per family, a runnable example:
//!   [`flash_attn`] (batch), [`flash_attn_varlen`] (varlen), [`flash_attn_varlen_paged_windowed`]
//!   (paged cache), [`flash_attn_with_lse`] (log-sum-exp, for merging partial results), and the
//!   [`FlashAttn`] op for `q.apply_op3(k, v, op)`.
//! - Which backend and kernels serve a call: [`explain()`] (without running it), or
//!   `FLASH_ATTN_ROCM_LOG=1` for a line per call on stderr.
//! - Low level: [`params`] validates a call and normalizes it into one [`params::AttnCall`]
//!   that every backend consumes; [`cpu`] runs it on host memory; [`rocm`] (CK arguments,
//!   `rocm::fmha_fwd` with feature `rocm`) and [`triton`] (our kernels' registry, selection and
//!   arguments) launch on raw device pointers ([`device::DeviceBuffers`]) and a HIP stream;
//!   [`plan`] picks the family that serves a GPU call and plans its work.

#![deny(missing_docs)]

mod api;
pub mod cpu;
pub mod device;
mod explain;
#[cfg(feature = "triton")]
pub mod glue;
#[cfg(feature = "triton")]
pub mod gpu;
mod op;
pub mod params;
pub mod plan;
pub mod rocm;
pub mod triton;

pub use api::*;
/// candle-core, as this crate names it: the same crate (and types) as a user's `candle_core`
/// dependency of a matching version, so `flash_attn_rocm::candle::Tensor` is `candle_core::Tensor`.
/// The examples in these docs use this path, so that they compile pasted into any crate.
pub use candle;
pub use explain::{explain, Backend, Dispatch, ENV_LOG};
pub use op::FlashAttn;
