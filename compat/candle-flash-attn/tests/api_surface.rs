//! The compat crate must expose candle-flash-attn 0.11.1's API with the same signatures (checked
//! at compile time below) and the same meaning: every entry point, called through
//! `candle_flash_attn::`, is compared on fresh random inputs with an f64 matmul-softmax
//! reference written from the upstream documentation (bottom-right masks, alibi, softcap,
//! cumulative varlen offsets, paged K/V behind a block table).

mod common;

use candle::{DType, Device, Result, Tensor};
use candle_flash_attn as cfa;
use common::reference::{batch_attention, varlen_attention, Spec};
use common::tolerance::assert_within_rule;
use rand::{rngs::StdRng, seq::SliceRandom, Rng};

/// Each function pointer type is copied from candle-flash-attn 0.11.1's source; a change of
/// any argument or return type breaks the build of this test.
#[allow(clippy::type_complexity)]
#[test]
fn signatures_match_candle_flash_attn_0_11_1() {
    type T = Tensor;
    let _: fn(&T, &T, &T, f32, bool) -> Result<T> = cfa::flash_attn;
    let _: fn(&T, &T, &T, f32, Option<usize>, Option<usize>) -> Result<T> =
        cfa::flash_attn_windowed;
    let _: fn(&T, &T, &T, &T, f32, bool) -> Result<T> = cfa::flash_attn_alibi;
    let _: fn(&T, &T, &T, &T, f32, Option<usize>, Option<usize>) -> Result<T> =
        cfa::flash_attn_alibi_windowed;
    let _: fn(&T, &T, &T, Option<&T>, f32, Option<usize>, Option<usize>, f32) -> Result<T> =
        cfa::flash_attn_alibi_windowed_softcap;
    let _: fn(&T, &T, &T, &T, &T, usize, usize, f32, bool) -> Result<T> = cfa::flash_attn_varlen;
    let _: fn(&T, &T, &T, &T, &T, usize, usize, f32, Option<usize>, Option<usize>) -> Result<T> =
        cfa::flash_attn_varlen_windowed;
    let _: fn(
        &T,
        &T,
        &T,
        &T,
        &T,
        &T,
        Option<&T>,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
        usize,
        Option<f32>,
    ) -> Result<T> = cfa::flash_attn_varlen_paged_windowed;
    let _: fn(&T, &T, &T, &T, &T, &T, usize, usize, f32, bool) -> Result<T> =
        cfa::flash_attn_varlen_alibi;
    let _: fn(
        &T,
        &T,
        &T,
        &T,
        &T,
        &T,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
    ) -> Result<T> = cfa::flash_attn_varlen_alibi_windowed;
    let _: fn(
        &T,
        &T,
        &T,
        Option<&T>,
        &T,
        &T,
        usize,
        usize,
        f32,
        Option<usize>,
        Option<usize>,
        f32,
    ) -> Result<T> = cfa::flash_attn_varlen_alibi_windowed_softcap;
    // The struct literal pins the public fields and their types.
    let _ = |slopes: Option<Tensor>| cfa::FlashAttn {
        softmax_scale: 1.0,
        alibi_slopes: slopes,
        window_size_left: Some(1),
        window_size_right: None,
        softcap: Some(1.0),
    };
}

const HEADS: usize = 4;
const KV_HEADS: usize = 2;

fn head_dim(rng: &mut StdRng) -> usize {
    *[32, 64, 128].choose(rng).unwrap()
}

fn slopes(rng: &mut StdRng) -> Vec<f32> {
    (0..HEADS).map(|_| rng.gen_range(0.0..0.5)).collect()
}

fn slopes_tensor(slopes: &[f32]) -> Result<Tensor> {
    Tensor::new(slopes, &Device::Cpu)
}

/// Random batch inputs in f32, `s_q <= s_k` unless `more_queries`.
fn batch_inputs(rng: &mut StdRng, more_queries: bool) -> Result<[Tensor; 3]> {
    let (b, d) = (rng.gen_range(1..=3), head_dim(rng));
    let s_k = rng.gen_range(1..=40);
    let s_q = if more_queries {
        s_k + rng.gen_range(1..=8)
    } else {
        rng.gen_range(1..=s_k)
    };
    let q = common::uniform(rng, &[b, s_q, HEADS, d], 1.0)?.to_dtype(DType::F32)?;
    let k = common::uniform(rng, &[b, s_k, KV_HEADS, d], 1.0)?.to_dtype(DType::F32)?;
    let v = common::uniform(rng, &[b, s_k, KV_HEADS, d], 1.0)?.to_dtype(DType::F32)?;
    Ok([q, k, v])
}

