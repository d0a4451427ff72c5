"""The learner's side of grading: load the learner's module and call it on inputs, nothing more.

This module runs in the grading child, a process of its own (see :mod:`flashlab.grading.sandbox`).
It never sees a reference answer, a tolerance or a verdict: the parent sends the inputs of one
case, the child calls the learner's function and sends back plain data (the returned value as
dtype/shape/bytes, the exception text, the printed text, digests of the inputs after the call, and
what it saw the call do). The parent treats every field as a claim from untrusted code.

Before the learner's module is loaded (so ``from flashlab.tiled import ...`` is covered too):
- every function of flashlab's library (anything under ``flashlab.`` but this module, the wire
  format and the lazy loader) has its ``__code__`` replaced by one that records the call and
  raises; aliases, closures, ``__wrapped__`` and forked copies all point at the same patched
  function object, and modules imported or reloaded later are patched on import;
- for the Triton exercises, torch and triton are imported, a torch dispatch mode watches every
  aten operator the learner's call runs (attention, softmax and matmul are forbidden there; any
  arithmetic in torch is), and every kernel launch is seen (:class:`LaunchTracker`);
- resource limits are set and, when running as root, the process drops to an unprivileged uid;
- the kernel is asked to keep the process from changing files outside its home folder and from
  starting processes (:mod:`flashlab.grading.confine`): unlike everything above, that cannot be
  undone by the learner's code.
"""
from __future__ import annotations

import gc
import hashlib
import importlib.abc
import io
import linecache
import math
import os
import re
import sys
import threading
import time
import traceback
import types
import weakref

from flashlab.grading import confine, wire
from flashlab.grading.bounds import MemoryBounds, OutOfBounds, StoreGuards, byte_view, element_mask, shares_memory, span

OUTPUT_LIMIT = 2000  # characters of printing kept per call
EXEMPT = ("flashlab", "flashlab._lazy", "flashlab.grading", "flashlab.grading.child", "flashlab.grading.wire",
          "flashlab.grading.confine", "flashlab.grading.bounds",
          "flashlab.kernels._mode")  # _mode: how Triton runs here (its repairs run inside Triton's interpreter)
# aten operators a Triton exercise's Python wrapper may run after its kernel's last launch: allocation, views,
# copies and joins (stack, cat), and read-only checks (isnan, any). Before a launch it may run any but matmuls.
TORCH_ALLOWED = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
full full_like new_full fill_ zero_ copy_ _to_copy clone contiguous view _unsafe_view reshape _reshape_alias
as_strided expand t transpose permute unsqueeze squeeze select slice detach alias lift_fresh unbind split
narrow resize_ set_ is_same_size _local_scalar_dense item arange size stride sym_size sym_stride numel dim
is_contiguous to view_as expand_as _has_compatible_shallow_copy_type record_stream isnan equal eq ne
stack cat concat concatenate any all isfinite isinf isneginf isposinf
""".split())
TORCH_DENIED_WORDS = ("softmax", "scaled_dot_product", "flash_attention", "efficient_attention",
                      "cudnn_attention")
# operators the learner's calls may run: torch's own (an operator registered with torch.library runs its
# body with the dispatch mode popped, unseen)
TORCH_NAMESPACES = frozenset(("aten", "prims"))
TORCH_MATMULS = frozenset("mm bmm addmm baddbmm matmul dot mv einsum linear _addmm_activation".split())


class ForbiddenCall(Exception):
    """Raised by a flashlab library function or kernel called from the learner's code."""


class BoundedText(io.TextIOBase):
    """A text sink that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int = OUTPUT_LIMIT):
        self.limit, self.parts, self.kept, self.total = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        self.total += len(text)
        if self.kept < self.limit:
            piece = text[: self.limit - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)
        return len(text)

    def text(self) -> str:
        return "".join(self.parts)


# ----------------------------------------------------------------------------- forbidden library calls
CALLS: list[str] = []  # what the learner's code called that it must not
_ORIGINALS: dict = {}  # qualname -> the original function, for flashlab's own imports only
_IMPORTING = [0]  # > 0 while a flashlab module executes (its decorators call other flashlab functions)


def _forbidden(qualname: str, args=(), kwargs=None):
    if _IMPORTING[0] > 0 and qualname in _ORIGINALS:
        return _ORIGINALS[qualname](*args, **(kwargs or {}))
    if qualname not in CALLS:
        CALLS.append(qualname)
    raise ForbiddenCall(f"{qualname} is part of flashlab's answer, not available while grading")


def _forbid_function(func, qualname: str) -> None:
    """Replace ``func.__code__`` by one that records the call and raises (in place: every reference sees it)."""
    while isinstance(func, types.FunctionType) and not getattr(func, "__flashlab_forbidden__", False):
        free = func.__code__.co_freevars  # a closure (a decorator's wrapper): the new code needs the same cells
        namespace: dict = {}
        exec("def _outer():\n" + "".join(f"    {name} = None\n" for name in free)
             + "    def _f(*args, **kwargs):\n" + "".join(f"        {name}\n" for name in free)
             + f"        return __flashlab_forbidden__({qualname!r}, args, kwargs)\n    return _f\n", namespace)
        namespace["_f"] = namespace["_outer"]()
        if namespace["_f"].__code__.co_freevars != free:
            func = getattr(func, "__wrapped__", None)
            continue
        _ORIGINALS[qualname] = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__,
                                                  func.__closure__)
        _ORIGINALS[qualname].__kwdefaults__ = func.__kwdefaults__
        func.__globals__["__flashlab_forbidden__"] = _forbidden
        func.__code__ = namespace["_f"].__code__
        func.__defaults__, func.__kwdefaults__ = None, None
        func.__flashlab_forbidden__ = True
        func = getattr(func, "__wrapped__", None)


def forbid_module(module) -> None:
    name = getattr(module, "__name__", "")
    if not name.startswith("flashlab.") or name in EXEMPT:
        return
    for attr, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType) and value.__module__ == name:
            _forbid_function(value, f"{name}.{attr}")
        elif isinstance(value, type) and value.__module__ == name:
            for meth_name, meth in list(vars(value).items()):
                meth = getattr(meth, "__func__", meth)  # staticmethod / classmethod
                if isinstance(meth, types.FunctionType):
                    _forbid_function(meth, f"{name}.{attr}.{meth_name}")


class _Hidden:
    """A name in a flashlab module the grading child may not read (the files are confined): calling
    it, or launching it as a kernel, is a forbidden call; its attributes are hidden names too."""

    def __init__(self, qualname: str):
        self.qualname = qualname

    def __call__(self, *args, **kwargs):
        return _forbidden(self.qualname)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: _forbidden(f"{self.qualname} (a flashlab kernel)")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Hidden(f"{self.qualname}.{name}")


class _HiddenModule(importlib.abc.Loader):
    """Loads a flashlab module that cannot be read as a module of hidden names (see :class:`_Hidden`)."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        def hidden(name: str, _prefix=module.__name__):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Hidden(f"{_prefix}.{name}")

        module.__getattr__ = hidden


HIDDEN = [False]  # True once the child's files are confined: flashlab modules not yet loaded are hidden


class _ForbidOnImport(importlib.abc.MetaPathFinder):
    """Patches a flashlab module right after it is executed (first import and importlib.reload)."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("flashlab.") or fullname in EXEMPT:
            return None
        if HIDDEN[0]:
            from importlib.machinery import ModuleSpec

            return ModuleSpec(fullname, _HiddenModule(), is_package=True)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                exec_module = spec.loader.exec_module

                def exec_and_forbid(module, _exec=exec_module):
                    _IMPORTING[0] += 1
                    try:
                        _exec(module)
                    finally:
                        _IMPORTING[0] -= 1
                    forbid_module(module)

                spec.loader.exec_module = exec_and_forbid
                return spec
        return None


def install_forbidden() -> None:
    sys.meta_path.insert(0, _ForbidOnImport())
    for module in list(sys.modules.values()):
        forbid_module(module)


# ----------------------------------------------------------------------------- threads of the learner's own
class ThreadPolicy(dict):
    """``TORCH_POLICY``: its "active" (the torch watch judges the operators it sees) is per thread.

    The grading thread switches it on for the learner's call and off for the grader's own work inside
    the call (the launch tracker's copies and fills); another thread keeps its own value, on from its
    start: a thread of the learner's is watched whenever it runs torch (between calls too, so work on
    the inputs done before the call starts is judged alike), and the grading thread's bookkeeping
    does not open a window in which it goes unwatched."""

    def __init__(self, **items):
        super().__init__(**items)
        self.grading_thread = threading.get_ident()
        self.local = threading.local()

    def __getitem__(self, key):
        if key == "active":
            return getattr(self.local, "active", threading.get_ident() != self.grading_thread)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        if key == "active":
            self.local.active = value
        else:
            super().__setitem__(key, value)


class _Started:
    """A thread the learner's code started: whether it runs under the torch watch, whether it still runs."""

    __slots__ = ("watched", "alive")

    def __init__(self, watched: bool):
        self.watched, self.alive = watched, True


class ThreadWatch:
    """Threads the learner's code starts run under the grader's torch watch.

    torch's dispatch and function modes are per thread, so a thread of the learner's own would run
    torch unseen (attention and softmax, exercise 15's count of tensors held at once). Before the
    learner's module is loaded, ``_thread.start_new_thread`` (threading.Thread, concurrent.futures
    pools and every other Python thread start through it) is wrapped: a new thread enters fresh
    copies of the grader's modes before its first line, if torch is watched by then. A thread
    started before torch was watched (a NumPy exercise imports torch on first use) cannot enter
    them later: a call during which such a thread was alive, and after which torch is watched, is
    refused. The grading thread enters the modes at each call, in case another thread imported
    torch first. Not seen: threads started from C (ctypes and pthread_create), and a learner who
    unwraps the functions (tampering, as with every in-process watch); torch's own intra-op threads
    run no Python and are no concern."""

    STARTERS = ("start_new_thread", "start_new", "_start_new_thread")  # in _thread, and threading's alias
    JOINABLE = ("start_joinable_thread", "_start_joinable_thread")  # Python 3.13+

    def __init__(self):
        self.unwatched: list = []  # _Started of threads started while torch was not watched
        self.during: list | None = None  # those alive during the call in progress
        self.entered = threading.local()

    def install(self) -> None:
        import _thread

        TORCH_POLICY.grading_thread = threading.get_ident()  # the thread that calls the learner's functions
        for module in (_thread, threading):
            for name in self.STARTERS + self.JOINABLE:
                original = getattr(module, name, None)
                if original is not None and not getattr(original, "__flashlab_watched__", False):
                    setattr(module, name, self._wrap(original, joinable=name in self.JOINABLE))

    def _wrap(self, original, joinable: bool):
        watch = self

        def start(function, *args, **kwargs):
            started = watch._started()
            if joinable:  # start_joinable_thread(function, handle=None, daemon=True)
                return original(lambda: watch._run(started, function, (), {}), *args, **kwargs)
            call_args = args[0] if args else kwargs.pop("args", ())
            call_kwargs = (args[1] if len(args) > 1 else kwargs.pop("kwargs", None)) or {}
            return original(watch._run, (started, function, tuple(call_args), dict(call_kwargs)))

        start.__flashlab_watched__ = True
        start.__name__ = getattr(original, "__name__", "start_new_thread")
        start.__doc__ = getattr(original, "__doc__", None)
        return start

    @staticmethod
    def _modes():
        """The grader's torch modes (None while torch is not watched)."""
        mode, names = TORCH_POLICY["mode"], TORCH_POLICY.get("names")
        return (mode, names) if mode is not None and names is not None else None

    def _started(self) -> _Started:
        started = _Started(watched=self._modes() is not None)
        if not started.watched:
            self.unwatched = [s for s in self.unwatched if s.alive] + [started]
            if self.during is not None:
                self.during.append(started)
        return started

    def _run(self, started: _Started, function, args: tuple, kwargs: dict):
        try:
            started.watched = self.enter() or started.watched
            return function(*args, **kwargs)
        finally:
            started.alive = False

    def enter(self) -> bool:
        """Enter the grader's modes in the current thread, once (True when this thread is watched)."""
        modes = self._modes()
        if modes is None:
            return False
        if getattr(self.entered, "done", False):
            return True
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        if not any(type(m) is type(modes[0]) for m in _get_current_dispatch_mode_stack()):  # not the installer
            for mode in modes:
                type(mode)().__enter__()
        self.entered.done = True
        return True

    def begin(self) -> None:
        """Before the learner's call, in the grading thread."""
        self.enter()
        self.during = [s for s in self.unwatched if s.alive and not s.watched]

    def end(self) -> str | None:
        """After the call: a forbidden call to report when torch may have run unwatched in another thread."""
        during, self.during = self.during or [], None
        if self._modes() is not None and any(not s.watched for s in during):
            return ("torch in a thread started before torch was imported (the grader cannot watch torch there: "
                    "import torch at the top of your module, or start threads inside your function)")
        return None


THREADS = ThreadWatch()


