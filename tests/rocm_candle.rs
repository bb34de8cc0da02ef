//! The ROCm backend on a real AMD GPU, through Candle: every public function (candle-flash-attn's
//! eleven, `FlashAttn::forward_with_lse` and the `*_with_lse` functions) runs on
//! `Device::new_rocm(0)` with f16 and bf16 inputs, and again on the CPU backend with the same
//! inputs. Both outputs must pass the CPU parity tests' rule against the f64 reference
//! (`max|out - ref| <= 2 * max|naive_lowprec - ref| + eps`), and the GPU LSE must match the CPU's.
//! Calls CK cannot serve must return an `Err`.
//!
//! Build: `--features candle-rocm` with candle-core patched to PR #3801 and its `rocm` feature on
//! (see the README). The default kernel set (head dims 64 and 128, fp16 and bf16, paged kernels)
//! serves every case here; the batch and varlen LSE cases also need `FLASH_ATTN_ROCM_LSE=1`, and
//! without it they check that the call fails naming the missing LSE kernel.
//! Without an AMD GPU every test prints why it skips, and passes.
#![cfg(feature = "candle-rocm")]

mod common;

use candle::{DType, Device, IndexOp, Result, Tensor};
use common::*;
use flash_attn_rocm as fa;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

const DTYPES: [DType; 2] = [DType::F16, DType::BF16];
/// GPU LSE vs CPU LSE, relative to `1 + |lse|`. Both accumulate in f32 from the same inputs and
/// agree to about 1e-5; one key wrongly masked in or out moves an LSE by about `1 / s_k`, several
/// times this tolerance at the lengths used here.
const LSE_TOL: f64 = 2e-4;
/// CPU LSE vs the f64 reference, as in the CPU parity tests.
const CPU_LSE_TOL: f64 = 1e-4;

/// Device 0, or `None` after printing why this machine cannot run `test`.
fn gpu(test: &str) -> Option<Device> {
    let count = match fa::rocm::device_count() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("{test}: skipped, HIP cannot list devices: {e}");
            return None;
        }
    };
    if count == 0 {
        eprintln!("{test}: skipped, HIP reports no AMD GPU on this machine");
        return None;
    }
    eprintln!(
        "{test}: {count} GPU(s); kernels built for {}",
        fa::rocm::BUILD_INFO
    );
    // HIP sees a GPU: failing to open it is a failure, not a reason to skip.
    Some(Device::new_rocm(0).unwrap_or_else(|e| panic!("{test}: Device::new_rocm(0) failed: {e}")))
}

/// Whether the library has LSE-writing kernels for this layout. The split-KV kernels behind
/// paged K/V always write it; batch and varlen kernels only with `FLASH_ATTN_ROCM_LSE=1`.
fn lse_kernels_built(paged: bool) -> bool {
    paged || fa::rocm::BUILD_INFO.contains("lse true")
}

fn to_cpu(t: &Tensor) -> Tensor {
    t.to_device(&Device::Cpu).unwrap()
}

/// What a public function returns: the output, and the LSE for the LSE variants.
type Outcome = Result<(Tensor, Option<Tensor>)>;

/// The f64 reference of one call and the naive low-precision output.
struct Expected {
    exact: Vec<f64>,
    exact_lse: Vec<f64>,
    naive: Vec<f64>,
}

/// The reference over `seqs`, output rows back to back. LSE: `(b, h, s_q)` (one block per
/// sequence) in batch mode, `(h, total_q)` when `varlen`.
fn expected(
    seqs: &[SeqData],
    opts: &[RefOpts],
    (h, h_k, d): (usize, usize, usize),
    dtype: DType,
    varlen: bool,
) -> Expected {
    let total_q: usize = seqs.iter().map(|s| s.s_q).sum();
    let mut e = Expected {
        exact: vec![],
        exact_lse: vec![f64::NAN; h * total_q],
        naive: vec![],
    };
    let mut row0 = 0;
    for (seq, o) in seqs.iter().zip(opts) {
        let (out, lse) = reference(seq, h, h_k, d, o, Precision::Exact);
        e.exact.extend(out);
        e.naive
            .extend(reference(seq, h, h_k, d, o, Precision::Naive(dtype)).0);
        for head in 0..h {
            let dst = if varlen {
                head * total_q + row0
            } else {
                row0 * h + head * seq.s_q
            };
            e.exact_lse[dst..][..seq.s_q].copy_from_slice(&lse[head * seq.s_q..][..seq.s_q]);
        }
        row0 += seq.s_q;
    }
    e
}