fn check_batch(
    what: &str,
    rng: &mut StdRng,
    spec: &Spec,
    call: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let [q, k, v] = batch_inputs(rng, false)?;
    check_batch_on(what, &q, &k, &v, spec, call)
}

fn check_batch_on(
    what: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spec: &Spec,
    call: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let flash = call(q, k, v)?;
    let reference = batch_attention(q, k, v, spec, DType::F64)?;
    let naive = batch_attention(q, k, v, spec, DType::F32)?;
    assert_within_rule(
        &format!("{what} q{:?} k{:?}", q.dims(), k.dims()),
        &flash,
        &naive,
        &reference,
    )?;
    Ok(())
}

fn window(rng: &mut StdRng) -> Option<usize> {
    rng.gen_bool(0.8).then(|| rng.gen_range(0..12))
}

#[test]
fn batch_entry_points_match_reference() -> Result<()> {
    let rng = &mut common::seeded_rng("batch_entry_points");
    let scale = 0.7f32;
    for causal in [false, true] {
        let spec = if causal {
            Spec::causal(scale)
        } else {
            Spec {
                scale,
                ..Default::default()
            }
        };
        check_batch(
            &format!("flash_attn causal={causal}"),
            rng,
            &spec,
            |q, k, v| cfa::flash_attn(q, k, v, scale, causal),
        )?;
        let slopes = slopes(rng);
        let spec = Spec {
            alibi_slopes: Some(slopes.clone()),
            ..spec
        };
        check_batch(
            &format!("flash_attn_alibi causal={causal}"),
            rng,
            &spec,
            |q, k, v| cfa::flash_attn_alibi(q, k, v, &slopes_tensor(&slopes)?, scale, causal),
        )?;
    }

    let (left, right) = (window(rng), window(rng));
    let spec = Spec {
        scale,
        window_left: left,
        window_right: right,
        ..Default::default()
    };
    check_batch(
        &format!("flash_attn_windowed ({left:?}, {right:?})"),
        rng,
        &spec,
        |q, k, v| cfa::flash_attn_windowed(q, k, v, scale, left, right),
    )?;

    let slopes = slopes(rng);
    let spec = Spec {
        alibi_slopes: Some(slopes.clone()),
        ..spec
    };
    check_batch(
        &format!("flash_attn_alibi_windowed ({left:?}, {right:?})"),
        rng,
        &spec,
        |q, k, v| {
            cfa::flash_attn_alibi_windowed(q, k, v, &slopes_tensor(&slopes)?, scale, left, right)
        },
    )?;

    let softcap = rng.gen_range(0.3..2.0f32);
    for with_alibi in [false, true] {
        let spec = Spec {
            softcap: Some(softcap),
            alibi_slopes: with_alibi.then(|| slopes.clone()),
            ..spec.clone()
        };
        let alibi = slopes_tensor(&slopes)?;
        check_batch(
            &format!("flash_attn_alibi_windowed_softcap alibi={with_alibi}"),
            rng,
            &spec,
            |q, k, v| {
                cfa::flash_attn_alibi_windowed_softcap(
                    q,
                    k,
                    v,
                    with_alibi.then_some(&alibi),
                    scale,
                    left,
                    right,
                    softcap,
                )
            },
        )?;
    }
    Ok(())
}

/// `FlashAttn` is a public `CustomOp3`: applying it by hand must equal the function.
#[test]
fn flash_attn_struct_is_the_op() -> Result<()> {
    let rng = &mut common::seeded_rng("flash_attn_struct");
    let [q, k, v] = batch_inputs(rng, false)?;
    let op = cfa::FlashAttn {
        softmax_scale: 0.5,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: Some(0),
        softcap: None,
    };
    let by_hand = q.apply_op3(&k, &v, op)?;
    let by_fn = cfa::flash_attn(&q, &k, &v, 0.5, true)?;
    assert_eq!(common::max_abs_diff(&by_hand, &by_fn)?, 0.0);
    Ok(())
}

/// Causal with more queries than keys: bottom-right alignment leaves the first rows with no
/// visible key, and flash attention (unlike a softmax over -inf) outputs zeros there.
#[test]
fn causal_rows_without_keys_are_zero() -> Result<()> {
    let rng = &mut common::seeded_rng("causal_rows_without_keys");
    let [q, k, v] = batch_inputs(rng, true)?;
    check_batch_on(
        "flash_attn causal, s_q > s_k",
        &q,
        &k,
        &v,
        &Spec::causal(0.6),
        |q, k, v| cfa::flash_attn(q, k, v, 0.6, true),
    )
}

