//! The public functions: every function of `candle-flash-attn` 0.11.1 with the same names,
//! argument order and types, plus variants that also return the log-sum-exp.
//!
//! The rules they share (layouts, dtypes, masks, errors) are documented once, on the crate's
//! front page (src/lib.rs); each function states its own shapes and links there.

use crate::op::{forward_with_lse, FlashAttn, FlashAttnVarLen};
use candle::{Result, Tensor};

/// Window sizes meaning "causal" or "no mask", as candle-flash-attn builds them.
fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
    (None, if causal { Some(0) } else { None })
}

fn batch_op(
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    (window_size_left, window_size_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttn {
    FlashAttn {
        softmax_scale,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    }
}

/// The varlen arguments shared by every `flash_attn_varlen*` function.
struct VarLen<'a> {
    seqlens_q: &'a Tensor,
    seqlens_k: &'a Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

fn varlen_op(
    lens: VarLen<'_>,
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttnVarLen {
    FlashAttnVarLen {
        base: batch_op(softmax_scale, alibi_slopes, window, softcap),
        max_seqlen_q: lens.max_seqlen_q,
        max_seqlen_k: lens.max_seqlen_k,
        seqlens_q: lens.seqlens_q.clone(),
        seqlens_k: lens.seqlens_k.clone(),
        block_table: None,
        mm_prefix_ranges: None,
        page_block_size: None,
    }
}

/// Attention `softmax(q · kᵀ · softmax_scale) · v` over batch tensors, optionally causal.
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`, with `h_k` dividing `h` (MQA/GQA).
///   One dtype for all three: f32, f16 or bf16 on the CPU, f16 or bf16 on a GPU.
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `softmax_scale`: multiplies the logits `q · k`, usually `1 / sqrt(d)`.
/// - `causal`: bottom-right causal mask, query `i` sees keys `j <= i + s_k - s_q`.
///
/// Returns `(b, s_q, h, d)` in q's dtype. Shared rules:
/// [layouts and dtypes](crate#layouts-and-dtypes), [masks](crate#masks-and-options),
/// [errors](crate#errors) (an `Err` for any shape, dtype or device mismatch).
///
/// # Example
///
/// ```
/// use flash_attn_rocm::candle::{Device, IndexOp, Tensor};
/// use flash_attn_rocm::flash_attn;
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
///
/// let dev = Device::Cpu;
/// let (b, s, h, d) = (2, 8, 4, 32);
/// let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
///
/// let out = flash_attn(&q, &k, &v, 1.0 / (d as f32).sqrt(), true)?;
/// assert_eq!(out.dims(), &[b, s, h, d]);
/// // Causal with s_q == s_k: query 0 sees key 0 only, so its output is v's first row.
/// assert!(max_diff(&out.i((.., 0))?, &v.i((.., 0))?)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn flash_attn(q: &Tensor, k: &Tensor, v: &Tensor, softmax_scale: f32, causal: bool) -> Result<Tensor> {
    q.apply_op3(k, v, batch_op(softmax_scale, None, causal_window(causal), None))
}

/// [`flash_attn`] with a local (sliding) window instead of the causal flag.
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`; dtypes as [`flash_attn`].
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `window_size_left`, `window_size_right`: query `i`, at key position `pos = i + s_k - s_q`,
///   sees keys in `[pos - left, pos + right]`. `None` (or a size above `s_k`) is unbounded on
///   that side; `(None, Some(0))` is causal, `(None, None)` no mask. See
///   [masks](crate#masks-and-options).
///
/// Returns `(b, s_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn`].
///
/// # Example
///
/// ```
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # use flash_attn_rocm::flash_attn_windowed;
/// # let (dev, (b, s, h, d)) = (Device::Cpu, (1, 6, 2, 16));
/// # let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// // A window of width 0 on both sides: each query sees only the key at its own position.
/// let out = flash_attn_windowed(&q, &k, &v, 0.25, Some(0), Some(0))?;
/// let diff = (out - &v)?.abs()?.max_all()?.to_scalar::<f32>()?;
/// assert!(diff < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, None, window, None))
}

/// [`flash_attn`] with an ALiBi bias.
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`; dtypes as [`flash_attn`].
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: f32 of shape `(h,)`, one slope per query head; the logit of query `i` and
///   key `j` gets `-slope[head] * |i + s_k - s_q - j|`.
/// - `softmax_scale`, `causal`: as [`flash_attn`].
///
/// Returns `(b, s_q, h, d)` in q's dtype. Besides the [shared errors](crate#errors), an `Err`
/// when `alibi_slopes` is not f32 or not `(h,)`.
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn, flash_attn_alibi};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (b, s, h, d)) = (Device::Cpu, (2, 6, 4, 16));
/// # let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// let scale = 1.0 / (d as f32).sqrt();
///
/// // Zero slopes: no bias, plain attention.
/// let zeros = Tensor::zeros(h, flash_attn_rocm::candle::DType::F32, &dev)?;
/// let plain = flash_attn(&q, &k, &v, scale, true)?;
/// assert!(max_diff(&flash_attn_alibi(&q, &k, &v, &zeros, scale, true)?, &plain)? < 1e-6);
///
/// // A steep slope: each query's own position outweighs every other key by e^100.
/// let steep = Tensor::new(&[100f32; 4], &dev)?;
/// assert!(max_diff(&flash_attn_alibi(&q, &k, &v, &steep, scale, true)?, &v)? < 1e-4);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = batch_op(softmax_scale, Some(alibi_slopes), causal_window(causal), None);
    q.apply_op3(k, v, op)
}

/// ALiBi ([`flash_attn_alibi`]) and a local window ([`flash_attn_windowed`]).
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`; dtypes as [`flash_attn`].
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: f32 `(h,)`; `window_size_left`, `window_size_right`: see
///   [masks](crate#masks-and-options).
///
/// Returns `(b, s_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn_alibi`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_alibi, flash_attn_alibi_windowed};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (b, s, h, d)) = (Device::Cpu, (2, 6, 4, 16));
/// # let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?; // (h,)
///
/// // (None, Some(0)) is the causal mask.
/// let windowed = flash_attn_alibi_windowed(&q, &k, &v, &slopes, 0.25, None, Some(0))?;
/// let causal = flash_attn_alibi(&q, &k, &v, &slopes, 0.25, true)?;
/// assert!(max_diff(&windowed, &causal)? < 1e-6);
///
/// // A sliding window: each query sees itself and the 2 keys before it.
/// let out = flash_attn_alibi_windowed(&q, &k, &v, &slopes, 0.25, Some(2), Some(0))?;
/// assert_eq!(out.dims(), &[b, s, h, d]);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, Some(alibi_slopes), window, None))
}

/// Optional ALiBi, a local window and a Gemma-style softcap.
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`; dtypes as [`flash_attn`].
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: `None`, or f32 `(h,)` as [`flash_attn_alibi`].
/// - `window_size_left`, `window_size_right`: as [`flash_attn_windowed`].
/// - `softcap`: each scaled logit `x` becomes `softcap * tanh(x / softcap)`, before the ALiBi
///   bias and the softmax; it must be finite and > 0.
///
/// Returns `(b, s_q, h, d)` in q's dtype. Besides the [shared errors](crate#errors), an `Err`
/// for a bad softcap or bad slopes.
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_alibi_windowed_softcap, flash_attn_windowed};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (b, s, h, d)) = (Device::Cpu, (2, 6, 4, 16));
/// # let q = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (b, s, h, d), &dev)?;
/// // Gemma 2 caps its attention logits at 50: `50 * tanh(x / 50)`.
/// let out = flash_attn_alibi_windowed_softcap(&q, &k, &v, None, 0.25, Some(4), Some(0), 50.0)?;
/// assert_eq!(out.dims(), &[b, s, h, d]);
///
/// // Logits far below the cap pass almost unchanged.
/// let uncapped = flash_attn_windowed(&q, &k, &v, 0.25, Some(4), Some(0))?;
/// assert!(max_diff(&out, &uncapped)? < 1e-2);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, batch_op(softmax_scale, alibi_slopes, window, Some(softcap)))
}

/// Variable-length attention: sequences of different lengths packed back to back, optionally
/// causal.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`, with `h_k` dividing `h`. One dtype:
///   f32, f16 or bf16 on the CPU, f16 or bf16 on a GPU.
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `seqlens_q`, `seqlens_k`: u32 `(b + 1,)`, cumulative: sequence `i` owns q rows
///   `seqlens_q[i]..seqlens_q[i + 1]` and k/v rows `seqlens_k[i]..seqlens_k[i + 1]`.
/// - `max_seqlen_q`, `max_seqlen_k`: at least the longest q / k sequence.
/// - `softmax_scale`, `causal`: as [`flash_attn`], per sequence (bottom-right: query `i` of a
///   sequence sees its keys `j <= i + len_k - len_q`).
///
/// Returns `(total_q, h, d)` in q's dtype, rows as in q. Shared rules:
/// [layouts and dtypes](crate#layouts-and-dtypes), [errors](crate#errors) (also for malformed
/// seqlens: not u32, decreasing, past the end of q/k, longer than the max).
///
/// # Example
///
/// ```
/// use flash_attn_rocm::candle::{Device, Tensor};
/// use flash_attn_rocm::{flash_attn, flash_attn_varlen};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
///
/// let dev = Device::Cpu;
/// let (h, d) = (4, 32);
/// // Two sequences: 3 and 5 queries, 4 and 6 keys (e.g. one cached key each).
/// let seqlens_q = Tensor::new(&[0u32, 3, 8], &dev)?;
/// let seqlens_k = Tensor::new(&[0u32, 4, 10], &dev)?;
/// let q = Tensor::randn(0f32, 1.0, (8, h, d), &dev)?;
/// let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// let scale = 1.0 / (d as f32).sqrt();
///
/// let out = flash_attn_varlen(&q, &k, &v, &seqlens_q, &seqlens_k, 5, 6, scale, true)?;
/// assert_eq!(out.dims(), &[8, h, d]);
///
/// // Sequence 1 on its own, in the batch layout, gives the same rows.
/// let q1 = q.narrow(0, 3, 5)?.unsqueeze(0)?;
/// let (k1, v1) = (k.narrow(0, 4, 6)?.unsqueeze(0)?, v.narrow(0, 4, 6)?.unsqueeze(0)?);
/// let alone = flash_attn(&q1, &k1, &v1, scale, true)?;
/// assert!(max_diff(&out.narrow(0, 3, 5)?, &alone.squeeze(0)?)? < 1e-5);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, None, causal_window(causal), None))
}

