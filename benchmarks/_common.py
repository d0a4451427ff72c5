"""Helpers shared by the benchmark scripts: refusing to time where timing means nothing,
describing the machine in every results file, and the attention variants being compared.

Everything here imports torch/triton inside functions, so ``--dry-run`` works on a laptop.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO / "src"))


def timing_refusal() -> str | None:
    """Why GPU timing is impossible here (a sentence), or None when it is possible."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return ("TRITON_INTERPRET is set: Triton kernels would run in the CPU interpreter, whose "
                "time says nothing about GPU speed. Unset it and run on a machine with a CUDA GPU.")
    try:
        import torch
    except ImportError:
        return "torch is not installed: the benchmark needs torch with CUDA and a CUDA GPU."
    if not torch.cuda.is_available():
        return ("no CUDA GPU is visible (torch.cuda.is_available() is False): the benchmark only "
                "times on a GPU. Use --dry-run to see what it would run.")
    return None


def environment() -> dict:
    """Device name, versions and date: every results file carries this block."""
    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "host": platform.node(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["device"] = props.name
            info["capability"] = f"{props.major}.{props.minor}"
            info["sm_count"] = props.multi_processor_count
            info["memory_gib"] = round(props.total_memory / 2**30, 1)
            info["cudnn"] = torch.backends.cudnn.version()
    except ImportError:
        pass
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    return info


def write_json(path: Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)


# ---------------------------------------------------------------- attention variants (torch)

def naive_attention(q, k, v, causal: bool, scale: float):
    """Naive PyTorch attention: matmul -> (masked_fill) -> softmax -> matmul, all in q's dtype.

    Materialises S and P (B, H, Nq, Nk), as the paper's Algorithm 0 does.
    """
    import torch

    s = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, Nq, Nk)
    if causal:
        n_q, n_k = s.shape[-2:]
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1)  # (Nq, Nk)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)  # (B, H, Nq, Nk)
    return torch.matmul(p, v)  # (B, H, Nq, d)


def sdpa(backend_name: str):
    """A function (q, k, v, causal, scale) -> o running SDPA with exactly one backend."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def run(q, k, v, causal, scale):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return run


def reference(q, k, v, causal: bool, scale: float):
    """float32 attention on the given (small) slice: the trusted twin every variant is checked on."""
    return naive_attention(q.float(), k.float(), v.float(), causal, scale)


def rel_err(x, ref) -> float:
    """||x - ref|| / ||ref|| in float64; inf when x holds NaN or inf."""
    import torch

    x = x.detach().double()
    if not torch.isfinite(x).all():
        return math.inf
    ref = ref.detach().double()
    return float((x - ref).norm() / ref.norm())


def issue_and_wall_us(fn, calls: int, warmup: int = 3) -> tuple[float, float]:
    """Host time per call of ``calls`` back-to-back calls of ``fn``: (to issue them, nothing waiting
    for the GPU; until the GPU is done), in microseconds, after ``warmup`` calls. Where the host is
    slower than the GPU the two agree: the calls are launch-bound."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6
