"""The read roofline of a decode step: how fast ONE kernel launch can read K and V, and nothing else.

A decode step must read the KV cache once; its floor is bytes / bandwidth. The device-copy
bandwidth (read + written) is a ceiling for large copies but not for a single launch of 16-500 MB
timed on its own with the L2 cleared, where the launch, the first loads' latency and the last
programs' tail are a visible share of the time. So the benchmark measures the ceiling directly:
``_read_sum`` is a Triton kernel in which each program streams one contiguous slice of K and the
same slice of V (both seen as flat arrays) and reduces it to one fp32 number: it reads exactly
the bytes a decode step reads, does next to no arithmetic and writes one float per program. Its
time, best over grid sizes and tile sizes (``CONFIGS``) and measured as the decode rows are
(``triton.testing.do_bench`` median, L2 cleared before every run), is the read roofline at that
byte count; a decode kernel's time over it says how much of a step is not reading.

Call 9 (``decode_probe.py``) added ways to read harder: an L2 hint on the loads (``HINT``: 1
evict_first, 2 .cg), a TMA read (``_read_sum_tma``: host-side tensor descriptors; compiled here
for sm90 with Triton 3.7 it keeps one tile in shared memory, one copy in flight per program)
and an empty launch (``_empty``) for the fixed cost. At 134 MB evict_first was fastest (39.8 us vs 42.9 plain;
benchmarks/NOTES.md, decode, call 9); ``CONFIGS`` (no hint) stays the ceiling of the decode rows.

Imported by ``bench_decode.py`` on a GPU machine only (Triton at import).
"""
from __future__ import annotations

import triton
import triton.language as tl

# (BLOCK elements per tensor per step, warps, programs per SM): 132 SMs on an H200
CONFIGS = tuple((block, warps, per_sm) for block, warps in ((2048, 4), (4096, 8), (8192, 8))
                for per_sm in (1, 2, 4, 8, 16))
CONFIGS_LARGE = tuple(c for c in CONFIGS if c[0] >= 4096 and c[2] in (2, 4, 8))  # over 1 GiB: fewer, to save time


@triton.jit
def _read_sum(K, V, Out, N, PER_PROGRAM, BLOCK: tl.constexpr, EVEN: tl.constexpr, HINT: tl.constexpr = 0):
    # -- this program's slice [start, min(start + PER_PROGRAM, N)) of K and of V (flat)
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * PER_PROGRAM
    end = tl.minimum(start + PER_PROGRAM, N)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    # -- stream it: two loads per step, summed so that no load can be dropped. HINT 1: the lines
    #    are marked first to leave L2 (evict_first); 2: cached in L2 only (.cg)
    policy: tl.constexpr = "evict_first" if HINT == 1 else ""
    cache: tl.constexpr = ".cg" if HINT == 2 else ""
    for off in range(start, end, BLOCK):
        idx = off + offs
        if EVEN:  # N a multiple of BLOCK: every step is whole (PER_PROGRAM is a multiple of BLOCK)
            acc += (tl.load(K + idx, eviction_policy=policy, cache_modifier=cache).to(tl.float32)
                    + tl.load(V + idx, eviction_policy=policy, cache_modifier=cache).to(tl.float32))
        else:
            ok = idx < N  # only the last slice's last step is partial
            acc += (tl.load(K + idx, mask=ok, other=0.0, eviction_policy=policy, cache_modifier=cache).to(tl.float32)
                    + tl.load(V + idx, mask=ok, other=0.0, eviction_policy=policy, cache_modifier=cache).to(tl.float32))
    tl.store(Out + pid, tl.sum(acc, 0))


