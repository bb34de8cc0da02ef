//! The TMA kernel's launch (kernels/attention_tma.py, sm_90): which calls it serves, the 2-D
//! views of q, k and v its descriptors describe, and its arguments. Pure Rust; the descriptors
//! themselves are encoded by the CUDA driver (`gpu::Driver::encode_tensor_map`, with the `triton`
//! feature).

use super::args::{FwdArgs, TensorDescArg, TmaFwdArgs};
use super::marshal::ELEM;
use super::registry::{KernelDtype, KernelImage, Tile};
use super::select::needs_extras;
use crate::device::{MapElement, TensorMap, TiledView};
use crate::params::{AttnCall, Mode, TensorView};
use candle::Result;

/// Keys up to which a call of head dim `head_dim` takes the TMA kernel's prefill class, with or
/// without a diagonal (causal): the longest prompts at which it beat the `tl` kernels on an H200
/// (f16, TFLOP/s, TMA against tl; kernels/aot.py's TMA_TILES has more): d = 64 8 x 2048 non-causal 451
/// against 411 (4 x 4096: 426 against 433), causal 4 x 4096 399 against 378 (2 x 8192: 400 against
/// 407); d = 128 8 x 2048 non-causal 532 against 487 (4 x 4096: 508 against 514), causal 4 x 4096
/// 460 against 440. At d = 256 its 128-row tile takes every length (docs/bench-gpu-h200.md). The
/// warp-specialized class takes the longer prompts at every head dim ([`ws_keys`]).
///
/// At the split head dims ([`head_parts`]: 80, 96, 160) the prefill class takes every length (the
/// warp-specialized class the long ones at 96 and 160 first, [`ws_keys`]): against cuDNN (JIT on
/// an H100, f16, 16384 tokens per call, best of 3 alternating turns) d = 80 1.01-1.10x, d = 96
/// 0.87-0.98x, d = 160 0.89-0.97x from 16 x 1024 to 4 x 4096, where the `tl` kernels' split tiles
/// ran 0.84-0.91x at d = 80 and 96 (kernels/aot.py's TMA_TILES).
pub fn max_keys(head_dim: usize, diagonal: bool) -> usize {
    match (head_dim, diagonal) {
        (80 | 96 | 160 | 256, _) => usize::MAX,
        (_, false) => 2048,
        (_, true) => 4096,
    }
}

/// Keys up to which a call of head dim `head_dim` takes the TMA kernel's short class (64 x 32
/// tiles, kernels/aot.py's TMA_TILES), where built: more programs per SM, each with less to
/// start, for prompts of a few key tiles; at d = 256 for causal calls, whose diagonal leaves a
/// 128-row block's work uneven, up to 512 keys (at 1024 the warp-specialized class was faster on
/// an H200: 16 x 1024, 8 heads, f16 / bf16, TFLOP/s, median of 5 alternating turns, 405 / 410
/// against 340 / 354).
pub fn short_keys(head_dim: usize, diagonal: bool) -> usize {
    match (head_dim, diagonal) {
        (256, true) => 512,
        (256, false) => 0,
        // Below the walking class ([`walk_keys`]).
        (128, false) => walk_keys(128, false).start - 1,
        _ => 256,
    }
}

