//! Which embedded code objects serve a call on a given device.
use super::registry::{Family, KernelDtype, KernelImage, Tile, KERNELS};
use super::targets::{build_for, candidates, embedded, forced_target, ENV_TARGET};
use crate::device::{DeviceBuffers, DeviceLimits};
use crate::params::AttnCall;
use candle::{DType, Result};

/// Query rows (times the GQA group) up to which the decode tile serves a call.
pub const DECODE_ROWS: usize = 16;

/// Query rows (times the GQA group) and keys up to which a causal or windowed call takes the
/// short prefill tile where the target has it (kernels/aot.py, `prefill_short`: on an H200 it
/// beat the prefill tile on causal prompts up to 512 tokens at d = 64, 128 and 256, and lost
/// at 1024 at d = 64). Keys too: a few queries against a long cache (chunked prefill) see
/// mostly unmasked tiles, where the larger tile is faster.
pub const SHORT_PREFILL_LEN: usize = 512;

/// The attention kernel and, for split calls, the merge kernel of one call.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// The `attn_fwd` image: same target and dtype as the call, the smallest head-dim tile
    /// that holds its head dim, paged and extras as the call needs.
    pub fwd: &'static KernelImage,
    /// The 32-bit buffer-addressing twin of `fwd` (AMD, where built and within the device's
    /// limits): launched instead of it when every tensor of the call fits
    /// ([`Kernels::fwd_for`]).
    pub fwd_b32: Option<&'static KernelImage>,
    /// The `attn_merge` image that combines the key splits (launched only when the call is
    /// split).
    pub merge: &'static KernelImage,
    /// For a decode call, the batched decode tile ([`Tile::DecodeBatch`]) of the same head-dim
    /// tile, where built: [`super::Plan`] launches it instead of `fwd` when the grid has many
    /// programs per compute unit ([`Kernels::batched`]).
    pub batched: Option<BatchedDecode>,
    /// The TMA prefill kernel ([`super::Family::FwdTma`], sm_90) where built for the call and it
    /// serves it ([`super::tma::serves`]): [`super::Plan`] launches it instead of `fwd` when its
    /// grid fills the device (it does not split the keys).
    pub tma: Option<&'static KernelImage>,
}

/// The batched decode tile's attention image and its 32-bit twin ([`Kernels::batched`]).
#[derive(Debug, Clone, Copy)]
pub struct BatchedDecode {
    /// The [`Tile::DecodeBatch`] `attn_fwd` image.
    pub fwd: &'static KernelImage,
    /// Its 32-bit buffer-addressing twin, where built and usable.
    pub fwd_b32: Option<&'static KernelImage>,
}

impl Kernels {
    /// These kernels with the batched decode tile as the attention kernel, where built.
    pub fn batched(&self) -> Option<Kernels> {
        self.batched.map(|b| Kernels { fwd: b.fwd, fwd_b32: b.fwd_b32, merge: self.merge, batched: None, tma: None })
    }

