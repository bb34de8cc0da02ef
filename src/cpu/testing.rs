//! Shared support for the unit tests of the CPU kernel.

use rand::{Rng, SeedableRng};

/// A fresh seed and its generator. `FLASH_ATTN_TEST_SEED` replays a seed that a failure
/// printed, as for the integration tests (`tests/common`).
pub fn seeded() -> (u64, rand::rngs::StdRng) {
    let seed = std::env::var("FLASH_ATTN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen());
    (seed, rand::rngs::StdRng::seed_from_u64(seed))
}
