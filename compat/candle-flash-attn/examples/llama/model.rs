//! A small llama-style decoder: RMSNorm, rotary embeddings, grouped-query causal attention with
//! a KV cache, SwiGLU MLP. Attention is either `candle_flash_attn::flash_attn` (reached through
//! the compat crate, exactly as candle-transformers calls it) or plain matmul-softmax, so the two
//! can run side by side on the same weights. Shared by `examples/llama` and
//! `tests/model_parity.rs`.

use std::collections::HashMap;

use candle::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub max_positions: usize,
}

impl Config {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Shapes of every weight, by the names llama checkpoints use.
    fn weight_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i, kv) = (
            self.hidden_size,
            self.intermediate_size,
            self.num_kv_heads * self.head_dim(),
        );
        let mut shapes = vec![
            (
                "model.embed_tokens.weight".to_string(),
                vec![self.vocab_size, h],
            ),
            ("model.norm.weight".to_string(), vec![h]),
            ("lm_head.weight".to_string(), vec![self.vocab_size, h]),
        ];
        for l in 0..self.num_layers {
            let p = format!("model.layers.{l}");
            for (name, shape) in [
                ("input_layernorm.weight", vec![h]),
                ("post_attention_layernorm.weight", vec![h]),
                ("self_attn.q_proj.weight", vec![h, h]),
                ("self_attn.k_proj.weight", vec![kv, h]),
                ("self_attn.v_proj.weight", vec![kv, h]),
                ("self_attn.o_proj.weight", vec![h, h]),
                ("mlp.gate_proj.weight", vec![i, h]),
                ("mlp.up_proj.weight", vec![i, h]),
                ("mlp.down_proj.weight", vec![h, i]),
            ] {
                shapes.push((format!("{p}.{name}"), shape));
            }
        }
        shapes
    }
}

/// Which attention the model runs; everything else is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionImpl {
    Flash,
    Naive,
}

/// Random weights from `seed`, in f64 so every dtype is cast from the same values.
/// Matrices are uniform with variance 1/fan_in (activations keep their scale through the
/// layers); norm gains are 1 +- 0.1; embeddings are uniform in [-1, 1).
pub fn random_weights(cfg: &Config, seed: u64) -> Result<HashMap<String, Tensor>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut weights = HashMap::new();
    for (name, shape) in cfg.weight_shapes() {
        let n: usize = shape.iter().product();
        let data: Vec<f64> = if name.ends_with("norm.weight") {
            (0..n).map(|_| 1.0 + rng.gen_range(-0.1..0.1)).collect()
        } else if name.contains("embed_tokens") {
            (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
        } else {
            let bound = (3.0 / shape[1] as f64).sqrt();
            (0..n).map(|_| rng.gen_range(-bound..bound)).collect()
        };
        weights.insert(name, Tensor::from_vec(data, shape, &Device::Cpu)?);
    }
    Ok(weights)
}

/// One `(k, v)` pair per layer, `(batch, positions so far, kv heads, head dim)`: the layout
/// flash attention takes directly.
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new(cfg: &Config) -> Self {
        KvCache {
            layers: vec![None; cfg.num_layers],
        }
    }

    /// Number of positions already cached (the position of the next token).
    pub fn positions(&self) -> usize {
        self.layers[0]
            .as_ref()
            .map_or(0, |(k, _)| k.dim(1).unwrap_or(0))
    }
}

/// cos/sin tables `(max_positions, head_dim / 2)` for the non-interleaved (llama) rotary layout.
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

impl Rotary {
    fn new(cfg: &Config, dtype: DType, device: &Device) -> Result<Self> {
        let half = cfg.head_dim() / 2;
        let angles: Vec<f64> = (0..cfg.max_positions)
            .flat_map(|pos| {
                (0..half).map(move |i| {
                    pos as f64 / cfg.rope_theta.powf(2.0 * i as f64 / cfg.head_dim() as f64)
                })
            })
            .collect();
        let angles = Tensor::from_vec(angles, (cfg.max_positions, half), &Device::Cpu)?.to_device(device)?;
        Ok(Rotary {
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
        })
    }

