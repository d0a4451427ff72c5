"""The forward rungs, by name, with one calling convention: ``forward(q, k, v, causal, scale) -> (o, lse)``.

o (B, H, Nq, d) in q's dtype; lse (B, H, Nq) float32, natural log. Every entry validates its
inputs (``attention.check_inputs``), so the benchmarks and tests can call any rung alike.

| name | what it adds |
| --- | --- |
| ``v0_grid_bh`` | one program per (batch, head), looping over all query blocks |
| ``v1_minimal`` | FA2 grid over (query block, batch*head); :func:`minimal`'s loop with every AttnSpec option |
| ``v2_exp2_causal`` | exp2 with log2(e) folded into the scale; the staged loop of ``kernels.visible`` |
| ``v3_autotuned`` | v2 with triton.autotune (in the interpreter: one small config) |
| ``v4_hopper`` | ``flashlab.kernels.flash_fwd_hopper`` (TMA tensor descriptors, configs measured on an H200); |
|  | where that module is missing or its ``supports`` says no, this entry runs v3 instead |
| ``v5_gluon_ws`` | ``flashlab.kernels.flash_fwd_gluon``: written in Gluon, a producer warp and two consumer |
|  | warpgroups (warp specialisation), QK^T of block j overlapping softmax and P V of block j-1; |
|  | CUDA sm90 only: elsewhere (and in the interpreter) this entry runs what ``v4_hopper`` runs |

:func:`minimal` (not a rung) is notebook 06's teaching kernel: v1's loop for dense and causal top-left
attention only, the NumPy loop line for line.

This module is the one place the forward kernel is chosen: :func:`choose` (what
``flash_attention`` runs, through ``attention.best_forward``), :func:`resolve` (what a named
entry runs) and :func:`run` all read ``RUNG_OPTIONS``, the AttnSpec options each rung computes
(sliding ``window``, bottom-right ``causal_align``, ``mask_mod``, per-sequence ``seqlens``); asked for one it
lacks, a named entry raises
a ValueError naming the option. ``causal`` is a bool or an :class:`flashlab.attnspec.AttnSpec`
everywhere; the entries also take the AttnSpec fields as keywords (``window=``, ...).
"""
from __future__ import annotations

import functools
import importlib

from ..attnspec import AttnSpec
from . import flash_fwd_gluon  # imports triton only when a kernel is first used
from .attention import attn_spec, flash_attention, on_device

BAND_OPTIONS = ("window", "causal_align")
# the AttnSpec options each rung computes (beyond dense and causal top-left). A mask_mod needs
# block sizes known on the host (its ranges come from flashlab.visibility), so not the autotuned
# v3 nor v4/v5; per-sequence lengths (seqlens, a padded batch) the rungs v0-v3 read in the kernel
RUNG_OPTIONS = {
    "v0_grid_bh": BAND_OPTIONS + ("mask_mod", "seqlens"),
    "v1_minimal": BAND_OPTIONS + ("mask_mod", "seqlens"),
    "v2_exp2_causal": BAND_OPTIONS + ("mask_mod", "seqlens"),
    "v3_autotuned": BAND_OPTIONS + ("seqlens",),
    "v4_hopper": BAND_OPTIONS,
    "v5_gluon_ws": BAND_OPTIONS,
}
TRITON_OPTIONS = BAND_OPTIONS + ("mask_mod", "seqlens")  # what some rung (and the backward) computes
# the options with which flash_attention still picks v5 where it is preferred: bottom-right causal, measured
# 0.78-0.89x v4's time on an H200 at chunks of 1k-8k queries against 4k-32k keys, dense and grouped
# (benchmarks/chunk_rung_probe.py, results/chunk_rung_probe.json); sliding windows not measured, so v4
V5_CHOSEN_OPTIONS = frozenset({"causal_align"})


@functools.lru_cache(maxsize=None)
def hopper_module():
    """``flashlab.kernels.flash_fwd_hopper`` or None when it does not exist (yet)."""
    try:
        return importlib.import_module("flashlab.kernels.flash_fwd_hopper")
    except ModuleNotFoundError as err:
        if err.name != "flashlab.kernels.flash_fwd_hopper":
            raise
        return None


def _spec(causal) -> AttnSpec:
    from .visible import as_spec

    return as_spec(causal)


