"""The GPUs learners have, and which of the course's kernel configurations fit each of them.

One row per CUDA compute capability the course targets (``TARGETS``), with the cards of that
generation a learner is likely to get (hosted notebooks: a T4 on Colab's free tier and Kaggle; an
A100 or L4 on paid tiers; RTX 30/40 cards and A10s at home or in the cloud).

Limits per compute capability, from the CUDA C++ Programming Guide (table "Technical
Specifications per Compute Capability") and NVIDIA's tuning guides for each architecture (Turing,
Ampere, Ada, Hopper; section "Shared Memory" / "Unified Shared Memory/L1/Texture Cache"):

| target | shared memory per block (opt-in) | per SM | registers per SM | threads per SM | bf16 tensor cores |
| --- | --- | --- | --- | --- | --- |
| sm75 (Turing) | 64 KiB | 64 KiB | 65,536 | 1024 | no |
| sm80 (A100) | 163 KiB | 164 KiB | 65,536 | 2048 | yes |
| sm86 (GA10x) | 99 KiB | 100 KiB | 65,536 | 1536 | yes |
| sm89 (Ada) | 99 KiB | 100 KiB | 65,536 | 1536 | yes |
| sm90 (Hopper) | 227 KiB | 228 KiB | 65,536 | 2048 | yes |

(NVIDIA's "KB" is KiB; one thread block may use 1 KiB less than the SM holds.) Every target
allows 1024 threads per block and 255 registers per thread. bf16 Tensor Core instructions
(``mma.sync ... .bf16``) need compute capability 8.0 (PTX ISA, "Warp-level matrix multiply"):
a Turing GPU has fp16 Tensor Cores only, so the course refuses bf16 there (:func:`check_dtype`).

SM counts, memory and bandwidth of the named cards are from NVIDIA's datasheets / product pages:
T4 (40 SMs, 16 GB GDDR6, 320 GB/s), A100 SXM4 40 GB (108 SMs, 1,555 GB/s) and 80 GB (2,039 GB/s),
A10 (72 SMs, 24 GB GDDR6, 600 GB/s), RTX 3090 (82 SMs, 24 GB GDDR6X, 936 GB/s), L4 (58 SMs,
24 GB GDDR6, 300 GB/s), RTX 4090 (128 SMs, 24 GB GDDR6X, 1,008 GB/s), H100 SXM5 (132 SMs,
80 GB HBM3, 3.35 TB/s), H200 (132 SMs, 141 GB HBM3e, 4.8 TB/s; :mod:`flashlab.hardware`).
"GB" there is 10^9 bytes.

Fit rule for the forward rungs v1-v3 (``v0`` has the same tiles): Triton keeps the query block in
shared memory (``BLOCK_M x HEAD_DIM`` elements) and, with ``num_stages = S`` software-pipeline
stages, ``b`` buffers of the K and V blocks (``2 x BLOCK_N x HEAD_DIM`` elements each), so it needs
``(BLOCK_M + b x 2 x BLOCK_N) x HEAD_DIM x itemsize`` bytes (:func:`fwd_smem_bytes`), where Triton
3.7 uses b = S - 1 (at least 1) on sm75-sm89 and b = S on sm90; on sm75 the query tile's room is
sized for the fp32 accumulator (``BLOCK_M x HEAD_DIM x 4`` bytes). These were read off compiled
kernels (``(128, 64, 4 warps, 3 stages)`` at d = 64 needs 64 KiB on sm75, 48 KiB on sm80). That
is a model; the authoritative number is the compiled kernel's ``metadata.shared``, which ``tests/test_gpu_archs.py`` compiles for every target and checks
against both the limit and this model (the model must not under-count). A config fits when its
shared memory fits the target's per-block limit and ``num_warps x 32`` threads fit a block.

At run time :func:`current` reads the running GPU (``torch.cuda.get_device_properties``: compute
capability and ``shared_memory_per_block_optin``) or, when ``FLASHLAB_TARGET=sm75`` (or another
row's name) is set, that row, so a big GPU can run a small GPU's configuration tables.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

KIB = 1024
TARGET_ENV = "FLASHLAB_TARGET"  # e.g. "sm75": choose configs as if the GPU were that target


@dataclass(frozen=True)
class Card:
    """One GPU model: its SM count, memory and memory bandwidth (datasheet numbers)."""

    name: str
    sms: int
    memory_gb: float  # 10^9 bytes
    bandwidth_gb_s: float  # 10^9 bytes per second
    where: str  # where a learner meets it


@dataclass(frozen=True)
class Target:
    """Limits of one CUDA compute capability that decide which kernel configs fit."""

    name: str  # "sm75"
    cc: int  # compute capability x 10
    arch: str
    smem_per_block: int  # bytes a block may use (opt-in)
    smem_per_sm: int  # bytes
    regs_per_sm: int  # 32-bit registers
    max_threads_per_sm: int
    bf16: bool  # bf16 Tensor Cores
    cards: tuple[Card, ...] = ()
    max_threads_per_block: int = 1024
    max_regs_per_thread: int = 255


def _t(name, cc, arch, smem_block_kib, smem_sm_kib, threads_sm, bf16, cards):
    return Target(name, cc, arch, smem_block_kib * KIB, smem_sm_kib * KIB, 65536, threads_sm, bf16, cards)


TARGETS = {t.name: t for t in (
    _t("sm75", 75, "Turing", 64, 64, 1024, False, (
        Card("Tesla T4", 40, 16, 320, "Colab free tier, Kaggle"),)),
    _t("sm80", 80, "Ampere (A100)", 163, 164, 2048, True, (
        Card("A100 SXM4 40 GB", 108, 40, 1555, "Colab paid tiers, cloud"),
        Card("A100 SXM4 80 GB", 108, 80, 2039, "cloud"))),
    _t("sm86", 86, "Ampere (GA10x)", 99, 100, 1536, True, (
        Card("A10", 72, 24, 600, "cloud"),
        Card("GeForce RTX 3090", 82, 24, 936, "desktop"))),
    _t("sm89", 89, "Ada Lovelace", 99, 100, 1536, True, (
        Card("L4", 58, 24, 300, "Colab paid tiers, cloud"),
        Card("GeForce RTX 4090", 128, 24, 1008, "desktop"))),
    _t("sm90", 90, "Hopper", 227, 228, 2048, True, (
        Card("H100 SXM5", 132, 80, 3350, "cloud"),
        Card("H200", 132, 141, 4800, "cloud; the course's benchmarks"))),
)}


def target(name: str) -> Target:
    """The row called ``name`` ("sm75", ...); a ValueError names the known ones."""
    if name not in TARGETS:
        raise ValueError(f"target name={name!r} is unknown; expected one of {sorted(TARGETS)}")
    return TARGETS[name]


def for_capability(major: int, minor: int, smem_per_block: int | None = None, name: str | None = None) -> Target:
    """The target of a device with compute capability (major, minor): the nearest row at or below
    it (sm87 -> sm86; sm100 -> sm90), with the device's own shared-memory limit when given."""
    cc = 10 * major + minor
    rows = [t for t in TARGETS.values() if t.cc <= cc]
    if not rows:
        raise ValueError(f"compute capability {major}.{minor} is below sm75, the oldest GPU the course supports")
    row = max(rows, key=lambda t: t.cc)
    smem = row.smem_per_block if smem_per_block is None else int(smem_per_block)
    return dataclasses.replace(row, name=name or f"sm{cc}", cc=cc, smem_per_block=smem)