    /// x `(b, t, heads, head_dim)` holding positions `start..start + t`. Tensor ops rather
    /// than candle-nn's fused rope, which has no CUDA kernel unless candle-nn's own `cuda`
    /// feature is on (a dev-dependency's feature no feature of this crate can turn on).
    fn apply(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        let (t, half) = (x.dim(1)?, x.dim(3)? / 2);
        let cos = self.cos.narrow(0, start, t)?.unsqueeze(1)?;
        let sin = self.sin.narrow(0, start, t)?.unsqueeze(1)?;
        let (x1, x2) = (x.narrow(3, 0, half)?, x.narrow(3, half, half)?);
        let rotated_1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
        let rotated_2 = (x2.broadcast_mul(&cos)? + x1.broadcast_mul(&sin)?)?;
        Tensor::cat(&[rotated_1, rotated_2], 3)
    }
}

struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(RmsNorm {
            weight: vb.get(size, "weight")?,
            eps: eps as f32,
        })
    }

    // The tensor-op version: candle-nn's fused kernel sums in f32 even for f64 inputs, which
    // would cap the precision of the f64 reference model.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm_slow(x, &self.weight, self.eps)
    }
}

struct SelfAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl SelfAttention {
    fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let (h, kv) = (cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim());
        Ok(SelfAttention {
            q_proj: candle_nn::linear_no_bias(h, h, vb.pp("q_proj"))?,
            k_proj: candle_nn::linear_no_bias(h, kv, vb.pp("k_proj"))?,
            v_proj: candle_nn::linear_no_bias(h, kv, vb.pp("v_proj"))?,
            o_proj: candle_nn::linear_no_bias(h, h, vb.pp("o_proj"))?,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim(),
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        rotary: &Rotary,
        cache: &mut Option<(Tensor, Tensor)>,
        attention: AttentionImpl,
    ) -> Result<Tensor> {
        let (b, t, hidden) = x.dims3()?;
        let start = cache.as_ref().map_or(0, |(k, _)| k.dim(1).unwrap_or(0));
        let q = self
            .q_proj
            .forward(x)?
            .reshape((b, t, self.num_heads, self.head_dim))?;
        let k = self
            .k_proj
            .forward(x)?
            .reshape((b, t, self.num_kv_heads, self.head_dim))?;
        let v = self
            .v_proj
            .forward(x)?
            .reshape((b, t, self.num_kv_heads, self.head_dim))?;
        let q = rotary.apply(&q, start)?;
        let k = rotary.apply(&k, start)?;
        let (k, v) = match cache.take() {
            Some((past_k, past_v)) => (
                Tensor::cat(&[&past_k, &k], 1)?,
                Tensor::cat(&[&past_v, &v], 1)?,
            ),
            None => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        // causal = true is right for prefill, chunked prefill and one-token decode alike:
        // flash attention aligns the causal mask bottom-right, so the t new queries see the
        // whole cache plus the new keys up to their own position.
        let y = match attention {
            AttentionImpl::Flash => candle_flash_attn::flash_attn(&q, &k, &v, scale, true)?,
            AttentionImpl::Naive => naive_causal_attention(&q, &k, &v, scale)?,
        };
        self.o_proj.forward(&y.reshape((b, t, hidden))?)
    }
}

/// Plain matmul-softmax attention, same layouts and masking as `flash_attn(.., causal=true)`.
/// On a GPU it computes in f32, as candle-transformers' llama does (Candle's own attention, the
/// one a model would run without flash attention), with the generic softmax (candle-nn's fused
/// one has no CUDA kernel unless candle-nn's own `cuda` feature is on); on the CPU in the
/// model's dtype, the low-precision naive model the parity test bounds the flash model by.
fn naive_causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    let on_cpu = q.device().is_cpu();
    let in_dtype = q.dtype();
    let work = |x: &Tensor| if on_cpu { Ok(x.clone()) } else { x.to_dtype(DType::F32) };
    let (q, k, v) = (&work(q)?, &work(k)?, &work(v)?);
    let (b, t, h, d) = q.dims4()?;
    let (_, s, h_k, _) = k.dims4()?;
    let n_rep = h / h_k;
    let repeat_kv = |x: &Tensor| -> Result<Tensor> {
        let x = x.transpose(1, 2)?.contiguous()?;
        x.unsqueeze(2)?
            .expand((b, h_k, n_rep, s, d))?
            .reshape((b, h, s, d))
    };
    let q = q.transpose(1, 2)?.contiguous()?;
    let (k, v) = (repeat_kv(k)?, repeat_kv(v)?);
    let mut logits = (q.matmul(&k.t()?)? * scale as f64)?;
    if t > 1 {
        // Query i is position s - t + i; it may not see keys after it.
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| {
                (0..s).map(move |j| {
                    if j > s - t + i {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t, s), q.device())?.to_dtype(q.dtype())?;
        logits = logits.broadcast_add(&mask)?;
    }
    let probs = if on_cpu {
        candle_nn::ops::softmax_last_dim(&logits)?
    } else {
        candle_nn::ops::softmax(&logits, candle::D::Minus1)?
    };
    probs.matmul(&v)?.transpose(1, 2)?.to_dtype(in_dtype)
}

struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Mlp {
            gate_proj: candle_nn::linear_no_bias(h, i, vb.pp("gate_proj"))?,
            up_proj: candle_nn::linear_no_bias(h, i, vb.pp("up_proj"))?,
            down_proj: candle_nn::linear_no_bias(i, h, vb.pp("down_proj"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gated = (self.gate_proj.forward(x)?.silu()? * self.up_proj.forward(x)?)?;
        self.down_proj.forward(&gated)
    }
}

struct Block {
    input_norm: RmsNorm,
    attention: SelfAttention,
    post_attention_norm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        Ok(Block {
            input_norm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("input_layernorm"))?,
            attention: SelfAttention::new(cfg, vb.pp("self_attn"))?,
            post_attention_norm: RmsNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
            mlp: Mlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        rotary: &Rotary,
        cache: &mut Option<(Tensor, Tensor)>,
        attention: AttentionImpl,
    ) -> Result<Tensor> {
        let x = (x + self.attention.forward(
            &self.input_norm.forward(x)?,
            rotary,
            cache,
            attention,
        )?)?;
        &x + self.mlp.forward(&self.post_attention_norm.forward(&x)?)?
    }
}

pub struct Llama {
    embed_tokens: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    lm_head: Linear,
    rotary: Rotary,
    attention: AttentionImpl,
}

impl Llama {
    /// The model in `vb`'s dtype on `vb`'s device, running `attention`.
    pub fn new(cfg: &Config, vb: VarBuilder, attention: AttentionImpl) -> Result<Self> {
        let model = vb.pp("model");
        let blocks = (0..cfg.num_layers)
            .map(|l| Block::new(cfg, model.pp(format!("layers.{l}"))))
            .collect::<Result<_>>()?;
        Ok(Llama {
            embed_tokens: candle_nn::embedding(
                cfg.vocab_size,
                cfg.hidden_size,
                model.pp("embed_tokens"),
            )?,
            blocks,
            norm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, model.pp("norm"))?,
            lm_head: candle_nn::linear_no_bias(cfg.hidden_size, cfg.vocab_size, vb.pp("lm_head"))?,
            rotary: Rotary::new(cfg, vb.dtype(), vb.device())?,
            attention,
        })
    }

    /// Builds the model from `weights` (any dtype) cast to `dtype`, on `device`.
    pub fn from_weights(
        cfg: &Config,
        weights: &HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        attention: AttentionImpl,
    ) -> Result<Self> {
        let vb = VarBuilder::from_tensors(weights.clone(), dtype, device);
        Self::new(cfg, vb, attention)
    }

    /// tokens `(b, t)` u32 at positions `cache.len()..`; returns logits `(b, t, vocab)` and
    /// appends the new keys/values to `cache`.
    pub fn forward(&self, tokens: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let mut x = self.embed_tokens.forward(tokens)?;
        for (block, layer_cache) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = block.forward(&x, &self.rotary, layer_cache, self.attention)?;
        }
        self.lm_head.forward(&self.norm.forward(&x)?)
    }
}