/// Runs `f` on the CPU tensors `args` and on copies of them on `dev` (same layouts: strided
/// stays strided), then checks both outputs against `exp` and the GPU LSE against the CPU's.
fn check_gpu_vs_cpu(
    what: &str,
    dev: &Device,
    args: &[&Tensor],
    exp: &Expected,
    f: impl Fn(&[Tensor]) -> Outcome,
) {
    let dtype = args[0].dtype();
    let cpu_args: Vec<Tensor> = args.iter().map(|&t| t.clone()).collect();
    let gpu_args: Vec<Tensor> = args.iter().map(|t| t.to_device(dev).unwrap()).collect();
    let (cpu_out, cpu_lse) = f(&cpu_args).unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    let (gpu_out, gpu_lse) = f(&gpu_args).unwrap_or_else(|e| panic!("{what}: rocm: {e}"));
    assert!(gpu_out.device().is_rocm(), "{what}: output left the GPU");
    assert_eq!(gpu_out.dims(), args[0].dims(), "{what}: output dims");
    assert_eq!(gpu_out.dtype(), dtype, "{what}: output dtype");
    assert_close(
        &format!("{what} [cpu]"),
        &values(&cpu_out),
        &exp.exact,
        &exp.naive,
        dtype,
    );
    assert_close(
        &format!("{what} [rocm]"),
        &values(&to_cpu(&gpu_out)),
        &exp.exact,
        &exp.naive,
        dtype,
    );
    match (cpu_lse, gpu_lse) {
        (None, None) => {}
        (Some(cpu_lse), Some(gpu_lse)) => {
            assert_eq!(gpu_lse.dims(), cpu_lse.dims(), "{what}: lse dims");
            assert_eq!(gpu_lse.dtype(), DType::F32, "{what}: lse dtype");
            let cpu_lse = values(&cpu_lse);
            assert_lse_close(
                &format!("{what} [cpu lse]"),
                &cpu_lse,
                &exp.exact_lse,
                CPU_LSE_TOL,
            );
            assert_lse_close(
                &format!("{what} [rocm lse vs cpu]"),
                &values(&to_cpu(&gpu_lse)),
                &cpu_lse,
                LSE_TOL,
            );
        }
        _ => unreachable!("{what}: the same function returned an LSE on one device only"),
    }
}

/// Runs `f` on copies of `args` on `dev` and checks that it fails with a message containing
/// `needle`.
fn check_refused(
    what: &str,
    dev: &Device,
    args: &[&Tensor],
    needle: &str,
    f: impl Fn(&[Tensor]) -> Outcome,
) {
    let gpu_args: Vec<Tensor> = args.iter().map(|t| t.to_device(dev).unwrap()).collect();
    match f(&gpu_args) {
        Ok(_) => panic!("{what}: the ROCm backend accepted a call CK cannot serve"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "{what}: error `{msg}` does not mention `{needle}`"
            );
        }
    }
}

/// An LSE variant: compared with the CPU when the kernels exist, else it must fail naming them.
fn check_lse_variant(
    what: &str,
    dev: &Device,
    args: &[&Tensor],
    exp: &Expected,
    paged: bool,
    f: impl Fn(&[Tensor]) -> Outcome,
) {
    if lse_kernels_built(paged) {
        check_gpu_vs_cpu(what, dev, args, exp, f);
    } else {
        eprintln!("{what}: LSE kernels not built (FLASH_ATTN_ROCM_LSE=1): checking the refusal");
        check_refused(what, dev, args, "lse on", f);
    }
}

fn out_only(t: Result<Tensor>) -> Outcome {
    t.map(|t| (t, None))
}

fn with_lse((out, lse): (Tensor, Tensor)) -> (Tensor, Option<Tensor>) {
    (out, Some(lse))
}

fn slopes(rng: &mut StdRng, h: usize) -> Tensor {
    (randn(rng, &[h], DType::F32).abs().unwrap() * 0.3).unwrap()
}

