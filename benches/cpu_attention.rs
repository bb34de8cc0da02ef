//! Criterion benches of the CPU kernel beside Candle's naive attention (matmul, softmax, matmul).
//! `cargo bench --bench cpu_attention`; the example `bench` prints the summary table instead.

use candle::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn naive(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> candle::Result<Tensor> {
    let (q, k, v) = (q.transpose(1, 2)?.contiguous()?, k.transpose(1, 2)?.contiguous()?, v.transpose(1, 2)?.contiguous()?);
    let att = candle_nn::ops::softmax_last_dim(&(q.matmul(&k.t()?)? * scale)?)?;
    att.matmul(&v)?.transpose(1, 2)?.contiguous()
}

fn attention(c: &mut Criterion) {
    let (b, h, d) = (1, 8, 128);
    for dtype in [DType::F32, DType::BF16] {
        let mut group = c.benchmark_group(format!("attention_{dtype:?}").to_lowercase());
        group.sample_size(10);
        for s in [256usize, 1024] {
            let mk = || Tensor::randn(0f32, 1.0, (b, s, h, d), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
            let (q, k, v) = (mk(), mk(), mk());
            let scale = 1.0 / (d as f64).sqrt();
            group.throughput(Throughput::Elements((4 * b * h * s * s * d) as u64));
            group.bench_with_input(BenchmarkId::new("flash_cpu", s), &s, |bench, _| {
                bench.iter(|| flash_attn_rocm::flash_attn(&q, &k, &v, scale as f32, false).unwrap())
            });
            group.bench_with_input(BenchmarkId::new("flash_cpu_causal", s), &s, |bench, _| {
                bench.iter(|| flash_attn_rocm::flash_attn(&q, &k, &v, scale as f32, true).unwrap())
            });
            group.bench_with_input(BenchmarkId::new("candle_naive", s), &s, |bench, _| {
                bench.iter(|| naive(&q, &k, &v, scale).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, attention);
criterion_main!(benches);
