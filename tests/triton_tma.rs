//! Host-side tests of the TMA kernel's launch (no GPU needed): which calls take it, its grid, and
//! the 2-D views its descriptors describe, against the tensors' own layouts.

mod common;

use candle::{DType, Device, Tensor};
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
use flash_attn_rocm::device::DeviceLimits;
use flash_attn_rocm::triton::{fwd_args, select, tma, Family, KernelDtype, KernelImage, Kernels, Plan, Tile};
use rand::Rng;

const BUFFERS: flash_attn_rocm::device::DeviceBuffers = common::outcome::FAKE_BUFFERS;
/// An H100's opt-in shared memory per block (227 KiB).
const H100: DeviceLimits = DeviceLimits { max_shared_per_block: 232_448, max_threads_per_block: 1024, host_native_atomics: false };
const H100_SMS: usize = 132;

fn sm90_image(family: Family, tile: Tile, block_d: u32, paged: bool, extras: bool) -> KernelImage {
    let (block_m, block_n, threads) = match (family, tile) {
        (Family::FwdTma, Tile::PrefillShort) => (64, 32, 128),
        (Family::FwdTma, Tile::PrefillWs) if block_d == 64 => (192, 128, 512),
        (Family::FwdTma, Tile::PrefillWs) => (128, if block_d >= 160 { 64 } else { 128 }, 384),
        (Family::FwdTma, Tile::PrefillWalk) => (128, 64, 384),
        (Family::FwdTma, _) if block_d == 256 => (128, 64, 256),
        (Family::FwdTma, _) => (64, 64, 128),
        (_, Tile::Decode) => (16, 128, 128),
        (_, Tile::Merge) => (1, 16, 128),
        _ => (128, 64, 256),
    };
    KernelImage {
        target: "sm_90",
        variant: "test",
        kernel: "k",
        family,
        tile,
        dtype: KernelDtype::F16,
        block_d,
        even_d: family != Family::Merge,
        paged,
        extras,
        ptr32: false,
        block_m,
        block_n,
        threads,
        shared: 1024,
        scratch_args: 2,
        image: b"\x7fELF",
    }
}

/// sm_90's f16 kernels at exact head dims 64, 80, 96 (here an exact 96 image that has no TMA
/// twin), 128, 160 and 256, with TMA images at 64, 80, 128, 160 and 256 (128 rows at 256, as
/// kernels/aot.py builds them), of the warp-specialized class at 64, 128, 160 and 256, of the
/// short class at 128 and 256 and of the walking class at 128.
fn sm90_images() -> &'static [KernelImage] {
    let mut all = Vec::new();
    for block_d in [64, 80, 96, 128, 160, 256] {
        for (paged, extras) in [(false, false), (false, true), (true, false), (true, true)] {
            all.push(sm90_image(Family::Fwd, Tile::Prefill, block_d, paged, extras));
            all.push(sm90_image(Family::Fwd, Tile::Decode, block_d, paged, extras));
        }
        all.push(sm90_image(Family::Merge, Tile::Merge, block_d, false, false));
        if block_d != 96 {
            all.push(sm90_image(Family::FwdTma, Tile::Prefill, block_d, false, false));
        }
        if block_d != 96 && block_d != 80 {
            all.push(sm90_image(Family::FwdTma, Tile::PrefillWs, block_d, false, false));
        }
        if block_d >= 128 && block_d.is_power_of_two() {
            all.push(sm90_image(Family::FwdTma, Tile::PrefillShort, block_d, false, false));
        }
        if block_d == 128 {
            all.push(sm90_image(Family::FwdTma, Tile::PrefillWalk, block_d, false, false));
        }
    }
    Box::leak(all.into_boxed_slice())
}

fn zeros(dims: &[usize]) -> Tensor {
    Tensor::zeros(dims, DType::F16, &Device::Cpu).unwrap()
}

fn request(window: (Option<usize>, Option<usize>), softcap: Option<f32>) -> Request<'static> {
    Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: window.0, window_size_right: window.1, softcap, varlen: None }
}