fn opts(
    scale: f32,
    softcap: Option<f32>,
    slopes: Option<&Tensor>,
    (left, right): (Option<usize>, Option<usize>),
    max_seqlen_k: usize,
) -> RefOpts {
    RefOpts {
        scale: scale as f64,
        softcap: softcap.map(f64::from),
        alibi: slopes.map(values),
        window_left: left,
        window_right: right,
        max_seqlen_k,
        mm_prefix: vec![],
    }
}

type Window = (Option<usize>, Option<usize>);
const NONE: Window = (None, None);
const CAUSAL: Window = (None, Some(0));

fn is_causal(w: Window) -> bool {
    w == CAUSAL
}

/// Whether the window is expressible as the `causal` flag of the non-windowed functions.
fn is_plain(w: Window) -> bool {
    w == NONE || is_causal(w)
}

// ---------------------------------------------------------------- batch layout

#[derive(Debug, Clone, Copy)]
struct BatchCase {
    b: usize,
    s_q: usize,
    s_k: usize,
    h: usize,
    h_k: usize,
    d: usize,
    window: Window,
    alibi: bool,
    softcap: Option<f32>,
    transposed: bool,
}

/// Each row picks one batch function (see `batch_call`): plain, causal with more queries than
/// keys (leading rows see no key), windows of each shape, ALiBi with and without a window,
/// softcap; GQA/MQA, transposed (strided) inputs and lengths off the 128-row tiles.
fn batch_cases(d_a: usize, d_b: usize) -> [BatchCase; 10] {
    let c = |b, s_q, s_k, (h, h_k), d, window, alibi, softcap, transposed| BatchCase {
        b,
        s_q,
        s_k,
        h,
        h_k,
        d,
        window,
        alibi,
        softcap,
        transposed,
    };
    [
        c(2, 113, 203, (4, 4), d_a, NONE, false, None, true),
        c(1, 203, 113, (4, 1), d_b, CAUSAL, false, None, false),
        c(
            2,
            130,
            130,
            (6, 2),
            d_a,
            (Some(17), Some(5)),
            false,
            None,
            false,
        ),
        c(1, 77, 150, (4, 2), d_b, (Some(40), None), false, None, true),
        c(2, 1, 147, (4, 4), d_a, (None, Some(3)), false, None, false),
        c(1, 150, 77, (6, 2), d_b, CAUSAL, true, None, true),
        c(2, 64, 257, (4, 1), d_a, NONE, true, None, false),
        c(
            1,
            99,
            99,
            (4, 4),
            d_b,
            (Some(17), Some(5)),
            true,
            None,
            false,
        ),
        c(
            2,
            77,
            150,
            (4, 2),
            d_a,
            (None, None),
            false,
            Some(5.0),
            true,
        ),
        c(1, 150, 150, (6, 2), d_b, CAUSAL, false, Some(3.5), false),
    ]
}

struct BatchInputs {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    slopes: Option<Tensor>,
    scale: f32,
}

fn batch_inputs(c: &BatchCase, dtype: DType, rng: &mut StdRng) -> BatchInputs {
    let make = |rng: &mut StdRng, s, h| {
        if c.transposed {
            randn_transposed(rng, c.b, s, h, c.d, dtype)
        } else {
            randn(rng, &[c.b, s, h, c.d], dtype)
        }
    };
    let (q, k, v) = (
        make(rng, c.s_q, c.h),
        make(rng, c.s_k, c.h_k),
        make(rng, c.s_k, c.h_k),
    );
    let slopes = c.alibi.then(|| slopes(rng, c.h));
    BatchInputs {
        q,
        k,
        v,
        slopes,
        scale: 1.0 / (c.d as f32).sqrt(),
    }
}

fn batch_expected(c: &BatchCase, x: &BatchInputs, dtype: DType) -> Expected {
    let seqs: Vec<SeqData> = (0..c.b)
        .map(|b| SeqData {
            q: values(&x.q.i(b).unwrap()),
            k: values(&x.k.i(b).unwrap()),
            v: values(&x.v.i(b).unwrap()),
            s_q: c.s_q,
            s_k: c.s_k,
        })
        .collect();
    let o = opts(x.scale, c.softcap, x.slopes.as_ref(), c.window, c.s_k);
    expected(&seqs, &vec![o; c.b], (c.h, c.h_k, c.d), dtype, false)
}

