"""Hopper (sm_90) attention forward, warp-specialized: the prefill kernel of plain calls with many
key tiles per query block (src/triton/tma.rs `ws_keys` says which).

`attn_fwd_tma_ws` takes the arguments of `attention_tma.attn_fwd_tma` and computes the same
outputs, LSEs and fault bits, from the same helpers; what differs is who does what in a program
of one query block of 128 or 192 rows (FlashAttention-3's split of a block between warpgroups):

- a loader warp issues every TMA load: Q's 64-row parts, then K and V tiles into a STAGES-deep
  ring, each buffer refilled once every consumer arrived on its `empty` barrier;
- two or three consumer warpgroups each own a 64-row part of the block (its own Q buffer,
  accumulator and softmax) and run `attention_tma`'s key loop over the shared ring. They
  synchronize only through the barriers, so one's softmax runs while another's wgmma does: the
  overlap two programs per SM gave the one-warpgroup kernel, with each K/V tile loaded once for
  the whole block (three consumers at d = 64, where their registers fit: a third fewer K/V loads
  per row);
- registers are moved to the consumers (`setmaxnreg`: `_consumer_regs` each, LOADER_REGS for the
  loader's warpgroup; the kernel is compiled with maxnreg = what its warps may hold, `ws_maxnreg`
  in kernels/aot.py).

Each part steps over the key tiles its own rows see (`_part_tiles`: with a diagonal, a causal
block's earlier parts see fewer than its last) and hands the block's later tiles back unread, so
each arrives on every `empty` barrier once per use. The last V tile's rows past the sequence are
zeroed by the last consumer, the one part that always reads that tile, which then lets the others
that read it go on (`tail_bar`).

`attn_fwd_tma_ws_split` is the same kernel at a split head dim (80, 96, 160: kernels/aot.py's
SPLIT_DIMS), with `attention_tma.attn_fwd_tma_split`'s parameter list and its split key steps:
each Q buffer, K and V tile in two parts (the power of two and the 16 or 32 columns left).

`attn_fwd_tma_walk` (class "prefill_walk") runs the same partitions over many blocks: one
program per SM walks the call's query blocks in rounds of one block per program, every other
round in reverse (`Blocks.taken`), a (sequence, head)'s blocks one after another so that its K/V
stay in L2 while read. The loader runs ahead into the next block (two Q buffer pairs, freed
through `q_empty`; the K/V ring counted across blocks), so a block's end and the next one's first
loads overlap: the programs' start and end that dominate prompts of a few key tiles. Each
consumer that reads the last V tile zeroes its rows past the sequence itself before its wgmma
reads them (when both do, they write the same zeros: whichever lands last, they read as zero),
since a `tail_bar` handshake could fall a phase behind across blocks.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate

from attention_tma import (LOG2E, _block, _block_at, _first_tile, _first_tile_split, _key_loop, _last_pv,
                           _last_pv_split, _load_split, _step_split, _store_block, _store_split, _zero_tail)

# Query rows of each consumer warpgroup: one wgmma's M (kernels/aot.py's CONSUMER_ROWS).
ROWS = gl.constexpr(64)
# Registers per thread of the loader's warpgroup (setmaxnreg); the consumers share the rest of the
# SM's 65,536 (`_consumer_regs`), one program per SM.
LOADER_REGS = gl.constexpr(24)


@gluon.constexpr_function
def _consumer_regs(consumers):
    """Registers per thread of each of `consumers` warpgroups beside the loader's, in setmaxnreg's
    multiples of 8: 240 for two (2 x 128 x 240 + 128 x 24 = 64,512), 160 for three."""
    return (65536 - 128 * LOADER_REGS) // (128 * consumers) // 8 * 8


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
    q_parts: gl.shared_memory_descriptor
    k_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    q_bars: gl.shared_memory_descriptor
    k_full: gl.shared_memory_descriptor
    v_full: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    tail_bar: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q_parts, k_ring, v_ring, q_bars, k_full, v_full, k_empty, v_empty, tail_bar):
        self.q_parts = q_parts
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
def _load_kv(sh, k_desc, v_desc, ring0, k_row0, v_row0, k_col, v_col, n_tiles):
    """The block's key tiles t as ring tiles `ring0 + t`: K and V once both consumers released
    what the buffer held STAGES ring tiles before (a fresh barrier counts as released: phase
    parity 1)."""
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    for t in range(n_tiles):
        r = ring0 + t
        stage = r % STAGES
        free = ((r // STAGES) & 1) ^ 1
        mbarrier.wait(sh.k_empty.index(stage), free)
        mbarrier.expect(sh.k_full.index(stage), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row0 + t * BLOCK_N, k_col], sh.k_full.index(stage),
                                        sh.k_ring.index(stage))
        mbarrier.wait(sh.v_empty.index(stage), free)
        mbarrier.expect(sh.v_full.index(stage), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [v_row0 + t * BLOCK_N, v_col], sh.v_full.index(stage),
                                        sh.v_ring.index(stage))


@gluon.jit
def _load_q(sh, q_desc, slot, q_row0, q_col, PARTS: gl.constexpr):
    """Q's `PARTS` consumer parts into the Q buffers `slot`, `slot + 1`, ..."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    for h in gl.static_range(PARTS):
        mbarrier.expect(sh.q_bars.index(slot + h), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + h * PART, q_col], sh.q_bars.index(slot + h),
                                        sh.q_parts.index(slot + h))


