//! One validation for every backend (issue 56): random calls of every public function's kind
//! (batch, varlen, paged; ALiBi, windows, softcap, prefix ranges; every dtype and layout of the
//! side tensors) and degenerate ones (empty batches, `max_seqlen_q/k == 0`, no rows of q, bad
//! seqlens and block ids, bad shapes), answered by the CPU backend's entry
//! ([`AttnCall::new`]) and by the GPU path's ([`AttnCall::on_device`], then the family choice,
//! the plan and every kernel argument of CK and of the Triton kernels: `plan::work::dry_run`,
//! no GPU). They must agree: the same `Err`, or both accept. Where the GPU path leaves the
//! values to its kernels, the CPU's refusal must be one the kernels report, and a kernel that
//! reads them must run. Where the GPU path refuses what the CPU runs, the reason must be a
//! documented GPU limit (f32, views not aligned to 16 bytes).

mod common;

use candle::{DType, Device, Tensor};
use common::images::images_for;
use flash_attn_rocm::params::{block_table_for_kernels, prefix_ranges_for_kernels, AttnCall, Mode, Request, VarLenRequest};
use flash_attn_rocm::plan::dispatch::{Built, KernelChoice, KernelFamily};
use flash_attn_rocm::plan::work::{dry_run, side_row_strides, DeviceShape, Work, WorkArgs};
use flash_attn_rocm::device::DeviceBuffers;
use flash_attn_rocm::device::DeviceLimits;
use flash_attn_rocm::triton::KernelDtype;
use rand::rngs::StdRng;
use rand::Rng;

const BUFFERS: DeviceBuffers = common::outcome::FAKE_BUFFERS;
const LIMITS: DeviceLimits = DeviceLimits { max_shared_per_block: 64 * 1024, max_threads_per_block: 1024, host_native_atomics: true };

/// The tensors and arguments of one drawn call, on the CPU (q/k/v are zeros: only their
/// layouts matter here).
struct Draw {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    slopes: Option<Tensor>,
    varlen: Option<Ragged>,
    scale: f32,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
}

/// The varlen part: seqlens, maxima, and paging.
struct Ragged {
    cu_q: Tensor,
    cu_k: Tensor,
    max_q: usize,
    max_k: usize,
    table: Option<Tensor>,
    page: Option<usize>,
    ranges: Option<Tensor>,
}

impl Draw {
    fn request(&self) -> Request<'_> {
        Request {
            softmax_scale: self.scale,
            alibi_slopes: self.slopes.as_ref(),
            window_size_left: self.window.0,
            window_size_right: self.window.1,
            softcap: self.softcap,
            varlen: self.varlen.as_ref().map(|r| VarLenRequest {
                seqlens_q: &r.cu_q,
                seqlens_k: &r.cu_k,
                max_seqlen_q: r.max_q,
                max_seqlen_k: r.max_k,
                block_table: r.table.as_ref(),
                page_block_size: r.page,
                mm_prefix_ranges: r.ranges.as_ref(),
            }),
        }
    }

    fn dtypes(&self) -> [DType; 3] {
        [self.q.dtype(), self.k.dtype(), self.v.dtype()]
    }
}

fn zeros(dims: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(dims, dtype, &Device::Cpu).unwrap()
}

/// `dims` of `dtype`, sometimes stored otherwise: `(b, h, s, d)` viewed as `(b, s, h, d)`
/// (`transpose` swaps dims 1 and 2 of a rank-4 view), rows narrowed out of a longer buffer
/// (dim `rows`), or starting one element into its storage (not 16-byte aligned).
fn view(rng: &mut StdRng, dims: &[usize], dtype: DType, rows: usize) -> Tensor {
    match rng.gen_range(0..20) {
        0..=4 if dims.len() == 4 => zeros(&[dims[0], dims[2], dims[1], dims[3]], dtype).transpose(1, 2).unwrap(),
        5..=8 => {
            let mut longer = dims.to_vec();
            longer[rows] += 3;
            zeros(&longer, dtype).narrow(rows, rng.gen_range(0..=3), dims[rows]).unwrap()
        }
        9 => {
            let n: usize = dims.iter().product();
            zeros(&[n + 1], dtype).narrow(0, 1, n).unwrap().reshape(dims).unwrap()
        }
        _ => zeros(dims, dtype),
    }
}