    /// These kernels with the TMA kernel as the attention kernel, where it serves the call.
    pub fn tma(&self) -> Option<Kernels> {
        self.tma.map(|fwd| Kernels { fwd, fwd_b32: None, merge: self.merge, batched: None, tma: None })
    }

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

/// Whether the call needs the kernels compiled with ALiBi, softcap and mm_prefix support, or
/// their scaling: the plain kernels fold `softmax_scale * log2(e)` into the exponent after taking
/// the maximum of the unscaled scores (kernels/attention.py, `_attend`), which holds only for a
/// positive normal f32 scale; the EXTRAS kernels scale every score first, so they serve a scale
/// <= 0 or one that the product flushes to zero.
pub fn needs_extras(call: &AttnCall) -> bool {
    has_extra_features(call) || !scale_folds(call.softmax_scale)
}

/// Whether `call` has ALiBi, a softcap or prefix ranges.
fn has_extra_features(call: &AttnCall) -> bool {
    call.alibi.is_some() || call.softcap.is_some() || call.mm_prefix.is_some()
}

/// Whether the plain kernels can fold a softmax scale into the exponent: `softmax_scale *
/// log2(e)` is a positive normal f32.
fn scale_folds(softmax_scale: f32) -> bool {
    let qk_scale = softmax_scale * std::f32::consts::LOG2_E;
    qk_scale.is_normal() && qk_scale > 0.0
}

/// Picks the kernels for `call` on a device of arch `device` with `limits` among `images` (the
/// embedded [`KERNELS`] in production). The targets that serve the device are tried in order
/// ([`candidates`]: its own, older cubins, PTX); the first with images for the call that fit the
/// device's limits ([`DeviceLimits::fits`]) serves it: the smallest head-dim tile that holds the
/// call's head dim, the decode tile for few query rows where it fits (else the prefill tile,
/// which serves every call), the paged variant for a block table, the merge, and the 32-bit
/// twin where built and fitting (same tile, launched only for calls that fit it).
///
/// An `Err` when no target of the build serves the device, when none has kernels for the call,
/// or when none of those fits the device: that one names the device's limit, the smallest
/// image's need and the build that would serve it.
pub fn select(call: &AttnCall, device: &str, limits: DeviceLimits, images: &'static [KernelImage]) -> Result<Kernels> {
    select_for(call, device, limits, forced_target(), images)
}

/// [`select`] with the target forced by `forced` rather than by the environment.
fn select_for(
    call: &AttnCall,
    device: &str,
    limits: DeviceLimits,
    forced: Option<&str>,
    images: &'static [KernelImage],
) -> Result<Kernels> {
    let targets = candidates(device, forced, &embedded(images));
    if targets.is_empty() {
        candle::bail!(
            "flash-attn-rocm: no Triton kernels of this build run on {device}{}; built targets: [{}]. Rebuild with \
             FLASH_ATTN_ROCM_ARCHS (AMD) or FLASH_ATTN_ROCM_CUDA_ARCHS (NVIDIA) including it{}",
            forced.map(|f| format!(" as {ENV_TARGET}={f}")).unwrap_or_default(),
            built_targets(images).join(", "),
            rdna2_override_hint(device, &built_targets(images)).unwrap_or_default()
        )
    }
    let wanted = Wanted::of(call)?;
    let fitting = |image: &KernelImage| limits.fits(image);
    match targets.iter().find_map(|target| wanted.kernels(target, images, &fitting)) {
        Some(kernels) => Ok(kernels),
        None => Err(nothing_fits(wanted, device, limits, forced, &targets, images)),
    }
}

/// Why no image of `targets` (the device's, best first) serves a call that wants `wanted` on
/// `device`: nothing is built for the call, or all that is exceeds the device's `limits`.
fn nothing_fits(
    wanted: Wanted,
    device: &str,
    limits: DeviceLimits,
    forced: Option<&str>,
    targets: &[&str],
    images: &'static [KernelImage],
) -> candle::Error {
    let built_for_call = targets.iter().flat_map(|target| {
        let any = |_: &KernelImage| true;
        wanted.tiles().iter().filter_map(move |&tile| wanted.kernels_with(target, tile, images, &any))
    });
    let Some(need) = built_for_call.map(|kernels| kernels.neediest()).min_by_key(|image| (image.shared, image.threads))
    else {
        let Wanted { dtype, d, paged, extras, features, softmax_scale, .. } = wanted;
        let mut why_extras = String::new();
        if extras && features {
            why_extras += ", with ALiBi/softcap/mm_prefix_ranges (the extras variants)";
        }
        if extras && !scale_folds(softmax_scale) {
            why_extras += &format!(
                ", softmax_scale {softmax_scale} (not a positive normal scale: the plain kernels fold the scale into \
                 the exponent, only the extras variants `*_x` scale every score)"
            );
        }
        return candle::Error::Msg(format!(
            "flash-attn-rocm: no Triton kernel built for {}, {dtype:?}, head dim {d}{}{why_extras}. \
             Rebuild with FLASH_ATTN_ROCM_TRITON_DIMS holding a tile >= {d}, FLASH_ATTN_ROCM_DTYPES and \
             FLASH_ATTN_ROCM_TRITON_FILTER covering it",
            targets.join(", "),
            if paged { ", paged K/V" } else { "" },
        ))
        .bt();
    };
    // Forced onto a target whose images do not fit, the device may have one of its own that does.
    let unforced = forced.and_then(|_| {
        let targets = candidates(device, None, &embedded(images));
        targets.into_iter().find(|target| wanted.kernels(target, images, &|image| limits.fits(image)).is_some())
    });
    let advice = match (unforced, build_for(device)) {
        (Some(target), _) => format!(" Without {ENV_TARGET}, this build's {target} kernels serve it"),
        (None, Some(settings)) => format!(" Rebuild with {settings} for kernels made for it"),
        (None, None) => String::new(),
    };
    let as_forced = forced.map(|f| format!(" as {ENV_TARGET}={f}")).unwrap_or_default();
    candle::Error::Msg(format!(
        "flash-attn-rocm: no Triton kernel of this build for this call fits {device}{as_forced}: it allows {} of \
         shared memory and {} threads per block, and the smallest that serves the call ({} {}) needs {} and {} \
         threads.{advice}",
        kib(limits.max_shared_per_block),
        limits.max_threads_per_block,
        need.target,
        need.variant,
        kib(need.shared),
        need.threads,
    ))
    .bt()
}

/// `bytes` as the error messages give sizes: `99 KiB`, `70.5 KiB`.
fn kib(bytes: u32) -> String {
    let kib = f64::from(bytes) / 1024.0;
    if bytes.is_multiple_of(1024) {
        format!("{kib} KiB")
    } else {
        format!("{kib:.1} KiB")
    }
}

/// What a call needs of the images, whatever their target.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    dtype: KernelDtype,
    /// The head dim: served by tiles of at least this `block_d`.
    d: u32,
    paged: bool,
    extras: bool,
    /// ALiBi, softcap or prefix ranges: `extras` for the call's features, not only its scale.
    features: bool,
    softmax_scale: f32,
    /// Few enough query rows (times the GQA group) for the decode tile.
    decode: bool,
    /// A plain, flat, masked call of few enough rows for the short prefill tile.
    short: bool,
    /// A call the TMA kernel serves (where built for its dtype and exact head dim).
    tma: bool,
    /// The TMA classes that serve the call's keys, fastest first ([`super::tma::classes`]).
    tma_classes: &'static [Tile],
}

