"""Ring attention (context parallelism): exact attention over a sequence split across processes.

Each of the ``W`` ranks of a ``torch.distributed`` process group holds a shard of the queries and
of K/V. The K/V shards travel around a ring: at step ``s`` rank ``r`` holds the shard that started
on rank ``(r - s) mod W``, computes the partial attention of its queries against it, and passes it
on to rank ``r + 1`` while it computes (point-to-point sends overlapped with the kernel). After
``W`` steps every query has seen every key, and the partial results were merged exactly with the
same log-sum-exp combine that makes tiling (FlashAttention-2 Algorithm 1) and split-KV decode
exact (:func:`flashlab.softmax.combine_states`, here on ``(o, lse)``): ring attention is
FlashAttention's outer loop with the key blocks living on other GPUs (Liu et al. 2023, "Ring
Attention with Blockwise Transformers for Near-Infinite Context").

Layouts (``layout=``), both exact:

* ``"contiguous"``: rank ``r`` holds the ``r``-th contiguous slice. With ``causal=True`` rank ``r``
  has ``r + 1`` blocks of work (the ones at or below the diagonal) and the last rank does ``W``
  times the first rank's work, so the ring runs at the speed of its busiest rank.
* ``"zigzag"``: the sequence is cut into ``2W`` chunks and rank ``r`` holds chunks ``r`` and
  ``2W - 1 - r`` (one early, one late), so with ``causal=True`` every rank does the same work at
  every step after the first (half a block). ``N_local`` must be even.

The per-block attention is :func:`flashlab.flash_attention` with ``return_lse=True`` (Triton;
compiled on a GPU, Triton's interpreter on CPU tensors). Forward only: no gradient flows through
the ring (the result is detached).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

LAYOUTS = ("contiguous", "zigzag")


# ----------------------------------------------------------------------------- the schedule
@dataclass(frozen=True)
class BlockWork:
    """One (query chunk, key chunk) pair a rank computes at one step."""

    q_chunk: int  # global chunk index of the queries
    k_chunk: int  # global chunk index of the keys
    kind: str  # "full" (every key visible) or "diagonal" (causal mask inside the pair)


def chunks_of(rank: int, world_size: int, layout: str) -> tuple[int, ...]:
    """Global chunk indices rank ``rank`` holds, in the order they sit in its shard."""
    _check_layout(layout)
    _check_rank(rank, world_size)
    return (rank,) if layout == "contiguous" else (rank, 2 * world_size - 1 - rank)


def pair_kind(q_chunk: int, k_chunk: int, causal: bool) -> str | None:
    """"full", "diagonal" or None (skipped: every key of the pair is in the queries' future)."""
    if not causal or q_chunk > k_chunk:
        return "full"
    return "diagonal" if q_chunk == k_chunk else None


def ring_schedule(world_size: int, layout: str = "contiguous", causal: bool = False) -> list[list[tuple]]:
    """``schedule[step][rank] = (source rank of the K/V shard held, [BlockWork, ...])``.

    At step ``s`` rank ``r`` holds the K/V shard that started on rank ``(r - s) mod W``.
    """
    _check_layout(layout)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    schedule = []
    for step in range(world_size):
        row = []
        for rank in range(world_size):
            source = (rank - step) % world_size
            work = [BlockWork(a, b, kind) for a in chunks_of(rank, world_size, layout)
                    for b in chunks_of(source, world_size, layout)
                    if (kind := pair_kind(a, b, causal)) is not None]
            row.append((source, work))
        schedule.append(row)
    return schedule


def work_per_rank(world_size: int, layout: str = "contiguous", causal: bool = False) -> list[float]:
    """Attention work of each rank over the whole ring, in units of one full (N_local x N_local)
    block: a diagonal pair counts half of a full pair of the same chunk sizes."""
    chunk_share = 1.0 if layout == "contiguous" else 0.5  # a chunk's fraction of the shard
    totals = [0.0] * world_size
    for row in ring_schedule(world_size, layout, causal):
        for rank, (_, work) in enumerate(row):
            totals[rank] += sum(chunk_share ** 2 * (0.5 if w.kind == "diagonal" else 1.0) for w in work)
    return totals


# ----------------------------------------------------------------------------- sharding helpers
def shard(x, rank: int, world_size: int, layout: str = "contiguous"):
    """This rank's shard of ``x`` (..., N, d) along the sequence axis (-2): what a rank holds."""
    import torch

    n = x.shape[-2]
    pieces = _chunk_count(world_size, layout)
    if n % pieces:
        raise ValueError(f"sequence length N={n} must be a multiple of {pieces} for world_size={world_size} "
                         f"and layout={layout!r}")
    size = n // pieces
    return torch.cat([x[..., c * size:(c + 1) * size, :] for c in chunks_of(rank, world_size, layout)], dim=-2)


def unshard(shards, layout: str = "contiguous"):
    """The full sequence (..., N, d) from every rank's shard, in rank order (inverse of shard)."""
    import torch

    world_size = len(shards)
    pieces = _chunk_count(world_size, layout)
    per_rank = pieces // world_size
    chunks = [None] * pieces
    for rank, x in enumerate(shards):
        size = x.shape[-2] // per_rank
        for i, c in enumerate(chunks_of(rank, world_size, layout)):
            chunks[c] = x[..., i * size:(i + 1) * size, :]
    return torch.cat(chunks, dim=-2)


# ----------------------------------------------------------------------------- merging partials
def merge_partials(o_a, lse_a, o_b, lse_b):
    """Merge two partial attention results over disjoint key sets: (o, lse).

    o_*: (..., N, d) normalised partial outputs (float32), lse_*: (..., N) their log-sum-exps
    (natural log; -inf where a row saw no key). ``lse = logaddexp(lse_a, lse_b)`` and
    ``o = o_a exp(lse_a - lse) + o_b exp(lse_b - lse)``: combine_states written on (o, lse).
    A row with ``lse = -inf`` on both sides stays (0, -inf), never NaN.
    """
    import torch

    lse = torch.logaddexp(lse_a, lse_b)  # (..., N)
    finite = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - finite)[..., None]  # (..., N, 1); 0 where lse_a = -inf
    w_b = torch.exp(lse_b - finite)[..., None]
    return o_a * w_a + o_b * w_b, lse