/// Random varlen batch: 1-3 sequences, each with `len_q <= len_k`.
struct Varlen {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_q: Vec<u32>,
    cu_k: Vec<u32>,
}

impl Varlen {
    fn random(rng: &mut StdRng) -> Result<Self> {
        let d = head_dim(rng);
        let (mut cu_q, mut cu_k) = (vec![0u32], vec![0u32]);
        for _ in 0..rng.gen_range(1..=3) {
            let len_k = rng.gen_range(1..=70);
            cu_k.push(cu_k.last().unwrap() + len_k);
            cu_q.push(cu_q.last().unwrap() + rng.gen_range(1..=len_k));
        }
        let (tq, tk) = (
            *cu_q.last().unwrap() as usize,
            *cu_k.last().unwrap() as usize,
        );
        Ok(Varlen {
            q: common::uniform(rng, &[tq, HEADS, d], 1.0)?.to_dtype(DType::F32)?,
            k: common::uniform(rng, &[tk, KV_HEADS, d], 1.0)?.to_dtype(DType::F32)?,
            v: common::uniform(rng, &[tk, KV_HEADS, d], 1.0)?.to_dtype(DType::F32)?,
            cu_q,
            cu_k,
        })
    }

    fn max_len(cu: &[u32]) -> usize {
        cu.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap()
    }

    /// Calls `call(q, k, v, seqlens_q, seqlens_k, max_q, max_k)` and checks it on the rule.
    fn check(
        &self,
        what: &str,
        spec: &Spec,
        call: impl Fn(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor, usize, usize) -> Result<Tensor>,
    ) -> Result<()> {
        let seqlens_q = Tensor::new(self.cu_q.as_slice(), &Device::Cpu)?;
        let seqlens_k = Tensor::new(self.cu_k.as_slice(), &Device::Cpu)?;
        let (max_q, max_k) = (Self::max_len(&self.cu_q), Self::max_len(&self.cu_k));
        let flash = call(
            &self.q, &self.k, &self.v, &seqlens_q, &seqlens_k, max_q, max_k,
        )?;
        let run = |dtype| {
            varlen_attention(
                &self.q, &self.k, &self.v, &self.cu_q, &self.cu_k, spec, dtype,
            )
        };
        let what = format!("{what} cu_q {:?} cu_k {:?}", self.cu_q, self.cu_k);
        assert_within_rule(&what, &flash, &run(DType::F32)?, &run(DType::F64)?)?;
        Ok(())
    }
}

#[test]
fn varlen_entry_points_match_reference() -> Result<()> {
    let rng = &mut common::seeded_rng("varlen_entry_points");
    let scale = 0.7f32;
    for causal in [false, true] {
        let spec = if causal {
            Spec::causal(scale)
        } else {
            Spec {
                scale,
                ..Default::default()
            }
        };
        Varlen::random(rng)?.check(
            &format!("flash_attn_varlen causal={causal}"),
            &spec,
            |q, k, v, sq, sk, mq, mk| {
                cfa::flash_attn_varlen(q, k, v, sq, sk, mq, mk, scale, causal)
            },
        )?;
        let slopes = slopes(rng);
        let spec = Spec {
            alibi_slopes: Some(slopes.clone()),
            ..spec
        };
        Varlen::random(rng)?.check(
            &format!("flash_attn_varlen_alibi causal={causal}"),
            &spec,
            |q, k, v, sq, sk, mq, mk| {
                cfa::flash_attn_varlen_alibi(
                    q,
                    k,
                    v,
                    &slopes_tensor(&slopes)?,
                    sq,
                    sk,
                    mq,
                    mk,
                    scale,
                    causal,
                )
            },
        )?;
    }

    let (left, right) = (window(rng), window(rng));
    let spec = Spec {
        scale,
        window_left: left,
        window_right: right,
        ..Default::default()
    };
    Varlen::random(rng)?.check(
        &format!("flash_attn_varlen_windowed ({left:?}, {right:?})"),
        &spec,
        |q, k, v, sq, sk, mq, mk| {
            cfa::flash_attn_varlen_windowed(q, k, v, sq, sk, mq, mk, scale, left, right)
        },
    )?;

    let slopes = slopes(rng);
    let spec = Spec {
        alibi_slopes: Some(slopes.clone()),
        ..spec
    };
    Varlen::random(rng)?.check(
        "flash_attn_varlen_alibi_windowed",
        &spec,
        |q, k, v, sq, sk, mq, mk| {
            cfa::flash_attn_varlen_alibi_windowed(
                q,
                k,
                v,
                &slopes_tensor(&slopes)?,
                sq,
                sk,
                mq,
                mk,
                scale,
                left,
                right,
            )
        },
    )?;

    let softcap = rng.gen_range(0.3..2.0f32);
    for with_alibi in [false, true] {
        let spec = Spec {
            softcap: Some(softcap),
            alibi_slopes: with_alibi.then(|| slopes.clone()),
            ..spec.clone()
        };
        let alibi = slopes_tensor(&slopes)?;
        let what = format!("flash_attn_varlen_alibi_windowed_softcap alibi={with_alibi}");
        Varlen::random(rng)?.check(&what, &spec, |q, k, v, sq, sk, mq, mk| {
            let alibi = with_alibi.then_some(&alibi);
            cfa::flash_attn_varlen_alibi_windowed_softcap(
                q, k, v, alibi, sq, sk, mq, mk, scale, left, right, softcap,
            )
        })?;
    }
    Ok(())
}

