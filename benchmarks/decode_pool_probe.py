"""A persistent decode kernel whose programs share the ends of the key ranges: does balancing the step's end
beat SDPA at the one-wave rows?

At the rows where flash_decode runs one wide program per (sequence, kv head) on 128 of the H200's 132 SMs,
the programs do not finish together: at 32k keys the last ends 10.5 us after the median (2.2 % of the
kernel), and which programs are slow follows the SM they land on (``decode_tail_probe.py``). Tail chunks
launched as programs of their own paid ~2 us each for a launch, a query load and a pipeline ramp, and
gave the balance back (benchmarks/NOTES.md, decode, session 21).

This probe's kernel keeps its programs running instead. Each key range (a *lane*: one sequence's kv head)
is cut into an *own* part, the first ``blocks - tail`` key blocks, read by one program per lane (or
``own_splits`` programs per lane, as the split rule's splits), and a *tail* of ``tail`` blocks in pieces of
``piece`` blocks. The pieces of all lanes are a pool. A program that has finished its own part (and the
``extra`` programs that have none, on the SMs the lanes leave idle) claims pieces with a fetch-and-add on
one counter, a piece ahead, until the pool is empty; the programs on fast SMs take more of them. Every
piece writes a partial state (o, lse) in a slot of its lane; the program whose piece completes a lane's
count of blocks merges the lane's slots (``combine_states``) and writes o and lse. A lane with no pieces
and one own program is written directly, as the unsplit kernel does. The kernel leaves its lane counts
and slots as it found them; the pool's counter runs on from call to call (each call moves it by its
pieces plus its programs), so no program waits at the end to reset it.

The first form (commit 81a70ea, ``results/decode_pool_probe_call1.json``) claimed shrinking pieces with a
compare-and-swap loop: the programs that finished their own parts together then waited one round trip per
rival's claim, and every pooled row ran 1.26-3.5x the rule's time.

Scope: a probe, not a library path: a contiguous cache with every sequence at full length, no causal mask,
one row block (group x Nq <= 64). ``--check`` compares it with attention computed in float64 on
fresh random inputs (run it under ``TRITON_INTERPRET=1`` on a CPU, or on a GPU), twice in a row on the
same plan (the scratch must come back clean).

Run on a GPU (bf16, d = 128, Nq = 1)::

    python benchmarks/decode_pool_probe.py --rounds 5 --out results/decode_pool_probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from flashlab.kernels import _mode  # noqa: E402

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from flashlab.kernels.flash_decode import block_m_for, combine_step_for, config_for  # noqa: E402
from flashlab.kernels.flash_fwd import _dot, dot_precision, head_dim_padded  # noqa: E402


@triton.jit
def _blocks(q, k_base, v_base, lo, hi, rot, span, stride_kn, stride_kk, stride_vn, stride_vk, qk_scale,
            HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            STAGGER: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """The online softmax over keys [lo, hi) of one lane, from key lo + rot round to it: (acc, m, l)."""
    offs_d = tl.arange(0, HEAD_DIM)
    d_ok = offs_d[None, :] < D_HEAD
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for step_n in range(lo, hi, BLOCK_N):
        start_n = step_n + rot
        if STAGGER > 1:
            start_n = tl.where(start_n >= lo + span, start_n - span, start_n)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < hi
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk, mask=key_ok[:, None] & d_ok,
                    other=0.0)  # (BLOCK_N, HEAD_DIM)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk, mask=key_ok[:, None] & d_ok,
                    other=0.0)  # (BLOCK_N, HEAD_DIM)
        qk = _dot(q, tl.trans(k), DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
        qk = tl.where(key_ok[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)
        m_i = m_ij
    return acc, m_i, l_i


@triton.jit
def _finish(acc, m_i, l_i, lane, slot, nblocks, row, row_ok, o_ptrs, OPart, LSEPart, LaneCount, LSE, NB, SLOTS,
            HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, COMBINE_STEP: tl.constexpr):
    """Write a piece's partial state in its slot and count its blocks; the piece that completes its lane
    merges the lane's slots into o and lse and leaves the slots (-inf) and the count (0) clean."""
    offs_d = tl.arange(0, HEAD_DIM)
    d_ok = offs_d[None, :] < D_HEAD
    seen = l_i > 0.0
    o = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(LSEPart + row * SLOTS + slot, lse, mask=row_ok)
    tl.store(OPart + (row * SLOTS + slot)[:, None] * D_HEAD + offs_d[None, :], o, mask=row_ok[:, None] & d_ok)
    tl.debug_barrier()  # every thread's stores before the count's release
    done = tl.atomic_add(LaneCount + lane, nblocks, sem="acq_rel", scope="gpu")
    if done + nblocks == NB:
        m_c = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_c = tl.zeros([BLOCK_M], tl.float32)
        acc_c = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        offs_t = tl.arange(0, COMBINE_STEP)
        for s0 in range(0, SLOTS, COMBINE_STEP):
            offs_s = s0 + offs_t
            ok = row_ok[:, None] & (offs_s[None, :] < SLOTS)  # (BLOCK_M, COMBINE_STEP)
            part = row[:, None] * SLOTS + offs_s[None, :]
            lse_s = tl.load(LSEPart + part, mask=ok, other=float("-inf"), cache_modifier=".cg")
            used = ok & (lse_s > float("-inf"))  # slots written in this call; the others stay -inf
            o_s = tl.load(OPart + part[:, :, None] * D_HEAD + offs_d[None, None, :],
                          mask=used[:, :, None] & (offs_d[None, None, :] < D_HEAD), other=0.0, cache_modifier=".cg")
            m_new = tl.maximum(m_c, tl.max(lse_s, 1))
            m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_c - m_new_safe)
            w = tl.exp(lse_s - m_new_safe[:, None])
            l_c = l_c * alpha + tl.sum(w, 1)
            acc_c = acc_c * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 1)
            m_c = m_new
            tl.store(LSEPart + part, tl.full([BLOCK_M, COMBINE_STEP], float("-inf"), tl.float32), mask=used)
        l_c = tl.where(row_ok, l_c, 1.0)
        tl.store(LSE + row, m_c + tl.log(l_c), mask=row_ok)
        tl.store(o_ptrs, (acc_c / l_c[:, None]).to(o_ptrs.dtype.element_ty), mask=row_ok[:, None] & d_ok)
        tl.atomic_xchg(LaneCount + lane, 0)