# ----------------------------------------------------------------------------- torch and Triton
class LaunchTracker:
    """Sees every Triton kernel launch; proves that a returned tensor was written by the learner's kernel.

    Before each launch, every buffer passed (inside tuple arguments too) that is not a case input,
    nor a copy of one in any layout, is vetted whatever its dtype: one that holds what the last
    launch left in it, or only zeros (a fresh accumulator), is left as it is; any other (data
    computed outside the kernel) is poisoned (a NaN with a payload of its own; 0 for integers and
    False for booleans, which address no memory outside a tensor when a kernel indexes with them),
    so a result computed elsewhere and handed to a kernel that does nothing comes back as poison. A poisoned buffer the kernel did not write is an input the learner derived
    (D = rowsum(dO * O)): it is restored and the launch runs again; the parent refuses derived
    inputs that hold the returned values. An input that differs at a launch from what the call
    received is reported. After every launch the bytes of its tensor arguments are kept; a returned
    tensor must hold what the latest launches covering it left there, or be a dtype cast of one
    launch's output (nothing changed it after the kernel wrote it). Launching a kernel defined in
    flashlab is forbidden.
    """

    def __init__(self, learner_modules: set):
        self.learner_modules = learner_modules
        self.reset([])

    def reset(self, inputs: list, required: tuple = ()) -> None:
        self.inputs, self.regions, self.launches, self.derived = inputs, [], [], []
        self.prefilled: list = []  # what buffers a kernel wrote held before (see plain()): searched for the answer
        self.originals = [x.detach().clone() for x in inputs]  # the inputs as the call received them
        self.required = set(required)  # the kernels the part must launch
        self.changed_inputs = False  # an input differed from its original at a launch
        self.scalars: list = []  # float arguments of the learner's launches
        self.poisons = 0  # buffers poisoned so far: each gets its own poison value
        self.pending: list = []  # (tensor, its values before the launch, was poisoned)
        self.tiles: dict = {}  # kernel name: the largest tensor dimension any of its launches built
        self.elsewhere: list = []  # (kernel, module) launched from a module other than the learner's
        # torch operators outside TORCH_ALLOWED run after a launch of a required kernel, with the learner's
        # line: preparation when a later launch of one takes what they made (flow), finishing the result in
        # torch when what they made reaches a returned tensor (refused at the end of the call), else a check
        self.after_launch: list = []
        self.open_notes: set = set()  # indices into after_launch that no later launch consumed
        self.flow: dict = {}  # storage address -> indices of the noted operators whose results reached it
        self.read_only: list = []
        # for replay(): required kernel name -> [(launch index, signature, (kernel, args, kwargs))]; the launches
        # whose outputs the returned value holds (writers); which launch left each region's snapshot
        self.launched_of: dict = {}
        self.writers: set = set()
        self.region_launch: dict = {}

    _span, _bytes = staticmethod(span), staticmethod(byte_view)

    @staticmethod
    def _fill(t) -> float | None:
        """The one value every element holds where it starts a result: 0 (no float -0.0: a sign bit carries
        information too), an accumulator's start, or -inf, an empty state's lse (a split with no keys, which
        the kernel may leave as the wrapper filled it); None otherwise."""
        import torch

        if not bool((t != 0).any()):
            return None if t.is_floating_point() and bool(torch.signbit(t).any()) else 0.0
        if t.is_floating_point() and bool((t == float("-inf")).all()):
            return float("-inf")
        return None

    @staticmethod
    def _poison_bits(t, n: int):
        """(integer view of t, the value its elements get): a NaN whose payload is n for floats, so
        each poisoned float buffer is told apart (a kernel that copies one poisoned buffer into
        another leaves the copy's value, not its own). Integers get 0 and booleans False: a kernel
        may address memory with them (lengths, offsets, a block table, a mask on its loads), and 0
        and False address nothing outside a tensor, where a value from the top of the range sent
        the poisoned launch's loads past K's end (OutOfBounds in the interpreter, a dead CUDA
        context on a GPU). A kernel that copies one poisoned integer buffer into another makes the
        copy look unwritten: it is then checked as a derived input, which only adds checks."""
        import torch

        quiet = {torch.float64: (torch.int64, 0x7FF8000000000000, 51), torch.float32: (torch.int32, 0x7FC00000, 22),
                 torch.float16: (torch.int16, 0x7E00, 9), torch.bfloat16: (torch.int16, 0x7FC0, 6)}
        if t.dtype in quiet:
            view, base, bits = quiet[t.dtype]
            return t.view(view), base | (1 + n % ((1 << bits) - 1))
        if t.is_complex():
            return t, complex(float("nan"), n)
        return t, False if t.dtype == torch.bool else 0

    def _poison(self, t) -> tuple:
        view, value = self._poison_bits(t, self.poisons)
        self.poisons += 1
        view.fill_(value)
        return view, value

    @staticmethod
    def _still_poisoned(view, value) -> bool:
        import torch

        if isinstance(value, complex):
            return bool(torch.isnan(view).all())
        return bool((view == value).all())

    def before(self, tensors: list, scalars: list = ()) -> None:
        import torch

        self.pending = []
        self.fill_spans = {}  # (start, bytes) -> the value this launch's buffers held everywhere (0, -inf)
        self.read_only = []  # (start, bytes) of this launch's arguments that are no output: expanded views, derived inputs
        self.scalars += [float(x) for x in scalars]
        if not all(self._same_bytes(x, o) for x, o in zip(self.inputs, self.originals)):
            self.changed_inputs = True  # an answer written into an input, to be put back after the launch
        vetted: list = []  # (first, last byte + 1) of the buffers vetted for this launch
        # largest first: a view inside a buffer vetted already (the same buffer passed twice, kv and kv[1])
        # is covered by that buffer's vetting; vetted again, its clone would hold the other's poison
        for t in sorted(tensors, key=lambda x: -self._span(x)[1]):
            start, nbytes = self._span(t)
            if not nbytes or self._input_copy(t):
                continue
            if any(lo < start + nbytes and start < hi for lo, hi in vetted):
                continue
            if shares_memory(t):  # expand: read-only, never an output; what it holds is a derived input
                self._keep_derived(t[tuple(slice(0, 1) if st == 0 else slice(None) for st in t.stride())])
                self.read_only.append((start, nbytes))
                continue
            left = next((r[3] for r in self.regions if r[0] == start and r[1] == nbytes), None)
            if left is not None and torch.equal(self._bytes(t, start, nbytes), left):
                continue  # as the last launch that had it left it
            vetted.append((start, start + nbytes))
            before = t.clone()
            fill = self._fill(t)
            if fill is not None:  # an accumulator, or empty states: nothing handed in
                self.pending.append((t, before, None))
                self.fill_spans[(start, nbytes)] = fill
            else:
                with torch.no_grad():  # a leaf that requires grad (an nn.Parameter) is filled too
                    self.pending.append((t, before, self._poison(t)))

    def _keep_derived(self, t) -> None:
        """Send what ``t`` holds to the parent as an input the learner derived (checked there)."""
        import torch

        kept = t.detach().cpu()
        self.derived.append((kept.float() if kept.dtype == torch.bfloat16 else kept).numpy().copy())

    @staticmethod
    def _same_bytes(a, b) -> bool:
        """Bit for bit (NaN included: the poisoned cases' inputs hold NaN)."""
        import torch

        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))

    def _input_copy(self, t) -> bool:
        import torch

        for x, original in zip(self.inputs, self.originals):
            if t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                return True  # the input itself (checked against its original above)
            if t.numel() != original.numel() or t.device != original.device or t.is_complex():
                continue
            # both ways: the same values as the input's dtype, and no more than them in t's own (a float64
            # "copy" of float32 K whose low mantissa bits carry something else is no copy)
            same, back = t.to(original.dtype), original.to(t.dtype)
            if t.shape == original.shape and torch.equal(same, original) and torch.equal(t, back):
                return True
            if torch.equal(same.reshape(-1).sort().values, original.reshape(-1).sort().values) and \
                    torch.equal(t.reshape(-1).sort().values, back.reshape(-1).sort().values):
                return True  # the same values in another layout (K transposed, made contiguous)
        return False

    def unwritten(self) -> bool:
        """After a launch: poisoned buffers that the kernel did not write are inputs the learner
        derived before the launch (e.g. D = rowsum(dO * O)). Put every buffer back as it was
        (written ones poisoned again) and say so: the launch must run again on the real inputs.
        The derived inputs are sent to the parent, which refuses one that holds the answer."""
        import torch

        derived = [t for t, _, poison in self.pending if poison is not None and self._still_poisoned(*poison)]
        if not derived:
            return False
        with torch.no_grad():
            for t, before, poison in self.pending:
                if any(t is d for d in derived):
                    t.copy_(before)
                    self._keep_derived(t)
                    self.read_only.append(self._span(t))
                elif poison is not None:
                    poison[0].fill_(poison[1])
                else:
                    t.copy_(before)
        self.pending = []
        return True

    def poisoned(self) -> list:
        """(buffer, what it held) of the buffers poisoned for the coming launch."""
        return [(t, before) for t, before, poison in self.pending if poison is not None]

    def plain(self, poisoned: list) -> None:
        """The launch on poisoned buffers went out of bounds (an integer the kernel addresses memory with,
        as a length it seeds a max from, is 0 there) and ran again on what they held: a buffer that run did
        not write is a derived input, as after a poisoned run; what a buffer it wrote held before is searched
        for the answer too (a kernel that writes one element of a buffer carrying the answer gets no pass)."""
        import torch

        for t, before in poisoned:
            if self._same_bytes(t, before):
                self._keep_derived(t)
                self.read_only.append(self._span(t))
            else:
                kept = before.detach().cpu()
                self.prefilled.append((kept.float() if kept.dtype == torch.bfloat16 else kept).numpy().copy())

    def abandon(self) -> None:
        """A launch raised (an autotuner's config out of resources, whose next config is tried):
        every buffer vetted for it goes back to what it held, poison undone."""
        import torch

        with torch.no_grad():
            for t, before, _ in self.pending:
                t.copy_(before)
        self.pending = []

    def after(self, name: str, tensors: list, constexprs: dict, tile: int = 0, launch: tuple = ()) -> None:
        """``tile``: the largest tensor dimension the launch's kernel built (:func:`_tile_of`); ``launch``:
        (kernel, args, kwargs) as the learner launched it, kept for a required kernel (:func:`replay`)."""
        self.launches.append(dict(kernel=name, constexprs=constexprs, tile=tile))
        index = len(self.launches) - 1
        if name in self.required and launch:
            kernel, args, kwargs = launch
            flat = _flatten(list(args) + [v for k, v in kwargs.items() if k != "grid"])
            signature = (repr(sorted(constexprs.items())), tuple(
                (tuple(v.shape), str(v.dtype)) if hasattr(v, "untyped_storage") else repr(v)
                for v in flat if hasattr(v, "untyped_storage") or isinstance(v, (int, float, bool))))
            filled = {p: self.fill_spans[self._span(v)] for p, v in _bound_args(kernel, args, kwargs).items()
                      if hasattr(v, "untyped_storage") and self._span(v) in self.fill_spans}
            self.launched_of.setdefault(name, []).append((index, signature, (kernel, args, kwargs, filled)))
        self.tiles[name] = max(self.tiles.get(name, 0), tile)
        if name in self.required:  # what torch made for this launch's arguments prepared it
            for t in tensors:
                self.open_notes -= self.flow.get(t.untyped_storage().data_ptr(), set())
        for t in tensors:
            start, nbytes = self._span(t)
            if any(lo <= start and start + nbytes <= lo + size for lo, size in self.read_only):
                continue  # an expanded view or a derived input (or a view inside one): read, never written
            if nbytes:
                snapshot = self._bytes(t, start, nbytes).clone()
                self.regions = [r for r in self.regions if not (r[0] == start and r[1] == nbytes)]
                self.regions.append((start, nbytes, str(t.device), snapshot, t))
                self.region_launch[id(snapshot)] = index

    def written_by_launch(self, t) -> str | None:
        """None when tensor ``t`` holds exactly what launches of the learner's kernels left there:
        each byte of its elements as the latest launch whose argument covered it left it (several launches may
        write parts of it, e.g. one per batch element), or ``t`` is a dtype cast of an argument
        one launch wrote and nothing changed since (computed in float32, returned in float16)."""
        import torch

        start, nbytes = self._span(t)
        now = self._bytes(t, start, nbytes)
        covered = ~element_mask(t)  # the gaps between a strided tensor's rows need no launch
        for r_start, r_bytes, device, snapshot, _ in reversed(self.regions):
            lo, hi = max(start, r_start), min(start + nbytes, r_start + r_bytes)
            if device != str(t.device) or lo >= hi:
                continue
            fresh = ~covered[lo - start:hi - start]
            if not torch.equal(now[lo - start:hi - start][fresh], snapshot[lo - r_start:hi - r_start][fresh]):
                return "the returned tensor was changed after your kernel wrote it"
            if bool(fresh.any()):
                self.writers.add(self.region_launch.get(id(snapshot)))
            covered[lo - start:hi - start] = True
        if nbytes and bool(covered.all()):
            return None
        if self._cast_of_written(t) or self._join_of_written(t):
            return None
        return ("the returned tensor was not written by a launch of your kernel (what counts: a launch's output, "
                "its dtype cast, outputs of several launches joined along the first dimension)")

    def _join_of_written(self, t) -> bool:
        """``t`` (contiguous) holds, end to end, whole launch arguments as their launches left them (nothing
        changed since), each cast to ``t``'s dtype: ``torch.stack`` / ``torch.cat`` along the first dimension
        of one output per launch (one launch per batch element, each writing its own tensor), before or
        after a cast (computed in float32, returned in float16)."""
        import torch

        if not t.is_contiguous() or not t.numel():
            return False
        pieces = []  # the bytes of whole arguments, unchanged since their launch, as t's dtype
        for r_start, r_bytes, device, snapshot, arg in reversed(self.regions):
            if device != str(t.device) or not arg.is_contiguous() or not r_bytes or arg.is_complex() \
                    or self._span(arg) != (r_start, r_bytes) or r_bytes % arg.element_size() \
                    or arg.is_floating_point() != t.is_floating_point():
                continue
            if torch.equal(self._bytes(arg, r_start, r_bytes), snapshot):
                pieces.append((snapshot.view(arg.dtype).to(t.dtype).view(torch.uint8), id(snapshot)))
        start, nbytes = self._span(t)
        now, offset, used = self._bytes(t, start, nbytes), 0, set()
        while offset < nbytes:
            piece = next(((p, key) for p, key in pieces if offset + p.numel() <= nbytes
                          and torch.equal(now[offset:offset + p.numel()], p)), None)
            if piece is None:
                return False
            offset += piece[0].numel()
            used.add(self.region_launch.get(piece[1]))
        self.writers |= used
        return True

    def _cast_of_written(self, t) -> bool:
        import torch

        for r_start, r_bytes, device, snapshot, arg in reversed(self.regions):
            if device != str(t.device) or arg.dtype == t.dtype or arg.shape != t.shape:
                continue
            if not torch.equal(self._bytes(arg, r_start, r_bytes), snapshot):
                continue  # changed since the launch
            if self._same_bytes(t.contiguous(), arg.to(t.dtype).contiguous()):
                self.writers.add(self.region_launch.get(id(snapshot)))
                return True
        return False


TRACKER: LaunchTracker | None = None
LAUNCHES_SENT = 32  # distinct launches (kernel, constexprs, sizes) of a call the parent judges, the latest


def _distinct_launches(launches: list, keep: int = LAUNCHES_SENT) -> list:
    """The latest ``keep`` distinct launches, in launch order: one launch per batch element or split
    repeats one launch, so an odd one is not pushed out by repeats of another."""
    seen, out = set(), []
    for launch in reversed(launches):
        key = (launch["kernel"], tuple(sorted(launch["constexprs"].items())), launch.get("tile", 0))
        if key not in seen:
            seen.add(key)
            out.append(launch)
            if len(out) == keep:
                break
    return out[::-1]
DERIVED_MAX_COUNT = 64  # inputs the learner computed outside the kernel, sent to the parent to check
DERIVED_MAX_BYTES = 32 << 20
# a derived input larger than twice the largest input (and this many elements more), unless it is an input
# padded with one fill value (whole blocks instead of masks), is no preparation of the inputs but a product
# of them (S, P, dS: Nq x Nk)
DERIVED_SLACK = 256
# torch_only: the part computes with torch tensors (exercise 15): the bridges from a tensor to another
# array library are refused in the learner's calls (TORCH_BRIDGES)
TORCH_POLICY = ThreadPolicy(mode=None, names=None, active=False, strict=False, torch_only=False)
# Tensor methods that hand a tensor's memory or values to another library (NumPy, DLPack, ctypes, Python
# lists) or run a Python callback per element: in a torch_only part the work would leave the grader's sight
# (LiveBytes counts torch's operators only). What each reaches __torch_function__ as, under torch 2.13: the
# method itself (np.asarray(t) and np.array(t) via Tensor.__array__, np.from_dlpack(t) via Tensor.__dlpack__,
# pickle and torch.save via TensorBase.untyped_storage); torch.utils.dlpack.to_dlpack (torch._C._to_dlpack)
# does not reach it and is wrapped instead (_forbid_dlpack_functions).
TORCH_BRIDGES = ("numpy", "__array__", "__array_interface__", "__array_struct__", "__cuda_array_interface__",
                 "__dlpack__", "data_ptr", "untyped_storage", "storage", "_typed_storage", "tolist",
                 "apply_", "map_", "map2_")


