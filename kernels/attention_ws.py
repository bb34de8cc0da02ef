"""Hopper (sm_90) attention forward, warp-specialized: the prefill kernel of plain calls with many
key tiles per query block (src/triton/tma.rs `ws_keys` says which).

`attn_fwd_tma_ws` takes the arguments of `attention_tma.attn_fwd_tma` and computes the same
outputs, LSEs and fault bits, from the same helpers; what differs is who does what in a program
of one 128-row query block (FlashAttention-3's split of a block between warpgroups):

- a loader warp issues every TMA load: Q's two 64-row halves, then K and V tiles into a
  STAGES-deep ring, each buffer refilled once both consumers arrived on its `empty` barrier;
- two consumer warpgroups each own a 64-row half of the block (its own Q buffer, accumulator
  and softmax) and run `attention_tma`'s key loop over the shared ring. They synchronize only
  through the barriers, so one's softmax runs while the other's wgmma does: the overlap two
  programs per SM gave the one-warpgroup kernel, with each K/V tile loaded once for 128 rows;
- registers are moved to the consumers (`setmaxnreg`: CONSUMER_REGS each, LOADER_REGS for the
  loader's warpgroup; the kernel is compiled with maxnreg = what 12 warps may hold, WS_MAXNREG in
  kernels/aot.py).

Both halves step over the key tiles of the whole block (a causal block's first half masks the
keys only the second sees), so each arrives on every `empty` barrier once per use. The last V
tile's rows past the sequence are zeroed by the first consumer, which then lets the second one
read it (`tail_bar`).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate

from attention_tma import LOG2E, _block, _first_tile, _key_loop, _last_pv, _store_block, _zero_tail

# Registers per thread of each partition (setmaxnreg): 2 x 128 x 240 + 128 x 24 = 64,512 of the
# SM's 65,536, one program per SM.
CONSUMER_REGS = gl.constexpr(240)
LOADER_REGS = gl.constexpr(24)


@aggregate
class LoaderRefill:
    """How a consumer hands its K/V buffers back to the loader: one arrival on each `empty`
    barrier (the loader waits for both consumers')."""
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, k_empty, v_empty):
        self.k_empty = k_empty
        self.v_empty = v_empty

    @gluon.jit
    def release(self, k_tile, v_tile):
        """K tile `k_tile` and V tile `v_tile` are consumed."""
        STAGES: gl.constexpr = self.k_empty.shape[0]
        mbarrier.arrive(self.k_empty.index(k_tile % STAGES), count=1)
        mbarrier.arrive(self.v_empty.index(v_tile % STAGES), count=1)


@aggregate
class Shared:
    """The program's shared buffers and barriers, as every partition sees them."""
    q_halves: gl.shared_memory_descriptor
    k_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    q_bars: gl.shared_memory_descriptor
    k_full: gl.shared_memory_descriptor
    v_full: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    tail_bar: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q_halves, k_ring, v_ring, q_bars, k_full, v_full, k_empty, v_empty, tail_bar):
        self.q_halves = q_halves
        self.k_ring = k_ring
        self.v_ring = v_ring
        self.q_bars = q_bars
        self.k_full = k_full
        self.v_full = v_full
        self.k_empty = k_empty
        self.v_empty = v_empty
        self.tail_bar = tail_bar


@aggregate
class Block:
    """The program's query block and what its consumers need of the call."""
    Out: gl.tensor
    Lse: gl.tensor
    b: gl.tensor
    head: gl.tensor
    q_start: gl.tensor
    q_len: gl.tensor
    k_len: gl.tensor
    start_m: gl.tensor
    diag: gl.tensor
    window_right: gl.tensor
    n_tiles: gl.tensor
    qk_scale: gl.tensor
    is_varlen: gl.tensor
    seqlen_q: gl.tensor
    stride_lb: gl.tensor
    stride_lh: gl.tensor
    num_heads: gl.tensor

    @gluon.constexpr_function
    def __init__(self, Out, Lse, b, head, q_start, q_len, k_len, start_m, diag, window_right, n_tiles, qk_scale,
                 is_varlen, seqlen_q, stride_lb, stride_lh, num_heads):
        self.Out = Out
        self.Lse = Lse
        self.b = b
        self.head = head
        self.q_start = q_start
        self.q_len = q_len
        self.k_len = k_len
        self.start_m = start_m
        self.diag = diag
        self.window_right = window_right
        self.n_tiles = n_tiles
        self.qk_scale = qk_scale
        self.is_varlen = is_varlen
        self.seqlen_q = seqlen_q
        self.stride_lb = stride_lb
        self.stride_lh = stride_lh
        self.num_heads = num_heads


