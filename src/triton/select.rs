//! Which embedded code objects serve a call on a given target.
use super::registry::{Family, KernelDtype, KernelImage, Tile, KERNELS};
use super::targets::{embedded, forced_target, resolve, ENV_TARGET};
use crate::params::AttnCall;
use crate::rocm::DeviceBuffers;
use candle::{DType, Result};

/// Query rows (times the GQA group) up to which the decode tile serves a call.
pub const DECODE_ROWS: usize = 16;

/// The attention kernel and, for split calls, the merge kernel of one call.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// The `attn_fwd` image: same target and dtype as the call, the smallest head-dim tile
    /// that holds its head dim, paged and extras as the call needs.
    pub fwd: &'static KernelImage,
    /// The 32-bit buffer-addressing twin of `fwd` (AMD, where built): launched instead of it
    /// when every tensor of the call fits ([`Kernels::fwd_for`]).
    pub fwd_b32: Option<&'static KernelImage>,
    /// The `attn_merge` image that combines the key splits (launched only when the call is
    /// split).
    pub merge: &'static KernelImage,
}

impl Kernels {
    /// The `attn_fwd` image to launch for `call` with `num_splits` key splits on `buffers`: the
    /// 32-bit twin when there is one and every tensor spans under 2 GiB from its base pointer
    /// ([`super::span::fits_32bit`]), else the 64-bit image, which serves every call.
    pub fn fwd_for(&self, call: &AttnCall, num_splits: usize, buffers: &DeviceBuffers) -> &'static KernelImage {
        match self.fwd_b32 {
            Some(b32) if super::span::fits_32bit(call, num_splits, buffers) => b32,
            _ => self.fwd,
        }
    }
}

/// Whether the call needs the kernels compiled with ALiBi, softcap and mm_prefix support.
pub fn needs_extras(call: &AttnCall) -> bool {
    call.alibi.is_some() || call.softcap.is_some() || call.mm_prefix.is_some()
}

/// Picks the kernels for `call` on a device of arch `device` among `images` (the embedded
/// [`KERNELS`] in production): those of the target that serves the device
/// ([`super::targets::resolve`]), the smallest head-dim tile that holds the call's head dim, the
/// decode tile for few query rows, the paged variant for a block table; and its
/// 32-bit twin, when built (same tile, launched only for calls that fit it).
pub fn select(call: &AttnCall, device: &str, images: &'static [KernelImage]) -> Result<Kernels> {
    let forced = forced_target();
    let Some(target) = resolve(device, forced, &embedded(images)) else {
        candle::bail!(
            "flash-attn-rocm: no Triton kernels of this build run on {device}{}; built targets: [{}]. Rebuild with \
             FLASH_ATTN_ROCM_ARCHS (AMD) or FLASH_ATTN_ROCM_CUDA_ARCHS (NVIDIA) including it{}",
            forced.map(|f| format!(" as {ENV_TARGET}={f}")).unwrap_or_default(),
            built_targets(images).join(", "),
            rdna2_override_hint(device, &built_targets(images)).unwrap_or_default()
        )
    };
    let dtype = match call.dtype {
        DType::F16 => KernelDtype::F16,
        DType::BF16 => KernelDtype::Bf16,
        other => candle::bail!(
            "flash-attn-rocm: the GPU kernels take f16 or bf16, got {other:?} (f32 runs on the CPU backend)"
        ),
    };
    let paged = call.seqs.paging.is_some();
    let extras = needs_extras(call);
    let rows = call.max_seqlen_q * call.group_size();
    let decode = rows <= DECODE_ROWS;
    let d = call.head_dim as u32;
    let fits = |img: &&KernelImage| img.target == target && img.dtype == dtype && img.block_d >= d;
    let smallest = |family: Family, pick: &dyn Fn(&KernelImage) -> bool| {
        images.iter().filter(fits).filter(|img| img.family == family && pick(img)).min_by_key(|img| img.block_d)
    };
    let fwd_with = |tile: Tile| {
        smallest(Family::Fwd, &|img| {
            img.tile == tile
                && img.paged == paged
                && img.extras == extras
                && img.even_d == (img.block_d == d)
                && !img.ptr32
        })
    };
    // The prefill tile serves every call; the decode tile is only a faster choice.
    let fwd = decode.then(|| fwd_with(Tile::Decode)).flatten().or_else(|| fwd_with(Tile::Prefill));
    let merge = smallest(Family::Merge, &|_| true);
    match (fwd, merge) {
        (Some(fwd), Some(merge)) => Ok(Kernels { fwd, fwd_b32: twin_b32(fwd, images), merge }),
        _ => candle::bail!(
            "flash-attn-rocm: no Triton kernel built for {target}, {dtype:?}, head dim {d}{}{}. \
             Rebuild with FLASH_ATTN_ROCM_TRITON_DIMS holding a tile >= {d}, FLASH_ATTN_ROCM_DTYPES and \
             FLASH_ATTN_ROCM_TRITON_FILTER covering it",
            if paged { ", paged K/V" } else { "" },
            if extras { ", with ALiBi/softcap/mm_prefix_ranges" } else { "" },
        ),
    }
}