def current() -> Target | None:
    """The target configs are chosen for: ``FLASHLAB_TARGET`` if set, else the current CUDA
    device (its compute capability and ``shared_memory_per_block_optin``), else None (no GPU:
    the CPU interpreter, where nothing needs to fit)."""
    forced = os.environ.get(TARGET_ENV)
    if forced:
        if forced not in TARGETS:
            raise ValueError(f"{TARGET_ENV}={forced!r} is unknown; expected one of {sorted(TARGETS)}")
        return TARGETS[forced]
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return for_capability(props.major, props.minor, props.shared_memory_per_block_optin)


def hopper_rungs_allowed() -> bool:
    """False when ``FLASHLAB_TARGET`` names a target below sm90: then the dispatcher runs v3 (with
    that target's configs) instead of the Hopper-only rungs v4_hopper and v5_gluon_ws."""
    forced = os.environ.get(TARGET_ENV)
    return not forced or target(forced).cc >= 90


def smem_limit() -> int | None:
    """Bytes of shared memory one block may use on :func:`current`, or None without a GPU."""
    t = current()
    return None if t is None else t.smem_per_block


# --------------------------------------------------------------------------------------------
# Fit rules
# --------------------------------------------------------------------------------------------
def _itemsize(dtype) -> int:
    name = str(dtype).removeprefix("torch.")
    sizes = {"float16": 2, "bfloat16": 2, "float32": 4, "fp16": 2, "bf16": 2, "fp32": 4}
    if name not in sizes:
        raise ValueError(f"dtype={dtype!r} is not one of float16, bfloat16, float32")
    return sizes[name]


