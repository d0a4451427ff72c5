"""Launch plans of decode attention: what the launches of one decode shape need, computed once.

A decode step is tens of microseconds of GPU work, so the host's time per call matters as much
(benchmarks/NOTES.md, decode section, "A lighter launch path"). A :class:`DecodePlan` holds, per
(shapes, strides, dtype, device, stream, options): the grid, every argument of the split-KV kernel
(``kernels.flash_decode._decode_split_kv``, or ``_decode_flat`` where the config and the shape ask for the
flat walk) that does not change between calls, its scratch
(partial o and lse, the tile counters, which the kernel leaves at 0) and, after the first launch
through Triton's JITFunction, the compiled kernel, which later calls launch directly
(``CompiledKernel.run``: Triton 3.6 and 3.7 take the same arguments there), pointers as ints.
Not when a pointer is not 16-byte aligned (Triton specialises on it) or a Triton launch hook is
installed: then the JIT path. ``DIRECT_LAUNCH = False`` sends every launch through the JIT (the
benchmark compares the two paths). :func:`forward` is the kernels' entry point for validated inputs.
"""
from __future__ import annotations

import inspect

from . import _mode
from .flash_decode import (DecodeConfig, _combine_splits, _decode_flat, _decode_split_kv, block_m_for,
                           combine_step_for, default_config)
from .flash_fwd import dot_precision, head_dim_padded
from .launch_plan import hooks_idle, poison_requested
from ..split_rule import flat_programs, sm_count_of

triton = _mode.triton()
import torch  # noqa: E402

SPLIT_KV_PARAMS = tuple(inspect.signature(_decode_split_kv.fn).parameters)  # the kernel's arguments, in order
assert SPLIT_KV_PARAMS[:11] == ("Q", "K", "V", "SeqLens", "BlockTable", "Out", "LSE", "OPart", "LSEPart",
                                "Counters", "sm_scale"), SPLIT_KV_PARAMS[:11]
FLAT_PARAMS = tuple(inspect.signature(_decode_flat.fn).parameters)
assert FLAT_PARAMS[:6] == ("Q", "K", "V", "Out", "LSE", "sm_scale"), FLAT_PARAMS[:6]
COMBINE_PARAMS = tuple(inspect.signature(_combine_splits.fn).parameters)
assert COMBINE_PARAMS[:4] == ("OPart", "LSEPart", "Out", "LSE"), COMBINE_PARAMS[:4]
FLAT_MAX_BLOCK_M = 16  # the flat walk pipelines the query tile with K and V: a larger one overflows shared memory
MAX_PLANS = 64  # plans kept (each holds its scratch); the cache is emptied when full
DIRECT_LAUNCH = True  # False: every launch goes through JITFunction (to compare the two paths)
_PLANS: dict = {}


def current_stream(device_index: int):
    """Raw handle of the device's current CUDA stream; None for a CPU tensor (the interpreter)."""
    return torch._C._cuda_getCurrentRawStream(device_index) if device_index >= 0 else None


def _capturing(q) -> bool:
    return q.is_cuda and torch.cuda.is_current_stream_capturing()