/// The public batch function that fits the case; `a` is `[q, k, v]` or `[q, k, v, slopes]`.
fn batch_call(c: &BatchCase, scale: f32, a: &[Tensor]) -> Result<Tensor> {
    let (q, k, v, s) = (&a[0], &a[1], &a[2], a.get(3));
    let (left, right) = c.window;
    let causal = is_causal(c.window);
    match (s, c.softcap) {
        (s, Some(cap)) => {
            fa::flash_attn_alibi_windowed_softcap(q, k, v, s, scale, left, right, cap)
        }
        (Some(s), None) if is_plain(c.window) => fa::flash_attn_alibi(q, k, v, s, scale, causal),
        (Some(s), None) => fa::flash_attn_alibi_windowed(q, k, v, s, scale, left, right),
        (None, None) if is_plain(c.window) => fa::flash_attn(q, k, v, scale, causal),
        (None, None) => fa::flash_attn_windowed(q, k, v, scale, left, right),
    }
}

fn batch_op(c: &BatchCase, scale: f32, slopes: Option<&Tensor>) -> fa::FlashAttn {
    fa::FlashAttn {
        softmax_scale: scale,
        alibi_slopes: slopes.cloned(),
        window_size_left: c.window.0,
        window_size_right: c.window.1,
        softcap: c.softcap,
    }
}

#[test]
fn batch_functions_match_cpu() {
    let Some(dev) = gpu("batch_functions_match_cpu") else {
        return;
    };
    let mut rng = rng("batch_functions_match_cpu");
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        let (d_a, d_b) = if i == 0 { (64, 128) } else { (128, 64) };
        for c in batch_cases(d_a, d_b) {
            let x = batch_inputs(&c, dtype, &mut rng);
            let exp = batch_expected(&c, &x, dtype);
            let what = format!("{dtype:?} {c:?}");
            let mut args = vec![&x.q, &x.k, &x.v];
            args.extend(x.slopes.as_ref());
            check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                out_only(batch_call(&c, x.scale, a))
            });
            check_lse_variant(
                &format!("{what} forward_with_lse"),
                &dev,
                &args,
                &exp,
                false,
                |a| {
                    Ok(with_lse(
                        batch_op(&c, x.scale, a.get(3)).forward_with_lse(&a[0], &a[1], &a[2])?,
                    ))
                },
            );
            if is_plain(c.window) && !c.alibi && c.softcap.is_none() {
                let causal = is_causal(c.window);
                check_lse_variant(
                    &format!("{what} flash_attn_with_lse"),
                    &dev,
                    &args,
                    &exp,
                    false,
                    |a| {
                        Ok(with_lse(fa::flash_attn_with_lse(
                            &a[0], &a[1], &a[2], x.scale, causal,
                        )?))
                    },
                );
            }
        }
    }
}

// ---------------------------------------------------------------- varlen and paged layouts

/// Ragged sequences back to back, `(total, h, d)`, and their cumulative lengths.
struct Ragged {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lens: Vec<(usize, usize)>,
    cu_q: Vec<u32>,
    cu_k: Vec<u32>,
}

fn cumulative(lens: impl Iterator<Item = usize>) -> Vec<u32> {
    let mut acc = 0u32;
    std::iter::once(0)
        .chain(lens.map(|l| {
            acc += l as u32;
            acc
        }))
        .collect()
}

fn ragged(
    rng: &mut StdRng,
    lens: &[(usize, usize)],
    (h, h_k, d): (usize, usize, usize),
    dtype: DType,
) -> Ragged {
    let cu_q = cumulative(lens.iter().map(|l| l.0));
    let cu_k = cumulative(lens.iter().map(|l| l.1));
    let (tq, tk) = (
        *cu_q.last().unwrap() as usize,
        *cu_k.last().unwrap() as usize,
    );
    Ragged {
        q: randn(rng, &[tq, h, d], dtype),
        k: randn(rng, &[tk, h_k, d], dtype),
        v: randn(rng, &[tk, h_k, d], dtype),
        lens: lens.to_vec(),
        cu_q,
        cu_k,
    }
}

