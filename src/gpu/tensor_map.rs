//! The `cuTensorMapEncodeTiled` settings of the TMA descriptors ([`TiledView`]).

pub(super) use crate::triton::tma::{TensorMap, TiledView};

/// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
pub(super) const INTERLEAVE_NONE: i32 = 0;
/// `CU_TENSOR_MAP_SWIZZLE_128B`.
pub(super) const SWIZZLE_128B: i32 = 3;
/// `CU_TENSOR_MAP_L2_PROMOTION_L2_128B`, what triton's launcher asks for.
pub(super) const L2_PROMOTION_128B: i32 = 2;
/// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`: out-of-bounds elements read as zeros.
pub(super) const OOB_FILL_NONE: i32 = 0;