# Values read one at a time into Python (Tensor.item, float(t), int(t), bool(t): aten._local_scalar_dense)
# would move the work out of sight as the bridges do, element by element. A torch_only call may read at most
# SCALAR_READ_LIMIT numbers (floating-point or integer tensors: the inputs' values, or their bits viewed as
# integers) and BOOL_READ_LIMIT truth values (an `if` on a tile's mask); the memory case's inputs hold
# about 67,000 numbers, its keys alone 32,768, and its 16 x 16 tiles are 8,192 pairs in forward and as many
# in backward (a sanity check reading one number per pair in each passes).
SCALAR_READ_LIMIT = 24576
BOOL_READ_LIMIT = 1 << 18
SCALAR_READS = {"numbers": 0, "truths": 0}  # in the call in progress


def _count_scalar_read(tensor) -> None:
    """A torch_only call read one value of ``tensor`` into Python: refuse it past the limits."""
    import torch

    kind = "truths" if getattr(tensor, "dtype", None) is torch.bool else "numbers"
    SCALAR_READS[kind] += 1
    limit = BOOL_READ_LIMIT if kind == "truths" else SCALAR_READ_LIMIT
    if SCALAR_READS[kind] > limit:
        if kind == "truths":
            what = f"reading more than {limit} truth values (bool(t)) into Python one at a time"
        else:
            what = (f"reading more than {limit} numbers (.item(), float(t), int(t)) into Python one at a time "
                    f"(a truth value per tile, as in `if mask.any():`, is counted apart, up to {BOOL_READ_LIMIT})")
        _bridge_forbidden("Tensor.item or float(t)", what)


