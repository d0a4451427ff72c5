"""Where the host's time goes in one forward+backward step of ``flash_attention`` through autograd,
with the launch plans (``flashlab.kernels.plans``) off, on with Triton's JIT launch, and on with
the compiled kernels launched directly: all three in the same run, interleaved.

Prints, per shape and per path (``off``: plans.ENABLED = False, every launch built anew as before
plans; ``plans_jit``: plans on, launch_plan.DIRECT_LAUNCH = False; ``plans``: both on),
microseconds per step of host time (30 steps issued back to back, nothing waiting for the GPU)
and of wall time (until the GPU finished them), median of 3 interleaved rounds, for:

  lib         torch.autograd.grad(flash_attention(q, k, v, causal), (q, k, v), do)
  lib_1thread the same with autograd's device threads off (backward runs on the calling thread)
  direct      the same kernels without autograd (best_forward, choose_backward, run_backward)
  fwd_only    flash_attention under torch.no_grad()

and once cuDNN (torch.autograd.grad of SDPA's cuDNN backend); then, with plans on, each library
piece alone, the time inside each library phase per ``lib`` step (perf_counter around the
function, on whichever thread runs it), and whether a ``lib`` step synchronises with the GPU
(``torch.cuda.set_sync_debug_mode("error")``). ``--profile`` adds cProfile's top functions.

    python benchmarks/host_path.py [--out results.json] [--profile]
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SHAPES = {  # name: (B, H, Hkv, N, d); bf16, causal
    "gqa_n2048": (1, 32, 8, 2048, 128),
    "mha_d128_n2048": (8, 16, 16, 2048, 128),
}
STEPS, REPEATS = 30, 3


def host_us(step, steps: int = STEPS, repeats: int = REPEATS) -> dict:
    """Medians over ``repeats`` of the host time to issue ``steps`` steps and the wall time until
    the GPU finished them, microseconds per step."""
    runs = [_common.issue_and_wall_us(step, steps, warmup=3 if i == 0 else 0) for i in range(repeats)]
    return {"host_us": statistics.median(r[0] for r in runs), "wall_us": statistics.median(r[1] for r in runs)}


def phase_timers(targets: dict) -> tuple[dict, callable]:
    """Wrap each (module, name) in ``targets`` with a perf_counter accumulator; returns the totals
    and an undo function."""
    totals = {label: [0.0, 0] for label in targets}
    undo = []
    for label, (module, name) in targets.items():
        original = getattr(module, name)

        @functools.wraps(original)
        def timed(*args, __original=original, __label=label, **kwargs):
            t0 = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                cell = totals[__label]
                cell[0] += time.perf_counter() - t0
                cell[1] += 1

        setattr(module, name, timed)
        undo.append((module, name, original))

    def restore():
        for module, name, original in undo:
            setattr(module, name, original)

    return totals, restore


def _empty_function():
    """An autograd Function on (q, k, v) that launches nothing: autograd's own cost per step."""
    import torch

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return torch.empty_like(q)

        @staticmethod
        def backward(ctx, do):
            q, k, v = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    return Empty


PATHS = ("off", "plans_jit", "plans")  # plans.ENABLED, launch_plan.DIRECT_LAUNCH: off/off, on/off, on/on


def set_path(name: str) -> None:
    from flashlab.kernels import launch_plan, plans

    plans.ENABLED = name != "off"
    launch_plan.DIRECT_LAUNCH = name == "plans"


