"""Hopper (sm_90) attention forward in Triton's Gluon dialect: the prefill kernel of plain calls.

`attn_fwd_tma` serves what `attention.attn_fwd` serves for f16/bf16 calls without ALiBi, softcap,
mm_prefix ranges, paging or a left window, at head dims 64, 128 and 256, unsplit: the same outputs
and natural-log LSEs, the same varlen bounds checks and fault bits. It schedules what `tl` leaves to
the compiler by hand, which short prompts need (few key tiles per program, so the pipeline's
start and end are much of the time):

- one warpgroup (4 warps) per 64-row query block of one head (a 64-row wgmma covers it);
- Q, then K and V tiles, by TMA: K and V into a STAGES-deep ring of shared buffers, one mbarrier
  per buffer, refilled as soon as the warpgroup is done with them;
- `S = Q K^T` and `O += P V` as asynchronous wgmma, P kept in registers as the A operand, issued
  so that the softmax of tile j + 1 runs while `P_j V_j` is in flight (wgmma groups retire in
  order: waiting for one outstanding group waits for S only).

q, k and v come in as host-built TMA descriptors (`src/triton/tma.rs` encodes them per call) over
2-D views `[rows, columns]` of the tensors: a row is a token (batch mode: sequence b starts at row
`b * *_batch_rows`; varlen: at its cumulative seqlen), a head starts at column `head *
stride_*h`. A tile may read rows of the next sequence, or rows past the view (zero-filled):
scores of keys past the sequence are masked, V rows past it are zeroed in shared memory before
they meet P (a masked row's P is 0, but 0 * NaN is not), rows of queries past it are not stored.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.language.core import _aggregate as aggregate

LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)


@gluon.jit
def _bounds(CuSeqQ, CuSeqK, b, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap):
    """First q row, q length, first k row, k length of sequence `b`, and its fault bits (1: bad
    q bounds, 2: bad k bounds; the sequence then has no rows), as attention.py's `_sequence`
    checks them. Batch mode gives the first rows as 0 (the caller adds the batch's rows)."""
    if is_varlen != 0:
        q_start = gl.load(CuSeqQ + b)
        q_end = gl.load(CuSeqQ + b + 1)
        k_start = gl.load(CuSeqK + b)
        k_end = gl.load(CuSeqK + b + 1)
        bad_q = (q_start < 0) | (q_end < q_start) | (q_end > total_rows) | (q_end - q_start > seqlen_q)
        bad_k = (k_start < 0) | (k_end < k_start) | (k_end > kv_rows) | (k_end - k_start > kv_len_cap)
        fault = bad_q.to(gl.int32) | (bad_k.to(gl.int32) * 2)
        q_len = gl.where(fault != 0, 0, q_end - q_start)
        k_len = gl.where(fault != 0, 0, k_end - k_start)
    else:
        q_start = 0
        k_start = 0
        q_len = seqlen_q
        k_len = seqlen_k
        fault = 0
    return q_start, q_len, k_start, k_len, fault


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, start_m, k_col0, k_len, diag, keep_all, MASK: gl.constexpr,
             s_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """Online softmax of raw scores `s` (f32): new max, new sum, P (f32) and the factor that
    rescales the old accumulator. The scale is applied in exp2's argument (`qk_scale` > 0, so the
    max of raw scores is the max of scaled ones). MASK: keys past `k_len` and keys past row i's
    diagonal (`j > i + diag`) get -inf unless `keep_all`."""
    if MASK:
        rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        cols = k_col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = (cols[None, :] < k_len) & (cols[None, :] <= rows[:, None] + diag)
        s = gl.where(keep | keep_all, s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    if MASK:
        # A row that has seen no visible key keeps max -inf: exponents against 0 give P = 0.
        m_scaled = gl.where(m_new == -float("inf"), 0.0, m_new * qk_scale)
    else:
        m_scaled = m_new * qk_scale
    alpha = gl.exp2(m_i * qk_scale - m_scaled)
    p = gl.exp2(s * qk_scale - m_scaled[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _load_tile(desc, ring, bars, tile, n_tiles, row0, col, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Queues the TMA load of key tile `tile` (if the block has it) into its ring buffer."""
    stage = tile % STAGES
    has = tile < n_tiles
    mbarrier.expect(bars.index(stage), desc.block_type.nbytes, pred=has)
    tma.async_copy_global_to_shared(desc, [row0 + tile * BLOCK_N, col], bars.index(stage), ring.index(stage),
                                    pred=has)


@aggregate
class SelfRefill:
    """How `_step` hands its K/V buffers back when the program's own warps load them: once every
    warp is done with them, TMA-load the tiles STAGES ahead into them."""
    k_desc: tma.tensor_descriptor
    v_desc: tma.tensor_descriptor
    k_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    k_bars: gl.shared_memory_descriptor
    v_bars: gl.shared_memory_descriptor
    k_row0: gl.tensor
    v_row0: gl.tensor
    k_col: gl.tensor
    v_col: gl.tensor
    n_tiles: gl.tensor

    @gluon.constexpr_function
    def __init__(self, k_desc, v_desc, k_ring, v_ring, k_bars, v_bars, k_row0, v_row0, k_col, v_col, n_tiles):
        self.k_desc = k_desc
        self.v_desc = v_desc
        self.k_ring = k_ring
        self.v_ring = v_ring
        self.k_bars = k_bars
        self.v_bars = v_bars
        self.k_row0 = k_row0
        self.v_row0 = v_row0
        self.k_col = k_col
        self.v_col = v_col
        self.n_tiles = n_tiles

    @gluon.jit
    def release(self, k_tile, v_tile):
        """K tile `k_tile` and V tile `v_tile` are consumed."""
        STAGES: gl.constexpr = self.k_ring.shape[0]
        BLOCK_N: gl.constexpr = self.k_ring.shape[1]
        gl.thread_barrier()
        _load_tile(self.k_desc, self.k_ring, self.k_bars, k_tile + STAGES, self.n_tiles, self.k_row0, self.k_col,
                   BLOCK_N, STAGES)
        _load_tile(self.v_desc, self.v_ring, self.v_bars, v_tile + STAGES, self.n_tiles, self.v_row0, self.v_col,
                   BLOCK_N, STAGES)


@gluon.jit
def _first_tile(q_smem, k_ring, k_bars, ring0, qk_scale, start_m, k_len, diag, n_full, s_layout: gl.constexpr,
                p_layout: gl.constexpr):
    """Tile 0: S_0 and its softmax (masked unless every row sees all of it), with Q and K_0 in
    shared memory once their barriers complete. Returns P_0 (as the P V operand) and the softmax
    state. The block's key tile j is the ring's tile `ring0 + j` (0 unless the ring carries on
    from earlier blocks)."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    STAGES: gl.constexpr = k_ring.shape[0]
    BLOCK_N: gl.constexpr = k_ring.shape[1]
    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    mbarrier.wait(k_bars.index(ring0 % STAGES), (ring0 // STAGES) & 1)
    s_tok = warpgroup_mma(q_smem, k_ring.index(ring0 % STAGES).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s_tok])
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, start_m, 0, k_len, diag, n_full > 0, True, s_layout,
                                  BLOCK_M, BLOCK_N)
    return gl.convert_layout(p.to(q_smem.dtype), p_layout), m_i, l_i, alpha


@gluon.jit
def _step(j, ring0, q_smem, k_ring, v_ring, k_bars, v_bars, refill, acc, p, alpha, m_i, l_i, qk_scale, start_m,
          k_len, diag, MASK: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr,
          p_layout: gl.constexpr):
    """Key step j: `S_{j+1} = Q K_{j+1}^T` and `acc += P_j V_j` in flight together, then the
    softmax of S_{j+1}; `refill.release` hands K tile j + 1 and V tile j back (as ring tiles,
    `ring0` on). Entering, `acc` holds the sum through tile j - 1 at the max before tile j, `p`
    holds P_j (at the max through tile j) and `alpha` the rescale acc still owes."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    STAGES: gl.constexpr = k_ring.shape[0]
    BLOCK_N: gl.constexpr = k_ring.shape[1]
    jn = j + 1
    kt = ring0 + jn
    vt = ring0 + j
    mbarrier.wait(k_bars.index(kt % STAGES), (kt // STAGES) & 1)
    s_tok = warpgroup_mma(q_smem, k_ring.index(kt % STAGES).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    mbarrier.wait(v_bars.index(vt % STAGES), (vt // STAGES) & 1)
    acc_tok = warpgroup_mma(p, v_ring.index(vt % STAGES), acc, is_async=True)
    # One group left outstanding: S_{j+1} has retired, P_j V_j may still run.
    s = warpgroup_mma_wait(1, deps=[s_tok])
    p32, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, start_m, jn * BLOCK_N, k_len, diag, False, MASK,
                                    s_layout, BLOCK_M, BLOCK_N)
    # P_j's registers are the running wgmma's operand: overwrite them only after it retires.
    acc, p = warpgroup_mma_wait(0, deps=[acc_tok, p])
    p = gl.convert_layout(p32.to(p.dtype), p_layout)
    refill.release(kt, vt)
    return acc, p, alpha, m_i, l_i


@gluon.jit
def _key_loop(ring0, q_smem, k_ring, v_ring, k_bars, v_bars, refill, acc, p, alpha, m_i, l_i, qk_scale, start_m,
              k_len, diag, n_full, n_tiles, s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    """Steps 0 .. n_tiles - 2: those whose next tile every row sees whole, then the masked ones
    (diagonal, ragged end)."""
    for j in range(0, n_full - 1):
        acc, p, alpha, m_i, l_i = _step(j, ring0, q_smem, k_ring, v_ring, k_bars, v_bars, refill, acc, p, alpha, m_i,
                                        l_i, qk_scale, start_m, k_len, diag, False, s_layout, o_layout, p_layout)
    for j in range(gl.maximum(n_full - 1, 0), n_tiles - 1):
        acc, p, alpha, m_i, l_i = _step(j, ring0, q_smem, k_ring, v_ring, k_bars, v_bars, refill, acc, p, alpha, m_i,
                                        l_i, qk_scale, start_m, k_len, diag, True, s_layout, o_layout, p_layout)
    return acc, p, alpha, m_i, l_i


@gluon.jit
def _zero_tail(v_last, last, k_len):
    """Zeroes the rows of V tile `last` past the sequence (they hold whatever follows it: a
    masked row's P is 0, but 0 * NaN is not) and orders the stores before the wgmma reads."""
    BLOCK_N: gl.constexpr = v_last.shape[0]
    HEAD_D: gl.constexpr = v_last.shape[1]
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // HEAD_D, HEAD_D // 8], [gl.num_warps(), 1],
                                                 [1, 0])
    tail = v_last.load(rows_layout)
    key = last * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rows_layout))
    v_last.store(gl.where((key < k_len)[:, None], tail, gl.zeros_like(tail)))
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _last_pv(v_last, acc, p, alpha, o_layout: gl.constexpr):
    """The last tile's `acc += P V`, after the rescale acc owes."""
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    acc_tok = warpgroup_mma(p, v_last, acc, is_async=True)
    acc, p = warpgroup_mma_wait(0, deps=[acc_tok, p])
    return acc


@gluon.jit
def _store_block(acc, m_i, l_i, qk_scale, buf, Out, Lse, b, head, q_start, q_len, start_m, is_varlen, seqlen_q,
                 stride_lb, stride_lh, num_heads, s_layout: gl.constexpr, o_layout: gl.constexpr):
    """LSE (natural log) and O = acc / l of the block's rows; rows that saw no key: O = 0, LSE =
    -inf. O goes through `buf` (shared memory of the block's shape that no wgmma reads any more),
    to store 16-byte rows."""
    BLOCK_M: gl.constexpr = buf.shape[0]
    HEAD_D: gl.constexpr = buf.shape[1]
    empty = l_i == 0.0
    lse = gl.where(empty, -float("inf"), (m_i * qk_scale + gl.log2(gl.where(empty, 1.0, l_i))) * LN2)
    pos = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse_at = Lse + b.to(gl.int64) * stride_lb + head.to(gl.int64) * stride_lh + q_start + pos
    gl.store(lse_at, lse, mask=pos < q_len)
    inv_l = gl.convert_layout(1.0 / gl.where(empty, 1.0, l_i), gl.SliceLayout(1, o_layout))
    out = (acc * inv_l[:, None]).to(buf.dtype)
    gl.thread_barrier()
    buf.store(out)
    gl.thread_barrier()
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // HEAD_D, HEAD_D // 8], [gl.num_warps(), 1],
                                                 [1, 0])
    out = buf.load(rows_layout)
    row = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rows_layout))
    col = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, rows_layout))
    out_row = (b * seqlen_q * (1 - is_varlen) + q_start + row).to(gl.int64)
    at = Out + (out_row * num_heads + head)[:, None] * HEAD_D + col[None, :]
    gl.store(at, out, mask=(row < q_len)[:, None])