/// [`flash_attn_varlen`] with a local window instead of the causal flag.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`; `seqlens_q`, `seqlens_k`: u32
///   `(b + 1,)` cumulative; `max_seqlen_q`, `max_seqlen_k`; dtypes: as [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `window_size_left`, `window_size_right`: per sequence, as [`flash_attn_windowed`]; a size
///   above `max_seqlen_k` is unbounded.
///
/// Returns `(total_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn_varlen`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_varlen, flash_attn_varlen_windowed};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (h, d)) = (Device::Cpu, (4, 16));
/// // Two sequences of 5 queries and 5 keys each, packed back to back.
/// let seqlens = Tensor::new(&[0u32, 5, 10], &dev)?;
/// # let q = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
///
/// // (None, Some(0)) is the causal mask of each sequence.
/// let windowed = flash_attn_varlen_windowed(&q, &k, &v, &seqlens, &seqlens, 5, 5, 0.25, None, Some(0))?;
/// let causal = flash_attn_varlen(&q, &k, &v, &seqlens, &seqlens, 5, 5, 0.25, true)?;
/// assert!(max_diff(&windowed, &causal)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, None, window, None))
}

/// Variable-length attention over a paged K/V cache (vLLM-style), with a window and an optional
/// softcap.
///
/// - `q`: `(total_q, h, d)`, sequences packed as in [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `k`, `v`: the cache, `(num_blocks, page_block_size, h_k, d)`, `h_k` dividing `h`.
/// - `seqlens_q`, `seqlens_k`: u32 `(b + 1,)`, cumulative; `seqlens_k` counts each sequence's
///   keys (its pages come from the block table, not from these offsets).
/// - `block_table`: u32 or i32 `(b, max_blocks)`: key `j` of sequence `i` is at
///   `k[block_table[i, j / page_block_size], j % page_block_size]`. Entries past a sequence's
///   last page are not read.
/// - `mm_prefix_ranges`: `None`, or i32 `(b, max_ranges, 2)` of `[start, end)` key ranges
///   inside which the causal/window mask is lifted (queries in a range see all of it).
/// - `max_seqlen_q`, `max_seqlen_k`: at least the longest q / k sequence.
/// - `window_size_left`, `window_size_right`: as [`flash_attn_windowed`]; `(None, Some(0))`
///   is causal.
/// - `page_block_size`: k's dim 1. Any size on the CPU and with the Triton kernels; CK's paged
///   kernels take multiples of 128.
/// - `softcap`: `None`, or as [`flash_attn_alibi_windowed_softcap`].
///
/// Dtypes: f32, f16 or bf16 on the CPU, f16 or bf16 on a GPU. Returns `(total_q, h, d)` in q's
/// dtype. Besides the [shared errors](crate#errors), an `Err` when the block table is out of
/// range or has too few columns for a sequence, or `page_block_size` is not k's dim 1.
///
/// # Example
///
/// A decode step: one new query per sequence, attending to its cached keys, with pages of 16.
///
/// ```
/// use flash_attn_rocm::candle::{Device, IndexOp, Tensor};
/// use flash_attn_rocm::{flash_attn_varlen, flash_attn_varlen_paged_windowed};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
///
/// let dev = Device::Cpu;
/// let (h, h_k, d, page) = (4, 2, 32, 16); // GQA: 2 query heads per k/v head
/// // A cache of 4 pages. Sequence 0 has 20 keys, in pages 2 then 0; sequence 1 has 12, in page 3.
/// let k_cache = Tensor::randn(0f32, 1.0, (4, page, h_k, d), &dev)?;
/// let v_cache = Tensor::randn(0f32, 1.0, (4, page, h_k, d), &dev)?;
/// let block_table = Tensor::new(&[[2u32, 0], [3, 0]], &dev)?; // (b, max_blocks)
/// let seqlens_k = Tensor::new(&[0u32, 20, 32], &dev)?;
/// let seqlens_q = Tensor::new(&[0u32, 1, 2], &dev)?;
/// let q = Tensor::randn(0f32, 1.0, (2, h, d), &dev)?;
/// let scale = 1.0 / (d as f32).sqrt();
///
/// let out = flash_attn_varlen_paged_windowed(
///     &q, &k_cache, &v_cache, &seqlens_q, &seqlens_k, &block_table, None,
///     1, 20, scale, None, Some(0), page, None,
/// )?;
/// assert_eq!(out.dims(), &[2, h, d]);
///
/// // The same as varlen attention over the keys gathered out of the pages.
/// let gather = |c: &Tensor| Tensor::cat(&[c.i(2)?, c.i((0, ..4))?, c.i((3, ..12))?], 0);
/// let (k, v) = (gather(&k_cache)?, gather(&v_cache)?);
/// let expected = flash_attn_varlen(&q, &k, &v, &seqlens_q, &seqlens_k, 1, 20, scale, true)?;
/// assert!(max_diff(&out, &expected)? < 1e-5);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<Tensor> {
    let op = paged_op(
        VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k },
        block_table,
        mm_prefix_ranges,
        page_block_size,
        softmax_scale,
        (window_size_left, window_size_right),
        softcap,
    );
    q.apply_op3(k, v, op)
}