/// Keys from which a call of head dim `head_dim` takes the warp-specialized class
/// (kernels/attention_ws.py, blocks of 128 rows, 192 at d = 64, each K/V tile loaded once for two
/// or three consumer warpgroups), where built: prompts of many key tiles per block, where it beat
/// the prefill class on an H200 (`bench_gpu`, TFLOP/s, median of two turns, f16 / bf16, against the prefill class;
/// docs/bench-gpu-h200.md): d = 128 32 x 512 non-causal 400 / 402 against 370 / 400 (the
/// walking class now takes that, and causal calls up to 2048 keys: [`walk_keys`]), causal 8 x
/// 2048 444 / 472 against 405 / 454 (16 x 1024 causal 341 / 353 against 358 / 377: slower), 1 x
/// 16384 605 / 631 against 499 / 507 (where the `tl` kernels ran before); d = 256 32 x 512 465 /
/// 482 against 439 / 439 (64 x 256: level). At d = 64 only past the prefill class, where the `tl`
/// kernels ran: with 128-row blocks (128x128 tiles, 3 stages) below the prefill class up to 2048
/// keys in JIT runs (kernels/aot.py), above the `tl` kernels past it (32 heads: 4 x 4096 404 / 418
/// against 400 / 408, 2 x 8192 442 / 444 against 406 / 415, causal 2 x 8192 410 / 411 against 386
/// / 392); its 192-row blocks are faster still (kernels/aot.py's TMA_TILES).
///
/// At the split head dims (`attn_fwd_tma_ws_split`) where it beat the prefill class in a JIT run
/// on an H100 (f16 / bf16, TFLOP/s, best of 3 alternating turns, against the prefill class;
/// kernels/aot.py's TMA_TILES has the rest): d = 160 from 1024 keys (16 x 1024 x 12 heads 504 /
/// 515 against 455 / 469, causal 378 / 372 against 366 / 369; 4 x 4096 608 / 625 against 466 /
/// 483, causal 530 / 553 against 436 / 450); d = 96 from 4096 keys without a diagonal (4 x 4096 x
/// 21 heads 486 / 497 against 421 / 442; 16 x 1024 378 / 390 against 422 / 434; causal 4 x 4096
/// 416 / 417 against 418 / 438). At d = 80 it was slower on every row (0.69-1.00x).
pub fn ws_keys(head_dim: usize, diagonal: bool) -> usize {
    match (head_dim, diagonal) {
        (160, _) => 1024,
        (96, false) => 4096,
        (128 | 256, false) => 512,
        (128, true) => 2048,
        // Where its short class stops.
        (256, true) => short_keys(256, true) + 1,
        // Where its prefill class stops.
        (64, diagonal) => max_keys(64, diagonal) + 1,
        _ => usize::MAX,
    }
}

/// Keys for which a call of head dim `head_dim` takes the walking class (kernels/attention_ws.py
/// `attn_fwd_tma_walk`: the warp-specialized kernel with one program per SM walking the query
/// blocks), where built: prompts of a few key tiles per 128-row block at d = 128, whose programs'
/// start and end it overlaps with the neighbouring blocks' work. On an H200 (`bench_gpu`, 16
/// heads, f16 / bf16, against what ran them before in the same run, three runs;
/// docs/bench-gpu-h200.md): 64 x 256 1.02-1.18x / 1.04-1.13x (the short class ran it), 32 x 512
/// 1.12-1.21x / 1.06-1.11x (the warp-specialized class); 24 x 768 1.00x / 0.98x, and walking
/// every length, 16 x 1024 0.98x and 8 x 2048 0.91x (f16); its 128 x 64 tiles since then (three
/// runs) 64 x 256 1.00-1.09x, 32 x 512 0.94-1.09x, level at 768 keys (kernels/aot.py's
/// TMA_TILES). With a diagonal, from the short class's end to 2048 keys, since its rounds
/// alternate direction and its parts skip the key tiles their rows do not see (JIT, three
/// alternating turns, f16 / bf16, TFLOP/s, against the class that ran them): 32 x 512 276 / 289
/// against the prefill class's 258 / 275, 16 x 1024 380 / 386 against 341 / 353, 8 x 2048 446 /
/// 459 against the warp-specialized class's 433 / 449; 64 x 256 158 / 164 against the short
/// class's 202 / 208.
pub fn walk_keys(head_dim: usize, diagonal: bool) -> std::ops::Range<usize> {
    match (head_dim, diagonal) {
        (128, false) => 256..768,
        (128, true) => short_keys(128, true) + 1..2049,
        _ => 0..0,
    }
}

/// The TMA classes that serve a call of head dim `head_dim` with `keys` keys, with or without a
/// diagonal, fastest first ([`super::select()`] takes the first one built): the short class for
/// few keys, the walking one for a few tiles more, the warp-specialized one for many, the
/// prefill class up to [`max_keys`].
pub fn classes(head_dim: usize, diagonal: bool, keys: usize) -> &'static [Tile] {
    let prefill = keys <= max_keys(head_dim, diagonal);
    if walk_keys(head_dim, diagonal).contains(&keys) {
        return match keys >= ws_keys(head_dim, diagonal) {
            true => &[Tile::PrefillWalk, Tile::PrefillWs, Tile::Prefill],
            false => &[Tile::PrefillWalk, Tile::Prefill],
        };
    }
    match (keys <= short_keys(head_dim, diagonal), keys >= ws_keys(head_dim, diagonal), prefill) {
        (true, _, _) => &[Tile::PrefillShort, Tile::Prefill],
        (false, true, true) => &[Tile::PrefillWs, Tile::Prefill],
        (false, true, false) => &[Tile::PrefillWs],
        (false, false, true) => &[Tile::Prefill],
        (false, false, false) => &[],
    }
}

