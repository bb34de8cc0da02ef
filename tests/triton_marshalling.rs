//! Host-side tests of the Triton path (no GPU needed): the argument structs against the kernel
//! source, kernel selection, grid and splits, and the exact arguments for random layouts.

mod common;

use candle::{DType, Device, Layout, Tensor};
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
use flash_attn_rocm::device::DeviceBuffers;
use flash_attn_rocm::device::DeviceLimits;
use flash_attn_rocm::triton::{
    fwd_args, merge_args, select, ArgValue, Family, FwdArgs, KernelDtype, KernelImage, Kernels, MergeArgs, Plan, Tile,
    TmaFwdArgs, BATCHED_DECODE_WAVES,
};
use rand::Rng;

use common::images::{image, images};

const BUFFERS: DeviceBuffers = common::outcome::FAKE_BUFFERS;
/// An RX 7900 XTX's (gfx1100) limits: 64 KiB of LDS per workgroup.
const RDNA3: DeviceLimits = DeviceLimits { max_shared_per_block: 64 * 1024, max_threads_per_block: 1024, host_native_atomics: true };

/// The parameter names of `def <kernel>(...)` in kernels/<file>, constexprs excluded.
fn kernel_params(file: &str, kernel: &str) -> Vec<String> {
    let src = std::fs::read_to_string(format!("{}/kernels/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let start = src.find(&format!("def {kernel}(")).expect("kernel in source") + kernel.len() + 5;
    let body = &src[start..start + src[start..].find("):").unwrap()];
    body.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.contains("constexpr"))
        .map(str::to_string)
        .collect()
}

/// The integer `N` of the first line of kernels/<file> that starts with `prefix` and reads
/// `<prefix>N` (with `N` possibly wrapped in `gl.constexpr(...)`).
fn kernel_constant(file: &str, prefix: &str) -> u32 {
    let src = std::fs::read_to_string(format!("{}/kernels/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let line = src.lines().find(|l| l.starts_with(prefix)).expect("constant in source");
    line[prefix.len()..].trim_start_matches("gl.constexpr(").trim_end_matches(')').trim().parse().unwrap()
}

#[test]
fn consumer_rows_agree_across_the_build_the_kernel_and_the_launch() {
    // The launch encodes q's descriptor boxes with tma::CONSUMER_ROWS rows; the build checks each
    // warp-specialized kernel against aot.py's, and the kernel loads parts of its ROWS.
    let launch = flash_attn_rocm::triton::tma::CONSUMER_ROWS;
    assert_eq!(kernel_constant("aot.py", "CONSUMER_ROWS = "), launch);
    assert_eq!(kernel_constant("attention_ws.py", "ROWS = "), launch);
}

#[test]
fn argument_structs_follow_the_kernel_signatures() {
    assert_eq!(FwdArgs::PARAMS, kernel_params("attention.py", "attn_fwd"));
    assert_eq!(MergeArgs::PARAMS, kernel_params("attention.py", "attn_merge"));
    // The split head dims' kernels (prefill and warp-specialized) take every TMA argument; the power-of-two kernels (the
    // warp-specialized ones too: one launch path for all) all but the tail's descriptors.
    assert_eq!(TmaFwdArgs::PARAMS, kernel_params("attention_tma.py", "attn_fwd_tma_split"));
    assert_eq!(TmaFwdArgs::PARAMS, kernel_params("attention_ws.py", "attn_fwd_tma_ws_split"));
    let pow2: Vec<&str> = TmaFwdArgs::PARAMS
        .iter()
        .enumerate()
        .filter(|(i, _)| !TmaFwdArgs::SPLIT_PARAMS.contains(i))
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(pow2, kernel_params("attention_tma.py", "attn_fwd_tma"));
    assert_eq!(pow2, kernel_params("attention_ws.py", "attn_fwd_tma_ws"));
    assert_eq!(pow2, kernel_params("attention_ws.py", "attn_fwd_tma_walk"));
    assert_eq!(FwdArgs::default().values().len(), FwdArgs::PARAMS.len());
    assert_eq!(MergeArgs::default().values().len(), MergeArgs::PARAMS.len());
    // Each descriptor goes as Triton lowers it: the map, then the view's two sizes and strides.
    let args = TmaFwdArgs { sm_scale: 0.5, ..Default::default() };
    for (split, descs) in [(true, 6), (false, 3)] {
        let values = args.values_for(split);
        assert_eq!(values.len(), TmaFwdArgs::PARAMS.len() - (6 - descs) + descs * 4);
        for desc in 0..descs {
            assert!(matches!(values[desc * 5], ArgValue::TensorMap(_)));
            assert!(matches!(values[desc * 5 + 1..desc * 5 + 5], [ArgValue::I32(_), ArgValue::I32(_), ArgValue::I64(_), ArgValue::I64(_)]));
        }
        // Then the pointers: Out first.
        assert!(matches!(values[descs * 5], ArgValue::Ptr(_)));
        assert!(values.contains(&ArgValue::F32(0.5)));
    }
}

fn zeros(dims: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(dims, dtype, &Device::Cpu).unwrap()
}

fn batch_request(softcap: Option<f32>) -> Request<'static> {
    Request {
        softmax_scale: 0.125,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: Some(0),
        softcap,
        varlen: None,
    }
}

/// A decode request (one query row per sequence) over paged K/V: the cumulative seqlens `sq`
/// and `sk`, at most `max_seqlen_k` keys, the block `table` of pages of `page` rows.
fn paged_decode_request<'a>(sq: &'a Tensor, sk: &'a Tensor, max_seqlen_k: usize, table: &'a Tensor, page: usize) -> Request<'a> {
    Request {
        varlen: Some(VarLenRequest {
            seqlens_q: sq,
            seqlens_k: sk,
            max_seqlen_q: 1,
            max_seqlen_k,
            block_table: Some(table),
            page_block_size: Some(page),
            mm_prefix_ranges: None,
        }),
        ..batch_request(None)
    }
}

#[test]
fn selection_picks_tile_head_dim_and_features() {
    let imgs = images();
    let mut rng = common::rng("selection_picks_tile_head_dim_and_features");
    for _ in 0..200 {
        let d = 8 * rng.gen_range(1..=32);
        let h_k = rng.gen_range(1..4);
        let g = rng.gen_range(1..6);
        let s_q = rng.gen_range(1..40);
        let softcap = rng.gen_bool(0.3).then_some(20.0);
        let q = zeros(&[1, s_q, h_k * g, d], DType::F16);
        let kv = zeros(&[1, 50, h_k, d], DType::F16);
        let call = AttnCall::new(&batch_request(softcap), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        let k = select(&call, "gfx1100", RDNA3, imgs).unwrap();
        // The smallest tile that holds d, split tiles included (gfx1100's: 48, 80, 96, 160).
        let tile = [32, 48, 64, 80, 96, 128, 160, 256].into_iter().find(|&t| t >= d as u32).unwrap();
        assert_eq!(k.fwd.block_d, tile, "d {d}");
        assert_eq!(k.fwd.even_d, d as u32 == tile);
        assert_eq!(k.fwd.extras, softcap.is_some());
        let decode = s_q * g <= 16;
        assert_eq!(k.fwd.tile, if decode { Tile::Decode } else { Tile::Prefill }, "s_q {s_q} g {g}");
        // Merges are built at the powers of two only.
        assert_eq!((k.merge.block_d, k.merge.family), ((d.next_power_of_two().max(32)) as u32, Family::Merge), "d {d}");
    }
}

/// Softcap/ALiBi decode took the prefill tile (64-128 query rows for a handful); it takes the
/// decode tile's extras variant now, and the prefill_x tile where a build has none (RDNA from
/// d = 128, kernels/aot.py's decode_extras).
#[test]
fn decode_with_extras_takes_the_decode_tile_where_built() {
    let q = zeros(&[2, 1, 8, 128], DType::F16);
    let kv = zeros(&[2, 300, 2, 128], DType::F16);
    let call = AttnCall::new(&batch_request(Some(30.0)), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let k = select(&call, "gfx1100", RDNA3, images()).unwrap();
    assert_eq!((k.fwd.tile, k.fwd.extras), (Tile::Decode, true));
    let without: Vec<KernelImage> = images().iter().filter(|i| !(i.tile == Tile::Decode && i.extras)).cloned().collect();
    let k = select(&call, "gfx1100", RDNA3, Box::leak(without.into_boxed_slice())).unwrap();
    assert_eq!((k.fwd.tile, k.fwd.extras), (Tile::Prefill, true));
}

/// A decode grid of many programs launches the batched decode tile where the build has it (here
/// for plain flat calls at head-dim tiles 64 and 128, as sm_90 builds it), unsplit;
/// fewer programs, softcap calls, paged K/V and head-dim tiles without one keep the decode tile.
#[test]
fn many_decode_programs_take_the_batched_tile_where_built() {
    let mut with_batched = images().to_vec();
    // Where the build has the batched tile (d = 64 and 128), the split tiles below them have it
    // too (kernels/aot.py: a split tile takes the classes of the power of two above it).
    for block_d in [48, 64, 80, 96, 128] {
        for even in [true, false] {
            with_batched.push(image(Tile::DecodeBatch, Family::Fwd, block_d, even, false, false));
        }
    }
    let imgs: &'static [KernelImage] = Box::leak(with_batched.into_boxed_slice());
    let mut rng = common::rng("many_decode_programs_take_the_batched_tile_where_built");
    for _ in 0..300 {
        let (b, h_k, g, units) = (rng.gen_range(1..80), rng.gen_range(1..9), rng.gen_range(1..5), rng.gen_range(1..140));
        let d = 8 * rng.gen_range(1..=32);
        let softcap = rng.gen_bool(0.2).then_some(20.0);
        let q = zeros(&[b, 1, h_k * g, d], DType::F16);
        let kv = zeros(&[b, 40, h_k, d], DType::F16);
        let call = AttnCall::new(&batch_request(softcap), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        let kernels = select(&call, "gfx1100", RDNA3, imgs).unwrap();
        assert_eq!(kernels.fwd.tile, Tile::Decode);
        let plan = Plan::new(&call, kernels, units).unwrap();
        let built = softcap.is_none() && (33..=128).contains(&d);
        let batched = built && b * h_k >= BATCHED_DECODE_WAVES * units;
        let fwd = plan.kernels.fwd;
        assert_eq!(fwd.tile, if batched { Tile::DecodeBatch } else { Tile::Decode }, "b {b} h_k {h_k} units {units} d {d}");
        assert_eq!((fwd.block_d, fwd.even_d, fwd.extras), (kernels.fwd.block_d, kernels.fwd.even_d, kernels.fwd.extras));
        assert_eq!(plan.grid[..2], [1, (b * h_k) as u32]);
        if batched {
            assert_eq!(plan.num_splits, 1, "{plan:?}");
        }
    }
    // Paged K/V keeps the decode tile however many programs: 64 sequences of 32 keys in pages of
    // 16, 8 k/v heads (512 programs) on 132 units.
    let (b, h_k, page) = (64u32, 8, 16);
    let q = zeros(&[b as usize, 4 * h_k, 128], DType::F16);
    let kv = zeros(&[2 * b as usize, page, h_k, 128], DType::F16);
    let table = Tensor::arange(0u32, 2 * b, &Device::Cpu).unwrap().reshape((b as usize, 2)).unwrap();
    let (sq, sk) = (u32s(&(0..=b).collect::<Vec<_>>()), u32s(&(0..=b).map(|i| 32 * i).collect::<Vec<_>>()));
    let req = paged_decode_request(&sq, &sk, 32, &table, page);
    let paged = AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let plan = Plan::new(&paged, select(&paged, "gfx1100", RDNA3, imgs).unwrap(), 132).unwrap();
    assert_eq!((plan.kernels.fwd.tile, plan.kernels.fwd.paged, plan.grid[1]), (Tile::Decode, true, 512));
}

#[test]
fn what_no_kernel_serves_is_a_clear_error() {
    let q = zeros(&[1, 4, 2, 64], DType::F16);
    let call = AttnCall::new(&batch_request(None), [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap();
    let err = select(&call, "gfx1201", RDNA3, images()).unwrap_err().to_string();
    assert!(err.contains("gfx1201") && err.contains("FLASH_ATTN_ROCM_ARCHS") && err.contains("gfx1100"), "{err}");
    let q32 = zeros(&[1, 4, 2, 64], DType::F32);
    let call = AttnCall::new(&batch_request(None), [DType::F32; 3], q32.layout(), q32.layout(), q32.layout()).unwrap();
    let err = select(&call, "gfx1100", RDNA3, images()).unwrap_err().to_string();
    assert!(err.contains("f16 or bf16"), "{err}");
    // Head dim 512 runs on the 512 tile (issue 57); a build without that tile says which to add.
    let big = zeros(&[1, 4, 2, 512], DType::F16);
    let call = AttnCall::new(&batch_request(None), [DType::F16; 3], big.layout(), big.layout(), big.layout()).unwrap();
    assert_eq!(select(&call, "gfx1100", RDNA3, images()).unwrap().fwd.block_d, 512);
    let up_to_256: &'static [KernelImage] = Box::leak(images().iter().filter(|i| i.block_d <= 256).cloned().collect::<Vec<_>>().into_boxed_slice());
    let err = select(&call, "gfx1100", RDNA3, up_to_256).unwrap_err().to_string();
    assert!(err.contains("head dim 512") && err.contains("FLASH_ATTN_ROCM_TRITON_DIMS holding a tile >= 512"), "{err}");
}

#[test]
fn batch_arguments_for_strided_layouts() {
    let mut rng = common::rng("batch_arguments_for_strided_layouts");
    for _ in 0..50 {
        let (b, s_q, s_k) = (rng.gen_range(1..4), rng.gen_range(1..300), rng.gen_range(1..300));
        let h_k = rng.gen_range(1..4);
        let h = h_k * rng.gen_range(1..4);
        let d = [64, 128][rng.gen_range(0..2)];
        // q head-major (a transposed view); k/v narrowed out of a longer buffer.
        let q = zeros(&[b, h, s_q, d], DType::F16).transpose(1, 2).unwrap();
        let kv = zeros(&[b, s_k + 3, h_k, d], DType::F16).narrow(1, 3, s_k).unwrap();
        let call = AttnCall::new(&batch_request(None), [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
        let kernels = select(&call, "gfx1100", RDNA3, images()).unwrap();
        let plan = Plan::new(&call, kernels, 60).unwrap();
        let a = fwd_args(&call, &BUFFERS, &plan).unwrap();
        let rows = s_q * (h / h_k);
        assert_eq!(plan.grid, [rows.div_ceil(kernels.fwd.block_m as usize) as u32, (b * h_k) as u32, plan.num_splits as u32]);
        assert_eq!((a.q, a.k), (BUFFERS.q as u64, BUFFERS.k as u64 + 3 * (h_k * d) as u64 * 2));
        assert_eq!((a.stride_qb, a.stride_qm, a.stride_qh), ((h * s_q * d) as i64, d as i32, (s_q * d) as i32));
        assert_eq!((a.stride_kb, a.stride_kn, a.stride_kh), (((s_k + 3) * h_k * d) as i64, (h_k * d) as i32, d as i32));
        assert_eq!((a.stride_om, a.stride_oh), ((h * d) as i32, d as i32));
        assert_eq!((a.stride_lb, a.stride_lh), ((h * s_q) as i32, s_q as i32));
        assert_eq!((a.is_varlen, a.seqlen_q, a.seqlen_k, a.rows_per_batch), (0, s_q as i32, s_k as i32, s_q as i32));
        assert_eq!((a.total_rows, a.num_heads, a.num_heads_k, a.head_dim), ((b * s_q) as i32, h as i32, h_k as i32, d as i32));
        // Causal: flash-attn's (max_seqlen_k, 0).
        assert_eq!((a.window_left, a.window_right), (s_k as i32, 0));
        assert_eq!((a.cu_seqlens_q, a.block_table, a.alibi_slopes, a.mm_prefix), (0, 0, 0, 0));
        assert_eq!(a.split_len as usize % kernels.fwd.block_n as usize, 0);
        assert!(plan.num_splits * a.split_len as usize >= s_k);
        let m = merge_args(&a);
        assert_eq!((m.out, m.lse, m.total_rows, m.num_splits), (a.out, a.lse, a.total_rows, a.num_splits));
        let (l, o) = plan.scratch_lens(&call);
        if plan.num_splits > 1 {
            assert_eq!((l, o), (plan.num_splits * b * s_q * h, plan.num_splits * b * s_q * h * d));
        } else {
            assert_eq!((l, o), (0, 0));
        }
    }
}

fn u32s(v: &[u32]) -> Tensor {
    Tensor::new(v, &Device::Cpu).unwrap()
}

#[test]
fn paged_arguments_with_any_page_size_and_a_split_decode() {
    let (h, h_k, d, page) = (8, 2, 128, 7);
    let lens_k = [1000u32, 2001];
    let q = zeros(&[2, h, d], DType::BF16);
    let blocks: usize = lens_k.iter().map(|&l| (l as usize).div_ceil(page)).sum();
    let kv = zeros(&[blocks, page, h_k, d], DType::BF16);
    let max_blocks = 2001usize.div_ceil(page);
    let table = Tensor::arange(0u32, (2 * max_blocks) as u32, &Device::Cpu).unwrap();
    let table = table.minimum(blocks as u32 - 1).unwrap().reshape((2, max_blocks)).unwrap();
    let (sq, sk) = (u32s(&[0, 1, 2]), u32s(&[0, 1000, 3001]));
    let req = paged_decode_request(&sq, &sk, 2001, &table, page);
    let call = AttnCall::new(&req, [DType::BF16; 3], q.layout(), kv.layout(), kv.layout()).unwrap();
    let mut images = images().to_vec();
    images.iter_mut().for_each(|i| i.dtype = KernelDtype::Bf16);
    let kernels = select(&call, "gfx1100", RDNA3, Box::leak(images.into_boxed_slice())).unwrap();
    assert_eq!((kernels.fwd.tile, kernels.fwd.paged), (Tile::Decode, true));
    // 2 sequences x 2 k/v heads = 4 programs on 60 CUs: the keys are split.
    let plan = Plan::new(&call, kernels, 60).unwrap();
    assert!(plan.num_splits > 1, "{plan:?}");
    let buffers = DeviceBuffers { block_table_row_stride: max_blocks, ..BUFFERS };
    let a = fwd_args(&call, &buffers, &plan).unwrap();
    assert_eq!((a.is_varlen, a.rows_per_batch, a.total_rows), (1, 0, 2));
    assert_eq!((a.cu_seqlens_q, a.cu_seqlens_k), (BUFFERS.seqstart_q as u64, BUFFERS.seqstart_k as u64));
    assert_eq!((a.block_table, a.stride_bt, a.page_size), (BUFFERS.block_table as u64, max_blocks as i32, page as i32));
    assert_eq!((a.stride_kb, a.stride_kn, a.stride_kh), ((page * h_k * d) as i64, (h_k * d) as i32, d as i32));
    assert_eq!((a.stride_lb, a.stride_lh), (0, 2));
    assert_eq!((a.o_acc, a.l_acc), (BUFFERS.o_acc as u64, BUFFERS.lse_acc as u64));
    // Without accumulators a split call is refused.
    let err = fwd_args(&call, &DeviceBuffers { o_acc: 0, ..buffers }, &plan).unwrap_err();
    assert!(err.to_string().contains("accumulators"), "{err}");
    let at = FwdArgs::PARAMS.iter().position(|&p| p == "num_splits").unwrap();
    assert_eq!(FwdArgs { num_splits: 3, ..FwdArgs::default() }.values()[at], ArgValue::I32(3));
    // The kernels check the seqlens and table against these bounds.
    assert_eq!((a.kv_rows, a.kv_len_cap, a.num_blocks), (i32::MAX, 2001, blocks as i32));
    // The merge runs over attn_fwd's sequences and k/v heads, one packed row a program.
    assert_eq!(plan.merge_grid, [(h / h_k) as u32, (2 * h_k) as u32, 1]);
    let m = merge_args(&a);
    assert_eq!((m.cu_seqlens_q, m.cu_seqlens_k, m.is_varlen, m.num_heads_k), (a.cu_seqlens_q, a.cu_seqlens_k, 1, h_k as i32));
    assert_eq!((m.kv_rows, m.kv_len_cap, m.seqlen_q), (a.kv_rows, a.kv_len_cap, 1));
}

/// Paged decode programs count two per SM where their shared memory lets two in (each keeps one
/// K/V tile in flight), flat ones and those too large one: b=4, GQA 32/8 over 32k keys on 132
/// SMs splits 8 ways paged (256 programs) and 4 ways flat (128).
#[test]
fn paged_decode_splits_for_two_resident_programs_per_unit() {
    let kernels = |paged: bool, shared: u32| {
        let fwd = KernelImage { target: "sm_90", block_n: 128, shared, ..image(Tile::Decode, Family::Fwd, 128, true, paged, false) };
        let merge = KernelImage { target: "sm_90", ..image(Tile::Merge, Family::Merge, 128, false, false, false) };
        Kernels { fwd: Box::leak(Box::new(fwd)), fwd_b32: None, merge: Box::leak(Box::new(merge)), batched: None, tma: None }
    };
    let (b, s_k, page, h, h_k, d) = (4, 32768, 16, 32, 8, 128);
    let q = zeros(&[b, h, d], DType::F16);
    let kv = Layout::contiguous((b * s_k / page, page, h_k, d));
    let table = Tensor::arange(0u32, (b * s_k / page) as u32, &Device::Cpu).unwrap().reshape((b, s_k / page)).unwrap();
    let (sq, sk) = (u32s(&[0, 1, 2, 3, 4]), u32s(&[0, 32768, 65536, 98304, 131072]));
    let req = paged_decode_request(&sq, &sk, s_k, &table, page);
    let paged = AttnCall::new(&req, [DType::F16; 3], q.layout(), &kv, &kv).unwrap();
    assert_eq!(Plan::new(&paged, kernels(true, 74_240), 132).unwrap().num_splits, 8);
    assert_eq!(Plan::new(&paged, kernels(true, 139_264), 132).unwrap().num_splits, 4);
    let q = zeros(&[b, 1, h, d], DType::F16);
    let kv = Layout::contiguous((b, s_k, h_k, d));
    let flat = AttnCall::new(&batch_request(None), [DType::F16; 3], q.layout(), &kv, &kv).unwrap();
    assert_eq!(Plan::new(&flat, kernels(false, 74_240), 132).unwrap().num_splits, 4);
}

/// A sliding-window decode split the whole cache: at b=1, 32k keys and a window of 4096 the
/// window's keys fell into 3 of 16 splits, and 24 of 132 SMs did the work. `attn_fwd` counts the
/// splits from the query block's first key tile now, and the plan splits the window.
#[test]
fn windowed_decode_splits_the_window_not_the_cache() {
    let fwd = KernelImage { target: "sm_90", block_n: 128, ..image(Tile::Decode, Family::Fwd, 128, true, false, false) };
    let merge = KernelImage { target: "sm_90", ..image(Tile::Merge, Family::Merge, 128, false, false, false) };
    let kernels = Kernels { fwd: Box::leak(Box::new(fwd)), fwd_b32: None, merge: Box::leak(Box::new(merge)), batched: None, tma: None };
    let (s_k, window) = (32768, 4096);
    let q = zeros(&[1, 1, 32, 128], DType::F16);
    let kv = Layout::contiguous((1, s_k, 8, 128));
    let req = Request { window_size_left: Some(window), ..batch_request(None) };
    let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), &kv, &kv).unwrap();
    let plan = Plan::new(&call, kernels, 132).unwrap();
    // 8 programs a split, 16 wanted: the window's 4097 keys and one tile of alignment are 33
    // tiles, in 11 splits of 3 (88 programs; 17 splits of 2 would run a second wave).
    assert_eq!((plan.num_splits, plan.split_len), (11, 384), "{plan:?}");
    assert!(plan.num_splits * plan.split_len <= window + 1 + 2 * 128, "{plan:?}");
}

/// For random windows and shapes, every query block's keys (from its first key tile, as
/// `attn_fwd` counts them) fit in the plan's splits, for every sequence a varlen call of these
/// maxima may hold.
#[test]
fn splits_cover_the_keys_of_every_query_block() {
    let mut rng = common::rng("splits_cover_the_keys_of_every_query_block");
    for _ in 0..300 {
        let (s_q, s_k) = (rng.gen_range(1..40), rng.gen_range(1..6000));
        let (h_k, g) = (rng.gen_range(1..3), rng.gen_range(1..9));
        let side = |rng: &mut rand::rngs::StdRng| match rng.gen_range(0..3) {
            0 => None,
            1 => Some(0),
            _ => Some(rng.gen_range(0..s_k + 10)),
        };
        let req = Request { window_size_left: side(&mut rng), window_size_right: side(&mut rng), ..batch_request(None) };
        let q = zeros(&[1, s_q, h_k * g, 64], DType::F16);
        let kv = Layout::contiguous((1, s_k, h_k, 64));
        let call = AttnCall::new(&req, [DType::F16; 3], q.layout(), &kv, &kv).unwrap();
        let kernels = select(&call, "gfx1100", RDNA3, images()).unwrap();
        let plan = Plan::new(&call, kernels, rng.gen_range(1..300)).unwrap();
        let (block_m, block_n) = (kernels.fwd.block_m as usize, kernels.fwd.block_n as usize);
        let covered = plan.num_splits * plan.split_len;
        for (q_len, k_len) in [(s_q, s_k), (rng.gen_range(1..=s_q), rng.gen_range(0..=s_k))] {
            let rows = q_len * g;
            for first_row in (0..rows).step_by(block_m) {
                let last_row = (first_row + block_m).min(rows) - 1;
                let (lo, _) = call.window.key_range(first_row / g, q_len, k_len);
                let (_, hi) = call.window.key_range(last_row / g, q_len, k_len);
                let start = lo / block_n * block_n;
                assert!(hi <= start + covered, "{q_len}x{k_len} of {s_q}x{s_k}, {:?}, rows {first_row}..: {plan:?}", call.window);
            }
        }
    }
}

/// A varlen request whose seqlens are left unread (the product path: no device-to-host copy).
fn unread_varlen_call(total_q: usize, max_seqlen_q: usize, rows_k: usize, max_seqlen_k: usize) -> AttnCall {
    let (h, h_k, d) = (8, 2, 64);
    let q = zeros(&[total_q, h, d], DType::F16);
    let kv = zeros(&[rows_k, h_k, d], DType::F16);
    // Values are not read where a kernel would check them: then any u32 tensor of batch + 1
    // entries will do, valid or not. Without rows of q none would, so they are read (and
    // valid: no query rows, the keys split between the two sequences).
    let (sq, sk) = if total_q == 0 {
        (u32s(&[0, 0, 0]), u32s(&[0, rows_k as u32 / 2, rows_k as u32]))
    } else {
        (u32s(&[0, 9, 3]), u32s(&[0, 70_000, 1]))
    };
    let req = Request {
        varlen: Some(VarLenRequest {
            seqlens_q: &sq,
            seqlens_k: &sk,
            max_seqlen_q,
            max_seqlen_k,
            block_table: None,
            page_block_size: None,
            mm_prefix_ranges: None,
        }),
        ..batch_request(None)
    };
    AttnCall::on_device(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap()
}

/// Issue 24, item 5: a varlen call with no query rows but many keys planned a split (from
/// max_seqlen_q) with empty accumulators, and the launch refused it. It launches nothing now.
#[test]
fn zero_query_rows_launch_nothing_and_split_nothing() {
    let call = unread_varlen_call(0, 1, 5000, 5000);
    let plan = Plan::new(&call, select(&call, "gfx1100", RDNA3, images()).unwrap(), 60).unwrap();
    assert!(plan.is_empty(), "{plan:?}");
    assert_eq!((plan.num_splits, plan.scratch_lens(&call)), (1, (0, 0)));
    assert_eq!(plan.merge_grid[0], 0);
}

/// Issue 24, item 5: the merge reads the f32 accumulators as 16-byte vectors; a misaligned one
/// is refused like misaligned q/k/v, and so is a launch without a fault word.
#[test]
fn misaligned_accumulators_and_a_missing_fault_word_are_refused() {
    let call = unread_varlen_call(3, 2, 5000, 5000);
    let plan = Plan::new(&call, select(&call, "gfx1100", RDNA3, images()).unwrap(), 60).unwrap();
    assert!(plan.num_splits > 1, "{plan:?}");
    fwd_args(&call, &BUFFERS, &plan).unwrap();
    for buffers in [DeviceBuffers { o_acc: BUFFERS.o_acc + 4, ..BUFFERS }, DeviceBuffers { lse_acc: BUFFERS.lse_acc + 8, ..BUFFERS }] {
        let err = fwd_args(&call, &buffers, &plan).unwrap_err().to_string();
        assert!(err.contains("16-byte aligned"), "{err}");
    }
    let err = fwd_args(&call, &DeviceBuffers { fault: 0, ..BUFFERS }, &plan).unwrap_err().to_string();
    assert!(err.contains("fault word"), "{err}");
}

/// Unread seqlens are bounded on the device by the shapes: the rows of k and max_seqlen_k.
#[test]
fn unread_varlen_calls_pass_the_bounds_the_kernels_check() {
    let call = unread_varlen_call(12, 9, 777, 600);
    let plan = Plan::new(&call, select(&call, "gfx1100", RDNA3, images()).unwrap(), 60).unwrap();
    let a = fwd_args(&call, &BUFFERS, &plan).unwrap();
    assert_eq!((a.is_varlen, a.total_rows, a.seqlen_q, a.seqlen_k), (1, 12, 9, 600));
    assert_eq!((a.kv_rows, a.kv_len_cap, a.num_blocks, a.fault), (777, 600, 0, BUFFERS.fault as u64));
}

#[test]
fn misaligned_views_and_missing_lse_are_refused() {
    // A view starting one element into its storage: rows are not 16-byte aligned.
    let q = zeros(&[1, 65, 2, 64], DType::F16).flatten_all().unwrap().narrow(0, 1, 64 * 2 * 64).unwrap();
    let q = q.reshape((1, 64, 2, 64)).unwrap();
    let call = AttnCall::new(&batch_request(None), [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap();
    let plan = Plan::new(&call, select(&call, "gfx1100", RDNA3, images()).unwrap(), 60).unwrap();
    let err = fwd_args(&call, &BUFFERS, &plan).unwrap_err().to_string();
    assert!(err.contains("16-byte") && err.contains("contiguous"), "{err}");
    let q = zeros(&[1, 64, 2, 64], DType::F16);
    let call = AttnCall::new(&batch_request(None), [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap();
    let err = fwd_args(&call, &DeviceBuffers { lse: 0, ..BUFFERS }, &plan).unwrap_err().to_string();
    assert!(err.contains("LSE"), "{err}");
}

/// The kernels divide key indices by the page size as `_divmod` does (kernels/attention.py):
/// q = umulhi(n, page_magic), then one correction. Exact for every n < 2^31 and page size.
#[test]
fn the_page_magic_divides_exactly() {
    let mut rng = common::rng("the_page_magic_divides_exactly");
    let divmod = |n: u32, d: u32| {
        let magic = flash_attn_rocm::triton::marshal::page_magic(d as usize) as u32;
        let q = ((n as u64 * magic as u64) >> 32) as u32;
        let r = n - q * d;
        if r >= d { (q + 1, r - d) } else { (q, r) }
    };
    let edges = [1u32, 2, 3, 7, 16, 33, 100, 255, 256, 4096, (1 << 20) + 1, i32::MAX as u32];
    for &d in &edges {
        for n in [0u32, 1, d - 1, d, d + 1, (i32::MAX as u32) - 1, i32::MAX as u32] {
            assert_eq!(divmod(n, d), (n / d, n % d), "n {n} d {d}");
        }
    }
    for _ in 0..200_000 {
        let d = if rng.gen_bool(0.5) { rng.gen_range(1..=512) } else { rng.gen_range(1..=i32::MAX as u32) };
        let n = rng.gen_range(0..=i32::MAX as u32);
        assert_eq!(divmod(n, d), (n / d, n % d), "n {n} d {d}");
    }
}
