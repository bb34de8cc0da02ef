//! How many key splits a call gets: enough programs to keep every compute unit (AMD CU /
//! NVIDIA SM) busy when the query side alone cannot, never so many that a split holds fewer
//! than a few key tiles.

/// Programs per compute unit the split aims for, for programs of at least
/// [`THREADS_PER_UNIT`] threads. Measured on the H100 (132 SMs, decode GQA 32/8, d=128, f16,
/// 128-thread programs, forced split counts 4..256): the fastest counts gave 64-132 programs
/// (b=1: 8 splits, b=4: 4 splits at 4k-32k keys); more splits only added work to the merge.
pub const PROGRAMS_PER_UNIT: usize = 1;
/// Threads per compute unit the split aims for at least: smaller programs (the one-wave AMD
/// decode tiles: 32 threads on RDNA, 64 on CDNA) get proportionally more per unit, so that a
/// CU keeps as many threads loading K/V as an SM does with the H100's 128-thread program.
pub const THREADS_PER_UNIT: usize = 128;
/// Decode programs the split aims to keep resident per compute unit, where their shared memory
/// lets that many in (the decode tile's loads are the work: a second resident program keeps
/// more K/V in flight; the caller says which programs count on it). Measured on an H200 (132
/// SMs; paged decode GQA 32/8, d=128, f16, pages of 16, 74 KiB programs that keep one K/V tile
/// in flight): b=4 32k 212 us with 4 splits, 140 with 8 (two per SM), 179 with 12 (three per
/// SM by shared memory, slower: a third does not run at once); b=16 32k 778 us unsplit, 506
/// with 2 splits, 623 with 3.
pub const DECODE_RESIDENT: usize = 2;
/// Shared memory (bytes) the hardware reserves per resident block on top of the kernel's own
/// (1 KiB on NVIDIA; counted on AMD too, where it only errs towards fewer programs).
const RESERVED_SHARED: usize = 1024;
/// Keys a split covers at least (whole tiles, one at least), so the merge stays cheap beside
/// the work. The merge reads 16 splits per memory round trip (`attn_merge`), so short caches
/// split finely: on an H200 (GQA 32/8, d=128, f16, b=1, 128-key tiles, CUDA-graph timing) 4k
/// keys took 11.1 us with 16 splits against 12.8 with 8, 16k 23.9 against 29.6.
pub const MIN_KEYS_PER_SPLIT: usize = 128;
/// Upper bound on splits (it also bounds the accumulators' size).
pub const MAX_SPLITS: usize = 128;

/// Shared memory (LDS) per compute unit of the GPUs `target`'s code runs on: per SM 164 KiB on
/// sm_80, 100 KiB on sm_86/sm_89, 228 KiB on sm_90; 64 KiB per CU on the AMD targets.
pub fn shared_per_unit(target: &str) -> usize {
    match target {
        "sm_80" => 164 * 1024,
        "sm_86" | "sm_89" => 100 * 1024,
        t if t.starts_with("sm_") => 228 * 1024,
        _ => 64 * 1024,
    }
}

/// How many decode programs of `shared` bytes of shared memory each the split may count on per
/// compute unit of `target`: as many as fit, from 1 to [`DECODE_RESIDENT`].
pub fn decode_resident(shared: usize, target: &str) -> usize {
    (shared_per_unit(target) / (shared + RESERVED_SHARED)).clamp(1, DECODE_RESIDENT)
}

