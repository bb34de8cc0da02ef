//! The kernels' parameter lists as Rust structs: one field per parameter of `attn_fwd` /
//! `attn_merge` in kernels/attention.py, in the same order (a test compares the names with the
//! Python source), and of `attn_fwd_tma` in kernels/attention_tma.py, turned into the driver's
//! argument array at launch.

use crate::device::TensorMap;

/// One kernel argument as the driver passes it (by address of its value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue {
    /// A device address (a tensor's first element, or 0 for an unused pointer).
    Ptr(u64),
    /// A 32-bit integer: sizes, 32-bit strides (in elements), flags.
    I32(i32),
    /// A 64-bit integer: the batch strides, which can pass 2^31 elements.
    I64(i64),
    /// A 32-bit float: the softmax scale and the softcap.
    F32(f32),
    /// A TMA descriptor passed by value (`attn_fwd_tma`).
    TensorMap(TensorMap),
}

/// A host TMA descriptor argument as Triton lowers one: the descriptor, then the 2-D view's
/// shape and strides (elements), which the kernel receives but reads through the descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TensorDescArg {
    /// The descriptor.
    pub map: TensorMap,
    /// `[rows, cols]`.
    pub shape: [i32; 2],
    /// `[row stride, 1]`.
    pub strides: [i64; 2],
}

impl TensorDescArg {
    fn push_values(&self, values: &mut Vec<ArgValue>) {
        values.push(ArgValue::TensorMap(self.map));
        values.extend(self.shape.map(ArgValue::I32));
        values.extend(self.strides.map(ArgValue::I64));
    }
}

macro_rules! kernel_args {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* $field:ident: $kind:ident = $param:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Default)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[doc = concat!("The kernel's `", $param, "` parameter (kernels/attention.py documents each).")]
                pub $field: kernel_args!(@type $kind),
            )*
        }

        impl $name {
            /// The kernel's parameter names, in order.
            pub const PARAMS: &'static [&'static str] = &[$($param),*];

            /// The values in parameter order.
            pub fn values(&self) -> Vec<ArgValue> {
                let mut values = Vec::with_capacity(Self::PARAMS.len());
                $(kernel_args!(@push values, $kind, self.$field);)*
                values
            }
        }
    };
    (@type ptr) => { u64 };
    (@type i32) => { i32 };
    (@type i64) => { i64 };
    (@type f32) => { f32 };
    (@type tdesc) => { TensorDescArg };
    (@push $values:ident, tdesc, $v:expr) => { $v.push_values(&mut $values) };
    (@push $values:ident, ptr, $v:expr) => { $values.push(ArgValue::Ptr($v)) };
    (@push $values:ident, i32, $v:expr) => { $values.push(ArgValue::I32($v)) };
    (@push $values:ident, i64, $v:expr) => { $values.push(ArgValue::I64($v)) };
    (@push $values:ident, f32, $v:expr) => { $values.push(ArgValue::F32($v)) };
}

kernel_args! {
    /// `attn_fwd`'s arguments. Strides count elements; `*_b` strides are 64-bit.
    pub struct FwdArgs {
        q: ptr = "Q",
        k: ptr = "K",
        v: ptr = "V",
        out: ptr = "Out",
        lse: ptr = "Lse",
        o_acc: ptr = "OAcc",
        l_acc: ptr = "LAcc",
        cu_seqlens_q: ptr = "CuSeqQ",
        cu_seqlens_k: ptr = "CuSeqK",
        block_table: ptr = "BlockTable",
        alibi_slopes: ptr = "AlibiSlopes",
        mm_prefix: ptr = "MmPrefix",
        /// The call's fault word (u32, mapped host memory), which out-of-range side tensors are
        /// reported to.
        fault: ptr = "Fault",
        sm_scale: f32 = "sm_scale",
        softcap: f32 = "softcap",
        stride_qb: i64 = "stride_qb",
        stride_qm: i32 = "stride_qm",
        stride_qh: i32 = "stride_qh",
        stride_kb: i64 = "stride_kb",
        stride_kn: i32 = "stride_kn",
        stride_kh: i32 = "stride_kh",
        stride_vb: i64 = "stride_vb",
        stride_vn: i32 = "stride_vn",
        stride_vh: i32 = "stride_vh",
        stride_om: i32 = "stride_om",
        stride_oh: i32 = "stride_oh",
        stride_lb: i32 = "stride_lb",
        stride_lh: i32 = "stride_lh",
        stride_bt: i32 = "stride_bt",
        stride_mmb: i32 = "stride_mmb",
        is_varlen: i32 = "is_varlen",
        seqlen_q: i32 = "seqlen_q",
        seqlen_k: i32 = "seqlen_k",
        /// Query rows per batch entry in the output (batch mode), 0 in varlen mode.
        rows_per_batch: i32 = "rows_per_batch",
        /// Rows of the output (`b * s_q` or `total_q`).
        total_rows: i32 = "total_rows",
        /// Varlen: the rows of k/v a sequence may reach (`i32::MAX` when paged).
        kv_rows: i32 = "kv_rows",
        /// Varlen: the most keys a sequence may have (max_seqlen_k, and what its block-table row holds).
        kv_len_cap: i32 = "kv_len_cap",
        num_heads: i32 = "num_heads",
        num_heads_k: i32 = "num_heads_k",
        head_dim: i32 = "head_dim",
        window_left: i32 = "window_left",
        window_right: i32 = "window_right",
        page_size: i32 = "page_size",
        /// `floor((2^32 - 1) / page_size)` as 32 bits: the kernel divides key indices by the
        /// page size with a multiply (`_divmod`).
        page_magic: i32 = "page_magic",
        /// Paged: blocks in the k/v cache (the range of a valid block id).
        num_blocks: i32 = "num_blocks",
        has_softcap: i32 = "has_softcap",
        has_alibi: i32 = "has_alibi",
        num_mm_ranges: i32 = "num_mm_ranges",
        num_splits: i32 = "num_splits",
        /// Keys per split, a multiple of the tile's BLOCK_N.
        split_len: i32 = "split_len",
    }
}