# A torch_only exercise, from its module's load on: the ctypes operations that turn an address into memory
# to read, C functions looked up other than the GPU libraries' that torch calls, ctypes' own copy and cast
# functions and their addresses (replaced by refusals, _refuse_ctypes_copies), and the process's memory as
# a file. Made at import, such an object would read tensors' memory in the call without another ctypes
# operation (a memoryview over an address range, followed by struct). Other ctypes use is left alone:
# torch.cuda.device_count() loads NVML and calls it through ctypes.
RAW_MEMORY = [False]
RAW_MEMORY_EVENTS = frozenset(("ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                               "ctypes.addressof", "ctypes.PyObj_FromPtr"))
# the C functions a torch_only exercise may look up through ctypes: those of the GPU libraries torch itself
# calls that way (NVML for the device count, the CUDA driver and NVRTC, ROCm's HIP, NCCL: their API names
# are the prefix and a capital, nvmlInit, cuGetErrorString), none of their copies (cuMemcpy, hipMemset, which
# also reach host memory). Any other name (the C library's memcpy under any name, __memcpy_chk; libcurl's
# curl_easy_escape, which returns any bytes escaped) is refused.
ALLOWED_SYMBOL = re.compile(r"(nvml|cu|nvrtc|hip|nccl)[A-Z]")
REFUSED_GPU_SYMBOL = re.compile(r"(?i)mem(cpy|set|move)|copy")
CTYPES_PRIMITIVES = ("memmove", "memset", "cast", "string_at", "wstring_at")


def _refuse_ctypes_copies() -> None:
    """ctypes' own memmove, memset, cast, string_at and wstring_at take raw addresses, and calling them raises
    no audit event (Python 3.11): in a torch_only exercise they are replaced by refusals before the module
    loads, and their addresses (``ctypes._memmove_addr`` and the like, from which CFUNCTYPE rebuilds them)
    are taken out of ``ctypes`` and ``_ctypes``: reading one is refused."""
    import _ctypes
    import ctypes

    originals = {}
    for name in CTYPES_PRIMITIVES:
        def refusing(*args, _name=name, **kwargs):
            _bridge_forbidden("ctypes", f"reading memory through ctypes (ctypes.{_name})")

        refusing.__name__ = name
        original = getattr(ctypes, name)
        if not getattr(original, "flashlab_refusal", False):
            originals[id(original)] = (original, refusing)
        refusing.flashlab_refusal = True
        setattr(ctypes, name, refusing)
    # modules that imported them before (torch.xpu: from ctypes import cast) hold the originals: replaced there too
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for key, value in list(space.items()):
            if id(value) in originals and originals[id(value)][0] is value:
                space[key] = originals[id(value)][1]
    hidden = {f"_{name}_addr" for name in CTYPES_PRIMITIVES}
    for module in (ctypes, _ctypes):
        for name in hidden:
            module.__dict__.pop(name, None)
        earlier = module.__dict__.get("__getattr__")

        def missing(name, _earlier=earlier, _module=module.__name__):
            if name in hidden:
                _bridge_forbidden("ctypes", f"reading memory through ctypes ({_module}.{name})")
            if _earlier is not None:
                return _earlier(name)
            raise AttributeError(f"module {_module!r} has no attribute {name!r}")

        module.__getattr__ = missing


def _process_memory(args) -> bool:
    path = args[0] if args else None
    if isinstance(path, bytes):
        path = path.decode(errors="replace")
    return isinstance(path, str) and path.startswith("/proc/") and path.rstrip("/").endswith(("/mem", "/pagemap"))


def _audit_ctypes(event: str, args) -> None:
    """An audit hook (it cannot be removed): in a torch_only exercise, from its module's load on, refuse what
    reads memory without torch (RAW_MEMORY_EVENTS, a C function looked up other than ALLOWED_SYMBOL's,
    /proc/<pid>/mem)."""
    if not RAW_MEMORY[0] or not event.startswith(("ctypes.", "open")):
        return
    refused = event in RAW_MEMORY_EVENTS
    if event.startswith("ctypes.dlsym") and len(args) > 1:
        name = args[1].decode(errors="replace") if isinstance(args[1], bytes) else args[1]
        if not (isinstance(name, str) and ALLOWED_SYMBOL.match(name) and not REFUSED_GPU_SYMBOL.search(name)):
            _bridge_forbidden("ctypes", f"calling the C function {name!r} through ctypes (only the GPU libraries' "
                              "functions that torch calls so may be looked up)")
    if refused:
        _bridge_forbidden("ctypes", f"reading memory through ctypes ({event})")
    if event == "open" and _process_memory(args):
        _bridge_forbidden("/proc/self/mem", "reading the process's memory as a file")


def _install_audit() -> None:
    """Add _audit_ctypes to the process's audit hooks, once (they cannot be removed)."""
    if not AUDITING[0]:
        AUDITING[0] = True
        sys.addaudithook(_audit_ctypes)


AUDITING = [False]


def _bridge_refused(name: str) -> None:
    """In a torch_only part's watched call: refuse ``Tensor.<name>`` as a forbidden call."""
    _bridge_forbidden(f"Tensor.{name}")


BRIDGE_WHY = ["exercise 15 computes with torch tensors: {what} moves the work out of the grader's sight; keep the "
              "tiles as torch tensors"]  # a Triton exercise in the interpreter sets its own


def _bridge_forbidden(qual: str, what: str | None = None) -> None:
    """Refuse ``qual`` (what the learner called; ``what``: what it did, if not the call itself)."""
    why = BRIDGE_WHY[0].format(what=what or qual)
    shown = f"{qual} ({why})"  # the report names the call with this
    if shown not in CALLS:
        CALLS.append(shown)
    raise ForbiddenCall(why)


def _bridge_watched() -> bool:
    return TORCH_POLICY["active"] and TORCH_POLICY["torch_only"]


def _torch_op_forbidden(name: str, args: tuple = ()) -> bool:
    """Attention and softmax are always forbidden; in a part that must launch a kernel, matmuls too
    (but a batch of dot products, one number per pair of rows: D = rowsum(dO * O) written as
    einsum("zmd,zmd->zm", do, o) runs as a bmm of (1, d) by (d, 1)). Any other operator outside
    TORCH_ALLOWED run after a launch of the part's kernel is noted (``LaunchTracker.after_launch``): it
    prepared the next launch if one follows (D for one batch element, a scaled q), and finished the result
    in torch if none does, which :func:`_verify_launch` refuses."""
    if any(w in name for w in TORCH_DENIED_WORDS):
        return True
    if not TORCH_POLICY["strict"]:
        return False
    return name in TORCH_MATMULS and not _row_dots(name, args)


def _note_after_launch(name: str, args: tuple, kwargs: dict, out) -> None:
    """After a launch of the part's required kernel: an operator outside TORCH_ALLOWED is noted, and what
    any operator makes inherits the notes of what it was made from (a copy of a noted result carries its
    note). A later required launch given a tensor that carries notes consumes them (it was prepared for
    that launch); a note no launch consumed that reaches a returned tensor is refused at the end of the call
    (:func:`_verify_launch`): the result finished in torch. One that reaches nothing returned was a check."""
    if TRACKER is None or not TORCH_POLICY["strict"] or not any(
            launch["kernel"] in TRACKER.required for launch in TRACKER.launches):
        return
    feeds: set = set()
    for t in _flatten(list(args) + list(kwargs.values())):
        if hasattr(t, "untyped_storage"):
            feeds |= TRACKER.flow.get(t.untyped_storage().data_ptr(), set())
    if name not in TORCH_ALLOWED:
        feeds = feeds | {len(TRACKER.after_launch)}
        TRACKER.open_notes.add(len(TRACKER.after_launch))
        TRACKER.after_launch.append((name, _learner_line()))
    for t in _flatten(list(out) if isinstance(out, (tuple, list)) else [out]):
        if hasattr(t, "untyped_storage"):
            ptr = t.untyped_storage().data_ptr()
            if feeds or ptr in TRACKER.flow:  # in place, the target's own notes are among the inputs' (replaced:
                TRACKER.flow[ptr] = feeds  # a fresh tensor at a freed one's address carries nothing of it)


def _learner_line() -> int | None:
    """The line of the learner's module that is running now (the innermost such frame), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if TRACKER is not None and frame.f_globals.get("__name__") in TRACKER.learner_modules:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _row_dots(name: str, args: tuple) -> bool:
    """A matmul whose every product is one number: (..., 1, d) @ (..., d, 1), or a single dot."""
    if name in ("dot", "vdot"):
        return True
    if name not in ("mm", "bmm", "addmm", "baddbmm"):
        return False
    pair = args[-2:] if name in ("addmm", "baddbmm") else args[:2]
    shapes = [tuple(getattr(a, "shape", ())) for a in pair]
    return len(shapes) == 2 and all(len(sh) >= 2 for sh in shapes) and shapes[0][-2] == 1 and shapes[1][-1] == 1


class OwnStorages:
    """A torch_only call's storages: those its aten operators allocated (a return that is not a view) and
    the call's inputs. An operator that writes into any other (in place, out=, set_) writes memory the call
    did not make: a buffer made at import, a tensor over NumPy memory (torch.from_numpy, torch.frombuffer) or
    a storage of the learner's own, which NumPy or the storage's address then reads out of the grader's
    sight. :meth:`after` says so."""

    def __init__(self):
        self.made: set = set()
        self.effects: dict = {}

    def reset(self, inputs: list) -> None:
        self.made = {_storage_key(t) for t in inputs}

    def after(self, func, args: tuple, kwargs: dict, out) -> bool:
        """Note what ``func`` allocated; True when it wrote into a storage the call did not make."""
        effects = self.effects.get(func)
        if effects is None:
            try:
                effects = self.effects[func] = LiveBytes._effects(self, func)
            except AttributeError:  # not an aten operator overload
                return False
        returns, written, n_returns = effects
        targets = []
        for i, name in written:
            value = kwargs[name] if name in kwargs else args[i] if i < len(args) else None
            targets += value if isinstance(value, (tuple, list)) else [value]
        keys = [_storage_key(t) for t in targets if hasattr(t, "untyped_storage")]
        foreign = any(key is not None and key not in self.made for key in keys)
        values = out if n_returns > 1 and isinstance(out, (tuple, list)) else (out,)
        for i in returns:
            for t in (values[i] if i < len(values) and isinstance(values[i], (tuple, list)) else
                      [values[i]] if i < len(values) else []):
                if hasattr(t, "untyped_storage") and not any(t is w for w in targets):
                    self.made.add(_storage_key(t))
        return foreign


OWN_STORAGES = OwnStorages()


class LiveBytes:
    """The bytes of torch tensors the learner's call holds at once, counted exactly inside the child
    (a memory case only).

    Every storage an aten operator allocates or writes during the call (a return that is not a view,
    or an argument the operator writes: out=, in place, ``set_``) is live from the operator that
    first produced it until its last tensor is freed (a weak reference to the storage: torch keeps a
    storage's Python object as long as the storage lives). A view, or a storage only read, costs
    nothing; the call's inputs are never counted, and a buffer held before the call (a pool
    allocated at import) counts in full from the first operator that writes it. The same code gives
    the same count on every run and on any device, unlike the resident size, where memory freed and
    kept by the allocator is reused without a trace.

    Not counted here: memory torch does not allocate (NumPy arrays, ctypes, ``mmap``: the resident
    size measured from outside sees them), operators run in a thread started from C (threads started
    in Python enter the dispatch mode: :class:`ThreadWatch`) or with the dispatch mode switched off
    (tampering, as with every in-process watch)."""

    TOP = 3  # the largest storages live at the peak, named in the report

    def __init__(self, inputs: list):
        self.inputs = {_storage_key(t) for t in inputs}
        self.live: dict = {}  # storage key -> [nbytes, (shape, dtype, operator), weak reference]
        self.now = self.peak = 0
        self.at_peak: list = []
        self.effects: dict = {}  # operator -> (returns that allocate or write, arguments written, returns)

    def _effects(self, func):
        schema = func._schema
        returns = tuple(i for i, r in enumerate(schema.returns) if r.alias_info is None or r.alias_info.is_write)
        written = tuple((i, a.name) for i, a in enumerate(schema.arguments)
                        if a.alias_info is not None and a.alias_info.is_write)
        effects = self.effects[func] = (returns, written, len(schema.returns))
        return effects

    def after(self, func, args: tuple, kwargs: dict, out) -> None:
        """After operator ``func`` ran: count the storages it allocated or wrote."""
        effects = self.effects.get(func)
        if effects is None:
            try:
                effects = self._effects(func)
            except AttributeError:  # not an aten operator overload
                return
        returns, written, n_returns = effects
        values = out if n_returns > 1 and isinstance(out, (tuple, list)) else (out,)
        for i in returns:
            if i < len(values):
                self._see(values[i], func)
        for i, name in written:
            self._see(kwargs[name] if name in kwargs else args[i] if i < len(args) else None, func)

    def _see(self, value, func) -> None:
        if isinstance(value, (tuple, list)):
            for v in value:
                self._see(v, func)
            return
        try:
            storage = value.untyped_storage()
            nbytes = storage.nbytes()
        except (AttributeError, RuntimeError, TypeError, NotImplementedError):
            return  # not a tensor, or a tensor without storage
        key = storage._cdata
        entry = self.live.get(key)
        if entry is None:
            if key in self.inputs:
                return
            entry = self.live[key] = [0, None, weakref.ref(storage, lambda _, key=key: self._free(key))]
        if entry[0] == nbytes:
            return
        self.now += nbytes - entry[0]
        entry[0], entry[1] = nbytes, (value.shape, value.dtype, func)
        if self.now > self.peak:
            self.peak = self.now
            self.at_peak = sorted((e[:2] for e in self.live.values()), key=lambda e: -e[0])[:self.TOP]

    def _free(self, key) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.now -= entry[0]

    def largest(self) -> list:
        """[[bytes, "shape dtype from aten.op"], ...]: the largest storages live at the peak."""
        return [[int(n), f"{tuple(shape)} {str(dtype).replace('torch.', '')} from aten."
                         f"{getattr(getattr(func, 'overloadpacket', None), '__name__', func)}"]
                for n, (shape, dtype, func) in self.at_peak]


def _storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except (AttributeError, RuntimeError, TypeError, NotImplementedError):
        return None


LIVE: list = [None]  # the LiveBytes of the memory case in progress


def _install_torch_mode(policy: str) -> None:
    """Watch every aten operator during the learner's calls (a dispatch mode sees torch.ops.aten.* too)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    plain = (torch.Tensor, torch.nn.Parameter)  # any other type in an operator's arguments is refused

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if TORCH_POLICY["active"] and GUARD[0] is not None:
                GUARD[0].check_node()
            if TORCH_POLICY["active"]:
                namespace = getattr(func, "namespace", "aten")
                if namespace not in TORCH_NAMESPACES:
                    # an operator of the learner's own (torch.library): the mode is popped while it runs,
                    # so its body would run unwatched (forbidden calls, LiveBytes)
                    qual = f"torch operator {namespace}.{getattr(func, '_opname', func)}"
                    if qual not in CALLS:
                        CALLS.append(qual)
                    raise ForbiddenCall(f"{qual} is not one of torch's own operators: the grader cannot see "
                                        "inside it; call torch's operators directly")
                odd = [t for t in types_ if t not in plain]
                if odd:
                    # a tensor subclass's own __torch_dispatch__ runs with the mode popped: unwatched, as above
                    qual = f"tensor type {odd[0].__module__}.{odd[0].__qualname__}"
                    if qual not in CALLS:
                        CALLS.append(qual)
                    raise ForbiddenCall(f"{qual} is not torch.Tensor: the grader cannot see inside its "
                                        "__torch_dispatch__; use plain tensors")
                name = func.overloadpacket.__name__
                if name == "_local_scalar_dense" and _bridge_watched():
                    _count_scalar_read(args[0] if args else None)
                bad = _torch_op_forbidden(name, args)
                if bad:
                    qual = f"torch aten.{name}"
                    if qual not in CALLS:
                        CALLS.append(qual)
                    raise ForbiddenCall(f"{qual} does the computation in torch, not in your code")
            out = func(*args, **(kwargs or {}))
            if TORCH_POLICY["active"] and TRACKER is not None and TRACKER.launches:
                TORCH_POLICY["active"] = False  # the grader's own look-ups below
                try:
                    _note_after_launch(func.overloadpacket.__name__, args, kwargs or {}, out)
                finally:
                    TORCH_POLICY["active"] = True
            if LIVE[0] is not None and TORCH_POLICY["active"]:
                TORCH_POLICY["active"] = False  # the grader's own untyped_storage() calls, not the learner's
                try:
                    LIVE[0].after(func, args, kwargs or {}, out)
                finally:
                    TORCH_POLICY["active"] = True
            if _bridge_watched():
                TORCH_POLICY["active"] = False
                try:
                    foreign = OWN_STORAGES.after(func, args, kwargs or {}, out)
                finally:
                    TORCH_POLICY["active"] = True
                if foreign:
                    _bridge_forbidden(f"aten.{func.overloadpacket.__name__} into a tensor the call did not make",
                                      "writing into a tensor the call did not make (one made at import, a view of "
                                      "NumPy memory such as torch.from_numpy's, or a storage of your own)")
            return out

    mode = Watch()
    mode.__enter__()
    TORCH_POLICY["mode"] = mode
    try:  # torch imports torch._dynamo at the first operator a dispatch mode sees: 1 s with its bytecode cached,
        import torch._dynamo  # noqa: F401  over 10 s without (an H200 machine): here, not in the learner's timed call
    except Exception:  # noqa: BLE001  an install without dynamo: nothing to move
        pass
    from torch.overrides import TorchFunctionMode

    bridges = {}  # the function torch hands __torch_function__ -> its name in TORCH_BRIDGES
    for cls in (torch.Tensor, torch._C.TensorBase):
        for name in TORCH_BRIDGES:
            attr = vars(cls).get(name)
            if attr is None:
                continue
            bridges[attr] = name
            if hasattr(attr, "__get__") and not callable(attr):  # a property: its getter is what arrives
                bridges[attr.__get__] = name
    # the backward pass runs the learner's Function.backward (and hooks) inside Tensor.backward /
    # torch.autograd.backward / grad, whose __torch_function__ runs with this mode popped: the engine's
    # run_backward (called from them, not through __torch_function__) pushes it again
    from torch.autograd import variable

    passes = {torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad}

    class Repush:
        def __init__(self, engine, mode):
            self.engine, self.mode = engine, mode

        def run_backward(self, *args, **kwargs):
            with self.mode:
                return self.engine.run_backward(*args, **kwargs)

        def __getattr__(self, attr):
            return getattr(self.engine, attr)

    def bridge_name(func):
        try:
            name = bridges.get(func)
            if name is None and type(getattr(func, "__self__", None)) is property:
                name = bridges.get(func.__self__)
            return name
        except TypeError:  # unhashable
            return None

    class Names(TorchFunctionMode):  # the public name (F.scaled_dot_product_attention), before it decomposes
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if TORCH_POLICY["active"] and any(w in name for w in TORCH_DENIED_WORDS):
                qual = f"torch {name}"
                if qual not in CALLS:
                    CALLS.append(qual)
                raise ForbiddenCall(f"{qual} does the computation in torch, not in your code")
            if _bridge_watched():
                bridge = bridge_name(func)
                if bridge is not None:
                    _bridge_refused(bridge)
                if func in passes:
                    engine = variable.Variable._execution_engine
                    variable.Variable._execution_engine = Repush(engine, self)
                    try:
                        return func(*args, **(kwargs or {}))
                    finally:
                        variable.Variable._execution_engine = engine
            return func(*args, **(kwargs or {}))

    names = Names()
    names.__enter__()
    TORCH_POLICY["names"] = names
    _forbid_dlpack_functions(torch)
    _count_printed_tensors(torch)
    _install_audit()


def _count_printed_tensors(torch) -> None:
    """repr, str, format or print of a tensor turns its values into text, outside torch, and torch's printing
    reads them with the watch popped: in a torch_only part's watched call every element of a printed tensor
    counts as a number read into Python (SCALAR_READ_LIMIT), so a debug print passes and bulk reading does not."""
    import torch._tensor_str as tensor_str

    original = tensor_str._str
    if getattr(original, "_flashlab_bridge", False):
        return

    def counting(self, *args, **kwargs):
        if _bridge_watched():
            n = 1
            for size in getattr(self, "shape", ()):
                n *= int(size)
            SCALAR_READS["numbers"] += n
            if SCALAR_READS["numbers"] > SCALAR_READ_LIMIT:
                _bridge_forbidden("repr or print of a tensor", f"printing tensors of more than {SCALAR_READ_LIMIT} "
                                  "numbers in all (repr, str, format, print: each element is counted as a number read "
                                  "into Python; remove debug prints of whole tensors)")
        return original(self, *args, **kwargs)

    counting._flashlab_bridge = True
    tensor_str._str = counting


def _forbid_dlpack_functions(torch) -> None:
    """torch.utils.dlpack.to_dlpack (torch._C._to_dlpack, torch.to_dlpack) does not reach
    __torch_function__: in a torch_only part's watched call it is refused by a wrapper."""
    import torch.utils.dlpack as dlpack

    for module, attr in ((torch._C, "_to_dlpack"), (torch._C, "_to_dlpack_versioned"), (torch, "to_dlpack"),
                         (dlpack, "to_dlpack")):
        original = getattr(module, attr, None)
        if original is None or getattr(original, "_flashlab_bridge", False):
            continue

        def refusing(*args, _original=original, **kwargs):
            if _bridge_watched():
                _bridge_forbidden("torch.utils.dlpack.to_dlpack")
            return _original(*args, **kwargs)

        refusing._flashlab_bridge = True
        refusing.__name__ = getattr(original, "__name__", attr)
        setattr(module, attr, refusing)


class _WatchTorchOnImport(importlib.abc.MetaPathFinder):
    """NumPy exercises: torch is not imported up front (slow); watch it from its first import."""

    def __init__(self):
        self.done = False

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch" or self.done:
            return None
        self.done = True
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_watch(module, _exec=exec_module):
                    _exec(module)
                    active, TORCH_POLICY["active"] = TORCH_POLICY["active"], False
                    try:
                        _install_torch_mode("numpy")
                    finally:
                        TORCH_POLICY["active"] = active

                spec.loader.exec_module = exec_and_watch
                return spec
        return None


def prepare_triton(learner_modules: set) -> str:
    """Import torch and triton (the interpreter where there is no GPU); wrap kernel launches."""
    global TRACKER, BOUNDS, GUARDS
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            from flashlab.kernels import _mode

            _mode.triton()  # the interpreter as the library sets it up (and repairs it where needed)
        except ImportError:
            pass
    else:
        torch.zeros(1, device="cuda")  # open the device before any privilege drop
    import triton  # noqa: F401
    from triton.runtime import jit as triton_jit

    TRACKER = LaunchTracker(learner_modules)
    classes = [triton_jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    for cls in classes:
        cls.run = _tracked_run(cls.run)
    if device == "cpu":
        _watch_interpreter_tiles()
    if device != "cpu":
        GUARDS = StoreGuards()
    else:
        BOUNDS = MemoryBounds()
        BOUNDS.install()
        import warnings

        # NumPy's warnings from inside the interpreter ("invalid value encountered in subtract" at a line
        # of interpreter.py) would be reported as printed by the learner; what they mean (NaN, inf) shows
        # in the output the grader compares
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    _forbid_int_to_pointer()
    _install_torch_mode("triton")
    return device


BOUNDS: MemoryBounds | None = None  # set where kernels run in the interpreter
GUARDS: StoreGuards | None = None  # set where kernels are compiled for a GPU


def _named_tensors(kernel, args: tuple, kwargs: dict) -> list:
    """(parameter name, tensor) for every tensor a launch was given (inside tuples: name[i])."""
    names = [name for name, _ in _params(kernel)]
    out = []

    def add(label, value, depth=0):
        if hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
            out.append((label, value))
        elif hasattr(getattr(value, "base", None), "data_ptr"):  # a host-side TensorDescriptor: its tensor
            add(f"{label}.base", value.base, depth + 1)
        elif isinstance(value, (tuple, list)) and depth < 8:
            for i, v in enumerate(value):
                add(f"{label}[{i}]", v, depth + 1)

    for i, value in enumerate(args):
        add(names[i] if i < len(names) else f"argument {i}", value)
    for key, value in kwargs.items():
        add(key, value)
    return out


def _forbid_int_to_pointer() -> None:
    """A kernel may not turn an integer into a pointer: memory reached through an address passed as
    a number (x.data_ptr()) is memory the launch tracker never sees."""
    try:
        from triton.language.semantic import TritonSemantic
    except ImportError:  # an older Triton: module-level functions, not covered
        return
    cast = TritonSemantic.cast

    def checked_cast(self, input, dst_ty, *args, **kwargs):
        src, dst = getattr(getattr(input, "type", None), "scalar", None), getattr(dst_ty, "scalar", dst_ty)
        if src is not None and src.is_int() and dst.is_ptr():
            what = "an integer cast to a pointer in a kernel"
            if what not in CALLS:
                CALLS.append(what)
            raise ForbiddenCall(f"{what}: pass tensors to the kernel (the grader follows what they hold)")
        return cast(self, input, dst_ty, *args, **kwargs)

    TritonSemantic.cast = checked_cast


def _flatten(values: list, depth: int = 0) -> list:
    """Kernel arguments with tuples and lists opened (Triton passes tuples of tensors through)."""
    out = []
    for v in values:
        if isinstance(v, (tuple, list)) and depth < 8:
            out += _flatten(list(v), depth + 1)
        else:
            out.append(v)
    return out


def _corrupted(kernel: str, exc: Exception) -> RuntimeError:
    return RuntimeError(
        f"after {kernel} ran, the tensors it was given could no longer be read back ({type(exc).__name__} in the "
        "grader's check): memory next to them was overwritten. In Triton's CPU interpreter a tl.store past the end "
        "of a tensor does this: check each store's mask, and the strides and offsets of its pointers")


def _params(kernel) -> list[tuple[str, bool]]:
    """(name, is a tl.constexpr) of a Triton kernel's parameters, compiled or interpreted."""
    params = getattr(kernel, "params", None)
    if params:
        return [(p.name, bool(getattr(p, "is_constexpr", False))) for p in params]
    import inspect

    try:
        signature = inspect.signature(kernel.fn)
    except (AttributeError, TypeError, ValueError):
        return []
    return [(name, "constexpr" in str(getattr(p.annotation, "__name__", p.annotation)))
            for name, p in signature.parameters.items()]


def _constexpr_params(kernel) -> list[tuple[int, str]]:
    """(position, name) of a Triton kernel's tl.constexpr parameters, compiled or interpreted."""
    return [(i, name) for i, (name, constexpr) in enumerate(_params(kernel)) if constexpr]


def _launch_constexprs(kernel, args, kwargs) -> dict:
    """{name: int} of a launch's integer tl.constexpr parameters as Triton binds them: by position, by
    keyword or by the signature's default, an int wrapped in tl.constexpr(256) as that int; an int
    given by keyword to a runtime parameter (N_Q=nq) is not one. Read by Part.launch_blocks and
    Part.max_launch_block (tile sizes) and by the cases built from the learner's tiles."""
    import inspect

    from triton.language import constexpr

    try:
        defaults = {name: p.default for name, p in inspect.signature(kernel.fn).parameters.items()}
    except (AttributeError, TypeError, ValueError):
        defaults = {}
    out = {}
    for index, param in _constexpr_params(kernel):
        value = args[index] if index < len(args) else kwargs.get(param, defaults.get(param))
        value = value.value if isinstance(value, constexpr) else value
        if isinstance(value, int) and not isinstance(value, bool):
            out[param] = int(value)
    return out


# The largest tensor dimension a kernel builds is its tile, however it is written (tl.arange over a constexpr,
# a literal or a global; a block pointer's shape; an int subclass as a constexpr): Part.max_launch_block and
# Part.launch_blocks judge it. The interpreter's tensors are counted as they are made (_watch_interpreter_tiles);
# a compiled kernel's are read from its Triton IR once.
TILE_BUILT = [0]  # in the interpreter: the largest dimension of a tensor made since the launch began
_IR_TILES: dict = {}  # id of a compiled kernel: (the kernel, its largest tensor dimension)
_IR_TENSOR = re.compile(r"tensor<((?:\d+x)+)")


def _watch_interpreter_tiles() -> None:
    """Count the dimensions of every tensor the interpreter makes (its TensorHandle), into TILE_BUILT."""
    try:
        from triton.runtime.interpreter import TensorHandle
    except ImportError:
        return
    init = TensorHandle.__init__
    if getattr(init, "flashlab_watch", False):
        return

    def watched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        shape = getattr(getattr(self, "data", None), "shape", ())
        if shape and max(shape) > TILE_BUILT[0]:
            TILE_BUILT[0] = int(max(shape))

    watched.flashlab_watch = True
    TensorHandle.__init__ = watched


def _tile_of(result) -> int:
    """The largest tensor dimension of the launch that returned ``result``: a compiled kernel's from its
    Triton IR, else what the interpreter counted."""
    asm = getattr(result, "asm", None)
    if isinstance(asm, dict) and isinstance(asm.get("ttir"), str):
        key = id(result)
        if key not in _IR_TILES:
            dims = [int(d) for m in _IR_TENSOR.finditer(asm["ttir"]) for d in m.group(1).split("x") if d]
            _IR_TILES[key] = (result, max(dims, default=0))
        return _IR_TILES[key][1]
    return TILE_BUILT[0]


KERNEL_NAMES: dict = {}  # id(the kernel's Python function) -> the name the learner's module binds it to


def _tracked_run(run):
    def tracked(self, *args, **kwargs):
        fn = getattr(self, "fn", None)
        module, name = getattr(fn, "__module__", "") or "", getattr(fn, "__name__", "?")
        name = KERNEL_NAMES.get(id(fn), name)
        if module == "flashlab" or module.startswith("flashlab."):
            _forbidden(f"{module}.{name} (a flashlab kernel)")
        if kwargs.get("warmup"):
            return run(self, *args, **kwargs)
        active = TORCH_POLICY["active"]
        if module not in TRACKER.learner_modules:  # not tracked (a kernel of another module); still checked
            TRACKER.elsewhere.append((name, module))
            try:
                return _run_checked(run, self, args, kwargs, active)
            finally:
                TORCH_POLICY["active"] = active
        flat = _flatten(list(args) + list(kwargs.values()))
        tensors = [a for a in flat if hasattr(a, "data_ptr") and hasattr(a, "untyped_storage")]
        scalars = [a for a in flat if isinstance(a, float)]
        TORCH_POLICY["active"] = False  # the grader's own copies and fills

        def launch():
            try:
                return _run_checked(run, self, args, kwargs, active)
            except BaseException:
                TRACKER.abandon()
                raise

        try:
            TRACKER.before(tensors, scalars)
            TILE_BUILT[0] = 0
            poisoned, out_of_bounds = TRACKER.poisoned(), False
            try:
                result = launch()
            except Exception as exc:  # noqa: BLE001
                if not poisoned or not isinstance(_shown(exc), OutOfBounds):
                    raise
                out_of_bounds = True  # on the grader's poison, maybe not on the learner's values: run as given
            if out_of_bounds:
                TILE_BUILT[0] = 0
                result = launch()
                TRACKER.plain(poisoned)
                rerun = False
            else:
                try:
                    rerun = TRACKER.unwritten()
                except Exception as exc:  # noqa: BLE001  the launch broke the process's memory
                    raise _corrupted(name, exc) from None
            if rerun:
                result = launch()
            constexprs = _launch_constexprs(self, args, kwargs)
            try:
                TRACKER.after(name, tensors, constexprs, _tile_of(result), (self, args, kwargs))
            except Exception as exc:  # noqa: BLE001
                raise _corrupted(name, exc) from None
        finally:
            TORCH_POLICY["active"] = active
        return result

    tracked.untracked = run  # the launch without the tracker (replay() launches on the grader's own inputs)
    return tracked


def _run_checked(run, kernel, args: tuple, kwargs: dict, active: bool):
    """One launch with its accesses outside its tensors checked: by :class:`MemoryBounds` under the
    interpreter, :class:`StoreGuards` on a GPU. ``active``: the learner's torch policy during the
    launch itself; the grader's own copies and checks run with it off, and it is left off."""
    def policy(on: bool) -> None:
        TORCH_POLICY["active"] = active and on

    policy(False)
    named = _named_tensors(kernel, args, kwargs)
    if GUARDS is not None:
        return GUARDS.launch(run, kernel, args, kwargs, named, policy)
    before = []
    if BOUNDS is not None:
        BOUNDS.set(named)
        before = [(name, t, t.clone()) for name, t in named if hasattr(t, "untyped_storage") and t.device.type == "cpu"]
    policy(True)
    try:
        result = run(kernel, *args, **kwargs)
    finally:
        policy(False)
        if BOUNDS is not None:
            BOUNDS.spans = []
    if BOUNDS is not None:
        changed = BOUNDS.unstored(before)
        if changed is not None:
            shown = (f"torch, NumPy or ctypes on {changed} inside the kernel (a Triton kernel computes with its loads "
                     f"and stores: in the CPU interpreter its body is Python, and {changed} changed where no tl.store "
                     "of the launch reached)")
            if shown not in CALLS:
                CALLS.append(shown)
            raise ForbiddenCall(shown)
    return result


# ----------------------------------------------------------------------------- isolation
def set_limits(limits: dict) -> None:
    import resource

    for key, name in (("cpu_s", "RLIMIT_CPU"), ("as_bytes", "RLIMIT_AS"), ("fsize_bytes", "RLIMIT_FSIZE")):
        value = limits.get(key)
        if value:
            try:
                resource.setrlimit(getattr(resource, name), (int(value), int(value)))
            except (ValueError, OSError):
                pass


def drop_privileges(uid) -> bool:
    if uid is None or os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    return True


def leave_root_namespace() -> bool:
    """Root that cannot drop to ``nobody`` (e.g. Python itself lives under /root): move into a user
    namespace of our own. File access is unchanged (the grader's files stay writable: the parent's
    digests catch that), but capabilities over the parent's processes are gone, so with the
    parent non-dumpable its /proc/<pid>/fd (its stdout) is closed to us. Needs a single thread."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0  # CLONE_NEWUSER
    except (OSError, AttributeError):
        return False


# ----------------------------------------------------------------------------- the learner's calls
def _learner_frames(exc, filenames: set) -> list:
    """Frames of the learner's code in ``exc`` and its causes, outermost first (a Triton
    interpreter error's cause holds the kernel's own line)."""
    frames, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames += [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in filenames]
        exc = exc.__cause__ or exc.__context__
    return frames


def _compiled_kernel_line(exc, filenames: set):
    """(file, line, source) in the learner's files of the kernel line a Triton compile error points
    at: on a GPU the error is raised at the launch, and its ``node.lineno`` counts from the kernel's
    ``def`` line (its ``src``), so the kernel is found by its source text in the learner's files."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        src, node = getattr(exc, "src", None), getattr(exc, "node", None)
        if type(exc).__name__ == "CompilationError" and isinstance(src, str) and hasattr(node, "lineno"):
            kernel = [line.strip() for line in src.splitlines()]
            for name in sorted(filenames):
                lines = [line.rstrip("\n") for line in linecache.getlines(name)]
                for start, line in enumerate(lines):
                    if line.strip() == kernel[0] and [x.strip() for x in lines[start:start + len(kernel)]] == kernel:
                        at = start + node.lineno - 1
                        if 0 <= at < len(lines):
                            return name, at + 1, lines[at].strip()
        exc = exc.__cause__ or exc.__context__
    return None


def _learner_frame(exc, filenames: set):
    """(file, line, source) of the deepest frame of the learner's code in ``exc`` and its causes, or
    of the kernel line a compile error names."""
    kernel_line = _compiled_kernel_line(exc, filenames)
    if kernel_line is not None:
        return kernel_line
    frames = _learner_frames(exc, filenames)
    return (frames[-1].filename, frames[-1].lineno, (frames[-1].line or "").strip()) if frames else None


def _text_of(exc: BaseException) -> str:
    """str(exc), or a placeholder where the learner's exception cannot be turned into text."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return "(its message could not be turned into text)"


def _shown(exc: BaseException) -> BaseException:
    """The error to show: the interpreter's wrapper is taken off the grader's out-of-bounds check."""
    cause = exc.__cause__
    if type(exc).__name__ == "InterpreterError" and isinstance(cause, OutOfBounds):
        return cause
    return exc


def _traceback(exc, filenames: set) -> str:
    """The learner's frames and the error; interpreter and library internals only when there are none."""
    frames = _learner_frames(exc, filenames)
    shown = _shown(exc)
    last = f"{type(shown).__name__}: {_text_of(shown)[:600]}"
    if frames:
        return ("".join(traceback.format_list(frames)) + last)[-1500:]
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])[-1500:]


