//! The 64-bit-addressing images of variants that have a `_b32` twin. Calls on small tensors
//! always take the twin (`Kernels::fwd_for`), so these run through the raw launch path
//! (`triton::plan` then `triton::launch`, as the Candle glue does) with the twin taken out of the
//! plan: the 64-bit image itself, on the same call.
use candle::{DType, Device, Tensor};
use flash_attn_rocm::gpu::{DeviceBuffer, Driver};
use flash_attn_rocm::params::{AttnCall, Request, VarLenRequest};
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
    let (out, lse, call, splits) = launch_without_twin(driver, &req, [q, k, v], &[], DeviceBuffers::default());
    let (b, _, h, _) = q.dims4().unwrap();
    (out, lse.reshape((b, h, call.total_q / b)).unwrap(), splits)
}

/// Output `(total_q, h, d)` and LSE `(h, total_q)` of a paged call without a mask (varlen q,
/// K/V pages `(blocks, page, h_k, d)`, a u32 block table) launched with the 64-bit image.
pub fn paged_without_twin(
    driver: &'static Driver,
    [q, k_pages, v_pages]: &[Tensor; 3],
    (cu_q, cu_k, table): (&Tensor, &Tensor, &Tensor),
    (max_q, max_k, page): (usize, usize, usize),
    scale: f32,
) -> (Tensor, Tensor, usize) {
    let varlen = VarLenRequest {
        seqlens_q: cu_q, seqlens_k: cu_k, max_seqlen_q: max_q, max_seqlen_k: max_k, block_table: Some(table),
        page_block_size: Some(page), mm_prefix_ranges: None,
    };
    let req = Request { softmax_scale: scale, alibi_slopes: None, window_size_left: None, window_size_right: None, softcap: None, varlen: Some(varlen) };
    let side = [u32_bytes(cu_q), u32_bytes(cu_k), u32_bytes(table)];
    let row_stride = table.dim(1).unwrap();
    let buffers = DeviceBuffers { block_table_row_stride: row_stride, ..DeviceBuffers::default() };
    let (out, lse, call, splits) = launch_without_twin(driver, &req, [q, k_pages, v_pages], &side, buffers);
    (out, lse.reshape((call.num_heads, call.total_q)).unwrap(), splits)
}

fn u32_bytes(t: &Tensor) -> Vec<u8> {
    t.flatten_all().unwrap().to_vec1::<u32>().unwrap().iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Launches `req` on q/k/v with the plan's 64-bit image (its `_b32` twin taken out): `side` are
/// the varlen side tensors' bytes (cumulative seqlens of q and k, then the block table), uploaded
/// into `buffers`' seqstart_q, seqstart_k and block_table. Returns the output (q's shape), the
/// LSE (flat), the call and the plan's splits.
fn launch_without_twin(
    driver: &'static Driver,
    req: &Request<'_>,
    [q, k, v]: [&Tensor; 3],
    side: &[Vec<u8>],
    mut buffers: DeviceBuffers,
) -> (Tensor, Tensor, AttnCall, usize) {
    let call = AttnCall::new(req, [q.dtype(); 3], q.layout(), k.layout(), v.layout()).unwrap();
    let mut plan = plan(driver, &call).unwrap();
    assert!(plan.kernels.fwd_b32.is_some(), "{}: no twin to take out", plan.kernels.fwd.variant);
    plan.kernels.fwd_b32 = None;
    let (q_d, k_d, v_d) = (upload(driver, &bytes(q)), upload(driver, &bytes(k)), upload(driver, &bytes(v)));
    let side_d: Vec<DeviceBuffer> = side.iter().map(|b| upload(driver, b)).collect();
    let out_len = q.elem_count() * 2;
    let lse_len = call.total_q * call.num_heads;
    let (out_d, lse_d) = (upload(driver, &vec![0xff; out_len]), upload(driver, &vec![0xff; lse_len * 4]));
    let (l_len, o_len) = plan.scratch_lens(&call);
    let (l_acc, o_acc) = (upload(driver, &vec![0xff; l_len * 4]), upload(driver, &vec![0xff; o_len * 4]));
    if let [seq_q, seq_k, rest @ ..] = side_d.as_slice() {
        (buffers.seqstart_q, buffers.seqstart_k) = (seq_q.addr(), seq_k.addr());
        if let [table] = rest {
            buffers.block_table = table.addr();
        }
    }
    let buffers = DeviceBuffers {
        q: q_d.addr(),
        k: k_d.addr(),
        v: v_d.addr(),
        out: out_d.addr(),
        lse: lse_d.addr(),
        lse_acc: l_acc.addr(),
        o_acc: o_acc.addr(),
        ..buffers
    };
    // SAFETY: every buffer was allocated for this call's shapes (q/k/v/out/LSE, the side tensors
    // and the plan's split accumulators) on the driver's one device and outlives the launch,
    // which runs to completion before it returns on the emulator; outputs do not alias inputs;
    // stream 0.
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
    (out, Tensor::from_vec(lse, lse_len, &Device::Cpu).unwrap(), call, plan.num_splits)
}