def main(argv=None) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashlab import decode
    from flashlab.kernels import attention, flash_bwd, ladder, plans
    from flashlab.kernels.attention import flash_attention

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--profile", action="store_true", help="add cProfile's top functions of 30 lib steps")
    args = p.parse_args(argv)
    results = {"environment": _common.environment()}
    for label, (B, H, Hkv, N, d) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        k, v = (torch.randn(B, Hkv, N, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                for _ in range(2))
        do = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
        spec = attention.attn_spec(q, k, v, True)

        def lib():
            return torch.autograd.grad(flash_attention(q, k, v, True), (q, k, v), do)

        def lib_1thread():
            with torch.autograd.set_multithreading_enabled(False):
                return lib()

        def direct():
            o, lse = attention.best_forward(q.detach(), k.detach(), v.detach(), spec)
            name = ladder.choose_backward(q, k, spec)
            return ladder.run_backward(name, q.detach(), k.detach(), v.detach(), o, lse, do, spec)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
            return torch.autograd.grad(o, (q, k, v), do)

        def fwd_only():
            with torch.no_grad():
                return flash_attention(q, k, v, True)

        fns = (("lib", lib), ("lib_1thread", lib_1thread), ("direct", direct), ("fwd_only", fwd_only))
        # -- the three paths in interleaved rounds (one warm-up pass first: compiles, plans)
        for path in PATHS:
            set_path(path)
            for _, fn in fns:
                _common.issue_and_wall_us(fn, 2, warmup=1)
        rounds = {path: {name: [] for name, _ in fns} for path in PATHS}
        rounds["cudnn"] = {"lib": []}
        for _ in range(REPEATS):
            for path in PATHS:
                set_path(path)
                for name, fn in fns:
                    rounds[path][name].append(_common.issue_and_wall_us(fn, STEPS))
            rounds["cudnn"]["lib"].append(_common.issue_and_wall_us(cudnn, STEPS))
        row = {path: {name: {"host_us": round(statistics.median(r[0] for r in runs), 1),
                             "wall_us": round(statistics.median(r[1] for r in runs), 1)}
                      for name, runs in per.items()} for path, per in rounds.items()}
        set_path("plans")
        # -- the pieces one at a time, plans on: autograd alone (a Function that launches nothing),
        #    then each library step of the forward and backward
        o, lse = attention.best_forward(q.detach(), k.detach(), v.detach(), spec)
        empty = _empty_function()
        pieces = {
            "autograd_empty_function": lambda: torch.autograd.grad(empty.apply(q, k, v), (q, k, v), do),
            "check_inputs": lambda: attention.check_inputs(q, k, v, True),
            "attn_spec": lambda: attention.attn_spec(q, k, v, True),
            "ladder.choose": lambda: ladder.choose(q, k, v, spec),
            "best_forward": lambda: attention.best_forward(q, k, v, spec),
            "flash_bwd.backward": lambda: flash_bwd.backward(q, k, v, o, lse, do, spec),
        }
        row["pieces_host_us"] = {name: round(host_us(fn)["host_us"], 1) for name, fn in pieces.items()}
        row["forward_rung"] = [plan.rung for plan in plans._FORWARD.values()]
        if args.profile:
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for _ in range(STEPS):
                lib()
            prof.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
            row["profile_cumulative"] = text.getvalue().splitlines()[:70]
        totals, restore = phase_timers({
            "attn_spec": (attention, "attn_spec"), "decode.takes_over": (decode, "takes_over"),
            "best_forward": (attention, "best_forward"), "choose_backward": (ladder, "choose_backward"),
            "run_backward": (ladder, "run_backward"), "plans.backward": (plans, "backward"),
        })
        try:
            torch.cuda.synchronize()
            for _ in range(STEPS):
                lib()
            torch.cuda.synchronize()
        finally:
            restore()
        row["phases_us_per_step"] = {name: round(t / STEPS * 1e6, 1) for name, (t, n) in totals.items()}
        torch.cuda.set_sync_debug_mode("error")
        try:
            lib()
            row["syncs"] = "none"
        except Exception as exc:  # noqa: BLE001 - the message and where it came from are the result
            row["syncs"] = f"{type(exc).__name__}: {exc}"[:300] + " | " + " <- ".join(
                f"{f.name}:{f.lineno}" for f in traceback.extract_tb(exc.__traceback__)[-6:])
        finally:
            torch.cuda.set_sync_debug_mode(0)
        results[label] = row
        print(label, json.dumps({k: v for k, v in row.items() if k != "profile_cumulative"}, indent=1), flush=True)
        if args.out:  # after each shape: a later failure keeps what was measured
            _common.write_json(Path(args.out), results)
    print(table(results), flush=True)
    return 0


def table(results: dict) -> str:
    """Host us per step (wall us in brackets), one line per shape and path."""
    lines = ["| shape | path | lib | lib 1-thread | no autograd | forward alone |", "|---|---|---|---|---|---|"]
    for label, row in results.items():
        if label == "environment":
            continue
        for path in PATHS + ("cudnn",):
            cells = [f"{row[path][n]['host_us']:.0f} ({row[path][n]['wall_us']:.0f})" if n in row[path] else ""
                     for n in ("lib", "lib_1thread", "direct", "fwd_only")]
            lines.append(f"| {label} | {path} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
