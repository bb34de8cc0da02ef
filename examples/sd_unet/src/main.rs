//! Stable Diffusion 1.5's UNet (candle-transformers 0.11.1, its real config, random weights)
//! with `use_flash_attn` on and off: the attention of every transformer block then goes
//! through `candle_flash_attn::flash_attn`, which Cargo's patch points at this repository's
//! compat crate. One denoising step of a batch of 2 (as classifier-free guidance runs it),
//! checked and timed:
//!
//! - every UNet is built as an SD worker builds it (`StableDiffusionConfig::v1_5(..).build_unet`)
//!   from one file of random weights; the reference is the UNet without flash attention in f32;
//! - in f16 the flash UNet's error against it must stay within 2x that of Candle's own f16 UNet
//!   (the GPU suite's rule); in f32, where candle-transformers casts q, k and v to f16 for the
//!   call and nothing else rounds, below F32_BOUND (the f16 UNet's own error is printed beside);
//! - the time per step of both UNets at the run dtype, alternating, best of `--steps`.
//!
//! `cargo run --release -- [--cpu] [--size 512] [--dtype f16|f32] [--steps 5]`.

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::stable_diffusion::unet_2d::{BlockConfig, UNet2DConditionModel, UNet2DConditionModelConfig};
use candle_transformers::models::stable_diffusion::StableDiffusionConfig;

/// The flash UNet's relative error bound in f32: f16's rounding of q, k and v (5e-4 relative)
/// carried through the UNet, with room (measured 4.7e-4 on an H200, 6.8e-4 on the CPU).
const F32_BOUND: f32 = 5e-3;

struct Args {
    cpu: bool,
    size: usize,
    dtype: DType,
    steps: usize,
}

fn args() -> Args {
    let mut args = Args { cpu: false, size: 512, dtype: DType::F16, steps: 5 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--cpu" => args.cpu = true,
            "--size" => args.size = value().parse().expect("--size: pixels, a multiple of 64"),
            "--steps" => args.steps = value().parse().expect("--steps: a count"),
            "--dtype" => {
                args.dtype = match value().as_str() {
                    "f16" => DType::F16,
                    "f32" => DType::F32,
                    other => panic!("--dtype: f16 or f32, not {other}"),
                }
            }
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// The relative L2 error of `x` against `reference`.
fn relative_error(x: &Tensor, reference: &Tensor) -> Result<f32> {
    let reference = reference.to_dtype(DType::F32)?;
    let diff = (x.to_dtype(DType::F32)? - &reference)?;
    let norm = |t: &Tensor| -> Result<f32> { t.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>() };
    Ok(norm(&diff)? / norm(&reference)?)
}

/// One UNet step, waited for.
fn step(unet: &UNet2DConditionModel, latents: &Tensor, text: &Tensor, dev: &Device) -> Result<(Tensor, Duration)> {
    let started = Instant::now();
    let out = unet.forward(latents, 999.0, text)?;
    dev.synchronize()?;
    Ok((out, started.elapsed()))
}

/// Random weights for SD 1.5's UNet, each layer at its own init, in a safetensors file (f32) that
/// `build_unet` then loads as it loads the real weights. The config here only gives the tensors'
/// names and shapes (candle-transformers keeps v1_5's private): where it differs from v1_5's,
/// `build_unet` fails on a missing tensor or a shape.
fn random_weights(dev: &Device) -> Result<std::path::PathBuf> {
    let block = |out_channels, use_cross_attn, attention_head_dim| BlockConfig { out_channels, use_cross_attn, attention_head_dim };
    let shapes = UNet2DConditionModelConfig {
        blocks: vec![block(320, Some(1), 8), block(640, Some(1), 8), block(1280, Some(1), 8), block(1280, None, 8)],
        cross_attention_dim: 768,
        layers_per_block: 2,
        norm_num_groups: 32,
        use_linear_projection: false,
        ..UNet2DConditionModelConfig::default()
    };
    let varmap = VarMap::new();
    UNet2DConditionModel::new(VarBuilder::from_varmap(&varmap, DType::F32, dev), 4, 4, false, shapes)?;
    let path = std::env::temp_dir().join(format!("sd-unet-random-{}.safetensors", std::process::id()));
    varmap.save(&path)?;
    Ok(path)
}

fn main() -> Result<()> {
    let args = args();
    let dev = if args.cpu { Device::Cpu } else { Device::new_cuda(0)? };
    let config = StableDiffusionConfig::v1_5(None, Some(args.size), Some(args.size));
    let weights = random_weights(&dev)?;
    let unet = |flash: bool, dtype: DType| config.build_unet(&weights, &dev, 4, flash, dtype);
    let low = if args.dtype == DType::F32 { DType::F16 } else { args.dtype };
    let reference = unet(false, DType::F32)?;
    let plain_low = unet(false, low)?;
    let plain = unet(false, args.dtype)?;
    let flash = unet(true, args.dtype)?;
    std::fs::remove_file(&weights)?;

    let latent = args.size / 8;
    let latents = Tensor::randn(0f32, 1., (2, 4, latent, latent), &dev)?;
    let text = Tensor::randn(0f32, 1., (2, 77, 768), &dev)?;
    let (expected, _) = step(&reference, &latents, &text, &dev)?;
    let input = |dtype: DType| -> Result<(Tensor, Tensor)> { Ok((latents.to_dtype(dtype)?, text.to_dtype(dtype)?)) };
    let (latents_low, text_low) = input(low)?;
    let (latents, text) = input(args.dtype)?;
    let candle_error = relative_error(&step(&plain_low, &latents_low, &text_low, &dev)?.0, &expected)?;

    let (mut best_plain, mut best_flash) = (Duration::MAX, Duration::MAX);
    let mut flash_error = 0f32;
    for _ in 0..args.steps.max(1) {
        let (_, plain_time) = step(&plain, &latents, &text, &dev)?;
        let (out, flash_time) = step(&flash, &latents, &text, &dev)?;
        flash_error = relative_error(&out, &expected)?;
        best_plain = best_plain.min(plain_time);
        best_flash = best_flash.min(flash_time);
    }
    println!(
        "SD 1.5 UNet, {0}x{0} pixels (latents {1}x{1}), batch 2, {2:?} on {3:?}: relative L2 error against the f32 UNet \
         without flash attention: with flash attention {flash_error:.3e}, Candle's own at {low:?} {candle_error:.3e}",
        args.size, latent, args.dtype, dev
    );
    println!(
        "time per step, best of {}: without flash attention {:.1} ms, with {:.1} ms ({:.2}x)",
        args.steps.max(1),
        best_plain.as_secs_f64() * 1e3,
        best_flash.as_secs_f64() * 1e3,
        best_plain.as_secs_f64() / best_flash.as_secs_f64()
    );
    let (bound, rule) = match args.dtype {
        DType::F32 => (F32_BOUND, format!("{F32_BOUND:e} (f16 attention in an f32 UNet)")),
        _ => (2.0 * candle_error, format!("2x Candle's own error at {low:?}")),
    };
    if !(flash_error <= bound) {
        eprintln!("FAILED: the flash UNet's error is above {rule}");
        std::process::exit(1);
    }
    println!("passed: within {rule}");
    Ok(())
}