def _fits(name: str, spec: AttnSpec) -> bool:
    return spec.features() <= set(RUNG_OPTIONS[name])


def hopper_applies(q, k, v, causal, checked: bool = False) -> bool:
    """True when the Hopper rung exists, the tensors are on CUDA and it supports these inputs
    (``checked``: they passed ``attention.check_inputs``, so only the rest is asked)."""
    spec = _spec(causal)
    if q.device.type != "cuda" or not _fits("v4_hopper", spec):
        return False
    module = hopper_module()
    if module is None:
        return False
    return bool(module.supports_checked(q, k, v) if checked else module.supports(q, k, v, spec))


def choose(q, k, v, spec: AttnSpec) -> str:
    """The rung ``flash_attention`` runs for inputs that passed ``check_inputs``: v5_gluon_ws where
    it applies and is measured faster (``flash_fwd_gluon.preferred``; no option beyond
    ``V5_CHOSEN_OPTIONS``), else v4_hopper where it
    applies, else v3_autotuned (v2_exp2_causal with a mask_mod). Only what the input check leaves
    open is asked: it runs per call."""
    if spec.mask_mod is not None:
        return "v2_exp2_causal"
    # v5 computes windows too, but was measured faster only without them (V5_CHOSEN_OPTIONS)
    if spec.features() <= V5_CHOSEN_OPTIONS and flash_fwd_gluon.preferred(q, k, spec.causal):
        return "v5_gluon_ws"
    return "v4_hopper" if hopper_applies(q, k, v, spec, checked=True) else "v3_autotuned"


def run(name: str, q, k, v, spec: AttnSpec):
    """(o, lse) from rung ``name`` (one that :func:`resolve` returns), inputs already checked."""
    if name == "v5_gluon_ws":
        return flash_fwd_gluon.forward(q, k, v, spec, spec.scale, checked=True)
    if name == "v4_hopper":
        return hopper_module().forward(q, k, v, spec, spec.scale, checked=True)
    from . import flash_fwd

    return getattr(flash_fwd, _FORWARDS[name])(q, k, v, spec, spec.scale)


_FORWARDS = {"v0_grid_bh": "forward_v0", "v1_minimal": "forward_v1", "v2_exp2_causal": "forward_v2",
             "v3_autotuned": "forward_v3"}


def resolve(name: str, q, k, v, causal) -> str:
    """The rung that entry ``name`` actually runs for these inputs (``v5_gluon_ws`` may fall back to
    ``v4_hopper``'s choice, and ``v4_hopper`` to v3). Raises ValueError naming an AttnSpec option
    the rung does not compute."""
    if name not in RUNGS:
        raise ValueError(f"rung name={name!r} is unknown; expected one of {sorted(RUNGS)}")
    spec = _spec(causal)
    spec.refuse(RUNG_OPTIONS[name], f"rung {name} (it computes {RUNG_OPTIONS[name] or 'none of them'})")
    if name == "v5_gluon_ws":
        if flash_fwd_gluon.supports(q, k, v, spec):
            return name
        name = "v4_hopper"
    if name == "v4_hopper" and not hopper_applies(q, k, v, spec):
        return "v3_autotuned"
    return name


def best_rung(q, k, v, causal) -> str:
    """The rung ``flash_attention`` uses (``attention.best_forward``): :func:`choose`."""
    return choose(q, k, v, _spec(causal))


def _entry(name: str):
    def forward(q, k, v, causal=False, scale: float | None = None, **options):
        spec = attn_spec(q, k, v, causal, scale, **options)
        with on_device(q):
            return run(resolve(name, q, k, v, spec), q, k, v, spec)

    forward.__name__ = name
    forward.__doc__ = (f"Rung ``{name}``, validated: (q, k, v, causal, scale, **AttnSpec options) -> (o, lse); "
                       "falls back as :func:`resolve` says.")
    return forward


RUNGS = {name: _entry(name) for name in RUNG_OPTIONS}
v4_hopper = RUNGS["v4_hopper"]
v5_gluon_ws = RUNGS["v5_gluon_ws"]