fn paged_op(
    lens: VarLen<'_>,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    page_block_size: usize,
    softmax_scale: f32,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> FlashAttnVarLen {
    FlashAttnVarLen {
        block_table: Some(block_table.clone()),
        mm_prefix_ranges: mm_prefix_ranges.cloned(),
        page_block_size: Some(page_block_size),
        ..varlen_op(lens, softmax_scale, None, window, softcap)
    }
}

/// [`flash_attn_varlen`] with an ALiBi bias.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`; `seqlens_q`, `seqlens_k`: u32
///   `(b + 1,)` cumulative; `max_seqlen_q`, `max_seqlen_k`; dtypes: as [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: f32 `(h,)`, as [`flash_attn_alibi`] (positions counted per sequence).
///
/// Returns `(total_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn_varlen`] and
/// [`flash_attn_alibi`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_alibi, flash_attn_varlen_alibi};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (h, d)) = (Device::Cpu, (4, 16));
/// // Two sequences of 5 queries and 5 keys each, packed back to back.
/// let seqlens = Tensor::new(&[0u32, 5, 10], &dev)?;
/// # let q = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?;
///
/// let out = flash_attn_varlen_alibi(&q, &k, &v, &slopes, &seqlens, &seqlens, 5, 5, 0.25, true)?;
///
/// // Positions count per sequence: the same as a batch of two sequences of 5.
/// let batch = |t: &Tensor| t.reshape((2, 5, h, d));
/// let expected = flash_attn_alibi(&batch(&q)?, &batch(&k)?, &batch(&v)?, &slopes, 0.25, true)?;
/// assert!(max_diff(&batch(&out)?, &expected)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let op = varlen_op(lens, softmax_scale, Some(alibi_slopes), causal_window(causal), None);
    q.apply_op3(k, v, op)
}