impl Ragged {
    fn seqs(&self) -> Vec<SeqData> {
        (0..self.lens.len())
            .map(|b| {
                let (q0, k0) = (self.cu_q[b] as usize, self.cu_k[b] as usize);
                let (s_q, s_k) = self.lens[b];
                SeqData {
                    q: values(&self.q.narrow(0, q0, s_q).unwrap()),
                    k: values(&self.k.narrow(0, k0, s_k).unwrap()),
                    v: values(&self.v.narrow(0, k0, s_k).unwrap()),
                    s_q,
                    s_k,
                }
            })
            .collect()
    }

    fn seqlens(&self) -> (Tensor, Tensor) {
        let t = |v: &[u32]| Tensor::new(v, &Device::Cpu).unwrap();
        (t(&self.cu_q), t(&self.cu_k))
    }
}

/// Empty sequences on either side, lengths off and across the 128-row tiles.
const LENS: [(usize, usize); 6] = [(13, 40), (0, 7), (33, 20), (1, 0), (64, 64), (130, 261)];

#[derive(Debug, Clone, Copy)]
struct VarLenCase {
    heads: (usize, usize, usize),
    window: Window,
    alibi: bool,
    softcap: Option<f32>,
}

/// One row per varlen function (see `varlen_call`), causal and two-sided windows included.
fn varlen_cases(d_a: usize, d_b: usize) -> [VarLenCase; 7] {
    let c = |heads, window, alibi, softcap| VarLenCase {
        heads,
        window,
        alibi,
        softcap,
    };
    [
        c((4, 4, d_a), NONE, false, None),
        c((6, 2, d_b), CAUSAL, false, None),
        c((4, 1, d_a), (Some(9), Some(2)), false, None),
        c((8, 2, d_b), CAUSAL, true, None),
        c((4, 4, d_a), (Some(30), None), true, None),
        c((6, 2, d_b), (Some(9), Some(2)), false, Some(3.5)),
        c((4, 1, d_a), CAUSAL, false, Some(5.0)),
    ]
}

/// The public varlen function that fits the case; `a` is `[q, k, v, seqlens_q, seqlens_k]`
/// plus the slopes when the case has ALiBi.
fn varlen_call(
    c: &VarLenCase,
    (scale, max_q, max_k): (f32, usize, usize),
    a: &[Tensor],
) -> Result<Tensor> {
    let (q, k, v, sq, sk, s) = (&a[0], &a[1], &a[2], &a[3], &a[4], a.get(5));
    let (left, right) = c.window;
    let causal = is_causal(c.window);
    match (s, c.softcap) {
        (s, Some(cap)) => fa::flash_attn_varlen_alibi_windowed_softcap(
            q, k, v, s, sq, sk, max_q, max_k, scale, left, right, cap,
        ),
        (Some(s), None) if is_plain(c.window) => {
            fa::flash_attn_varlen_alibi(q, k, v, s, sq, sk, max_q, max_k, scale, causal)
        }
        (Some(s), None) => fa::flash_attn_varlen_alibi_windowed(
            q, k, v, s, sq, sk, max_q, max_k, scale, left, right,
        ),
        (None, None) if is_plain(c.window) => {
            fa::flash_attn_varlen(q, k, v, sq, sk, max_q, max_k, scale, causal)
        }
        (None, None) => {
            fa::flash_attn_varlen_windowed(q, k, v, sq, sk, max_q, max_k, scale, left, right)
        }
    }
}

#[test]
fn varlen_functions_match_cpu() {
    let Some(dev) = gpu("varlen_functions_match_cpu") else {
        return;
    };
    let mut rng = rng("varlen_functions_match_cpu");
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        let (d_a, d_b) = if i == 0 { (64, 128) } else { (128, 64) };
        for (n, c) in varlen_cases(d_a, d_b).into_iter().enumerate() {
            let x = ragged(&mut rng, &LENS, c.heads, dtype);
            let (h, _, d) = c.heads;
            let slopes = c.alibi.then(|| slopes(&mut rng, h));
            // max_seqlen_k above the longest sequence: windows resolve against it.
            let (scale, max_q, max_k) = (1.0 / (d as f32).sqrt(), 130 + n % 3, 261 + n % 5);
            let o = opts(scale, c.softcap, slopes.as_ref(), c.window, max_k);
            let exp = expected(&x.seqs(), &vec![o; LENS.len()], c.heads, dtype, true);
            let (sq, sk) = x.seqlens();
            let mut args = vec![&x.q, &x.k, &x.v, &sq, &sk];
            args.extend(slopes.as_ref());
            let what = format!("varlen {dtype:?} {c:?}");
            let sizes = (scale, max_q, max_k);
            check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                out_only(varlen_call(&c, sizes, a))
            });
            check_lse_variant(&format!("{what} with_lse"), &dev, &args, &exp, false, |a| {
                let (left, right) = c.window;
                let r = fa::flash_attn_varlen_with_lse(
                    &a[0],
                    &a[1],
                    &a[2],
                    a.get(5),
                    &a[3],
                    &a[4],
                    max_q,
                    max_k,
                    scale,
                    left,
                    right,
                    c.softcap,
                );
                Ok(with_lse(r?))
            });
        }
    }
}