def minimal(q, k, v, causal=False, scale: float | None = None, **options):
    """Notebook 06's teaching kernel (``flash_fwd._fwd_minimal``), validated: v1's grid and loop for
    dense or causal top-left attention only; any other AttnSpec option raises ValueError naming it.
    Not a rung (``flash_attention`` never picks it); tested against the reference as the rungs are."""
    from . import flash_fwd

    spec = attn_spec(q, k, v, causal, scale, **options)
    with on_device(q):
        return flash_fwd.forward_minimal(q, k, v, spec, spec.scale)


def error_table(q, k, v, causal_values=(False, True)) -> str:
    """Each rung and :func:`minimal` against the float64 reference, as text: per causal value and entry,
    what the entry ran (:func:`resolve`; "itself" where that is the entry), its max abs error and the
    error allowed (``attention.allowed_error``, the flash-attention test rule), and whether it is within."""
    from . import attention

    lines = [f"{'causal':<7} {'entry':<15} {'ran':<15} {'max abs error':>13} {'allowed':>8}  verdict"]
    for causal in causal_values:
        ref = attention.attention_reference(q, k, v, causal)  # float64, then cast back
        same = attention.attention_reference(q, k, v, causal, upcast=False)  # PyTorch in q's dtype
        bound = attention.allowed_error(attention.attention_reference(q, k, v, causal).double(), same)
        for name, forward in {"minimal": minimal, **RUNGS}.items():
            o, _ = forward(q, k, v, causal)
            err = attention.max_error(o, ref)
            ran = name if name == "minimal" else resolve(name, q, k, v, causal)
            ran = "itself" if ran == name else ran
            lines.append(f"{causal!s:<7} {name:<15} {ran:<15} {err:>13.1e} {bound:>8.1e}  "
                         f"{'ok' if err <= bound else 'TOO LARGE'}")
    return "\n".join(lines)



def _draw(generator, shape, device, dtype):
    """Standard normal values of ``shape`` from ``generator`` (drawn in float32 on the CPU, so a seed gives
    the same inputs on every device), then moved to ``device`` and cast to ``dtype``."""
    import torch

    return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")


def head_sharing_table(n_q: int = 40, n_k: int = 56, d: int = 32, heads: int = 4, kv_heads=(4, 2, 1),
                       causal: bool = True, device="cpu", dtype=None, seed: int = 0) -> str:
    """``flash_attention`` on multi-head, grouped-query and multi-query shapes, as text: one line per entry
    of ``kv_heads`` (MHA where it equals ``heads``, MQA where it is 1, else GQA) with the shapes of q
    (1, heads, n_q, d), k and v (1, kv heads, n_k, d) and o, and o's max abs error against the float64
    reference (``attention.attention_reference``). Inputs: q, k, v drawn in that order per line from one
    ``torch.Generator`` seeded with ``seed``; ``dtype`` defaults to float16 on a GPU, float32 elsewhere."""
    import torch

    from . import attention

    _check_sizes(n_q=n_q, n_k=n_k, d=d, heads=heads)
    kv_heads = tuple(kv_heads)
    if not kv_heads or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 or heads % h for h in kv_heads):
        raise ValueError(f"kv_heads={kv_heads!r} must be positive ints that divide heads={heads}")
    if dtype is None:
        dtype = torch.float16 if torch.device(device).type == "cuda" else torch.float32
    generator = torch.Generator().manual_seed(seed)
    lines = []
    for h_kv in kv_heads:
        name = "MHA" if h_kv == heads else "MQA" if h_kv == 1 else "GQA"
        q = _draw(generator, (1, heads, n_q, d), device, dtype)  # (1, H, Nq, d)
        k, v = (_draw(generator, (1, h_kv, n_k, d), device, dtype) for _ in range(2))  # (1, Hkv, Nk, d)
        o = flash_attention(q, k, v, causal=causal)
        err = attention.max_error(o, attention.attention_reference(q, k, v, causal=causal))
        lines.append(f"{name}: q {tuple(q.shape)}, k/v {tuple(k.shape)} -> o {tuple(o.shape)}, max error {err:.1e}")
    return "\n".join(lines)


