"""The Hopper rung (``v4_hopper``): FlashAttention-2 forward fed by tensor descriptors (TMA).

Same algorithm as the other rungs (FlashAttention-2, Algorithm 1, forward pass; exp2 and the
staged loop of ``flash_fwd.py``, from ``kernels.visible``), with three changes aimed at Hopper (sm90):

* Q, K and V tiles are loaded through **tensor descriptors** (``triton.tools.tensor_descriptor.
  TensorDescriptor`` built on the host, passed by value). On sm90 Triton lowers a descriptor load
  to the bulk tensor copy engine (TMA, ``cp.async.bulk.tensor``): one thread issues a whole tile
  copy into shared memory, the warps keep their registers for the softmax, and the software
  pipeline (``num_stages``) keeps K/V tiles in flight while the tensor cores (``wgmma``) work.
* **Warp specialisation** can be switched on per config (``tl.range(..., warp_specialize=True)``,
  Triton's automatic partitioning into producer and consumer warps). Measured on an H200 with
  triton 3.6 (``benchmarks/NOTES.md``): with 4 warps it fails to compile, with 8 warps it changes
  neither the registers nor the speed, so no default config uses it.
* **Configuration as data**: block sizes, warps and stages come from :class:`HopperConfig`
  tables chosen by (head dim, causal), measured on an H200 (``benchmarks/NOTES.md``), instead of
  autotuning at every new shape.
* A **persistent grid** can be switched on per config (``persistent=k``: k programs per SM walk
  the tiles in turn). Measured on the H200 it is level at best and slower causal (NOTES.md,
  call 10), so no default config uses it. Three other ideas measured slower and were removed
  (lazy rescaling, issuing the next QK^T before the softmax, exp2 partly on the FMA units;
  NOTES.md calls 6 and 7, code in commit ad0b83c); so were two launch orders for short causal
  rows, heaviest query blocks first across groups of heads and one program per pair of a heavy
  and a light query block (level and 1-3 % slower at N = 1024; NOTES.md "Session 7", code in
  commit 76c1557).

Layout: q is viewed as ``(B*H, Nq, d)`` and k, v as ``(B*Hkv, Nk, d)``, one tensor descriptor each
with a ``(1, BLOCK, d)`` box. A tile that runs past the end of a head is filled with zeros by the
copy engine (the bound is that head's N, not the end of the tensor), so no tile ever reads another
head's rows: a NaN in one head cannot reach another head's output. Those key columns are masked
to a large negative score and those query rows are never stored, so ragged N (not a multiple of
the block sizes) is handled by masking, not by padding. Grouped-query attention (Hkv < H): query
head h reads kv head h // (H // Hkv), indexed inside the kernel; k and v are never expanded.

Which keys a query sees: an AttnSpec (``docs/ARCHITECTURE.md``), causal top-left by default (query
row i sees key column j <= i), also bottom-right and a sliding window (``SUPPORTED_OPTIONS``).
Outputs: ``o`` (B, H, Nq, d) in the input dtype and ``lse`` (B, H, Nq) float32, natural log.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from flashlab.kernels import _mode

triton = _mode.triton()
import triton.language as tl  # noqa: E402  (after _mode.triton() picked the mode)

from flashlab.kernels.visible import as_spec, kv_bounds, stage_range, visible  # noqa: E402

LN2 = math.log(2.0)
LOG2E = 1.0 / LN2


@dataclass(frozen=True)
class HopperConfig:
    """Launch configuration of the Hopper forward kernel."""

    block_q: int = 128  # BLOCK_M: query rows per program
    block_k: int = 64  # BLOCK_N: key rows per inner-loop step
    num_warps: int = 4
    num_stages: int = 3  # software-pipeline depth of the K/V loads
    warp_specialize: bool = False
    persistent: int = 0  # > 0: a grid of this many programs per SM walks all tiles; 0: one per tile

    def __post_init__(self):
        for name in ("block_q", "block_k"):
            size = getattr(self, name)
            if size < 16 or size & (size - 1):
                raise ValueError(f"{name}={size} must be a power of two >= 16")
        if self.block_q % self.block_k:
            raise ValueError(f"block_q={self.block_q} must be a multiple of block_k={self.block_k} "
                             "(the causal band loop starts at a block_q boundary)")
        if self.num_warps not in (4, 8):
            raise ValueError(f"num_warps={self.num_warps} must be 4 or 8 (one or two warpgroups)")
        if self.persistent < 0:
            raise ValueError(f"persistent={self.persistent} must be >= 0 (programs per SM; 0 = off)")
        if self.num_stages < 1:
            raise ValueError(f"num_stages={self.num_stages} must be >= 1")


# Chosen from the config sweep on an H200, bf16, B*N = 16384, N = 8192 (benchmarks/NOTES.md,
# benchmarks/results/hopper_sweep.json): the fastest config without a failed compile.
DEFAULT_CONFIGS: dict[tuple[int, bool], HopperConfig] = {
    (64, False): HopperConfig(block_q=128, block_k=64, num_warps=4, num_stages=4),  # 434 TFLOP/s
    (64, True): HopperConfig(block_q=64, block_k=64, num_warps=4, num_stages=3),  # 425 TFLOP/s
    (128, False): HopperConfig(block_q=128, block_k=64, num_warps=4, num_stages=2),  # 532 TFLOP/s
    # d128 causal: 64x64/4w/3s (473 TFLOP/s in call 1) until sweeps 5 and 6 (five and three interleaved
    # rounds, bf16 and fp16) put 128x64/4w/2s 2-3 % ahead at N >= 8192 and level at N = 4096
    (128, True): HopperConfig(block_q=128, block_k=64, num_warps=4, num_stages=2),
}

# Short causal rows (Nq <= SHORT_CAUSAL_N): smaller query blocks, so more programs and less causal
# imbalance. bf16 d = 128, N = 1024, B = 16, H = 16, three interleaved rounds: 64x64 w4 s3
# 0.197-0.203 ms against 0.209 for 128x64 w4 s2 (results/bench_backward_call1_short.json).
# Still the fastest in session 7 (NOTES.md; results/bench_fwd_short_s7_call{1,2}.json, bf16 and
# fp16): 64x32 tiles (3 or 4 programs per SM) 3-6 % slower, and 0.81-0.83x cuDNN, where ncu puts
# the gap in the tensor pipe's busy time (42 % against cuDNN's 58 %), not in the causal tail.
SHORT_CAUSAL_N = 1024
SHORT_CAUSAL_CONFIGS: dict[int, HopperConfig] = {128: HopperConfig(block_q=64, block_k=64, num_warps=4, num_stages=3)}

# Configs the benchmark sweeps to refill DEFAULT_CONFIGS (benchmarks/bench_attention.py --sweep).
SWEEP_CONFIGS: tuple[HopperConfig, ...] = (
    HopperConfig(128, 64, 4, 2), HopperConfig(128, 64, 4, 3), HopperConfig(128, 64, 4, 4),
    HopperConfig(128, 128, 8, 2), HopperConfig(128, 128, 8, 3), HopperConfig(128, 64, 8, 3),
    HopperConfig(64, 64, 4, 3),
    HopperConfig(128, 64, 4, 3, warp_specialize=True), HopperConfig(128, 128, 8, 2, warp_specialize=True),
)

SUPPORTED_HEAD_DIMS = (64, 128)


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, off_kv, lo, hi, offs_m, qk_scale, N_KV, DIAG, WINDOW,
                    DTYPE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # -- S_ij = Q_i K_j^T (paper line 8), fp32 accumulate on the tensor cores
        k = desc_k.load([off_kv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])  # (BLOCK_N, HEAD_DIM)
        qk = tl.dot(q, k.T)  # (BLOCK_M, BLOCK_N)
        # -- m_ij = max(m_i, rowmax(S_ij)), in log2 units (scores pre-multiplied by log2(e))
        if MASKED:
            cols = start_n + offs_n
            # (BLOCK_M, BLOCK_N): the ragged tail of K/V and the rule (kernels.visible); a row a
            # window hides from the whole tile gets -1e6 everywhere, wiped out by the next rescale
            keep = visible(offs_m[:, None], cols[None, :], N_KV, DIAG, WINDOW, CAUSAL, HAS_WINDOW, None, False)
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        # -- P_ij = exp2(S_ij - m_ij); alpha rescales the old state (paper lines 9-10)
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # -- acc += P_ij V_j
        v = desc_v.load([off_kv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])  # (BLOCK_N, HEAD_DIM)
        acc = tl.dot(p.to(DTYPE), v, acc)
        # -- update m_i and l_i last: shorter live ranges
        l_i = l_i * alpha + l_ij
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_tile(desc_q, desc_k, desc_v, Out, Lse, qk_scale, N_Q, N_KV, GROUP, DIAG, WINDOW, start_m, off_hz,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """O_i and lse_i of query block ``start_m`` of head ``off_hz`` (B*H flattened)."""
    DTYPE: tl.constexpr = Out.dtype.element_ty
    # grouped-query attention: query head h of batch z reads kv head h // GROUP, and
    # (z * H + h) // GROUP = z * Hkv + h // GROUP is that head's index in the (B*Hkv, Nk, d) view
    off_kv = off_hz // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows of this block

    # -- online-softmax state (paper line 6)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    q = desc_q.load([off_hz, start_m * BLOCK_M, 0]).reshape([BLOCK_M, HEAD_DIM])  # stays on chip for the whole loop

    # -- three stages (kernels.visible.kv_bounds): the window's lower edge (masked), key blocks
    #    no mask touches, the diagonal band and the ragged tail (masked); past them: never loaded
    lo, full_lo, full_hi, hi = kv_bounds(start_m, N_Q, N_KV, DIAG, WINDOW, None, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, False)
    for stage in tl.static_range(3):
        stage_lo, stage_hi = stage_range(stage, lo, full_lo, full_hi, hi)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, off_kv, stage_lo, stage_hi,
                                        offs_m, qk_scale, N_KV, DIAG, WINDOW, DTYPE, HEAD_DIM, BLOCK_N, stage != 1,
                                        CAUSAL, HAS_WINDOW, WARP_SPECIALIZE)

    # -- epilogue (paper lines 12-13): O_i = acc / l_i, lse_i = m_i + log(l_i) (natural log)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    row_ok = offs_m < N_Q
    tl.store(Lse + off_hz * N_Q + offs_m, lse, mask=row_ok)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = (off_hz * N_Q + offs_m).to(tl.int64)
    tl.store(Out + rows[:, None] * HEAD_DIM + offs_d[None, :], acc.to(DTYPE), mask=row_ok[:, None])


@triton.jit
def _flash_fwd_hopper_kernel(desc_q, desc_k, desc_v, Out, Lse, qk_scale, N_Q, N_KV, N_HEADS, GROUP, DIAG, WINDOW,
                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                             PERSISTENT: tl.constexpr):
    if PERSISTENT:
        # a fixed grid of a few programs per SM walks the (head, query block) tiles in turn
        num_m = tl.cdiv(N_Q, BLOCK_M)
        for tile in tl.range(tl.program_id(0), num_m * N_HEADS, tl.num_programs(0)):
            off_hz = tile // num_m
            if CAUSAL:
                start_m = num_m - 1 - tile % num_m  # heaviest query blocks of a head first
            else:
                start_m = tile % num_m
            _attn_tile(desc_q, desc_k, desc_v, Out, Lse, qk_scale, N_Q, N_KV, GROUP, DIAG, WINDOW, start_m, off_hz,
                       HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, WARP_SPECIALIZE)
    else:
        off_hz = tl.program_id(1)
        if CAUSAL:
            # heaviest query blocks (most key blocks) launch first: a shorter tail at the end
            start_m = tl.num_programs(0) - 1 - tl.program_id(0)
        else:
            start_m = tl.program_id(0)
        _attn_tile(desc_q, desc_k, desc_v, Out, Lse, qk_scale, N_Q, N_KV, GROUP, DIAG, WINDOW, start_m, off_hz,
                   HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, WARP_SPECIALIZE)


# the AttnSpec options (beyond causal top-left) this rung computes; others are refused by name
SUPPORTED_OPTIONS = ("window", "causal_align")


def _check_inputs(q, k, v, causal, scale):
    import torch

    check_rung_inputs(q, k, v, causal, scale, "the Hopper rung", SUPPORTED_HEAD_DIMS, SUPPORTED_OPTIONS,
                      grouped=True)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _mode.check_device(name, x)
    if q.dtype == torch.bfloat16 and _mode.is_interpreter():
        raise TypeError("q.dtype=torch.bfloat16 is not supported by the Hopper rung in Triton's CPU interpreter "
                        "(its bf16 tl.dot returns wrong numbers); use float16, or flashlab.flash_attention, "
                        "which upcasts bf16 dot operands there")


def check_rung_inputs(q, k, v, causal, scale, rung: str, head_dims, options=(), grouped: bool = False) -> None:
    """The checks the Hopper and Gluon rungs share: 4-D torch tensors of one dtype (fp16/bf16),
    k and v of q's B and d (and q's H, or with ``grouped`` a divisor of it), v shaped like k, d in
    ``head_dims``, ``causal`` a bool or an AttnSpec using only ``options``; each error names the argument."""
    from flashlab.attnspec import AttnSpec

    import torch

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name}.shape={tuple(x.shape)} must be 4-D (B, H, N, d)")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q, k, v must share one dtype, float16 or bfloat16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if grouped:
        if k.shape[0] != q.shape[0] or k.shape[1] < 1 or q.shape[1] % k.shape[1]:
            raise ValueError(f"k must have q's batch size and a number of heads Hkv that divides q's H: "
                             f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    elif k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"(B, H) must match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[3] != q.shape[3] or v.shape != k.shape:
        raise ValueError(f"k must be (B, H, Nk, d) with q's d and v the same shape as k: "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[3] not in head_dims:
        raise ValueError(f"head dim d={q.shape[3]} is not supported by {rung}; expected one of {head_dims}")
    if not isinstance(causal, (bool, AttnSpec)):
        raise TypeError(f"causal must be a bool or an AttnSpec, got {causal!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError(f"scale={scale!r} must be a positive number or None (1/sqrt(d))")
    spec = as_spec(causal)
    spec.refuse(options, rung)
    spec.check_lengths(q.shape[2], k.shape[2])


def head_views(q, k, v):
    """``(q3, k3, v3, o, lse)``: q as (B*H, Nq, d) and k, v as (B*Hkv, Nk, d) views (copied only
    when not contiguous), and the outputs to fill, o (B, H, Nq, d) in q's dtype and lse (B, H, Nq)
    float32 (NaN-filled with FLASHLAB_POISON=1)."""
    import torch

    from .flash_fwd import new_output

    B, H, n_q, d = q.shape  # (B, H, Nq, d)
    h_kv, n_kv = k.shape[1], k.shape[2]
    q3 = q.contiguous().view(B * H, n_q, d)  # (B*H, Nq, d)
    k3 = k.contiguous().view(B * h_kv, n_kv, d)  # (B*Hkv, Nk, d)
    v3 = v.contiguous().view(B * h_kv, n_kv, d)  # (B*Hkv, Nk, d)
    o = new_output((B, H, n_q, d), q.dtype, q.device)  # (B, H, Nq, d)
    lse = new_output((B, H, n_q), torch.float32, q.device)  # (B, H, Nq)
    return q3, k3, v3, o, lse


def default_config(head_dim: int, causal: bool, n_q: int | None = None) -> HopperConfig:
    """The measured best config for (head_dim, causal) and, for short causal rows, the query
    length ``n_q``; a safe default for other head dims."""
    if causal and n_q is not None and n_q <= SHORT_CAUSAL_N and head_dim in SHORT_CAUSAL_CONFIGS:
        return SHORT_CAUSAL_CONFIGS[head_dim]
    return DEFAULT_CONFIGS.get((head_dim, bool(causal)), HopperConfig())


def launch(q, k, v, causal: bool = False, scale: float | None = None,
           config: HopperConfig | None = None, checked: bool = False):
    """Run the kernel; return ``(o, lse, compiled)`` where ``compiled`` is Triton's compiled kernel.

    ``compiled`` carries the resource report (``n_regs``, ``n_spills``, ``metadata.shared``) and
    the code (``asm['ptx']``, ``asm['cubin']``) that the benchmark records. ``checked=True``
    skips the input checks for inputs that :func:`supports_checked` already accepted.
    """
    if not checked:
        _check_inputs(q, k, v, causal, scale)
    spec = as_spec(causal, scale)
    cfg = config or default_config(q.shape[3], spec.causal, q.shape[2])
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, lse = new_outputs(q)
    compiled = kernel_launch(q, k, v, spec, cfg)(q, k, v, o, lse)
    return o, lse, compiled


def new_outputs(q):
    """o (B, H, Nq, d) in q's dtype and lse (B, H, Nq) float32 for q (B, H, Nq, d), to be filled
    (NaN-filled with FLASHLAB_POISON=1)."""
    import torch

    from .launch_plan import new_output

    B, H, n_q, d = q.shape
    return new_output((B, H, n_q, d), q.dtype, q.device), new_output((B, H, n_q), torch.float32, q.device)


KERNEL_TENSORS = ("desc_q", "desc_k", "desc_v", "Out", "Lse")  # per call: contiguous q, k, v; o, lse


def kernel_launch(q, k, v, spec, cfg: HopperConfig):
    """The launch of the kernel for inputs shaped as q (B, H, Nq, d), k and v (B, Hkv, Nk, d) as
    a :class:`flashlab.kernels.launch_plan.KernelLaunch`, called with the contiguous q, k, v and
    the outputs o, lse (``KERNEL_TENSORS``); the descriptors are built on the per-head views q3
    (B*H, Nq, d) and k3, v3 (B*Hkv, Nk, d) of those tensors. A launch plan keeps it."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from .launch_plan import KernelLaunch, current_stream

    B, H, n_q, d = q.shape  # (B, H, Nq, d)
    h_kv, n_kv = k.shape[1], k.shape[2]
    grid = (triton.cdiv(n_q, cfg.block_q), B * H)
    if cfg.persistent:
        grid = (min(grid[0] * grid[1], cfg.persistent * _sm_count(q.device)),)
    static = dict(qk_scale=spec.resolved_scale(d) * LOG2E, N_Q=n_q, N_KV=n_kv, N_HEADS=B * H, GROUP=H // h_kv,
                  HEAD_DIM=d, BLOCK_M=cfg.block_q, BLOCK_N=cfg.block_k, **spec.kernel_args(n_q, n_kv),
                  WARP_SPECIALIZE=cfg.warp_specialize, PERSISTENT=bool(cfg.persistent))
    builders = dict(
        desc_q=lambda t: TensorDescriptor.from_tensor(t.view(B * H, n_q, d), [1, cfg.block_q, d]),  # (B*H, Nq, d)
        desc_k=lambda t: TensorDescriptor.from_tensor(t.view(B * h_kv, n_kv, d), [1, cfg.block_k, d]),  # (B*Hkv, Nk, d)
        desc_v=lambda t: TensorDescriptor.from_tensor(t.view(B * h_kv, n_kv, d), [1, cfg.block_k, d]))
    return KernelLaunch(_flash_fwd_hopper_kernel, grid, static, KERNEL_TENSORS,
                        dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages), current_stream(q.device),
                        q.is_cuda, builders)