@gluon.jit
def _block_at(CuSeqQ, CuSeqK, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads, num_heads_k,
              pid_m, pid_bh, BLOCK_M: gl.constexpr):
    """Query block `pid_m` of (sequence x heads + head) `pid_bh`: its sequence `b`, head (and k/v
    head), bounds, fault bits and first row `start_m`."""
    b = pid_bh // num_heads
    head = pid_bh % num_heads
    head_k = head // (num_heads // num_heads_k)
    q_start, q_len, k_start, k_len, fault = _bounds(CuSeqQ, CuSeqK, b, is_varlen, seqlen_q, seqlen_k, total_rows,
                                                    kv_rows, kv_len_cap)
    return b, head, head_k, q_start, q_len, k_start, k_len, fault, pid_m * BLOCK_M


@gluon.jit
def _block(CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
           num_heads_k, BLOCK_M: gl.constexpr):
    """The program's query block (`_block_at` of its grid position), reporting faults once per
    sequence."""
    # Masked blocks are the light ones: the heaviest query blocks start first.
    pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    b, head, head_k, q_start, q_len, k_start, k_len, fault, start_m = _block_at(
        CuSeqQ, CuSeqK, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads, num_heads_k, pid_m,
        gl.program_id(1), BLOCK_M)
    if (fault != 0) & (pid_m == 0) & (head == 0):
        gl.atomic_or(Fault, fault, sem="relaxed", scope="sys")
    return b, head, head_k, q_start, q_len, k_start, k_len, start_m


