"""Kernel accesses outside the tensors a launch was given, found in the grading child.

Under Triton's CPU interpreter every load, store and atomic is checked as it runs
(:class:`MemoryBounds`, which knows the kernel's line). Compiled kernels on a GPU cannot be watched
access by access, so each launch runs on copies of its tensors laid between bytes the grader
watches (:class:`StoreGuards`): a store that lands in them is found once the launch ends. Either
way the learner reads :class:`OutOfBounds`, naming the tensor and how far outside it the access
went. Used by :mod:`flashlab.grading.child`, which tracks the launches.
"""
from __future__ import annotations


def span(t) -> tuple[int, int]:
    """(address of the first element, bytes from it to the end of the last) of tensor ``t``."""
    size = t.element_size()
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    return t.data_ptr(), extent * size


def shares_memory(t) -> bool:
    """Some of ``t``'s elements are one memory location (expand: a stride of 0 along a dimension
    longer than 1): such a tensor is read, never written, and is copied as the bytes it spans."""
    return any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())) or span(t)[1] < t.numel() * t.element_size()


def element_view(t, storage, offset: int):
    """The bytes of ``t``'s elements laid out as ``t`` lays them, in ``storage`` from byte ``offset``:
    a uint8 view of shape t.shape + (element size,); the bytes ``t`` spans where its elements share
    memory."""
    import torch

    size = t.element_size()
    if shares_memory(t):
        return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, offset, (span(t)[1],), (1,))
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(
        storage, offset, tuple(t.shape) + (size,), tuple(s * size for s in t.stride()) + (1,))


def element_mask(t):
    """Over the bytes ``t`` spans: True where a byte belongs to one of its elements (not to a gap
    between the rows of a strided view)."""
    import torch

    mask = torch.zeros(span(t)[1], dtype=torch.uint8, device=t.device)
    element_view(t, mask.untyped_storage(), 0).fill_(1)
    return mask.bool()


def byte_view(t, start: int, nbytes: int):
    """The ``nbytes`` bytes of ``t``'s storage from address ``start``, as a uint8 tensor."""
    import torch

    storage = t.untyped_storage()
    offset = start - storage.data_ptr()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, offset, (nbytes,), (1,))