def _buffers(num_stages: int, cc: int) -> int:
    # K/V buffers Triton 3.7 allocates for S = num_stages, read off compiled kernels'
    # metadata.shared (tests/test_gpu_archs.py checks the model never under-counts):
    # sm75-sm89 keep S - 1 (at least 1); sm90 keeps S
    return num_stages if cc >= 90 else max(1, num_stages - 1)


def fwd_smem_bytes(block_m: int, block_n: int, head_dim: int, num_stages: int, itemsize: int, cc: int = 80,
                   num_warps: int = 4) -> int:
    """Shared memory (bytes) Triton gives the forward kernels v0-v3 on compute capability ``cc``:
    the query tile plus the pipelined buffers of the K and V tiles (rule in the module docstring)."""
    q_tile = block_m * head_dim * (max(4, itemsize) if cc < 80 else itemsize)  # sm75: room for the fp32 acc
    # sm80-sm89 with 4 warps: P (BLOCK_M x BLOCK_N) also passes through shared memory (measured:
    # (64, 64, 4 warps, 3 stages) at d = 128 needs 88 KiB, 8 KiB over the tiles alone)
    p_tile = block_m * block_n * itemsize if 80 <= cc < 90 and num_warps <= 4 else 0
    return q_tile + _buffers(num_stages, cc) * 2 * block_n * head_dim * itemsize + p_tile


def bwd_smem_bytes(block_m: int, block_n: int, head_dim: int, num_stages: int, itemsize: int, cc: int = 80) -> int:
    """Shared memory (bytes) bound for one backward kernel: ``block_n`` rows of two tiles stay
    resident (K, V for dK/dV; Q, dO for dQ) and ``block_m`` rows of two tiles stream through the
    pipelined buffers with two fp32 row statistics each (lse, D); one (block_m, block_n) tile of
    P or dS is staged between its two dots."""
    buffers = _buffers(num_stages, cc)
    tiles = (2 * block_n + buffers * 2 * block_m) * head_dim * itemsize
    accumulator = block_n * head_dim * 4 if cc < 80 else 0  # sm75: room for an fp32 accumulator, as forward
    return tiles + block_m * block_n * itemsize + buffers * 2 * block_m * 4 + accumulator


def why_not(t: Target, block_m: int, block_n: int, head_dim: int, num_warps: int, num_stages: int,
            dtype) -> str | None:
    """None when the forward config fits target ``t``, else the reason it does not."""
    name = str(dtype).removeprefix("torch.")
    if name in ("bfloat16", "bf16") and not t.bf16:
        return f"{t.name} has no bf16 Tensor Cores (bf16 needs sm80 or newer); use float16"
    if num_warps * 32 > t.max_threads_per_block:
        return f"num_warps={num_warps} is {num_warps * 32} threads, over {t.max_threads_per_block} per block"
    need = fwd_smem_bytes(block_m, block_n, head_dim, num_stages, _itemsize(dtype), t.cc, num_warps)
    if need > t.smem_per_block:
        return f"needs {need} B of shared memory, {t.name} allows {t.smem_per_block} B per block"
    return None