/// [`flash_attn_varlen`] with an ALiBi bias and a local window.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`; `seqlens_q`, `seqlens_k`: u32
///   `(b + 1,)` cumulative; `max_seqlen_q`, `max_seqlen_k`; dtypes: as [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: f32 `(h,)`; `window_size_left`, `window_size_right`: as
///   [`flash_attn_windowed`].
///
/// Returns `(total_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn_varlen_alibi`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_varlen_alibi, flash_attn_varlen_alibi_windowed};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (h, d)) = (Device::Cpu, (4, 16));
/// // Two sequences of 5 queries and 5 keys each, packed back to back.
/// let seqlens = Tensor::new(&[0u32, 5, 10], &dev)?;
/// # let q = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &dev)?;
///
/// // A causal sliding window of 3 keys per query, within each sequence.
/// let out = flash_attn_varlen_alibi_windowed(&q, &k, &v, &slopes, &seqlens, &seqlens, 5, 5, 0.25, Some(2), Some(0))?;
/// assert_eq!(out.dims(), &[10, h, d]);
///
/// // (None, Some(0)) is causal.
/// let windowed = flash_attn_varlen_alibi_windowed(&q, &k, &v, &slopes, &seqlens, &seqlens, 5, 5, 0.25, None, Some(0))?;
/// let causal = flash_attn_varlen_alibi(&q, &k, &v, &slopes, &seqlens, &seqlens, 5, 5, 0.25, true)?;
/// assert!(max_diff(&windowed, &causal)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, Some(alibi_slopes), window, None))
}