@triton.jit
def _read_sum_tma(k_desc, v_desc, Out, ROWS, PER_PROGRAM, BLOCK_R: tl.constexpr, WIDTH: tl.constexpr):
    # -- the same read through the tensor-memory accelerator: K and V seen as (ROWS, WIDTH) tiles of
    #    BLOCK_R rows, copied to shared memory asynchronously (num_stages tiles in flight per tensor)
    pid = tl.program_id(0)
    start = pid * PER_PROGRAM
    end = tl.minimum(start + PER_PROGRAM, ROWS)
    acc = tl.zeros([WIDTH], tl.float32)
    for row in range(start, end, BLOCK_R):
        acc += tl.sum(k_desc.load([row, 0]).to(tl.float32) + v_desc.load([row, 0]).to(tl.float32), 0)
    tl.store(Out + pid, tl.sum(acc, 0))


@triton.jit
def _empty(Out, FLAG):
    # -- a launch that does nothing (FLAG is 0): the fixed cost of one launch, timed as the reads are
    if FLAG != 0:
        tl.store(Out + tl.program_id(0), 1.0)


def launch(k, v, out, block: int, warps: int, programs: int, hint: int = 0, stages: int | None = None):
    """One launch reading every element of k and v (same numel, contiguous) with ``programs``
    programs; ``out`` holds at least ``programs`` fp32 (one partial sum each). ``hint``: 0 none,
    1 evict_first, 2 .cg; ``stages``: num_stages (None: Triton's default)."""
    n = k.numel()
    per_program = triton.cdiv(triton.cdiv(n, programs), block) * block  # whole BLOCKs per program
    grid = triton.cdiv(n, per_program)
    extra = {} if stages is None else {"num_stages": stages}
    _read_sum[(grid,)](k, v, out, n, per_program, BLOCK=block, EVEN=n % block == 0, HINT=hint, num_warps=warps,
                       **extra)
    return grid


def tma_launcher(k, v, out, block_r: int, warps: int, programs: int, stages: int, width: int = 128):
    """A function launching ``_read_sum_tma`` over k and v (contiguous, numel a multiple of
    ``width``) seen as (rows, width); the host-side descriptors are made once, here."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    rows = k.numel() // width
    k2, v2 = k.view(rows, width), v.view(rows, width)  # (rows, width)
    k_desc = TensorDescriptor.from_tensor(k2, [block_r, width])
    v_desc = TensorDescriptor.from_tensor(v2, [block_r, width])
    per_program = triton.cdiv(triton.cdiv(rows, programs), block_r) * block_r
    grid = triton.cdiv(rows, per_program)

    def fn():
        _read_sum_tma[(grid,)](k_desc, v_desc, out, rows, per_program, BLOCK_R=block_r, WIDTH=width,
                               num_warps=warps, num_stages=stages)
        return grid
    return fn


def check(k, v, out) -> float:
    """Relative error of the kernel's total against torch's sum in fp64 (the kernel must read it all)."""
    grid = launch(k, v, out, 4096, 8, 264)
    got = out[:grid].double().sum().item()
    want = sum(part.double().sum().item() for t in (k, v) for part in t.reshape(-1).split(1 << 28))  # 2 GB at a time
    return abs(got - want) / max(1.0, abs(want))


def ceiling(k, v, sms: int, bench_us, configs=CONFIGS) -> dict:
    """Time every config of ``configs`` on k and v with ``bench_us(fn) -> us``; the best and all.
    Returns {"bytes", "us", "tb_s", "config": "BLOCK/warps/programs", "all": {config: us}, "rel_err"}."""
    import torch

    out = torch.empty(16 * sms, dtype=torch.float32, device=k.device)
    err = check(k, v, out)
    times = {}
    for block, warps, per_sm in configs:
        programs = per_sm * sms
        times[f"{block}/{warps}/{programs}"] = bench_us(lambda: launch(k, v, out, block, warps, programs))
    best = min(times, key=times.get)
    nbytes = 2 * k.numel() * k.element_size()
    return {"bytes": nbytes, "us": times[best], "tb_s": nbytes / times[best] / 1e6, "config": best,
            "all": times, "rel_err_of_sum": err}
