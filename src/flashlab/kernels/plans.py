"""Launch plans of ``flash_attention``'s forward and backward: per input signature, computed once.

A signature is what the launches depend on: shapes, strides, dtype, device, the current CUDA
stream, the :class:`flashlab.attnspec.AttnSpec` and the config. Its plan holds the rung
``ladder.choose`` picked (asked once, not per call), the grids, every kernel argument that does not
change between calls, and per kernel a :class:`flashlab.kernels.launch_plan.KernelLaunch`, which
after its first launch calls the compiled kernel directly with only the data pointers changing.

* :class:`ForwardPlan`: the rungs ``v4_hopper`` and ``v5_gluon_ws`` (one kernel each, tensor
  descriptors rebuilt on the new pointers per call without their checks); any other rung is
  chosen once and then called as before (``v3_autotuned``'s autotuner keeps its own launch).
* :class:`BackwardPlan`: the two-pass backward of :mod:`flashlab.kernels.flash_bwd`:
  preprocess (``D = rowsum(dO * O)``), the dQ kernel (on the side stream where the config says
  ``concurrent``) and the dK/dV kernel. The first config that compiles (``flash_bwd.fitting_configs``)
  is the one kept.

Why: at short steps the host's time is the step's time (benchmarks/NOTES.md, "Where the host time
of a forward+backward step goes": ~1130 us of host time against ~385 us of kernels at GQA
N = 2048). ``ENABLED = False`` turns plans off (every call takes the path it took before plans
existed); ``launch_plan.DIRECT_LAUNCH = False`` keeps the plans but launches every kernel through
Triton's ``JITFunction``. In the CPU interpreter plans are made and reused (the tests check that),
but every launch is interpreted: there is no compiled kernel to call.

Plans are not kept while a CUDA graph is being captured (their buffers and first launch would
belong to the capture); ``MAX_PLANS`` per kind are kept, the cache emptied when full.
"""
from __future__ import annotations

ENABLED = True  # False: the forward and backward build every launch anew, as before plans
MAX_PLANS = 64  # plans kept per kind; the cache is emptied when full
_FORWARD: dict = {}
_BACKWARD: dict = {}


def clear() -> None:
    """Forget every forward and backward plan."""
    _FORWARD.clear()
    _BACKWARD.clear()


def _capturing(q) -> bool:
    import torch

    return q.is_cuda and torch.cuda.is_current_stream_capturing()


def _keep(cache: dict, key, plan, q) -> None:
    if _capturing(q):
        return
    if len(cache) >= MAX_PLANS:
        cache.clear()
    cache[key] = plan


class ForwardPlan:
    """The forward of one signature: ``plan(q, k, v) -> (o (B, H, Nq, d), lse (B, H, Nq) float32)``.
    ``rung``: the rung ``ladder.choose`` picks, or one named (the tests run ``v4_hopper`` in the
    interpreter this way; it must be one ``ladder.resolve`` accepts for the inputs)."""

    def __init__(self, q, k, v, spec, rung: str | None = None):
        from . import flash_fwd_gluon, ladder

        B, H, n_q, d = q.shape
        self.spec = spec
        self.rung = rung or ladder.choose(q, k, v, spec)
        self.contiguous = (q.is_contiguous(), k.is_contiguous(), v.is_contiguous())
        self.shapes = ((B, H, n_q, d), (B, H, n_q))
        self.dtype, self.device = q.dtype, q.device
        self.launch = None  # a KernelLaunch (v4, v5); None: ladder.run each call
        if self.rung == "v4_hopper":
            hopper = ladder.hopper_module()
            self.launch = hopper.kernel_launch(q, k, v, spec, hopper.default_config(d, spec.causal, n_q))
        elif self.rung == "v5_gluon_ws":
            cfg = flash_fwd_gluon.default_config(d, spec.causal, n_q, k.shape[2])
            self.launch = flash_fwd_gluon.kernel_launch(q, k, v, spec, cfg)

    def __call__(self, q, k, v):
        import torch

        from .launch_plan import new_output

        if self.launch is None:
            from . import ladder

            return ladder.run(self.rung, q, k, v, self.spec)
        q_contiguous, k_contiguous, v_contiguous = self.contiguous
        q = q if q_contiguous else q.contiguous()  # the kernels read (B*H, Nq, d) and (B*Hkv, Nk, d) views
        k = k if k_contiguous else k.contiguous()
        v = v if v_contiguous else v.contiguous()
        o = new_output(self.shapes[0], self.dtype, self.device)  # (B, H, Nq, d)
        lse = new_output(self.shapes[1], torch.float32, self.device)  # (B, H, Nq)
        self.launch(q, k, v, o, lse)
        return o, lse