@gluon.jit
def _loader(sh, q_desc, k_desc, v_desc, q_row0, q_col, k_row0, v_row0, k_col, v_col, n_tiles):
    """The loader warp: Q's halves, then key tile t's K and V once both consumers released what
    the buffer held STAGES tiles before (a fresh barrier counts as released: phase parity 1)."""
    HALF: gl.constexpr = sh.q_halves.shape[1]
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    for h in gl.static_range(2):
        mbarrier.expect(sh.q_bars.index(h), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + h * HALF, q_col], sh.q_bars.index(h),
                                        sh.q_halves.index(h))
    for t in range(n_tiles):
        stage = t % STAGES
        free = ((t // STAGES) & 1) ^ 1
        mbarrier.wait(sh.k_empty.index(stage), free)
        mbarrier.expect(sh.k_full.index(stage), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row0 + t * BLOCK_N, k_col], sh.k_full.index(stage),
                                        sh.k_ring.index(stage))
        mbarrier.wait(sh.v_empty.index(stage), free)
        mbarrier.expect(sh.v_full.index(stage), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [v_row0 + t * BLOCK_N, v_col], sh.v_full.index(stage),
                                        sh.v_ring.index(stage))


@gluon.jit
def _consume(sh, blk, h: gl.constexpr):
    """Consumer `h`: the rows `start_m + h * HALF ..` of the block, attention_tma's key loop over
    the shared ring, its rows' outputs and LSEs."""
    HALF: gl.constexpr = sh.q_halves.shape[1]
    HEAD_D: gl.constexpr = sh.q_halves.shape[2]
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    num_warps: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    refill = LoaderRefill(sh.k_empty, sh.v_empty)
    q_h = sh.q_halves.index(h)
    start = blk.start_m + h * HALF
    diag = blk.diag
    if blk.window_right >= 0:
        n_full = gl.minimum(gl.maximum(start + diag + 1, 0) // BLOCK_N, blk.k_len // BLOCK_N)
    else:
        n_full = blk.k_len // BLOCK_N

    mbarrier.wait(sh.q_bars.index(h), 0)
    p, m_i, l_i, alpha = _first_tile(q_h, sh.k_ring, sh.k_full, blk.qk_scale, start, blk.k_len, diag, n_full,
                                     s_layout, p_layout)
    mbarrier.arrive(sh.k_empty.index(0), count=1)
    acc = gl.zeros([HALF, HEAD_D], gl.float32, o_layout)
    acc, p, alpha, m_i, l_i = _key_loop(q_h, sh.k_ring, sh.v_ring, sh.k_full, sh.v_full, refill, acc, p, alpha, m_i,
                                        l_i, blk.qk_scale, start, blk.k_len, diag, n_full, blk.n_tiles, s_layout,
                                        o_layout, p_layout)

    last = blk.n_tiles - 1
    v_last = sh.v_ring.index(last % STAGES)
    mbarrier.wait(sh.v_full.index(last % STAGES), (last // STAGES) & 1)
    if blk.n_tiles * BLOCK_N > blk.k_len:
        if h == 0:
            _zero_tail(v_last, last, blk.k_len)
            mbarrier.arrive(sh.tail_bar, count=1)
        else:
            mbarrier.wait(sh.tail_bar, 0)
    acc = _last_pv(v_last, acc, p, alpha, o_layout)
    # Through this half's Q buffer: the last wgmma that read it has retired.
    _store_block(acc, m_i, l_i, blk.qk_scale, q_h, blk.Out, blk.Lse, blk.b, blk.head, blk.q_start, blk.q_len, start,
                 blk.is_varlen, blk.seqlen_q, blk.stride_lb, blk.stride_lh, blk.num_heads, s_layout, o_layout)


@gluon.jit
def _consume_first(sh, blk):
    _consume(sh, blk, 0)


@gluon.jit
def _consume_second(sh, blk):
    _consume(sh, blk, 1)


@gluon.jit
def attn_fwd_tma_ws(
    q_desc, k_desc, v_desc,
    Out, Lse, CuSeqQ, CuSeqK, Fault,
    sm_scale,
    stride_qh, stride_kh, stride_vh,
    q_batch_rows, k_batch_rows, v_batch_rows,
    stride_lb, stride_lh,
    is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, window_right,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
):
    """attn_fwd_tma's contract, with BLOCK_M = 128 query rows per program and q's descriptor
    boxes of BLOCK_M / 2 rows; num_warps = 4 (each consumer; 12 warps in all)."""
    HALF: gl.constexpr = BLOCK_M // 2
    dtype: gl.constexpr = q_desc.dtype
    b, head, head_k, q_start, q_len, k_start, k_len, start_m = _block(
        CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
        num_heads_k, BLOCK_M)
    # attention_tma's `_keys`, spelled as in the build measured on an H200 (docs/bench-gpu-h200.md):
    # `_keys` itself compiles to other code here, not measured as much (the consumers' n_full too).
    diag = gl.where(window_right >= 0, k_len - q_len + window_right, k_len)
    hi = gl.minimum(k_len, start_m + BLOCK_M + diag)
    if start_m >= q_len:
        return
    n_tiles = gl.maximum((hi + BLOCK_N - 1) // BLOCK_N, 1)

    sh = Shared(gl.allocate_shared_memory(dtype, [2, HALF, HEAD_D], q_desc.layout),
                gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout),
                gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout),
                gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout()))
    for h in gl.static_range(2):
        mbarrier.init(sh.q_bars.index(h), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(sh.k_full.index(i), count=1)
        mbarrier.init(sh.v_full.index(i), count=1)
        mbarrier.init(sh.k_empty.index(i), count=2)
        mbarrier.init(sh.v_empty.index(i), count=2)
    mbarrier.init(sh.tail_bar, count=1)
    fence_async_shared()

    blk = Block(Out, Lse, b, head, q_start, q_len, k_len, start_m, diag, window_right, n_tiles, sm_scale * LOG2E,
                is_varlen, seqlen_q, stride_lb, stride_lh, num_heads)
    gl.warp_specialize([
        (_consume_first, (sh, blk)),
        (_consume_second, (sh, blk)),
        (_loader, (sh, q_desc, k_desc, v_desc, q_start + b * q_batch_rows + start_m, head * stride_qh,
                   k_start + b * k_batch_rows, k_start + b * v_batch_rows, head_k * stride_kh, head_k * stride_vh,
                   n_tiles)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