def dtype_error_table(n_q: int = 40, n_k: int = 56, d: int = 32, heads: int = 2,
                      dtypes=("float32", "float16", "bfloat16"), device="cpu", seed: int = 0) -> str:
    """"Exact up to rounding", measured: per dtype, the max abs error against the float64 reference of
    ``flash_attention`` and of PyTorch's plain attention computed in that same dtype, as text. Inputs
    (1, heads, n_q or n_k, d): q, k, v drawn in that order per dtype from one ``torch.Generator`` seeded
    with ``seed``, then cast to the dtype (the reference is computed from the cast values)."""
    import torch

    from . import attention

    _check_sizes(n_q=n_q, n_k=n_k, d=d, heads=heads)
    dtypes = tuple(dtypes)
    unknown = [name for name in dtypes if name not in attention.ERROR_FLOOR]
    if not dtypes or unknown:
        raise ValueError(f"dtypes={dtypes!r} must name dtypes among {tuple(attention.ERROR_FLOOR)}")
    generator = torch.Generator().manual_seed(seed)
    lines = []
    for name in dtypes:
        dt = getattr(torch, name)
        q = _draw(generator, (1, heads, n_q, d), device, dt)  # (1, H, Nq, d)
        k, v = (_draw(generator, (1, heads, n_k, d), device, dt) for _ in range(2))  # (1, H, Nk, d)
        ref = attention.attention_reference(q, k, v).double()  # float64 inside, cast back to dt
        ours = attention.max_error(flash_attention(q, k, v), ref)
        theirs = attention.max_error(attention.attention_reference(q, k, v, upcast=False), ref)
        lines.append(f"{str(dt):<15} flash_attention error {ours:.1e}   PyTorch same-dtype error {theirs:.1e}")
    return "\n".join(lines)


def gradient_error_table(n: int = 33, d: int = 32, heads: int = 4, kv_heads: int = 2, causal_values=(False, True),
                         device="cpu", dtype=None, seed: int = 0) -> str:
    """``flash_attention``'s backward against float64 autograd through ``attention.attention_reference``, as
    text: per causal value, the max abs error of dq, dk and dv. q and dO (1, heads, n, d), k and v
    (1, kv_heads, n, d) (grouped-query when kv_heads < heads), drawn q, k, v, dO per causal value from one
    ``torch.Generator`` seeded with ``seed``; ``dtype`` defaults to float16 on a GPU, float32 elsewhere."""
    import torch

    from . import attention

    _check_sizes(n=n, d=d, heads=heads, kv_heads=kv_heads)
    if heads % kv_heads:
        raise ValueError(f"kv_heads={kv_heads} must divide heads={heads}")
    if dtype is None:
        dtype = torch.float16 if torch.device(device).type == "cuda" else torch.float32
    generator = torch.Generator().manual_seed(seed)
    lines = []
    for causal in causal_values:
        q = _draw(generator, (1, heads, n, d), device, dtype).requires_grad_()  # (1, H, N, d)
        k, v = (_draw(generator, (1, kv_heads, n, d), device, dtype).requires_grad_() for _ in range(2))
        do = _draw(generator, (1, heads, n, d), device, dtype)  # (1, H, N, d)
        flash_attention(q, k, v, causal=causal).backward(do)
        ref_inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
        attention.attention_reference(*ref_inputs, causal=causal).backward(do.double())
        errs = [attention.max_error(t.grad, r.grad) for t, r in zip((q, k, v), ref_inputs)]
        lines.append(f"causal={causal!s:<5} {dtype}: max error dq {errs[0]:.1e}, dk {errs[1]:.1e}, dv {errs[2]:.1e}")
    return "\n".join(lines)