def forward_key(q, k, v, spec, rung: str | None = None):
    """What a forward plan depends on (inputs that passed ``attention.check_inputs``, so k's and
    v's dtype and device are q's and v's shape is k's)."""
    from .launch_plan import current_stream

    device = q.device
    return (q.shape, q.stride(), k.shape, k.stride(), v.stride(), q.dtype, device, spec, current_stream(device),
            rung)


def forward(q, k, v, spec, rung: str | None = None):
    """(o, lse) of checked inputs from the plan of their signature, made on first use; ``rung``
    as :class:`ForwardPlan`."""
    key = forward_key(q, k, v, spec, rung)
    plan = _FORWARD.get(key)
    if plan is None:
        plan = ForwardPlan(q, k, v, spec, rung)
        _keep(_FORWARD, key, plan, q)
    return plan(q, k, v)


def _named_strides(prefix: str, rows: str, strides) -> dict:
    """``stride_{prefix}z, stride_{prefix}h, stride_{prefix}{rows}, stride_{prefix}k`` -> strides."""
    return dict(zip((f"stride_{prefix}z", f"stride_{prefix}h", f"stride_{prefix}{rows}", f"stride_{prefix}k"),
                    strides))


class BackwardPlan:
    """The two-pass backward of one signature and config:
    ``plan(q, k, v, o, lse, do) -> (dq (B, H, Nq, d), dk, dv (B, Hkv, Nk, d))``."""

    def __init__(self, q, k, v, o, lse, do, spec, cfg):
        import torch

        from . import _mode, flash_bwd
        from .flash_fwd import dot_precision, head_dim_padded
        from .launch_plan import KernelLaunch, current_stream
        from .visible import block_ranges

        triton = _mode.triton()
        B, H, n_q, d = q.shape
        h_kv, n_k = k.shape[1], k.shape[2]
        device = q.device
        on_cuda = q.is_cuda
        self.shapes = ((B, H, n_q, d), (B, h_kv, n_k, d), (B, H, n_q))
        self.dtype, self.device = q.dtype, device
        self.lse_contiguous = lse.is_contiguous()
        stream = current_stream(device)
        self.side = flash_bwd._side_stream(device) if cfg.concurrent and device.type == "cuda" else None
        self.main = torch.cuda.current_stream(device) if self.side is not None else None
        consts = dict(HEAD_DIM=head_dim_padded(d), D_HEAD=d, DOT_F32=_mode.dot_upcast(q.dtype),
                      DOT_PRECISION=dot_precision(q.dtype))
        # -- preprocess: D_i = rowsum(dO_i * O_i), by the diagonal of O dO^T for fp16/bf16
        by_dot = o.dtype != torch.float32
        block = min(cfg.block_pre, 64) if by_dot else cfg.block_pre  # by_dot: a (64, 64) fp32 tile of O dO^T
        self.pre = KernelLaunch(
            flash_bwd._bwd_preprocess, (triton.cdiv(n_q, block), B * H),
            dict(**_named_strides("o", "m", o.stride()), **_named_strides("do", "m", do.stride()), H=H, N_Q=n_q,
                 BLOCK_M=block, D_BY_DOT=by_dot, **consts), ("O", "DO", "Delta"), {}, stream, on_cuda)
        # -- dQ and dK/dV: the arguments they share
        common = dict(sm_scale=spec.resolved_scale(d), **_named_strides("q", "m", q.stride()),
                      **_named_strides("k", "n", k.stride()), **_named_strides("v", "n", v.stride()),
                      **_named_strides("do", "m", do.stride()), H=H, GROUP=H // h_kv, N_Q=n_q, N_K=n_k,
                      **spec.kernel_args(n_q, n_k), **spec.mask_args(), **consts)
        dq_strides = (H * n_q * d, n_q * d, d, 1)  # a fresh contiguous dq (B, H, Nq, d)
        kv_strides = (h_kv * n_k * d, n_k * d, d, 1)  # fresh contiguous dk, dv (B, Hkv, Nk, d)
        self.dq = KernelLaunch(
            flash_bwd._bwd_dq, (triton.cdiv(n_q, cfg.block_m2), B * H),
            dict(common, **_named_strides("dq", "m", dq_strides), BLOCK_M=cfg.block_m2, BLOCK_N=cfg.block_n2,
                 RANGES=block_ranges(spec, n_q, n_k, cfg.block_m2, cfg.block_n2, "q", device)),
            ("Q", "K", "V", "DO", "LSE", "Delta", "DQ"),
            dict(num_warps=cfg.dq_warps or cfg.num_warps, num_stages=cfg.dq_stages or cfg.num_stages),
            self.side.cuda_stream if self.side is not None else stream, on_cuda, jit_stream=self.side)
        self.dkdv = KernelLaunch(
            flash_bwd._bwd_dkdv, (triton.cdiv(n_k, cfg.block_n1), B * h_kv),
            dict(common, **_named_strides("dk", "n", kv_strides), **_named_strides("dv", "n", kv_strides),
                 BLOCK_M=cfg.block_m1, BLOCK_N=cfg.block_n1,
                 RANGES=block_ranges(spec, n_q, n_k, cfg.block_m1, cfg.block_n1, "k", device)),
            ("Q", "K", "V", "DO", "LSE", "Delta", "DK", "DV"),
            dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages), stream, on_cuda)

    def __call__(self, q, k, v, o, lse, do):
        import torch

        from .launch_plan import new_output

        q_shape, kv_shape, row_shape = self.shapes
        device = self.device
        lse = lse if self.lse_contiguous else lse.contiguous()
        delta = new_output(row_shape, torch.float32, device)  # (B, H, Nq)
        dq = new_output(q_shape, self.dtype, device)  # (B, H, Nq, d)
        dk = new_output(kv_shape, self.dtype, device)  # (B, Hkv, Nk, d)
        dv = new_output(kv_shape, self.dtype, device)  # (B, Hkv, Nk, d)
        self.pre(o, do, delta)
        side = self.side
        if side is not None:  # dQ and dK/dV only read what the preprocessing wrote: run side by side
            side.wait_stream(self.main)
        self.dq(q, k, v, do, lse, delta, dq)
        self.dkdv(q, k, v, do, lse, delta, dk, dv)
        if side is not None:
            self.main.wait_stream(side)
            for t in (q, k, v, do, lse, delta, dq):  # used on the side stream: freed only after it
                t.record_stream(side)
        return dq, dk, dv


