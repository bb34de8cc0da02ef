//! Which kernel family serves a call on an AMD GPU: Composable Kernel where a CK instance of
//! this build serves it on this arch, our Triton kernels otherwise (RDNA, and what CK lacks:
//! head dims off its tiles, any page size, softcap with ALiBi, mm_prefix_ranges).
//! `FLASH_ATTN_ROCM_KERNELS=auto|ck|triton` forces one, for comparisons and tests. Pure Rust.
use crate::device::DeviceLimits;
use crate::params::{AttnCall, Mode};
use crate::rocm::{check_supported, splitkv_tile};
use crate::triton::{select, KernelImage, Kernels};
use candle::Result;

/// The environment variable that forces a kernel family: `auto` (or unset), `ck` or `triton`
/// (see [`KernelChoice`]). Read once per process.
pub const ENV_KERNELS: &str = "FLASH_ATTN_ROCM_KERNELS";

/// The family that serves a call; the Triton one with the kernels it selected.
#[derive(Debug, Clone, Copy)]
pub enum KernelFamily {
    /// Composable Kernel's fmha forward (split-KV for paged K/V), through the C++ shim.
    Ck,
    /// Our Triton kernels: the forward image and the merge image that [`select()`] picked.
    Triton(Kernels),
}

/// The value of `FLASH_ATTN_ROCM_KERNELS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelChoice {
    /// CK where a built instance serves the call on this arch, Triton otherwise (the default).
    Auto,
    /// CK only: a call CK cannot serve is an `Err` naming why.
    Ck,
    /// Triton only, even where CK would serve the call.
    Triton,
}

impl KernelChoice {
    /// Parses the variable's value (surrounding whitespace ignored); unset or empty is `Auto`.
    /// Any value other than `auto`, `ck` or `triton` is an `Err`.
    pub fn parse(value: Option<&str>) -> Result<Self> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Ok(Self::Auto),
            Some("ck") => Ok(Self::Ck),
            Some("triton") => Ok(Self::Triton),
            Some(other) => candle::bail!("flash-attn-rocm: {ENV_KERNELS}={other}: expected auto, ck or triton"),
        }
    }

    /// `FLASH_ATTN_ROCM_KERNELS`, read once per process.
    pub fn from_env() -> Result<Self> {
        static VALUE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        Self::parse(VALUE.get_or_init(|| std::env::var(ENV_KERNELS).ok()).as_deref())
    }
}

/// What this build compiled: CK's archs and head-dim tiles, and the Triton images. In
/// production the `rocm` build's `CK_ARCHS`, `CK_HDIMS`, `CK_SPLITKV_HDIMS` and
/// [`crate::triton::KERNELS`]; tests pass their own.
#[derive(Debug, Clone, Copy)]
pub struct Built<'a> {
    /// Comma-separated archs CK kernels were built for (`gfx942,gfx950`); empty without CK.
    pub ck_archs: &'a str,
    /// Comma-separated head-dim tiles of CK's forward kernels (`64,128`); a head dim runs on the
    /// smallest tile that holds it.
    pub ck_hdims: &'a str,
    /// The head-dim tiles of the split-KV kernels (paged K/V), a subset of `ck_hdims`.
    pub ck_splitkv_hdims: &'a str,
    /// The Triton images to select from.
    pub triton: &'static [KernelImage],
}