def fits(t: Target, block_m: int, block_n: int, head_dim: int, num_warps: int, num_stages: int, dtype) -> bool:
    """True when a forward config (tiles, warps, stages, dtype) fits target ``t``."""
    return why_not(t, block_m, block_n, head_dim, num_warps, num_stages, dtype) is None


def fwd_fits_current(block_m: int, block_n: int, head_dim: int, num_stages: int, itemsize: int,
                     num_warps: int = 4) -> bool:
    """For the forward launchers and v3's autotune pruning: do these tiles fit :func:`current`?
    (True without a GPU: the interpreter has no shared memory to fit.)"""
    t = current()
    return t is None or (fwd_smem_bytes(block_m, block_n, head_dim, num_stages, itemsize, t.cc, num_warps)
                         <= t.smem_per_block)


def bwd_fits_current(config, head_dim: int, itemsize: int) -> bool:
    """For the backward launcher: do both tiled kernels of a ``BwdConfig`` fit :func:`current`?"""
    t = current()
    return t is None or bwd_need(t, config, head_dim, itemsize) <= t.smem_per_block


def bwd_need(t: Target, config, head_dim: int, itemsize: int) -> int:
    """Modelled shared memory (bytes) of the larger of the dK/dV and dQ kernels of a ``BwdConfig``."""
    return max(bwd_smem_bytes(config.block_m1, config.block_n1, head_dim, config.num_stages, itemsize, t.cc),
               bwd_smem_bytes(config.block_n2, config.block_m2, head_dim, config.num_stages, itemsize, t.cc))


def bwd_does_not_fit(config, head_dim: int, dtype) -> str:
    """Why no backward config down from ``config`` fits :func:`current`: the smallest config's
    modelled need against the target's limit, and what does fit there instead."""
    t = current()
    itemsize = _itemsize(dtype)
    name = str(dtype).removeprefix("torch.")
    where = f"{t.name} ({', '.join(c.name for c in t.cards) or t.arch})" if t else "this GPU"
    if t is None:
        return f"backward: no config down from {config} fits this GPU (head_dim={head_dim}, {name})"
    need = bwd_need(t, config, head_dim, itemsize)
    advice = ("use float16, whose tiles are half as large" if itemsize == 4
              else "use a head dim of at most 128")
    return (f"backward: {name} at head_dim={head_dim} needs at least {need // KIB} KiB of shared memory "
            f"per block even with the smallest tiles ({config}); {where} allows "
            f"{t.smem_per_block // KIB} KiB. {advice[0].upper() + advice[1:]}.")


@contextlib.contextmanager
def forced(name: str):
    """Within the block, choose configs as on target ``name`` (sets ``FLASHLAB_TARGET``)."""
    target(name)
    old = os.environ.get(TARGET_ENV)
    os.environ[TARGET_ENV] = name
    try:
        yield TARGETS[name]
    finally:
        if old is None:
            os.environ.pop(TARGET_ENV, None)
        else:
            os.environ[TARGET_ENV] = old


# --------------------------------------------------------------------------------------------
# The configurations the dispatcher and the autotuner pick on a target (need torch and triton)
# --------------------------------------------------------------------------------------------
def dispatch_fwd_config(name: str, head_dim: int, dtype):
    """The ``FwdConfig`` rungs v0-v2 (and v3 with ``FLASHLAB_AUTOTUNE=0``) launch on target
    ``name`` for a padded ``head_dim`` and torch ``dtype``: the first of ``fallback_fwd_configs``
    that fits (on a GPU; in the interpreter ``default_fwd_config`` is one small config)."""
    from .kernels import flash_fwd

    with forced(name):
        chain = flash_fwd.fallback_fwd_configs(flash_fwd.default_fwd_config(head_dim, dtype))
        itemsize = _itemsize(dtype)
        return next(c for c in chain
                    if fwd_fits_current(c.block_m, c.block_n, head_dim, c.num_stages, itemsize, c.num_warps))