/// 1 of `n` times.
fn one_in(rng: &mut StdRng, n: u32) -> bool {
    rng.gen_ratio(1, n)
}

/// A u32 or i32 `(rows, cols)` table of `values`, sometimes a strided view (narrowed out of
/// wider rows, or transposed).
fn id_table(rng: &mut StdRng, values: &[Vec<i64>], cols: usize, as_i32: bool) -> Tensor {
    let rows = values.len();
    let flat = |width: usize, at: &dyn Fn(usize, usize) -> Option<i64>| -> Vec<i64> {
        (0..rows).flat_map(|r| (0..width).map(move |c| at(r, c).unwrap_or(7))).collect()
    };
    let get = |r: usize, c: usize| values[r].get(c).copied();
    let make = |data: Vec<i64>, dims: &[usize]| match as_i32 {
        true => Tensor::from_vec(data.iter().map(|&x| x as i32).collect::<Vec<_>>(), dims, &Device::Cpu).unwrap(),
        false => Tensor::from_vec(data.iter().map(|&x| x as u32).collect::<Vec<_>>(), dims, &Device::Cpu).unwrap(),
    };
    match rng.gen_range(0..4) {
        0 => make(flat(cols + 2, &get), &[rows, cols + 2]).narrow(1, 0, cols).unwrap(),
        1 => {
            let data: Vec<i64> = (0..cols).flat_map(|c| (0..rows).map(move |r| get(r, c).unwrap_or(7))).collect();
            make(data, &[cols, rows]).t().unwrap()
        }
        _ => make(flat(cols, &get), &[rows, cols]),
    }
}

fn draw(rng: &mut StdRng) -> Draw {
    let dtype = [DType::F16, DType::BF16, DType::F16, DType::BF16, DType::F32][rng.gen_range(0..5)];
    let d = match rng.gen_range(0..30) {
        0 => 12,
        1 => 520,
        2 => 264,
        3 => 512,
        _ => [8, 16, 40, 64, 80, 96, 128, 160, 200, 256][rng.gen_range(0..10)],
    };
    let h_k = rng.gen_range(1..=3);
    let h = h_k * rng.gen_range(1..=3) + usize::from(one_in(rng, 30));
    let k_dtype = if one_in(rng, 30) { DType::F32 } else { dtype };
    let scale = match rng.gen_range(0..40) {
        0 => 0.0,
        1 => -0.3,
        2 => f32::NAN,
        3 => 1e-40,
        4 => 8.0,
        _ => 1.0 / (d as f32).sqrt(),
    };
    let window = match rng.gen_range(0..10) {
        0..=3 => (None, None),
        4..=6 => (None, Some(0)),
        _ => (rng.gen_bool(0.7).then(|| rng.gen_range(0..50)), rng.gen_bool(0.7).then(|| rng.gen_range(0..50))),
    };
    let softcap = match rng.gen_range(0..20) {
        0 => Some([0.0, -2.0, f32::NAN][rng.gen_range(0..3)]),
        1..=4 => Some(rng.gen_range(1.0..30.0)),
        _ => None,
    };
    let mode = rng.gen_range(0..3);
    // The paged functions take no ALiBi slopes.
    let slopes = (mode != 2 && one_in(rng, 4)).then(|| zeros(&[if one_in(rng, 20) { h + 1 } else { h }], DType::F32));
    let (q, k, v, varlen) = match mode {
        0 => {
            // Now and then a decode or short prefill over many keys: the plans split the keys
            // (Triton's merge, CK's split-KV is for paged calls only).
            let (b, s_q, s_k) = match one_in(rng, 6) {
                true => (rng.gen_range(1..=2), rng.gen_range(1..=4), rng.gen_range(500..=4000)),
                false => (rng.gen_range(0..=3), rng.gen_range(0..=40), rng.gen_range(0..=60)),
            };
            let q = view(rng, &[b, s_q, h, d], dtype, 1);
            let k = view(rng, &[b, s_k, h_k, d], k_dtype, 1);
            let v = view(rng, &[b, s_k, h_k, d], dtype, 1);
            (q, k, v, None)
        }
        _ => ragged(rng, (h, h_k, d), (dtype, k_dtype), mode == 2),
    };
    Draw { q, k, v, slopes, varlen, scale, window, softcap }
}

