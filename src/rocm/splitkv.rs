//! CK's split-KV path (paged K/V): which built tile serves a head dim, how many key splits a
//! call gets, and the layout of the f32 accumulators the splits write and the combine kernel
//! reads. Pure Rust, tested without ROCm.
//!
//! Non-paged calls do not go through split-KV, decode included. This CK has non-paged split-KV
//! kernels (receipt 2: 96 batch-mode and 48 group-mode instances at the default head dims and
//! dtypes), but building them would more than double the default build (136 instances; about
//! 50 minutes more on 2 cores), and non-paged decode on ROCm has a split path already: the
//! Triton kernels split keys for any layout (`crate::triton::split`). Revisit when a GPU can
//! measure the gain.
use crate::params::{AttnCall, Mode};
use candle::Result;

/// Most splits CK's combine kernel supports: its instances cover `num_splits <= 128`
/// (`kLogMaxSplits` 3..=7) and launch nothing above that.
pub const CK_MAX_SPLITS: usize = 128;
/// flash-attention's heuristic: no split once the query side alone fills this share of the CUs.
const BUSY_SHARE: f64 = 0.8;
/// A split count is good enough at this share of the best wave efficiency (flash-attention).
const EFFICIENCY_SHARE: f64 = 0.85;

/// A split-KV tile of this CK (fp16 and bf16 alike): the head dim it holds, its query rows
/// per block (`kM0`) and key rows per loop step (`kN0`), from `get_fmha_fwd_tile_dict_from_dtype`
/// in CK's `codegen/ops/fmha_fwd_splitkv.py`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitKvTile {
    /// The padded head dim the tile holds (32, 64, 128 or 256).
    pub hdim: usize,
    /// Query rows per thread block (`kM0`).
    pub block_m: usize,
    /// Key rows per loop step (`kN0`); also the unit the splits divide the keys in.
    pub block_n: usize,
}

/// Split-KV tiles this CK can build: those whose pipeline (`qr`) exists. Its codegen asks for
/// the missing `qr_async` split-KV pipeline for 96 and 160, and has no 192 tile.
pub const CK_SPLITKV_TILES: [SplitKvTile; 4] = [
    SplitKvTile { hdim: 32, block_m: 32, block_n: 64 },
    SplitKvTile { hdim: 64, block_m: 64, block_n: 64 },
    SplitKvTile { hdim: 128, block_m: 64, block_n: 128 },
    SplitKvTile { hdim: 256, block_m: 64, block_n: 128 },
];

/// How a split-KV call runs: its tile and number of key splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitKv {
    /// The tile that serves the head dim ([`splitkv_tile`]).
    pub tile: SplitKvTile,
    /// Key splits, `1..=`[`CK_MAX_SPLITS`] ([`num_splits`]); sizes the accumulators
    /// ([`split_kv_scratch_lens`]).
    pub num_splits: usize,
}

/// The split-KV tile that serves `head_dim`: the smallest of `built` (comma-separated head
/// dims, as `rocm::CK_SPLITKV_HDIMS`) that holds it, as CK's dispatcher picks it (it pads the
/// head dim). An `Err` naming `FLASH_ATTN_ROCM_HDIMS` when none was built.
pub fn splitkv_tile(head_dim: usize, built: &str) -> Result<SplitKvTile> {
    let built: Vec<usize> = built
        .split(',')
        .filter_map(|h| h.trim().parse().ok())
        .filter(|h| CK_SPLITKV_TILES.iter().any(|t| t.hdim == *h))
        .collect();
    CK_SPLITKV_TILES
        .into_iter()
        .filter(|t| built.contains(&t.hdim) && t.hdim >= head_dim)
        .min_by_key(|t| t.hdim)
        .ok_or_else(|| {
            let fits: Vec<String> =
                CK_SPLITKV_TILES.iter().filter(|t| t.hdim >= head_dim).map(|t| t.hdim.to_string()).collect();
            candle::Error::Msg(format!(
                "flash-attn-rocm: paged K/V with head dim {head_dim} needs a CK split-KV tile >= {head_dim}; this \
                 build has split-KV tiles [{}] (this CK has them for 32, 64, 128 and 256 only: 96 and 160 run on \
                 the next larger one, padded). Add one of [{}] to FLASH_ATTN_ROCM_HDIMS (with FLASH_ATTN_ROCM_PAGED=1)",
                built.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
                fits.join(", ")
            ))
        })
}

