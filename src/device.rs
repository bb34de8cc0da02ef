//! The device side of a call that every layer shares, pure data: the device addresses a call
//! runs on ([`DeviceBuffers`]), what a device allows one block of a launch ([`DeviceLimits`]),
//! and the TMA descriptors the CUDA driver encodes for the sm_90 kernels ([`TensorMap`] of a
//! [`TiledView`]). The driver layer (`crate::gpu`), the kernel families ([`crate::rocm`],
//! [`crate::triton`]) and the glue above them take these types from here, so that none of them
//! imports another layer's module for its data. Compiled in every build.

/// Device addresses of one call. `q`, `k`, `v` are the base addresses of their storages (the
/// call's element offsets are added here); the others point at their first element already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceBuffers {
    /// Base device address of q's storage (the call's element offset is added when marshalled).
    pub q: usize,
    /// Base device address of k's storage (paged: the block pool).
    pub k: usize,
    /// Base device address of v's storage (paged: the block pool).
    pub v: usize,
    /// Contiguous output: `(b, s_q, h, d)` in batch mode, `(total_q, h, d)` otherwise.
    pub out: usize,
    /// f32 log-sum-exp output, or 0 for none (see [`crate::rocm::lse_buffer_required`]): `(b, h, s_q)` in
    /// batch mode, `(h, total_q)` otherwise (see [`crate::params::AttnCall::lse_dims`]).
    pub lse: usize,
    /// f32 ALiBi slopes `(h,)`, when the call has them.
    pub alibi_slopes: usize,
    /// Cumulative query seqlens (`b + 1` u32, read by CK as i32), varlen and paged modes.
    pub seqstart_q: usize,
    /// Cumulative key seqlens (`b + 1` u32, read by CK as i32), varlen and paged modes.
    pub seqstart_k: usize,
    /// `(b, max_blocks)` i32/u32 block table, paged mode.
    pub block_table: usize,
    /// The block table's row stride in elements (at least `max_blocks`), paged mode.
    pub block_table_row_stride: usize,
    /// Paged mode: the split-KV LSE accumulator, f32 `(h, splits, total_q)` of
    /// [`crate::rocm::split_kv_scratch_lens`]`.0` elements; required there.
    pub lse_acc: usize,
    /// Paged mode: the split-KV output accumulator, f32 `(h, splits, total_q, d)` of
    /// [`crate::rocm::split_kv_scratch_lens`]`.1` elements; required there.
    pub o_acc: usize,
    /// `mm_prefix_ranges` `(b, max_ranges, 2)` i32 (Triton kernels only; CK refuses the
    /// ranges), each sequence's pairs consecutive, rows `mm_prefix_row_stride` elements apart.
    pub mm_prefix: usize,
    /// The row stride of `mm_prefix`, in i32 elements, between sequences.
    pub mm_prefix_row_stride: usize,
    /// The stream to run on (`hipStream_t`; `CUstream` on the CUDA verification path).
    pub stream: usize,
    /// The device address of the call's fault word (a u32 in mapped host memory,
    /// `crate::gpu::Driver::queue_with_fault_word`) the Triton kernels and CK's side-tensor
    /// guard report out-of-range side tensors to.
    pub fault: usize,
}

/// What a device allows one block of a kernel launch, queried once per device from its driver
/// (`crate::gpu::Driver::device_limits`). A code object runs on the device only when it fits
/// ([`DeviceLimits::fits`]): a cubin or PTX of another target may need more shared memory than
/// the device has (an sm_80 tile on an sm_86 GPU), and its every launch would fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Shared memory (LDS) one block may use, in bytes: on NVIDIA the most a kernel can opt
    /// into (99 KiB on sm_86, sm_89 and sm_120; 163 KiB on sm_80; 227 KiB on sm_90), on AMD
    /// the LDS of a workgroup (64 KiB; 160 KiB on gfx950).
    pub max_shared_per_block: u32,
    /// Threads one block may have.
    pub max_threads_per_block: u32,
    /// The link between the device and the host performs atomic operations natively, so that
    /// the device's atomics on mapped host memory are atomic with respect to the host's.
    pub host_native_atomics: bool,
}

/// A `CUtensorMap`: 128 opaque bytes, 64-byte aligned as `cuda.h` declares it (the launch copies
/// it from here into the kernel's parameter space).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap(pub [u8; 128]);

impl Default for TensorMap {
    fn default() -> Self {
        TensorMap([0; 128])
    }
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TensorMap(..)")
    }
}

/// Element types of [`TiledView`] (`CUtensorMapDataType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapElement {
    /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT16`.
    F16,
    /// `CU_TENSOR_MAP_DATA_TYPE_BFLOAT16`.
    Bf16,
}

impl MapElement {
    /// The `CUtensorMapDataType` value.
    pub fn cuda_enum(self) -> i32 {
        match self {
            MapElement::F16 => 6,
            MapElement::Bf16 => 9,
        }
    }
}

/// A 2-D row-major view of device memory, read in boxes of `box_rows x box_cols` elements swizzled
/// over a box row's bytes (`CU_TENSOR_MAP_SWIZZLE_128B` for 128-byte rows, `_64B` / `_32B` for a
/// split head dim's 32 or 16 last columns), what the kernels' NVMMA shared layouts expect. Reads
/// past the view are zero-filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiledView {
    /// The element type.
    pub element: MapElement,
    /// Address of element (0, 0): 16-byte aligned.
    pub base: u64,
    /// Rows of the view (at least 1).
    pub rows: u64,
    /// Elements per row (at least 1).
    pub cols: u64,
    /// Bytes from one row to the next: a multiple of 16, at least `cols` elements.
    pub row_stride_bytes: u64,
    /// Rows per box.
    pub box_rows: u32,
    /// Elements per box row: 32, 64 or 128 bytes of them (the swizzle span).
    pub box_cols: u32,
}

impl TiledView {
    /// Bytes of a box row, the span its swizzle permutes (f16/bf16: 2 bytes an element).
    pub fn swizzle_bytes(&self) -> u32 {
        self.box_cols * 2
    }
}