@gluon.jit
def _keys(start, q_len, k_len, window_right, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """For `ROWS` query rows from `start`: the diagonal offset (key j is visible to row i iff j <
    k_len and j <= i + diag), `hi`, the keys some row sees, and the key tiles every row sees
    whole."""
    if window_right >= 0:
        diag = k_len - q_len + window_right
        hi = gl.minimum(k_len, start + ROWS + diag)
        n_full = gl.minimum(gl.maximum(start + diag + 1, 0) // BLOCK_N, k_len // BLOCK_N)
    else:
        # No diagonal: every key before k_len is at most i + k_len.
        diag = k_len
        hi = k_len
        n_full = k_len // BLOCK_N
    return diag, hi, n_full


# Split head dims (kernels/aot.py's SPLIT_DIMS): wgmma takes 80, 96 or 160 columns, but Gluon's
# tensors and shared buffers are powers of two, so each head-dim operand is two: the first HEAD_D
# columns (a 128-byte swizzled box, as the power-of-two kernels load) and the last HEAD_D2 (16 or
# 32: their own descriptor, whose box and swizzle span are those columns' 32 or 64 bytes). S takes
# two wgmmas into one accumulator, O two accumulators. The matrix work is that of the head dim, not
# of the power of two above it.


@gluon.jit
def _load_split(desc, desc2, ring, ring2, bars, tile, n_tiles, row0, col, BLOCK_N: gl.constexpr,
                STAGES: gl.constexpr):
    """Queues the TMA loads of both parts of key tile `tile` (if the block has it) into their ring
    buffers, on one barrier."""
    HEAD_D: gl.constexpr = ring.shape[2]
    stage = tile % STAGES
    has = tile < n_tiles
    mbarrier.expect(bars.index(stage), desc.block_type.nbytes + desc2.block_type.nbytes, pred=has)
    tma.async_copy_global_to_shared(desc, [row0 + tile * BLOCK_N, col], bars.index(stage), ring.index(stage),
                                    pred=has)
    tma.async_copy_global_to_shared(desc2, [row0 + tile * BLOCK_N, col + HEAD_D], bars.index(stage),
                                    ring2.index(stage), pred=has)


@aggregate
class SplitRing:
    """The K and V rings of a split head dim, both parts, and how they refill: once every warp is
    done with a K/V tile pair, TMA-load the tiles STAGES ahead into its buffers."""
    k_desc: tma.tensor_descriptor
    k2_desc: tma.tensor_descriptor
    v_desc: tma.tensor_descriptor
    v2_desc: tma.tensor_descriptor
    k_ring: gl.shared_memory_descriptor
    k2_ring: gl.shared_memory_descriptor
    v_ring: gl.shared_memory_descriptor
    v2_ring: gl.shared_memory_descriptor
    k_bars: gl.shared_memory_descriptor
    v_bars: gl.shared_memory_descriptor
    k_row0: gl.tensor
    v_row0: gl.tensor
    k_col: gl.tensor
    v_col: gl.tensor
    n_tiles: gl.tensor

    @gluon.constexpr_function
    def __init__(self, k_desc, k2_desc, v_desc, v2_desc, k_ring, k2_ring, v_ring, v2_ring, k_bars, v_bars, k_row0,
                 v_row0, k_col, v_col, n_tiles):
        self.k_desc = k_desc
        self.k2_desc = k2_desc
        self.v_desc = v_desc
        self.v2_desc = v2_desc
        self.k_ring = k_ring
        self.k2_ring = k2_ring
        self.v_ring = v_ring
        self.v2_ring = v2_ring
        self.k_bars = k_bars
        self.v_bars = v_bars
        self.k_row0 = k_row0
        self.v_row0 = v_row0
        self.k_col = k_col
        self.v_col = v_col
        self.n_tiles = n_tiles

    @gluon.jit
    def load(self, k_tile, v_tile):
        """Queues K tile `k_tile` and V tile `v_tile` (where the block has them)."""
        STAGES: gl.constexpr = self.k_ring.shape[0]
        BLOCK_N: gl.constexpr = self.k_ring.shape[1]
        _load_split(self.k_desc, self.k2_desc, self.k_ring, self.k2_ring, self.k_bars, k_tile, self.n_tiles,
                    self.k_row0, self.k_col, BLOCK_N, STAGES)
        _load_split(self.v_desc, self.v2_desc, self.v_ring, self.v2_ring, self.v_bars, v_tile, self.n_tiles,
                    self.v_row0, self.v_col, BLOCK_N, STAGES)

    @gluon.jit
    def release(self, k_tile, v_tile):
        """K tile `k_tile` and V tile `v_tile` are consumed."""
        STAGES: gl.constexpr = self.k_ring.shape[0]
        gl.thread_barrier()
        self.load(k_tile + STAGES, v_tile + STAGES)


@gluon.jit
def _scores_split(q_smem, q2_smem, kr, tile, s_layout: gl.constexpr):
    """Queues `S = Q K^T` of ring tile `tile` (once its barrier completes) as two wgmmas, the head
    dim's parts, into one accumulator."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    STAGES: gl.constexpr = kr.k_ring.shape[0]
    BLOCK_N: gl.constexpr = kr.k_ring.shape[1]
    mbarrier.wait(kr.k_bars.index(tile % STAGES), (tile // STAGES) & 1)
    s_tok = warpgroup_mma(q_smem, kr.k_ring.index(tile % STAGES).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    return warpgroup_mma(q2_smem, kr.k2_ring.index(tile % STAGES).permute((1, 0)), s_tok, is_async=True)


@gluon.jit
def _pv_split(kr, tile, acc, acc2, p, p2, alpha, o_layout: gl.constexpr, o2_layout: gl.constexpr):
    """Queues `acc += P V` of ring tile `tile` for both parts, after the rescale the accumulators owe."""
    STAGES: gl.constexpr = kr.v_ring.shape[0]
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    acc2 = acc2 * gl.convert_layout(alpha, gl.SliceLayout(1, o2_layout))[:, None]
    mbarrier.wait(kr.v_bars.index(tile % STAGES), (tile // STAGES) & 1)
    acc_tok = warpgroup_mma(p, kr.v_ring.index(tile % STAGES), acc, is_async=True)
    acc2_tok = warpgroup_mma(p2, kr.v2_ring.index(tile % STAGES), acc2, is_async=True)
    return acc_tok, acc2_tok


@gluon.jit
def _last_pv_split(kr, tile, acc, acc2, p, p2, alpha, o_layout: gl.constexpr, o2_layout: gl.constexpr):
    """`_last_pv` with both parts: the last tile's `acc += P V` (ring tile `tile`), retired."""
    acc_tok, acc2_tok = _pv_split(kr, tile, acc, acc2, p, p2, alpha, o_layout, o2_layout)
    acc, acc2, p, p2 = warpgroup_mma_wait(0, deps=[acc_tok, acc2_tok, p, p2])
    return acc, acc2


@gluon.jit
def _first_tile_split(q_smem, q2_smem, kr, ring0, qk_scale, start_m, k_len, diag, n_full, s_layout: gl.constexpr,
                      p_layout: gl.constexpr, p2_layout: gl.constexpr):
    """`_first_tile` with both parts: S_0 of ring tile `ring0` and its softmax (masked unless every
    row sees all of it), once Q and K_0 are in shared memory. Returns P_0 as the operand of both
    parts' P V and the softmax state."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = kr.k_ring.shape[1]
    s = warpgroup_mma_wait(0, deps=[_scores_split(q_smem, q2_smem, kr, ring0, s_layout)])
    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    p32, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, start_m, 0, k_len, diag, n_full > 0, True, s_layout,
                                    BLOCK_M, BLOCK_N)
    p = gl.convert_layout(p32.to(q_smem.dtype), p_layout)
    p2 = gl.convert_layout(p, p2_layout)
    return p, p2, m_i, l_i, alpha


@gluon.jit
def _step_split(j, q_smem, q2_smem, kr, acc, acc2, p, p2, alpha, m_i, l_i, qk_scale, start_m, k_len, diag,
                MASK: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr, o2_layout: gl.constexpr,
                p_layout: gl.constexpr, p2_layout: gl.constexpr):
    """`_step` with both parts: S_{j+1} (two wgmmas) and `acc += P_j V_j` (two) in flight together,
    then the softmax of S_{j+1}."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = kr.k_ring.shape[1]
    jn = j + 1
    s_tok = _scores_split(q_smem, q2_smem, kr, jn, s_layout)
    acc_tok, acc2_tok = _pv_split(kr, j, acc, acc2, p, p2, alpha, o_layout, o2_layout)
    # Two groups left outstanding (the P V ones): both S groups have retired.
    s = warpgroup_mma_wait(2, deps=[s_tok])
    p32, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, start_m, jn * BLOCK_N, k_len, diag, False, MASK,
                                    s_layout, BLOCK_M, BLOCK_N)
    # P_j's registers are the running wgmmas' operand: overwrite them only after they retire.
    acc, acc2, p, p2 = warpgroup_mma_wait(0, deps=[acc_tok, acc2_tok, p, p2])
    p = gl.convert_layout(p32.to(p.dtype), p_layout)
    p2 = gl.convert_layout(p, p2_layout)
    kr.release(jn, j)
    return acc, acc2, p, p2, alpha, m_i, l_i


@gluon.jit
def _store_part(acc, inv_l, buf, Out, out_row, row, q_len, head, num_heads, COL0: gl.constexpr,
                D_ALL: gl.constexpr, o_layout: gl.constexpr):
    """Stores the head-dim part `acc` (columns COL0 on of rows D_ALL wide) of O = acc / l through
    `buf` (shared memory of its shape that no wgmma reads any more), as 16-byte rows."""
    BLOCK_M: gl.constexpr = buf.shape[0]
    D: gl.constexpr = buf.shape[1]
    out = (acc * gl.convert_layout(inv_l, gl.SliceLayout(1, o_layout))[:, None]).to(buf.dtype)
    buf.store(out)
    gl.thread_barrier()
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [gl.num_warps(), 1], [1, 0])
    out = buf.load(rows_layout)
    row = gl.convert_layout(row, gl.SliceLayout(1, rows_layout))
    out_row = gl.convert_layout(out_row, gl.SliceLayout(1, rows_layout))
    col = COL0 + gl.arange(0, D, layout=gl.SliceLayout(0, rows_layout))
    at = Out + (out_row * num_heads + head)[:, None] * D_ALL + col[None, :]
    gl.store(at, out, mask=(row < q_len)[:, None])


