//! The 64-bit-addressing images of variants that have a `_b32` twin. Calls on small tensors
//! always take the twin (`Kernels::fwd_for`), so these run through the raw launch path
//! (`triton::plan` then `triton::launch`, as the Candle glue does) with the twin taken out of the
//! plan: the 64-bit image itself, on the same call.
use candle::{DType, Device, Tensor};
use flash_attn_rocm::gpu::{DeviceBuffer, Driver};
use flash_attn_rocm::params::{AttnCall, Request};
use flash_attn_rocm::device::DeviceBuffers;
use flash_attn_rocm::triton::{launch, plan, take_faults};

/// Bytes of a contiguous f16/bf16/f32 tensor.
fn bytes(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F16 => t.to_vec1::<half::f16>().unwrap().iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
        DType::BF16 => t.to_vec1::<half::bf16>().unwrap().iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
        other => panic!("no bytes for {other:?}"),
    }
}

fn upload<'d>(driver: &'d Driver, data: &[u8]) -> DeviceBuffer<'d> {
    let buffer = driver.malloc(data.len().max(4)).unwrap();
    driver.copy_to_device(&buffer, data).unwrap();
    buffer
}

/// Output and LSE `(b, h, s_q)` of a batch call (contiguous q/k/v) launched with the 64-bit
/// image; also the variants' names the plan chose.
pub fn batch_without_twin(driver: &'static Driver, [q, k, v]: &[Tensor; 3], scale: f32, causal: bool) -> (Tensor, Tensor, usize) {
    let req = Request { softmax_scale: scale, alibi_slopes: None, window_size_left: None, window_size_right: causal.then_some(0), softcap: None, varlen: None };
    let call = AttnCall::new(&req, [q.dtype(); 3], q.layout(), k.layout(), v.layout()).unwrap();
    let mut plan = plan(driver, &call).unwrap();
    assert!(plan.kernels.fwd_b32.is_some(), "{}: no twin to take out", plan.kernels.fwd.variant);
    plan.kernels.fwd_b32 = None;
    let (q_d, k_d, v_d) = (upload(driver, &bytes(q)), upload(driver, &bytes(k)), upload(driver, &bytes(v)));
    let out_len = q.elem_count() * 2;
    let lse_len = call.total_q * call.num_heads;
    let (out_d, lse_d) = (upload(driver, &vec![0xff; out_len]), upload(driver, &vec![0xff; lse_len * 4]));
    let (l_len, o_len) = plan.scratch_lens(&call);
    let (l_acc, o_acc) = (upload(driver, &vec![0xff; l_len * 4]), upload(driver, &vec![0xff; o_len * 4]));
    let buffers = DeviceBuffers {
        q: q_d.addr(),
        k: k_d.addr(),
        v: v_d.addr(),
        out: out_d.addr(),
        lse: lse_d.addr(),
        lse_acc: l_acc.addr(),
        o_acc: o_acc.addr(),
        ..DeviceBuffers::default()
    };
    // SAFETY: every buffer was allocated for this call's shapes (q/k/v/out/LSE and the plan's
    // split accumulators) on the driver's one device and outlives the launch, which runs to
    // completion before it returns on the emulator; outputs do not alias inputs; stream 0.
    unsafe { launch(driver, &call, &plan, &buffers) }.unwrap();
    driver.synchronize().unwrap();
    take_faults(driver).unwrap();
    let mut out = vec![0u8; out_len];
    driver.copy_to_host(&mut out, &out_d).unwrap();
    let mut lse = vec![0u8; lse_len * 4];
    driver.copy_to_host(&mut lse, &lse_d).unwrap();
    let halves: Vec<u16> = out.chunks_exact(2).map(|b| u16::from_ne_bytes([b[0], b[1]])).collect();
    let out = match q.dtype() {
        DType::F16 => Tensor::from_vec(halves.into_iter().map(half::f16::from_bits).collect::<Vec<_>>(), q.shape(), &Device::Cpu),
        _ => Tensor::from_vec(halves.into_iter().map(half::bf16::from_bits).collect::<Vec<_>>(), q.shape(), &Device::Cpu),
    }
    .unwrap();
    let lse: Vec<f32> = lse.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
    let (b, _, h, _) = q.dims4().unwrap();
    (out, Tensor::from_vec(lse, (b, h, call.total_q / b), &Device::Cpu).unwrap(), plan.num_splits)
}