impl Wanted {
    fn of(call: &AttnCall) -> Result<Self> {
        let dtype = match call.dtype {
            DType::F16 => KernelDtype::F16,
            DType::BF16 => KernelDtype::Bf16,
            other => candle::bail!(
                "flash-attn-rocm: the GPU kernels take f16 or bf16, got {other:?} (f32 runs on the CPU backend)"
            ),
        };
        let rows = call.max_seqlen_q * call.group_size();
        let (paged, extras) = (call.seqs.paging.is_some(), needs_extras(call));
        Ok(Wanted {
            dtype,
            d: call.head_dim as u32,
            paged,
            extras,
            features: has_extra_features(call),
            softmax_scale: call.softmax_scale,
            decode: rows <= DECODE_ROWS,
            short: !paged
                && !extras
                && !call.window.is_unbounded()
                && rows <= SHORT_PREFILL_LEN
                && call.max_seqlen_k <= SHORT_PREFILL_LEN,
            tma: super::tma::serves(call),
            tma_classes: super::tma::classes(call.head_dim, call.window.right >= 0, call.max_seqlen_k),
        })
    }

    /// The `attn_fwd` tiles that serve the call, fastest first: the decode tile for few query
    /// rows, the short prefill tile for short masked prompts, then the prefill tile, which
    /// serves every call.
    fn tiles(&self) -> &'static [Tile] {
        if self.decode {
            &[Tile::Decode, Tile::Prefill]
        } else if self.short {
            &[Tile::PrefillShort, Tile::Prefill]
        } else {
            &[Tile::Prefill]
        }
    }

    /// The kernels of `target` for the call, with the first of its tiles whose images `usable`
    /// accepts, and beside the decode tile the batched one of the same head-dim tile.
    fn kernels(&self, target: &str, images: &'static [KernelImage], usable: &dyn Fn(&KernelImage) -> bool) -> Option<Kernels> {
        let kernels = self.tiles().iter().find_map(|&tile| self.kernels_with(target, tile, images, usable))?;
        let batched = match kernels.fwd.tile {
            Tile::Decode => self
                .kernels_with(target, Tile::DecodeBatch, images, usable)
                .filter(|batched| batched.fwd.block_d == kernels.fwd.block_d)
                .map(|batched| BatchedDecode { fwd: batched.fwd, fwd_b32: batched.fwd_b32 }),
            _ => None,
        };
        let tma = self.tma.then(|| self.tma_image(target, images, usable)).flatten();
        Some(Kernels { batched, tma, ..kernels })
    }

    /// The TMA image of `target` for the call's dtype and exact head dim, if built and usable: of
    /// the first of the call's classes built.
    fn tma_image(&self, target: &str, images: &'static [KernelImage], usable: &dyn Fn(&KernelImage) -> bool) -> Option<&'static KernelImage> {
        let of_tile = |tile: Tile| {
            images.iter().find(|img| {
                img.family == Family::FwdTma
                    && img.tile == tile
                    && img.target == target
                    && img.dtype == self.dtype
                    && img.block_d == self.d
                    && usable(img)
            })
        };
        self.tma_classes.iter().find_map(|&tile| of_tile(tile))
    }

    /// The kernels of `target` for the call with the `attn_fwd` tile `tile`, among the images
    /// `usable` accepts: the smallest head-dim tiles that hold the call's head dim, and the
    /// 32-bit twin where built and usable.
    fn kernels_with(
        &self,
        target: &str,
        tile: Tile,
        images: &'static [KernelImage],
        usable: &dyn Fn(&KernelImage) -> bool,
    ) -> Option<Kernels> {
        let smallest = |pick: &dyn Fn(&KernelImage) -> bool| {
            images
                .iter()
                .filter(|img| img.target == target && img.dtype == self.dtype && img.block_d >= self.d)
                .filter(|img| pick(img) && usable(img))
                .min_by_key(|img| img.block_d)
        };
        let fwd = smallest(&|img| {
            img.family == Family::Fwd
                && img.tile == tile
                && img.paged == self.paged
                && img.extras == self.extras
                && img.even_d == (img.block_d == self.d)
                && !img.ptr32
        })?;
        let merge = smallest(&|img| img.family == Family::Merge)?;
        Some(Kernels { fwd, fwd_b32: twin_b32(fwd, images).filter(|twin| usable(twin)), merge, batched: None, tma: None })
    }
}