/// Paged K/V `(num_blocks, page, h_k, d)` holding each sequence's rows in shuffled blocks,
/// unused rows and spare blocks filled with values that must never be read, and the block table.
struct Paged {
    k_pages: Tensor,
    v_pages: Tensor,
    table: Tensor,
}

fn paginate(rng: &mut StdRng, x: &Ragged, page: usize, spare_blocks: usize) -> Paged {
    let blocks: Vec<usize> = x.lens.iter().map(|l| l.1.div_ceil(page)).collect();
    let max_blocks = blocks.iter().copied().max().unwrap().max(1);
    let num_blocks = blocks.iter().sum::<usize>() + spare_blocks;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let mut ids = ids.into_iter();
    let total_k = x.k.dim(0).unwrap();
    // Physical row r of the pages reads logical row source[r] of `[k; garbage]`.
    let garbage = |r: usize| (total_k + r) as u32;
    let mut source: Vec<u32> = (0..num_blocks * page).map(garbage).collect();
    let mut table = vec![0u32; x.lens.len() * max_blocks];
    for (b, &nb) in blocks.iter().enumerate() {
        for n in 0..max_blocks {
            // Slots past the sequence's blocks point anywhere: they must not be read either.
            let block = if n < nb {
                ids.next().unwrap()
            } else {
                rng.gen_range(0..num_blocks as u32)
            };
            table[b * max_blocks + n] = block;
            let rows = if n < nb {
                page.min(x.lens[b].1 - n * page)
            } else {
                0
            };
            for r in 0..rows {
                source[block as usize * page + r] = x.cu_k[b] + (n * page + r) as u32;
            }
        }
    }
    let source = Tensor::from_vec(source, num_blocks * page, &Device::Cpu).unwrap();
    let (h_k, d) = (x.k.dim(1).unwrap(), x.k.dim(2).unwrap());
    let mut scatter = |t: &Tensor| {
        let junk = randn(rng, &[num_blocks * page, h_k, d], t.dtype());
        let rows = Tensor::cat(&[t, &junk], 0)
            .unwrap()
            .index_select(&source, 0)
            .unwrap();
        rows.reshape((num_blocks, page, h_k, d)).unwrap()
    };
    let (k_pages, v_pages) = (scatter(&x.k), scatter(&x.v));
    let table = Tensor::from_vec(table, (x.lens.len(), max_blocks), &Device::Cpu).unwrap();
    Paged {
        k_pages,
        v_pages,
        table,
    }
}

#[derive(Debug, Clone, Copy)]
struct PagedCase {
    page: usize,
    heads: (usize, usize, usize),
    window: Window,
    softcap: Option<f32>,
}

/// `a` is `[q, k_pages, v_pages, seqlens_q, seqlens_k, block_table]`.
fn paged_call(
    c: &PagedCase,
    (scale, max_q, max_k): (f32, usize, usize),
    a: &[Tensor],
) -> Result<(Tensor, Tensor)> {
    let (left, right) = c.window;
    fa::flash_attn_varlen_paged_windowed_with_lse(
        &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], None, max_q, max_k, scale, left, right, c.page,
        c.softcap,
    )
}