/// [`flash_attn_varlen`] with optional ALiBi, a local window and a softcap.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`; `seqlens_q`, `seqlens_k`: u32
///   `(b + 1,)` cumulative; `max_seqlen_q`, `max_seqlen_k`; dtypes: as [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: `None` or f32 `(h,)`; `window_size_left`, `window_size_right`: as
///   [`flash_attn_windowed`]; `softcap`: finite and > 0, as
///   [`flash_attn_alibi_windowed_softcap`].
///
/// Returns `(total_q, h, d)` in q's dtype; [errors](crate#errors) as [`flash_attn_varlen`],
/// plus bad slopes or softcap.
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_alibi_windowed_softcap, flash_attn_varlen_alibi_windowed_softcap};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (h, d)) = (Device::Cpu, (4, 16));
/// // Two sequences of 5 queries and 5 keys each, packed back to back.
/// let seqlens = Tensor::new(&[0u32, 5, 10], &dev)?;
/// # let q = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
///
/// let out = flash_attn_varlen_alibi_windowed_softcap(&q, &k, &v, None, &seqlens, &seqlens, 5, 5, 0.25, None, Some(0), 30.0)?;
///
/// // The same as a batch of two sequences of 5.
/// let batch = |t: &Tensor| t.reshape((2, 5, h, d));
/// let expected = flash_attn_alibi_windowed_softcap(&batch(&q)?, &batch(&k)?, &batch(&v)?, None, 0.25, None, Some(0), 30.0)?;
/// assert!(max_diff(&batch(&out)?, &expected)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    q.apply_op3(k, v, varlen_op(lens, softmax_scale, alibi_slopes, window, Some(softcap)))
}