class MemoryBounds:
    """Triton's CPU interpreter with every load, store and atomic checked against the tensors the
    launch was given: an address outside all of them raises :class:`OutOfBounds`, naming the nearest
    tensor's parameter and how far past its end (or before its start) the access went. A missing
    mask then fails on every run with the kernel's own line, whether or not what it read or wrote
    reaches a returned value. Only lanes whose mask is true are checked (as the hardware reads them).
    On a GPU the kernels are compiled and this check does not run (:class:`StoreGuards` does there)."""

    def __init__(self):
        self.spans: list = []  # (start, end, parameter name, shape, element size) of the launch running
        self.stored: list = []  # the addresses the launch's stores and atomics reached (arrays)

    def set(self, named: list) -> None:
        spans = []
        for name, t in named:
            start, nbytes = span(t)
            if nbytes:
                spans.append((start, start + nbytes, name, tuple(t.shape), t.element_size()))
        self.spans, self.stored = spans, []

    def unstored(self, before: list) -> str | None:
        """After the launch: the parameter name of a tensor whose elements changed at an address no store or
        atomic of the launch reached, or None. ``before``: (name, tensor, its copy from before the launch). In
        the interpreter a kernel's body is Python: anything but its own stores changing its tensors (ctypes,
        NumPy or torch on them) is not the kernel computing."""
        import numpy as np
        import torch

        stored = np.unique(np.concatenate(self.stored)) if self.stored else np.zeros(0, np.uint64)
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        for name, t, copy in before:
            if t.is_complex() or t.element_size() not in bits:
                continue
            same = bits[t.element_size()]
            changed = (t != copy) if t.dtype == torch.bool else (t.view(same) != copy.view(same))
            where = changed.nonzero()  # (n, ndim)
            if not len(where):
                continue
            offsets = (where * torch.tensor(t.stride(), dtype=torch.int64)).sum(1).numpy().astype(np.uint64)
            addrs = np.uint64(t.data_ptr()) + offsets * np.uint64(t.element_size())
            if not np.isin(addrs, stored).all():
                return name
        return None

    def check(self, what: str, ptrs, mask=None) -> None:
        import numpy as np

        if not self.spans:
            return
        addrs = np.asarray(ptrs).astype(np.uint64, copy=False)
        if mask is not None:
            addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
        addrs = addrs.reshape(-1)
        if not addrs.size:
            return
        if what != "tl.load":
            self.stored.append(addrs.copy())
        inside = np.zeros(addrs.shape, dtype=bool)
        for start, end, *_ in self.spans:
            inside |= (addrs >= start) & (addrs < end)
        if inside.all():
            return
        outside = addrs[~inside]
        bad = int(outside[0])
        start, end, name, shape, size = min(self.spans, key=lambda s: min(abs(bad - s[0]), abs(bad - (s[1] - 1))))
        if bad >= end:
            far = int(outside.max())
            n = (far - end) // size + 1
            where = f"up to {n} element{'s' if n > 1 else ''} past the end of {name}"
        else:
            far = int(outside.min())
            n = (start - far + size - 1) // size
            where = f"up to {n} element{'s' if n > 1 else ''} before the start of {name}"
        lanes = int(outside.size)
        raise OutOfBounds(
            f"a {what} reached memory outside every tensor the kernel was given: {lanes} lane{'s' if lanes > 1 else ''}, "
            f"{where} (shape {tuple(shape)}). A lane whose row or column lies past a tensor's end must be masked off "
            "(mask= on the load or store), and each pointer must step by its own tensor's strides")

    def install(self) -> None:
        try:
            from triton.runtime.interpreter import InterpreterBuilder
        except ImportError:
            return
        bounds = self
        load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store
        rmw, cas = InterpreterBuilder.create_atomic_rmw, InterpreterBuilder.create_atomic_cas

        def checked_load(builder, ptrs, mask, *args, **kwargs):
            bounds.check("tl.load", ptrs.data, mask.data)
            return load(builder, ptrs, mask, *args, **kwargs)

        def checked_store(builder, ptrs, value, mask, *args, **kwargs):
            bounds.check("tl.store", ptrs.data, mask.data)
            return store(builder, ptrs, value, mask, *args, **kwargs)

        def checked_rmw(builder, op, ptr, val, mask, *args, **kwargs):
            bounds.check("tl.atomic operation", ptr.data, mask.data)
            return rmw(builder, op, ptr, val, mask, *args, **kwargs)

        def checked_cas(builder, ptr, *args, **kwargs):
            bounds.check("tl.atomic_cas", ptr.data)
            return cas(builder, ptr, *args, **kwargs)

        InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store = checked_load, checked_store
        InterpreterBuilder.create_atomic_rmw, InterpreterBuilder.create_atomic_cas = checked_rmw, checked_cas


class OutOfBounds(Exception):
    """A kernel's load or store reached memory outside every tensor its launch was given."""