/// Cumulative sums of `lens`, from 0.
fn cumulative(lens: &[u32]) -> Vec<u32> {
    std::iter::once(0).chain(lens.iter().scan(0, |total, len| { *total += len; Some(*total) })).collect()
}

/// A maximum for `lens`: mostly the longest, sometimes 0, shorter or longer.
fn maximum(rng: &mut StdRng, lens: &[u32]) -> usize {
    let longest = lens.iter().copied().max().unwrap_or(0) as usize;
    match rng.gen_range(0..12) {
        0 => 0,
        1 => longest.saturating_sub(1),
        2 => longest + rng.gen_range(1..20),
        _ => longest,
    }
}

/// Lengths of `batch` sequences up to `most`, some of them empty.
fn lengths(rng: &mut StdRng, batch: usize, most: u32) -> Vec<u32> {
    (0..batch).map(|_| if one_in(rng, 4) { 0 } else { rng.gen_range(0..=most) }).collect()
}

/// A varlen or paged call's q/k/v and side tensors, with a bad value now and then.
fn ragged(rng: &mut StdRng, (h, h_k, d): (usize, usize, usize), (dtype, k_dtype): (DType, DType), paged: bool) -> (Tensor, Tensor, Tensor, Option<Ragged>) {
    let batch = rng.gen_range(1..=4);
    let most_k = if one_in(rng, 6) { 3000 } else { 70 };
    let (lens_q, lens_k) = (lengths(rng, batch, 20), lengths(rng, batch, most_k));
    let (mut cu_q, mut cu_k) = (cumulative(&lens_q), cumulative(&lens_k));
    let rows_q = match rng.gen_range(0..15) {
        0 => 0,
        1 => cu_q[batch].saturating_sub(1) as usize,
        _ => cu_q[batch] as usize,
    };
    if rows_q == 0 && one_in(rng, 2) {
        cu_q.iter_mut().for_each(|c| *c = 0);
    }
    let (max_q, max_k) = (maximum(rng, &lens_q), maximum(rng, &lens_k));
    match rng.gen_range(0..25) {
        0 => cu_q.swap(batch - 1, batch),
        1 => cu_k.swap(batch - 1, batch),
        2 => cu_q.truncate(1),
        3 => {
            cu_k.pop();
        }
        _ => {}
    }
    let cu_q_tensor = match one_in(rng, 40) {
        true => Tensor::new(cu_q.iter().map(|&c| c as i32).collect::<Vec<_>>(), &Device::Cpu).unwrap(),
        false => Tensor::new(cu_q, &Device::Cpu).unwrap(),
    };
    let q = view(rng, &[rows_q, h, d], dtype, 0);
    let ranges = one_in(rng, 6).then(|| prefix_ranges(rng, batch));
    let (k, v, table, page) = if paged {
        let page = [1, 7, 16, 128, 256][rng.gen_range(0..5)];
        let blocks: Vec<usize> = lens_k.iter().map(|&l| (l as usize).div_ceil(page)).collect();
        let num_blocks = blocks.iter().sum::<usize>().max(1) + rng.gen_range(0..3);
        let cols = (blocks.iter().copied().max().unwrap_or(0) + rng.gen_range(0..3)).saturating_sub(usize::from(one_in(rng, 25)));
        let mut ids: Vec<Vec<i64>> = (0..batch).map(|_| (0..cols).map(|_| rng.gen_range(0..num_blocks) as i64).collect()).collect();
        if one_in(rng, 12) {
            let b = rng.gen_range(0..batch);
            if blocks[b] > 0 && blocks[b] <= cols {
                ids[b][rng.gen_range(0..blocks[b])] = if one_in(rng, 2) { -1 } else { (num_blocks + rng.gen_range(0..5)) as i64 };
            }
        }
        let as_i32 = one_in(rng, 2);
        let table = id_table(rng, &ids, cols, as_i32);
        let k = view(rng, &[num_blocks, page, h_k, d], k_dtype, 1);
        let v = view(rng, &[num_blocks, page, h_k, d], dtype, 1);
        let page_arg = match rng.gen_range(0..30) {
            0 => None,
            1 => Some(page + 1),
            _ => Some(page),
        };
        (k, v, Some(table), page_arg)
    } else {
        let rows_k = if one_in(rng, 15) { cu_k.last().unwrap().saturating_sub(1) } else { *cu_k.last().unwrap() } as usize;
        (view(rng, &[rows_k, h_k, d], k_dtype, 0), view(rng, &[rows_k, h_k, d], dtype, 0), None, None)
    };
    let cu_k = Tensor::new(cu_k, &Device::Cpu).unwrap();
    (q, k, v, Some(Ragged { cu_q: cu_q_tensor, cu_k, max_q, max_k, table, page, ranges }))
}

