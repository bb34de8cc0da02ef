//! Which calls the 32-bit buffer-addressing kernels may serve.
//!
//! On AMD targets `kernels/aot.py` compiles, beside some `attn_fwd` variants, a `_b32` twin whose
//! tensor arguments are marked `tt.pointer_range = 32`: triton then forms every offset from a
//! tensor's base pointer in 32 bits and loads and stores through `buffer_load`/`buffer_store`
//! with a buffer resource of `num_records` [`MAX_SPAN`] bytes (masked lanes get the offset
//! `0x8000_0000`, past it). Such a kernel is correct only when every byte it reads or writes lies
//! within [`MAX_SPAN`] bytes of the base pointer it is given: this module measures that from the
//! layouts of the call, and the launcher takes the 64-bit variant otherwise.
use crate::device::DeviceBuffers;
use crate::params::{AttnCall, Mode};

/// The bytes a `_b32` kernel may reach from a base pointer: triton 3.6's buffer resources hold
/// `num_records = 0x7FFF_FFFE`, and an access passing it reads 0 (writes nothing).
pub const MAX_SPAN: u64 = 0x7FFF_FFFE;

/// Bytes from a view's first element to the end of its last one: `(sum over dims of (size - 1)
/// x stride + 1) x elem`, with `sizes` and `strides` in elements (0 when a dim is empty).
/// Strides are never negative here (candle's layouts, the kernels' side tensors), so the first
/// element is the lowest address. Saturates instead of overflowing.
pub fn span_bytes(sizes: &[usize], strides: &[usize], elem: usize) -> u64 {
    if sizes.contains(&0) {
        return 0;
    }
    let last = sizes
        .iter()
        .zip(strides)
        .fold(0u128, |acc, (&size, &stride)| acc.saturating_add((size as u128 - 1).saturating_mul(stride as u128)));
    u64::try_from(last.saturating_add(1).saturating_mul(elem as u128)).unwrap_or(u64::MAX)
}

/// Every tensor `attn_fwd` addresses for `call` with `num_splits` key splits on `buffers`
/// (only the side tensors' row strides are read from it), with the bytes it may reach from the
/// base pointer the kernel gets: the part of each tensor a valid lane can touch (masked lanes
/// never access memory), as `fwd_args` passes it.
pub fn fwd_spans(call: &AttnCall, num_splits: usize, buffers: &DeviceBuffers) -> Vec<(&'static str, u64)> {
    let elem = call.dtype.size_in_bytes();
    let (b, h, h_k, d) = (call.batch, call.num_heads, call.num_heads_k, call.head_dim);
    let (q, k, v) = (&call.q, &call.k, &call.v);
    let q_span = match call.mode {
        Mode::Batch => span_bytes(&[b, call.max_seqlen_q, h, d], &[q.batch_stride, q.row_stride, q.head_stride, 1], elem),
        _ => span_bytes(&[call.total_q, h, d], &[q.row_stride, q.head_stride, 1], elem),
    };
    let paging = call.seqs.paging.as_ref();
    let kv_span = |view: &crate::params::TensorView| match (call.mode, paging) {
        (_, Some(p)) => span_bytes(
            &[p.num_blocks, p.page_block_size, h_k, d],
            &[view.batch_stride, view.row_stride, view.head_stride, 1],
            elem,
        ),
        (Mode::Batch, None) => span_bytes(
            &[b, call.max_seqlen_k, h_k, d],
            &[view.batch_stride, view.row_stride, view.head_stride, 1],
            elem,
        ),
        // Varlen: the rows the kernel lets a sequence reach (fwd_args' kv_rows).
        (_, None) => {
            let rows = match call.seqs.unread() {
                Some(unread) => unread.rows_k,
                None => call.seqs.iter().map(|s| s.k_start + s.k_len).max().unwrap_or(0),
            };
            span_bytes(&[rows, h_k, d], &[view.row_stride, view.head_stride, 1], elem)
        }
    };
    let rows_h = call.total_q * h;
    let mut spans = vec![
        ("q", q_span),
        ("k", kv_span(k)),
        ("v", kv_span(v)),
        ("out", span_bytes(&[rows_h * d], &[1], elem)),
        ("lse", span_bytes(&[rows_h], &[1], 4)),
    ];
    if num_splits > 1 {
        spans.push(("o_acc", span_bytes(&[num_splits, rows_h * d], &[rows_h * d, 1], 4)));
        spans.push(("lse_acc", span_bytes(&[num_splits, rows_h], &[rows_h, 1], 4)));
    }
    if call.mode != Mode::Batch {
        spans.push(("seqlens", span_bytes(&[b + 1], &[1], 4)));
    }
    if let Some(p) = paging {
        spans.push(("block_table", span_bytes(&[b, p.max_blocks], &[buffers.block_table_row_stride, 1], 4)));
    }
    if call.alibi.is_some() {
        spans.push(("alibi_slopes", span_bytes(&[h], &[1], 4)));
    }
    if let Some(m) = &call.mm_prefix {
        spans.push(("mm_prefix_ranges", span_bytes(&[b, 2 * m.max_ranges], &[buffers.mm_prefix_row_stride, 1], 4)));
    }
    spans
}