const PAGE: usize = 32;

/// Scatters contiguous varlen K or V `(total_k, h_k, d)` into shuffled pages
/// `(num_blocks, PAGE, h_k, d)` following `block_table`; unused slots hold noise, so reading
/// outside a sequence's pages would show.
fn scatter_into_pages(
    rng: &mut StdRng,
    kv: &Tensor,
    cu_k: &[u32],
    block_table: &[Vec<u32>],
    num_blocks: usize,
) -> Result<Tensor> {
    let (_, h_k, d) = kv.dims3()?;
    let row = h_k * d;
    let src = kv.flatten_all()?.to_vec1::<f32>()?;
    let mut pages: Vec<f32> = (0..num_blocks * PAGE * row)
        .map(|_| rng.gen_range(-9.0..9.0))
        .collect();
    for (seq, blocks) in block_table.iter().enumerate() {
        for pos in 0..(cu_k[seq + 1] - cu_k[seq]) as usize {
            let from = (cu_k[seq] as usize + pos) * row;
            let to = (blocks[pos / PAGE] as usize * PAGE + pos % PAGE) * row;
            pages[to..to + row].copy_from_slice(&src[from..from + row]);
        }
    }
    Tensor::from_vec(pages, (num_blocks, PAGE, h_k, d), &Device::Cpu)
}

#[test]
fn paged_entry_point_matches_reference() -> Result<()> {
    let rng = &mut common::seeded_rng("paged_entry_point");
    let data = Varlen::random(rng)?;
    let blocks_per_seq: Vec<usize> = data
        .cu_k
        .windows(2)
        .map(|w| ((w[1] - w[0]) as usize).div_ceil(PAGE))
        .collect();
    let max_blocks = *blocks_per_seq.iter().max().unwrap();
    let num_blocks = blocks_per_seq.iter().sum::<usize>() + 2;
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let mut ids = ids.into_iter();
    // Rows are padded to max_blocks with a valid id that the sequence never reaches.
    let block_table: Vec<Vec<u32>> = blocks_per_seq
        .iter()
        .map(|&n| {
            let mut row: Vec<u32> = ids.by_ref().take(n).collect();
            row.resize(max_blocks, row[0]);
            row
        })
        .collect();
    let k_pages = scatter_into_pages(rng, &data.k, &data.cu_k, &block_table, num_blocks)?;
    let v_pages = scatter_into_pages(rng, &data.v, &data.cu_k, &block_table, num_blocks)?;
    let table = Tensor::new(block_table.concat(), &Device::Cpu)?
        .reshape((block_table.len(), max_blocks))?;

    let scale = 0.7f32;
    let (left, right) = (window(rng), window(rng));
    let softcap = rng.gen_bool(0.5).then(|| rng.gen_range(0.3..2.0f32));
    let spec = Spec {
        scale,
        window_left: left,
        window_right: right,
        softcap,
        ..Default::default()
    };
    let what =
        format!("flash_attn_varlen_paged_windowed ({left:?}, {right:?}) softcap {softcap:?}");
    data.check(&what, &spec, |q, _, _, sq, sk, mq, mk| {
        cfa::flash_attn_varlen_paged_windowed(
            q, &k_pages, &v_pages, sq, sk, &table, None, mq, mk, scale, left, right, PAGE, softcap,
        )
    })
}