/// `(batch, r, 2)` i32 ranges, sometimes with each sequence's pairs apart (narrowed out of
/// triples), sometimes with rows further apart than `2 r` (narrowed out of more ranges).
fn prefix_ranges(rng: &mut StdRng, batch: usize) -> Tensor {
    let r = rng.gen_range(1..=3);
    let width = if one_in(rng, 2) { 3 } else { 2 };
    let stored = r + usize::from(one_in(rng, 2));
    let data: Vec<i32> = (0..batch * stored * width).map(|_| rng.gen_range(0..40)).collect();
    let t = Tensor::from_vec(data, &[batch, stored, width], &Device::Cpu).unwrap();
    t.narrow(1, 0, r).unwrap().narrow(2, 0, 2).unwrap()
}

/// The row strides the planner gives the kernels before anything is allocated
/// ([`side_row_strides`]) are those of the side tensors the glue attaches.
fn check_side_row_strides(what: &str, req: &Request<'_>, call: &AttnCall) {
    let planned = side_row_strides(req, call);
    let table = req.varlen.and_then(|v| v.block_table).map(|t| block_table_for_kernels(t).unwrap().stride()[0]);
    let ranges = call.mm_prefix.as_ref().map(|m| prefix_ranges_for_kernels(m).unwrap().stride()[0]);
    assert_eq!(planned.block_table_row_stride, table.unwrap_or(0), "{what}: the block table's row stride");
    assert_eq!(planned.mm_prefix_row_stride, ranges.unwrap_or(0), "{what}: the prefix ranges' row stride");
}

/// The AMD devices the GPU path is asked about: an MI300X with CK (every tile) and Triton, and an
/// RX 7900 XTX with Triton only.
fn devices() -> [(DeviceShape<'static>, Built<'static>); 2] {
    let triton = images_for(&["gfx942", "gfx1100"], &[KernelDtype::F16, KernelDtype::Bf16]);
    let ck = Built { ck_archs: "gfx942", ck_hdims: "32,64,128,256", ck_splitkv_hdims: "64,128,256", triton };
    let rdna = Built { ck_archs: "", ck_hdims: "", ck_splitkv_hdims: "", triton };
    [(DeviceShape { arch: "gfx942", limits: LIMITS, units: 304 }, ck), (DeviceShape { arch: "gfx1100", limits: LIMITS, units: 96 }, rdna)]
}

/// The documented reason the GPU kernels cannot run a call the CPU backend runs, as its error
/// says it, or `None` when a GPU must run it.
fn gpu_limit(call: &AttnCall) -> Option<&'static str> {
    let aligned = [&call.q, &call.k, &call.v]
        .iter()
        .all(|v| [v.offset, v.batch_stride, v.row_stride, v.head_stride].iter().all(|x| x % 8 == 0));
    match () {
        _ if call.dtype == DType::F32 => Some("f16 or bf16"),
        _ if !aligned => Some("16-byte"),
        _ => None,
    }
}