def dispatch_bwd_config(name: str, head_dim: int, dtype):
    """The ``BwdConfig`` the backward launches on target ``name`` (first of its fallbacks that fits)."""
    from .kernels import flash_bwd

    with forced(name):
        chain = flash_bwd.fallback_bwd_configs(flash_bwd.default_bwd_config(head_dim, dtype))
        return next(c for c in chain if bwd_fits_current(c, head_dim, _itemsize(dtype)))


def offered_v3_configs(name: str, head_dim: int, dtype, n_q: int = 4096) -> list:
    """The ``triton.Config`` list v3's autotuner times on target ``name`` (its pruning, run as on
    that target) for a padded ``head_dim``, torch ``dtype`` and query length bucket ``n_q``."""
    import torch

    from .kernels import flash_fwd

    q = torch.empty(0, dtype=dtype)
    with forced(name):
        return flash_fwd._prune_v3(flash_fwd._v3_configs(), {"HEAD_DIM": head_dim, "Q": q, "N_Q_BUCKET": n_q})


def check_dtype(tensor, name: str = "q") -> None:
    """Refuse bf16 on a CUDA device without bf16 Tensor Cores (compute capability < 8.0)."""
    if tensor.device.type != "cuda" or str(tensor.dtype) != "torch.bfloat16":
        return
    import torch

    major, minor = torch.cuda.get_device_capability(tensor.device)
    if major < 8:
        raise TypeError(f"{name}.dtype=torch.bfloat16 is not supported on {torch.cuda.get_device_name(tensor.device)} "
                        f"(compute capability {major}.{minor}): bf16 Tensor Cores need 8.0 or newer. "
                        "Use torch.float16 instead (q.half(), k.half(), v.half()).")


# --------------------------------------------------------------------------------------------
# What runs where: README's hosted-GPU table, `flashlab doctor`, notebook 04's gain table
# --------------------------------------------------------------------------------------------
def runs_on(t: Target) -> dict:
    """The forward rungs, the backward and the dtypes the course runs on target ``t``."""
    rungs = ["v0_grid_bh", "v1_minimal", "v2_exp2_causal", "v3_autotuned"]
    if t.cc == 90:  # TMA tensor descriptors and warp specialisation are written for Hopper only
        rungs += ["v4_hopper", "v5_gluon_ws"]
    dtypes = ["float16", "bfloat16", "float32"] if t.bf16 else ["float16", "float32"]
    return {"rungs": rungs, "backward": True, "dtypes": dtypes}