# ---------------------------------------------------------------- the backward rungs
# ``backward(q, k, v, o, lse, do, spec) -> (dq, dk, dv)``, inputs already checked (the autograd
# Function calls :func:`run_backward` with the forward's AttnSpec).
#
# | name | what it is |
# | --- | --- |
# | ``bwd_two_pass`` | ``flash_bwd``: a dK/dV kernel, then a dQ kernel (7 matrix products per tile, no atomics) |
# | ``bwd_fused`` | ``flash_bwd_hopper``: one pass, dQ by fp32 atomics (5 products per tile); fp16/bf16, |
# |  | d in (64, 128), no mask_mod, sm90 or the interpreter; elsewhere this entry runs ``bwd_two_pass`` |
# | ``bwd_gluon_ws`` | ``flash_bwd_gluon``: one pass in Gluon, a producer warp and two consumer warpgroups |
# |  | (5 products per tile, dQ by the copy engine's tile reduce); fp16/bf16, d in (64, 128), no mask_mod, |
# |  | CUDA sm90 only (no interpreter); elsewhere this entry runs ``bwd_two_pass`` |
BWD_RUNGS = ("bwd_two_pass", "bwd_fused", "bwd_gluon_ws")
# (head dim, causal) -> the shortest min(Nq, Nk) from which bwd_fused is used, measured on an H200
# (benchmarks/NOTES.md, "backward and GQA"); absent: bwd_two_pass everywhere
FUSED_BACKWARD_MIN_N: dict[tuple[int, bool], int] = {}
# the same for bwd_gluon_ws, checked first (benchmarks/NOTES.md, "Session 6 (branch bwd4)";
# results/bench_backward_s6_call3_*.json, H200, bf16, fwd+bwd against the two-pass backward on its
# dQ stream in the same run, N = 4096 and 16384, with flash_bwd_gluon.default_config's schedule):
# d = 64 +7-12 % dense and causal; d = 128 dense +27-30 %; d = 128 causal +4 % (N = 4096) and +1 %
# (N = 16384, inside the run's spread), the GQA row (H = 32, Hkv = 8, N = 8192) +13 %.
# N = 2048 (NOTES "Session 6, second round (branch bwd5)", call 2: the library with this table against
# the two-pass backward in the same run, bf16 and fp16): d = 64 +2-8 % dense, +9-10 % causal; d = 128
# +28 % dense, +3-4 % causal. N = 1024 (NOTES "Session 7 (branch bwd6)", call 2,
# results/bench_backward_s7_call2_n1k.json: bf16, the Gluon backward's default schedule against the
# two-pass one that the library ran there, same run): d = 64 +17 % dense, +18 % causal; d = 128 +37 %
# dense, +31 % causal (0.91-0.96x cuDNN against 0.69-0.82x). Shorter rows were not measured.
GLUON_BACKWARD_MIN_N: dict[tuple[int, bool], int] = {(64, False): 1024, (64, True): 1024, (128, False): 1024,
                                                     (128, True): 1024}


def resolve_backward(name: str, q, k, spec: AttnSpec) -> str:
    """The backward rung entry ``name`` runs for these inputs (``bwd_fused`` and ``bwd_gluon_ws`` fall
    back to two-pass where they do not apply)."""
    from . import flash_bwd_gluon, flash_bwd_hopper

    if name not in BWD_RUNGS:
        raise ValueError(f"backward rung name={name!r} is unknown; expected one of {BWD_RUNGS}")
    if name == "bwd_fused" and not flash_bwd_hopper.supports(q, k, spec):
        return "bwd_two_pass"
    if name == "bwd_gluon_ws" and not flash_bwd_gluon.supports(q, k, spec):
        return "bwd_two_pass"
    return name


def measured_backward(head_dim: int, causal: bool, n_q: int, n_k: int) -> str:
    """The backward rung measured fastest for this shape on an H200 (``GLUON_BACKWARD_MIN_N``, then
    ``FUSED_BACKWARD_MIN_N``), before asking whether it runs on the inputs."""
    for name, table in (("bwd_gluon_ws", GLUON_BACKWARD_MIN_N), ("bwd_fused", FUSED_BACKWARD_MIN_N)):
        min_n = table.get((head_dim, bool(causal)))
        if min_n is not None and min(n_q, n_k) >= min_n:
            return name
    return "bwd_two_pass"


def choose_backward(q, k, spec: AttnSpec) -> str:
    """The backward rung ``flash_attention`` runs: the one :func:`measured_backward` names where it
    applies to the inputs, else ``bwd_two_pass``."""
    name = measured_backward(q.shape[3], spec.causal, q.shape[2], k.shape[2])
    return name if name == "bwd_two_pass" else resolve_backward(name, q, k, spec)


def run_backward(name: str, q, k, v, o, lse, do, spec: AttnSpec):
    """(dq, dk, dv) from backward rung ``name`` (one :func:`resolve_backward` returned)."""
    if name == "bwd_fused":
        from . import flash_bwd_hopper

        return flash_bwd_hopper.backward(q, k, v, o, lse, do, spec)
    if name == "bwd_gluon_ws":
        from . import flash_bwd_gluon

        return flash_bwd_gluon.backward(q, k, v, o, lse, do, spec)
    from . import flash_bwd

    return flash_bwd.backward(q, k, v, o, lse, do, spec)