/// [`flash_attn`] that also returns the log-sum-exp of each query row's logits, so that
/// partial results over disjoint key sets can be merged (split-KV, ring attention).
///
/// - `q`: `(b, s_q, h, d)`; `k`, `v`: `(b, s_k, h_k, d)`; `softmax_scale`, `causal` and dtypes
///   as [`flash_attn`].
///   Positions before heads: a `(b, h, s, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
///
/// Returns `(out, lse)`: `out` is `(b, s_q, h, d)` in q's dtype; `lse` is f32 `(b, h, s_q)`,
/// `lse[b, h, i] = ln Σ_j exp(logit[i, j])` over the keys row `i` sees, with the logits after
/// scale, softcap and ALiBi; `-inf` for a row that sees no key (its output is 0).
/// [Errors](crate#errors) as [`flash_attn`]. For other options use
/// [`FlashAttn::forward_with_lse`]; for varlen, [`flash_attn_varlen_with_lse`].
///
/// # Example
///
/// Attention over all keys equals the LSE-weighted merge of attention over two halves.
///
/// ```
/// use flash_attn_rocm::candle::{Device, Tensor};
/// use flash_attn_rocm::flash_attn_with_lse;
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
///
/// let dev = Device::Cpu;
/// let (b, s_q, s_k, h, d) = (1, 4, 16, 2, 32);
/// let q = Tensor::randn(0f32, 1.0, (b, s_q, h, d), &dev)?;
/// let k = Tensor::randn(0f32, 1.0, (b, s_k, h, d), &dev)?;
/// let v = Tensor::randn(0f32, 1.0, (b, s_k, h, d), &dev)?;
/// let scale = 1.0 / (d as f32).sqrt();
///
/// let (out, lse) = flash_attn_with_lse(&q, &k, &v, scale, false)?;
/// assert_eq!(lse.dims(), &[b, h, s_q]);
///
/// // Each half of the keys (narrowed views, no copy).
/// let half = |t: &Tensor, i: usize| t.narrow(1, i * s_k / 2, s_k / 2);
/// let (out0, lse0) = flash_attn_with_lse(&q, &half(&k, 0)?, &half(&v, 0)?, scale, false)?;
/// let (out1, lse1) = flash_attn_with_lse(&q, &half(&k, 1)?, &half(&v, 1)?, scale, false)?;
///
/// // lse = ln(e^lse0 + e^lse1); out = Σ e^(lse_part - lse) · out_part.
/// assert!(max_diff(&(lse0.exp()? + lse1.exp()?)?.log()?, &lse)? < 1e-5);
/// let weight = |l: &Tensor| (l - &lse)?.exp()?.transpose(1, 2)?.unsqueeze(3); // (b, s_q, h, 1)
/// let merged = (out0.broadcast_mul(&weight(&lse0)?)? + out1.broadcast_mul(&weight(&lse1)?)?)?;
/// assert!(max_diff(&merged, &out)? < 1e-5);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn flash_attn_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<(Tensor, Tensor)> {
    batch_op(softmax_scale, None, causal_window(causal), None).forward_with_lse(q, k, v)
}