/// The arch whose code objects an RDNA 2 card runs when HSA_OVERRIDE_GFX_VERSION=10.3.0
/// makes the runtime report it as that arch (what gfx1031/gfx1032 users commonly set).
const RDNA2_OVERRIDE_TARGET: &str = "gfx1030";

/// For an RDNA 2 card other than gfx1030 (gfx1031-gfx1036) in a build that has gfx1030's
/// kernels but not its own: how to run those. The loader refuses a gfx1030 code object on any
/// other arch, so the kernels are never picked across archs here; the override makes the
/// runtime report gfx1030 (and this error does not arise).
fn rdna2_override_hint(target: &str, built: &[&str]) -> Option<String> {
    let rdna2 = target.len() == 7 && target.starts_with("gfx103") && target != RDNA2_OVERRIDE_TARGET;
    (rdna2 && built.contains(&RDNA2_OVERRIDE_TARGET)).then(|| {
        format!(
            ", or run with HSA_OVERRIDE_GFX_VERSION=10.3.0 so that this {target} card reports \
             {RDNA2_OVERRIDE_TARGET} and uses the {RDNA2_OVERRIDE_TARGET} kernels this build has"
        )
    })
}

/// The 32-bit buffer-addressing twin of `fwd` among `images`: the same variant in every field
/// but `ptr32`, with the same launch tile (the plan is made with `fwd`'s).
fn twin_b32(fwd: &KernelImage, images: &'static [KernelImage]) -> Option<&'static KernelImage> {
    images.iter().find(|img| {
        img.ptr32
            && img.family == fwd.family
            && img.target == fwd.target
            && img.dtype == fwd.dtype
            && img.block_d == fwd.block_d
            && img.tile == fwd.tile
            && img.even_d == fwd.even_d
            && img.paged == fwd.paged
            && img.extras == fwd.extras
            && (img.block_m, img.block_n, img.threads) == (fwd.block_m, fwd.block_n, fwd.threads)
    })
}

/// The distinct targets among `images`.
pub fn built_targets(images: &[KernelImage]) -> Vec<&'static str> {
    let mut targets: Vec<&'static str> = images.iter().map(|img| img.target).collect();
    targets.sort_unstable();
    targets.dedup();
    targets
}

/// The targets this build embeds kernels for.
pub fn embedded_targets() -> Vec<&'static str> {
    built_targets(KERNELS)
}

#[cfg(test)]
mod tests {
    use super::rdna2_override_hint;

    #[test]
    fn rdna2_cards_are_told_about_the_gfx1030_override() {
        for target in ["gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"] {
            let hint = rdna2_override_hint(target, &["gfx1030", "gfx1100"]).expect(target);
            assert!(hint.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{hint}");
            assert!(hint.contains(target), "{hint}");
        }
    }

    #[test]
    fn no_override_hint_elsewhere() {
        // gfx1030 itself, a build without gfx1030, other archs, malformed names.
        assert_eq!(rdna2_override_hint("gfx1030", &["gfx1030"]), None);
        assert_eq!(rdna2_override_hint("gfx1031", &["gfx1100", "gfx942"]), None);
        assert_eq!(rdna2_override_hint("gfx1101", &["gfx1030", "gfx1100"]), None);
        assert_eq!(rdna2_override_hint("gfx1010", &["gfx1030"]), None);
        assert_eq!(rdna2_override_hint("gfx10310", &["gfx1030"]), None);
        assert_eq!(rdna2_override_hint("sm_90", &["gfx1030"]), None);
    }
}