@gluon.jit
def _store_split(acc, acc2, m_i, l_i, qk_scale, q_smem, q2_smem, Out, Lse, b, head, q_start, q_len, start_m,
                 is_varlen, seqlen_q, stride_lb, stride_lh, num_heads, s_layout: gl.constexpr,
                 o_layout: gl.constexpr, o2_layout: gl.constexpr):
    """`_store_block` with both parts: LSE (natural log) and O = acc / l of the block's rows
    (rows that saw no key: O = 0, LSE = -inf), each part through its Q buffer (which no wgmma
    reads any more)."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    HEAD_D: gl.constexpr = q_smem.shape[1]
    HEAD_D2: gl.constexpr = q2_smem.shape[1]
    empty = l_i == 0.0
    lse = gl.where(empty, -float("inf"), (m_i * qk_scale + gl.log2(gl.where(empty, 1.0, l_i))) * LN2)
    row = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    gl.store(Lse + b.to(gl.int64) * stride_lb + head.to(gl.int64) * stride_lh + q_start + row, lse, mask=row < q_len)
    inv_l = 1.0 / gl.where(empty, 1.0, l_i)
    out_row = (b * seqlen_q * (1 - is_varlen) + q_start + row).to(gl.int64)
    gl.thread_barrier()
    _store_part(acc, inv_l, q_smem, Out, out_row, row, q_len, head, num_heads, 0, HEAD_D + HEAD_D2, o_layout)
    _store_part(acc2, inv_l, q2_smem, Out, out_row, row, q_len, head, num_heads, HEAD_D, HEAD_D + HEAD_D2,
                o2_layout)


@gluon.jit
def _fwd_split(q_desc, k_desc, v_desc, q2_desc, k2_desc, v2_desc, Out, Lse, CuSeqQ, CuSeqK, Fault, sm_scale,
               stride_qh, stride_kh, stride_vh, q_batch_rows, k_batch_rows, v_batch_rows, stride_lb, stride_lh,
               is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads, num_heads_k, window_right,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, HEAD_D2: gl.constexpr,
               STAGES: gl.constexpr):
    """`attn_fwd_tma` at a split head dim HEAD_D + HEAD_D2: its schedule, each head-dim operand in
    two parts."""
    num_warps: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    o2_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, HEAD_D2, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    p2_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o2_layout, k_width=2)

    b, head, head_k, q_start, q_len, k_start, k_len, start_m = _block(
        CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
        num_heads_k, BLOCK_M)
    if start_m >= q_len:
        return
    q_row0 = q_start + b * q_batch_rows + start_m
    q_col = head * stride_qh
    qk_scale = sm_scale * LOG2E
    diag, hi, n_full = _keys(start_m, q_len, k_len, window_right, BLOCK_M, BLOCK_N)
    # At least one tile, masked, when the block sees no key: its rows get output 0 and LSE -inf.
    n_tiles = gl.maximum((hi + BLOCK_N - 1) // BLOCK_N, 1)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    q2_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D2], q2_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kr = SplitRing(k_desc, k2_desc, v_desc, v2_desc,
                   gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout),
                   gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D2], k2_desc.layout),
                   gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout),
                   gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D2], v2_desc.layout),
                   k_bars, v_bars, k_start + b * k_batch_rows, k_start + b * v_batch_rows, head_k * stride_kh,
                   head_k * stride_vh, n_tiles)
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes + q2_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, q_col], q_bar, q_smem)
    tma.async_copy_global_to_shared(q2_desc, [q_row0, q_col + HEAD_D], q_bar, q2_smem)
    for i in gl.static_range(STAGES):
        kr.load(i, i)

    mbarrier.wait(q_bar, 0)
    p, p2, m_i, l_i, alpha = _first_tile_split(q_smem, q2_smem, kr, 0, qk_scale, start_m, k_len, diag, n_full,
                                               s_layout, p_layout, p2_layout)
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    acc2 = gl.zeros([BLOCK_M, HEAD_D2], gl.float32, o2_layout)
    gl.thread_barrier()
    _load_split(k_desc, k2_desc, kr.k_ring, kr.k2_ring, k_bars, STAGES, n_tiles, kr.k_row0, kr.k_col, BLOCK_N,
                STAGES)

    # Steps 0 .. n_tiles - 2: those whose next tile every row sees whole, then the masked ones.
    for j in range(0, n_full - 1):
        acc, acc2, p, p2, alpha, m_i, l_i = _step_split(j, q_smem, q2_smem, kr, acc, acc2, p, p2, alpha, m_i, l_i,
                                                        qk_scale, start_m, k_len, diag, False, s_layout, o_layout,
                                                        o2_layout, p_layout, p2_layout)
    for j in range(gl.maximum(n_full - 1, 0), n_tiles - 1):
        acc, acc2, p, p2, alpha, m_i, l_i = _step_split(j, q_smem, q2_smem, kr, acc, acc2, p, p2, alpha, m_i, l_i,
                                                        qk_scale, start_m, k_len, diag, True, s_layout, o_layout,
                                                        o2_layout, p_layout, p2_layout)

    # The last tile's P V. Its rows past the sequence hold whatever follows it: zero them.
    last = n_tiles - 1
    mbarrier.wait(v_bars.index(last % STAGES), (last // STAGES) & 1)
    if n_tiles * BLOCK_N > k_len:
        _zero_tail(kr.v_ring.index(last % STAGES), last, k_len)
        _zero_tail(kr.v2_ring.index(last % STAGES), last, k_len)
    acc, acc2 = _last_pv_split(kr, last, acc, acc2, p, p2, alpha, o_layout, o2_layout)

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    # Through Q's buffers: the last wgmmas that read them have retired.
    _store_split(acc, acc2, m_i, l_i, qk_scale, q_smem, q2_smem, Out, Lse, b, head, q_start, q_len, start_m,
                 is_varlen, seqlen_q, stride_lb, stride_lh, num_heads, s_layout, o_layout, o2_layout)


@gluon.jit
def attn_fwd_tma(
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
    """Grid: (query blocks of the longest sequence, batch x heads); `batch` (the sequences) is
    read by the warp-specialized kernel, which shares this parameter list. Out: contiguous `(rows,
    num_heads, HEAD_D)`; Lse: f32 at `b * stride_lb + head * stride_lh + position`. Key j is
    visible to query i of a sequence iff `j < k_len` and, with `window_right >= 0`, `j <= i +
    k_len - q_len + window_right` (causal: 0)."""
    num_warps: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)

    b, head, head_k, q_start, q_len, k_start, k_len, start_m = _block(
        CuSeqQ, CuSeqK, Fault, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads,
        num_heads_k, BLOCK_M)
    if start_m >= q_len:
        return
    q_row0 = q_start + b * q_batch_rows + start_m
    k_row0 = k_start + b * k_batch_rows
    v_row0 = k_start + b * v_batch_rows
    k_col = head_k * stride_kh
    v_col = head_k * stride_vh
    qk_scale = sm_scale * LOG2E
    diag, hi, n_full = _keys(start_m, q_len, k_len, window_right, BLOCK_M, BLOCK_N)
    # At least one tile, masked, when the block sees no key: its rows get output 0 and LSE -inf.
    n_tiles = gl.maximum((hi + BLOCK_N - 1) // BLOCK_N, 1)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, head * stride_qh], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        _load_tile(k_desc, k_ring, k_bars, i, n_tiles, k_row0, k_col, BLOCK_N, STAGES)
        _load_tile(v_desc, v_ring, v_bars, i, n_tiles, v_row0, v_col, BLOCK_N, STAGES)

    mbarrier.wait(q_bar, 0)
    p, m_i, l_i, alpha = _first_tile(q_smem, k_ring, k_bars, 0, qk_scale, start_m, k_len, diag, n_full, s_layout,
                                     p_layout)
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    gl.thread_barrier()
    _load_tile(k_desc, k_ring, k_bars, STAGES, n_tiles, k_row0, k_col, BLOCK_N, STAGES)

    refill = SelfRefill(k_desc, v_desc, k_ring, v_ring, k_bars, v_bars, k_row0, v_row0, k_col, v_col, n_tiles)
    acc, p, alpha, m_i, l_i = _key_loop(0, q_smem, k_ring, v_ring, k_bars, v_bars, refill, acc, p, alpha, m_i,
                                        l_i, qk_scale, start_m, k_len, diag, n_full, n_tiles, s_layout, o_layout,
                                        p_layout)

    # The last tile's P V. Its rows past the sequence hold whatever follows it: zero them.
    last = n_tiles - 1
    v_last = v_ring.index(last % STAGES)
    mbarrier.wait(v_bars.index(last % STAGES), (last // STAGES) & 1)
    if n_tiles * BLOCK_N > k_len:
        _zero_tail(v_last, last, k_len)
    acc = _last_pv(v_last, acc, p, alpha, o_layout)

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    # Through Q's buffer: the last wgmma that read it has retired.
    _store_block(acc, m_i, l_i, qk_scale, q_smem, Out, Lse, b, head, q_start, q_len, start_m, is_varlen, seqlen_q,
                 stride_lb, stride_lh, num_heads, s_layout, o_layout)


@gluon.jit
def attn_fwd_tma_split(
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
    """`attn_fwd_tma` at a split head dim HEAD_D + HEAD_D2 (80 = 64 + 16, 96 = 64 + 32, 160 = 128 +
    32): the first HEAD_D columns of q, k and v through q/k/v_desc, the last HEAD_D2 through
    q2/k2/v2_desc ([`_fwd_split`]); `batch` is unread, as there. Its own kernel, so that the
    power-of-two kernels keep their parameter list (three descriptors)."""
    _fwd_split(q_desc, k_desc, v_desc, q2_desc, k2_desc, v2_desc, Out, Lse, CuSeqQ, CuSeqK, Fault, sm_scale,
               stride_qh, stride_kh, stride_vh, q_batch_rows, k_batch_rows, v_batch_rows, stride_lb, stride_lh,
               is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap, num_heads, num_heads_k,
               window_right, BLOCK_M, BLOCK_N, HEAD_D, HEAD_D2, STAGES)
