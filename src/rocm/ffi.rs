//! The one bridge to the C++ shim (csrc/): a plain struct holding exactly what reaches CK's
//! `fmha_fwd_traits`/`fmha_fwd_args` (or the split-KV pair for paged K/V), and the launch
//! function. The struct is compiled in every build so that host tests can check the marshalling
//! without ROCm; the C++ functions exist only when CK was built (`rocm` feature and a CK arch
//! among `FLASH_ATTN_ROCM_ARCHS`: cfg `flash_attn_rocm_ck`).

/// The cxx bridge: the shared types below are plain Rust types in every build (re-exported by
/// [`crate::rocm`]); the C++ functions are declared only with cfg `flash_attn_rocm_ck` and are
/// reached through the safe wrappers of `crate::rocm` (`fmha_fwd`, `guard_side_tensors`, ...).
///
/// The shared enums are C-like `#[repr(transparent)]` structs in Rust (cxx's representation):
/// each variant is an associated constant, and a value outside the variants is representable
/// (the C++ side rejects it).
#[cxx::bridge(namespace = "flash_attn_rocm")]
pub mod bridge {
    /// Element type of q, k, v and the output (CK's `data_type` "fp16" / "bf16").
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(i32)]
    enum CkDtype {
        /// IEEE half precision (`f16`).
        Fp16 = 0,
        /// bfloat16 (`bf16`).
        Bf16 = 1,
    }

    /// CK's `mask_enum`. flash-attention uses `NoMask` and `BottomRight` only: causal is
    /// bottom-right with (left, 0), a window is bottom-right with (left, right).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(i32)]
    enum CkMask {
        /// Every key visible (the window sizes must be -1).
        NoMask = 0,
        /// A window aligned to the top-left corner (query `i` at key position `i`); not used
        /// by flash-attention's API.
        TopLeft = 1,
        /// A window aligned to the bottom-right corner (query `i` at key position
        /// `i + s_k - s_q`), as flash-attention's causal and local masks.
        BottomRight = 2,
        /// CK's generic mask (arbitrary coordinates); not used here.
        Generic = 3,
    }

    /// CK's `bias_enum` restricted to what the API offers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(i32)]
    enum CkBias {
        /// No bias.
        NoBias = 0,
        /// ALiBi: `-slope[head] * |pos - j|` added to each logit, slopes at `alibi_slopes_ptr`.
        Alibi = 2,
    }

    /// One forward call, as CK sees it. Pointers are device addresses already advanced to the
    /// tensor's first element; strides and sizes count elements (CK's `index_t` is i32).
    ///
    /// Batch mode (`is_group_mode == false`): q/k/v/o are (b, s, h, d) views; `stride_*` is the
    /// row (sequence) stride, `nhead_stride_*` the head stride, `batch_stride_*` the batch stride;
    /// `seqlen_q/k` are the per-batch lengths; seqstart pointers are 0.
    /// Group mode (varlen): (total, h, d) views with batch strides 0; `seqstart_q/k_ptr` point
    /// to the b+1 cumulative i32 offsets on the device; `seqlen_q/k` are the totals.
    /// Paged (`block_table_ptr != 0`, group mode only): k/v are (num_blocks, page_block_size,
    /// h_k, d); `batch_stride_k/v` is the block stride, `stride_k/v` the row stride inside a
    /// block; the block table is (b, max_blocks) i32 with row stride `batch_stride_block_table`.
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct CkFwdParams {
        // Traits (kernel selection).
        /// Element type of q, k, v and the output.
        dtype: CkDtype,
        /// Group (varlen) mode: sequences packed in `(total, h, d)` tensors and described by
        /// the seqstart arrays; `false` for batch mode. Paged K/V requires it.
        is_group_mode: bool,
        /// Selects the kernels compiled with the logit softcap (`logits_soft_cap`).
        has_logits_soft_cap: bool,
        /// The mask: [`CkMask::NoMask`], or [`CkMask::BottomRight`] with the window sizes.
        mask_type: CkMask,
        /// The bias: none, or ALiBi slopes at `alibi_slopes_ptr`.
        bias_type: CkBias,
        /// Selects the kernels that write the log-sum-exp to `lse_ptr` (must be non-zero then).
        has_lse: bool,

        // Device pointers (0 when absent).
        /// q's first element: `(b, s_q, h, d)` in batch mode, `(total_q, h, d)` in group mode.
        q_ptr: usize,
        /// k's first element: `(b, s_k, h_k, d)`, `(total_k, h_k, d)`, or paged
        /// `(num_blocks, page_block_size, h_k, d)`.
        k_ptr: usize,
        /// v's first element, laid out as k.
        v_ptr: usize,
        /// The output, q's shape and dtype, written with the `*_o` strides.
        o_ptr: usize,
        /// f32 log-sum-exp output, (b, h, s_q) in batch mode or (h, total_q) in group mode.
        lse_ptr: usize,
        /// f32 ALiBi slopes, (h,) or (b, h).
        alibi_slopes_ptr: usize,
        /// Group mode: `batch + 1` cumulative i32 query offsets (`seqlens_q`).
        seqstart_q_ptr: usize,
        /// Group mode: `batch + 1` cumulative i32 key offsets (`seqlens_k`); paged, they count
        /// each sequence's keys only.
        seqstart_k_ptr: usize,
        /// Paged K/V: the `(batch, max_blocks)` i32 block table; 0 when not paged.
        block_table_ptr: usize,
        /// The caller's `hipStream_t`; 0 is the null stream.
        stream: usize,

        // Sizes.
        /// Number of sequences.
        batch: i32,
        /// Batch mode: queries per sequence. Group mode: total query rows.
        seqlen_q: i32,
        /// Batch mode: keys per sequence. Group mode: total key rows (k's rows, or the last
        /// cumulative seqlen).
        seqlen_k: i32,
        /// The longest query sequence (sizes CK's grid).
        max_seqlen_q: i32,
        /// Head dim of q and k; CK runs the smallest built tile that holds it.
        hdim_q: i32,
        /// Head dim of v and the output (equal to `hdim_q` here).
        hdim_v: i32,
        /// Query heads `h`.
        nhead_q: i32,
        /// K/V heads `h_k`, dividing `nhead_q` (must be > 0: CK divides by it on the host).
        nhead_k: i32,

        // Scalars.
        /// The softmax scale multiplying `q · k`; CK needs it > 0 and normal after `x log2(e)`.
        scale_s: f32,
        /// Used when `has_logits_soft_cap`; CK computes `cap * tanh(s / cap)`.
        logits_soft_cap: f32,
        /// flash-attention style window size left of a query's position; -1 is unbounded.
        window_size_left: i32,
        /// flash-attention style window size right of a query's position; -1 is unbounded,
        /// 0 with a bounded left side is causal.
        window_size_right: i32,

        // Strides, in elements.
        /// q's row (token) stride.
        stride_q: i32,
        /// k's row stride (paged: between the rows of one block).
        stride_k: i32,
        /// v's row stride (paged: between the rows of one block).
        stride_v: i32,
        /// The output's row stride.
        stride_o: i32,
        /// q's head stride.
        nhead_stride_q: i32,
        /// k's head stride.
        nhead_stride_k: i32,
        /// v's head stride.
        nhead_stride_v: i32,
        /// The output's head stride.
        nhead_stride_o: i32,
        /// q's batch stride (0 in group mode).
        batch_stride_q: i32,
        /// k's batch stride (0 in group mode; paged: the block stride).
        batch_stride_k: i32,
        /// v's batch stride (0 in group mode; paged: the block stride).
        batch_stride_v: i32,
        /// The output's batch stride (0 in group mode).
        batch_stride_o: i32,
        /// ALiBi row stride: h for (b, h) slopes, 0 for (h,) slopes shared by all batches.
        stride_alibi_slopes: i32,
        /// The LSE's head stride: `s_q` in batch mode, `total_q` in group mode.
        nhead_stride_lse: i32,
        /// The LSE's batch stride: `h * s_q` in batch mode, 0 in group mode.
        batch_stride_lse: i32,

        // Paged K/V.
        /// Key rows per K/V block; CK's split-KV kernels need a multiple of 128.
        page_block_size: i32,
        /// The block table's row stride, in elements.
        batch_stride_block_table: i32,
        /// Split-KV LSE accumulator (paged only, required there): f32 `(h, splits, total_q)`,
        /// as `rocm::split_kv_scratch_lens` sizes it.
        lse_acc_ptr: usize,
        /// Split-KV output accumulator (paged only, required there): f32
        /// `(h, splits, total_q, hdim_v)`, as `rocm::split_kv_scratch_lens` sizes it.
        o_acc_ptr: usize,
        /// Key splits of the split-KV kernels (paged only; 1..=`rocm::CK_MAX_SPLITS`), chosen
        /// by `rocm::plan_split_kv`; their partial results are merged by CK's combine kernel.
        num_splits: i32,
        /// Head stride of the LSE accumulator, in f32 elements (`rocm::AccumulatorStrides`).
        nhead_stride_lse_acc: i32,
        /// Split stride of the LSE accumulator, in f32 elements.
        split_stride_lse_acc: i32,
        /// Row stride of the output accumulator, in f32 elements.
        stride_o_acc: i32,
        /// Split stride of the output accumulator, in f32 elements.
        split_stride_o_acc: i32,
        /// Head stride of the output accumulator, in f32 elements.
        nhead_stride_o_acc: i32,
    }

    /// The device-side guard of the varlen/paged side tensors (`rocm::guard`): the kernel
    /// copies `*_in` to `*_out` (scratch sized by `rocm::guard_scratch_len`) with every out-of-range
    /// value replaced: a cumulative seqlen that steps back, passes `rows_q`/`rows_k` or makes
    /// a sequence longer than `max_seqlen_q/k` becomes a zero-length sequence; a block id
    /// outside `0..num_blocks` becomes block 0. Pointers are device addresses of i32 (u32 read
    /// as i32) arrays; the output table is contiguous (`max_blocks` columns).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct CkSideTensorGuard {
        /// The caller's cumulative query seqlens, `batch + 1` values.
        seqstart_q_in: usize,
        /// The caller's cumulative key seqlens, `batch + 1` values.
        seqstart_k_in: usize,
        /// The caller's block table; 0 when the call is not paged.
        block_table_in: usize,
        /// Row stride of `block_table_in`, in elements.
        block_table_row_stride: i32,
        /// Scratch for the guarded query seqstarts (`batch + 1` i32).
        seqstart_q_out: usize,
        /// Scratch for the guarded key seqstarts (`batch + 1` i32).
        seqstart_k_out: usize,
        /// Scratch for the guarded table (`batch x max_blocks` i32, contiguous); 0 when not
        /// paged.
        block_table_out: usize,
        /// Number of sequences.
        batch: i32,
        /// Rows of q (`total_q`): a query seqstart past it is out of range.
        rows_q: i32,
        /// Rows of k/v (varlen), or `i32::MAX` for paged K/V (whose seqlens index no rows).
        rows_k: i32,
        /// The longest query sequence the call allows.
        max_seqlen_q: i32,
        /// The longest key sequence the call allows (paged: also at most
        /// `max_blocks * page_block_size`).
        max_seqlen_k: i32,
        /// Physical K/V blocks: a block id outside `0..num_blocks` is out of range.
        num_blocks: i32,
        /// Columns of the block table.
        max_blocks: i32,
        /// Key rows per K/V block (0 when not paged): a table entry is checked only where its
        /// sequence reads it (column below `ceil(len / page_block_size)`).
        page_block_size: i32,
        /// The caller's `hipStream_t`; 0 is the null stream.
        stream: usize,
        /// Device address of the call's u32 fault word (mapped host memory) the guard
        /// `atomic_or`s [`SideTensorFault`] bits into (`crate::gpu::Driver::queue_with_fault_word`),
        /// shared with the call's Triton kernels.
        fault: usize,
    }

    /// Bits of a fault word: which side tensor held an out-of-range value.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u32)]
    enum SideTensorFault {
        /// `seqlens_q` held an out-of-range value.
        SeqlensQ = 1,
        /// `seqlens_k` held an out-of-range value.
        SeqlensK = 2,
        /// The block table held an out-of-range block id.
        BlockTable = 4,
    }

    // Only when the build script built CK and the shim (a `rocm` build with a CK arch).
    #[cfg(flash_attn_rocm_ck)]
    unsafe extern "C++" {
        include!("flash-attn-rocm/csrc/fmha_shim.h");

        /// Launches CK's forward kernel for `params` on `params.stream` (asynchronously).
        /// Errors: no kernel built for these traits (the message names them and the build
        /// variables to change), invalid arguments, or a HIP error.
        ///
        /// # Safety
        /// Every non-zero pointer must be a device allocation large enough for the sizes and
        /// strides given, live until the stream has run the kernel; `stream` must be a valid
        /// `hipStream_t` of the current device, or 0.
        unsafe fn ck_fmha_fwd(params: &CkFwdParams) -> Result<()>;

        /// Number of HIP devices visible; 0 when the runtime reports no device. Other HIP
        /// errors (a broken driver install) are errors.
        fn hip_device_count() -> Result<i32>;

        /// Queues the side-tensor guard kernel on `guard.stream`.
        ///
        /// # Safety
        /// The `*_in` pointers must be device arrays of `batch + 1` (seqstarts) and
        /// `batch x block_table_row_stride` (table) i32, the `*_out` ones scratch of
        /// `batch + 1` and `batch x max_blocks` i32, all live until the stream has run it;
        /// `stream` a valid `hipStream_t` of the current device, or 0; `fault` a mapped u32 of
        /// host memory, live for the life of the process.
        unsafe fn ck_guard_side_tensors(guard: &CkSideTensorGuard) -> Result<()>;
    }
}