INPUT_PAD_MAX = 1 << 20  # elements of NaN before and after a kernel exercise's float input (at most)


def _to_tensors(kwargs: dict, device: str, padded: bool = False, row_padding: dict | None = None) -> dict:
    """The case's arrays as torch tensors on ``device``. ``padded`` (a kernel exercise): each float
    input sits inside a larger buffer of NaN, as many elements before and after it as it has (at least
    4096), so that a load past either end (a missing mask, a wrong stride or offset) reads NaN on
    every run, not whatever memory happens to follow. ``row_padding`` ({name: n}): that input's rows
    are n elements further apart than its row length (a column slice of a wider array, -inf between
    the rows), so a kernel that assumes contiguous rows instead of using the stride reads -inf (a
    softmax then comes out wrong but finite, telling that mistake from rows never written)."""
    import numpy as np
    import torch

    out = {}
    for name, v in kwargs.items():
        if not isinstance(v, np.ndarray):
            out[name] = v
            continue
        t = torch.from_numpy(v.copy())
        extra = int((row_padding or {}).get(name, 0))
        if padded and t.is_floating_point() and t.numel():
            wide = t.shape[:-1] + (t.shape[-1] + extra,)
            numel = int(np.prod(wide))
            pad = min(max(numel, 4096), INPUT_PAD_MAX)
            buffer = torch.full((pad + numel + pad,), float("nan"), dtype=t.dtype, device=device)
            rows = buffer[pad:pad + numel].view(wide)
            rows[..., t.shape[-1]:] = float("-inf")
            view = rows[..., :t.shape[-1]]
            view.copy_(t.to(device))
            out[name] = view
        else:
            out[name] = t.to(device)
    return out


def _digest(value) -> str | None:
    buffers: list = []
    record = wire.encode(value, buffers)
    if record.get("t") != "array":
        return None
    return hashlib.sha256(buffers[0]).hexdigest()


GUARD: list = [None]  # the GradientGuard of the call in progress, for the dispatch mode


class GradientGuard:
    """While the learner's function runs: their ``torch.autograd.Function`` subclass ``cls`` must
    compute the gradients. A backward pass may only run through that Function: every node of its
    graph is that Function's backward, a leaf's gradient accumulation, or a node on the way from
    the loss to that Function (``(o * do).sum()``), so autograd never differentiates a forward
    written with torch operations; no autograd node runs inside its backward, nor any node outside
    such a pass (a second engine); and the gradients returned must be the ones its backward
    returned."""

    def __init__(self, cls, name: str):
        self.cls, self.name, self.calls, self.inside, self.refused = cls, name, [], False, []
        # the nodes of the graphs the engine was allowed to run, by id; holding them keeps their Python
        # wrappers alive (a node's wrapper is made anew once the last one is freed, and ids are reused)
        self.allowed: dict = {}
        self._saved = None

    def ours(self, node) -> bool:
        return getattr(type(node), "_forward_cls", None) is self.cls

    def node_allowed(self, node) -> bool:
        return node is None or self.ours(node) or type(node).__name__ == "AccumulateGrad" or id(node) in self.allowed

    def _graph_problem(self, roots: list, inputs=()) -> str | None:
        """None when every node reachable from ``roots`` is ours, a leaf's accumulation, or leads to
        ours. The nodes of ``inputs`` (``torch.autograd.grad``'s) end the walk: they do not run."""
        held = [getattr(x, "grad_fn", None) for x in inputs or ()]  # held: their ids stay theirs during the walk
        stops = {id(node) for node in held if node is not None}
        nodes, stack = {}, [r for r in roots if r is not None and id(r) not in stops]
        while stack:
            node = stack.pop()
            if id(node) in nodes or id(node) in stops:
                continue
            nodes[id(node)] = node
            stack += [n for n, _ in getattr(node, "next_functions", ()) if n is not None and id(n) not in stops]
        reaches: dict = {}

        def leads_to_ours(node, depth=0) -> bool:
            if id(node) not in reaches:
                reaches[id(node)] = False  # cycles cannot occur; this also bounds the recursion
                reaches[id(node)] = self.ours(node) or (depth < 500 and any(
                    leads_to_ours(n, depth + 1) for n, _ in getattr(node, "next_functions", ())
                    if n is not None and id(n) not in stops))
            return reaches[id(node)]

        if not any(self.ours(n) for n in nodes.values()):
            return f"autograd ran a backward pass that does not go through {self.name}"
        for node in nodes.values():
            if not (self.ours(node) or type(node).__name__ == "AccumulateGrad" or leads_to_ours(node)):
                return f"autograd would differentiate {type(node).__name__}, which is not part of {self.name}"
        self.allowed.update(nodes)
        return None

    def install(self) -> None:
        import torch
        from torch.autograd import variable

        if not (isinstance(self.cls, type) and issubclass(self.cls, torch.autograd.Function)
                and "backward" in vars(self.cls)):
            return
        guard, engine, original = self, variable.Variable._execution_engine, vars(self.cls)["backward"]
        backward = original.__func__ if isinstance(original, staticmethod) else original

        class Engine:  # the autograd engine, refusing backpropagation the exercise does not allow
            def run_backward(self, outputs, *args, **kwargs):
                inputs = args[3] if len(args) > 3 else kwargs.get("inputs", ())
                why = (f"autograd ran inside {guard.name}.backward" if guard.inside
                       else guard._graph_problem([getattr(t, "grad_fn", None) for t in outputs], inputs))
                if why:
                    guard.refuse(why)
                return engine.run_backward(outputs, *args, **kwargs)

            def __getattr__(self, attr):
                return getattr(engine, attr)

        def tracked(ctx, *grads):
            guard.inside = True
            try:
                out = backward(ctx, *grads)
            finally:
                guard.inside = False
            outs = out if isinstance(out, tuple) else (out,)
            live, LIVE[0] = LIVE[0], None  # the grader's copies, not the learner's memory
            try:
                guard.calls.append([o.detach().clone() if isinstance(o, torch.Tensor) else None for o in outs])
            finally:
                LIVE[0] = live
            return out

        self._saved = (engine, original)
        variable.Variable._execution_engine = Engine()
        self.cls.backward = staticmethod(tracked)
        GUARD[0] = self

    def refuse(self, why: str):
        self.refused.append(why)
        raise RuntimeError(f"{why}: the gradients must be computed by {self.name}.backward itself")

    def check_node(self) -> None:
        """From the dispatch mode, for every torch operator: the autograd node running it, if any,
        must belong to an allowed backward pass (another engine or a nested pass is refused)."""
        import torch

        node = torch._C._current_autograd_node()
        if node is None:
            return
        if self.inside and not self.ours(node):
            self.refuse(f"autograd ran inside {self.name}.backward ({type(node).__name__})")
        if not self.node_allowed(node):
            self.refuse(f"autograd differentiated {type(node).__name__} outside {self.name}")

    def uninstall(self) -> None:
        from torch.autograd import variable

        GUARD[0] = None
        if self._saved is not None:
            variable.Variable._execution_engine, self.cls.backward = self._saved
            self._saved = None

    def problem(self, value) -> str | None:
        """None when the gradients in ``value`` (after its first element) are what backward returned."""
        import torch

        if self.refused:
            return self.refused[0] + f": the gradients must be computed by {self.name}.backward itself"
        if not self.calls:
            return f"{self.name}.backward never ran: the gradients must come from it (call {self.name}.apply, " \
                   "then backward on its output)"
        grads = [g for g in (value[1:] if isinstance(value, (tuple, list)) else ()) if isinstance(g, torch.Tensor)]
        returned = [g for g in self.calls[-1] if g is not None]
        if len(grads) != len(returned) or not all(g.shape == r.shape and self._same(g.detach(), r)
                                                  for g, r in zip(grads, returned)):
            return f"the gradients returned are not the ones {self.name}.backward computed"
        return None

    @staticmethod
    def _same(g, r) -> bool:
        """g is backward's r, or r rounded to g's dtype (a float64 backward whose gradients autograd or the
        learner cast to the inputs' float32)."""
        import torch

        if torch.equal(g.to(r.dtype), r):
            return True
        return g.dtype != r.dtype and torch.finfo(g.dtype).bits < torch.finfo(r.dtype).bits \
            and torch.equal(g, r.to(g.dtype))