impl Built<'_> {
    /// The CK forward tile that serves `head_dim`: CK's dispatcher takes the smallest built
    /// tile that holds it.
    pub fn ck_fwd_tile(&self, head_dim: usize) -> Option<usize> {
        self.ck_hdims.split(',').filter_map(|h| h.trim().parse::<usize>().ok()).filter(|&t| t >= head_dim).min()
    }

    /// Why CK cannot serve `call` on `arch`, or `None` when it can.
    fn ck_refusal(&self, call: &AttnCall, arch: &str) -> Option<String> {
        if !self.ck_archs.split(',').any(|a| a == arch) {
            return Some(format!("CK was built for [{}], not {arch}", self.ck_archs));
        }
        // What CK supports at all before what this build has of it.
        if let Err(e) = check_supported(call) {
            return Some(e.to_string());
        }
        if self.ck_fwd_tile(call.head_dim).is_none() {
            return Some(format!("no CK head-dim tile >= {} was built ({})", call.head_dim, self.ck_hdims));
        }
        // Paged calls run on the smallest built split-KV tile that holds the head dim.
        if call.mode == Mode::Paged {
            if let Err(e) = splitkv_tile(call.head_dim, self.ck_splitkv_hdims) {
                return Some(e.to_string());
            }
        }
        None
    }
}

