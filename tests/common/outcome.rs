//! What the GPU suites compare: a public function's result and the dtypes/head dims they sweep.

use candle::{DType, Result, Tensor};
use flash_attn_rocm::device::DeviceBuffers;

pub const DTYPES: [DType; 2] = [DType::F16, DType::BF16];
/// Each dtype with the two head dims its cases alternate, swapped between the dtypes so that
/// both see each of 64 and 128 in every row.
pub const DTYPES_AND_DIMS: [(DType, usize, usize); 2] = [(DTYPES[0], 64, 128), (DTYPES[1], 128, 64)];

/// What a public function returns: the output, and the LSE for the LSE variants.
pub type Outcome = Result<(Tensor, Option<Tensor>)>;

pub fn out_only(t: Result<Tensor>) -> Outcome {
    t.map(|t| (t, None))
}

pub fn with_lse(t: Result<(Tensor, Tensor)>) -> Outcome {
    t.map(|(out, lse)| (out, Some(lse)))
}

/// Made-up device addresses for the host-side marshalling tests: distinct, 16-byte aligned.
pub const FAKE_BUFFERS: DeviceBuffers = DeviceBuffers {
    q: 0x1000_0000,
    k: 0x2000_0000,
    v: 0x3000_0000,
    out: 0x4000_0000,
    lse: 0x5000_0000,
    alibi_slopes: 0x6000_0000,
    seqstart_q: 0x7000_0000,
    seqstart_k: 0x7100_0000,
    block_table: 0x7200_0000,
    block_table_row_stride: 0,
    lse_acc: 0x7300_0000,
    o_acc: 0x7400_0000,
    mm_prefix: 0x7500_0000,
    mm_prefix_row_stride: 0,
    stream: 0xabc0,
    fault: 0xfa00,
};
