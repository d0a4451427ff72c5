"""The forward rungs, by name, with one calling convention: ``forward(q, k, v, causal, scale) -> (o, lse)``.

o (B, H, Nq, d) in q's dtype; lse (B, H, Nq) float32, natural log. Every entry validates its
inputs (``attention.check_inputs``), so the benchmarks and tests can call any rung alike.

| name | what it adds |
| --- | --- |
| ``v0_grid_bh`` | one program per (batch, head), looping over all query blocks |
| ``v1_minimal`` | FA2 grid over (query block, batch*head); the NumPy loop line for line |
| ``v2_exp2_causal`` | exp2 with log2(e) folded into the scale; causal two-stage loop |
| ``v3_autotuned`` | v2 with triton.autotune (in the interpreter: one small config) |
| ``v4_hopper`` | ``flashlab.kernels.flash_fwd_hopper`` (TMA tensor descriptors, configs measured on an H200); |
|  | where that module is missing or its ``supports`` says no, this entry runs v3 instead |
| ``v5_gluon_ws`` | ``flashlab.kernels.flash_fwd_gluon``: written in Gluon, a producer warp and two consumer |
|  | warpgroups (warp specialisation), QK^T of block j overlapping softmax and P V of block j-1; |
|  | CUDA sm90 only: elsewhere (and in the interpreter) this entry runs what ``v4_hopper`` runs |

``resolve(name, q, k, v, causal)`` says which rung an entry really runs for given inputs.
"""
from __future__ import annotations

import functools
import importlib

from . import flash_fwd_gluon  # imports triton only when a kernel is first used
from .attention import check_inputs, hopper_forward, on_device


@functools.lru_cache(maxsize=None)
def hopper_module():
    """``flashlab.kernels.flash_fwd_hopper`` or None when it does not exist (yet)."""
    try:
        return importlib.import_module("flashlab.kernels.flash_fwd_hopper")
    except ModuleNotFoundError as err:
        if err.name != "flashlab.kernels.flash_fwd_hopper":
            raise
        return None


def hopper_applies(q, k, v, causal: bool) -> bool:
    """True when the Hopper rung exists, the tensors are on CUDA and it supports these inputs."""
    if q.device.type != "cuda":
        return False
    module = hopper_module()
    return module is not None and bool(module.supports(q, k, v, causal))


def resolve(name: str, q, k, v, causal: bool) -> str:
    """The rung that entry ``name`` actually runs for these inputs (``v5_gluon_ws`` may fall back to
    ``v4_hopper``'s choice, and ``v4_hopper`` to v3)."""
    if name not in RUNGS:
        raise ValueError(f"rung name={name!r} is unknown; expected one of {sorted(RUNGS)}")
    if name == "v5_gluon_ws":
        if flash_fwd_gluon.supports(q, k, v, causal):
            return name
        name = "v4_hopper"
    if name == "v4_hopper" and not hopper_applies(q, k, v, causal):
        return "v3_autotuned"
    return name


def best_rung(q, k, v, causal: bool) -> str:
    """The rung ``flash_attention`` uses (``attention.best_forward``): v5_gluon_ws where it is
    supported and measured faster (``flash_fwd_gluon.preferred``), else v4_hopper where it
    applies, else v3_autotuned."""
    if flash_fwd_gluon.preferred(q, k, causal):
        return "v5_gluon_ws"
    return resolve("v4_hopper", q, k, v, causal)


def _entry(forward_name: str):
    def forward(q, k, v, causal: bool = False, scale: float | None = None):
        from . import flash_fwd

        scale = check_inputs(q, k, v, causal, scale)
        with on_device(q):
            return getattr(flash_fwd, forward_name)(q, k, v, causal, scale)

    forward.__name__ = forward_name
    forward.__doc__ = f"Validated ``flash_fwd.{forward_name}``: (q, k, v, causal, scale) -> (o, lse)."
    return forward


def v4_hopper(q, k, v, causal: bool = False, scale: float | None = None):
    """The Hopper rung where it applies; otherwise v3_autotuned (see ``resolve``)."""
    scale = check_inputs(q, k, v, causal, scale)
    with on_device(q):
        return hopper_forward(q, k, v, causal, scale)


def v5_gluon_ws(q, k, v, causal: bool = False, scale: float | None = None):
    """The warp-specialised Gluon rung where it is supported; otherwise what v4_hopper runs."""
    scale = check_inputs(q, k, v, causal, scale)
    with on_device(q):
        if flash_fwd_gluon.supports(q, k, v, causal):
            return flash_fwd_gluon.forward(q, k, v, causal, scale, checked=True)
        return hopper_forward(q, k, v, causal, scale)


RUNGS = {
    "v0_grid_bh": _entry("forward_v0"),
    "v1_minimal": _entry("forward_v1"),
    "v2_exp2_causal": _entry("forward_v2"),
    "v3_autotuned": _entry("forward_v3"),
    "v4_hopper": v4_hopper,
    "v5_gluon_ws": v5_gluon_ws,
}