/// Random batch calls, each with whether the TMA kernel serves it (the rule restated: a plain
/// call, no left window, >= 64 queries, heads inside a row, head dim 64, 128 or 256, or a split
/// one, 80 or 160 here, where its TMA image is built: 96 has none here) and which
/// class (short: at most 256 keys at d = 128, 512 at d = 256 with a diagonal; warp-specialized:
/// at d = 128 and 256 from 512 keys without a diagonal, from 2048 with one at d = 128 and past the
/// short class at d = 256, at d = 64 past 2048 keys, or 4096 with a diagonal, at d = 160 from
/// 1024 keys; else the prefill class, which takes at most those 2048 /
/// 4096 keys at d = 64 and 128, any number at the split head dims): the plan launches it exactly when it serves and its grid, one program per query block of each
/// sequence and query head, fills the device (it does not split the keys); unsplit. The
/// walking class launches one program per SM instead, each walking the blocks.
#[test]
fn prompts_take_the_tma_kernel_exactly_when_it_serves_them() {
    let mut rng = common::rng("prompts_take_the_tma_kernel_exactly_when_it_serves_them");
    let (mut taken, mut small, mut shorts, mut specialized, mut walking, mut split_ws) = (0, 0, 0, 0, 0, 0);
    for _ in 0..4000 {
        let b = rng.gen_range(1..5);
        let s_q = [1, 16, 63, 64, 100, 300, 1100][rng.gen_range(0..7)];
        let s_k = [1, 64, 255, 256, 257, 511, 512, 513, 767, 768, 1024, 1025, 2048, 2049, 4096, 4097, 9000][rng.gen_range(0..17)];
        let d = [64, 80, 96, 128, 160, 256][rng.gen_range(0..6)];
        let h_k = rng.gen_range(1..4);
        let h = h_k * rng.gen_range(1..4);
        let (window, diagonal, left) = [
            ((None, None), false, false),
            ((None, Some(0)), true, false),
            ((Some(30), Some(0)), true, true),
            ((None, Some(5)), true, false),
        ][rng.gen_range(0..4)];
        let softcap = (rng.gen_range(0..4) == 0).then_some(5.0);
        let heads_across_rows = rng.gen_range(0..4) == 0;
        let q = if heads_across_rows { zeros(&[b, h, s_q, d]).transpose(1, 2).unwrap() } else { zeros(&[b, s_q, h, d]) };
        // k/v narrowed from a longer cache: a batch stride of whole rows.
        let kv = zeros(&[b, s_k + 7, h_k, d]).narrow(1, 0, s_k).unwrap();
        let call = AttnCall::new(&request(window, softcap), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        // A right window wider than the keys is no window (flash-attn's normalization).
        let diagonal = diagonal && window.1.is_some_and(|right| right <= s_k);
        let max_keys = common::tma_rule::prefill_keys(d, diagonal);
        let (short, ws) = common::tma_rule::short_and_ws(d, diagonal, s_k);
        let walks = common::tma_rule::walks(d, diagonal, s_k);
        // A left window wider than the keys is no window.
        let left_bounds = left && 30 < s_k;
        let serves = [64, 80, 128, 160, 256].contains(&d)
            && softcap.is_none()
            && !left_bounds
            && s_q >= 64
            && (s_k <= max_keys || ws)
            && (!heads_across_rows || h == 1 || s_q == 1);
        let kernels = select(&call, "sm_90", H100, sm90_images()).unwrap();
        assert_eq!(kernels.tma.is_some(), serves, "b {b} s_q {s_q} s_k {s_k} d {d} h {h}/{h_k} {window:?} {softcap:?} {heads_across_rows}");
        if let Some(tma) = kernels.tma {
            let class = match (walks, short, ws) {
                (true, _, _) => Tile::PrefillWalk,
                (false, true, _) => Tile::PrefillShort,
                (false, false, true) => Tile::PrefillWs,
                (false, false, false) => Tile::Prefill,
            };
            assert_eq!(tma.tile, class, "s_k {s_k} d {d} {window:?}");
            split_ws += (class == Tile::PrefillWs && !d.is_power_of_two()) as usize;
        }
        let block_m = match (d, short, ws || walks) {
            (64, false, true) => 192,
            (_, false, true) | (256, false, _) => 128,
            _ => 64,
        };
        // Devices of 16 to 132 SMs.
        let units = [16, 66, H100_SMS][rng.gen_range(0..3)];
        let plan = Plan::new(&call, kernels, units).unwrap();
        let fills = s_q.div_ceil(block_m) * b * h >= units;
        let launches_tma = plan.kernels.fwd.family == Family::FwdTma;
        assert_eq!(launches_tma, serves && fills, "s_q {s_q} s_k {s_k} d {d} b {b} h {h}");
        if launches_tma {
            let grid = match walks {
                true => [units as u32, 1, 1],
                false => [s_q.div_ceil(block_m) as u32, (b * h) as u32, 1],
            };
            assert_eq!(plan.grid, grid, "s_q {s_q} s_k {s_k} d {d} b {b} h {h} {window:?}");
            assert_eq!((plan.num_splits, plan.scratch_lens(&call)), (1, (0, 0)));
            taken += 1;
            walking += walks as usize;
        }
        small += (serves && !fills) as usize;
        shorts += (serves && short) as usize;
        specialized += (serves && ws) as usize;
    }
    assert!(
        taken > 20 && small > 5 && shorts > 20 && specialized > 20 && walking > 0 && split_ws > 20,
        "{taken} calls took the TMA kernel, {small} served ones had small grids, {shorts} its short class, {specialized} its warp-specialized one ({split_ws} at a split head dim), {walking} its walking one"
    );
}

/// The walking class's grid on devices of 16 to 132 SMs, for prompts of 256 to 767 keys at
/// d = 128 that fill them (past 256 with a diagonal): one program per SM (each walks query
/// blocks); causal calls of 256 keys and other head dims keep one program per block, in their
/// own classes.
#[test]
fn the_walking_class_launches_one_program_per_sm() {
    let mut rng = common::rng("the_walking_class_launches_one_program_per_sm");
    for _ in 0..200 {
        let d = [64, 128, 256][rng.gen_range(0..3)];
        let causal = rng.gen_range(0..2) == 1;
        let (b, h) = (rng.gen_range(4..9), rng.gen_range(16..33));
        let s = rng.gen_range(256..768);
        let q = zeros(&[b, s, h, d]);
        let window = if causal { (None, Some(0)) } else { (None, None) };
        let call = AttnCall::new(&request(window, None), [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap();
        let units = [16, 66, H100_SMS][rng.gen_range(0..3)];
        let plan = Plan::new(&call, select(&call, "sm_90", H100, sm90_images()).unwrap(), units).unwrap();
        let tile = plan.kernels.fwd.tile;
        assert_eq!(tile == Tile::PrefillWalk, common::tma_rule::walks(d, causal, s), "d {d} s {s} causal {causal}: {tile:?}");
        let grid = match tile {
            Tile::PrefillWalk => [units as u32, 1, 1],
            _ => [s.div_ceil(plan.kernels.fwd.block_m as usize) as u32, (b * h) as u32, 1],
        };
        assert_eq!(plan.grid, grid, "d {d} b {b} s {s} h {h} causal {causal} units {units}");
    }
}

/// The split head dims: the warp-specialized class first from `ws_keys` (d = 160 from 1024 keys,
/// d = 96 from 4096 without a diagonal), the prefill class after it (it takes every length there)
/// and alone below and at d = 80; the plan launches the ws image at d = 160 (96 has no TMA image
/// here) with 128-row blocks.
#[test]
fn split_head_dims_take_the_warp_specialized_class_for_long_prompts() {
    for (d, diagonal, from) in [(160, false, 1024), (160, true, 1024), (96, false, 4096)] {
        assert_eq!(tma::ws_keys(d, diagonal), from, "d {d} diagonal {diagonal}");
        for keys in [from, from + 1, 4 * from, 1 << 20] {
            assert_eq!(tma::classes(d, diagonal, keys), &[Tile::PrefillWs, Tile::Prefill], "d {d} {keys} keys");
        }
        for keys in [300, from - 1] {
            assert_eq!(tma::classes(d, diagonal, keys), &[Tile::Prefill], "d {d} {keys} keys");
        }
    }
    for (d, diagonal) in [(80, false), (80, true), (96, true)] {
        for keys in [300, 1024, 4096, 1 << 20] {
            assert_eq!(tma::classes(d, diagonal, keys), &[Tile::Prefill], "d {d} diagonal {diagonal} {keys} keys");
        }
    }
    for (d, diagonal, s_k, tile) in [
        (80, false, 4096, Tile::Prefill),
        (160, false, 1024, Tile::PrefillWs),
        (160, true, 1024, Tile::PrefillWs),
        (160, true, 1023, Tile::Prefill),
        (160, false, 4096, Tile::PrefillWs),
    ] {
        let (b, h, s_q) = (2, 16, 1000);
        let q = zeros(&[b, s_q, h, d]);
        let kv = zeros(&[b, s_k, h, d]);
        let window = if diagonal { (None, Some(0)) } else { (None, None) };
        let call = AttnCall::new(&request(window, None), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        let plan = Plan::new(&call, select(&call, "sm_90", H100, sm90_images()).unwrap(), H100_SMS).unwrap();
        assert_eq!((plan.kernels.fwd.family, plan.kernels.fwd.tile, plan.kernels.fwd.block_d), (Family::FwdTma, tile, d as u32));
        let block_m = if tile == Tile::PrefillWs { 128 } else { 64 };
        assert_eq!(plan.grid, [s_q.div_ceil(block_m) as u32, (b * h) as u32, 1], "d {d} s_k {s_k}");
    }
}

/// Element (b, s, h, e) of a tensor read through its view: view row `b * batch_rows + s`, column
/// `h * head_stride + e`, inside the view; at the address the tensor's own layout gives it.
fn check_view(view: &flash_attn_rocm::device::TiledView, desc: &flash_attn_rocm::triton::TensorDescArg, base: usize, t: &Tensor, batch_rows: i32, head_stride: i32, varlen_rows: Option<usize>) {
    let mut rng = common::rng("check_view");
    let (dims, stride) = (t.dims(), t.stride());
    assert!(view.cols * 2 <= view.row_stride_bytes, "{view:?}");
    assert_eq!(view.base as usize % 16, 0);
    assert_eq!((desc.shape[0] as u64, desc.shape[1] as u64, desc.strides[0] as u64 * 2, desc.strides[1]), (view.rows, view.cols, view.row_stride_bytes, 1));
    for _ in 0..200 {
        let at: Vec<usize> = dims.iter().map(|&n| rng.gen_range(0..n)).collect();
        let (row, head, e) = match varlen_rows {
            Some(_) => (at[0], at[1], at[2]),
            None => (at[0] * batch_rows as usize + at[1], at[2], at[3]),
        };
        let col = head * head_stride as usize + e;
        assert!((row as u64) < view.rows && (col as u64) < view.cols, "{at:?} outside {view:?}");
        let by_view = view.base as usize + row * view.row_stride_bytes as usize + col * 2;
        let by_layout = base + 2 * (t.layout().start_offset() + at.iter().zip(stride).map(|(i, s)| i * s).sum::<usize>());
        assert_eq!(by_view, by_layout, "{at:?}");
    }
    if let Some(rows) = varlen_rows {
        assert_eq!(view.rows, rows as u64);
    }
}

/// The views of q, k and v address every element where the tensors' layouts put it: contiguous
/// q, q sliced out of a fused qkv tensor, k and v narrowed from longer caches (at an offset),
/// and packed varlen tensors; the other arguments come from the call's `attn_fwd` arguments.
#[test]
fn tma_views_address_every_element_as_the_layouts_do() {
    let mut rng = common::rng("tma_views_address_every_element_as_the_layouts_do");
    let image = sm90_images().iter().find(|i| i.family == Family::FwdTma && i.tile == Tile::Prefill && i.block_d == 128).unwrap();
    for n in 0..40 {
        let (b, s_q, s_k, h_k) = (rng.gen_range(1..4), rng.gen_range(64..300), rng.gen_range(1..900), rng.gen_range(1..4));
        let (h, d) = (h_k * rng.gen_range(1..4), 128);
        let q = if n % 2 == 0 { zeros(&[b, s_q, h, d]) } else { zeros(&[b, s_q, 3 * h, d]).narrow(2, h, h).unwrap() };
        let cache = s_k + rng.gen_range(0..50);
        let k = zeros(&[b, cache, h_k, d]).narrow(1, cache - s_k, s_k).unwrap();
        let v = zeros(&[b, cache + 8, h_k, d]).narrow(1, 8, s_k).unwrap();
        let call = AttnCall::new(&request((None, Some(0)), None), [DType::F16; 3], q.layout(), k.layout(), v.layout()).unwrap();
        let kernels = Kernels { fwd: image, fwd_b32: None, merge: image, batched: None, tma: Some(image) };
        let plan = Plan::new(&call, kernels, H100_SMS).unwrap();
        let fwd = fwd_args(&call, &BUFFERS, &plan).unwrap();
        let views = tma::views(&call, &fwd, image);
        let args = tma::tma_args(&call, &fwd, &views, Default::default()).unwrap();
        check_view(&views[0], &args.q, BUFFERS.q, &q, args.q_batch_rows, args.stride_qh, None);
        check_view(&views[1], &args.k, BUFFERS.k, &k, args.k_batch_rows, args.stride_kh, None);
        check_view(&views[2], &args.v, BUFFERS.v, &v, args.v_batch_rows, args.stride_vh, None);
        assert_eq!([views[0].box_rows, views[1].box_rows, views[0].box_cols], [64, 64, 64]);
        // The warp-specialized class: 128-row blocks, q read in 64-row halves, 128-key tiles.
        let ws = sm90_images().iter().find(|i| i.tile == Tile::PrefillWs && i.block_d == 128).unwrap();
        let ws_views = tma::views(&call, &fwd, ws);
        assert_eq!([ws_views[0].box_rows, ws_views[1].box_rows, ws_views[2].box_rows], [64, 128, 128]);
        assert_eq!(ws_views.map(|v| (v.base, v.rows, v.cols)), views.map(|v| (v.base, v.rows, v.cols)));
        // A power of two has no tail views (its second three are its first three, unused).
        assert_eq!(views[..3], views[3..]);
        assert_eq!((args.window_right, args.is_varlen, args.seqlen_q, args.seqlen_k), (0, 0, s_q as i32, s_k as i32));
        assert_eq!((args.out, args.lse, args.fault, args.num_heads, args.num_heads_k), (fwd.out, fwd.lse, fwd.fault, h as i32, h_k as i32));
    }
    // A split head dim (80 = 64 + 16, 160 = 128 + 32): the same views twice, the tail's in boxes
    // of its 16 or 32 columns (its 32 or 64 bytes the swizzle span); the kernel reads the tail at
    // column `head * head_stride + 64` (or 128) of them.
    for (d, rest) in [(80, 16), (160, 32)] {
        let image = sm90_images().iter().find(|i| i.family == Family::FwdTma && i.tile == Tile::Prefill && i.block_d == d).unwrap();
        assert_eq!(tma::head_parts(d), (d - rest, rest));
        let (b, s, h) = (2, 300, 4);
        let q = zeros(&[b, s, h, d as usize]);
        let call = AttnCall::new(&request((None, None), None), [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap();
        let kernels = Kernels { fwd: image, fwd_b32: None, merge: image, batched: None, tma: Some(image) };
        let plan = Plan::new(&call, kernels, H100_SMS).unwrap();
        let fwd = fwd_args(&call, &BUFFERS, &plan).unwrap();
        let views = tma::views(&call, &fwd, image);
        for part in 0..3 {
            assert_eq!((views[part].box_cols, views[part].swizzle_bytes()), (64, 128));
            assert_eq!((views[part + 3].box_cols, views[part + 3].swizzle_bytes()), (rest, 2 * rest));
            assert_eq!(views[part + 3], flash_attn_rocm::device::TiledView { box_cols: rest, ..views[part] });
        }
        let args = tma::tma_args(&call, &fwd, &views, Default::default()).unwrap();
        check_view(&views[3], &args.q2, BUFFERS.q, &q, args.q_batch_rows, args.stride_qh, None);
        // The warp-specialized class at a split head dim (attn_fwd_tma_ws_split; built at 160, not
        // at 80): the same views, q's boxes (the tail's too) a consumer's 64 rows, k's and v's its
        // key tile's.
        let ws = sm90_images().iter().find(|i| i.tile == Tile::PrefillWs && i.block_d == d);
        assert_eq!(ws.is_some(), d == 160, "d {d}");
        if let Some(ws) = ws {
            let ws_views = tma::views(&call, &fwd, ws);
            assert_eq!(ws_views.map(|v| (v.box_rows, v.box_cols)), [(64, 64), (64, 64), (64, 64), (64, rest), (64, rest), (64, rest)]);
            assert_eq!(ws_views.map(|v| (v.base, v.rows, v.cols, v.row_stride_bytes)), views.map(|v| (v.base, v.rows, v.cols, v.row_stride_bytes)));
            let ws_args = tma::tma_args(&call, &fwd, &ws_views, Default::default()).unwrap();
            check_view(&ws_views[3], &ws_args.q2, BUFFERS.q, &q, ws_args.q_batch_rows, ws_args.stride_qh, None);
            check_view(&ws_views[4], &ws_args.k2, BUFFERS.k, &q, ws_args.k_batch_rows, ws_args.stride_kh, None);
        }
        // The split kernel takes all six descriptors, a power of two's the first three.
        let n = flash_attn_rocm::triton::TmaFwdArgs::PARAMS.len();
        assert_eq!((args.values_for(true).len(), args.values_for(false).len()), (n + 6 * 4, n - 3 + 3 * 4));
    }
    // Varlen: packed rows, sequences found through the cumulative seqlens.
    let (tq, tk) = (500, 700);
    let q = zeros(&[tq, 16, 64]);
    let kv = zeros(&[tk, 2, 64]);
    let cu = |v: &[u32]| Tensor::new(v, &Device::Cpu).unwrap();
    let (sq, sk) = (cu(&[0, 200, 200, 500]), cu(&[0, 300, 310, 690]));
    let varlen = VarLenRequest { seqlens_q: &sq, seqlens_k: &sk, max_seqlen_q: 300, max_seqlen_k: 380, block_table: None, page_block_size: None, mm_prefix_ranges: None };
    let req = Request { varlen: Some(varlen), ..request((None, None), None) };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let image = sm90_images().iter().find(|i| i.family == Family::FwdTma && i.block_d == 64).unwrap();
    let kernels = select(&call, "sm_90", H100, sm90_images()).unwrap();
    assert_eq!(kernels.tma.map(|t| t.block_d), Some(64));
    let plan = Plan::new(&call, kernels, H100_SMS).unwrap();
    assert_eq!(plan.kernels.fwd.family, Family::FwdTma);
    assert_eq!(plan.grid, [300u32.div_ceil(64), 3 * 16, 1]);
    let fwd = fwd_args(&call, &BUFFERS, &plan).unwrap();
    let views = tma::views(&call, &fwd, image);
    let args = tma::tma_args(&call, &fwd, &views, Default::default()).unwrap();
    check_view(&views[0], &args.q, BUFFERS.q, &q, 0, args.stride_qh, Some(tq));
    // The views of k and v end at the last sequence's last key.
    check_view(&views[1], &args.k, BUFFERS.k, &kv.narrow(0, 0, 690).unwrap(), 0, args.stride_kh, Some(690));
    assert_eq!((args.is_varlen, args.window_right, args.q_batch_rows), (1, -1, 0));
    assert_eq!((args.cu_seqlens_q, args.cu_seqlens_k), (BUFFERS.seqstart_q as u64, BUFFERS.seqstart_k as u64));
}
