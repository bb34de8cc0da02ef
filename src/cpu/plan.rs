//! How a call is cut into work items: blocks of about [`BLOCK_ROWS`] rows (query positions × the
//! query heads of one k/v head), and for blocks with few rows and many keys (decode), splits of
//! the keys so that every core gets work. Everything here depends on the shapes only, never on
//! the thread count, which keeps results bit-identical across thread counts.

use super::block::{BlockId, BLOCK_N, BLOCK_ROWS};
use super::decode::STREAM_MAX_ROWS;
use crate::params::AttnCall;

/// Blocks with at most this many rows per k/v head (decode: the GQA group of one or a few
/// positions) may be split over their keys.
const SPLIT_MAX_ROWS: usize = 32;
/// Keys per split, at least: below that a split costs more to merge than it saves.
const SPLIT_MIN_KEYS: usize = 512;
/// Splitting stops once the call has this many work items.
const TARGET_ITEMS: usize = 256;
/// Blocks of several k/v heads split their keys more finely, or hold fewer heads, until the
/// call has this many items (enough for a many-core CPU; the plan must not depend on the
/// thread count).
const MIN_ITEMS: usize = 64;
/// Such blocks over at least this many keys take every k/v head of their sequence (up to
/// [`MAX_PACKED_ROWS`] rows): one key's k/v heads are contiguous, so a block then streams its
/// K/V memory in order instead of one row slice per page. Shorter caches sit in the CPU's
/// caches, and one block per k/v head gives more parallel work.
///
/// Those of at most [`STREAM_MAX_ROWS`] rows per head (decode) keep every head however few
/// items that leaves, and split their keys instead ([`split_count`]). Halving the heads per
/// block until the call had [`MIN_ITEMS`] items, as the plan did before (and still does for
/// more rows), made 2k-16k-key caches stream one head's rows a page apart. Alternating
/// both plans in one process (GQA 32/8, d=128, 2k-16k keys, medians): the EPYC 1.2-2.1x faster
/// (f32 and bf16, 1 and 2 threads); the Xeon at 2 threads 1.2-1.7x in f32 and -3% to +17% in
/// bf16, at 16 threads 1.06-1.34x in f32 and within 3% in bf16 but for 2k keys (10% slower).
const PACK_HEADS_MIN_KEYS: usize = 2048;
const MAX_PACKED_ROWS: usize = 256;
/// Below this many multiply-adds per product (rows × keys × head dim, summed over the items) a
/// call runs on the calling thread.
const SMALL_WORK: usize = 1 << 20;

/// One work item: a block, or split `split` of `splits` of its keys (the splits of a block are
/// consecutive items, split 0 first).
#[derive(Debug, Clone, Copy)]
pub struct Item {
    pub block: BlockId,
    pub split: usize,
    pub splits: usize,
    /// Its rows times the keys they may see: what the pool orders items by.
    pub cost: usize,
}

/// Keys `[lo, hi)` some row of `block` may see through the window: rows further down a sequence
/// see keys further right (bottom-right alignment), so the first and last positions bound it.
/// `mm_prefix_ranges` can lift the mask anywhere: then every key.
fn visible_keys(call: &AttnCall, block: &BlockId, k_len: usize) -> (usize, usize) {
    if call.mm_prefix.is_some() {
        return (0, k_len);
    }
    let q_len = call.seqs.get(block.b).q_len;
    let first = call.window.key_range(block.pos0, q_len, k_len);
    let last = call.window.key_range(block.pos0 + block.positions - 1, q_len, k_len);
    (first.0, last.1.max(first.0))
}

/// How many splits a block of `heads` k/v heads with few rows each takes over `span` keys, one
/// of `blocks` in its call (before clamping): one per [`SPLIT_MIN_KEYS`] keys, or more while
/// the call has fewer than [`MIN_ITEMS`] items, as long as each split keeps [`SPLIT_MIN_KEYS`]
/// keys' work of one head and [`BLOCK_N`] keys. One head splits by keys alone.
fn split_count(span: usize, heads: usize, blocks: usize) -> usize {
    (span / SPLIT_MIN_KEYS).max(MIN_ITEMS.div_ceil(blocks.max(1))).min(span / shortest_split(heads))
}

/// The fewest keys [`split_count`] leaves a split of a block of `heads` k/v heads:
/// [`SPLIT_MIN_KEYS`] keys' work of one head, and at least [`BLOCK_N`] keys.
fn shortest_split(heads: usize) -> usize {
    (SPLIT_MIN_KEYS / heads.max(1)).max(BLOCK_N)
}

pub struct Plan {
    pub items: Vec<Item>,
    work: usize,
}