/// What the draws exercised on the GPU path: split plans of each family, and calls run without
/// an LSE buffer.
#[derive(Default, Debug)]
struct Tally {
    triton_splits: usize,
    ck_splits: usize,
    ck_without_lse: usize,
}

/// The GPU path's answer for `call` on every device and under every `FLASH_ATTN_ROCM_KERNELS`
/// choice, checked: `auto` and `triton` run what the CPU runs but for a GPU limit; `ck`
/// refuses only in the family choice, naming why (on a device without CK: that it was not
/// built for it), or runs it; `auto` runs CK's answer where CK serves the call, else Triton's.
fn check_gpu_path(what: &str, req: &Request<'_>, call: &AttnCall, want_lse: bool, tally: &mut Tally) {
    for (device, built) in devices() {
        let runs = [KernelChoice::Auto, KernelChoice::Triton, KernelChoice::Ck]
            .map(|choice| (choice, dry_run(req, call, device, choice, &built, &BUFFERS, want_lse)));
        for (choice, run) in &runs {
            let label = format!("{what}\n  on {} under {choice:?}, want_lse {want_lse}", device.arch);
            match (run, choice, gpu_limit(call)) {
                (Ok((family, work, args)), _, None) => check_work(&label, call, *family, work, args, want_lse),
                // Nothing to compute: no kernel, so no kernel's limit.
                (Ok((family, work, args)), _, Some(_)) if !work.launches() => check_work(&label, call, *family, work, args, want_lse),
                (Err(e), KernelChoice::Ck, _) => {
                    let e = e.to_string();
                    assert!(e.starts_with("flash-attn-rocm: FLASH_ATTN_ROCM_KERNELS=ck: "), "{label}: CK failed past its choice: {e}");
                    if built.ck_archs.is_empty() {
                        assert!(e.contains(&format!("not {}", device.arch)), "{label}: CK refused, not for want of a build: {e}");
                    }
                }
                (Err(e), _, Some(limit)) => assert!(e.to_string().contains(limit), "{label}: refused, not for {limit:?}: {e}"),
                (Err(e), _, None) => panic!("{label}: the CPU runs it, the GPU path refuses it: {e}"),
                (Ok(_), KernelChoice::Ck, Some(limit)) => panic!("{label}: CK took a call beyond its limit ({limit})"),
                (Ok(_), _, Some(limit)) => panic!("{label}: the GPU path took a call beyond its limit ({limit})"),
            }
        }
        let [(_, auto), (_, triton), (_, ck)] = &runs;
        let label = format!("{what}\n  on {}", device.arch);
        let family = |run: &Result<(KernelFamily, Work, _), _>| run.as_ref().map(|r| format!("{:?} {:?}", r.0, r.1)).map_err(|_| ());
        match ck {
            Ok(_) => assert_eq!(family(auto), family(ck), "{label}: auto does not run what CK serves"),
            Err(_) => assert_eq!(family(auto).ok(), family(triton).ok(), "{label}: auto does not run Triton where CK cannot serve"),
        }
        for (_, run) in runs {
            match run {
                Ok((_, Work::Triton(plan), _)) if plan.num_splits > 1 => tally.triton_splits += 1,
                Ok((_, Work::Ck { split: Some(_), .. }, _)) => tally.ck_splits += 1,
                _ => {}
            }
            if let Ok((_, _, WorkArgs::Ck { params, .. })) = run {
                tally.ck_without_lse += usize::from(!params.has_lse);
            }
        }
    }
}