# ----------------------------------------------------------------------------- ring attention
def ring_attention(q, k, v, causal: bool = False, scale: float | None = None, group=None,
                   layout: str = "contiguous", return_lse: bool = False):
    """This rank's shard of softmax(q k^T * scale) v over the whole distributed sequence.

    q, k, v: this rank's shards (B, H, N_local, d) (k, v may have Hkv heads, H a multiple of Hkv),
    laid out by ``layout`` (:func:`shard` makes them from a full tensor). ``group``: the
    ``torch.distributed`` process group (default: the world). Every rank must pass the same
    shapes, dtype, ``causal``, ``scale`` and ``layout``. Returns (B, H, N_local, d) in q's dtype:
    this rank's queries attending to every key of the sequence (causal: to keys at or before
    their global position), and with ``return_lse=True`` also lse (B, H, N_local) float32.
    """
    import torch
    import torch.distributed as dist

    _check_layout(layout)
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_attention needs an initialised torch.distributed process group "
                           "(torch.distributed.init_process_group); group=None means the world")
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim != 4:
            raise ValueError(f"{name} must be a 4-d torch tensor (B, H, N_local, d); got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
    if k.shape != v.shape or k.shape[-2] != q.shape[-2]:
        raise ValueError(f"k.shape={tuple(k.shape)} and v.shape={tuple(v.shape)} must be equal, with the same "
                         f"N_local as q.shape={tuple(q.shape)}")
    per_rank = _chunk_count(world_size, layout) // world_size
    if q.shape[-2] % per_rank:
        raise ValueError(f"N_local={q.shape[-2]} must be even for layout='zigzag' (two chunks per rank)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    size = q.shape[-2] // per_rank  # rows per chunk
    mine = chunks_of(rank, world_size, layout)
    send_to, recv_from = _group_rank(group, (rank + 1) % world_size), _group_rank(group, (rank - 1) % world_size)

    kv = torch.stack((k, v)).contiguous()  # (2, B, Hkv, N_local, d): one message per step
    states = [None] * len(mine)  # per query chunk: (o float32, lse)
    for step in range(world_size):
        source = (rank - step) % world_size
        pending = None
        if step < world_size - 1:  # -- pass the shard on while computing on it
            incoming = torch.empty_like(kv)
            ops = [dist.P2POp(dist.isend, kv, send_to, group), dist.P2POp(dist.irecv, incoming, recv_from, group)]
            pending = dist.batch_isend_irecv(ops)
        for i, a in enumerate(mine):  # -- this step's (query chunk, key chunk) pairs
            qa = q[..., i * size:(i + 1) * size, :]
            for j, b in enumerate(chunks_of(source, world_size, layout)):
                kind = pair_kind(a, b, causal)
                if kind is None:
                    continue
                kb, vb = kv[0, ..., j * size:(j + 1) * size, :], kv[1, ..., j * size:(j + 1) * size, :]
                o, lse = _block_attention(qa, kb, vb, kind == "diagonal", scale)
                states[i] = (o, lse) if states[i] is None else merge_partials(*states[i], o, lse)
        if pending is not None:
            for work in pending:
                work.wait()
            kv = incoming
    o = torch.cat([s[0] for s in states], dim=-2).to(q.dtype)  # (B, H, N_local, d)
    lse = torch.cat([s[1] for s in states], dim=-1)  # (B, H, N_local)
    return (o, lse) if return_lse else o


def _block_attention(q, k, v, causal: bool, scale: float):
    """(o float32, lse float32) of one (query chunk, key chunk) pair: flash_attention's forward."""
    import torch

    from flashlab.kernels.attention import flash_attention

    with torch.no_grad():
        o, lse = flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    return o.float(), lse.float()


# ----------------------------------------------------------------------------- CPU processes (gloo)
def run_gloo(world_size: int, target, args: tuple = (), port: int | None = None) -> list:
    """Run ``target(rank, world_size, *args)`` in ``world_size`` CPU processes joined by gloo;
    return each rank's return value, in rank order. ``target`` must be importable (a module-level
    function). Used by the tests and notebook 10; Triton runs in its interpreter there.
    """
    import multiprocessing

    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= 16:
        raise ValueError(f"world_size={world_size!r} must be an int from 1 to 16")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = port or _free_port()
    procs = [ctx.Process(target=_gloo_child, args=(rank, world_size, port, target, args, results))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    out, errors = {}, []
    try:
        for _ in procs:
            rank, ok, value = results.get(timeout=600)
            (out.__setitem__(rank, value) if ok else errors.append(f"rank {rank}: {value}"))
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if errors:
        raise RuntimeError("ring processes failed:\n" + "\n".join(errors))
    return [out[r] for r in range(world_size)]


def _gloo_child(rank, world_size, port, target, args, results):
    os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors: Triton's interpreter, set before triton is imported
    import traceback

    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size)
        try:
            results.put((rank, True, target(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # reported to the parent, which raises
        results.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_against_single_device(rank: int, world_size: int, cases: list, seed: int = 0) -> list[dict]:
    """One rank's part of ring-vs-one-device checks (run with :func:`run_gloo`).

    cases: [(shape (B, H, N, d), causal, layout), ...]. For each, every rank draws the same full
    float32 q, k, v from ``seed``, takes its shard, runs :func:`ring_attention`, and compares its
    output shard with the same shard of float64 attention over the full sequence.
    Returns [{"max_error": ..., "rows": N_local}, ...], one per case.
    """
    import torch

    from flashlab.kernels.attention import attention_reference

    out = []
    for i, (shape, causal, layout) in enumerate(cases):
        g = torch.Generator().manual_seed(seed + i)
        q, k, v = (torch.randn(shape, generator=g) for _ in range(3))  # (B, H, N, d) float32
        o = ring_attention(*(shard(x, rank, world_size, layout) for x in (q, k, v)), causal=causal, layout=layout)
        ref = shard(attention_reference(q.double(), k.double(), v.double(), causal=causal), rank, world_size, layout)
        out.append(dict(max_error=float((o.double() - ref).abs().max()), rows=int(o.shape[-2])))
    return out


def demo(world_size: int = 2, n: int = 256, causal: bool = True, layout: str = "zigzag", heads: int = 2,
         d: int = 16, seed: int = 0) -> list[dict]:
    """Run ring attention in ``world_size`` CPU processes (gloo) on a random (1, heads, n, d) float32
    problem; return each rank's {"max_error", "rows"} against single-device float64 attention."""
    return [r[0] for r in run_gloo(world_size, check_against_single_device, ([((1, heads, n, d), causal, layout)], seed))]


def work_table(world_size: int = 4, causal: bool = True, layouts=LAYOUTS) -> str:
    """:func:`work_per_rank` for each layout, as text: one line per layout with each rank's attention work
    over the whole ring (units of one full N_local x N_local block)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be a positive int")
    unknown = [layout for layout in layouts if layout not in LAYOUTS]
    if unknown or not layouts:
        raise ValueError(f"layouts={tuple(layouts)!r} must name layouts among {LAYOUTS}")
    return "\n".join(f"{layout:>10}: work per rank {work_per_rank(world_size, layout, causal=causal)}"
                     for layout in layouts)


def demo_table(world_size: int = 2, n: int = 128, causal: bool = True, layout: str = "zigzag") -> str:
    """:func:`demo` as text: per rank, the query rows it holds and its max abs error against
    single-device float64 attention."""
    _check_layout(layout)
    return "\n".join(f"rank {rank}: {result['rows']} query rows, max error against one device {result['max_error']:.1e}"
                     for rank, result in enumerate(demo(world_size=world_size, n=n, causal=causal, layout=layout)))


# ----------------------------------------------------------------------------- checks
def _chunk_count(world_size: int, layout: str) -> int:
    _check_layout(layout)
    return world_size if layout == "contiguous" else 2 * world_size


def _check_layout(layout) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not supported; expected one of {LAYOUTS}")


def _check_rank(rank, world_size) -> None:
    if not (isinstance(rank, int) and isinstance(world_size, int) and 0 <= rank < world_size):
        raise ValueError(f"rank={rank!r} must be an int in [0, world_size={world_size!r})")


def _group_rank(group, rank: int) -> int:
    """The global rank of ``rank`` within ``group`` (P2POp takes global ranks)."""
    import torch.distributed as dist

    return rank if group is None else dist.get_global_rank(group, rank)