@gluon.jit
def _loader(sh, q_desc, k_desc, v_desc, q_row0, q_col, k_row0, v_row0, k_col, v_col, n_tiles):
    """The loader warp: Q's parts (one per consumer: as many as Q buffers), then the key tiles."""
    _load_q(sh, q_desc, 0, q_row0, q_col, sh.q_parts.shape[0])
    _load_kv(sh, k_desc, v_desc, 0, k_row0, v_row0, k_col, v_col, n_tiles)


@gluon.constexpr_function
def _mma_layout(columns, num_warps):
    """The wgmma accumulator layout of a consumer's `columns`-wide results (S: BLOCK_N, O: HEAD_D)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, columns, 16])


@gluon.jit
def _full_tiles(start, diag, k_len, window_right, BLOCK_N: gl.constexpr):
    """Key tiles every row of a part from `start` sees whole."""
    if window_right >= 0:
        n_full = gl.minimum(gl.maximum(start + diag + 1, 0) // BLOCK_N, k_len // BLOCK_N)
    else:
        n_full = k_len // BLOCK_N
    return n_full


@gluon.jit
def _part_tiles(start, k_len, diag, n_tiles, BLOCK_N: gl.constexpr, PART: gl.constexpr):
    """Key tiles some row of a part from `start` sees, at least one (as `_block_tiles` counts its
    block's): the block's own count for its last part, fewer for a causal block's earlier parts."""
    hi = gl.minimum(k_len, start + PART + diag)
    return gl.minimum(gl.maximum((hi + BLOCK_N - 1) // BLOCK_N, 1), n_tiles)


@gluon.jit
def _skip(sh, ring0, first, n_tiles):
    """Hands the block's key tiles `first ..` back unread, each once the loader filled it (an
    arrival before then would count towards the buffer's previous use)."""
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    for t in range(first, n_tiles):
        r = ring0 + t
        mbarrier.wait(sh.k_full.index(r % STAGES), (r // STAGES) & 1)
        mbarrier.arrive(sh.k_empty.index(r % STAGES), count=1)
        mbarrier.wait(sh.v_full.index(r % STAGES), (r // STAGES) & 1)
        mbarrier.arrive(sh.v_empty.index(r % STAGES), count=1)


@gluon.jit
def _attend(sh, q_h, ring0, qk_scale, start, k_len, diag, n_full, n_tiles, LAST: gl.constexpr, WALK: gl.constexpr,
            s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    """One part's attention over the key tiles its rows see of the block's `n_tiles` (ring tiles
    `ring0` on), Q in `q_h`: returns the accumulator and softmax state. Releases every ring tile
    of the block, read or not, but the last V tile it read, which it hands back only when walking
    (WALK) or when the loader may still need that buffer (tiles skipped after it); zeroes that
    tile's rows past the sequence (every part that reads it when walking, else the last part,
    LAST, then `tail_bar`)."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    HEAD_D: gl.constexpr = sh.q_parts.shape[2]
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    refill = LoaderRefill(sh.k_empty, sh.v_empty)
    n_seen = _part_tiles(start, k_len, diag, n_tiles, BLOCK_N, PART)
    p, m_i, l_i, alpha = _first_tile(q_h, sh.k_ring, sh.k_full, ring0, qk_scale, start, k_len, diag, n_full,
                                     s_layout, p_layout)
    mbarrier.arrive(sh.k_empty.index(ring0 % STAGES), count=1)
    acc = gl.zeros([PART, HEAD_D], gl.float32, o_layout)
    acc, p, alpha, m_i, l_i = _key_loop(ring0, q_h, sh.k_ring, sh.v_ring, sh.k_full, sh.v_full, refill, acc, p,
                                        alpha, m_i, l_i, qk_scale, start, k_len, diag, n_full, n_seen, s_layout,
                                        o_layout, p_layout)

    last = ring0 + n_seen - 1
    v_last = sh.v_ring.index(last % STAGES)
    mbarrier.wait(sh.v_full.index(last % STAGES), (last // STAGES) & 1)
    # Only the block's last tile reaches past the sequence, and every part that reads it has
    # n_seen = n_tiles: the last part always does.
    if n_seen * BLOCK_N > k_len:
        if WALK:
            _zero_tail(v_last, n_seen - 1, k_len)
        elif LAST:
            _zero_tail(v_last, n_seen - 1, k_len)
            mbarrier.arrive(sh.tail_bar, count=1)
        else:
            mbarrier.wait(sh.tail_bar, 0)
    acc = _last_pv(v_last, acc, p, alpha, o_layout)
    if WALK:
        mbarrier.arrive(sh.v_empty.index(last % STAGES), count=1)
    elif n_seen < n_tiles:
        # The loader may still refill this buffer for the tiles skipped below.
        mbarrier.arrive(sh.v_empty.index(last % STAGES), count=1)
    _skip(sh, ring0, n_seen, n_tiles)
    return acc, m_i, l_i


@gluon.jit
def _consume(sh, blk, h: gl.constexpr):
    """Consumer `h`: the rows `start_m + h * PART ..` of the block, attention_tma's key loop over
    the shared ring, its rows' outputs and LSEs."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    HEAD_D: gl.constexpr = sh.q_parts.shape[2]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    s_layout: gl.constexpr = _mma_layout(BLOCK_N, gl.num_warps())
    o_layout: gl.constexpr = _mma_layout(HEAD_D, gl.num_warps())
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q_h = sh.q_parts.index(h)
    start = blk.start_m + h * PART
    n_full = _full_tiles(start, blk.diag, blk.k_len, blk.window_right, BLOCK_N)
    mbarrier.wait(sh.q_bars.index(h), 0)
    LAST: gl.constexpr = h == sh.q_parts.shape[0] - 1
    acc, m_i, l_i = _attend(sh, q_h, 0, blk.qk_scale, start, blk.k_len, blk.diag, n_full, blk.n_tiles, LAST,
                            False, s_layout, o_layout, p_layout)
    # Through this part's Q buffer: the last wgmma that read it has retired.
    _store_block(acc, m_i, l_i, blk.qk_scale, q_h, blk.Out, blk.Lse, blk.b, blk.head, blk.q_start, blk.q_len, start,
                 blk.is_varlen, blk.seqlen_q, blk.stride_lb, blk.stride_lh, blk.num_heads, s_layout, o_layout)


@gluon.jit
def _consume_first(sh, blk):
    _consume(sh, blk, 0)


@gluon.jit
def _consume_second(sh, blk):
    _consume(sh, blk, 1)


@gluon.jit
def _consume_third(sh, blk):
    _consume(sh, blk, 2)


@gluon.jit
def _allocate(q_desc, k_desc, v_desc, Q_BUFFERS: gl.constexpr, PART: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_D: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """The program's `Shared`, its barriers initialized: Q_BUFFERS Q buffers of PART rows, K/V
    buffers released by CONSUMERS arrivals."""
    dtype: gl.constexpr = q_desc.dtype
    sh = Shared(gl.allocate_shared_memory(dtype, [Q_BUFFERS, PART, HEAD_D], q_desc.layout),
                gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout),
                gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout),
                gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout()))
    _init_barriers(sh, CONSUMERS)
    return sh


@gluon.jit
def _init_barriers(sh, CONSUMERS: gl.constexpr):
    """Initializes the barriers of `sh` (a `Shared` or `SplitShared`): K/V buffers released by
    CONSUMERS arrivals."""
    Q_BUFFERS: gl.constexpr = sh.q_bars.shape[0]
    STAGES: gl.constexpr = sh.k_full.shape[0]
    for h in gl.static_range(Q_BUFFERS):
        mbarrier.init(sh.q_bars.index(h), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(sh.k_full.index(i), count=1)
        mbarrier.init(sh.v_full.index(i), count=1)
        mbarrier.init(sh.k_empty.index(i), count=CONSUMERS)
        mbarrier.init(sh.v_empty.index(i), count=CONSUMERS)
    mbarrier.init(sh.tail_bar, count=1)
    fence_async_shared()


@gluon.jit
def _block_tiles(q_len, k_len, start_m, window_right, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The diagonal offset of the block from row `start_m` and its key tiles, at least one (masked,
    when the block sees no key: its rows get output 0 and LSE -inf)."""
    # attention_tma's `_keys`, spelled as in the build measured on an H200 (docs/bench-gpu-h200.md):
    # `_keys` itself compiles to other code here, not measured as much (the consumers' n_full too).
    diag = gl.where(window_right >= 0, k_len - q_len + window_right, k_len)
    hi = gl.minimum(k_len, start_m + BLOCK_M + diag)
    return diag, gl.maximum((hi + BLOCK_N - 1) // BLOCK_N, 1)


@gluon.jit
def attn_fwd_tma_ws(
    q_desc, k_desc, v_desc,
    Out, Lse, CuSeqQ, CuSeqK, Fault,
    sm_scale,
    stride_qh, stride_kh, stride_vh,
    q_batch_rows, k_batch_rows, v_batch_rows,
    stride_lb, stride_lh,
    is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, window_right, batch,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
):
    """attn_fwd_tma's contract, with BLOCK_M = 128 or 192 query rows per program, two or three
    consumers of ROWS rows, and q's descriptor boxes of ROWS rows; num_warps = 4 (each
    consumer's; 12 or 16 warps in all)."""
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS
    gl.static_assert((CONSUMERS == 2 or CONSUMERS == 3) and CONSUMERS * ROWS == BLOCK_M)
    b, head, head_k, q_start, q_len, k_start, k_len, start_m = _block(
        CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
        num_heads_k, BLOCK_M)
    diag, n_tiles = _block_tiles(q_len, k_len, start_m, window_right, BLOCK_M, BLOCK_N)
    if start_m >= q_len:
        return

    sh = _allocate(q_desc, k_desc, v_desc, CONSUMERS, ROWS, BLOCK_N, HEAD_D, STAGES, CONSUMERS)

    blk = Block(Out, Lse, b, head, q_start, q_len, k_len, start_m, diag, window_right, n_tiles, sm_scale * LOG2E,
                is_varlen, seqlen_q, stride_lb, stride_lh, num_heads)
    loads = (sh, q_desc, k_desc, v_desc, q_start + b * q_batch_rows + start_m, head * stride_qh,
             k_start + b * k_batch_rows, k_start + b * v_batch_rows, head_k * stride_kh, head_k * stride_vh, n_tiles)
    REGS: gl.constexpr = _consumer_regs(CONSUMERS)
    if CONSUMERS == 3:
        gl.warp_specialize([(_consume_first, (sh, blk)), (_consume_second, (sh, blk)), (_consume_third, (sh, blk)),
                            (_loader, loads)], [4, 4, 1], [REGS, REGS, LOADER_REGS])
    else:
        gl.warp_specialize([(_consume_first, (sh, blk)), (_consume_second, (sh, blk)), (_loader, loads)], [4, 1],
                           [REGS, LOADER_REGS])


# The warp-specialized kernel at a split head dim (kernels/aot.py's SPLIT_DIMS: 80 = 64 + 16, 96 =
# 64 + 32, 160 = 128 + 32): attn_fwd_tma_ws's partitions, each head-dim operand in two parts as
# attention_tma's `_fwd_split` reads them (q/k/v_desc the first HEAD_D columns, q2/k2/v2_desc the
# last HEAD_D2), and its helpers for the key steps over the shared ring.


@aggregate
class SplitShared:
    """`Shared` with a second Q buffer, K ring and V ring for the head dim's last HEAD_D2 columns;
    each part's tile of a stage arrives on the one barrier of the stage."""
    q_parts: gl.shared_memory_descriptor
    q2_parts: gl.shared_memory_descriptor
    k_ring: gl.shared_memory_descriptor
    k2_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    v2_ring: gl.shared_memory_descriptor
    q_bars: gl.shared_memory_descriptor
    k_full: gl.shared_memory_descriptor
    v_full: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    tail_bar: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q_parts, q2_parts, k_ring, k2_ring, v_ring, v2_ring, q_bars, k_full, v_full, k_empty, v_empty,
                 tail_bar):
        self.q_parts = q_parts
        self.q2_parts = q2_parts
        self.k_ring = k_ring
        self.k2_ring = k2_ring
        self.v_ring = v_ring
        self.v2_ring = v2_ring
        self.q_bars = q_bars
        self.k_full = k_full
        self.v_full = v_full
        self.k_empty = k_empty
        self.v_empty = v_empty
        self.tail_bar = tail_bar


@aggregate
class SplitLoaderRing:
    """The shared rings as attention_tma's split helpers (`_scores_split`, `_pv_split`,
    `_step_split`) read them (k_bars, v_bars: the `full` barriers), handing buffers back to the
    loader (`LoaderRefill`)."""
    k_ring: gl.shared_memory_descriptor
    k2_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    v2_ring: gl.shared_memory_descriptor
    k_bars: gl.shared_memory_descriptor
    v_bars: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, sh):
        self.k_ring = sh.k_ring
        self.k2_ring = sh.k2_ring
        self.v_ring = sh.v_ring
        self.v2_ring = sh.v2_ring
        self.k_bars = sh.k_full
        self.v_bars = sh.v_full
        self.k_empty = sh.k_empty
        self.v_empty = sh.v_empty

    @gluon.jit
    def release(self, k_tile, v_tile):
        """K tile `k_tile` and V tile `v_tile` are consumed."""
        LoaderRefill(self.k_empty, self.v_empty).release(k_tile, v_tile)


@gluon.jit
def _loader_split(sh, q_desc, q2_desc, k_desc, k2_desc, v_desc, v2_desc, q_row0, q_col, k_row0, v_row0, k_col, v_col,
                  n_tiles):
    """`_loader` with both parts of each tile: Q's consumer parts, then the key tiles (K and V once
    both consumers released what the buffer held STAGES tiles before)."""
    PARTS: gl.constexpr = sh.q_parts.shape[0]
    PART: gl.constexpr = sh.q_parts.shape[1]
    HEAD_D: gl.constexpr = sh.q_parts.shape[2]
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    for h in gl.static_range(PARTS):
        mbarrier.expect(sh.q_bars.index(h), q_desc.block_type.nbytes + q2_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + h * PART, q_col], sh.q_bars.index(h), sh.q_parts.index(h))
        tma.async_copy_global_to_shared(q2_desc, [q_row0 + h * PART, q_col + HEAD_D], sh.q_bars.index(h),
                                        sh.q2_parts.index(h))
    for t in range(n_tiles):
        free = ((t // STAGES) & 1) ^ 1
        mbarrier.wait(sh.k_empty.index(t % STAGES), free)
        _load_split(k_desc, k2_desc, sh.k_ring, sh.k2_ring, sh.k_full, t, n_tiles, k_row0, k_col, BLOCK_N, STAGES)
        mbarrier.wait(sh.v_empty.index(t % STAGES), free)
        _load_split(v_desc, v2_desc, sh.v_ring, sh.v2_ring, sh.v_full, t, n_tiles, v_row0, v_col, BLOCK_N, STAGES)


@gluon.jit
def _consume_split(sh, blk, h: gl.constexpr):
    """`_consume` (with `_attend`'s hand-over of the ring) at a split head dim: consumer `h`'s
    rows, attention_tma's split key steps over the shared ring, its rows' outputs and LSEs."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    HEAD_D: gl.constexpr = sh.q_parts.shape[2]
    HEAD_D2: gl.constexpr = sh.q2_parts.shape[2]
    STAGES: gl.constexpr = sh.k_ring.shape[0]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    LAST: gl.constexpr = h == sh.q_parts.shape[0] - 1
    s_layout: gl.constexpr = _mma_layout(BLOCK_N, gl.num_warps())
    o_layout: gl.constexpr = _mma_layout(HEAD_D, gl.num_warps())
    o2_layout: gl.constexpr = _mma_layout(HEAD_D2, gl.num_warps())
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    p2_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o2_layout, k_width=2)
    kr = SplitLoaderRing(sh)
    q_h = sh.q_parts.index(h)
    q2_h = sh.q2_parts.index(h)
    start = blk.start_m + h * PART
    k_len = blk.k_len
    n_full = _full_tiles(start, blk.diag, k_len, blk.window_right, BLOCK_N)
    n_seen = _part_tiles(start, k_len, blk.diag, blk.n_tiles, BLOCK_N, PART)
    mbarrier.wait(sh.q_bars.index(h), 0)
    p, p2, m_i, l_i, alpha = _first_tile_split(q_h, q2_h, kr, 0, blk.qk_scale, start, k_len, blk.diag, n_full,
                                               s_layout, p_layout, p2_layout)
    mbarrier.arrive(sh.k_empty.index(0), count=1)
    acc = gl.zeros([PART, HEAD_D], gl.float32, o_layout)
    acc2 = gl.zeros([PART, HEAD_D2], gl.float32, o2_layout)
    for j in range(0, n_full - 1):
        acc, acc2, p, p2, alpha, m_i, l_i = _step_split(j, q_h, q2_h, kr, acc, acc2, p, p2, alpha, m_i, l_i,
                                                        blk.qk_scale, start, k_len, blk.diag, False, s_layout,
                                                        o_layout, o2_layout, p_layout, p2_layout)
    for j in range(gl.maximum(n_full - 1, 0), n_seen - 1):
        acc, acc2, p, p2, alpha, m_i, l_i = _step_split(j, q_h, q2_h, kr, acc, acc2, p, p2, alpha, m_i, l_i,
                                                        blk.qk_scale, start, k_len, blk.diag, True, s_layout,
                                                        o_layout, o2_layout, p_layout, p2_layout)

    # The last tile it reads: as `_attend`, the last part zeroes its rows past the sequence.
    last = n_seen - 1
    mbarrier.wait(sh.v_full.index(last % STAGES), (last // STAGES) & 1)
    if n_seen * BLOCK_N > k_len:
        if LAST:
            _zero_tail(sh.v_ring.index(last % STAGES), last, k_len)
            _zero_tail(sh.v2_ring.index(last % STAGES), last, k_len)
            mbarrier.arrive(sh.tail_bar, count=1)
        else:
            mbarrier.wait(sh.tail_bar, 0)
    acc, acc2 = _last_pv_split(kr, last, acc, acc2, p, p2, alpha, o_layout, o2_layout)
    if n_seen < blk.n_tiles:
        # The loader may still refill this buffer for the tiles skipped below.
        mbarrier.arrive(sh.v_empty.index(last % STAGES), count=1)
    _skip(sh, 0, n_seen, blk.n_tiles)
    # Through this part's Q buffers: the last wgmmas that read them have retired.
    _store_split(acc, acc2, m_i, l_i, blk.qk_scale, q_h, q2_h, blk.Out, blk.Lse, blk.b, blk.head, blk.q_start,
                 blk.q_len, start, blk.is_varlen, blk.seqlen_q, blk.stride_lb, blk.stride_lh, blk.num_heads, s_layout,
                 o_layout, o2_layout)


@gluon.jit
def _consume_split_first(sh, blk):
    _consume_split(sh, blk, 0)


@gluon.jit
def _consume_split_second(sh, blk):
    _consume_split(sh, blk, 1)


@gluon.jit
def _consume_split_third(sh, blk):
    _consume_split(sh, blk, 2)


@gluon.jit
def attn_fwd_tma_ws_split(
    q_desc, k_desc, v_desc, q2_desc, k2_desc, v2_desc,
    Out, Lse, CuSeqQ, CuSeqK, Fault,
    sm_scale,
    stride_qh, stride_kh, stride_vh,
    q_batch_rows, k_batch_rows, v_batch_rows,
    stride_lb, stride_lh,
    is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, window_right, batch,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, HEAD_D2: gl.constexpr,
    STAGES: gl.constexpr,
):
    """attn_fwd_tma_ws at a split head dim HEAD_D + HEAD_D2, with attention_tma.attn_fwd_tma_split's
    parameter list: q/k/v_desc the first HEAD_D columns, q2/k2/v2_desc the last HEAD_D2 (q's boxes
    ROWS rows); num_warps = 4 (each consumer's)."""
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS
    gl.static_assert((CONSUMERS == 2 or CONSUMERS == 3) and CONSUMERS * ROWS == BLOCK_M)
    b, head, head_k, q_start, q_len, k_start, k_len, start_m = _block(
        CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
        num_heads_k, BLOCK_M)
    diag, n_tiles = _block_tiles(q_len, k_len, start_m, window_right, BLOCK_M, BLOCK_N)
    if start_m >= q_len:
        return

    dtype: gl.constexpr = q_desc.dtype
    sh = SplitShared(gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, HEAD_D], q_desc.layout),
                     gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, HEAD_D2], q2_desc.layout),
                     gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout),
                     gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D2], k2_desc.layout),
                     gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout),
                     gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D2], v2_desc.layout),
                     gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout()),
                     gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                     gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                     gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                     gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                     gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout()))
    _init_barriers(sh, CONSUMERS)

    blk = Block(Out, Lse, b, head, q_start, q_len, k_len, start_m, diag, window_right, n_tiles, sm_scale * LOG2E,
                is_varlen, seqlen_q, stride_lb, stride_lh, num_heads)
    loads = (sh, q_desc, q2_desc, k_desc, k2_desc, v_desc, v2_desc, q_start + b * q_batch_rows + start_m,
             head * stride_qh, k_start + b * k_batch_rows, k_start + b * v_batch_rows, head_k * stride_kh,
             head_k * stride_vh, n_tiles)
    REGS: gl.constexpr = _consumer_regs(CONSUMERS)
    if CONSUMERS == 3:
        gl.warp_specialize([(_consume_split_first, (sh, blk)), (_consume_split_second, (sh, blk)),
                            (_consume_split_third, (sh, blk)), (_loader_split, loads)], [4, 4, 1],
                           [REGS, REGS, LOADER_REGS])
    else:
        gl.warp_specialize([(_consume_split_first, (sh, blk)), (_consume_split_second, (sh, blk)),
                            (_loader_split, loads)], [4, 1], [REGS, LOADER_REGS])