/// What a planned call launches: a kernel for every sequence that has query rows and keys (or,
/// with the values unread, for every call with rows of q and both maxima above 0), and the CK
/// guard for every call with seqlens.
fn check_work(label: &str, call: &AttnCall, family: KernelFamily, work: &Work, args: &WorkArgs, want_lse: bool) {
    let computes = match call.seqs.unread() {
        None => call.seqs.iter().any(|s| s.q_len > 0 && s.k_len > 0),
        Some(_) => true,
    };
    match (family, work) {
        (KernelFamily::Ck, Work::Nothing) => assert!(!computes, "{label}: CK launches nothing for {:?}", call.seqs),
        (KernelFamily::Ck, Work::Ck { guard, split }) => {
            assert!(computes, "{label}: CK launches for a call without work");
            assert_eq!(*guard, call.mode != Mode::Batch, "{label}: the guard");
            assert_eq!(split.is_some(), call.seqs.paging.is_some(), "{label}: the split-KV plan");
        }
        (KernelFamily::Triton(_), Work::Triton(plan)) => {
            let rows = call.seqs.unread().is_some() || (call.total_q > 0 && call.max_seqlen_q > 0 && call.batch > 0);
            assert_eq!(work.launches(), rows, "{label}: the Triton grid");
            if let WorkArgs::Triton(args) = args {
                let merged = args.merge.as_ref().map(|m| (m.num_splits, m.lse, m.out));
                let expected = (plan.num_splits > 1).then_some((plan.num_splits as i32, BUFFERS.lse as u64, BUFFERS.out as u64));
                assert_eq!(merged, expected, "{label}: the merge of {} splits", plan.num_splits);
            }
        }
        (family, work) => panic!("{label}: {family:?} planned {work:?}"),
    }
    match args {
        WorkArgs::Nothing => assert!(!work.launches(), "{label}: {work:?} without arguments"),
        WorkArgs::Triton(_) => assert!(matches!(work, Work::Triton(_)), "{label}: Triton arguments for {work:?}"),
        WorkArgs::Ck { guard, params } => {
            assert!(matches!(work, Work::Ck { .. }), "{label}: CK arguments for {work:?}");
            assert_eq!(guard.is_some(), call.mode != Mode::Batch, "{label}: the guard's arguments");
            // The caller's LSE buffer receives the LSE; without one CK takes a variant that writes none,
            // or scratch where the build has only LSE-writing ones.
            if want_lse {
                assert!(params.has_lse && params.lse_ptr == BUFFERS.lse, "{label}: CK's LSE is not the caller's buffer");
            }
        }
    }
}

/// The kinds of refusal of the CPU's entry that the GPU kernels find in the values themselves
/// and report to the call's fault word (`params::faults`): a sequence that steps back, passes
/// the rows, outgrows its maximum or its block-table row, or a block id outside the cache.
fn reported_by_the_kernels(err: &str) -> bool {
    let kinds: [&[&str]; 5] = [
        &["must be non-decreasing"],
        &["longer than max_seqlen"],
        &["points past the end of"],
        &["needs", "block_table has", "columns"],
        &["is out of range for"],
    ];
    kinds.iter().any(|kind| kind.iter().all(|part| err.contains(part)))
}