def call(func, kwargs: dict, filenames: set, verify_launch: tuple | None,
         guard: GradientGuard | None = None, measure_live: bool = False,
         torch_only: bool = False) -> tuple[dict, list]:
    """Call the learner's function; (record of what happened, buffers of the returned value).
    ``measure_live``: count the bytes the call holds at once (:class:`LiveBytes`) into record["live"].
    ``torch_only``: refuse the bridges from torch tensors to other array libraries (TORCH_BRIDGES)."""
    out = BoundedText()
    CALLS.clear()
    SCALAR_READS.update(numbers=0, truths=0)
    inputs = [v for v in kwargs.values() if hasattr(v, "untyped_storage")]
    if TRACKER is not None:
        TRACKER.reset(inputs, verify_launch or ())
    OWN_STORAGES.reset(inputs)
    record = dict(exception=None, not_implemented=None, where=None, launch_problem=None)
    value, saved = None, (sys.stdout, sys.stderr)
    start = time.perf_counter()
    sys.stdout = sys.stderr = out
    TORCH_POLICY["strict"] = verify_launch is not None
    TORCH_POLICY["torch_only"] = torch_only
    gc.freeze()  # a collection during the call walks only its own objects (the grader measures what it touches)
    if guard is not None:
        guard.install()
    if measure_live:
        LIVE[0] = LiveBytes(inputs)
    THREADS.begin()
    TORCH_POLICY["active"] = True
    try:
        value = func(**kwargs)
    except NotImplementedError as exc:
        record["not_implemented"] = str(exc) or "NotImplementedError"
        record["where"] = _learner_frame(exc, filenames)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from learner code too
        shown = _shown(exc)
        record["exception"] = f"{type(shown).__name__}: {_text_of(shown)[:1500]}"
        record["traceback"] = _traceback(exc, filenames)
        record["where"] = _learner_frame(exc, filenames)
    finally:
        TORCH_POLICY["active"] = TORCH_POLICY["torch_only"] = False
        unwatched = THREADS.end()
        if unwatched and unwatched not in CALLS:
            CALLS.append(unwatched)
        if measure_live:
            record["live"] = _live_record(LIVE[0])
            LIVE[0] = None
        if guard is not None:
            guard.uninstall()
        sys.stdout, sys.stderr = saved
    record["seconds"] = time.perf_counter() - start
    if guard is not None and record["not_implemented"] is None:
        record["gradient_problem"] = guard.problem(value) if record["exception"] is None else None
    if verify_launch is not None and record["exception"] is None and record["not_implemented"] is None:
        record["launch_problem"] = _verify_launch(value, verify_launch)
    record["forbidden_calls"] = list(CALLS)
    record["digests"] = {name: _digest(v) for name, v in kwargs.items()}
    record["launches"] = _distinct_launches(TRACKER.launches) if TRACKER is not None else []
    record["tiles"] = dict(TRACKER.tiles) if TRACKER is not None else {}
    derived_buffers: list = []
    if TRACKER is not None and (TRACKER.derived or TRACKER.prefilled or TRACKER.scalars):
        import numpy as np

        kept = TRACKER.derived + TRACKER.prefilled + ([np.array(TRACKER.scalars)] if TRACKER.scalars else [])
        largest = max([t.numel() for t in inputs if hasattr(t, "numel")] or [0])
        total = sum(t.numel() for t in inputs if hasattr(t, "numel"))
        products = [(a, _payload(a)) for a in TRACKER.derived if a.size > DERIVED_SLACK and not _padded_copy(a, inputs)]
        grown = [a for a, held in products if held > 2 * largest + DERIVED_SLACK]
        if grown:
            record["launch_problem"] = record.get("launch_problem") or (
                f"your kernels were handed a buffer of shape {tuple(grown[0].shape)} computed outside them, more "
                f"than twice the size of the largest input ({largest} elements): a product of the inputs such as "
                "the scores S, P or dS is the kernel's work; compute it on chip, tile by tile")
        elif sum(held for _, held in products) > 2 * total + DERIVED_SLACK:
            record["launch_problem"] = record.get("launch_problem") or (
                f"your kernels were handed {len(products)} buffers computed outside them, "
                f"{sum(held for _, held in products)} elements in all, more than twice the inputs' {total}: products of "
                "the inputs such as the scores S, P or dS, however cut, are the kernel's work; compute them on chip")
        elif len(kept) > DERIVED_MAX_COUNT or sum(a.nbytes for a in kept) > DERIVED_MAX_BYTES:
            record["launch_problem"] = record.get("launch_problem") or (
                f"your kernels were handed {len(kept)} buffers ({sum(a.nbytes for a in kept) / 2**20:.1f} MiB) "
                f"computed outside them (at most {DERIVED_MAX_COUNT} and {DERIVED_MAX_BYTES >> 20} MiB): "
                "compute the result in the kernel")
        else:
            record["derived"] = [wire.encode(a, derived_buffers) for a in kept]
    record["output"], record["output_chars"] = out.text(), out.total
    buffers: list = derived_buffers
    try:
        record["value"] = wire.encode(value, buffers)
    except Exception as exc:  # a value whose conversion raises
        record["value"] = dict(t="other", type=f"{type(value).__name__} ({type(exc).__name__} on conversion)")
        buffers = []
    return record, buffers


def _payload(array) -> int:
    """Elements of ``array`` other than its most common value (NaN counted as one value): what a buffer
    padded to whole blocks holds besides its fill (q * scale in a zero-filled buffer: the elements of q)."""
    import numpy as np

    flat = array.reshape(-1)
    if flat.size == 0 or flat.dtype.kind not in "fiub":
        return int(flat.size)
    _, counts = np.unique(flat, return_counts=True)
    return int(flat.size - counts.max())


def _padded_copy(array, inputs: list) -> bool:
    """Whether ``array`` holds inputs padded with one fill value (x copied into a buffer of whole blocks; K
    and V side by side; in another dtype): without its most common value (NaN too), every element is a value
    of the inputs, as they are or cast to the array's dtype."""
    import numpy as np

    flat = array.reshape(-1)
    if flat.dtype.kind not in "fiub":
        return False
    values, counts = np.unique(flat, return_counts=True)
    fill = values[np.argmax(counts)] if values.size else 0
    keep = ~np.isnan(flat) if flat.dtype.kind == "f" and np.isnan(fill) else flat != fill
    rest = flat[keep].astype(np.float64)
    known = []
    for t in inputs:
        x = t.detach().cpu()
        x = (x.float() if x.dtype.is_floating_point and x.element_size() < 4 else x).numpy().reshape(-1)
        with np.errstate(all="ignore"):  # NaN or inf cast to an integer dtype
            known += [x.astype(np.float64), x.astype(flat.dtype).astype(np.float64)]
    known = np.concatenate(known) if known else np.zeros(0)
    return rest.size <= known.size // 2 and bool(np.isin(rest, known).all())


def _live_record(live: LiveBytes) -> dict:
    return dict(tensor_peak=int(live.peak), at_peak=live.largest())


def _verify_launch(value, must_launch: tuple) -> str | None:
    launched = {launch["kernel"] for launch in TRACKER.launches}
    for name in must_launch:
        if name not in launched:
            other = next((module for kernel, module in TRACKER.elsewhere if kernel == name), None)
            if other is not None:
                return (f"launched a kernel {name} defined in module {other}, not in your exercise file: the grader "
                        f"follows the kernels defined there (define {name} in it)")
            return f"never launched the Triton kernel {name}: the result must come from {name}[grid](...)"
    if TRACKER.changed_inputs:
        return ("an input held other values when your kernel was launched (an input is read, never written: "
                "the kernel must compute from the inputs it was given)")
    tensors = [v for v in (value if isinstance(value, (tuple, list)) else [value]) if hasattr(v, "untyped_storage")]
    reached = set()
    for t in tensors:  # notes no later launch consumed that reach what the call returns
        reached |= TRACKER.flow.get(t.untyped_storage().data_ptr(), set()) & TRACKER.open_notes
    if reached:
        name, line = TRACKER.after_launch[min(reached)]
        first = next(launch["kernel"] for launch in TRACKER.launches if launch["kernel"] in TRACKER.required)
        return (f"your wrapper ran torch's aten.{name}{f' at line {line}' if line else ''} after launching "
                f"{first}, and what that made is in the result it returns: the kernel must finish the result "
                "itself (normalise by l, take the log, scale). Torch may prepare the inputs of a launch before it; "
                "after the launches the wrapper may allocate, view, copy or join (stack, cat along the first "
                "dimension) what it returns, and check it (torch.allclose, sums, prints) without changing it")
    for t in tensors:
        problem = TRACKER.written_by_launch(t)
        if problem:
            return f"{problem} ({'/'.join(must_launch)}[grid](...) must write the result)"
    return None


# ----------------------------------------------------------------------------- the kernel launched again
# A kernel whose signature the exercise gives is launched once more by the grader after a call that passed its
# launch checks: the launches that wrote the result and one per distinct signature (_chosen), each with the
# learner's own grid, tiles and scalars, on tensors the grader lays out (random inputs, a NaN-filled output; the
# learner's strides where they keep elements apart) and, for the flash forward, the grader's own scale and more
# keys (the split-KV kernel: its own scale). The parent checks what it wrote against the kernel's contract
# (grading.contracts). A wrapper that hands
# its kernel inputs prepared to make the result come out right (the answer in disguise, averaged by a kernel with
# Q = K = 0), or writes the output itself while the kernel runs, is caught there: the kernel alone must compute
# what its docstring says.


class ReplayRefused(Exception):
    """Why the grader cannot launch the learner's kernel itself (shown to the learner)."""


