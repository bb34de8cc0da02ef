//! A ROCm worker's attention on `Device::new_rocm(0)`, against the same calls on the CPU:
//! 1. `candle_flash_attn::flash_attn` (the compat crate) on f16 tensors made on the device;
//! 2. an attention block: candle-nn `Linear` layers (rocBLAS) around that call, f16;
//! 3. with `--sd`: candle-transformers' Stable Diffusion `CrossAttention` (heads of 40) with
//!    `use_flash_attn = true`, against the same block with Candle's own attention on the CPU.
//!    It casts and transposes on the device, which runs Candle's own kernels.
//!
//! Exits 1 when an output differs from the CPU's by more than its tolerance.
use std::collections::HashMap;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::stable_diffusion::attention::CrossAttention;

/// Uniform values in [-scale, scale), reproducible without a rand dependency.
fn random(seed: &mut u64, shape: &[usize], scale: f32) -> anyhow::Result<Tensor> {
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    };
    let values: Vec<f32> = (0..shape.iter().product()).map(|_| next()).collect();
    Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
}

fn values(t: &Tensor) -> anyhow::Result<Vec<f32>> {
    Ok(t.to_device(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
}

/// Prints the largest difference of `gpu` from `cpu` and whether it is within `relative` of
/// the largest |value| (at least 1); `false` when not.
fn compare(what: &str, gpu: &Tensor, cpu: &Tensor, relative: f32) -> anyhow::Result<bool> {
    let (g, c) = (values(gpu)?, values(cpu)?);
    let diff = g.iter().zip(&c).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let bound = relative * c.iter().fold(1f32, |m, x| m.max(x.abs()));
    let pass = g.len() == c.len() && diff <= bound;
    println!("{what}: max |gpu - cpu| = {diff:.3e} (bound {bound:.1e}): {}", if pass { "ok" } else { "FAILED" });
    Ok(pass)
}

/// Eight f16 steps (2^-10 each) of the largest value: the two sides round the products and
/// the exponentials at different points.
const F16_TOLERANCE: f32 = 8.0 / 1024.0;

fn main() -> anyhow::Result<()> {
    let gpu = Device::new_rocm(0)?;
    let mut seed = 7u64;
    let mut pass = true;

    // 1. The call, on f16 tensors made on the device.
    let qkv: Vec<Vec<half::f16>> = (0..3)
        .map(|_| Ok(values(&random(&mut seed, &[48 * 2 * 64], 1.0)?)?.into_iter().map(half::f16::from_f32).collect()))
        .collect::<anyhow::Result<_>>()?;
    let call = |dev: &Device| -> anyhow::Result<Tensor> {
        let t = |x: &Vec<half::f16>| Tensor::from_slice(x, (1, 48, 2, 64), dev);
        Ok(candle_flash_attn::flash_attn(&t(&qkv[0])?, &t(&qkv[1])?, &t(&qkv[2])?, 0.125, true)?)
    };
    pass &= compare("flash_attn, f16, 48 tokens, heads of 64, causal", &call(&gpu)?, &call(&Device::Cpu)?, F16_TOLERANCE)?;

    // 2. An attention block: Linear layers around the call, q/k/v reshaped (no copy).
    let (dim, heads, head_dim, tokens) = (64usize, 2usize, 40usize, 32usize);
    let inner = heads * head_dim;
    let mut weights = HashMap::new();
    for (name, shape) in [("q.weight", [inner, dim]), ("k.weight", [inner, dim]), ("v.weight", [inner, dim]), ("o.weight", [dim, inner])] {
        weights.insert(name.to_string(), random(&mut seed, &shape, 0.2)?.to_dtype(DType::F16)?);
    }
    let xs = random(&mut seed, &[2, tokens, dim], 1.0)?.to_dtype(DType::F16)?;
    let block = |dev: &Device| -> anyhow::Result<Tensor> {
        let vb = VarBuilder::from_tensors(weights.clone(), DType::F16, dev);
        let linear = |name: &str, i, o| candle_nn::linear_no_bias(i, o, vb.pp(name));
        let (q, k, v, o) = (linear("q", dim, inner)?, linear("k", dim, inner)?, linear("v", dim, inner)?, linear("o", inner, dim)?);
        let x = xs.to_device(dev)?;
        let heads_of = |t: Tensor| t.reshape((2, tokens, heads, head_dim));
        let (q, k, v) = (heads_of(q.forward(&x)?)?, heads_of(k.forward(&x)?)?, heads_of(v.forward(&x)?)?);
        let attn = candle_flash_attn::flash_attn(&q, &k, &v, 1.0 / (head_dim as f32).sqrt(), true)?;
        Ok(o.forward(&attn.reshape((2, tokens, inner))?)?)
    };
    pass &= compare("attention block, f16, Linear + flash_attn + Linear, heads of 40", &block(&gpu)?, &block(&Device::Cpu)?, F16_TOLERANCE)?;

    // 3. candle-transformers' SD CrossAttention, self- and cross-attention with 7 text keys.
    if std::env::args().any(|a| a == "--sd") {
        // SD's blocks project the text to the query's width first: one width serves both.
        let (query_dim, context_dim, text) = (64, 64, 7);
        let mut weights = HashMap::new();
        for (name, shape) in [("to_q.weight", [inner, query_dim]), ("to_k.weight", [inner, context_dim]),
                              ("to_v.weight", [inner, context_dim]), ("to_out.0.weight", [query_dim, inner])] {
            weights.insert(name.to_string(), random(&mut seed, &shape, 0.2)?);
        }
        weights.insert("to_out.0.bias".to_string(), random(&mut seed, &[query_dim], 0.1)?);
        let xs = random(&mut seed, &[2, tokens, query_dim], 1.0)?;
        let context = random(&mut seed, &[2, text, context_dim], 1.0)?;
        let sd = |dev: &Device, flash: bool, context: Option<&Tensor>| -> anyhow::Result<Tensor> {
            let vb = VarBuilder::from_tensors(weights.clone(), DType::F32, dev);
            let block = CrossAttention::new(vb, query_dim, Some(context_dim), heads, head_dim, None, flash)?;
            let context = context.map(|c| c.to_device(dev)).transpose()?;
            Ok(block.forward(&xs.to_device(dev)?, context.as_ref())?)
        };
        for (what, c) in [("self", None), ("cross", Some(&context))] {
            let (g, c) = (sd(&gpu, true, c)?, sd(&Device::Cpu, false, c)?);
            // f16 attention (flash) against f32 attention: f16 rounding of q, k, v and the output.
            pass &= compare(&format!("SD CrossAttention, {what}-attention, heads of 40"), &g, &c, F16_TOLERANCE)?;
        }
    }
    if !pass {
        std::process::exit(1);
    }
    Ok(())
}
