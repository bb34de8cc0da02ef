//! The llama-style decoder of `examples/llama` with attention through
//! `candle_flash_attn::flash_attn` must produce the logits of the same model with plain
//! matmul-softmax attention: on prefill, on a chunked prefill against the cache (queries not
//! aligned with keys: bottom-right causal masking), and on one-token cached decode steps.
//! Rule: `max|flash - ref| <= 2 * max|naive_lowprec - ref| + eps`, with `ref` the naive model in
//! f64. Fresh random weights, tokens and lengths every run (seed printed).

mod common;
#[path = "../examples/llama/model.rs"]
mod model;

use candle::{DType, Device, Tensor};
use model::{AttentionImpl, Config, KvCache, Llama};
use rand::{rngs::StdRng, Rng};

const CONFIG: Config = Config {
    vocab_size: 256,
    hidden_size: 128,
    intermediate_size: 344,
    num_layers: 2,
    num_heads: 4,
    num_kv_heads: 2,
    rope_theta: 10_000.0,
    rms_norm_eps: 1e-5,
    max_positions: 128,
};

fn random_tokens(rng: &mut StdRng, batch: usize, len: usize) -> candle::Result<Tensor> {
    let ids: Vec<u32> = (0..batch * len)
        .map(|_| rng.gen_range(0..CONFIG.vocab_size as u32))
        .collect();
    Tensor::from_vec(ids, (batch, len), &Device::Cpu)
}

/// The three models and their caches, advanced in lockstep on identical tokens.
struct Trio {
    models: [Llama; 3],
    caches: [KvCache; 3],
}

impl Trio {
    fn new(rng: &mut StdRng, dtype: DType) -> candle::Result<Self> {
        let weights = model::random_weights(&CONFIG, rng.gen())?;
        let build = |dtype, attention| Llama::from_weights(&CONFIG, &weights, dtype, &Device::Cpu, attention);
        Ok(Trio {
            models: [
                build(dtype, AttentionImpl::Flash)?,
                build(dtype, AttentionImpl::Naive)?,
                build(DType::F64, AttentionImpl::Naive)?,
            ],
            caches: [
                KvCache::new(&CONFIG),
                KvCache::new(&CONFIG),
                KvCache::new(&CONFIG),
            ],
        })
    }

    /// Feeds `tokens` to all three and checks the rule on the logits.
    fn step(&mut self, what: &str, tokens: &Tensor) -> candle::Result<()> {
        let mut logits = Vec::with_capacity(3);
        for (model, cache) in self.models.iter().zip(self.caches.iter_mut()) {
            logits.push(model.forward(tokens, cache)?);
        }
        common::tolerance::assert_within_rule(what, &logits[0], &logits[1], &logits[2])?;
        Ok(())
    }
}

fn check_model(dtype: DType) -> candle::Result<()> {
    let mut rng = common::seeded_rng(&format!("model_parity_{dtype:?}"));
    let mut trio = Trio::new(&mut rng, dtype)?;
    let batch = rng.gen_range(1..=2);
    let prompt = rng.gen_range(8..=48);
    let chunk = rng.gen_range(2..=9);
    println!("batch {batch}, prompt {prompt}, chunk {chunk}, then 4 one-token steps");

    trio.step("prefill", &random_tokens(&mut rng, batch, prompt)?)?;
    trio.step(
        "chunked prefill on cache",
        &random_tokens(&mut rng, batch, chunk)?,
    )?;
    for step in 0..4 {
        trio.step(
            &format!("decode step {step}"),
            &random_tokens(&mut rng, batch, 1)?,
        )?;
    }
    assert_eq!(trio.caches[0].positions(), prompt + chunk + 4);
    Ok(())
}

#[test]
fn model_parity_f32() -> candle::Result<()> {
    check_model(DType::F32)
}

#[test]
fn model_parity_f16() -> candle::Result<()> {
    check_model(DType::F16)
}

#[test]
fn model_parity_bf16() -> candle::Result<()> {
    check_model(DType::BF16)
}