def forward(q, k, v, causal: bool = False, scale: float | None = None,
            config: HopperConfig | None = None, checked: bool = False):
    """FlashAttention-2 forward on Hopper.

    q (B, H, Nq, d), k and v (B, Hkv, Nk, d) with Hkv dividing H (query head h reads kv head
    h // (H // Hkv)): torch float16/bfloat16 tensors; d in (64, 128).
    Returns ``o`` (B, H, Nq, d) in q's dtype and ``lse`` (B, H, Nq) float32 (natural log).
    ``scale`` defaults to 1/sqrt(d). Call :func:`supports` first to know whether this rung runs
    (and has been verified) for the inputs; other rungs cover the rest.
    """
    o, lse, _ = launch(q, k, v, causal, scale, config, checked)
    return o, lse


def supports(q, k, v, causal=False) -> bool:
    """True where this rung is correct and tested: CUDA sm90 (or the CPU interpreter), fp16/bf16,
    d in (64, 128), v shaped like k, Hkv dividing H; ``causal`` a bool or an AttnSpec using SUPPORTED_OPTIONS.
    In the interpreter only fp16 is accepted (its bf16 dot is wrong).
    """
    try:
        _check_inputs(q, k, v, causal, None)
    except (TypeError, ValueError):
        return False
    return _runs_here(q)