def backward_key(q, k, v, o, lse, do, spec, config):
    """What a backward plan depends on (q, k, v as the forward checked them; o, lse, do as the
    forward made them and autograd passes them)."""
    from .launch_plan import current_stream

    device = q.device
    return (q.shape, q.stride(), k.shape, k.stride(), v.stride(), o.stride(), lse.stride(), do.stride(),
            q.dtype, device, spec, config, current_stream(device))


def backward(q, k, v, o, lse, do, spec, config=None):
    """(dq, dk, dv) from the plan of these inputs' signature, made on first use: the first config
    of ``flash_bwd.fitting_configs`` that compiles (a RuntimeError when none does). The key holds
    the config resolved per call (``flash_bwd.resolve_config``: the default and the concurrency
    rule), so a changed rule (benchmarks/bench_backward.py switches it) gets its own plan."""
    from . import flash_bwd

    resolved = flash_bwd.resolve_config(q, k, spec, config)
    key = backward_key(q, k, v, o, lse, do, spec, resolved)
    plan = _BACKWARD.get(key)
    if plan is not None:
        return plan(q, k, v, o, lse, do)
    from triton.runtime.errors import OutOfResources

    from .flash_fwd import head_dim_padded

    for cfg in flash_bwd.fitting_configs(resolved, head_dim_padded(q.shape[3]), q.element_size()):
        plan = BackwardPlan(q, k, v, o, lse, do, spec, cfg)
        try:
            grads = plan(q, k, v, o, lse, do)
        except OutOfResources:
            continue
        _keep(_BACKWARD, key, plan, q)
        return grads
    raise RuntimeError(flash_bwd.does_not_fit(resolved, head_dim_padded(q.shape[3]), q.dtype))
