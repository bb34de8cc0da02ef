//! Made-up Triton kernel images (no code) with the variants a build embeds, for the host-side
//! tests of selection and marshalling.

use flash_attn_rocm::triton::{Family, KernelDtype, KernelImage, Tile};

/// An f16 gfx1100 image of `tile` for head dims up to `block_d`.
pub fn image(tile: Tile, family: Family, block_d: u32, even_d: bool, paged: bool, extras: bool) -> KernelImage {
    let (block_m, block_n) = match tile {
        Tile::Prefill | Tile::PrefillShort => (64, 32),
        Tile::PrefillWs => (128, 128),
        Tile::PrefillWalk => (128, 64),
        Tile::Decode => (16, 64),
        Tile::DecodeBatch => (16, 32),
        Tile::Merge => (1, 16),
    };
    KernelImage {
        target: "gfx1100",
        variant: "test",
        kernel: if family == Family::Fwd { "attn_fwd" } else { "attn_merge" },
        family,
        tile,
        dtype: KernelDtype::F16,
        block_d,
        even_d,
        paged,
        extras,
        ptr32: false,
        block_m,
        block_n,
        threads: 128,
        shared: 0,
        scratch_args: 2,
        image: &[],
    }
}

/// The AMD fast-path variants for one target and dtype (gfx1100, f16).
pub fn images() -> &'static [KernelImage] {
    images_for(&["gfx1100"], &[KernelDtype::F16])
}

/// Stand-ins for the variants the planner chooses among on AMD (the head-dim tiles 32 to 512,
/// split ones included,
/// even and padded head dims, flat and paged, plain and extras, the merge) for each of
/// `targets` and `dtypes`. NVIDIA-only variants (TMA, 32-bit pointers) are not among them.
pub fn images_for(targets: &[&'static str], dtypes: &[KernelDtype]) -> &'static [KernelImage] {
    let mut all = Vec::new();
    for (&target, &dtype) in targets.iter().flat_map(|t| dtypes.iter().map(move |d| (t, d))) {
        let mut push = |image: KernelImage| all.push(KernelImage { target, dtype, ..image });
        // CDNA builds have no 48 tile (kernels/aot.py SPLIT_SKIP).
        let dims: &[u32] = if target.starts_with("gfx9") { &[32, 64, 80, 96, 128, 160, 256, 512] } else { &[32, 48, 64, 80, 96, 128, 160, 256, 512] };
        for &block_d in dims {
            for even in [true, false] {
                for paged in [false, true] {
                    for extras in [false, true] {
                        push(image(Tile::Prefill, Family::Fwd, block_d, even, paged, extras));
                        push(image(Tile::Decode, Family::Fwd, block_d, even, paged, extras));
                    }
                }
            }
            if block_d.is_power_of_two() {
                push(image(Tile::Merge, Family::Merge, block_d, false, false, false));
            }
        }
    }
    Box::leak(all.into_boxed_slice())
}