/// [`flash_attn_varlen_alibi_windowed_softcap`] with an optional softcap, also returning the
/// log-sum-exp.
///
/// - `q`: `(total_q, h, d)`; `k`, `v`: `(total_k, h_k, d)`; `seqlens_q`, `seqlens_k`: u32
///   `(b + 1,)` cumulative; `max_seqlen_q`, `max_seqlen_k`; dtypes: as [`flash_attn_varlen`].
///   Rows before heads: an `(h, total_q, d)` tensor whose dims fit runs without an `Err` and
///   gives a wrong result ([order of dims](crate#layouts-and-dtypes)).
/// - `alibi_slopes`: `None` or f32 `(h,)`; `window_size_left`, `window_size_right`: as
///   [`flash_attn_windowed`]; `softcap`: `None`, or finite and > 0.
///
/// Returns `(out, lse)`: `out` is `(total_q, h, d)` in q's dtype; `lse` is f32 `(h, total_q)`,
/// defined as in [`flash_attn_with_lse`]. [Errors](crate#errors) as
/// [`flash_attn_varlen_alibi_windowed_softcap`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::{flash_attn_varlen, flash_attn_varlen_with_lse};
/// # use flash_attn_rocm::candle::{Device, Tensor};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
/// # let (dev, (h, d)) = (Device::Cpu, (4, 16));
/// // Two sequences of 5 queries and 5 keys each, packed back to back.
/// let seqlens = Tensor::new(&[0u32, 5, 10], &dev)?;
/// # let q = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let k = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
/// # let v = Tensor::randn(0f32, 1.0, (10, h, d), &dev)?;
///
/// let (out, lse) = flash_attn_varlen_with_lse(&q, &k, &v, None, &seqlens, &seqlens, 5, 5, 0.25, None, Some(0), None)?;
/// assert_eq!(lse.dims(), &[h, 10]); // (h, total_q)
/// let causal = flash_attn_varlen(&q, &k, &v, &seqlens, &seqlens, 5, 5, 0.25, true)?;
/// assert!(max_diff(&out, &causal)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: Option<f32>,
) -> Result<(Tensor, Tensor)> {
    let lens = VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k };
    let window = (window_size_left, window_size_right);
    let op = varlen_op(lens, softmax_scale, alibi_slopes, window, softcap);
    forward_with_lse(&op.request(), q, k, v)
}

/// [`flash_attn_varlen_paged_windowed`] that also returns the log-sum-exp.
///
/// Arguments, shapes and dtypes as [`flash_attn_varlen_paged_windowed`]: q `(total_q, h, d)`,
/// k/v `(num_blocks, page_block_size, h_k, d)`, u32 cumulative `seqlens_q`/`seqlens_k`
/// `(b + 1,)`, u32 or i32 `block_table` `(b, max_blocks)`. Rows before heads: an
/// `(h, total_q, d)` tensor whose dims fit runs without an `Err` and gives a wrong result
/// ([order of dims](crate#layouts-and-dtypes)).
///
/// Returns `(out, lse)`: `out` is `(total_q, h, d)` in q's dtype; `lse` is f32 `(h, total_q)`,
/// defined as in [`flash_attn_with_lse`]. [Errors](crate#errors) as
/// [`flash_attn_varlen_paged_windowed`].
///
/// # Example
///
/// ```
/// use flash_attn_rocm::candle::{Device, Tensor};
/// use flash_attn_rocm::{flash_attn_varlen_paged_windowed_with_lse, flash_attn_varlen_with_lse};
/// # fn max_diff(a: &Tensor, b: &Tensor) -> flash_attn_rocm::candle::Result<f32> {
/// #     (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
/// # }
///
/// let dev = Device::Cpu;
/// let (h, d, page) = (2, 32, 16);
/// // One sequence of 16 cached keys, all in page 1 of a 2-page cache; one new query.
/// let k_cache = Tensor::randn(0f32, 1.0, (2, page, h, d), &dev)?;
/// let v_cache = Tensor::randn(0f32, 1.0, (2, page, h, d), &dev)?;
/// let block_table = Tensor::new(&[[1u32]], &dev)?;
/// let (seqlens_q, seqlens_k) = (Tensor::new(&[0u32, 1], &dev)?, Tensor::new(&[0u32, 16], &dev)?);
/// let q = Tensor::randn(0f32, 1.0, (1, h, d), &dev)?;
///
/// let (out, lse) = flash_attn_varlen_paged_windowed_with_lse(
///     &q, &k_cache, &v_cache, &seqlens_q, &seqlens_k, &block_table, None,
///     1, 16, 0.125, None, Some(0), page, None,
/// )?;
/// assert_eq!(lse.dims(), &[h, 1]);
///
/// // The same as varlen attention over page 1 itself.
/// let (k, v) = (k_cache.get(1)?, v_cache.get(1)?);
/// let (expected, expected_lse) =
///     flash_attn_varlen_with_lse(&q, &k, &v, None, &seqlens_q, &seqlens_k, 1, 16, 0.125, None, Some(0), None)?;
/// assert!(max_diff(&out, &expected)? < 1e-6 && max_diff(&lse, &expected_lse)? < 1e-6);
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed_with_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<(Tensor, Tensor)> {
    let op = paged_op(
        VarLen { seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k },
        block_table,
        mm_prefix_ranges,
        page_block_size,
        softmax_scale,
        (window_size_left, window_size_right),
        softcap,
    );
    forward_with_lse(&op.request(), q, k, v)
}