/// flash-attention's `num_splits_heuristic` (the one Dao-AILab/flash-attention PR #2901 applies
/// to CK): `work_blocks` thread blocks per split (batch x heads x query blocks), `key_blocks`
/// key tiles of the longest sequence, `units` compute units. No split when the query side fills
/// the device; otherwise the smallest count whose wave efficiency is within 85% of the best,
/// never more than the key tiles, the CUs or [`CK_MAX_SPLITS`].
pub fn num_splits(work_blocks: usize, key_blocks: usize, units: usize) -> usize {
    let (work, units) = (work_blocks.max(1), units.max(1));
    if work as f64 >= BUSY_SHARE * units as f64 {
        return 1;
    }
    let max_splits = CK_MAX_SPLITS.min(units).min(key_blocks.max(1));
    // Counts that give every split the same number of key tiles as a smaller count are no use.
    let eligible = |s: usize| s == 1 || key_blocks.div_ceil(s) != key_blocks.div_ceil(s - 1);
    let efficiency = |s: usize| {
        let waves = (work * s) as f64 / units as f64;
        waves / waves.ceil()
    };
    let best = (1..=max_splits).filter(|&s| eligible(s)).map(efficiency).fold(0.0, f64::max);
    (1..=max_splits).find(|&s| eligible(s) && efficiency(s) >= EFFICIENCY_SHARE * best).unwrap_or(1)
}

/// The split-KV plan of a paged `call` on a device of `units` compute units, with the split-KV
/// tiles `built` (comma-separated head dims).
pub fn plan_split_kv(call: &AttnCall, built: &str, units: usize) -> Result<SplitKv> {
    if call.mode != Mode::Paged {
        candle::bail!("flash-attn-rocm: only paged K/V calls run on CK's split-KV kernels")
    }
    let tile = splitkv_tile(call.head_dim, built)?;
    // CK merges the query heads of one k/v head into the query rows for single-token GQA decode
    // on the 128 tile without bias or mask (`kMergeNumHeadGroupsSeqLenQ`).
    let merged = tile.hdim == 128
        && call.alibi.is_none()
        && call.window.is_unbounded()
        && call.max_seqlen_q == 1
        && call.num_heads_k < call.num_heads;
    let (heads, rows) = if merged {
        (call.num_heads_k, call.group_size())
    } else {
        (call.num_heads, call.max_seqlen_q)
    };
    let work_blocks = call.batch * heads * rows.div_ceil(tile.block_m);
    let key_blocks = call.max_seqlen_k.div_ceil(tile.block_n);
    Ok(SplitKv { tile, num_splits: num_splits(work_blocks, key_blocks, units) })
}

/// Strides, in f32 elements, of the two accumulators laid out as flash-attention's
/// mha_varlen_fwd.cpp allocates them: LSE `(h, splits, total_q)`, output
/// `(h, splits, total_q, d)` (group mode: no batch stride).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccumulatorStrides {
    /// Between heads of the LSE accumulator: `splits * total_q`.
    pub nhead_lse: usize,
    /// Between splits of the LSE accumulator: `total_q`.
    pub split_lse: usize,
    /// Between query rows of the output accumulator: `d`.
    pub row_o: usize,
    /// Between splits of the output accumulator: `total_q * d`.
    pub split_o: usize,
    /// Between heads of the output accumulator: `splits * total_q * d`.
    pub nhead_o: usize,
}

impl AccumulatorStrides {
    /// The strides for `call` (its `total_q` rows and head dim) split as `split`.
    pub fn of(call: &AttnCall, split: &SplitKv) -> Self {
        let (rows, d) = (call.total_q, call.head_dim);
        AccumulatorStrides {
            nhead_lse: split.num_splits * rows,
            split_lse: rows,
            row_o: d,
            split_o: rows * d,
            nhead_o: split.num_splits * rows * d,
        }
    }
}

