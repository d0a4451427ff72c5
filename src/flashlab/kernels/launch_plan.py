"""Direct kernel launches: one Triton kernel's launch with everything but its pointers fixed.

A forward+backward step of ``flash_attention`` at N = 2048 is a few hundred microseconds of GPU
work, and Triton's ``JITFunction.run`` spends ~25-50 us of host time per launch binding the
arguments, computing the specialisation key and looking up the compiled kernel
(benchmarks/NOTES.md, "Where the host time of a forward+backward step goes"). For one input
signature (shapes, strides, dtypes, device, stream, AttnSpec, config) all of that is the same on
every call. :class:`KernelLaunch` does the first launch through the ``JITFunction`` (compiling it
if needed), keeps the ``CompiledKernel`` and its argument list, and later launches it itself
(``CompiledKernel.run``, the same call ``JITFunction.run`` ends in; Triton 3.6 and 3.7 take the
same arguments there) with only the data pointers, and the tensor descriptors built on them,
changing. ``flash_decode``'s plans work the same way; this is the shared form the forward and
backward plans (``kernels.plans``, ``flash_bwd.BackwardPlan``) use.

It falls back to the ``JITFunction`` (so nothing changes but the time) when:

* ``DIRECT_LAUNCH`` is False (to compare the two paths),
* a Triton launch hook is installed (a profiler's: the direct call would skip it),
* a pointer is not 16-byte aligned (Triton specialises the compiled kernel on that alignment),
* Triton runs in the CPU interpreter (there is no compiled kernel): plans still fix the
  arguments and are reused there, which the CPU tests check, but every launch is interpreted.
"""
from __future__ import annotations

import os

DIRECT_LAUNCH = True  # False: every launch goes through JITFunction (to compare the two paths)


def _runtime_knobs():
    try:
        from triton import knobs

        return knobs.runtime
    except ImportError:  # an older Triton: no knobs, so no hooks to honour this way
        return type("NoHooks", (), {"launch_enter_hook": None, "launch_exit_hook": None})


_KNOBS = None


def hooks_idle() -> bool:
    """True when no Triton launch hook (a profiler's) is installed: a direct launch skips them.
    (Triton 3.6 and 3.7 keep them as HookChain objects with a ``calls`` list; older ones as None.)"""
    global _KNOBS
    if _KNOBS is None:
        _KNOBS = _runtime_knobs()
    enter, leave = _KNOBS.launch_enter_hook, _KNOBS.launch_exit_hook
    return all(hook is None or getattr(hook, "calls", True) == [] for hook in (enter, leave))


_POISON_KEY = os.environ.encodekey("FLASHLAB_POISON") if hasattr(os.environ, "encodekey") else None


def poison_requested() -> bool:
    """``FLASHLAB_POISON=1`` (see ``flash_fwd.new_output``), read without ``os.environ``'s key
    encoding where the platform allows (that costs microseconds per call)."""
    data = getattr(os.environ, "_data", None)
    if data is not None and _POISON_KEY is not None:
        value = data.get(_POISON_KEY)
        return value is not None and os.environ.decodevalue(value) == "1"
    return os.environ.get("FLASHLAB_POISON") == "1"


def new_output(shape, dtype, device):
    """``flash_fwd.new_output`` with the cheaper environment read: NaN-filled under FLASHLAB_POISON=1."""
    import torch

    if poison_requested():
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def current_stream(device) -> int | None:
    """Raw handle of ``device``'s current CUDA stream; None on the CPU (the interpreter)."""
    import torch

    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch._C._cuda_getCurrentRawStream(index)


def fast_descriptor(template: dict, cls, base):
    """A tensor descriptor like the one ``template`` (its ``__dict__``) came from, over ``base``:
    built without the class's checks, which passed when the plan was made (same shape, strides,
    dtype; ``base`` 16-byte aligned is checked by the caller)."""
    desc = object.__new__(cls)
    desc.__dict__.update(template)
    desc.base = base
    return desc