/// The first line of an error (a backtrace may follow).
fn first_line(e: &candle::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

#[test]
fn every_backend_accepts_and_refuses_a_call_alike() {
    let mut rng = common::rng("every_backend_accepts_and_refuses_a_call_alike");
    let (mut accepted, mut refused, mut left_to_kernels) = (0, 0, 0);
    let mut tally = Tally::default();
    for trial in 0..3000 {
        let draw = draw(&mut rng);
        let req = draw.request();
        let want_lse = one_in(&mut rng, 2);
        let what = format!(
            "trial {trial}: q {:?} {:?} k {:?} {:?} {:?}, scale {}, window {:?}, softcap {:?}, alibi {:?}, varlen {:?}",
            draw.q.dims(),
            draw.q.stride(),
            draw.k.dims(),
            draw.k.stride(),
            draw.dtypes(),
            draw.scale,
            draw.window,
            draw.softcap,
            draw.slopes.as_ref().map(Tensor::dims),
            draw.varlen.as_ref().map(describe)
        );
        let on_host = AttnCall::new(&req, draw.dtypes(), draw.q.layout(), draw.k.layout(), draw.v.layout());
        let on_device = AttnCall::on_device(&req, draw.dtypes(), draw.q.layout(), draw.k.layout(), draw.v.layout());
        match (on_host, on_device) {
            (Err(host), Err(device)) => {
                refused += 1;
                assert_eq!(first_line(&host), first_line(&device), "{what}");
            }
            (Ok(host), Ok(device)) => {
                accepted += 1;
                if device.seqs.unread().is_none() {
                    assert_eq!(host.seqs.iter().collect::<Vec<_>>(), device.seqs.iter().collect::<Vec<_>>(), "{what}");
                }
                check_side_row_strides(&what, &req, &host);
                check_gpu_path(&what, &req, &host, want_lse, &mut tally);
                check_gpu_path(&what, &req, &device, want_lse, &mut tally);
            }
            (Err(host), Ok(device)) => {
                left_to_kernels += 1;
                let host = first_line(&host);
                assert!(device.seqs.unread().is_some(), "{what}: the CPU refuses ({host}), the GPU path read the values and took them");
                assert!(reported_by_the_kernels(&host), "{what}: the CPU refuses ({host}), no GPU kernel checks that");
                check_gpu_path(&what, &req, &device, want_lse, &mut tally);
            }
            (Ok(_), Err(device)) => panic!("{what}: the CPU takes it, the GPU path refuses: {device}"),
        }
    }
    eprintln!("{accepted} accepted, {refused} refused by both, {left_to_kernels} left to the kernels' checks; {tally:?}");
    assert!(accepted > 600 && refused > 300 && left_to_kernels > 100, "the draw covers each outcome");
    assert!(tally.triton_splits > 100 && tally.ck_splits > 50 && tally.ck_without_lse > 50, "the draw covers split plans and CK without an LSE: {tally:?}");
}

fn describe(r: &Ragged) -> String {
    let values = |t: &Tensor| match t.dtype() {
        DType::U32 => format!("{:?}", t.to_vec1::<u32>().unwrap()),
        other => format!("{other:?}"),
    };
    format!(
        "q {} k {} max ({}, {}), table {:?}, page {:?}, ranges {:?}",
        values(&r.cu_q),
        values(&r.cu_k),
        r.max_q,
        r.max_k,
        r.table.as_ref().map(|t| (t.dtype(), t.dims().to_vec(), t.stride())),
        r.page,
        r.ranges.as_ref().map(|t| (t.dims().to_vec(), t.stride()))
    )
}

/// Issue 56: the GPU kernels read a block-table row as consecutive ids. A strided table of either
/// dtype (narrowed from a wider one, transposed) reaches them as a copy with the same ids and
/// consecutive rows; i32 tables failed on Candle CUDA, which has no strided i32 copy.
#[test]
fn strided_block_tables_of_both_dtypes_reach_the_kernels_as_the_same_ids() {
    let mut rng = common::rng("strided_block_tables_of_both_dtypes_reach_the_kernels_as_the_same_ids");
    for _ in 0..200 {
        let (rows, cols) = (rng.gen_range(1..6), rng.gen_range(1..9));
        let ids: Vec<Vec<i64>> = (0..rows).map(|_| (0..cols).map(|_| rng.gen_range(0..1000)).collect()).collect();
        let as_i32 = one_in(&mut rng, 2);
        let table = id_table(&mut rng, &ids, cols, as_i32);
        let copy = block_table_for_kernels(&table).unwrap();
        assert_eq!(copy.dtype(), table.dtype());
        assert!(cols == 1 || copy.stride()[1] == 1, "{:?} -> {:?}", table.stride(), copy.stride());
        let read: Vec<Vec<i64>> = match as_i32 {
            true => copy.to_vec2::<i32>().unwrap().into_iter().map(|r| r.into_iter().map(i64::from).collect()).collect(),
            false => copy.to_vec2::<u32>().unwrap().into_iter().map(|r| r.into_iter().map(i64::from).collect()).collect(),
        };
        assert_eq!(read, ids, "{:?} {:?}", table.dtype(), table.stride());
    }
}