kernel_args! {
    /// `attn_merge`'s arguments: the output and sequence arguments of the same call's `attn_fwd`.
    pub struct MergeArgs {
        out: ptr = "Out",
        lse: ptr = "Lse",
        o_acc: ptr = "OAcc",
        l_acc: ptr = "LAcc",
        cu_seqlens_q: ptr = "CuSeqQ",
        cu_seqlens_k: ptr = "CuSeqK",
        stride_om: i32 = "stride_om",
        stride_oh: i32 = "stride_oh",
        stride_lb: i32 = "stride_lb",
        stride_lh: i32 = "stride_lh",
        is_varlen: i32 = "is_varlen",
        seqlen_q: i32 = "seqlen_q",
        seqlen_k: i32 = "seqlen_k",
        rows_per_batch: i32 = "rows_per_batch",
        total_rows: i32 = "total_rows",
        kv_rows: i32 = "kv_rows",
        kv_len_cap: i32 = "kv_len_cap",
        num_heads: i32 = "num_heads",
        num_heads_k: i32 = "num_heads_k",
        head_dim: i32 = "head_dim",
        num_splits: i32 = "num_splits",
    }
}

kernel_args! {
    /// `attn_fwd_tma`'s arguments (kernels/attention_tma.py): TMA descriptors of 2-D views of q, k
    /// and v, then the call's sequence and head facts. Head strides count elements.
    pub struct TmaFwdArgs {
        q: tdesc = "q_desc",
        k: tdesc = "k_desc",
        v: tdesc = "v_desc",
        /// A split head dim's last columns (16 or 32) of q, k and v ([`super::tma::head_parts`]):
        /// `attn_fwd_tma_split`'s and `attn_fwd_tma_ws_split`'s parameters, which the power-of-two
        /// kernels do not have
        /// ([`TmaFwdArgs::values_for`]).
        q2: tdesc = "q2_desc",
        k2: tdesc = "k2_desc",
        v2: tdesc = "v2_desc",
        out: ptr = "Out",
        lse: ptr = "Lse",
        cu_seqlens_q: ptr = "CuSeqQ",
        cu_seqlens_k: ptr = "CuSeqK",
        fault: ptr = "Fault",
        sm_scale: f32 = "sm_scale",
        stride_qh: i32 = "stride_qh",
        stride_kh: i32 = "stride_kh",
        stride_vh: i32 = "stride_vh",
        /// Batch mode: view rows from one sequence to the next (batch stride / row stride); 0 in
        /// varlen mode.
        q_batch_rows: i32 = "q_batch_rows",
        k_batch_rows: i32 = "k_batch_rows",
        v_batch_rows: i32 = "v_batch_rows",
        stride_lb: i32 = "stride_lb",
        stride_lh: i32 = "stride_lh",
        is_varlen: i32 = "is_varlen",
        seqlen_q: i32 = "seqlen_q",
        seqlen_k: i32 = "seqlen_k",
        total_rows: i32 = "total_rows",
        kv_rows: i32 = "kv_rows",
        kv_len_cap: i32 = "kv_len_cap",
        num_heads: i32 = "num_heads",
        num_heads_k: i32 = "num_heads_k",
        /// Keys right of the diagonal a query sees; -1: unbounded (no diagonal).
        window_right: i32 = "window_right",
        /// The sequences (the walking kernel's programs walk batch x heads x blocks).
        batch: i32 = "batch",
    }
}

impl TmaFwdArgs {
    /// The parameters that `attn_fwd_tma_split` and `attn_fwd_tma_ws_split` (a split head dim)
    /// have and the power-of-two kernels (`attn_fwd_tma`, `attn_fwd_tma_ws`, `attn_fwd_tma_walk`)
    /// do not: the tail's descriptors, after q, k and v's.
    pub const SPLIT_PARAMS: std::ops::Range<usize> = 3..6;

    /// The values in the parameter order of a split head dim's kernel (`split`: all of
    /// [`Self::PARAMS`]) or of a power of two's (without [`Self::SPLIT_PARAMS`]).
    pub fn values_for(&self, split: bool) -> Vec<ArgValue> {
        let mut values = self.values();
        if !split {
            // The descriptors come first, each as `DESC_VALUES` values.
            let range = Self::SPLIT_PARAMS;
            values.drain(range.start * DESC_VALUES..range.end * DESC_VALUES);
        }
        values
    }
}

/// Values of one descriptor parameter ([`TensorDescArg::push_values`]): the map, two sizes, two
/// strides.
const DESC_VALUES: usize = 5;