@triton.jit(do_not_specialize=["BASE", "H_KV", "GROUP", "N_Q", "N_KEYS", "LANES", "OWN_SPLITS", "TAIL", "PIECE"])
def _pool_decode(
    Q, K, V, Out, LSE, OPart, LSEPart, LaneCount, Pool, BASE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H_KV, GROUP, N_Q, N_KEYS, LANES, OWN_SPLITS, TAIL, PIECE,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STAGGER: tl.constexpr, COMBINE_STEP: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    NB = tl.cdiv(N_KEYS, BLOCK_N)  # key blocks of a lane
    OWN = NB - TAIL  # the blocks its own programs read
    SLOTS = OWN_SPLITS + TAIL // PIECE  # partial states of a lane: one per own split, one per piece
    qk_scale = sm_scale * 1.4426950408889634
    offs_r = tl.arange(0, BLOCK_M)
    row_ok = offs_r < GROUP * N_Q
    off_i = offs_r % N_Q
    offs_d = tl.arange(0, HEAD_DIM)
    # -- the own part: lane pid % LANES, split pid // LANES of its first OWN blocks
    if pid < LANES * OWN_SPLITS:
        lane = pid % LANES
        off_z = (lane // H_KV).to(tl.int64)
        off_hkv = (lane % H_KV).to(tl.int64)
        off_h = off_hkv * GROUP + offs_r // N_Q
        q = tl.load(Q + off_z * stride_qz + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm
                    + offs_d[None, :] * stride_qk, mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)
        per = tl.cdiv(OWN, OWN_SPLITS)
        b0 = (pid // LANES) * per
        b1 = tl.minimum(b0 + per, OWN)
        lo = b0 * BLOCK_N
        hi = tl.minimum(b1 * BLOCK_N, N_KEYS)
        span = (b1 - b0) * BLOCK_N
        if STAGGER > 1:
            rot = (lane % STAGGER) * ((b1 - b0) // STAGGER) * BLOCK_N
        else:
            rot = 0
        acc, m_i, l_i = _blocks(q, K + off_z * stride_kz + off_hkv * stride_kh, V + off_z * stride_vz + off_hkv * stride_vh,
                                lo, hi, rot, span, stride_kn, stride_kk, stride_vn, stride_vk, qk_scale,
                                HEAD_DIM, D_HEAD, BLOCK_M, BLOCK_N, STAGGER, DOT_F32, DOT_PRECISION)
        row = (off_z * H_KV * GROUP + off_h) * N_Q + off_i
        o_ptrs = Out + off_z * stride_oz + off_h[:, None] * stride_oh + off_i[:, None] * stride_om + offs_d[None, :] * stride_ok
        if TAIL + OWN_SPLITS > 1:
            _finish(acc, m_i, l_i, lane, pid // LANES, b1 - b0, row, row_ok, o_ptrs, OPart, LSEPart, LaneCount, LSE, NB,
                    SLOTS, HEAD_DIM, D_HEAD, BLOCK_M, COMBINE_STEP)
        else:  # the lane is this program's alone: o and lse directly, as the unsplit kernel
            seen = l_i > 0.0
            tl.store(LSE + row, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, mask=row_ok)
            tl.store(o_ptrs, (acc / tl.where(seen, l_i, 1.0)[:, None]).to(Out.dtype.element_ty),
                     mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD))
    # -- the pool: every lane's last TAIL blocks as pieces of PIECE blocks, piece c = level c // LANES of lane
    #    c % LANES. A claim is one fetch-and-add (no retry: a compare-and-swap loop made the programs that
    #    finished together wait for each other, one round trip per claim), made a piece ahead so that its
    #    latency hides behind the piece in hand. The counter is never reset: each call starts at BASE, and
    #    every program makes exactly one claim past the pool, so a call moves it by pieces + programs
    pieces = LANES * (TAIL // PIECE)
    nxt = tl.atomic_add(Pool, 1, sem="relaxed", scope="gpu") - BASE
    while nxt < pieces:
        cur = nxt
        nxt = tl.atomic_add(Pool, 1, sem="relaxed", scope="gpu") - BASE
        lane = (cur % LANES).to(tl.int32)
        level = (cur // LANES).to(tl.int32)
        off_z = (lane // H_KV).to(tl.int64)
        off_hkv = (lane % H_KV).to(tl.int64)
        off_h = off_hkv * GROUP + offs_r // N_Q
        q = tl.load(Q + off_z * stride_qz + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm
                    + offs_d[None, :] * stride_qk, mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)
        lo = (OWN + level * PIECE) * BLOCK_N
        hi = tl.minimum((OWN + level * PIECE + PIECE) * BLOCK_N, N_KEYS)
        acc, m_i, l_i = _blocks(q, K + off_z * stride_kz + off_hkv * stride_kh, V + off_z * stride_vz + off_hkv * stride_vh,
                                lo, hi, 0, 0, stride_kn, stride_kk, stride_vn, stride_vk, qk_scale,
                                HEAD_DIM, D_HEAD, BLOCK_M, BLOCK_N, 1, DOT_F32, DOT_PRECISION)
        row = (off_z * H_KV * GROUP + off_h) * N_Q + off_i
        o_ptrs = Out + off_z * stride_oz + off_h[:, None] * stride_oh + off_i[:, None] * stride_om + offs_d[None, :] * stride_ok
        _finish(acc, m_i, l_i, lane, OWN_SPLITS + level, PIECE, row, row_ok, o_ptrs, OPart, LSEPart, LaneCount, LSE,
                NB, SLOTS, HEAD_DIM, D_HEAD, BLOCK_M, COMBINE_STEP)


class PoolPlan:
    """The pool kernel's launch for one shape: q (B, H, Nq, d), k, v (B, Hkv, N, d), every key valid.
    ``tail``: blocks per lane in the pool (0: none; rounded down to whole pieces); ``piece``: blocks per
    claim; ``own_splits``: programs per lane's own part; ``extra``: programs with no own part (None: the SMs
    the own programs leave idle)."""

    def __init__(self, q, k, v, tail: int, piece: int = 1, own_splits: int = 1, extra: int | None = None,
                 stagger: int | None = None, config=None):
        B, H, Nq, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        group = H // Hkv
        if group * Nq > 64:
            raise ValueError(f"group x Nq = {group * Nq}: the probe takes one row block (at most 64 rows)")
        if piece < 1:
            raise ValueError(f"piece = {piece}: at least one block per claim")
        self.config = config or config_for(head_dim_padded(d), q.dtype, wide=True)
        block_n = self.config.block_n
        blocks = triton.cdiv(n, block_n)
        self.tail = max(0, min(tail, blocks - own_splits)) // piece * piece
        lanes = B * Hkv
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        if extra is None:
            extra = max(0, sms - lanes * own_splits) if self.tail else 0
        self.programs = lanes * own_splits + extra
        self.pieces = lanes * (self.tail // piece)
        slots = own_splits + self.tail // piece
        f32 = torch.float32
        self.o_part = torch.empty(B * H * Nq, slots, d, dtype=f32, device=q.device)
        self.lse_part = torch.full((B * H * Nq, slots), float("-inf"), dtype=f32, device=q.device)
        self.lane_count = torch.zeros(lanes, dtype=torch.int32, device=q.device)
        self.pool = torch.zeros(1, dtype=torch.int64, device=q.device)
        self.calls = 0
        block_m = block_m_for(group * Nq)
        self.consts = dict(H_KV=Hkv, GROUP=group, N_Q=Nq, N_KEYS=n, LANES=lanes, OWN_SPLITS=own_splits, TAIL=self.tail,
                           PIECE=piece, HEAD_DIM=head_dim_padded(d), D_HEAD=d, BLOCK_M=block_m, BLOCK_N=block_n,
                           STAGGER=self.config.stagger if stagger is None else stagger,
                           COMBINE_STEP=max(2, combine_step_for(self.config, block_m, head_dim_padded(d))),
                           DOT_F32=_mode.dot_upcast(q.dtype), DOT_PRECISION=dot_precision(q.dtype))
        self.shape = (B, H, Nq, d)

    def __call__(self, q, k, v, scale: float):
        o = torch.empty(self.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(self.shape[:3], dtype=torch.float32, device=q.device)
        base = self.calls * (self.pieces + self.programs)  # where this call's claims start on the pool's counter
        self.calls += 1
        _pool_decode[(self.programs,)](q, k, v, o, lse, self.o_part, self.lse_part, self.lane_count, self.pool, base,
                                       scale, *q.stride(), *k.stride(), *v.stride(), *o.stride(), **self.consts,
                                       num_warps=self.config.num_warps, num_stages=self.config.num_stages)
        return o, lse


def check(device: str) -> list[str]:
    """The pool kernel against attention in float64 (no mask: the probe's scope) on fresh random inputs (seeded), twice per plan:
    MHA and GQA, Nq 1 and 3, lengths not a multiple of the block, tails of 0 to every block but one,
    one and three own splits, with and without extra programs. Returns the failures (empty: all passed)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    d = 128 if device == "cuda" else 16
    scale_n = 64 if device == "cuda" else 1
    failures = []
    cases = [  # B, H, Hkv, Nq, N, tail, piece, own_splits, extra, stagger
        (2, 4, 4, 1, 40 * scale_n, 1, 1, 1, 3, 2),
        (2, 4, 2, 3, 37 * scale_n + 5, 2, 1, 1, 0, 0),
        (1, 8, 2, 1, 70 * scale_n, 4, 2, 3, 2, 2),
        (3, 4, 1, 1, 33 * scale_n, 0, 1, 2, 0, 0),
        (2, 2, 2, 1, 50 * scale_n + 9, 10, 1, 1, 5, 2),  # a tail of every block but one, a ragged last block
        (3, 3, 3, 1, 96 * scale_n, 5, 2, 1, 1, 0),  # a tail of 5 in pieces of 2: 4 blocks pooled
        (2, 2, 1, 1, 24 * scale_n, 0, 1, 1, 0, 2),  # one program per lane, o written directly
    ]
    for n_case, (B, H, Hkv, Nq, n, tail, piece, own, extra, stagger) in enumerate(cases):
        g = torch.Generator().manual_seed(7100 + n_case)
        q = torch.randn(B, H, Nq, d, generator=g).to(device, dtype)
        k = torch.randn(B, Hkv, n, d, generator=g).to(device, dtype)
        v = torch.randn(B, Hkv, n, d, generator=g).to(device, dtype)
        kk, vv = (t.double().cpu().repeat_interleave(H // Hkv, 1) for t in (k, v))  # (B, H, N, d)
        s = q.double().cpu() @ kk.transpose(-1, -2) * d ** -0.5  # (B, H, Nq, N), every key seen (no mask)
        ref_lse = torch.logsumexp(s, -1)
        ref_o = torch.softmax(s, -1) @ vv
        plan = PoolPlan(q, k, v, tail, piece, own, extra, stagger)
        for call in range(2):
            o, lse = plan(q, k, v, d ** -0.5)
            err_o = (o.double().cpu() - ref_o).abs().max().item()
            err_lse = (lse.double().cpu() - ref_lse).abs().max().item()
            what = (f"case {n_case} (B={B} H={H} Hkv={Hkv} Nq={Nq} N={n} tail={plan.tail} piece={piece} own={own} extra={extra} "
                    f"stagger={stagger}) call {call}")
            if not (err_o < (2e-2 if dtype == torch.bfloat16 else 1e-5) and err_lse < 1e-3):
                failures.append(f"{what}: o off by {err_o:.2e}, lse by {err_lse:.2e}")
            moved = plan.pool.item() - plan.calls * (plan.pieces + plan.programs)
            if moved or plan.lane_count.abs().sum().item() or torch.isfinite(plan.lse_part).any().item():
                failures.append(f"{what}: scratch not left as the next call needs it (the pool's counter "
                                f"{moved:+d} off where it should stand)")
    return failures


ROWS = [  # B, H, Hkv, Nk, own_splits (the rule's splits), (tail, piece) pairs to try (blocks per lane, per claim)
    (4, 32, 32, 32768, 1, ((4, 2), (8, 2), (8, 4), (16, 4))),
    (16, 32, 8, 32768, 1, ((4, 2), (8, 2), (8, 4), (16, 4))),
    (4, 32, 32, 131072, 1, ((8, 4), (16, 4), (16, 8), (32, 8))),
    (16, 32, 8, 131072, 1, ((8, 4), (16, 4), (16, 8), (32, 8))),
    (1, 32, 32, 131072, 4, ((8, 4), (16, 4), (16, 8))),
    (4, 32, 32, 4096, 1, ((2, 1), (4, 2))),
]


def time_rows(rounds: int) -> list:
    import bench_decode

    import flashlab

    out = []
    for B, H, Hkv, nk, own, tails in ROWS:
        g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
        q = torch.randn(B, H, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        scale = 128 ** -0.5
        variants = bench_decode.make_variants(H, Hkv, scale)
        fns = {"rule": lambda: flashlab.flash_decode(q, k, v, scale=scale),
               "sdpa_default": lambda f=variants["sdpa_default"]: f(q, k, v)}
        plans = {"pool_t0": PoolPlan(q, k, v, 0, 1, own, 0)}
        for t, piece in tails:
            plans[f"pool_t{t}_p{piece}"] = PoolPlan(q, k, v, t, piece, own, None)
        t, piece = tails[1]
        plans[f"pool_t{t}_p{piece}_noextra"] = PoolPlan(q, k, v, t, piece, own, 0)
        ref = fns["sdpa_default"]().float()
        errs = {}
        for name, plan in plans.items():
            fns[name] = lambda p=plan: p(q, k, v, scale)
            errs[name] = _common.rel_err(fns[name]()[0], ref)
        errs["rule"] = _common.rel_err(fns["rule"](), ref)
        order = list(fns)
        runs = {name: [] for name in fns}
        with torch.no_grad():
            for r in range(rounds):
                turn = order[r % len(order):] + order[:r % len(order)]  # rotated
                for name in turn:
                    runs[name].append(bench_decode.bench_us(fns[name]))
        med = {name: bench_decode._median(ts) for name, ts in runs.items()}
        entry = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "own_splits": own, "us": runs, "median_us": med,
                 "over_sdpa": {name: med[name] / med["sdpa_default"] for name in med},
                 "over_rule": {name: med[name] / med["rule"] for name in med},
                 "programs": {name: p.programs for name, p in plans.items()}, "pieces": {name: p.pieces for name, p in plans.items()}, "rel_err_vs_sdpa": errs}
        out.append(entry)
        best = min((n for n in med if n.startswith("pool_t") and n != "pool_t0"), key=med.get)
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6}: rule/SDPA {entry['over_sdpa']['rule']:.4f}, pool_t0/rule "
              f"{entry['over_rule']['pool_t0']:.4f}, best {best}/rule {entry['over_rule'][best]:.4f} "
              f"(/SDPA {entry['over_sdpa'][best]:.4f}); rel errors {min(errs.values()):.1e}-{max(errs.values()):.1e}",
              flush=True)
        plans.clear()
        fns.clear()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the reference and stop (CPU or GPU)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "decode_pool_probe.json")
    args = parser.parse_args(argv)
    if args.check:
        device = "cuda" if torch.cuda.is_available() and not _mode.is_interpreter() else "cpu"
        failures = check(device)
        print("\n".join(failures) or f"pool kernel: every case matches the reference ({device})")
        return 1 if failures else 0
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    failures = check("cuda")
    if failures:
        print("\n".join(failures))
        return 1
    rows = time_rows(args.rounds)
    _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds,
                                  "time": "median of triton.testing.do_bench (warmup 25 ms, rep 100 ms, L2 cleared "
                                          "before every run) per round; variants in rotated order", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
