"""The data model of the grader: a case, a part (one function to write), an exercise.

Also the tolerances by dtype and how quiz answers are stored: hashed, which keeps them from a
casual reader of the source but not from anyone who hashes the four letters (offline, no encoding
can hide an answer the grader must check; the quiz is worth little for that reason).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# (atol, rtol) by output dtype: |out - ref| <= atol + rtol * |ref| elementwise.
DEFAULT_TOLERANCE = {"float64": (1e-9, 1e-7), "float32": (2e-5, 2e-4), "float16": (5e-3, 5e-3)}
GRAD_TOLERANCE = {"float64": (1e-8, 1e-6), "float32": (1e-4, 1e-3)}
# A GPU computes fp32 dots in tf32 by default (10-bit mantissa): looser for kernels on CUDA.
KERNEL_GPU_TOLERANCE = {"float32": (1e-2, 1e-2), "float16": (1e-2, 1e-2)}


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: keyword arguments and what the case probes."""

    label: str  # short description shown in reports, e.g. "ragged Nq=37 Nk=53 float32"
    kwargs: dict
    reference_kwargs: dict | None = None  # inputs for the reference when they differ (poison)
    max_peak_bytes: int | None = None  # IO-awareness: extra resident bytes allowed during the call
    # with max_peak_bytes: also refuse reading or writing half an Nq x Nk array of memory held before the
    # call (a pool allocated at import); needs the array to dwarf the allocator's churn of an honest call
    pool_check: bool = True
    # bytes of the returned arrays that max_peak_bytes holds (dK and dV, the size of K and V, in the
    # backward's long-row case), named in its message
    peak_outputs: int = 0
    # bytes the call may hold at once, counted exactly inside the child (torch storages allocated or
    # written during the call, NumPy arrays and Python objects: child.LiveBytes); the same every run
    max_live_bytes: int | None = None
    why: str = ""  # shown when this case fails: what the case is there to catch
    # CPU time allowed, as a multiple of the previous case's (work a causal loop must skip)
    max_cpu_ratio: float | None = None
    # built just before it runs from what the learner's earlier launches used ({"BLOCK_M": 32, ...})
    # and the hidden generator: build(launch_constexprs, rng) -> Case
    build: Callable[[dict, np.random.Generator], "Case"] | None = None
    # (atol, rtol) by dtype for this case, when its inputs limit the precision any correct code reaches
    # (e.g. float32 scores near 1e3 carry ~1e-4 of rounding); the looser of this and the part's applies
    tolerance: dict | None = None
    # {input name: n}: in a kernel exercise that input's rows lie n elements further apart than their
    # length (a column slice of a wider array), so its row stride is not its row length
    row_padding: dict | None = None
    # (exception type, argument name): the call must refuse its arguments with that exception, its
    # message naming the argument (no reference is computed)
    raises: tuple[str, str] | None = None
    # the number (1-based) of the part's hint that speaks to what this case probes: when this case is
    # the first to fail, the report shows that hint first (even at the default level); the idea or
    # the step, never the pseudocode, which stays for the learner to ask for
    hint: int | None = None


@dataclass(frozen=True)
class Part:
    """One function (or quiz answer) of an exercise, with its checks."""

    function: str  # name in the learner's module
    title: str
    points: int
    reference: Callable[..., Any]
    public: Callable[[np.random.Generator], list[Case]]
    hidden: Callable[[np.random.Generator], list[Case]] = lambda rng: []
    hints: tuple[str, ...] = ()
    kind: str = "array"  # "array", "exact", "choice" (hashed letter), "number" (rel. tolerance)
    outputs: tuple[str, ...] = ("output",)  # names of the returned values, for messages
    tolerance: dict = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    gpu_tolerance: dict = field(default_factory=dict)  # overrides when tensors live on CUDA
    tensors: bool = False  # convert array inputs to torch tensors (on CUDA if present)
    must_launch: tuple[str, ...] = ()  # module-level Triton kernels the function must launch
    # a torch.autograd.Function in the learner's module whose backward must compute the returned
    # gradients (the outputs after the first); autograd may not differentiate anything else
    gradients_from: str = ""
    # the part computes with torch tensors: Tensor.numpy, __array__, __dlpack__, data_ptr, untyped_storage,
    # tolist (child.TORCH_BRIDGES) are refused in its calls, so the work stays where the grader counts it
    torch_only: bool = False
    time_limit_s: float = 10.0  # per case
    # known mistakes, (what the mistake is, fn(case kwargs, launch constexprs) -> the mistaken output)
    mistakes: tuple = ()
    # (kernel constexpr, argument): every launch must use the tile size the case asks for, and no
    # integer constexpr above it (a kernel that widens its tile to the whole row walks no blocks)
    launch_blocks: tuple[tuple[str, str], ...] = ()
    # tiles the learner chooses (no block argument): every integer constexpr of every launch at most this
    # (0: no limit), so a case longer than it leaves the kernel's loop several blocks to walk
    max_launch_block: int = 0


@dataclass(frozen=True)
class Exercise:
    name: str  # module name in exercises/ and the id given to check()
    title: str
    parts: tuple[Part, ...]
    needs_triton: bool = False

    @property
    def points(self) -> int:
        return sum(p.points for p in self.parts)


def answer_hash(question: str, answer: Any) -> str:
    """Stored form of a multiple-choice answer (so answers are not readable in the source)."""
    text = str(answer).strip().lower().strip("()").strip()
    return hashlib.sha256(f"flashlab/{question}/{text}".encode()).hexdigest()[:20]