/// The kernel family for `call` on `arch` (a device with `limits`) under `choice`, or an `Err`
/// saying why neither serves.
pub fn choose(
    call: &AttnCall,
    arch: &str,
    limits: DeviceLimits,
    choice: KernelChoice,
    built: &Built,
) -> Result<KernelFamily> {
    let triton = || select(call, arch, limits, built.triton).map(KernelFamily::Triton);
    match (choice, built.ck_refusal(call, arch)) {
        (KernelChoice::Triton, _) => triton(),
        (KernelChoice::Ck | KernelChoice::Auto, None) => Ok(KernelFamily::Ck),
        (KernelChoice::Ck, Some(why)) => candle::bail!("flash-attn-rocm: {ENV_KERNELS}=ck: {why}"),
        // Triton is consulted only when CK cannot serve the call.
        (KernelChoice::Auto, Some(ck_why)) => triton().map_err(|triton_why| {
            candle::Error::Msg(format!(
                "flash-attn-rocm: no kernel serves this call on {arch}: CK: {ck_why}; Triton: {triton_why}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{AttnCall, Request};
    use crate::triton::{Family, KernelDtype, Tile};
    use candle::{DType, Device, Tensor};

    /// The LDS of a workgroup on the AMD GPUs the tests name (gfx942, gfx1100, gfx1201).
    const LDS_64_KIB: DeviceLimits =
        DeviceLimits { max_shared_per_block: 64 * 1024, max_threads_per_block: 1024, host_native_atomics: true };

    fn images(target: &'static str) -> &'static [KernelImage] {
        let image = |family, tile, block_d, even_d| KernelImage {
            target,
            variant: if family == Family::Merge { "merge_test" } else { "fwd_test" },
            kernel: "k",
            family,
            tile,
            dtype: KernelDtype::F16,
            block_d,
            even_d,
            paged: false,
            extras: false,
            ptr32: false,
            block_m: 64,
            block_n: 64,
            threads: 128,
            shared: 0,
            scratch_args: 2,
            image: &[],
        };
        let all = [32, 64, 128, 256, 512]
            .into_iter()
            .flat_map(|d| {
                [image(Family::Fwd, Tile::Prefill, d, true), image(Family::Fwd, Tile::Prefill, d, false), image(Family::Merge, Tile::Merge, d, false)]
            })
            .collect::<Vec<_>>();
        Box::leak(all.into_boxed_slice())
    }

    fn call(d: usize) -> AttnCall {
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: None };
        let q = Tensor::zeros((1, 100, 4, d), DType::F16, &Device::Cpu).unwrap();
        AttnCall::new(&req, [DType::F16; 3], q.layout(), q.layout(), q.layout()).unwrap()
    }

    #[test]
    fn auto_prefers_ck_and_falls_back_to_triton() {
        let built = Built { ck_archs: "gfx942", ck_hdims: "64,128", ck_splitkv_hdims: "64,128", triton: images("gfx942") };
        assert!(matches!(choose(&call(128), "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap(), KernelFamily::Ck));
        assert!(matches!(choose(&call(40), "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap(), KernelFamily::Ck));
        // Head dim 256: no CK tile built; Triton serves it.
        let KernelFamily::Triton(k) = choose(&call(256), "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap() else {
            panic!("head dim 256 should go to Triton")
        };
        assert_eq!(k.fwd.block_d, 256);
        // Head dims above 256 have no CK tile at all (CK's receipt-2 tiles stop there): the
        // 512 tile serves them (issue 57).
        for d in [264, 512] {
            let KernelFamily::Triton(k) = choose(&call(d), "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap() else {
                panic!("head dim {d} should go to Triton")
            };
            assert_eq!(k.fwd.block_d, 512);
        }
        let rdna = Built { ck_archs: "gfx942", ck_hdims: "64,128", ck_splitkv_hdims: "64,128", triton: images("gfx1100") };
        assert!(matches!(choose(&call(128), "gfx1100", LDS_64_KIB, KernelChoice::Auto, &rdna).unwrap(), KernelFamily::Triton(_)));
    }

    #[test]
    fn forced_choices_and_refusals_say_why() {
        let built = Built { ck_archs: "gfx942", ck_hdims: "64,128", ck_splitkv_hdims: "64,128", triton: images("gfx942") };
        assert!(matches!(choose(&call(64), "gfx942", LDS_64_KIB, KernelChoice::Triton, &built).unwrap(), KernelFamily::Triton(_)));
        let err = choose(&call(256), "gfx942", LDS_64_KIB, KernelChoice::Ck, &built).unwrap_err().to_string();
        assert!(err.contains("FLASH_ATTN_ROCM_KERNELS=ck") && err.contains("tile >= 256"), "{err}");
        let err = choose(&call(512), "gfx942", LDS_64_KIB, KernelChoice::Ck, &built).unwrap_err().to_string();
        assert!(err.contains("CK supports head dims up to 256, got 512"), "{err}");
        let none = Built { ck_archs: "", ck_hdims: "", ck_splitkv_hdims: "", triton: images("gfx942") };
        let err = choose(&call(64), "gfx1201", LDS_64_KIB, KernelChoice::Auto, &none).unwrap_err().to_string();
        assert!(err.contains("CK was built for []") && err.contains("no Triton kernels of this build run on gfx1201"), "{err}");
    }

    fn paged_call(d: usize) -> AttnCall {
        let dev = &Device::Cpu;
        let seqlens = Tensor::new(&[0u32, 1, 2], dev).unwrap();
        let seqlens_k = Tensor::new(&[0u32, 300, 700], dev).unwrap();
        let table = Tensor::new(&[[0u32, 1, 2, 3], [4, 5, 6, 7]], dev).unwrap();
        let varlen = crate::params::VarLenRequest {
            seqlens_q: &seqlens,
            seqlens_k: &seqlens_k,
            max_seqlen_q: 1,
            max_seqlen_k: 400,
            block_table: Some(&table),
            page_block_size: Some(128),
            mm_prefix_ranges: None,
        };
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
        let q = Tensor::zeros((2, 4, d), DType::F16, dev).unwrap();
        let kv = Tensor::zeros((8, 128, 4, d), DType::F16, dev).unwrap();
        AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap()
    }

    #[test]
    fn paged_calls_need_a_splitkv_tile() {
        // d = 96 has a forward tile but no split-KV tile of its own: it runs on the 128 one.
        let built = Built { ck_archs: "gfx942", ck_hdims: "64,96,128", ck_splitkv_hdims: "64,128", triton: images("gfx942") };
        assert!(matches!(choose(&paged_call(96), "gfx942", LDS_64_KIB, KernelChoice::Ck, &built).unwrap(), KernelFamily::Ck));
        let only_96 = Built { ck_hdims: "64,96", ck_splitkv_hdims: "64", ..built };
        let err = choose(&paged_call(96), "gfx942", LDS_64_KIB, KernelChoice::Ck, &only_96).unwrap_err().to_string();
        assert!(err.contains("split-KV tile >= 96") && err.contains("FLASH_ATTN_ROCM_HDIMS"), "{err}");
        // The non-paged call of that head dim still runs on CK's 96 forward tile.
        assert!(matches!(choose(&call(96), "gfx942", LDS_64_KIB, KernelChoice::Ck, &only_96).unwrap(), KernelFamily::Ck));
    }

    /// One query row per sequence against `keys` keys: a decode call.
    fn decode_call(d: usize, keys: usize) -> AttnCall {
        let req = Request { softmax_scale: 0.1, alibi_slopes: None, window_size_left: None, window_size_right: Some(0), softcap: None, varlen: None };
        let q = Tensor::zeros((1, 1, 4, d), DType::F16, &Device::Cpu).unwrap();
        let kv = Tensor::zeros((1, keys, 4, d), DType::F16, &Device::Cpu).unwrap();
        AttnCall::new(&req, [DType::F16; 3], q.layout(), kv.layout(), kv.layout()).unwrap()
    }

    /// What `explain` and `FLASH_ATTN_ROCM_LOG` report for a GPU call comes from `choose` and
    /// the launch plan, as `glue::queue` makes them.
    #[test]
    fn the_reported_dispatch_is_the_chosen_one() {
        use crate::explain::GpuWork;
        use crate::triton::Plan;
        use crate::{Backend, Dispatch};
        let built = Built { ck_archs: "gfx942", ck_hdims: "64,128", ck_splitkv_hdims: "64,128", triton: images("gfx942") };
        let device = || "HIP:0:gfx942".to_owned();
        // CK serves head dim 40 with its 64 tile.
        let ck_call = call(40);
        assert!(matches!(choose(&ck_call, "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap(), KernelFamily::Ck));
        let tile = built.ck_fwd_tile(ck_call.head_dim).unwrap();
        let ck = Dispatch::gpu(device(), "gfx942", &ck_call, GpuWork::Ck { tile, split: None });
        assert_eq!((ck.backend, ck.variant.as_str(), ck.splits), (Backend::Ck, "fmha_fwd_d64", 1));
        assert_eq!(ck.call, "batch f16 b=1 h=4 h_k=4 d=40 s_q=100 s_k=100");
        // Triton serves head dim 256 (no CK tile); one query row against 32k keys splits them.
        for (call, split) in [(call(256), false), (decode_call(256, 32768), true)] {
            let KernelFamily::Triton(kernels) = choose(&call, "gfx942", LDS_64_KIB, KernelChoice::Auto, &built).unwrap() else {
                panic!("head dim 256 should go to Triton")
            };
            let plan = Plan::new(&call, kernels, 304).unwrap();
            let triton = Dispatch::gpu(device(), "gfx942", &call, GpuWork::Triton { plan: &plan, fwd: kernels.fwd });
            assert_eq!((triton.backend, triton.target.as_str(), triton.variant.as_str()), (Backend::Triton, "gfx942", "fwd_test"));
            assert_eq!(triton.splits, plan.num_splits);
            assert_eq!(triton.splits > 1, split, "{triton}");
            assert_eq!(triton.merge.as_deref(), split.then_some("merge_test"));
            let line = triton.to_string();
            assert!(line.starts_with("flash-attn-rocm: backend=triton device=HIP:0:gfx942 target=gfx942 variant=fwd_test"), "{line}");
        }
    }

    #[test]
    fn the_variable_parses_strictly() {
        assert_eq!(KernelChoice::parse(None).unwrap(), KernelChoice::Auto);
        assert_eq!(KernelChoice::parse(Some(" triton ")).unwrap(), KernelChoice::Triton);
        assert_eq!(KernelChoice::parse(Some("ck")).unwrap(), KernelChoice::Ck);
        assert!(KernelChoice::parse(Some("cuda")).unwrap_err().to_string().contains("auto, ck or triton"));
    }
}