class DecodePlan:
    """The launch of one decode shape. ``plan(q, k, v, seqlens, block_table, scale, return_lse)``
    -> (o (B, H, Nq, d), lse (B, H, Nq) float32, the plan's own buffer unless ``return_lse``)."""

    def __init__(self, q, k, v, seqlens, block_table, causal: bool, num_splits: int, config: DecodeConfig | None):
        B, H, Nq, d = q.shape
        Hkv = k.shape[1]
        paged = block_table is not None
        n_max = block_table.shape[1] * k.shape[2] if paged else k.shape[2]
        group = H // Hkv
        config = config or default_config(head_dim_padded(d), q.dtype)  # pages < block_n: a gather per key row
        block_m = block_m_for(group * Nq)
        row_blocks = triton.cdiv(group * Nq, block_m)
        split = num_splits > 1
        fused = split and config.fused_combine
        f32 = torch.float32
        self.o_shape, self.lse_shape, self.dtype, self.device = (B, H, Nq, d), (B, H, Nq), q.dtype, q.device
        self.lse = torch.empty(self.lse_shape, dtype=f32, device=q.device)  # lse nobody asked for; a placeholder pointer
        if split:
            self.o_part = torch.empty(B * H * Nq, num_splits, d, dtype=f32, device=q.device)  # (rows, splits, d)
            self.lse_part = torch.empty(B * H * Nq, num_splits, dtype=f32, device=q.device)  # (rows, splits)
        else:
            self.o_part = self.lse_part = self.lse  # unused by the kernel
        self.counters = torch.zeros(B * Hkv * row_blocks, dtype=torch.int32, device=q.device) if fused else self.lse
        self.grid = (num_splits, B * Hkv, row_blocks)
        o_strides = (H * Nq * d, Nq * d, d, 1)  # a fresh contiguous o
        values = dict(Q=q, K=k, V=v, SeqLens=self.lse, BlockTable=self.lse, Out=None, LSE=None, OPart=self.o_part,
                      LSEPart=self.lse_part, Counters=self.counters, sm_scale=None)
        for name, strides in (("q", q.stride()), ("k", k.stride()), ("v", v.stride()), ("o", o_strides)):
            values.update(zip((f"stride_{name}z", f"stride_{name}h", f"stride_{name}m" if name in "qo" else
                               f"stride_{name}n", f"stride_{name}k"), strides))
        values.update(stride_bz=block_table.stride()[0] if paged else 0, stride_bb=block_table.stride()[1] if paged else 0,
                      H_KV=Hkv, GROUP=group, N_Q=Nq, N_MAX=n_max, NUM_SPLITS=num_splits,
                      NUM_BLOCKS=k.shape[0] if paged else 1,
                      HEAD_DIM=head_dim_padded(d), D_HEAD=d, BLOCK_M=block_m, BLOCK_N=config.block_n,
                      PAGED=paged, PAGE_SIZE=k.shape[2] if paged else 1, PAGE_PREFETCH=config.page_prefetch,
                      EVICT_FIRST=config.evict_first, STAGGER=0 if paged else config.stagger,
                      HAS_SEQLENS=seqlens is not None, CAUSAL=bool(causal), SPLIT=split, FUSED_COMBINE=fused,
                      COMBINE_STEP=combine_step_for(config, block_m, head_dim_padded(d)),
                      DOT_F32=_mode.dot_upcast(q.dtype), DOT_PRECISION=dot_precision(q.dtype))
        assert set(values) == set(SPLIT_KV_PARAMS), set(values) ^ set(SPLIT_KV_PARAMS)
        # -- the flat walk: one program per SM over several ranges, where the rule's config allows it
        lanes = B * Hkv
        programs = (flat_programs(lanes, sm_count_of(q), n_max) if config.flat and not split and not paged
                    and seqlens is None and block_m <= FLAT_MAX_BLOCK_M else 0)
        self.jit, self.params = _decode_split_kv, SPLIT_KV_PARAMS
        if programs:
            values = {name: values[name] for name in FLAT_PARAMS if name in values}
            values["LANES"] = lanes
            assert set(values) == set(FLAT_PARAMS), set(values) ^ set(FLAT_PARAMS)
            self.grid, self.jit, self.params = (programs, 1, 1), _decode_flat, FLAT_PARAMS
        self.slots = tuple(self.params.index(n) if n in self.params else None
                           for n in ("Q", "K", "V", "Out", "LSE", "sm_scale", "SeqLens", "BlockTable"))
        self.values = dict(values, Q=None, K=None, V=None)  # no reference to the caller's tensors
        self.options = dict(num_warps=config.num_warps, num_stages=config.num_stages)
        self.combine = None if not split or fused else (
            (B * H * Nq,), dict(OPart=self.o_part, LSEPart=self.lse_part, Out=None, LSE=None,
                                stride_oz=o_strides[0], stride_oh=o_strides[1], stride_om=o_strides[2],
                                stride_ok=o_strides[3], H=H, N_Q=Nq, NUM_SPLITS=num_splits,
                                HEAD_DIM=head_dim_padded(d), D_HEAD=d, BLOCK_S=max(2, triton.next_power_of_2(num_splits))),
            dict(num_warps=4 if d >= 128 else 2))
        self.combine_kernel = None  # the combine's CompiledKernel and arguments (direct launch), as above
        self.combine_args = None
        self.direct = q.is_cuda  # the interpreter has no compiled kernel
        self.stream = current_stream(q.get_device())
        self.kernel = None  # the CompiledKernel, after the first launch
        self.args = None  # every kernel argument in order, pointers as ints (direct launch)
        self.cached = False  # kept by plan_for (not when made during a CUDA graph capture)

    def __call__(self, q, k, v, seqlens, block_table, scale: float, return_lse: bool):
        o = torch.empty(self.o_shape, dtype=self.dtype, device=self.device)  # (B, H, Nq, d)
        lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device) if return_lse else self.lse
        if poison_requested():  # tests: an element never written, or stale scratch, shows
            for t in (o, lse, self.o_part, self.lse_part):
                t.fill_(float("nan"))
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                0 if seqlens is None else seqlens.data_ptr(), 0 if block_table is None else block_table.data_ptr())
        bits = ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[4] | ptrs[5] | ptrs[6]
        # the compiled kernel assumed 16-byte aligned pointers (Triton specialises on it): others go through the JIT
        if self.args is not None and not bits & 15 and DIRECT_LAUNCH and hooks_idle():
            args = self.args.copy()
            at_q, at_k, at_v, at_o, at_lse, at_scale, at_lens, at_table = self.slots
            args[at_q], args[at_k], args[at_v], args[at_o], args[at_lse], args[at_scale] = (
                ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], scale)
            if seqlens is not None:
                args[at_lens] = ptrs[5]
            if block_table is not None:
                args[at_table] = ptrs[6]
            kernel = self.kernel
            kernel.run(*self.grid, self.stream, kernel.function, kernel.packed_metadata, None, None, None, *args)
        else:
            values = dict(self.values, Q=q, K=k, V=v, Out=o, LSE=lse, sm_scale=scale)
            if seqlens is not None:
                values["SeqLens"] = seqlens
            if block_table is not None:
                values["BlockTable"] = block_table
            kernel = self.jit[self.grid](**values, **self.options)
            if self.direct and self.args is None and not bits & 15 and all(
                    hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
                self.kernel = kernel
                self.args = [values[n].data_ptr() if isinstance(values[n], torch.Tensor) else values[n]
                             for n in self.params]
        if self.combine is not None:
            self._combine(o, lse, ptrs[3], ptrs[4])
        return o, lse

    def _combine(self, o, lse, o_ptr: int, lse_ptr: int) -> None:
        """The second kernel: merge the splits' partial states into o and lse (directly launched
        after its first launch, as the split kernel)."""
        grid, values, options = self.combine
        if self.combine_args is not None and DIRECT_LAUNCH and hooks_idle():
            args = self.combine_args.copy()
            args[2], args[3] = o_ptr, lse_ptr
            kernel = self.combine_kernel
            kernel.run(grid[0], 1, 1, self.stream, kernel.function, kernel.packed_metadata, None, None, None, *args)
            return
        kernel = _combine_splits[grid](**dict(values, Out=o, LSE=lse), **options)
        if self.direct and self.combine_args is None and all(
                hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
            self.combine_kernel = kernel
            self.combine_args = [values[n].data_ptr() if isinstance(values[n], torch.Tensor) else
                                 (o_ptr if n == "Out" else lse_ptr if n == "LSE" else values[n]) for n in COMBINE_PARAMS]


def plan_key(q, k, v, seqlens, block_table, causal: bool, num_splits: int, config):
    """What a plan depends on (validated inputs: k's and v's dtype and device are q's)."""
    device = q.get_device()
    return (q.shape, q.stride(), q.dtype, device, k.shape, k.stride(), v.stride(),
            None if seqlens is None else seqlens.stride(),
            None if block_table is None else (block_table.shape, block_table.stride()),
            causal, num_splits, config, current_stream(device))


def plan_for(q, k, v, seqlens, block_table, causal: bool, num_splits: int,
             config: DecodeConfig | None = None) -> DecodePlan:
    """The cached plan of these (validated) inputs, made on first use. Not cached while a CUDA
    graph is being captured (its scratch would come from the graph's memory pool)."""
    key = plan_key(q, k, v, seqlens, block_table, causal, num_splits, config)
    plan = _PLANS.get(key)
    if plan is None:
        plan = DecodePlan(q, k, v, seqlens, block_table, causal, num_splits, config)
        if not _capturing(q):
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.clear()
            _PLANS[key] = plan
            plan.cached = True
    return plan


def clear_plans() -> None:
    """Forget every plan (and free its scratch)."""
    _PLANS.clear()


def forward(q, k, v, seqlens, scale: float, causal: bool, num_splits: int, config: DecodeConfig | None = None,
            block_table=None):
    """Split-KV attention of validated inputs. q (B, H, Nq, d); k, v (B, Hkv, N_max, d); seqlens
    (B,) int32 on q's device, or None for N_max everywhere. Returns (o (B, H, Nq, d) in q's dtype,
    lse (B, H, Nq) float32, natural log). ``causal``: bottom-right (query i sees j <= L_b - Nq + i).
    Paged cache: ``block_table`` (B, max_blocks) int32 and k, v (num_blocks, Hkv, page_size, d),
    page_size a power of two >= 16; logical key j of sequence b is row j % page_size of block
    block_table[b, j // page_size]; N_max = max_blocks * page_size. A length outside Nq..N_max, or
    a used table entry outside 0..num_blocks - 1, gives NaN in that sequence's o and lse."""
    plan = plan_for(q, k, v, seqlens, block_table, bool(causal), num_splits, config)
    return plan(q, k, v, seqlens, block_table, float(scale), True)