/// The number of key splits and the keys per split (a multiple of `block_n`) for a grid of
/// `programs` programs of `threads` threads per split over `max_seqlen_k` keys, on a device of
/// `units` compute units that each hold `resident` of these programs at once (1 unless the
/// caller knows more fit: [`decode_resident`]). Every split holds at least one key when
/// `max_seqlen_k > 0`.
pub fn choose(
    programs: usize,
    threads: usize,
    resident: usize,
    max_seqlen_k: usize,
    block_n: usize,
    units: usize,
) -> (usize, usize) {
    let tiles = max_seqlen_k.div_ceil(block_n).max(1);
    let per_unit = PROGRAMS_PER_UNIT.max(THREADS_PER_UNIT / threads.max(1)).max(resident);
    // Rounded down: one program more than the device holds at once runs in a second wave, alone.
    // Measured on an H200 (132 SMs, one decode program per SM; GQA 32/8, d=128, f16, forced
    // split counts): b=4 (32 programs per split) streamed K/V at 4,122 GB/s with 4 splits and
    // 3,101 with 5 at 32k keys (4,437 and 3,266 at 128k); b=1 at 128k keys 4,033 with 16 and
    // 3,014 with 17.
    let wanted = (per_unit * units.max(1)) / programs.max(1);
    let splits = wanted.min(tiles / MIN_KEYS_PER_SPLIT.div_ceil(block_n).max(1)).clamp(1, MAX_SPLITS);
    let tiles_per_split = tiles.div_ceil(splits);
    // Recount so that no split is left without keys.
    (tiles.div_ceil(tiles_per_split), tiles_per_split * block_n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_programs_need_no_split() {
        assert_eq!(choose(132 * PROGRAMS_PER_UNIT, 128, 1, 1 << 17, 64, 132).0, 1);
        assert_eq!(choose(10_000, 256, 1, 4096, 64, 304).0, 1);
    }

    #[test]
    fn decode_splits_long_caches_to_fill_the_device() {
        // b = 1, 8 k/v heads, one query block each, 128k keys, 132 SMs.
        let (splits, len) = choose(8, 128, 1, 131072, 128, 132);
        assert_eq!(splits, 16); // 132 programs at most: 16 splits of 64 tiles (128 programs)
        assert!(splits * len >= 131072 && (splits - 1) * len < 131072);
        // b = 4: 32 programs a split, 4 splits fill 128 of the 132 SMs (5 would run a second
        // wave of 28 programs).
        assert_eq!(choose(32, 128, 1, 32768, 128, 132).0, 4);
        // Fewer units (an RDNA3 card with 60 CUs) want fewer splits.
        assert!(choose(8, 128, 1, 131072, 32, 60).0 < splits);
    }

    #[test]
    fn one_wave_programs_get_more_programs_per_unit() {
        // b = 1, 8 k/v heads, 128k keys on an RX 7900 XTX (96 CUs): the one-wave RDNA decode
        // tile (32 threads) wants 4 programs per CU where a 128-thread program wants 1.
        let (wide, _) = choose(8, 128, 1, 131072, 16, 96);
        let (narrow, _) = choose(8, 32, 1, 131072, 16, 96);
        assert_eq!((wide, narrow), (12, 48));
        // The H100's 128- and 256-thread programs plan as before: one per SM.
        assert_eq!(choose(8, 256, 1, 131072, 128, 132), choose(8, 128, 1, 131072, 128, 132));
    }

    #[test]
    fn decode_programs_that_fit_twice_per_unit_get_twice_the_splits() {
        // sm_90 (228 KiB per SM): the 74 KiB paged decode tile fits twice (three would, by
        // shared memory alone, but are capped), the 136 KiB flat one once.
        assert_eq!(decode_resident(74_240, "sm_90"), 2);
        assert_eq!(decode_resident(139_264, "sm_90"), 1);
        assert_eq!(decode_resident(300_000, "sm_90"), 1);
        // sm_86/sm_89 (100 KiB per SM) hold one 70 KiB decode tile, sm_80 (164 KiB) two.
        assert_eq!(decode_resident(71_680, "sm_86"), 1);
        assert_eq!(decode_resident(71_680, "sm_80"), 2);
        // AMD (64 KiB LDS per CU): a 40 KiB program fits once.
        assert_eq!(decode_resident(40_960, "gfx942"), 1);
        assert_eq!(decode_resident(8_192, "gfx1100"), 2);
        // RDNA 2 has 64 KiB of LDS per CU too (128 KiB per WGP).
        assert_eq!(decode_resident(8_192, "gfx1030"), 2);
        assert_eq!(decode_resident(40_960, "gfx1031"), 1);
        // Paged decode on an H200 (132 SMs), GQA 32/8, 128-key tiles: b=4 32k gets 8 splits
        // (256 programs, two per SM), b=16 32k 2, b=1 32k 32 (of 8 of its 256 key tiles each);
        // b=64 1k has programs enough and is not split.
        assert_eq!(choose(32, 128, 2, 32768, 128, 132).0, 8);
        assert_eq!(choose(128, 128, 2, 32768, 128, 132).0, 2);
        assert_eq!(choose(8, 128, 2, 32768, 128, 132).0, 32);
        assert_eq!(choose(512, 128, 2, 1024, 128, 132).0, 1);
        // The one-wave AMD decode programs already count more than two per unit.
        assert_eq!(choose(8, 32, 2, 131072, 16, 96), choose(8, 32, 1, 131072, 16, 96));
    }

    #[test]
    fn short_caches_keep_whole_tiles_per_split() {
        // 1024 keys in tiles of 64: 16 tiles, at most 8 splits of 2 tiles (128 keys).
        let (splits, len) = choose(1, 128, 1, 1024, 64, 132);
        assert_eq!((splits, len), (8, 128));
        // Tiles of 128 keys split down to one tile; of 16 keys (RDNA decode), to 8.
        assert_eq!(choose(8, 128, 1, 2048, 128, 132), (16, 128));
        assert_eq!(choose(8, 32, 1, 1024, 16, 96), (8, 128));
        assert_eq!(choose(1, 128, 1, 100, 64, 132), (1, 128));
        assert_eq!(choose(1, 128, 1, 0, 64, 132), (1, 64));
    }

    #[test]
    fn random_shapes_cover_every_key_without_empty_splits() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize + 1
        };
        for _ in 0..10_000 {
            let (programs, keys, units) = (next(4096), next(1 << 20), next(320));
            let block_n = [16, 32, 64, 128][next(4) - 1];
            let threads = [32, 64, 128, 256, 512][next(5) - 1];
            let resident = next(DECODE_RESIDENT);
            let (splits, len) = choose(programs, threads, resident, keys, block_n, units);
            assert!((1..=MAX_SPLITS).contains(&splits));
            assert_eq!(len % block_n, 0);
            assert!(splits * len >= keys, "{programs} {keys} {units}: keys left over");
            assert!((splits - 1) * len < keys, "{programs} {keys} {units}: an empty split");
            assert!(splits == 1 || len >= MIN_KEYS_PER_SPLIT.max(block_n));
            // A split grid fits the device at once: no program is left for a second wave.
            let capacity = PROGRAMS_PER_UNIT.max(THREADS_PER_UNIT / threads).max(resident) * units;
            assert!(splits == 1 || splits * programs <= capacity, "{programs} {threads} {units}: {splits} splits");
            // Monotone: more programs never ask for more splits.
            assert!(choose(programs * 2, threads, resident, keys, block_n, units).0 <= splits);
            // Smaller programs never get fewer splits.
            assert!(choose(programs, threads / 2, resident, keys, block_n, units).0 >= splits);
            // More resident programs never get fewer splits.
            assert!(choose(programs, threads, DECODE_RESIDENT, keys, block_n, units).0 >= splits);
        }
    }
}