class KernelLaunch:
    """One kernel of a plan: ``fn`` (a ``triton.jit`` or ``gluon.jit`` function) on ``grid``.

    ``static`` holds every argument that is the same on every call (ints, floats, constexprs and
    tensors the plan owns); ``dynamic`` names the rest, given per call to :meth:`__call__` as
    tensors, in that order. ``descriptors`` maps a dynamic name to a function that builds the
    tensor descriptor the kernel takes from that tensor (the JIT path calls it; the direct path
    copies the first call's descriptor onto the new tensor). ``stream`` is the raw CUDA stream
    handle the direct launch uses (the JIT path uses the current stream: the caller makes it the
    same one, or passes ``jit_stream``, a ``torch.cuda.Stream`` the JIT path launches on).
    """

    def __init__(self, fn, grid, static: dict, dynamic: tuple, options: dict, stream, on_cuda: bool,
                 descriptors: dict | None = None, jit_stream=None):
        names = tuple(fn.arg_names)
        missing = set(names) - set(static) - set(dynamic)
        extra = (set(static) | set(dynamic)) - set(names)
        assert not missing and not extra, f"{fn}: missing {sorted(missing)}, unknown {sorted(extra)}"
        self.fn, self.grid, self.static, self.dynamic, self.options = fn, tuple(grid), static, dynamic, options
        self.grid3 = self.grid + (1,) * (3 - len(self.grid))
        self.names = names
        self.slots = tuple(names.index(n) for n in dynamic)
        self.builders = descriptors or {}
        self.stream = stream
        self.jit_stream = jit_stream
        self.on_cuda = on_cuda  # the interpreter has no compiled kernel
        self.kernel = None  # the CompiledKernel, after the first (JIT) launch
        self.args = None  # every argument in order, tensors as pointers (direct launch)
        self.templates = {}  # slot -> (class, __dict__ less base) of a tensor-descriptor argument

    def __call__(self, *tensors):
        """Launch with the per-call tensors (in the order of ``self.dynamic``); returns the
        CompiledKernel (the JIT path may return what the JITFunction returns)."""
        if self.args is not None and DIRECT_LAUNCH and hooks_idle():
            args = self.args.copy()
            bits = 0
            templates = self.templates
            for slot, tensor in zip(self.slots, tensors):
                ptr = tensor.data_ptr()
                bits |= ptr
                if slot in templates:
                    cls, template = templates[slot]
                    args[slot] = fast_descriptor(template, cls, tensor)
                else:
                    args[slot] = ptr
            if not bits & 15:  # else: the compiled kernel assumed 16-byte alignment; the JIT decides
                kernel = self.kernel
                kernel.run(*self.grid3, self.stream, kernel.function, kernel.packed_metadata, None, None, None, *args)
                return kernel
        return self._jit(tensors)

    def jit_values(self, tensors) -> dict:
        """Every argument by name, as the JITFunction takes them (descriptors built)."""
        values = dict(self.static)
        for name, tensor in zip(self.dynamic, tensors):
            build = self.builders.get(name)
            values[name] = tensor if build is None else build(tensor)
        return values

    def _jit(self, tensors):
        values = self.jit_values(tensors)
        if self.jit_stream is not None:
            import torch

            with torch.cuda.stream(self.jit_stream):
                kernel = self.fn[self.grid](**values, **self.options)
        else:
            kernel = self.fn[self.grid](**values, **self.options)
        if self.on_cuda and self.args is None and all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
            self._record(kernel, values)
        return kernel

    def _record(self, kernel, values: dict) -> None:
        """Keep the compiled kernel and its arguments, unless a pointer was unaligned (the kernel
        was then compiled without the alignment assumption later launches would need)."""
        args, templates = [], {}
        for i, name in enumerate(self.names):
            value = values[name]
            if hasattr(value, "data_ptr"):  # a tensor
                if value.data_ptr() & 15:
                    return
                value = value.data_ptr()
            elif name in self.builders:  # a tensor descriptor
                if value.base.data_ptr() & 15:
                    return
                template = dict(value.__dict__)
                del template["base"]
                templates[i] = (type(value), template)
                value = None  # filled per call; no reference to this call's tensor
            args.append(value)
        self.kernel, self.args, self.templates = kernel, args, templates