def hosted_table_markdown() -> str:
    """The README's table: each named card, its target, shared memory per block, rungs and dtypes."""
    lines = ["| GPU | where | target | shared memory per block | memory | forward rungs | dtypes |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS.values():
        run = runs_on(t)
        rungs = "v0-v3, v4_hopper, v5_gluon_ws" if "v4_hopper" in run["rungs"] else "v0-v3"
        for card in t.cards:
            lines.append(f"| {card.name} | {card.where} | {t.name} | {t.smem_per_block // KIB} KiB | "
                         f"{card.memory_gb:g} GB | {rungs} (+ backward) | {', '.join(run['dtypes'])} |")
    return "\n".join(lines)


def doctor_report() -> str | None:
    """One line for ``flashlab doctor``: which rungs and dtypes run on the GPU found (None: no GPU)."""
    try:
        t = current()
    except ValueError as err:
        return str(err)
    if t is None:
        return None
    run = runs_on(t)
    note = "" if t.bf16 else "; bf16 is refused here (no bf16 Tensor Cores): use float16"
    forced = f" (as {TARGET_ENV}={os.environ[TARGET_ENV]})" if os.environ.get(TARGET_ENV) else ""
    return (f"{t.name}{forced} ({t.arch}, {t.smem_per_block // KIB} KiB shared memory per block): forward rungs "
            f"{', '.join(run['rungs'])}, the backward, dtypes {', '.join(run['dtypes'])}{note}; v3 autotunes over "
            "the configs that fit this GPU only")


def gain_table(n: int = 4096, d: int = 128, batch_heads: int = 16, dtype: str = "float16") -> list[dict]:
    """For each named card: the v3 tiles that fit at head dim ``d``, the traffic model's HBM bytes of
    one forward pass (naive vs FlashAttention-2 with the largest tiles that fit; ``flashlab.traffic``),
    the predicted gain (their ratio: the speed-up if both were bound by memory bandwidth), the time
    each would take at the card's bandwidth, and how many query-block programs each SM gets.
    Needs torch and triton (v3's config list)."""
    import math

    import torch

    from .traffic import fa2_forward_traffic, naive_traffic

    rows = []
    for t in TARGETS.values():
        offered = offered_v3_configs(t.name, d, getattr(torch, dtype))
        tiles = sorted({(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in offered}, reverse=True)
        bm, bn = max(tiles, key=lambda b: b[0] * b[1])
        naive = naive_traffic(n, n, d, itemsize=2, batch=batch_heads).total
        flash = fa2_forward_traffic(n, n, d, block_q=bm, block_k=bn, itemsize=2, batch=batch_heads).total
        for card in t.cards:
            programs = batch_heads * math.ceil(n / bm)
            rows.append({"gpu": card.name, "target": t.name, "smem_kib": t.smem_per_block // KIB,
                         "tiles_that_fit": " ".join(f"{m}x{k}" for m, k in tiles), "tile": f"{bm}x{bn}",
                         "naive_mb": naive / 1e6, "flash_mb": flash / 1e6, "gain": naive / flash,
                         "naive_ms": naive / (card.bandwidth_gb_s * 1e9) * 1e3,
                         "flash_ms": flash / (card.bandwidth_gb_s * 1e9) * 1e3,
                         "sms": card.sms, "programs_per_sm": programs / card.sms})
    return rows


def gain_table_text(n: int = 4096, d: int = 128, batch_heads: int = 16) -> str:
    """:func:`gain_table` as text, then the learner's own GPU (from torch) or 'no GPU'."""
    rows = gain_table(n, d, batch_heads)
    head = (f"{'GPU':<18} {'target':<6} {'SMEM':>7} {'v3 tiles that fit (BLOCK_M x BLOCK_N)':<40} {'naive MB':>9} "
            f"{'flash MB':>9} {'gain':>5} {'naive ms':>9} {'flash ms':>9} {'SMs':>4} {'programs/SM':>11}")
    lines = [f"forward, fp16, N = {n}, d = {d}, batch x heads = {batch_heads}; bytes from flashlab.traffic, "
             "times = bytes / datasheet bandwidth", head]
    for r in rows:
        lines.append(f"{r['gpu']:<18} {r['target']:<6} {r['smem_kib']:>4} KiB {r['tiles_that_fit']:<40} "
                     f"{r['naive_mb']:>9.1f} {r['flash_mb']:>9.1f} {r['gain']:>5.1f} {r['naive_ms']:>9.3f} "
                     f"{r['flash_ms']:>9.3f} {r['sms']:>4} {r['programs_per_sm']:>11.1f}")
    try:
        t = current()
    except ValueError as err:
        t, lines = None, lines + [str(err)]
    if t is None:
        lines.append("your machine: no CUDA GPU (the kernels run in Triton's CPU interpreter)")
    else:
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else t.name
        lines.append(f"your GPU: {name}, {t.name}, {t.smem_per_block // KIB} KiB shared memory per block")
    return "\n".join(lines)