/// Query rows of each consumer warpgroup of the warp-specialized classes (kernels/aot.py's
/// CONSUMER_ROWS): their blocks of 128 or 192 rows have two or three.
pub const CONSUMER_ROWS: u32 = 64;

/// Rows of q's descriptor boxes for `image`: its query block, or the part of it each consumer
/// of the warp-specialized classes loads (kernels/aot.py's tma_q_rows).
pub fn q_box_rows(image: &KernelImage) -> u32 {
    match image.tile {
        Tile::PrefillWs | Tile::PrefillWalk => CONSUMER_ROWS,
        _ => image.block_m,
    }
}

/// Query rows a call needs for the TMA kernel: its blocks (64 or 128 rows) hold one head, where
/// the `tl` prefill tile packs a GQA group's heads into its rows.
pub const TMA_MIN_QUERIES: usize = 64;
/// CUDA caps grid dimension y (batch x heads) at 65535.
const MAX_GRID_Y: usize = 65535;
/// Elements per descriptor box row: 128 bytes of f16/bf16, the swizzle span (kernels/aot.py's
/// TMA_BOX_COLS; the build refuses a kernel laid out otherwise).
pub const BOX_COLS: u32 = 64;

/// The two parts of head dim `head_dim` as the TMA kernel reads them (kernels/aot.py's
/// SPLIT_DIMS): the power of two below it and the rest (80 = 64 + 16, 96 = 64 + 32, 160 = 128 +
/// 32), or the power of two and 0. The rest goes through its own descriptors, in one box of its
/// width (16 or 32 columns, kernels/aot.py's tma_box_cols).
pub fn head_parts(head_dim: u32) -> (u32, u32) {
    match head_dim.is_power_of_two() {
        true => (head_dim, 0),
        false => {
            let pow2 = 1 << (31 - head_dim.leading_zeros());
            (pow2, head_dim - pow2)
        }
    }
}

/// Whether the TMA kernel serves `call` (given an image of its dtype and head dim): plain
/// (no ALiBi, softcap, mm_prefix ranges, paging; a scale the kernel folds), no left window, at
/// least [`TMA_MIN_QUERIES`] queries, keys some class takes ([`classes`]), q/k/v whose rows each view as
/// one 2-D matrix (a batch stride that is a whole number of rows, heads inside a row), and a grid
/// CUDA can launch.
pub fn serves(call: &AttnCall) -> bool {
    let no_left_window = call.window.left < 0 || call.window.left as usize >= call.max_seqlen_k;
    let rows_view = |view: &TensorView, heads: usize| {
        let whole_rows = call.mode == Mode::VarLen || call.batch <= 1 || view.batch_stride % view.row_stride.max(1) == 0;
        whole_rows && (heads - 1) * view.head_stride + call.head_dim <= view.row_stride
    };
    call.mode != Mode::Paged
        && !needs_extras(call)
        && no_left_window
        && call.max_seqlen_q >= TMA_MIN_QUERIES
        && !classes(call.head_dim, call.window.right >= 0, call.max_seqlen_k).is_empty()
        && call.batch * call.num_heads <= MAX_GRID_Y
        && rows_view(&call.q, call.num_heads)
        && rows_view(&call.k, call.num_heads_k)
        && rows_view(&call.v, call.num_heads_k)
}