#[test]
fn paged_functions_match_cpu() {
    let Some(dev) = gpu("paged_functions_match_cpu") else {
        return;
    };
    let mut rng = rng("paged_functions_match_cpu");
    // Sequences spanning several pages, an exact page, and empty on either side.
    let lens = [(5, 300), (0, 16), (40, 40), (1, 129), (17, 0), (64, 256)];
    let windows = [CAUSAL, (Some(12), Some(0)), NONE, (Some(50), Some(7))];
    let heads = [(4, 2, 64), (8, 1, 128), (4, 4, 128), (6, 2, 64)];
    let mut n = 0;
    for dtype in DTYPES {
        for page in [128, 256] {
            // Each dtype sees every window; head shapes rotate against the windows.
            for _ in 0..2 {
                let c = PagedCase {
                    page,
                    heads: heads[(n + n / 4) % 4],
                    window: windows[n % 4],
                    softcap: (n % 3 == 2).then_some(4.0),
                };
                n += 1;
                let x = ragged(&mut rng, &lens, c.heads, dtype);
                let p = paginate(&mut rng, &x, page, 3);
                let (scale, max_q, max_k) = (0.7 / (c.heads.2 as f32).sqrt(), 64, 300);
                let o = opts(scale, c.softcap, None, c.window, max_k);
                let exp = expected(&x.seqs(), &vec![o; lens.len()], c.heads, dtype, true);
                let (sq, sk) = x.seqlens();
                let args = [&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
                let what = format!("paged {dtype:?} {c:?}");
                let sizes = (scale, max_q, max_k);
                check_gpu_vs_cpu(&what, &dev, &args, &exp, |a| {
                    let (left, right) = c.window;
                    let r = fa::flash_attn_varlen_paged_windowed(
                        &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], None, max_q, max_k, scale, left,
                        right, page, c.softcap,
                    );
                    out_only(r)
                });
                check_lse_variant(&format!("{what} with_lse"), &dev, &args, &exp, true, |a| {
                    Ok(with_lse(paged_call(&c, sizes, a)?))
                });
            }
        }
    }
}

// ---------------------------------------------------------------- what CK cannot serve

#[test]
fn calls_ck_cannot_serve_are_errors() {
    let Some(dev) = gpu("calls_ck_cannot_serve_are_errors") else {
        return;
    };
    let mut rng = rng("calls_ck_cannot_serve_are_errors");
    let plain = |a: &[Tensor]| out_only(fa::flash_attn(&a[0], &a[1], &a[2], 0.125, true));

    let f32_qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::F32));
    check_refused("f32", &dev, &f32_qkv.each_ref(), "f16 or bf16", plain);

    let wide = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 512], DType::F16));
    check_refused(
        "head dim 512",
        &dev,
        &wide.each_ref(),
        "head dims up to 256",
        plain,
    );

    let qkv = [0; 3].map(|_| randn(&mut rng, &[1, 16, 2, 64], DType::BF16));
    let mut args = qkv.each_ref().to_vec();
    let s = slopes(&mut rng, 2);
    args.push(&s);
    check_refused("softcap + alibi", &dev, &args, "softcap with ALiBi", |a| {
        out_only(fa::flash_attn_alibi_windowed_softcap(
            &a[0],
            &a[1],
            &a[2],
            Some(&a[3]),
            0.125,
            None,
            Some(0),
            5.0,
        ))
    });

    let lens = [(3, 200), (5, 40)];
    let x = ragged(&mut rng, &lens, (2, 1, 64), DType::F16);
    let (sq, sk) = x.seqlens();
    for (page, with_prefix, needle) in [
        (128, true, "mm_prefix_ranges"),
        (64, false, "multiple of 128"),
    ] {
        let p = paginate(&mut rng, &x, page, 1);
        let ranges = Tensor::from_vec(vec![0i32, 2, 1, 4], (2, 1, 2), &Device::Cpu).unwrap();
        let mut args = vec![&x.q, &p.k_pages, &p.v_pages, &sq, &sk, &p.table];
        args.extend(with_prefix.then_some(&ranges));
        check_refused(
            &format!("paged page={page} prefix={with_prefix}"),
            &dev,
            &args,
            needle,
            |a| {
                let r = fa::flash_attn_varlen_paged_windowed(
                    &a[0],
                    &a[1],
                    &a[2],
                    &a[3],
                    &a[4],
                    &a[5],
                    a.get(6),
                    5,
                    200,
                    0.125,
                    None,
                    Some(0),
                    page,
                    None,
                );
                out_only(r)
            },
        );
    }
}