class StoreGuards:
    """On a GPU, where :class:`MemoryBounds` cannot run: each launch of a learner's kernel works on
    copies of the tensors it was given. The bytes that the tensors sharing a storage span are copied
    into one fresh buffer, between two guard bands of 0xFF bytes (NaN in every float type, so a load
    past an end still reads NaN, as the inputs' NaN frames make it). After the launch, a byte that
    belongs to no tensor's elements and changed (in a guard band, or in a gap between the rows of a
    strided view or between two slices of one buffer) raises :class:`OutOfBounds` naming the nearest
    tensor and how far outside it the store went; the elements are copied back either way. A store
    past the end of the learner's own output (a missing mask) then fails on every run instead of
    landing in whatever memory follows the tensor. Loads are not seen (their NaN shows in the
    output). The memory a TensorDescriptor describes stays in place (TMA clips its stores to the
    descriptor's shape); the launch's other tensors are still copied."""

    GUARD_BYTES_MIN, GUARD_BYTES_MAX = 64 << 10, 64 << 20
    ALIGN = 256  # a copy keeps its tensor's address modulo this (Triton specialises on 16-byte alignment)

    def launch(self, run, kernel, args: tuple, kwargs: dict, named: list, activate=lambda on: None):
        """run(kernel, *args, **kwargs) on guarded copies of the tensors in ``named`` ((parameter
        name, tensor) of every tensor the launch was given; a TensorDescriptor's as "name.base");
        ``activate(True/False)`` brackets the launch itself (the grader's own copies run outside the
        learner's torch policy)."""
        def storage(t):
            return str(t.device), t.untyped_storage().data_ptr()

        described = {storage(t) for label, t in named if label.endswith(".base")}  # TMA's memory stays in place
        named = [(label, t) for label, t in named if span(t)[1] and storage(t) not in described]
        mapping, groups = self._relocate(named) or ({}, [])
        activate(True)
        try:
            result = run(kernel, *self._swap(args, mapping), **self._swap(kwargs, mapping))
        except BaseException:
            self._restore(groups, check=False)
            raise
        finally:
            activate(False)
        self._restore(groups)
        return result

    def _relocate(self, named: list):
        """({id of an argument: its copy}, [(guarded buffer, its bytes before the launch, which of its
        bytes are elements, address of its byte 0 in the original, [(label, tensor)])]), or None where
        a tensor's address is not a multiple of its element size (it cannot be viewed in the copy)."""
        import torch

        by_storage: dict = {}
        for label, t in named:
            by_storage.setdefault((str(t.device), t.untyped_storage().data_ptr()), []).append((label, t))
        mapping, groups = {}, []
        with torch.no_grad():
            for members in by_storage.values():
                spans = [span(t) for _, t in members]
                start = min(s for s, _ in spans)
                extent = max(s + n for s, n in spans) - start  # bytes from the first element to the last
                guard = -(-min(max(extent, self.GUARD_BYTES_MIN), self.GUARD_BYTES_MAX) // self.ALIGN) * self.ALIGN
                head = guard + start % self.ALIGN  # where the first element goes
                device = members[0][1].device
                buf = torch.full((head + extent + guard,), 0xFF, dtype=torch.uint8, device=device)
                buf[head:head + extent].copy_(byte_view(members[0][1], start, extent))
                covered = torch.zeros_like(buf)
                for _, t in members:
                    at = head + t.data_ptr() - start
                    if at % t.element_size():
                        return None
                    element_view(t, covered.untyped_storage(), at).fill_(1)
                    mapping[id(t)] = torch.empty(0, dtype=t.dtype, device=device).set_(
                        buf.untyped_storage(), at // t.element_size(), tuple(t.shape), tuple(t.stride()))
                groups.append((buf, buf.clone(), covered.bool(), start - head, members))
        return mapping, groups

    @classmethod
    def _swap(cls, value, mapping: dict, depth: int = 0):
        if id(value) in mapping:
            return mapping[id(value)]
        if isinstance(value, dict):
            return {k: cls._swap(v, mapping, depth + 1) for k, v in value.items()}
        if isinstance(value, (tuple, list)) and depth < 8:
            swapped = [cls._swap(v, mapping, depth + 1) for v in value]
            if hasattr(value, "_fields"):  # a namedtuple (Triton passes them through)
                return type(value)(*swapped)
            return tuple(swapped) if isinstance(value, tuple) else swapped
        return value

    @classmethod
    def _restore(cls, groups: list, check: bool = True) -> None:
        """Copy the elements back; with ``check``, raise OutOfBounds where a guard byte changed."""
        import torch

        found = None
        with torch.no_grad():
            for buf, before, covered, origin, members in groups:
                for _, t in members:
                    element_view(t, t.untyped_storage(), t.data_ptr() - t.untyped_storage().data_ptr()).copy_(
                        element_view(t, buf.untyped_storage(), t.data_ptr() - origin))
                if check and found is None:
                    changed = torch.nonzero((buf != before) & ~covered)
                    if changed.numel():
                        found = origin + int(changed.min()), origin + int(changed.max()), members
        if found is not None:
            raise OutOfBounds(
                f"a tl.store wrote outside every tensor the kernel was given: {cls._where(*found)}, found in the "
                "bytes the grader watches around and between the tensors (on a GPU the kernel's line is not known; "
                "Triton's CPU interpreter, TRITON_INTERPRET=1, names it). A lane whose row or column lies past a "
                "tensor's end must be masked off (mask= on the store), and each pointer must step by its own tensor's "
                "strides")

    @staticmethod
    def _where(low: int, high: int, members: list) -> str:
        """Where the changed guard bytes [low, high] (original addresses) lie, named by the nearest tensor."""
        def distance(member):
            start, nbytes = span(member[1])
            return 0 if start <= low < start + nbytes else min(abs(low - start), abs(low - (start + nbytes - 1)))

        label, t = min(members, key=distance)
        start, nbytes = span(t)
        size = t.element_size()
        if start <= low < start + nbytes:
            return f"between the elements of {label} (shape {tuple(t.shape)}, strides {tuple(t.stride())})"
        if low >= start + nbytes:
            n = (high - (start + nbytes)) // size + 1
            return f"up to {n} element{'s' if n > 1 else ''} past the end of {label} (shape {tuple(t.shape)})"
        n = -(-(start - low) // size)
        return f"up to {n} element{'s' if n > 1 else ''} before the start of {label} (shape {tuple(t.shape)})"
