//! How a call is cut into work items: blocks of about [`BLOCK_ROWS`] rows (query positions × the
//! query heads of one k/v head), and for blocks with few rows and many keys (decode), splits of
//! the keys so that every core gets work. Everything here depends on the shapes only, never on
//! the thread count, which keeps results bit-identical across thread counts.

use super::block::{BlockId, BLOCK_N, BLOCK_ROWS};
use crate::params::AttnCall;

/// Blocks with at most this many rows per k/v head (decode: the GQA group of one or a few
/// positions) may be split over their keys.
const SPLIT_MAX_ROWS: usize = 32;
/// Keys per split, at least: below that a split costs more to merge than it saves.
const SPLIT_MIN_KEYS: usize = 512;
/// Splitting stops once the call has this many work items.
const TARGET_ITEMS: usize = 256;
/// Packing k/v heads into one block stops short of leaving fewer items than this (enough for
/// a many-core CPU; the plan must not depend on the thread count).
const MIN_ITEMS: usize = 64;
/// Such blocks over at least this many keys take every k/v head of their sequence (up to
/// [`MAX_PACKED_ROWS`] rows): one key's k/v heads are contiguous, so a block then streams its
/// K/V memory in order instead of one row slice per page. Shorter caches sit in the CPU's
/// caches, and one block per k/v head gives more parallel work.
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
                // Fewer heads per block while the call would have too few items to share out.
                let splits = (seq.k_len / SPLIT_MIN_KEYS).max(1);
                while heads > 1 && call.seqs.len() * call.num_heads_k.div_ceil(heads) * splits < MIN_ITEMS {
                    heads = heads.div_ceil(2);
                }
                for hk0 in (0..call.num_heads_k).step_by(heads) {
                    let heads = heads.min(call.num_heads_k - hk0);
                    blocks.push((BlockId { b, hk0, heads, pos0, positions, keys: (0, usize::MAX) }, seq.k_len));
                }
            }
        }
        let max_splits = (TARGET_ITEMS / blocks.len().max(1)).max(1);
        let mut items = Vec::with_capacity(blocks.len());
        for (block, k_len) in blocks {
            let rows = block.rows(call);
            // Split the keys the block's rows can see, not all of them (a sliding window).
            let (lo, hi) = visible_keys(call, &block, k_len);
            let span = hi.saturating_sub(lo);
            let wanted = if block.head_rows(call) <= SPLIT_MAX_ROWS { (span / SPLIT_MIN_KEYS).clamp(1, max_splits) } else { 1 };
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