/// Whether a `_b32` kernel may serve `call` with `num_splits` key splits on `buffers`: every
/// tensor of [`fwd_spans`] within [`MAX_SPAN`] bytes of its base pointer.
pub fn fits_32bit(call: &AttnCall, num_splits: usize, buffers: &DeviceBuffers) -> bool {
    fwd_spans(call, num_splits, buffers).iter().all(|&(_, bytes)| bytes <= MAX_SPAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Request, VarLenRequest};
    use crate::device::DeviceLimits;
    use crate::triton::{select, Family, KernelDtype, KernelImage, Kernels, Tile};
    use candle::{DType, Device, Layout, Tensor};

    const GIB2: usize = 1 << 31;
    /// An RX 7900 XTX's (gfx1100) limits: 64 KiB of LDS per workgroup.
    const RDNA3: DeviceLimits =
        DeviceLimits { max_shared_per_block: 64 * 1024, max_threads_per_block: 1024, host_native_atomics: true };

    fn req() -> Request<'static> {
        Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None }
    }

    /// A batch-mode f16 call on layouts (nothing allocated).
    fn batch_call(q: &Layout, kv: &Layout) -> AttnCall {
        AttnCall::new(&req(), [DType::F16; 3], q, kv, kv).unwrap()
    }

    fn fits(call: &AttnCall) -> bool {
        fits_32bit(call, 1, &DeviceBuffers::default())
    }

    fn span_of(call: &AttnCall, splits: usize, buffers: &DeviceBuffers, name: &str) -> u64 {
        fwd_spans(call, splits, buffers).into_iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn span_of_a_view_is_its_last_element_end() {
        assert_eq!(span_bytes(&[2, 3, 4], &[12, 4, 1], 2), 48);
        // Strided: (1 x 100 + 2 x 10 + 3 + 1) elements.
        assert_eq!(span_bytes(&[2, 3, 4], &[100, 10, 1], 4), 124 * 4);
        // Broadcast (stride 0) dims add nothing; an empty view spans nothing.
        assert_eq!(span_bytes(&[5, 8], &[0, 1], 2), 16);
        assert_eq!(span_bytes(&[0, 8], &[8, 1], 2), 0);
        // No overflow on absurd layouts.
        assert_eq!(span_bytes(&[usize::MAX, usize::MAX], &[usize::MAX, 1], 8), u64::MAX);
    }

    /// Both sides of the limit: a tensor reaching exactly `MAX_SPAN` (2 GiB - 2) bytes from its
    /// base fits, 2 GiB does not (k/v: two batch entries `bs` elements apart, 8 elements each).
    #[test]
    fn the_limit_is_the_buffer_resource_size() {
        let q = Layout::contiguous((2, 1, 1, 8));
        let kv = |bs: usize| Layout::new((2, 1, 1, 8).into(), vec![bs, 8, 8, 1], 0);
        let at_limit = batch_call(&q, &kv(MAX_SPAN as usize / 2 - 8));
        assert_eq!(span_of(&at_limit, 1, &DeviceBuffers::default(), "k"), MAX_SPAN);
        assert!(fits(&at_limit));
        let two_gib = batch_call(&q, &kv(GIB2 / 2 - 8));
        assert_eq!(span_of(&two_gib, 1, &DeviceBuffers::default(), "v"), GIB2 as u64);
        assert!(!fits(&two_gib));
        // Dense f16 k/v: 2 GiB - 2 KiB fits, 2 GiB does not.
        let dense = |s: usize| batch_call(&Layout::contiguous((1, 1, 8, 128)), &Layout::contiguous((1, s, 8, 128)));
        assert!(fits(&dense((1 << 20) - 1)));
        assert!(!fits(&dense(1 << 20)));
    }

    /// The span is measured from the view's first element (the kernel's base pointer): a small
    /// view far into a large storage fits; a strided view reaches further than a dense one.
    #[test]
    fn views_count_from_their_start_and_by_their_strides() {
        let kv = Layout::contiguous((1, 16, 8, 128));
        let far = Layout::contiguous_with_offset((1, 16, 8, 128), 3 * GIB2);
        assert!(fits(&batch_call(&far, &far)));
        // q of a packed (b, s, 3, h, d) qkv: 3x the dense span.
        let (s, h, d) = (1 << 19, 8, 128);
        let dense = Layout::contiguous((1, s, h, d));
        let packed = Layout::new((1, s, h, d).into(), vec![s * 3 * h * d, 3 * h * d, d, 1], 0);
        assert!(fits(&batch_call(&dense, &kv)));
        let call = batch_call(&packed, &kv);
        assert_eq!(span_of(&call, 1, &DeviceBuffers::default(), "q"), (((s - 1) * 3 * h * d + h * d) * 2) as u64);
        assert!(!fits(&call));
    }

    /// Split calls add the f32 accumulators `(splits, rows, h[, d])`.
    #[test]
    fn split_accumulators_count() {
        // 2^24 output elements: o_acc spans splits x 2^26 bytes.
        let q = Layout::contiguous((1, 1 << 13, 16, 128));
        let call = batch_call(&q, &Layout::contiguous((1, 64, 16, 128)));
        let buffers = DeviceBuffers::default();
        assert!(fits_32bit(&call, 1, &buffers));
        assert_eq!(span_of(&call, 31, &buffers, "o_acc"), 31 << 26);
        assert!(fits_32bit(&call, 31, &buffers));
        assert_eq!(span_of(&call, 32, &buffers, "o_acc"), GIB2 as u64);
        assert!(!fits_32bit(&call, 32, &buffers));
        assert!(fwd_spans(&call, 1, &buffers).iter().all(|(n, _)| !n.ends_with("acc")));
    }

    /// A paged call: the whole block pool counts, whatever the table points at; the block
    /// table's span comes from its row stride.
    #[test]
    fn paged_calls_count_the_whole_pool_and_the_table() {
        let dev = &Device::Cpu;
        let (b, h_k, d, page, max_blocks) = (2, 8, 128, 16, 4);
        let seqlens = Tensor::zeros(b + 1, DType::U32, dev).unwrap();
        let table = Tensor::zeros((b, max_blocks), DType::U32, dev).unwrap();
        let q = Layout::contiguous((b, 32, d));
        let call = |num_blocks: usize| {
            let varlen = VarLenRequest {
                seqlens_q: &seqlens,
                seqlens_k: &seqlens,
                max_seqlen_q: 1,
                max_seqlen_k: page * max_blocks,
                block_table: Some(&table),
                page_block_size: Some(page),
                mm_prefix_ranges: None,
            };
            let kv = Layout::contiguous((num_blocks, page, h_k, d));
            AttnCall::on_device(&Request { varlen: Some(varlen), ..req() }, [DType::F16; 3], &q, &kv, &kv).unwrap()
        };
        let buffers = DeviceBuffers { block_table_row_stride: max_blocks, ..DeviceBuffers::default() };
        // (2^16 - 1) blocks of 16 x 8 x 128 f16: 2 GiB - 32 KiB; 2^16 blocks: 2 GiB.
        assert!(fits_32bit(&call((1 << 16) - 1), 1, &buffers));
        assert_eq!(span_of(&call(1 << 16), 1, &buffers, "k"), GIB2 as u64);
        assert!(!fits_32bit(&call(1 << 16), 1, &buffers));
        let small = call(64);
        assert_eq!(span_of(&small, 1, &buffers, "block_table"), ((b - 1) * max_blocks + max_blocks) as u64 * 4);
        let wide = DeviceBuffers { block_table_row_stride: GIB2 / 4, ..buffers };
        assert!(!fits_32bit(&small, 1, &wide));
    }

    fn image(ptr32: bool, block_d: u32) -> KernelImage {
        KernelImage {
            target: "gfx1100",
            variant: "test",
            kernel: "k",
            family: Family::Fwd,
            tile: Tile::Prefill,
            dtype: KernelDtype::F16,
            block_d,
            even_d: true,
            paged: false,
            extras: false,
            ptr32,
            block_m: 128,
            block_n: 64,
            threads: 256,
            shared: 0,
            scratch_args: 2,
            image: &[],
        }
    }

    /// select() never returns a `_b32` image as the 64-bit one, finds its twin where built,
    /// and the launch takes the twin only for calls that fit it.
    #[test]
    fn the_twin_is_launched_only_for_calls_that_fit() {
        let merge = KernelImage { family: Family::Merge, tile: Tile::Merge, even_d: false, ..image(false, 128) };
        // The twin listed first: the 64-bit image must still be the one chosen as `fwd`.
        let images: &'static [KernelImage] =
            Box::leak(vec![image(true, 128), image(false, 128), image(false, 64), merge].into_boxed_slice());
        let small = batch_call(&Layout::contiguous((1, 256, 8, 128)), &Layout::contiguous((1, 256, 8, 128)));
        let kernels: Kernels = select(&small, "gfx1100", RDNA3, images).unwrap();
        assert!(!kernels.fwd.ptr32 && kernels.fwd_b32.is_some_and(|t| t.ptr32 && t.block_d == 128));
        let buffers = DeviceBuffers::default();
        assert!(kernels.fwd_for(&small, 1, &buffers).ptr32);
        let big = batch_call(&Layout::contiguous((1, 1 << 20, 8, 128)), &Layout::contiguous((1, 256, 8, 128)));
        assert!(!select(&big, "gfx1100", RDNA3, images).unwrap().fwd_for(&big, 1, &buffers).ptr32);
        // No twin built (d = 64 here): the 64-bit image serves every call.
        let d64 = batch_call(&Layout::contiguous((1, 256, 8, 64)), &Layout::contiguous((1, 256, 8, 64)));
        let kernels = select(&d64, "gfx1100", RDNA3, images).unwrap();
        assert!(kernels.fwd_b32.is_none() && !kernels.fwd_for(&d64, 1, &buffers).ptr32);
    }
}