/// Reports the out-of-range side-tensor values (cumulative seqlens, block-table ids) that this
/// thread's earlier GPU calls found, on any device and stream, and clears them: `Ok` when there
/// were none, else an `Err` naming the tensors. Calls of other threads are never reported here.
///
/// A GPU call leaves its seqlens and block table on the device, where the kernels check them
/// (no host round trip per call): a bad value is replaced (its sequence computed as empty, its
/// output rows zero) and recorded in the call's fault word, which the thread that queued it reads.
/// That thread's next call on the same stream fails with the `Err` (and is not run), once per
/// bad call however long its kernels run; a
/// thread that made its last call, or that wants to know before its next one, synchronizes the
/// device and calls this. See the crate's [errors](crate#errors). CPU calls check their side
/// tensors on the host and fail themselves, so on the CPU (and in a build without GPU support)
/// this is always `Ok`.
///
/// # Example: a serving loop
///
/// ```
/// use flash_attn_rocm::candle::{DType, Device, Tensor};
///
/// let dev = Device::Cpu; // a ROCm or CUDA device in a GPU build
/// let (h, d, page) = (4, 64, 16);
/// let k_cache = Tensor::zeros((8, page, h, d), DType::F16, &dev)?;
/// let v_cache = k_cache.clone();
/// for step in 0..3 {
///     let q = Tensor::zeros((1, h, d), DType::F16, &dev)?;
///     let seqlens_q = Tensor::new(&[0u32, 1], &dev)?;
///     let seqlens_k = Tensor::new(&[0u32, 20], &dev)?;
///     let table = Tensor::new(&[[3u32, 5]], &dev)?;
///     let out = flash_attn_rocm::flash_attn_varlen_paged_windowed(
///         &q, &k_cache, &v_cache, &seqlens_q, &seqlens_k, &table, None, 1, 20, 0.125, None, Some(0), page, None,
///     )?;
///     // Before answering the request: the device finished this step's work (a copy to the host
///     // waits for it), then this thread's faults say whether its inputs were in range.
///     let _answer = out.to_dtype(DType::F32)?.to_vec3::<f32>()?;
///     flash_attn_rocm::take_gpu_faults()?;
///     # let _ = step;
/// }
/// # Ok::<(), flash_attn_rocm::candle::Error>(())
/// ```
pub fn take_gpu_faults() -> Result<()> {
    #[cfg(feature = "triton")]
    {
        let bits = crate::gpu::Driver::opened().fold(0, |bits, driver| bits | driver.take_thread_faults());
        crate::params::faults::faults_to_result(bits)
    }
    #[cfg(not(feature = "triton"))]
    Ok(())
}
