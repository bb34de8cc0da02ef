"""Flash-attention forward kernels in Triton, one source for every GPU the crate serves.

Compiled ahead of time by `kernels/aot.py` (HSACO for AMD archs, cubin for the sm_90 check) and
launched from Rust (`src/triton/`). Two kernels:

- `attn_fwd`: one program per (block of packed query rows, sequence x k/v head, key split).
  A block packs the query heads that share a k/v head into its rows (row r is query
  `r // group` of head `hk * group + r % group`), so K/V tiles are read once per group. With
  `num_splits == 1` it writes the output and the LSE; otherwise each split writes its normalized
  partial output and its base-2 LSE to f32 accumulators and `attn_merge` combines them.
- `attn_merge`: combines the splits of the rows `attn_fwd` wrote, over the same grid of query
  blocks and sequences (rows outside every sequence are left to the caller's prefill).

Side tensors are read as given, never trusted: a sequence whose cumulative seqlens would index
outside q/out or k/v, or exceed max_seqlen_q/k (or its block-table row), is computed as empty
(no program writes its rows), a block-table entry outside the cache reads block 0, and each
sets a bit in the fault word (`Fault`, mapped host memory: 1 seqlens_q, 2 seqlens_k, 4
block_table) that the host reads later without synchronizing.

The semantics are the crate's (src/params, src/cpu/mask.rs): bottom-right windows with -1
meaning unbounded, `softcap * tanh(s / softcap)` before ALiBi `-slope * |pos - j|`,
`mm_prefix_ranges` lifting the mask inside a range that holds the row's position, and a row
that sees no key gets output 0 and LSE -inf.

Compile-time switches (each a separate code object): BLOCK_M/BLOCK_N (tile), BLOCK_D and
BLOCK_D2 (the head-dim tile: a power of two, or split into a power of two and a smaller tail, 0
if none, e.g. 64 + 16 for head dims 65-80, so that matrix work follows the head dim rather than
the next power of two), EVEN_D (head_dim == BLOCK_D + BLOCK_D2: no masks on the head dim), PAGED (k/v
gathered through a block table, any page size), EXTRAS (ALiBi, softcap and mm_prefix_ranges,
each then switched at run time); ONE_LOOP (per target and tile class, not a variant: every key
tile in one loop, see attn_fwd and kernels/aot.py's one_loop); FOLD_SCALE (per target, not a
variant: the softmax scale folded into the exponent's FMA, on AMD, where it saves a multiply per
score; on sm_90 it ran up to 5% slower at d = 64); PAGE_TILES (per target, not a variant: paged variants get a
second key loop for pages that hold whole tiles, chosen at run time); KEY_HALVES (per target,
tile class and head-dim tile, flat EVEN_D variants without EXTRAS: masked key tiles of half the
tile (16 keys at least) first, then unmasked ones loaded in halves, or whole at a split head dim,
_attend_halves; kernels/aot.py's KEY_HALVES); TAIL_VEC (per target, tile class and head-dim
tile: the split head dim's tail loaded in vectors of that many columns, 0: Triton's choice;
kernels/aot.py's TAIL_VEC). Everything else, the
batch/varlen choice included, is a run-time argument so that one code object serves every shape.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _key_range(pos, k_len, window_left, window_right):
    """Keys [lo, hi) that a query at key position `pos` may see (scalars or vectors)."""
    lo = tl.where(window_left < 0, 0, tl.maximum(pos - window_left, 0))
    hi = tl.where(window_right < 0, k_len, tl.maximum(pos + window_right + 1, 0))
    hi = tl.minimum(hi, k_len)
    lo = tl.minimum(lo, k_len)
    return lo, hi


@triton.jit
def _i64(x):
    # Widens an i32 scalar or tensor (or a Python int the JIT specialized) to i64.
    return x + tl.zeros([], tl.int64)


@triton.jit
def _divmod(n, d, magic):
    """(n // d, n % d) for 0 <= n < 2^31 and a run-time d >= 1 without a division instruction
    (a division is a long instruction sequence, issued per key in the paged loop): `magic` is
    floor((2^32 - 1) / d) as 32 bits; umulhi(n, magic) is the quotient or one less (the error
    n (1/d - magic / 2^32) stays below 1), and one comparison corrects it."""
    q = tl.umulhi(n.to(tl.uint32), magic.to(tl.uint32, bitcast=True)).to(tl.int32)
    r = n - q * d
    fix = r >= d
    return tl.where(fix, q + 1, q), tl.where(fix, r - d, r)


@triton.jit
def _tanh(x):
    # 1 - 2 / (e^{2x} + 1): exact limits at +-inf, no tanh intrinsic needed on any backend.
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _sequence(CuSeqQ, CuSeqK, b, is_varlen, seqlen_q, seqlen_k, total_rows, kv_rows, kv_len_cap):
    """Query and key bounds of sequence `b` and its fault bits. In varlen mode a sequence whose
    bounds would leave q/out (`total_rows`) or k/v (`kv_rows`), step back, or pass
    `seqlen_q` / `kv_len_cap` keys, gets q_len 0 (no rows written). Each sequence is checked on
    its own: valid neighbours cannot overlap, since they share their boundary value."""
    if is_varlen != 0:
        q_start = tl.load(CuSeqQ + b)
        q_end = tl.load(CuSeqQ + b + 1)
        k_start = tl.load(CuSeqK + b)
        k_end = tl.load(CuSeqK + b + 1)
        # Differences are formed only once both ends are known in range: no i32 overflow matters.
        bad_q = (q_start < 0) | (q_end < q_start) | (q_end > total_rows) | (q_end - q_start > seqlen_q)
        bad_k = (k_start < 0) | (k_end < k_start) | (k_end > kv_rows) | (k_end - k_start > kv_len_cap)
        fault = tl.where(bad_q, 1, 0) | tl.where(bad_k, 2, 0)
        q_len = tl.where(fault != 0, 0, q_end - q_start)
        k_len = tl.where(fault != 0, 0, k_end - k_start)
        q_start = tl.where(fault != 0, 0, q_start)
        k_start = tl.where(fault != 0, 0, k_start)
    else:
        q_start = seqlen_q * 0
        q_len = seqlen_q
        k_start = seqlen_k * 0
        k_len = seqlen_k
        fault = seqlen_q * 0
    return q_start, q_len, k_start, k_len, fault


@triton.jit
def _mask_scores(s, offs_n, row_lo, row_hi, pre_lo, pre_hi, pos, k_len, EXTRAS: tl.constexpr):
    """`s` with -inf where a row may not see key `offs_n`: outside its window [row_lo, row_hi)
    and, with EXTRAS, outside its mm_prefix range [pre_lo, pre_hi) (None: no range). With EXTRAS
    the window comes as the scalar key offsets [row_lo, row_hi] from the row's position `pos`
    (attn_fwd), and keys from k_len on are masked here."""
    j = offs_n[None, :]
    if EXTRAS:
        rel = j - pos[:, None]
        visible = (rel >= row_lo) & (rel <= row_hi) & (j < k_len)
        if pre_lo is not None:
            visible = visible | ((j >= pre_lo[:, None]) & (j < pre_hi[:, None]))
    else:
        visible = (j >= row_lo[:, None]) & (j < row_hi[:, None])
    return tl.where(visible, s, float("-inf"))


@triton.jit
def _attend(
    acc, acc2, m_i, l_i, q, q2,
    K, V, table_row, offs_d, d_mask, offs_d2, d_mask2,
    start, end,
    k_len, page_size, page_magic, num_blocks, Fault,
    stride_kb, stride_kn, stride_vb, stride_vn,
    qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
    row_lo, row_hi, pre_lo, pre_hi,
    BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr, PAGED: tl.constexpr, EXTRAS: tl.constexpr,
    MASKED: tl.constexpr, EVEN_D: tl.constexpr, WHOLE_PAGES: tl.constexpr, FOLD_SCALE: tl.constexpr,
    ONE_LOOP: tl.constexpr, full_start, full_end,
):
    """Online softmax over the key tiles [start, end) (start tile-aligned). WHOLE_PAGES: every
    tile lies in one page (the page size a multiple of BLOCK_N, every key below k_len), so the
    table is read once per tile instead of once per key. m_i is the running maximum of the
    scaled base-2 scores (what _normalize takes). With FOLD_SCALE (and without EXTRAS) the scores
    stay unscaled until the exponent, which needs qk_scale to be a positive normal f32: a scale
    <= 0 would turn the maximum into the minimum and the -inf of masked keys into +inf or NaN, so
    the host sends such calls to the EXTRAS variants, which scale first (src/triton/select.rs,
    needs_extras). ONE_LOOP (with MASKED): the tiles in [full_start, full_end) skip the mask (a
    scalar test per tile), so that one loop serves every tile. BLOCK_D2 > 0: the head dim's
    tail columns (offs_d2) in operands of their own, q2 and acc2 (attn_fwd's split head dim)."""
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        if PAGED and WHOLE_PAGES:
            column, first = _divmod(n0, page_size, page_magic)
            page = tl.load(table_row + column)
            # A block id outside the cache reads block 0 and is reported.
            bad_page = (page < 0) | (page >= num_blocks)
            tl.atomic_or(Fault, 4, mask=bad_page, sem="relaxed", scope="sys")
            page = _i64(tl.where(bad_page, 0, page))
            slot = first + tl.arange(0, BLOCK_N)
            k_rows = page * stride_kb + slot * stride_kn
            v_rows = page * stride_vb + slot * stride_vn
        elif PAGED:
            in_seq = offs_n < k_len
            column, slot = _divmod(offs_n, page_size, page_magic)
            page = tl.load(table_row + column, mask=in_seq, other=0)
            # A block id outside the cache reads block 0 and is reported (lanes of bad ids only).
            bad_page = in_seq & ((page < 0) | (page >= num_blocks))
            tl.atomic_or(Fault + offs_n * 0, 4, mask=bad_page, sem="relaxed", scope="sys")
            page = _i64(tl.where(bad_page, 0, page))
            k_rows = page * stride_kb + slot * stride_kn
            v_rows = page * stride_vb + slot * stride_vn
        else:
            k_rows = offs_n * stride_kn
            v_rows = offs_n * stride_vn
        kv_mask = offs_n < k_len
        k = _load_tile(K + k_rows[None, :] + offs_d[:, None], kv_mask[None, :], d_mask[:, None], MASKED, EVEN_D)
        s = tl.dot(q, k)
        if BLOCK_D2 > 0:
            k2 = _load_tile(K + k_rows[None, :] + offs_d2[:, None], kv_mask[None, :], d_mask2[:, None], MASKED, EVEN_D)
            s = tl.dot(q2, k2, s)
        if EXTRAS:
            s = s * sm_scale
            if has_softcap != 0:
                s = softcap * _tanh(s / softcap)
            if has_alibi != 0:
                dist = tl.abs(pos[:, None] - offs_n[None, :]).to(tl.float32)
                s = s - slope[:, None] * dist
            s = s * LOG2E
        elif not FOLD_SCALE:
            s = s * qk_scale
        if MASKED:
            if ONE_LOOP:
                if (n0 < full_start) | (n0 >= full_end):
                    s = _mask_scores(s, offs_n, row_lo, row_hi, pre_lo, pre_hi, pos, k_len, EXTRAS)
            else:
                s = _mask_scores(s, offs_n, row_lo, row_hi, pre_lo, pre_hi, pos, k_len, EXTRAS)
        if EXTRAS or not FOLD_SCALE:
            m_new = tl.maximum(m_i, tl.max(s, 1))
        else:
            # s is unscaled here: its row maximum times qk_scale is the scaled one (qk_scale > 0)
            # and costs one multiply per row, not per score.
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        if EXTRAS or not FOLD_SCALE:
            p = tl.math.exp2(s - m_safe[:, None])
        else:
            # The scale and the maximum in one FMA per score (a masked -inf stays -inf).
            p = tl.math.exp2(tl.fma(s, qk_scale, -m_safe[:, None]))
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load_tile(V + v_rows[:, None] + offs_d[None, :], kv_mask[:, None], d_mask[None, :], MASKED, EVEN_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        if BLOCK_D2 > 0:
            v2 = _load_tile(V + v_rows[:, None] + offs_d2[None, :], kv_mask[:, None], d_mask2[None, :], MASKED, EVEN_D)
            acc2 = acc2 * alpha[:, None] + tl.dot(p.to(v2.dtype), v2)
        m_i = m_new
    return acc, acc2, m_i, l_i


@triton.jit
def _online_softmax(s, m_i, l_i, qk_scale):
    """One tile's softmax update from its unscaled scores `s` (FOLD_SCALE): P at the new running
    maximum (the scale and the maximum in one FMA per score), the rescale `alpha` the
    accumulators owe, and the new row sums and maximum."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(tl.fma(s, qk_scale, -m_safe[:, None]))
    alpha = tl.math.exp2(m_i - m_safe)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def _attend_halves(acc, acc2, m_i, l_i, q, q2, K, V, offs_d, d_mask, offs_d2, d_mask2, start, end, stride_kn,
                   stride_vn, qk_scale, BLOCK_N: tl.constexpr, BLOCK_D2: tl.constexpr, EVEN_D: tl.constexpr):
    """_attend's unmasked tiles [start, end) for flat K/V, EVEN_D or not, without EXTRAS, with
    FOLD_SCALE: one softmax update (maximum, accumulator rescale) per tile of BLOCK_N keys. The
    tiles' addresses are a scalar pointer stepped per tile plus loop-invariant offsets.
    Without a split head dim, with the load registers of BLOCK_N / 2: K comes in two halves
    joined into the tile's one QK product, V in two halves with a PV product each (P split in
    registers). With one (BLOCK_D2 > 0: the tail columns in q2 / acc2, as _attend), K and V come
    whole, the tail's V first: there V's halves lose the in-thread transpose (kernels/aot.py's
    KEY_HALVES has what each choice measured)."""
    HALF: tl.constexpr = BLOCK_N // 2
    K_t = K + start * stride_kn
    V_t = V + start * stride_vn
    if BLOCK_D2 > 0:
        k_offs = (tl.arange(0, BLOCK_N) * stride_kn)[None, :] + offs_d[:, None]
        v_offs = (tl.arange(0, BLOCK_N) * stride_vn)[:, None] + offs_d[None, :]
        k2_offs = (tl.arange(0, BLOCK_N) * stride_kn)[None, :] + offs_d2[:, None]
        v2_offs = (tl.arange(0, BLOCK_N) * stride_vn)[:, None] + offs_d2[None, :]
        for n0 in range(start, end, BLOCK_N):
            k = _load_tile(K_t + k_offs, None, d_mask[:, None], False, EVEN_D)
            s = tl.dot(q, k)
            k2 = _load_tile(K_t + k2_offs, None, d_mask2[:, None], False, EVEN_D)
            s = tl.dot(q2, k2, s)
            p, alpha, l_i, m_i = _online_softmax(s, m_i, l_i, qk_scale)
            p = p.to(V.dtype.element_ty)
            v2 = _load_tile(V_t + v2_offs, None, d_mask2[None, :], False, EVEN_D)
            acc2 = acc2 * alpha[:, None] + tl.dot(p, v2)
            v = _load_tile(V_t + v_offs, None, d_mask[None, :], False, EVEN_D)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            K_t += BLOCK_N * stride_kn
            V_t += BLOCK_N * stride_vn
    else:
        k_offs = (tl.arange(0, HALF) * stride_kn)[None, :] + offs_d[:, None]
        v_offs = (tl.arange(0, HALF) * stride_vn)[:, None] + offs_d[None, :]
        for n0 in range(start, end, BLOCK_N):
            k_a = _load_tile(K_t + k_offs, None, d_mask[:, None], False, EVEN_D)
            k_b = _load_tile(K_t + HALF * stride_kn + k_offs, None, d_mask[:, None], False, EVEN_D)
            k = tl.reshape(tl.permute(tl.join(k_a, k_b), (0, 2, 1)), [k_a.shape[0], BLOCK_N])
            s = tl.dot(q, k)
            p, alpha, l_i, m_i = _online_softmax(s, m_i, l_i, qk_scale)
            p_a, p_b = tl.split(tl.permute(tl.reshape(p.to(V.dtype.element_ty), [p.shape[0], 2, HALF]), (0, 2, 1)))
            v_a = _load_tile(V_t + v_offs, None, d_mask[None, :], False, EVEN_D)
            acc = acc * alpha[:, None] + tl.dot(p_a, v_a)
            v_b = _load_tile(V_t + HALF * stride_vn + v_offs, None, d_mask[None, :], False, EVEN_D)
            acc = tl.dot(p_b, v_b, acc)
            K_t += BLOCK_N * stride_kn
            V_t += BLOCK_N * stride_vn
    return acc, acc2, m_i, l_i


@triton.jit
def _load_tile(ptrs, kv_mask, d_mask, MASKED: tl.constexpr, EVEN_D: tl.constexpr):
    """A K, V or Q tile at `ptrs`, zero where `kv_mask` (keys in the sequence, MASKED tiles only)
    or `d_mask` (head-dim columns, unless EVEN_D) is false; both masks broadcast to the tile."""
    if MASKED:
        if EVEN_D:
            tile = tl.load(ptrs, mask=kv_mask, other=0.0)
        else:
            tile = tl.load(ptrs, mask=kv_mask & d_mask, other=0.0)
    else:
        if EVEN_D:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=d_mask, other=0.0)
    return tile


@triton.jit
def attn_fwd(
    Q, K, V, Out, Lse, OAcc, LAcc,
    CuSeqQ, CuSeqK, BlockTable, AlibiSlopes, MmPrefix, Fault,
    sm_scale, softcap,
    stride_qb, stride_qm, stride_qh,
    stride_kb, stride_kn, stride_kh,
    stride_vb, stride_vn, stride_vh,
    stride_om, stride_oh,
    stride_lb, stride_lh,
    stride_bt, stride_mmb,
    is_varlen, seqlen_q, seqlen_k, rows_per_batch, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, head_dim,
    window_left, window_right, page_size, page_magic, num_blocks,
    has_softcap, has_alibi, num_mm_ranges,
    num_splits, split_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_D2: tl.constexpr,
    EVEN_D: tl.constexpr, PAGED: tl.constexpr, EXTRAS: tl.constexpr, PAGE_TILES: tl.constexpr,
    FOLD_SCALE: tl.constexpr, ONE_LOOP: tl.constexpr, KEY_HALVES: tl.constexpr = False,
    TAIL_VEC: tl.constexpr = 0,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = pid_bh // num_heads_k
    hk = pid_bh % num_heads_k
    group = num_heads // num_heads_k

    q_start, q_len, k_start, k_len, fault = _sequence(CuSeqQ, CuSeqK, b, is_varlen, seqlen_q, seqlen_k,
                                                      total_rows, kv_rows, kv_len_cap)
    # One program per sequence reports it.
    tl.atomic_or(Fault, fault, mask=(fault != 0) & (pid_m == 0) & (hk == 0) & (split == 0),
                 sem="relaxed", scope="sys")

    rows = q_len * group
    if pid_m * BLOCK_M >= rows:
        return

    # The block's rows past the sequence's last packed row repeat that row: same inputs, so the
    # same outputs, written to the same places (by this program: only the last block has such
    # rows). Loads and stores then need no row mask, which on sm_90 keeps Q's load and the
    # output's store off the key loop's registers.
    offs_r = tl.minimum(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), rows - 1)
    i = offs_r // group
    head = hk * group + offs_r % group
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < head_dim
    # A split head dim (BLOCK_D2 > 0): columns [BLOCK_D, BLOCK_D + BLOCK_D2) in operands of their
    # own, so that a head dim of 80 computes 64 + 16 columns, not 128. Without one the tail's
    # names stand for the head's and nothing reads them.
    if BLOCK_D2 > 0:
        offs_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
    else:
        offs_d2 = offs_d
    d_mask2 = offs_d2 < head_dim
    pos = i + k_len - q_len

    # Block-uniform key bounds: windows are monotone in the query position.
    i_first = pid_m * BLOCK_M // group
    i_last = (tl.minimum(pid_m * BLOCK_M + BLOCK_M, rows) - 1) // group
    lo, _unused = _key_range(i_first + k_len - q_len, k_len, window_left, window_right)
    _unused2, hi = _key_range(i_last + k_len - q_len, k_len, window_left, window_right)
    full_lo, _unused3 = _key_range(i_last + k_len - q_len, k_len, window_left, window_right)
    _unused4, full_hi = _key_range(i_first + k_len - q_len, k_len, window_left, window_right)
    row_lo, row_hi = _key_range(pos, k_len, window_left, window_right)
    if EXTRAS:
        # The window as key offsets from pos (_mask_scores), two scalars instead of two row
        # vectors live across the key loops: pos is live there anyway (ALiBi).
        row_lo = tl.where(window_left < 0, -2147483647, -window_left)
        row_hi = tl.where(window_right < 0, 2147483647, window_right)

    slope = tl.zeros([BLOCK_M], tl.float32)
    pre_lo = tl.zeros([BLOCK_M], tl.int32)
    pre_hi = tl.zeros([BLOCK_M], tl.int32)
    if EXTRAS:
        if has_alibi != 0:
            slope = tl.load(AlibiSlopes + head)
        if num_mm_ranges > 0:
            found = tl.zeros([BLOCK_M], tl.int32)
            for rr in range(0, num_mm_ranges):
                r_lo = tl.load(MmPrefix + b * stride_mmb + 2 * rr)
                r_hi = tl.load(MmPrefix + b * stride_mmb + 2 * rr + 1)
                holds = (r_lo < r_hi) & (pos >= r_lo) & (pos < r_hi)
                c_lo = tl.minimum(tl.maximum(r_lo, 0), k_len)
                c_hi = tl.minimum(tl.maximum(r_hi, 0), k_len)
                pre_lo = tl.where(holds, tl.where(found != 0, tl.minimum(pre_lo, c_lo), c_lo), pre_lo)
                pre_hi = tl.where(holds, tl.where(found != 0, tl.maximum(pre_hi, c_hi), c_hi), pre_hi)
                found = tl.where(holds, 1, found)
            # The ranges can lift the mask anywhere: visit every key, masked.
            lo = k_len * 0
            hi = k_len
            full_lo = k_len
            full_hi = k_len * 0

    # Tiles: [start, f0) masked, [f0, f1) unmasked, [f1, end) masked; then the split's share,
    # counted from the block's first tile: a window's keys spread over every split (the plan
    # sizes the splits by Window::key_span, not by the whole cache).
    start = (lo // BLOCK_N) * BLOCK_N
    end = hi
    f0 = tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, start)
    f1 = tl.minimum((full_hi // BLOCK_N) * BLOCK_N, end)
    if f1 <= f0:
        f0 = end
        f1 = end
    s_lo = start + split * split_len
    s_hi = s_lo + split_len
    start = tl.minimum(tl.maximum(start, s_lo), s_hi)
    f0 = tl.minimum(tl.maximum(f0, start), s_hi)
    f1 = tl.minimum(tl.maximum(f1, f0), s_hi)
    end = tl.minimum(tl.maximum(end, f1), s_hi)

    q_base = Q + _i64(b) * stride_qb + _i64(q_start) * stride_qm
    q_ptrs = q_base + i[:, None] * stride_qm + head[:, None] * stride_qh + offs_d[None, :]
    q = _load_tile(q_ptrs, None, d_mask[None, :], False, EVEN_D)
    q2 = q
    if BLOCK_D2 > 0:
        q2_ptrs = q_base + i[:, None] * stride_qm + head[:, None] * stride_qh + offs_d2[None, :]
        q2 = _load_tile(q2_ptrs, None, d_mask2[None, :], False, EVEN_D)

    if TAIL_VEC > 0:
        # The tail's K/V loads in vectors of TAIL_VEC columns (kernels/aot.py's TAIL_VEC): with 2,
        # the 256 threads of a 32 x 32 V tail tile load two key rows each, which the in-thread
        # transpose needs, where with Triton's 4 (64 bits) each loads one.
        offs_d2 = tl.max_contiguous(offs_d2, TAIL_VEC)
    k_base = K + hk * stride_kh
    v_base = V + hk * stride_vh
    if not PAGED:
        k_base += _i64(b) * stride_kb + _i64(k_start) * stride_kn
        v_base += _i64(b) * stride_vb + _i64(k_start) * stride_vn
    table_row = BlockTable + b * stride_bt

    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc2 = acc
    if BLOCK_D2 > 0:
        acc2 = tl.zeros([BLOCK_M, BLOCK_D2], tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    qk_scale = sm_scale * LOG2E

    # The key tiles in three software-pipelined loops, [start, f0) masked, [f0, f1) unmasked,
    # [f1, end) masked; or (ONE_LOOP) in one loop that masks only the tiles outside [f0, f1): a
    # test per tile, but one pipeline prologue and drain instead of three, the better trade where
    # a program has few tiles (kernels/aot.py says where it is compiled in). The last loop gets
    # no mm_prefix range: with one, every tile is in the first (the ranges' block above).
    if KEY_HALVES:
        # The masked tiles on BLOCK_N / 2 keys, both masked loops first (no value then lives
        # across the unmasked loop for a loop after it), then the unmasked tiles, in halves or
        # (split head dim) whole (_attend_halves). The softmax update is order-free.
        # kernels/aot.py's KEY_HALVES.
        tl.static_assert(not PAGED and not EXTRAS and FOLD_SCALE and not ONE_LOOP)
        # Masked tiles of BLOCK_N / 2 keys, but not below tl.dot's 16: a 16-key tile (a split head
        # dim only, whose unmasked tiles load whole) keeps 16 for both.
        tl.static_assert(BLOCK_N >= 32 or BLOCK_D2 > 0)
        MASKED_N: tl.constexpr = BLOCK_N // 2 if BLOCK_N >= 32 else BLOCK_N
        acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, start, f0,
                                k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                row_lo, row_hi, pre_lo, pre_hi,
                                MASKED_N, BLOCK_D2, PAGED, EXTRAS, True, EVEN_D, False, FOLD_SCALE, False, f0, f1)
        acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, f1, end,
                                k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                row_lo, row_hi, None, None,
                                MASKED_N, BLOCK_D2, PAGED, EXTRAS, True, EVEN_D, False, FOLD_SCALE, False, f0, f1)
        acc, acc2, m_i, l_i = _attend_halves(acc, acc2, m_i, l_i, q, q2, k_base, v_base, offs_d, d_mask, offs_d2, d_mask2,
                                             f0, f1, stride_kn, stride_vn, qk_scale, BLOCK_N, BLOCK_D2, EVEN_D)
    else:
        first_end = end if ONE_LOOP else f0
        acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, start, first_end,
                                k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                row_lo, row_hi, pre_lo, pre_hi,
                                BLOCK_N, BLOCK_D2, PAGED, EXTRAS, True, EVEN_D, False, FOLD_SCALE, ONE_LOOP, f0, f1)
        if not ONE_LOOP:
            # The unmasked tiles. With PAGE_TILES, pages holding whole tiles get a loop of their own
            # that reads the table once per tile (kernels/aot.py says where it is compiled in).
            if PAGED and PAGE_TILES and page_size % BLOCK_N == 0:
                acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, f0, f1,
                                        k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                        qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                        row_lo, row_hi, pre_lo, pre_hi,
                                        BLOCK_N, BLOCK_D2, PAGED, EXTRAS, False, EVEN_D, True, FOLD_SCALE, False, f0, f1)
            else:
                acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, f0, f1,
                                        k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                        qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                        row_lo, row_hi, pre_lo, pre_hi,
                                        BLOCK_N, BLOCK_D2, PAGED, EXTRAS, False, EVEN_D, False, FOLD_SCALE, False, f0, f1)
            acc, acc2, m_i, l_i = _attend(acc, acc2, m_i, l_i, q, q2, k_base, v_base, table_row, offs_d, d_mask, offs_d2, d_mask2, f1, end,
                                    k_len, page_size, page_magic, num_blocks, Fault, stride_kb, stride_kn, stride_vb, stride_vn,
                                    qk_scale, sm_scale, softcap, has_softcap, has_alibi, slope, pos,
                                    row_lo, row_hi, None, None,
                                    BLOCK_N, BLOCK_D2, PAGED, EXTRAS, True, EVEN_D, False, FOLD_SCALE, False, f0, f1)

    out, lse2 = _normalize(acc, m_i, l_i)
    out_row = _i64(b * rows_per_batch + q_start + i)
    o_mask = None if EVEN_D else d_mask[None, :]
    o2_mask = None if EVEN_D else d_mask2[None, :]
    if num_splits == 1:
        _store_rows(Out, Lse, out, lse2, out_row, b, head, q_start + i, offs_d, o_mask,
                    stride_om, stride_oh, stride_lb, stride_lh)
        if BLOCK_D2 > 0:
            out2, _unused5 = _normalize(acc2, m_i, l_i)
            _store_out(Out, out2, out_row, head, offs_d2, o2_mask, stride_om, stride_oh)
    else:
        acc_row = (split * total_rows + out_row) * num_heads + head
        tl.store(OAcc + acc_row[:, None] * head_dim + offs_d[None, :], out, mask=o_mask)
        if BLOCK_D2 > 0:
            out2, _unused5 = _normalize(acc2, m_i, l_i)
            tl.store(OAcc + acc_row[:, None] * head_dim + offs_d2[None, :], out2, mask=o2_mask)
        tl.store(LAcc + acc_row, lse2)


@triton.jit
def _normalize(acc, m, total):
    """Output rows `acc / total` and base-2 LSEs `m + log2(total)` of softmax sums (empty rows,
    total 0: output 0, LSE -inf). One reciprocal per row and a multiply per element: a division
    per element is a long sequence on every target (AMD: about ten instructions for each of a
    thread's 64 outputs at d = 128), issued once per program, which short prompts feel."""
    empty = total == 0.0
    out = acc * (1.0 / tl.where(empty, 1.0, total))[:, None]
    lse2 = tl.where(empty, float("-inf"), m + tl.math.log2(tl.where(empty, 1.0, total)))
    return out, lse2


@triton.jit
def _store_rows(Out, Lse, out, lse2, out_row, b, head, pos, offs_d, o_mask,
                stride_om, stride_oh, stride_lb, stride_lh):
    """Writes output rows and their natural-log LSEs (at batch b, query position `pos`)."""
    _store_out(Out, out, out_row, head, offs_d, o_mask, stride_om, stride_oh)
    tl.store(Lse + _i64(b) * stride_lb + head * stride_lh + pos, lse2 * LN2)


@triton.jit
def _store_out(Out, out, out_row, head, offs_d, o_mask, stride_om, stride_oh):
    """Writes the output columns `offs_d` of rows `out_row` of heads `head` in Out's dtype."""
    o_ptrs = Out + out_row[:, None] * stride_om + head[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=o_mask)


@triton.jit
def attn_merge(
    Out, Lse, OAcc, LAcc, CuSeqQ, CuSeqK,
    stride_om, stride_oh, stride_lb, stride_lh,
    is_varlen, seqlen_q, seqlen_k, rows_per_batch, total_rows, kv_rows, kv_len_cap,
    num_heads, num_heads_k, head_dim, num_splits,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Combines the split partials (weights 2^(lse_s - max)) of one packed row of one sequence
    and k/v head: attn_fwd's grid with one row per program, so it reads exactly the accumulator
    rows attn_fwd wrote and never the rest (rows outside every sequence, emptied sequences).
    The splits are read BLOCK_S at a time, each block's loads issued together: the merge sits
    between attn_fwd and the result, so its time is its chain of memory round trips, one per
    BLOCK_S splits."""
    row = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // num_heads_k
    hk = pid_bh % num_heads_k
    group = num_heads // num_heads_k
    q_start, q_len, _k_start, _k_len, _fault = _sequence(CuSeqQ, CuSeqK, b, is_varlen, seqlen_q, seqlen_k,
                                                         total_rows, kv_rows, kv_len_cap)
    if row >= q_len * group:
        return
    # A block of one row: the shapes _normalize and _store_rows take.
    offs_r = row + tl.arange(0, 1)
    i = offs_r // group
    head = hk * group + offs_r % group
    out_row = _i64(b * rows_per_batch + q_start + i)
    idx = out_row * num_heads + head
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < head_dim
    split_stride = _i64(total_rows) * num_heads
    m = tl.full([1], float("-inf"), tl.float32)
    total = tl.zeros([1], tl.float32)
    acc = tl.zeros([1, BLOCK_D], tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        at = offs_s[:, None] * split_stride + idx[None, :]
        s_mask = (offs_s < num_splits)[:, None]
        lse_s = tl.load(LAcc + at, mask=s_mask, other=float("-inf"))
        part = tl.load(OAcc + at * head_dim + offs_d[None, :], mask=s_mask & d_mask[None, :], other=0.0)
        m_new = tl.maximum(m, tl.max(lse_s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m - m_safe)
        w = tl.math.exp2(lse_s - m_safe[None, :])
        total = total * alpha + tl.sum(w, 0)
        acc = acc * alpha[:, None] + tl.sum(w * part, 0, keep_dims=True)
        m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    out, lse2 = _normalize(acc, m_safe, total)
    _store_rows(Out, Lse, out, lse2, out_row, b, head, q_start + i, offs_d, d_mask[None, :],
                stride_om, stride_oh, stride_lb, stride_lh)