/// The 2-D views of q, k and v that `attn_fwd_tma`'s descriptors describe, for `call` with the
/// checked arguments `fwd` of the same call ([`super::fwd_args`]) and the TMA image `image`: a
/// row per token, a head every `stride_*h` columns; in batch mode sequence b starts at row `b *
/// batch stride / row stride`. Then the views of q2, k2 and v2: the same, in boxes of a split
/// head dim's last columns ([`head_parts`]), or at a power of two the first three again (its
/// kernel takes none: [`TmaFwdArgs::values_for`]).
pub fn views(call: &AttnCall, fwd: &FwdArgs, image: &KernelImage) -> [TiledView; 6] {
    let element = match image.dtype {
        KernelDtype::F16 => MapElement::F16,
        KernelDtype::Bf16 => MapElement::Bf16,
    };
    let varlen = call.mode == Mode::VarLen;
    let view = |base: u64, tensor: &TensorView, heads: usize, len: usize, varlen_rows: usize, box_rows: u32| {
        let rows = if varlen { varlen_rows } else { (call.batch - 1) * batch_rows(call, tensor) + len };
        TiledView {
            element,
            base,
            rows: rows.max(1) as u64,
            cols: ((heads - 1) * tensor.head_stride + call.head_dim) as u64,
            row_stride_bytes: (tensor.row_stride * ELEM) as u64,
            box_rows,
            box_cols: BOX_COLS,
        }
    };
    let kv_rows = fwd.kv_rows as usize;
    let first = [
        view(fwd.q, &call.q, call.num_heads, call.max_seqlen_q, call.total_q, q_box_rows(image)),
        view(fwd.k, &call.k, call.num_heads_k, call.max_seqlen_k, kv_rows, image.block_n),
        view(fwd.v, &call.v, call.num_heads_k, call.max_seqlen_k, kv_rows, image.block_n),
    ];
    let second = match head_parts(image.block_d) {
        (_, 0) => first,
        (_, rest) => first.map(|view| TiledView { box_cols: rest, ..view }),
    };
    [first[0], first[1], first[2], second[0], second[1], second[2]]
}

/// Rows of `tensor`'s view from one sequence to the next in batch mode (0 otherwise).
fn batch_rows(call: &AttnCall, tensor: &TensorView) -> usize {
    match call.mode {
        Mode::Batch if call.batch > 1 => tensor.batch_stride / tensor.row_stride.max(1),
        _ => 0,
    }
}

/// `attn_fwd_tma`'s arguments: the descriptors `maps` of `views` ([`views`]), and the rest from
/// `fwd`, the checked `attn_fwd` arguments of the same unsplit call. An `Err` for views past
/// what a descriptor or the kernel's 32-bit coordinates hold.
pub fn tma_args(call: &AttnCall, fwd: &FwdArgs, views: &[TiledView; 6], maps: [TensorMap; 6]) -> Result<TmaFwdArgs> {
    let desc = |view: &TiledView, map: TensorMap| -> Result<TensorDescArg> {
        let rows = i32::try_from(view.rows + u64::from(view.box_rows));
        let cols = i32::try_from(view.cols);
        match (rows, cols) {
            (Ok(_), Ok(cols)) if view.row_stride_bytes < 1 << 40 => Ok(TensorDescArg {
                map,
                shape: [view.rows as i32, cols],
                strides: [(view.row_stride_bytes / ELEM as u64) as i64, 1],
            }),
            _ => candle::bail!(
                "flash-attn-rocm: a {} x {} view with {}-byte rows exceeds the TMA kernel's coordinates",
                view.rows,
                view.cols,
                view.row_stride_bytes
            ),
        }
    };
    let [q_map, k_map, v_map, q2_map, k2_map, v2_map] = maps;
    let int = |what: &str, value: usize| {
        i32::try_from(value).map_err(|_| candle::Error::Msg(format!("flash-attn-rocm: {what} = {value} exceeds i32")))
    };
    Ok(TmaFwdArgs {
        q: desc(&views[0], q_map)?,
        k: desc(&views[1], k_map)?,
        v: desc(&views[2], v_map)?,
        q2: desc(&views[3], q2_map)?,
        k2: desc(&views[4], k2_map)?,
        v2: desc(&views[5], v2_map)?,
        out: fwd.out,
        lse: fwd.lse,
        cu_seqlens_q: fwd.cu_seqlens_q,
        cu_seqlens_k: fwd.cu_seqlens_k,
        fault: fwd.fault,
        sm_scale: fwd.sm_scale,
        stride_qh: fwd.stride_qh,
        stride_kh: fwd.stride_kh,
        stride_vh: fwd.stride_vh,
        q_batch_rows: int("q batch rows", batch_rows(call, &call.q))?,
        k_batch_rows: int("k batch rows", batch_rows(call, &call.k))?,
        v_batch_rows: int("v batch rows", batch_rows(call, &call.v))?,
        stride_lb: fwd.stride_lb,
        stride_lh: fwd.stride_lh,
        is_varlen: fwd.is_varlen,
        seqlen_q: fwd.seqlen_q,
        seqlen_k: fwd.seqlen_k,
        total_rows: fwd.total_rows,
        kv_rows: fwd.kv_rows,
        kv_len_cap: fwd.kv_len_cap,
        num_heads: fwd.num_heads,
        num_heads_k: fwd.num_heads_k,
        window_right: fwd.window_right,
        batch: int("batch", call.batch)?,
    })
}