impl Plan {
    pub fn new(call: &AttnCall) -> Plan {
        let g = call.group_size();
        let positions_per_block = (BLOCK_ROWS / g).max(1);
        let mut blocks = Vec::new();
        for (b, seq) in call.seqs.iter().enumerate() {
            for pos0 in (0..seq.q_len).step_by(positions_per_block) {
                let positions = positions_per_block.min(seq.q_len - pos0);
                let head_cols = (positions * g).next_multiple_of(8);
                let pack = positions * g <= SPLIT_MAX_ROWS && seq.k_len >= PACK_HEADS_MIN_KEYS;
                let mut heads = if pack { (MAX_PACKED_ROWS / head_cols).clamp(1, call.num_heads_k) } else { 1 };
                // Blocks whose rows the decode products stream keep every head (see
                // `PACK_HEADS_MIN_KEYS`); others take fewer heads while the call would have too
                // few items to share out (AMX serves them at one head each).
                let splits = (seq.k_len / SPLIT_MIN_KEYS).max(1);
                while positions * g > STREAM_MAX_ROWS && heads > 1 && call.seqs.len() * call.num_heads_k.div_ceil(heads) * splits < MIN_ITEMS {
                    heads = heads.div_ceil(2);
                }
                for hk0 in (0..call.num_heads_k).step_by(heads) {
                    let heads = heads.min(call.num_heads_k - hk0);
                    blocks.push((BlockId { b, hk0, heads, pos0, positions, keys: (0, usize::MAX) }, seq.k_len));
                }
            }
        }
        let n_blocks = blocks.len();
        let max_splits = (TARGET_ITEMS / n_blocks.max(1)).max(1);
        let mut items = Vec::with_capacity(blocks.len());
        for (block, k_len) in blocks {
            let rows = block.rows(call);
            // Split the keys the block's rows can see, not all of them (a sliding window).
            let (lo, hi) = visible_keys(call, &block, k_len);
            let span = hi.saturating_sub(lo);
            let wanted = if block.head_rows(call) <= SPLIT_MAX_ROWS { split_count(span, block.heads, n_blocks).clamp(1, max_splits) } else { 1 };
            let chunk = span.div_ceil(wanted).next_multiple_of(BLOCK_N).max(1);
            // Rounding the chunk up can leave the last splits empty: drop them.
            let splits = span.div_ceil(chunk).max(1);
            for split in 0..splits {
                let keys = if splits == 1 { block.keys } else { (lo + split * chunk, (lo + (split + 1) * chunk).min(hi)) };
                let cost = rows.saturating_mul(if splits == 1 { span } else { keys.1 - keys.0 });
                items.push(Item { block: BlockId { keys, ..block }, split, splits, cost });
            }
        }
        // The items' costs cover each block's visible keys once (its splits partition them).
        let work = items.iter().fold(0usize, |w, item| w.saturating_add(item.cost)).saturating_mul(call.head_dim);
        Plan { items, work }
    }

    /// The items' indices, costliest first (ties in plan order).
    pub fn costliest_first(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.items.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.items[i].cost));
        order
    }

    /// True when the call is too small to be worth the thread pool.
    pub fn is_small(&self) -> bool {
        self.work < SMALL_WORK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testing::seeded;
    use crate::params::Request;
    use candle::{DType, Layout};
    use rand::Rng;

    fn decode_call(batch: usize, heads_k: usize, group: usize, k_len: usize, d: usize) -> AttnCall {
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
        let q = Layout::contiguous((batch, 1, heads_k * group, d));
        let kv = Layout::contiguous((batch, k_len, heads_k, d));
        AttnCall::new(&req, [DType::BF16; 3], &q, &kv, &kv).expect("a valid decode call")
    }

    /// Decode over a long cache: every block of streamed rows takes all the k/v heads it can
    /// hold (groups of 16 rows may take fewer, for AMX), every block's splits
    /// cover its keys in order without gaps, none is shorter than `shortest_split`
    /// (but the last), and the call reaches half of `MIN_ITEMS` items unless the keys are too few.
    #[test]
    fn long_caches_keep_every_head_and_split_keys_instead() {
        let (seed, mut rng) = seeded();
        for _ in 0..300 {
            let (batch, heads_k, group) = (rng.gen_range(1..4), [1, 2, 4, 8, 16, 32][rng.gen_range(0..6)], [1, 2, 4, 8, 16][rng.gen_range(0..5)]);
            let (k_len, d) = (rng.gen_range(PACK_HEADS_MIN_KEYS..40_000), [64, 128][rng.gen_range(0..2)]);
            let call = decode_call(batch, heads_k, group, k_len, d);
            let plan = Plan::new(&call);
            let case = format!("seed {seed}: batch {batch}, {heads_k} k/v heads, group {group}, {k_len} keys");
            // Each block's first split, with its index: the block's splits follow it.
            let blocks: Vec<(usize, &Item)> = plan.items.iter().enumerate().filter(|(_, item)| item.split == 0).collect();
            let head_cols = group.next_multiple_of(8);
            for &(at, first) in &blocks {
                if group <= STREAM_MAX_ROWS {
                    assert_eq!(first.block.heads, (MAX_PACKED_ROWS / head_cols).clamp(1, heads_k).min(heads_k - first.block.hk0), "{case}");
                }
                let (splits, shortest) = (&plan.items[at..][..first.splits], shortest_split(first.block.heads));
                let mut end = 0;
                for (i, split) in splits.iter().enumerate() {
                    let (lo, hi) = if first.splits == 1 { (0, k_len) } else { split.block.keys };
                    assert_eq!((split.split, lo), (i, end), "{case}: splits in order, without gaps");
                    assert!(hi > lo && (hi - lo >= shortest || i + 1 == first.splits), "{case}: split {i} has {} keys", hi - lo);
                    end = hi;
                }
                assert_eq!(end, k_len, "{case}: the splits cover every key");
            }
            // Rounding a split up to whole `BLOCK_N` keys can leave up to half the splits asked for.
            let more_possible = blocks.iter().any(|(_, b)| 2 * b.splits < (k_len / shortest_split(b.block.heads)).min(TARGET_ITEMS / blocks.len()));
            assert!(2 * plan.items.len() >= MIN_ITEMS || !more_possible, "{case}: {} items", plan.items.len());
        }
    }
}