impl Kernels {
    /// The image of the attention and the merge that needs the most of a block's resources.
    fn neediest(&self) -> &'static KernelImage {
        let need = |image: &KernelImage| (image.shared, image.threads);
        if need(self.merge) > need(self.fwd) {
            self.merge
        } else {
            self.fwd
        }
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
    use super::*;
    use crate::params::Request;
    use candle::Layout;

    /// The opt-in shared memory per block of an RTX 3090/4090 (sm_86/sm_89) and an RTX 5090
    /// (sm_120): 99 KiB.
    const RTX_SHARED: u32 = 101_376;
    /// An A100's (sm_80): 163 KiB.
    const A100_SHARED: u32 = 166_912;

    fn nvidia(max_shared_per_block: u32) -> DeviceLimits {
        DeviceLimits { max_shared_per_block, max_threads_per_block: 1024, host_native_atomics: false }
    }

    /// An MI300X (gfx942): 64 KiB of LDS per workgroup.
    const MI300X: DeviceLimits =
        DeviceLimits { max_shared_per_block: 65_536, max_threads_per_block: 1024, host_native_atomics: true };

    /// One f16 image of `target` (a cubin unless `ptx`) with its launch facts.
    #[derive(Clone, Copy)]
    struct Spec {
        variant: &'static str,
        tile: Tile,
        block_d: u32,
        extras: bool,
        block_m: u32,
        block_n: u32,
        threads: u32,
        shared: u32,
    }

    fn image(target: &'static str, ptx: bool, spec: &Spec) -> KernelImage {
        let family = if spec.tile == Tile::Merge { Family::Merge } else { Family::Fwd };
        KernelImage {
            target,
            variant: spec.variant,
            kernel: if family == Family::Fwd { "attn_fwd" } else { "attn_merge" },
            family,
            tile: spec.tile,
            dtype: KernelDtype::F16,
            block_d: spec.block_d,
            even_d: family == Family::Fwd,
            paged: false,
            extras: spec.extras,
            ptr32: false,
            block_m: spec.block_m,
            block_n: spec.block_n,
            threads: spec.threads,
            shared: spec.shared,
            scratch_args: 2,
            image: if ptx { b"//\n// Generated by LLVM NVPTX Back-End" } else { b"\x7fELF" },
        }
    }

    /// The flat f16 images at d = 128 and d = 256 of `kernels/aot.py` for sm_80 and sm_86
    /// (triton 3.6): block_m, block_n, threads and shared memory as the build's manifest has
    /// them.
    const SM_80: [Spec; 7] = [
        Spec { variant: "fwd_decode_fp16_d128_flat", tile: Tile::Decode, block_d: 128, extras: false, block_m: 16, block_n: 128, threads: 128, shared: 139_264 },
        Spec { variant: "fwd_decode_fp16_d128_flat_x", tile: Tile::Decode, block_d: 128, extras: true, block_m: 16, block_n: 128, threads: 128, shared: 139_264 },
        Spec { variant: "fwd_prefill_fp16_d128_flat", tile: Tile::Prefill, block_d: 128, extras: false, block_m: 128, block_n: 64, threads: 256, shared: 98_304 },
        Spec { variant: "fwd_prefill_fp16_d128_flat_x", tile: Tile::Prefill, block_d: 128, extras: true, block_m: 128, block_n: 64, threads: 256, shared: 114_688 },
        Spec { variant: "fwd_prefill_fp16_d256_flat", tile: Tile::Prefill, block_d: 256, extras: false, block_m: 64, block_n: 64, threads: 128, shared: 106_496 },
        Spec { variant: "merge_fp16_d128", tile: Tile::Merge, block_d: 128, extras: false, block_m: 1, block_n: 16, threads: 128, shared: 2048 },
        Spec { variant: "merge_fp16_d256", tile: Tile::Merge, block_d: 256, extras: false, block_m: 1, block_n: 8, threads: 128, shared: 2048 },
    ];
    const SM_86: [Spec; 7] = [
        Spec { variant: "fwd_decode_fp16_d128_flat", tile: Tile::Decode, block_d: 128, extras: false, block_m: 16, block_n: 64, threads: 128, shared: 71_680 },
        Spec { variant: "fwd_decode_fp16_d128_flat_x", tile: Tile::Decode, block_d: 128, extras: true, block_m: 16, block_n: 64, threads: 128, shared: 71_680 },
        Spec { variant: "fwd_prefill_fp16_d128_flat", tile: Tile::Prefill, block_d: 128, extras: false, block_m: 128, block_n: 64, threads: 256, shared: 98_304 },
        Spec { variant: "fwd_prefill_fp16_d128_flat_x", tile: Tile::Prefill, block_d: 128, extras: true, block_m: 128, block_n: 64, threads: 256, shared: 81_920 },
        Spec { variant: "fwd_prefill_fp16_d256_flat", tile: Tile::Prefill, block_d: 256, extras: false, block_m: 64, block_n: 32, threads: 128, shared: 69_632 },
        Spec { variant: "merge_fp16_d128", tile: Tile::Merge, block_d: 128, extras: false, block_m: 1, block_n: 16, threads: 128, shared: 2048 },
        Spec { variant: "merge_fp16_d256", tile: Tile::Merge, block_d: 256, extras: false, block_m: 1, block_n: 8, threads: 128, shared: 2048 },
    ];