/// Elements of the two f32 split-KV accumulators of a paged call: the LSE
/// `(h, splits, total_q)` and the output `(h, splits, total_q, d)`.
pub fn split_kv_scratch_lens(call: &AttnCall, split: &SplitKv) -> (usize, usize) {
    let lse = call.num_heads * split.num_splits * call.total_q;
    (lse, lse * call.head_dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(seed: &mut u64, m: usize) -> usize {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % m as u64) as usize + 1
    }

    #[test]
    fn head_dims_run_on_the_smallest_built_splitkv_tile() {
        assert_eq!(splitkv_tile(96, "64,96,128").unwrap().hdim, 128);
        assert_eq!(splitkv_tile(160, "64,128,160,256").unwrap().hdim, 256);
        assert_eq!(splitkv_tile(192, "192,256").unwrap().hdim, 256);
        assert_eq!(splitkv_tile(40, "32,64,128").unwrap().hdim, 64);
        assert_eq!(splitkv_tile(64, "64,128").unwrap(), SplitKvTile { hdim: 64, block_m: 64, block_n: 64 });
        let err = splitkv_tile(96, "64,96").unwrap_err().to_string();
        assert!(err.contains("FLASH_ATTN_ROCM_HDIMS") && err.contains("[64]") && err.contains("[128, 256]"), "{err}");
        assert!(splitkv_tile(64, "").unwrap_err().to_string().contains("split-KV tile >= 64"));
    }

    #[test]
    fn random_head_dims_get_the_smallest_tile_that_holds_them() {
        let mut seed = 0x2545f4914f6cdd1du64;
        let dims = [32, 64, 96, 128, 160, 192, 256];
        for _ in 0..2000 {
            let built: Vec<usize> = dims.iter().copied().filter(|_| xorshift(&mut seed, 2) == 1).collect();
            let text = built.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            let d = 8 * xorshift(&mut seed, 32);
            let splitkv_built: Vec<usize> = built.iter().copied().filter(|h| [32, 64, 128, 256].contains(h)).collect();
            match splitkv_tile(d, &text) {
                Ok(t) => {
                    assert!(t.hdim >= d && splitkv_built.contains(&t.hdim), "{d} on [{text}]: {t:?}");
                    assert!(splitkv_built.iter().all(|&h| h < d || h >= t.hdim), "{d} on [{text}]: {t:?}");
                }
                Err(_) => assert!(splitkv_built.iter().all(|&h| h < d), "{d} on [{text}] refused"),
            }
        }
    }

    #[test]
    fn busy_devices_and_short_caches_do_not_split() {
        assert_eq!(num_splits(304, 1024, 304), 1);
        assert_eq!(num_splits(250, 1024, 304), 1); // >= 80% of the CUs
        assert_eq!(num_splits(8, 1, 304), 1); // one key tile
        assert_eq!(num_splits(0, 0, 0), 1);
    }

    #[test]
    fn decode_fills_the_device() {
        // MI300X (304 CUs), batch 1, 8 k/v heads, 32k keys in 128-row tiles: 256 key tiles.
        let splits = num_splits(8, 256, 304);
        // The best useful count is 37 (296 blocks: 97% of one wave, 7 key tiles a split); the
        // smallest within 85% of that is 32 (256 blocks, 84%; 8 key tiles a split).
        assert_eq!(splits, 32);
        // Few key tiles or CK's maximum bound it.
        assert_eq!(num_splits(1, 3, 304), 3);
        // 10,000 key tiles: the best useful count under 128 is 127; 85% of it rounds up to 108.
        assert_eq!(num_splits(1, 10_000, 304), 108);
    }

    #[test]
    fn random_shapes_stay_within_ck_and_the_keys() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for _ in 0..20_000 {
            let (work, keys, units) = (xorshift(&mut seed, 512), xorshift(&mut seed, 4096), xorshift(&mut seed, 320));
            let s = num_splits(work, keys, units);
            assert!((1..=CK_MAX_SPLITS.min(keys).min(units.max(1)).max(1)).contains(&s), "{work} {keys} {units}: {s}");
            if work as f64 >= 0.8 * units as f64 {
                assert_eq!(s, 1);
            }
            // Every split gets key tiles of its own.
            assert!(s == 1 || keys.div_ceil(s) != keys.div_ceil(s - 1));
            // The smallest useful count within 85% of the best wave efficiency.
            let eff = |s: usize| {
                let w = (work * s) as f64 / units as f64;
                w / w.ceil()
            };
            let useful = |s: usize| s == 1 || keys.div_ceil(s) != keys.div_ceil(s - 1);
            if s > 1 {
                let best = (1..=CK_MAX_SPLITS.min(keys).min(units)).filter(|&c| useful(c)).map(eff).fold(0.0, f64::max);
                assert!(eff(s) >= 0.85 * best, "{work} {keys} {units}: {s}");
                assert!((1..s).filter(|&c| useful(c)).all(|c| eff(c) < 0.85 * best), "{work} {keys} {units}: {s}");
            }
        }
    }
}