pub use bridge::{CkBias, CkDtype, CkFwdParams, CkMask, CkSideTensorGuard, SideTensorFault};

impl Default for CkFwdParams {
    /// No pointers, zero sizes and strides, fp16, no mask (windows -1), no bias, no softcap,
    /// no LSE, null stream: the marshalling fills in the rest.
    fn default() -> Self {
        CkFwdParams {
            dtype: CkDtype::Fp16,
            is_group_mode: false,
            has_logits_soft_cap: false,
            mask_type: CkMask::NoMask,
            bias_type: CkBias::NoBias,
            has_lse: false,
            q_ptr: 0,
            k_ptr: 0,
            v_ptr: 0,
            o_ptr: 0,
            lse_ptr: 0,
            alibi_slopes_ptr: 0,
            seqstart_q_ptr: 0,
            seqstart_k_ptr: 0,
            block_table_ptr: 0,
            stream: 0,
            batch: 0,
            seqlen_q: 0,
            seqlen_k: 0,
            max_seqlen_q: 0,
            hdim_q: 0,
            hdim_v: 0,
            nhead_q: 0,
            nhead_k: 0,
            scale_s: 0.0,
            logits_soft_cap: 0.0,
            window_size_left: -1,
            window_size_right: -1,
            stride_q: 0,
            stride_k: 0,
            stride_v: 0,
            stride_o: 0,
            nhead_stride_q: 0,
            nhead_stride_k: 0,
            nhead_stride_v: 0,
            nhead_stride_o: 0,
            batch_stride_q: 0,
            batch_stride_k: 0,
            batch_stride_v: 0,
            batch_stride_o: 0,
            stride_alibi_slopes: 0,
            nhead_stride_lse: 0,
            batch_stride_lse: 0,
            page_block_size: 0,
            batch_stride_block_table: 0,
            lse_acc_ptr: 0,
            o_acc_ptr: 0,
            num_splits: 0,
            nhead_stride_lse_acc: 0,
            split_stride_lse_acc: 0,
            stride_o_acc: 0,
            split_stride_o_acc: 0,
            nhead_stride_o_acc: 0,
        }
    }
}