    /// A build of `targets`, each `(target, its images, ptx)`.
    fn build(targets: &[(&'static str, &[Spec], bool)]) -> &'static [KernelImage] {
        let images = targets.iter().flat_map(|&(target, specs, ptx)| specs.iter().map(move |spec| image(target, ptx, spec)));
        Box::leak(images.collect::<Vec<_>>().into_boxed_slice())
    }

    /// An f16 batch call: `rows` query rows per head of 8 (GQA 8/2), head dim `d`, ALiBi-free
    /// softcap when `extras`.
    fn call(rows: usize, d: usize, extras: bool) -> AttnCall {
        let req = Request {
            softmax_scale: 0.1,
            alibi_slopes: None,
            window_size_left: None,
            window_size_right: Some(0),
            softcap: extras.then_some(30.0),
            varlen: None,
        };
        let q = Layout::contiguous((2, rows, 8, d));
        let kv = Layout::contiguous((2, 4096, 2, d));
        AttnCall::new(&req, [DType::F16; 3], &q, &kv, &kv).unwrap()
    }

    /// Decode (1 row: 4 with the group), prefill (512 rows), at d = 128 and 256, with and
    /// without extras.
    fn calls() -> Vec<AttnCall> {
        let shapes = [(1, 128, false), (1, 128, true), (512, 128, false), (512, 128, true), (1, 256, false), (512, 256, false)];
        shapes.into_iter().map(|(rows, d, extras)| call(rows, d, extras)).collect()
    }

    fn assert_fits(kernels: &Kernels, limits: DeviceLimits, device: &str) {
        for image in [Some(kernels.fwd), kernels.fwd_b32, Some(kernels.merge)].into_iter().flatten() {
            assert!(limits.fits(image), "{device} got {} {} ({} bytes of shared memory)", image.target, image.variant, image.shared);
        }
    }

    #[test]
    fn an_sm_80_build_never_serves_an_image_over_the_device_limit() {
        let cubins = build(&[("sm_80", &SM_80, false)]);
        let ptx = build(&[("sm_80", &SM_80, true)]);
        let cases = [("sm_86", cubins), ("sm_89", cubins), ("sm_86", ptx), ("sm_89", ptx), ("sm_120", ptx)];
        let limits = nvidia(RTX_SHARED);
        for (device, images) in cases {
            for call in calls() {
                match select_for(&call, device, limits, None, images) {
                    Ok(kernels) => assert_fits(&kernels, limits, device),
                    Err(err) => assert!(err.to_string().contains("99 KiB"), "{device}: {err}"),
                }
            }
        }
        // What does fit is served: the 96 KiB prefill tile at d = 128.
        for (device, images) in cases {
            let kernels = select_for(&call(512, 128, false), device, limits, None, images).unwrap();
            assert_eq!((kernels.fwd.target, kernels.fwd.variant), ("sm_80", "fwd_prefill_fp16_d128_flat"), "{device}");
        }
    }

    #[test]
    fn decode_takes_the_prefill_tile_where_the_decode_tile_does_not_fit() {
        let cubins = build(&[("sm_80", &SM_80, false)]);
        let decode = call(1, 128, false);
        let on_rtx = select_for(&decode, "sm_86", nvidia(RTX_SHARED), None, cubins).unwrap();
        assert_eq!((on_rtx.fwd.tile, on_rtx.fwd.shared), (Tile::Prefill, 98_304));
        // The A100 the tiles were made for keeps the decode tile.
        let on_a100 = select_for(&decode, "sm_80", nvidia(A100_SHARED), None, cubins).unwrap();
        assert_eq!((on_a100.fwd.tile, on_a100.fwd.shared), (Tile::Decode, 139_264));
        // An image over the device's threads per block is passed over too.
        let few_threads = DeviceLimits { max_threads_per_block: 128, ..nvidia(A100_SHARED) };
        let prefill = select_for(&call(512, 128, false), "sm_80", few_threads, None, cubins);
        assert!(prefill.unwrap_err().to_string().contains("256 threads"));
    }

    #[test]
    fn a_cubin_too_large_gives_way_to_ptx_that_fits() {
        // An sm_89 device prefers sm_80's cubins (no compile at load time) to sm_86's PTX.
        let images = build(&[("sm_80", &SM_80, false), ("sm_86", &SM_86, true)]);
        let limits = nvidia(RTX_SHARED);
        let plain = select_for(&call(512, 128, false), "sm_89", limits, None, images).unwrap();
        assert_eq!(plain.fwd.target, "sm_80");
        for call in calls() {
            let kernels = select_for(&call, "sm_89", limits, None, images).unwrap();
            assert_fits(&kernels, limits, "sm_89");
        }
        let extras = select_for(&call(512, 128, true), "sm_89", limits, None, images).unwrap();
        assert_eq!((extras.fwd.target, extras.fwd.shared), ("sm_86", 81_920));
        // Decode takes sm_80's prefill tile before sm_86's PTX: a target's tiles are tried
        // before the next target.
        let decode = select_for(&call(1, 128, false), "sm_89", limits, None, images).unwrap();
        assert_eq!((decode.fwd.target, decode.fwd.tile), ("sm_80", Tile::Prefill));
    }

    #[test]
    fn what_no_image_fits_is_an_error_naming_the_limit_the_need_and_the_build() {
        let d256 = call(512, 256, false);
        let cubins = build(&[("sm_80", &SM_80, false)]);
        let err = select_for(&d256, "sm_86", nvidia(RTX_SHARED), None, cubins).unwrap_err().to_string();
        for needle in ["sm_86", "99 KiB", "fwd_prefill_fp16_d256_flat", "104 KiB", "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_86"] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let ptx = build(&[("sm_80", &SM_80, true)]);
        let err = select_for(&d256, "sm_120", nvidia(RTX_SHARED), None, ptx).unwrap_err().to_string();
        for needle in ["sm_120", "99 KiB", "104 KiB", "FLASH_ATTN_ROCM_CUDA_ARCHS=sm_89 FLASH_ATTN_ROCM_CUDA_PTX=1"] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        // Nothing built for the call stays the error it was, not one about the limit.
        let err = select_for(&call(512, 64, false), "sm_86", nvidia(RTX_SHARED), None, cubins).unwrap_err().to_string();
        assert!(err.contains("FLASH_ATTN_ROCM_TRITON_DIMS") && !err.contains("KiB"), "{err}");
    }

    #[test]
    fn a_forced_target_over_the_limit_is_an_error() {
        let images = build(&[("sm_80", &SM_80, true), ("sm_86", &SM_86, true)]);
        let limits = nvidia(RTX_SHARED);
        let fits = select_for(&call(512, 128, false), "sm_86", limits, Some("sm_80"), images).unwrap();
        assert_eq!(fits.fwd.target, "sm_80");
        let decode = select_for(&call(1, 128, false), "sm_86", limits, Some("sm_80"), images).unwrap();
        assert_eq!((decode.fwd.target, decode.fwd.tile), ("sm_80", Tile::Prefill));
        let err = select_for(&call(512, 256, false), "sm_86", limits, Some("sm_80"), images).unwrap_err().to_string();
        for needle in ["as FLASH_ATTN_ROCM_TRITON_TARGET=sm_80", "99 KiB", "104 KiB", "this build's sm_86 kernels serve it"] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        // Unforced, the device's own target serves the same call.
        assert_eq!(select_for(&call(512, 256, false), "sm_86", limits, None, images).unwrap().fwd.target, "sm_86");
        // A build without one is told what to build.
        let sm_80 = build(&[("sm_80", &SM_80, true)]);
        let err = select_for(&call(512, 256, false), "sm_86", limits, Some("sm_80"), sm_80).unwrap_err().to_string();
        assert!(err.contains("Rebuild with FLASH_ATTN_ROCM_CUDA_ARCHS=sm_86"), "{err}");
    }

    #[test]
    fn amd_devices_keep_their_choices() {
        // d = 128 tiles of gfx942's shape, within its 64 KiB of LDS as the build keeps every
        // AMD tile.
        let spec = |variant, tile, extras, block_m, block_n, threads, shared| Spec {
            variant,
            tile,
            block_d: 128,
            extras,
            block_m,
            block_n,
            threads,
            shared,
        };
        let specs = [
            spec("fwd_decode_fp16_d128_flat", Tile::Decode, false, 16, 64, 64, 32_768),
            spec("fwd_prefill_fp16_d128_flat", Tile::Prefill, false, 128, 64, 256, 65_536),
            spec("fwd_prefill_fp16_d128_flat_x", Tile::Prefill, true, 128, 64, 256, 65_536),
            spec("merge_fp16_d128", Tile::Merge, false, 1, 16, 64, 0),
        ];
        let mut images = specs.iter().map(|s| image("gfx942", false, s)).collect::<Vec<_>>();
        images.push(KernelImage { ptr32: true, variant: "fwd_prefill_fp16_d128_flat_b32", ..images[1] });
        let images: &'static [KernelImage] = Box::leak(images.into_boxed_slice());
        let decode = select_for(&call(1, 128, false), "gfx942", MI300X, None, images).unwrap();
        assert_eq!((decode.fwd.tile, decode.fwd_b32.is_some()), (Tile::Decode, false));
        let prefill = select_for(&call(512, 128, false), "gfx942", MI300X, None, images).unwrap();
        assert_eq!(prefill.fwd.variant, "fwd_prefill_fp16_d128_flat");
        assert_eq!(prefill.fwd_b32.map(|t| t.variant), Some("fwd_prefill_fp16_d128_flat_b32"));
        let extras = select_for(&call(1, 128, true), "gfx942", MI300X, None, images).unwrap();
        assert_eq!(extras.fwd.variant, "fwd_prefill_fp16_d128_flat_x");
        // A twin over the limit is left out; its 64-bit image serves every call.
        let mut grown = images.to_vec();
        grown[4].shared = 65_537;
        let grown: &'static [KernelImage] = Box::leak(grown.into_boxed_slice());
        let prefill = select_for(&call(512, 128, false), "gfx942", MI300X, None, grown).unwrap();
        assert_eq!((prefill.fwd.variant, prefill.fwd_b32.is_none()), ("fwd_prefill_fp16_d128_flat", true));
    }

    #[test]
    fn head_dims_between_powers_of_two_take_the_split_tile_that_holds_them() {
        // Prefill images at the tiles 64, 80 (64 + 16) and 128, exact and padded, and the merges
        // of the powers of two: a head dim runs on the smallest tile that holds it, padded unless
        // it fills it, and its splits merge on the smallest merge that holds it.
        let mut images = Vec::new();
        for block_d in [64, 80, 128] {
            for even_d in [true, false] {
                let spec = Spec { variant: "fwd", tile: Tile::Prefill, block_d, extras: false, block_m: 128, block_n: 64, threads: 256, shared: 65_536 };
                images.push(KernelImage { even_d, ..image("gfx942", false, &spec) });
            }
            if block_d.is_power_of_two() {
                let merge = Spec { variant: "merge", tile: Tile::Merge, block_d, extras: false, block_m: 1, block_n: 16, threads: 64, shared: 0 };
                images.push(image("gfx942", false, &merge));
            }
        }
        let images: &'static [KernelImage] = Box::leak(images.into_boxed_slice());
        let chosen = |d| {
            let k = select_for(&call(512, d, false), "gfx942", MI300X, None, images).unwrap();
            (k.fwd.block_d, k.fwd.even_d, k.merge.block_d)
        };
        assert_eq!(chosen(80), (80, true, 128));
        assert_eq!(chosen(72), (80, false, 128));
        assert_eq!(chosen(64), (64, true, 64));
        assert_eq!(chosen(96), (128, false, 128));
        assert_eq!(chosen(40), (64, false, 64));
    }

    #[test]
    fn scales_the_plain_kernels_cannot_fold_take_the_extras_variants() {
        let with_scale = |softmax_scale: f32| {
            let req = Request { softmax_scale, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
            let q = Layout::contiguous((1, 64, 8, 128));
            AttnCall::new(&req, [DType::F16; 3], &q, &q, &q).unwrap()
        };
        // x log2(e) a positive normal f32: folded into the exponent by the plain kernels.
        for scale in [0.088, 1e-30, 3.0, f32::MIN_POSITIVE] {
            assert!(!needs_extras(&with_scale(scale)), "{scale}");
        }
        // Zero, negative, or flushed to a subnormal: scaled first.
        for scale in [0.0, -0.0, -0.125, -7.5, 1e-39, f32::MIN_POSITIVE / 2.0] {
            assert!(needs_extras(&with_scale(scale)), "{scale}");
        }
        let images = build(&[("sm_80", &SM_80, false)]);
        let negative = AttnCall { softmax_scale: -0.1, ..call(512, 128, false) };
        let kernels = select_for(&negative, "sm_80", nvidia(A100_SHARED), None, images).unwrap();
        assert_eq!(kernels.fwd.variant, "fwd_prefill_fp16_d128_flat_x");
        // Issue 56: a build filtered to the plain kernels refused such a scale and blamed
        // ALiBi/softcap/mm_prefix_ranges, which the call does not have. It names the scale.
        let plain: Vec<Spec> = SM_80.iter().filter(|s| !s.extras).copied().collect();
        let images = build(&[("sm_80", &plain, false)]);
        let err = select_for(&negative, "sm_80", nvidia(A100_SHARED), None, images).unwrap_err().to_string();
        assert!(err.contains("softmax_scale -0.1") && err.contains("*_x") && !err.contains("ALiBi"), "{err}");
        // With a softcap as well, both reasons are named (before, only the features were).
        let softcapped = AttnCall { softmax_scale: -0.1, ..call(512, 128, true) };
        let err = select_for(&softcapped, "sm_80", nvidia(A100_SHARED), None, images).unwrap_err().to_string();
        assert!(err.contains("ALiBi/softcap/mm_prefix_ranges") && err.contains("softmax_scale -0.1"), "{err}");
        let softcapped = AttnCall { softmax_scale: 0.1, ..call(512, 128, true) };
        let err = select_for(&softcapped, "sm_80", nvidia(A100_SHARED), None, images).unwrap_err().to_string();
        assert!(err.contains("ALiBi/softcap/mm_prefix_ranges") && !err.contains("softmax_scale"), "{err}");
    }

    #[test]
    fn head_dims_above_256_take_the_512_tile_or_name_it() {
        // Issue 57: head dims 264-512 had no GPU kernel (the largest tile was 256). With the 512
        // tile built they take it; a build without it says which tile to add.
        let wide = Spec { variant: "fwd_prefill_fp16_d512_flat", tile: Tile::Prefill, block_d: 512, extras: false, block_m: 64, block_n: 32, threads: 128, shared: 131_072 };
        let wide_p = Spec { variant: "fwd_prefill_fp16_d512p_flat", ..wide };
        let merge = Spec { variant: "merge_fp16_d512", tile: Tile::Merge, block_d: 512, block_m: 1, block_n: 8, threads: 128, shared: 4096, extras: false };
        let with_512 = SM_80.iter().chain([&wide, &wide_p, &merge]).map(|spec| KernelImage {
            even_d: !spec.variant.contains("p_flat") && spec.tile != Tile::Merge,
            ..image("sm_80", false, spec)
        });
        let images: &'static [KernelImage] = Box::leak(with_512.collect::<Vec<_>>().into_boxed_slice());
        for (d, variant) in [(264, "fwd_prefill_fp16_d512p_flat"), (512, "fwd_prefill_fp16_d512_flat")] {
            let kernels = select_for(&call(512, d, false), "sm_80", nvidia(A100_SHARED), None, images).unwrap();
            assert_eq!((kernels.fwd.variant, kernels.fwd.block_d, kernels.merge.block_d), (variant, 512, 512));
        }
        let images = build(&[("sm_80", &SM_80, false)]);
        for d in [264, 512] {
            let err = select_for(&call(512, d, false), "sm_80", nvidia(A100_SHARED), None, images).unwrap_err().to_string();
            assert!(err.contains(&format!("head dim {d}")) && err.contains(&format!("FLASH_ATTN_ROCM_TRITON_DIMS holding a tile >= {d}")), "{err}");
        }
    }

    #[test]
    fn short_masked_prompts_take_the_short_tile_where_it_is_built() {
        // An f16 batch call of GQA 8/2 at d = 128: `positions` queries, `keys` keys.
        let call = |positions: usize, keys: usize, causal: bool, softcap: Option<f32>| {
            let req = Request {
                softmax_scale: 0.1,
                alibi_slopes: None,
                window_size_left: None,
                window_size_right: causal.then_some(0),
                softcap,
                varlen: None,
            };
            let q = Layout::contiguous((2, positions, 8, 128));
            let kv = Layout::contiguous((2, keys, 2, 128));
            AttnCall::new(&req, [DType::F16; 3], &q, &kv, &kv).unwrap()
        };
        let short = Spec {
            variant: "fwd_prefill_short_fp16_d128_flat",
            tile: Tile::PrefillShort,
            block_d: 128,
            extras: false,
            block_m: 64,
            block_n: 32,
            threads: 128,
            shared: 49_152,
        };
        let mut specs = SM_80.to_vec();
        specs.push(short);
        let with_short = build(&[("sm_90", &specs, false)]);
        let pick = |call: &AttnCall, images| select_for(call, "sm_90", nvidia(232_448), None, images).unwrap().fwd.variant;
        // 128 positions x the group of 4 = 512 packed rows, 512 keys: causal takes it.
        assert_eq!(pick(&call(128, 512, true, None), with_short), "fwd_prefill_short_fp16_d128_flat");
        // More rows or keys, no mask, extras, or few enough rows for decode: the usual tiles.
        assert_eq!(pick(&call(129, 512, true, None), with_short), "fwd_prefill_fp16_d128_flat");
        assert_eq!(pick(&call(128, 513, true, None), with_short), "fwd_prefill_fp16_d128_flat");
        assert_eq!(pick(&call(128, 512, false, None), with_short), "fwd_prefill_fp16_d128_flat");
        assert_eq!(pick(&call(128, 512, true, Some(30.0)), with_short), "fwd_prefill_fp16_d128_flat_x");
        assert_eq!(pick(&call(4, 512, true, None), with_short), "fwd_decode_fp16_d128_flat");
        // A build without it serves the same call with the prefill tile.
        let without = build(&[("sm_90", &SM_80, false)]);
        assert_eq!(pick(&call(128, 512, true, None), without), "fwd_prefill_fp16_d128_flat");
    }

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