@aggregate
class Blocks:
    """The call's query blocks as a walking program takes them: a (sequence, head)'s blocks one
    after another, its last (heaviest) block first."""
    CuSeqQ: gl.tensor
    CuSeqK: gl.tensor
    is_varlen: gl.tensor
    seqlen_q: gl.tensor
    seqlen_k: gl.tensor
    total_rows: gl.tensor
    kv_rows: gl.tensor
    kv_len_cap: gl.tensor
    num_heads: gl.tensor
    num_heads_k: gl.tensor
    window_right: gl.tensor
    per_head: gl.tensor
    count: gl.tensor

    @gluon.constexpr_function
    def __init__(self, CuSeqQ, CuSeqK, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
                 num_heads_k, window_right, per_head, count):
        self.CuSeqQ = CuSeqQ
        self.CuSeqK = CuSeqK
        self.is_varlen = is_varlen
        self.seqlen_q = seqlen_q
        self.seqlen_k = seqlen_k
        self.total_rows = total_rows
        self.kv_rows = kv_rows
        self.kv_len_cap = kv_len_cap
        self.num_heads = num_heads
        self.num_heads_k = num_heads_k
        self.window_right = window_right
        self.per_head = per_head
        self.count = count

    @gluon.jit
    def at(self, i, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        """Block i: its sequence, head, k/v head, bounds, fault bits, first row, diagonal offset,
        key tiles, and index within its (sequence, head) (0: the first rows): `_block_at` and
        `_block_tiles`, as `attn_fwd_tma_ws` finds its grid position's."""
        m = self.per_head - 1 - i % self.per_head
        b, head, head_k, q_start, q_len, k_start, k_len, fault, start_m = _block_at(
            self.CuSeqQ, self.CuSeqK, self.is_varlen, self.seqlen_q, self.seqlen_k, self.total_rows, self.kv_rows,
            self.kv_len_cap, self.num_heads, self.num_heads_k, m, i // self.per_head, BLOCK_M)
        diag, n_tiles = _block_tiles(q_len, k_len, start_m, self.window_right, BLOCK_M, BLOCK_N)
        return b, head, head_k, q_start, q_len, k_start, k_len, fault, start_m, diag, n_tiles, m

    @gluon.jit
    def rounds(self):
        """Rounds of the walk: each takes `num_programs` consecutive blocks, one per program."""
        return (self.count + gl.num_programs(0) - 1) // gl.num_programs(0)

    @gluon.jit
    def taken(self, r):
        """The block this program takes in round r, and whether there is one (the last round may
        have none for it; the index is then clamped to the last block). Every other round runs in
        reverse: a program that took a (sequence, head)'s heavy block takes a light one next, where
        a static order would hand some programs only the heaviest when the blocks per head divide
        the programs (a causal block's key tiles grow with its rows)."""
        programs = gl.num_programs(0)
        i = r * programs + gl.where(r % 2 == 0, gl.program_id(0), programs - 1 - gl.program_id(0))
        return gl.minimum(i, self.count - 1), i < self.count


@gluon.jit
def _walk_load(sh, q_empty, blocks, q_desc, k_desc, v_desc, Fault, stride_qh, stride_kh, stride_vh, q_batch_rows,
               k_batch_rows, v_batch_rows):
    """The walking program's loader, block after block: Q's parts once the consumers freed that
    Q buffer pair, then the block's key tiles, the ring counted across blocks. Reports each
    sequence's faults once."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    ring = 0
    done = 0
    for r in range(0, blocks.rounds()):
        i, live = blocks.taken(r)
        b, head, head_k, q_start, q_len, k_start, k_len, fault, start_m, diag, n_tiles, m = blocks.at(
            i, 2 * PART, BLOCK_N)
        if live & (fault != 0) & (m == 0) & (head == 0):
            gl.atomic_or(Fault, fault, sem="relaxed", scope="sys")
        if live & (start_m < q_len):
            slot = (done % 2) * 2
            for h in gl.static_range(2):
                mbarrier.wait(q_empty.index(slot + h), ((done // 2) & 1) ^ 1)
            _load_q(sh, q_desc, slot, q_start + b * q_batch_rows + start_m, head * stride_qh, 2)
            _load_kv(sh, k_desc, v_desc, ring, k_start + b * k_batch_rows, k_start + b * v_batch_rows,
                     head_k * stride_kh, head_k * stride_vh, n_tiles)
            ring += n_tiles
            done += 1


@gluon.jit
def _walk_consume(sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh, h: gl.constexpr):
    """Consumer `h` of the walking program, block after block: its part's rows, outputs and LSEs;
    then it frees its Q buffer for the loader."""
    PART: gl.constexpr = sh.q_parts.shape[1]
    HEAD_D: gl.constexpr = sh.q_parts.shape[2]
    BLOCK_N: gl.constexpr = sh.k_ring.shape[1]
    s_layout: gl.constexpr = _mma_layout(BLOCK_N, gl.num_warps())
    o_layout: gl.constexpr = _mma_layout(HEAD_D, gl.num_warps())
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    qk_scale = sm_scale * LOG2E
    ring = 0
    done = 0
    for r in range(0, blocks.rounds()):
        i, live = blocks.taken(r)
        b, head, head_k, q_start, q_len, k_start, k_len, fault, start_m, diag, n_tiles, m = blocks.at(
            i, 2 * PART, BLOCK_N)
        if live & (start_m < q_len):
            buf = (done % 2) * 2 + h
            q_h = sh.q_parts.index(buf)
            start = start_m + h * PART
            n_full = _full_tiles(start, diag, k_len, blocks.window_right, BLOCK_N)
            mbarrier.wait(sh.q_bars.index(buf), (done // 2) & 1)
            acc, m_i, l_i = _attend(sh, q_h, ring, qk_scale, start, k_len, diag, n_full, n_tiles, h == 1, True,
                                    s_layout, o_layout, p_layout)
            _store_block(acc, m_i, l_i, qk_scale, q_h, Out, Lse, b, head, q_start, q_len, start, blocks.is_varlen,
                         blocks.seqlen_q, stride_lb, stride_lh, blocks.num_heads, s_layout, o_layout)
            # Every warp has read the buffer back (`_store_block`): the loader may refill it. Its
            # refill is a TMA write (the async proxy) over our ordinary stores of O (the generic
            # proxy): PTX orders the two only through a proxy fence, made before the release.
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(q_empty.index(buf), count=1)
            ring += n_tiles
            done += 1


@gluon.jit
def _walk_first(sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh):
    _walk_consume(sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh, 0)


@gluon.jit
def _walk_second(sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh):
    _walk_consume(sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh, 1)


@gluon.jit
def attn_fwd_tma_walk(
    q_desc, k_desc, v_desc,
    Out, Lse, CuSeqQ, CuSeqK, Fault,
    sm_scale,
    stride_qh, stride_kh, stride_vh,
    q_batch_rows, k_batch_rows, v_batch_rows,
    stride_lb, stride_lh,
    is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, window_right, batch,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
):
    """attn_fwd_tma_ws's contract and partitions, over any 1-D grid (one program per SM): program
    p takes block p of `Blocks`' order in the first round, then `Blocks.taken`'s, with two Q
    buffer pairs; two consumers (BLOCK_M = 2 x ROWS)."""
    gl.static_assert(BLOCK_M == 2 * ROWS)
    per_head = (seqlen_q + BLOCK_M - 1) // BLOCK_M
    blocks = Blocks(CuSeqQ, CuSeqK, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
                    num_heads_k, window_right, per_head, per_head * batch * num_heads)
    sh = _allocate(q_desc, k_desc, v_desc, 4, ROWS, BLOCK_N, HEAD_D, STAGES, 2)
    q_empty = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(4):
        mbarrier.init(q_empty.index(i), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_walk_first, (sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh)),
        (_walk_second, (sh, q_empty, blocks, Out, Lse, sm_scale, stride_lb, stride_lh)),
        (_walk_load, (sh, q_empty, blocks, q_desc, k_desc, v_desc, Fault, stride_qh, stride_kh, stride_vh,
                      q_batch_rows, k_batch_rows, v_batch_rows)),
    ], [4, 1], [_consumer_regs(2), LOADER_REGS])