def _whole(args: dict, name: str) -> int:
    value = args[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReplayRefused(f"its argument {name} is {type(value).__name__}, not an int")
    return int(value)


def _batch_of(args: dict, name: str, outer: str, inner: tuple, inner_strides: tuple) -> int:
    """How many batch elements (rows) the learner's tensor ``name`` holds, read with the learner's batch
    stride ``outer`` and one element's sizes ``inner`` and strides ``inner_strides``: 1 when it is not a
    tensor or that stride is not positive (one launch per batch element passes x[z])."""
    given, step = args.get(name), _whole(args, outer)
    if not hasattr(given, "untyped_storage") or step <= 0:
        return 1
    rest = _extent(tuple(given.shape), tuple(given.stride())) - _extent(inner, inner_strides)
    return max(1, 1 + rest // step) if rest >= 0 else 1


def _apart(size: tuple, strides: tuple) -> bool:
    """Whether a view of ``size`` with ``strides`` puts every element at an address of its own (no stride 0,
    no two rows overlapping), in any order of its dimensions (K transposed is fine)."""
    dims = sorted((st, n) for n, st in zip(size, strides) if n > 1)
    reach = 0  # the largest offset the smaller dimensions reach
    for st, n in dims:
        if st <= reach:
            return False
        reach += (n - 1) * st
    return True


def _laid_out(args: dict, who: str, names: tuple, size: tuple, own: tuple, role: str, tensors: dict,
              overrides: dict, check: tuple | None = None) -> None:
    """Tensor ``who`` of a replay: the learner's strides (parameters ``names``) where they put every element
    of ``check`` (the learner's own sizes; default ``size``) apart, else the grader's own ``own``, passed in
    place of the learner's (a stride of 0 would make every key alike, the contract a mean of V's rows)."""
    strides = tuple(_whole(args, n) for n in names)
    if not _apart(check or size, strides):
        strides = own
        overrides.update(zip(names, own))
    tensors[who] = (role, size, strides)


def _layout_add(args: dict) -> dict:
    n = _whole(args, "n_elements")
    return dict(tensors={"X": ("inputs", (n,), (1,)), "Y": ("inputs", (n,), (1,)), "Out": ("outputs", (n,), (1,))},
                overrides={}, scalars={})


def _layout_rows(args: dict) -> dict:
    n = _whole(args, "n_cols")
    rows = _batch_of(args, "Out", "stride_om", (n,), (1,))
    tensors, overrides = {}, {}
    for who, name, role in (("X", "stride_xm", "inputs"), ("Out", "stride_om", "outputs")):
        step = _whole(args, name)
        if rows > 1 and step < n:  # rows closer than their length overlap: the grader's own stride instead
            step = overrides[name] = n
        tensors[who] = (role, (rows, n), (step, 1))
    return dict(tensors=tensors, overrides=overrides, scalars={})


def _own_scale(args: dict, overrides: dict, scalars: dict, name: str = "qk_scale") -> None:
    """The grader's REPLAY_SCALE in place of the learner's scale parameter ``name`` (a zero scale would make
    attention a mean of V's rows); nothing when the kernel has no such parameter (a scale tensor of its own,
    kept)."""
    scale = args.get(name)
    if scale is not None:
        if not isinstance(scale, (int, float)) or isinstance(scale, bool):
            raise ReplayRefused(f"its argument {name} is {type(scale).__name__}, not a number")
        overrides[name] = scalars[name] = REPLAY_SCALE


def _layout_flash_fwd(args: dict) -> dict:
    """Q, K, V and Out with the learner's strides where they keep every element apart (else the grader's
    own, contiguous, passed instead), as many batch elements as the learner's Out holds, replay_extra_keys
    more keys, and the grader's own scale: a zero scale, a zero stride or a single key of the learner's
    would make the contract a mean or a copy of V's rows."""
    n_q, n_k, d, block_m = (_whole(args, n) for n in ("N_Q", "N_K", "HEAD_DIM", "BLOCK_M"))
    if min(n_q, n_k, d, block_m) < 1:
        raise ReplayRefused(f"N_Q={n_q}, N_K={n_k}, HEAD_DIM={d}, BLOCK_M={block_m}: each must be >= 1")
    z = _batch_of(args, "Out", "stride_oz", (n_q, d), (_whole(args, "stride_om"), _whole(args, "stride_ok")))
    longer = n_k + replay_extra_keys(n_k)
    tensors, overrides = {}, {"N_K": longer}
    for who, rows, role in (("Q", n_q, "inputs"), ("K", n_k, "inputs"), ("V", n_k, "inputs"), ("Out", n_q, "outputs")):
        low = "o" if who == "Out" else who.lower()
        names = (f"stride_{low}z", f"stride_{low}{'m' if who in ('Q', 'Out') else 'n'}", f"stride_{low}k")
        grown = longer if who in "KV" else rows
        _laid_out(args, who, names, (z, grown, d), (grown * d, d, 1), role, tensors, overrides, check=(z, rows, d))
    scalars = dict(causal=bool(args.get("CAUSAL", False)))
    _own_scale(args, overrides, scalars)
    return dict(tensors=tensors, overrides=overrides, scalars=scalars)


def _layout_decode_partial(args: dict) -> dict:
    """Q (Z, d), K and V (Z, Nk, d), O_part (Z, S, d) and LSE_part (Z, S): Z as many sequences as the learner's
    Q holds, Nk the learner's N_K (without one, its K's next-to-last dimension), S as many split slots as its
    LSE_part holds per sequence; the learner's strides (V's own ``stride_vz``, ``stride_vn`` and a split stride ``stride_ls``
    where the kernel adds them) where they keep elements apart, else the grader's own, and the grader's own
    qk_scale. The kernel's other arguments (N_K, keys_per_split, tensors of bounds or lengths) are kept. The
    contract gets keys_per_split and N_K (which runs of keys a slot may hold) and what the learner's LSE_part
    holds after the call (a slot empty there must be empty here, and only such a slot)."""
    d = _whole(args, "HEAD_DIM")
    if d < 1:
        raise ReplayRefused(f"HEAD_DIM={d}: must be >= 1")
    z = _batch_of(args, "Q", "stride_qz", (d,), (1,))
    given_k = args.get("K")
    if "N_K" in args:  # the keys of a sequence (K may be padded past them, or flat)
        n_k = _whole(args, "N_K")
    elif hasattr(given_k, "untyped_storage") and given_k.dim() >= 2:  # lengths in a tensor of the learner's
        n_k = int(given_k.shape[-2])
    else:
        raise ReplayRefused("it has no parameter N_K and its K is not a tensor of keys (..., N_K, HEAD_DIM)")
    if n_k < 1:
        return dict(tensors={"Q": ("inputs", (0, d), (d, 1))}, overrides={}, scalars={})  # nothing to read
    given_lse = args.get("LSE_part")
    if not hasattr(given_lse, "untyped_storage"):
        raise ReplayRefused("its argument LSE_part is not a tensor")
    lse_names = ("stride_lz", "stride_ls") if "stride_ls" in args else ("stride_lz",)
    lse_strides = tuple(_whole(args, n) for n in lse_names) + (() if "stride_ls" in args else (1,))
    reach = _extent(tuple(given_lse.shape), tuple(given_lse.stride()))
    per_slot = lse_strides[1] if lse_strides[1] > 0 else 1
    slots = max(1, (reach - 1 - (z - 1) * max(lse_strides[0], 0)) // per_slot + 1)
    if min(n_k, reach) < 1:
        return dict(tensors={"Q": ("inputs", (0, d), (d, 1))}, overrides={}, scalars={})  # nothing to write
    v_names = ("stride_vz", "stride_vn") if "stride_vz" in args and "stride_vn" in args else ("stride_kz", "stride_kn")
    tensors, overrides = {}, {}
    for who, names, size, own, role in (
            ("Q", ("stride_qz",), (z, d), (d,), "inputs"),
            ("K", ("stride_kz", "stride_kn"), (z, n_k, d), (n_k * d, d), "inputs"),
            ("V", v_names, (z, n_k, d), (n_k * d, d), "inputs"),
            ("O_part", ("stride_oz", "stride_os"), (z, slots, d), (slots * d, d), "outputs"),
            ("LSE_part", lse_names, (z, slots), (slots, 1)[:len(lse_names)], "outputs")):
        strides = tuple(_whole(args, n) for n in names)
        strides += (1,) * (len(size) - len(strides))
        if not _apart(size, strides):  # a zero or overlapping stride: the grader's own, passed instead
            strides = own + (1,) * (len(size) - len(own))
            overrides.update(zip(names, own))
        tensors[who] = (role, size, strides)
    per = _whole(args, "keys_per_split")
    if per < 1:
        raise ReplayRefused(f"keys_per_split={per}: must be >= 1")
    scalars = {"n_keys": n_k, "keys_per_split": per}
    observed = {}
    strides = tensors["LSE_part"][2]
    if "stride_lz" not in overrides and given_lse.is_floating_point():  # the learner's own layout: what it holds
        observed["LSE_after_call"] = given_lse.as_strided((z, slots), strides, given_lse.storage_offset())
    _own_scale(args, overrides, scalars)
    return dict(tensors=tensors, overrides=overrides, scalars=scalars, observed=observed)


def _addressed(args: dict, who: str, names: tuple, size: tuple) -> tuple:
    """The strides a kernel reads tensor ``who`` with, as a view of ``size``: where the learner's tensor has
    the view's sizes, in that order or another (K passed transposed), its own strides (a correct
    call reads every tensor as it is laid out, whichever parameters carry the strides: a padded D
    addressed by a stride of its own); else, aligned from the right, its own stride for each dimension of
    the view's size with more than one element and the parameters ``names`` (one per dimension but the
    last, contiguous one) for the others (x[z] passed per batch element, a dimension of one)."""
    given = args.get(who)
    shape, own = (tuple(given.shape), tuple(given.stride())) if hasattr(given, "untyped_storage") else ((), ())
    if len(shape) == len(size) and shape != tuple(size) and sorted(shape) == sorted(size):
        free = list(range(len(shape)))
        order = []
        for wanted in size:  # the learner's dimension of each size, the first one free
            j = next(i for i in free if shape[i] == wanted)
            free.remove(j)
            order.append(j)
        return tuple(own[j] for j in order)
    strides = []
    for i, name in enumerate(names):
        j = i - (len(size) - len(own))  # the learner's dimension under this one, aligned from the right
        wanted = size[i]
        strides.append(own[j] if 0 <= j < len(own) and shape[j] == wanted and wanted > 1 else _whole(args, name))
    return tuple(strides) + (1,)


def _layout_flash_bwd(args: dict, grads: tuple) -> dict:
    """Q, K, V, dO (random), LSE (the log-sum-exp of the grader's scores at its own scale, so that P is a
    softmax), Delta = rowsum(dO * O) and, where the kernel takes it, O (the attention output of those
    inputs, for a kernel that computes D itself), and the gradients ``grads`` (dK and dV, or dQ): as many
    batch elements as the learner's first gradient holds, the launch's own N_Q and N_K (a grid may tile
    either: no rows are added, as for the forward; the parent asks that one launch had the case's sizes),
    each tensor read as the learner's call read its own (where that keeps every element apart, else the
    grader's own layout, passed instead), and the grader's own sm_scale: a kernel that decodes an answer
    the wrapper prepared fails."""
    n_q, n_k, d = (_whole(args, n) for n in ("N_Q", "N_K", "HEAD_DIM"))
    if min(n_q, n_k, d) < 1:
        raise ReplayRefused(f"N_Q={n_q}, N_K={n_k}, HEAD_DIM={d}: each must be >= 1")
    first = grads[0]
    rows_of = {"Q": n_q, "dO": n_q, "dQ": n_q, "O": n_q, "K": n_k, "V": n_k, "dK": n_k, "dV": n_k}
    row_stride = {"Q": ("stride_qz", "stride_qm"), "K": ("stride_kz", "stride_kn")}
    family = {"Q": "Q", "dO": "Q", "dQ": "Q", "O": "Q", "K": "K", "V": "K", "dK": "K", "dV": "K"}
    given = args.get(first)
    if hasattr(given, "untyped_storage") and given.dim() == 3:  # a view of (Z, rows, d), padded or not
        z = int(given.shape[0])
    else:  # one batch element (x[z]) or a flat buffer: read with the learner's batch stride
        z = _batch_of(args, first, row_stride[family[first]][0], (rows_of[first], d),
                      (_whole(args, row_stride[family[first]][1]), 1))
    tensors, overrides = {}, {}
    extra = ("O",) if hasattr(args.get("O"), "untyped_storage") else ()
    for who in ("Q", "K", "V", "dO") + extra + grads:
        rows, names = rows_of[who], row_stride[family[who]]
        strides = _addressed(args, who, names, (z, rows, d))
        if not _apart((z, rows, d), strides):
            strides = (rows * d, d, 1)
            overrides.update(zip(names, strides))
        tensors[who] = ("outputs" if who in grads else "inputs", (z, rows, d), strides)
    for who in ("LSE", "Delta"):
        strides = _addressed(args, who, ("stride_lz",), (z, n_q))
        if not _apart((z, n_q), strides):
            strides = (n_q, 1)
            overrides["stride_lz"] = n_q
        tensors[who] = ("inputs", (z, n_q), strides)
    scalars = dict(causal=bool(args.get("CAUSAL", False)), n_q_call=n_q)
    _own_scale(args, overrides, scalars, "sm_scale")
    return dict(tensors=tensors, overrides=overrides, scalars=scalars, derive=_attention_inputs)


def _attention_inputs(made: dict, scalars: dict) -> None:
    """The replay's LSE[z, m] = log sum_n exp(REPLAY_SCALE Q[z, m] . K[z, n]) over the keys row m sees (so
    P = exp(S - LSE) is a softmax, as in a real backward pass, and stays in range), O = P V where the kernel
    takes O, and Delta = rowsum(dO * O), written into the grader's tensors."""
    import torch

    q, k, v, do = (made[p].detach().cpu().to(torch.float64) for p in ("Q", "K", "V", "dO"))
    scores = REPLAY_SCALE * torch.einsum("zmd,znd->zmn", q, k)
    if scalars.get("causal"):
        rows, cols = torch.arange(q.shape[1])[:, None], torch.arange(k.shape[1])[None, :]
        scores = scores.masked_fill(cols > rows, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("zmn,znd->zmd", torch.exp(scores - lse[..., None]), v)
    made["LSE"].copy_(lse.to(made["LSE"].dtype))
    if "O" in made:
        made["O"].copy_(out.to(made["O"].dtype))
        out = made["O"].detach().cpu().to(torch.float64)  # D as the kernel can compute it from O
    made["Delta"].copy_((do * out).sum(-1).to(made["Delta"].dtype))


REPLAY_EXTRA_KEYS = 37  # keys the flash forward's replay adds to the learner's N_K, at least (see replay_extra_keys)


def replay_extra_keys(n_k: int) -> int:
    """The keys the flash forward's replay adds to ``n_k``: REPLAY_EXTRA_KEYS rounded up to a multiple of the
    largest power of two (up to 128) that divides n_k. A launch whose N_K was a whole number of tiles stays
    one (a kernel told so by a flag of its own, EVEN_N, may skip the masks of a last partial tile); a ragged
    N_K stays ragged."""
    tile = min(n_k & -n_k, 128) if n_k > 0 else 1
    return tile * -(-REPLAY_EXTRA_KEYS // tile)
REPLAY_SCALE = 0.3  # the flash forward's qk_scale in the replay (natural log; an exp2 kernel reads it as 0.3 ln 2)

_BWD_PARAMS = ("Q", "K", "V", "dO", "LSE", "Delta", "stride_qz", "stride_qm", "stride_kz", "stride_kn", "stride_lz",
               "N_Q", "N_K", "HEAD_DIM")
# kernel name: (the parameters it must keep, which tensors they address)
REPLAY_LAYOUTS = {
    "add_kernel": (("X", "Y", "Out", "n_elements"), _layout_add),
    "online_softmax_kernel": (("X", "Out", "stride_xm", "stride_om", "n_cols"), _layout_rows),
    "flash_fwd_kernel": (("Q", "K", "V", "Out", "stride_qz", "stride_qm", "stride_qk", "stride_kz", "stride_kn",
                          "stride_kk", "stride_vz", "stride_vn", "stride_vk", "stride_oz", "stride_om", "stride_ok",
                          "N_Q", "N_K", "BLOCK_M", "HEAD_DIM"), _layout_flash_fwd),
    "decode_partial_kernel": (("Q", "K", "V", "O_part", "LSE_part", "stride_qz", "stride_kz", "stride_kn", "stride_oz",
                               "stride_os", "stride_lz", "keys_per_split", "HEAD_DIM"), _layout_decode_partial),
    "softmax_kernel": (("X", "Out", "stride_xm", "stride_om", "n_cols"), _layout_rows),
    "flash_bwd_dkdv_kernel": (_BWD_PARAMS + ("dK", "dV"), lambda args: _layout_flash_bwd(args, ("dK", "dV"))),
    "flash_bwd_dq_kernel": (_BWD_PARAMS + ("dQ",), lambda args: _layout_flash_bwd(args, ("dQ",))),
}


def _bound_args(kernel, args: tuple, kwargs: dict) -> dict:
    """{parameter name: value} of a launch, by position, keyword or the signature's default; a
    tl.constexpr-wrapped value unwrapped."""
    import inspect

    from triton.language import constexpr

    try:
        defaults = {name: p.default for name, p in inspect.signature(kernel.fn).parameters.items()
                    if p.default is not inspect.Parameter.empty}
    except (AttributeError, TypeError, ValueError):
        defaults = {}
    bound = {}
    for i, (name, _) in enumerate(_params(kernel)):
        if i < len(args):
            bound[name] = args[i]
        elif name in kwargs:
            bound[name] = kwargs[name]
        elif name in defaults:
            bound[name] = defaults[name]
    return {k: (v.value if isinstance(v, constexpr) else v) for k, v in bound.items()}


def _extent(size, strides) -> int:
    """Elements from a view's first to its last element, both included (0 for an empty view)."""
    if any(n == 0 for n in size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, strides))


REPLAY_MAX = 8  # launches of a kernel run again after one call (see _chosen)
REPLAY_MAX_ELEMENTS = 1 << 22  # elements of the tensors they lay out, in all (sent as float64: 32 MiB)
# sizes a launch gives its kernel, sent with its record as call_<name> with its CAUSAL (the parent asks that
# one launch had the case's own: see contracts.judge_replay)
REPLAY_SIZES = ("N_Q", "N_K", "HEAD_DIM", "n_cols", "n_elements")


def _replay_one(name: str, kernel, args: tuple, kwargs: dict, generator, buffers: list,
                filled: dict | None = None, budget: list | None = None) -> dict | None:
    """One recorded launch of ``name`` run again on the grader's own tensors: its record (scalars, the
    contract's inputs and outputs as float64 arrays), or None when it has nothing to write (no rows).
    Outputs start as NaN (what the kernel leaves unwritten shows), or as the one value the learner's buffer
    held everywhere before its launch (``filled``: zeros, an accumulator the kernel adds into atomically;
    -inf, empty states the kernel leaves as they are).
    ``budget``: [elements the launches run again may still lay out] (REPLAY_MAX_ELEMENTS in all)."""
    budget = [REPLAY_MAX_ELEMENTS] if budget is None else budget
    import torch

    needed, layout = REPLAY_LAYOUTS[name]
    bound = _bound_args(kernel, args, kwargs)
    missing = [p for p in needed if p not in bound]
    if missing:
        raise ReplayRefused(f"it has no parameter {', '.join(missing)}: keep the parameters of the kernel's "
                            "signature (you may add tl.constexpr ones)")
    spec = layout(bound)
    if not all(math.prod(size) for _, size, _ in spec["tensors"].values()):
        return None
    elements = sum(math.prod(size) for _, size, _ in spec["tensors"].values())
    budget[0] -= elements
    if budget[0] < 0:
        sizes = ", ".join(f"{k}={bound[k]}" for k in ("N_Q", "N_K", "HEAD_DIM", "n_cols", "n_elements") if k in bound)
        raise ReplayRefused(f"its launches' sizes ({sizes}) make tensors of more than {REPLAY_MAX_ELEMENTS} elements "
                            "in all, far more than the problem it was given: launch it with that problem's sizes")
    fresh = dict(spec["overrides"])
    sizes = {f"call_{k}": int(bound[k]) for k in REPLAY_SIZES
             if isinstance(bound.get(k), int) and not isinstance(bound.get(k), bool)}
    if "CAUSAL" in bound:  # the causal flag, read as the kernel reads it
        sizes["call_CAUSAL"] = bool(bound["CAUSAL"])
    record = dict(scalars=dict(spec["scalars"], **sizes), inputs={}, outputs={})
    # numbers of the learner's own beyond the contract's, passed as the launch had them (its tiles aside)
    record["own_scalars"] = [p for p, v in bound.items() if p not in needed and p not in spec["tensors"]
                             and p not in fresh and not p.startswith("BLOCK") and isinstance(v, (int, float))
                             and not isinstance(v, bool)][:8]
    for p, seen in spec.get("observed", {}).items():  # the learner's tensors as the call left them
        record["inputs"][p] = wire.encode(seen.detach().cpu().to(torch.float64).numpy(), buffers)
    made = {}
    for p, (role, size, strides) in spec["tensors"].items():
        given = bound[p]
        if not hasattr(given, "untyped_storage") or not given.is_floating_point():
            raise ReplayRefused(f"its argument {p} is not a floating-point tensor")
        if any(st < 0 for st in strides) or any(st < 0 for st in given.stride()):
            raise ReplayRefused(f"{p} is addressed with a negative stride")
        # as many elements as the learner's own tensor spans (a buffer padded to whole blocks) or the view
        n = max(_extent(size, strides), _extent(tuple(given.shape), tuple(given.stride())), 1)
        if role == "inputs":
            flat = torch.randn(n, generator=generator, dtype=torch.float64).to(given.dtype)
        else:
            flat = torch.full((n,), (filled or {}).get(p, float("nan")), dtype=given.dtype)
        fresh[p] = flat.to(given.device)  # addressed by the strides the kernel is given; bounded by the buffer
        made[p] = fresh[p].as_strided(size, strides, 0)
    if spec.get("derive"):  # inputs computed from the others (the backward's LSE, D and O)
        spec["derive"](made, spec["scalars"])
    names = [p for p, _ in _params(kernel)]
    new_args = tuple(fresh.get(names[i], v) if i < len(names) else v for i, v in enumerate(args))
    new_kwargs = {k: fresh.get(k, v) for k, v in kwargs.items()}
    for p, value in spec["overrides"].items():  # a parameter the learner left at its default
        if p in names and p not in names[:len(args)] and p not in kwargs:
            new_kwargs[p] = value
    run = getattr(type(kernel).run, "untracked", None)  # JITFunction's, or InterpretedFunction's in the interpreter
    if run is None:
        raise ReplayRefused(f"{type(kernel).__name__} is no Triton kernel the grader can launch")
    # the inputs as drawn, recorded before the launch: the contract is judged on them, whatever the kernel
    # then does to its input tensors (writing them turns the contract into one it meets trivially)
    given = {p: fresh[p].detach().clone() for p, (role, _, _) in spec["tensors"].items() if role == "inputs"}
    for p, (role, _, _) in spec["tensors"].items():
        if role == "inputs":
            record["inputs"][p] = wire.encode(made[p].detach().cpu().to(torch.float64).numpy(), buffers)
    TILE_BUILT[0] = 0
    result = _run_checked(run, kernel, new_args, new_kwargs, True)
    if any(t.device.type == "cuda" for t in made.values()):  # the views share the buffers the kernel wrote
        torch.cuda.synchronize()
    record["tile"] = int(_tile_of(result))  # the largest tensor dimension this launch built (the tile rules)
    for p, before in given.items():
        if not torch.equal(fresh[p], before):
            raise ReplayRefused(f"it wrote into its input {p} (a kernel reads its inputs and writes only its outputs)")
    for p, (role, _, _) in spec["tensors"].items():
        if role == "outputs":
            record[role][p] = wire.encode(made[p].detach().cpu().to(torch.float64).numpy(), buffers)
    return record


def _chosen(launches: list, writers: set, seed: int) -> list:
    """The launches to run again: every one whose output the returned value holds, then one per distinct
    signature (constexprs, scalars, tensor shapes; so that repeated decoys count once), REPLAY_MAX at
    most, the rest a sample drawn from the parent's seed."""
    import random

    chosen = [launch for launch in launches if launch[0] in writers][:REPLAY_MAX]
    seen = {launch[1] for launch in chosen}
    distinct = []
    for launch in launches:
        if launch[1] not in seen:
            seen.add(launch[1])
            distinct.append(launch)
    room = REPLAY_MAX - len(chosen)
    if len(distinct) > room:
        distinct = [distinct[i] for i in sorted(random.Random(seed).sample(range(len(distinct)), room))]
    return sorted(chosen + distinct, key=lambda launch: launch[0])


def replay(seed: int) -> tuple[dict | None, list]:
    """Run launches of the first required kernel that has a contract again on the grader's inputs (those
    :func:`_chosen` picks): (record for the parent, its buffers). None when no such kernel was launched."""
    import torch

    name = next((n for n in sorted(TRACKER.required) if n in REPLAY_LAYOUTS and TRACKER.launched_of.get(n)), None)
    if name is None:
        return None, []
    launches = [launch for _, _, launch in _chosen(TRACKER.launched_of[name], TRACKER.writers, seed)]
    buffers: list = []
    generator = torch.Generator().manual_seed(seed)
    try:
        budget = [REPLAY_MAX_ELEMENTS]
        records = [_replay_one(name, kernel, args, kwargs, generator, buffers, filled, budget)
                   for kernel, args, kwargs, filled in launches]
        records = [r for r in records if r is not None]
        if not records:
            raise ReplayRefused("every launch of it had an empty output (no query rows)")
        return dict(kernel=name, launches=records), buffers
    except ReplayRefused as exc:
        return dict(kernel=name, error=str(exc)[:600]), []
    except Exception as exc:  # noqa: BLE001  the learner's kernel raised on the grader's inputs
        shown = _shown(exc)
        return dict(kernel=name, error=f"it raised {type(shown).__name__}: {_text_of(shown)[:600]}"), []
    finally:
        TORCH_POLICY["active"] = False


# ----------------------------------------------------------------------------- the loop
def _load_source(path: str, source: str, name: str):
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    lines = source.splitlines(keepends=True)
    linecache.cache[path] = (len(source), None, lines, path)  # tracebacks and inspect.getsource (Triton)
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def serve(fd_in: int, fd_out: int, job: dict, functions: dict | None = None) -> None:
    """Answer the parent's requests until told to stop (both file and fork mode)."""
    sys.dont_write_bytecode = True
    set_limits(job.get("limits", {}))
    filenames = {job["path"]} if job.get("path") else set()
    module_name = f"graded_{job['exercise']}"
    learner_modules = {module_name, "__main__"}
    if functions:
        learner_modules |= {getattr(f, "__module__", "__main__") for f in functions.values()}
        filenames |= {f.__code__.co_filename for f in functions.values() if hasattr(f, "__code__")}
    device = None
    out = BoundedText()
    namespaced = job.get("drop_uid") is None and leave_root_namespace()
    try:
        if job.get("triton"):
            device = prepare_triton(learner_modules)
        else:
            sys.meta_path.insert(0, _WatchTorchOnImport())
            if job.get("preload_torch"):  # imported here, not inside a timed call
                try:
                    import torch  # noqa: F401
                except ImportError:
                    pass
        THREADS.install()  # threads the learner's module starts run under the torch watch
        install_forbidden()
        dropped = drop_privileges(job.get("drop_uid"))
        own = [job.get("exercises_dir")] + [os.path.dirname(f) for f in filenames if os.path.isabs(f)]
        confined = bool(job.get("home")) and confine.confine_files(job["home"], job.get("hidden") or (),
                                                                   confine.readable_roots(own))
        if confined:  # flashlab's modules can no longer be read: those not loaded yet are hidden names,
            HIDDEN[0] = True  # and the original code of the loaded ones (kept for imports) would only
            _ORIGINALS.clear()  # serve a learner's tampering
        no_processes = bool(job.get("no_processes")) and confine.forbid_processes()
        if job.get("exercises_dir") and job["exercises_dir"] not in sys.path:
            sys.path.append(job["exercises_dir"])  # after the standard library and site-packages
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            # exercise 15, and a Triton kernel in the interpreter (whose body is Python: through ctypes it could
            # read and write its tensors' memory with NumPy, unseen by the checks of its loads and stores)
            if job.get("torch_only") or (job.get("triton") and device == "cpu"):
                if not job.get("torch_only"):
                    BRIDGE_WHY[0] = ("a Triton kernel computes with tl.load and tl.store: {what} reaches its tensors' "
                                     "memory out of the grader's sight (in the CPU interpreter a kernel's body is "
                                     "Python); read and write tensors only through the kernel's loads and stores")
                RAW_MEMORY[0] = True
                _install_audit()
                _refuse_ctypes_copies()
            if functions is None:
                namespace = vars(_load_source(job["path"], job["source"], module_name))
            else:
                namespace = dict(functions)
        finally:
            sys.stdout, sys.stderr = saved
    except BaseException as exc:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        wire.send(fd_out, dict(op="load_error", message=f"{type(exc).__name__}: {str(exc)[:1000]}",
                               traceback="".join(lines[-4:])[-1500:], where=_learner_frame(exc, filenames)))
        return
    kernels = {name: type(value).__name__ for name, value in namespace.items()
               if type(value).__name__ in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics")}
    for name in kernels:  # a kernel written under a name of the learner's and bound to the stub's name
        fn = namespace[name]
        while fn is not None and not isinstance(fn, types.FunctionType):
            fn = getattr(fn, "fn", None)
        if fn is not None and fn.__name__ != name and name in REPLAY_LAYOUTS:  # the stub's kernel names
            KERNEL_NAMES[id(fn)] = name
    wire.send(fd_out, dict(op="loaded", device=device, dropped=dropped, namespaced=namespaced, confined=confined,
                           no_processes=no_processes, kernels=kernels,
                           names=sorted(k for k in namespace if not k.startswith("__"))[:200],
                           callables=sorted(k for k, v in namespace.items() if callable(v))[:200]))
    while True:
        header, buffers = wire.recv(fd_in)
        if header.get("op") == "replay" and TRACKER is not None:  # the last call's kernel again, on the grader's inputs
            seed = header.get("seed")
            replayed, replay_buffers = replay(seed if type(seed) is int else 0)
            TRACKER.launched_of, TRACKER.writers, TRACKER.region_launch = {}, set(), {}
            wire.send(fd_out, dict(op="replayed", replay=replayed), replay_buffers)
            del replayed, replay_buffers
            continue
        if header.get("op") != "case":
            return
        kwargs = wire.decode_kwargs(header["kwargs"], buffers)
        if header.get("tensors"):
            kwargs = _to_tensors(kwargs, device or "cpu", padded=bool(header.get("must_launch")),
                                 row_padding=header.get("row_padding"))
        target = namespace.get(header["function"])
        if header.get("quiz"):
            func = lambda _value=target: _value  # noqa: E731  a quiz answer: a function of no arguments
        else:
            func = target
        wire.send(fd_out, dict(op="ready"))
        go, _ = wire.recv(fd_in)
        if go.get("op") != "go":
            return
        must = tuple(header.get("must_launch") or ())
        grads = header.get("gradients_from") or ""
        guard = GradientGuard(namespace.get(grads), grads) if grads else None
        record, result_buffers = call(func, kwargs, filenames, must if header.get("tensors") and must else None,
                                      guard, measure_live=bool(header.get("measure_live")),
                                      torch_only=bool(header.get("torch_only")))
        wire.send(fd_out, dict(record, op="result"), result_buffers)
        del record, result_buffers, kwargs, func, guard
        _give_back_freed_memory()


def _malloc_trim():
    """glibc's malloc_trim, looked up before the child is confined (None elsewhere)."""
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


MALLOC_TRIM = _malloc_trim()


def _give_back_freed_memory() -> None:
    """Between two cases: the memory the last call freed goes back to the system. Otherwise the next
    case reuses it without raising the resident peak the grader measures (a memory case right after
    another of its size, e.g. exercise 15's two parts, then measured only the growth beyond it)."""
    gc.collect()
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


def main(argv: list[str]) -> None:
    """python -m flashlab.grading.child JOB_FD RESULT_FD (started by the sandbox)."""
    fd_in, fd_out = int(argv[1]), int(argv[2])
    header, _ = wire.recv(fd_in)
    serve(fd_in, fd_out, header)


if __name__ == "__main__":
    from flashlab.grading import child as _child  # the importable module, not this __main__ copy

    _child.main(sys.argv)