def supports_checked(q, k, v) -> bool:
    """:func:`supports` for inputs that already passed ``attention.check_inputs``.

    Only what that check leaves open is tested here (dtype, head dim), because
    ``flash_attention`` asks on every call and at N = 1024 the GPU would otherwise wait on the
    host (benchmarks/NOTES.md, call 4).
    """
    import torch

    return q.dtype in (torch.float16, torch.bfloat16) and q.shape[3] in SUPPORTED_HEAD_DIMS and _runs_here(q)


def _runs_here(q) -> bool:
    """The device half of :func:`supports`: sm90, or fp16 in the CPU interpreter."""
    import torch

    if _mode.is_interpreter():
        return q.dtype == torch.float16
    if q.device.type != "cuda":
        return False
    return _capability(q.device.index if q.device.index is not None else torch.cuda.current_device())[0] == 9


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    """(major, minor) of CUDA device ``index``, asked once: supports() runs on every call."""
    import torch

    from .. import targets  # FLASHLAB_TARGET=sm75/sm80/sm86/sm89: v4/v5 step aside, v3 runs that target's tables
    if not targets.hopper_rungs_allowed():
        return divmod(targets.current().cc, 10)
    return torch.cuda.get_device_capability(index)


def _sm_count(device) -> int:
    """Streaming multiprocessors of ``device`` (4 in the CPU interpreter, where it only sets the grid)."""
    import torch

    if device.type != "cuda":
        return 4
    return _sm_count_cuda(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _sm_count_cuda(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count
