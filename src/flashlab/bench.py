"""``flashlab bench``: run the GPU benchmarks of ``benchmarks/`` (the speed protocol of benchmarks/README.md).

    flashlab bench [ARGS]          # benchmarks/bench_attention.py: flashlab vs SDPA, TFLOP/s
    flashlab bench memory [ARGS]   # benchmarks/bench_memory.py: peak memory, naive vs flash
    flashlab bench ncu [ARGS]      # benchmarks/ncu_traffic.py: DRAM bytes (Nsight Compute) vs model
    flashlab bench --mine [--exercises-dir DIR] [--module NAME]
                                   # YOUR forward kernel beside the course's rungs and SDPA

Timing needs a CUDA GPU and compiled Triton kernels. Under ``TRITON_INTERPRET=1`` (the CPU
interpreter) or without CUDA this command refuses with a message instead of printing numbers
that mean nothing; ``--dry-run`` and ``--help`` still work. The scripts live in the repository's
``benchmarks/`` folder (they are not part of the installed package): run from a checkout.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

SCRIPTS = {"attention": "bench_attention.py", "memory": "bench_memory.py", "ncu": "ncu_traffic.py"}
MINE_SHAPES = ((16, 16, 1024), (4, 16, 4096), (2, 16, 8192))  # (B, H, N): B x N = 16384 as in bench_attention
MINE_D = 64
MINE_EXERCISE = "ex07_kernel_inner_loop"  # flash_forward(q, k, v) on (Z, N, d); a full-kernel exercise wins


def refusal() -> str | None:
    """Why timing is impossible here, or None. Checked before triton is ever imported."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return ("TRITON_INTERPRET is set, so Triton kernels would run in the CPU interpreter and any "
                "time would measure the interpreter, not a GPU. Unset TRITON_INTERPRET and run on a "
                "machine with a CUDA GPU.")
    try:
        import torch
    except ImportError:
        return "torch is not installed; `flashlab bench` needs torch with CUDA and a CUDA GPU."
    if not torch.cuda.is_available():
        return ("no CUDA GPU is visible (torch.cuda.is_available() is False). `flashlab bench` only "
                "times on a GPU; committed results are in benchmarks/results/ (notebook 08 plots them).")
    return None


def find_script(name: str) -> Path:
    """benchmarks/<name> of the checkout this package was installed from (or the working dir)."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        path = root / "benchmarks" / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"benchmarks/{name} not found next to the package or in {Path.cwd()}; "
                            "run `flashlab bench` from a flashlab checkout")


# ----------------------------------------------------------------------------- --mine
def _flash_forward_args(path: Path) -> list[str]:
    """Argument names of ``flash_forward`` in a module, read without importing it ([] if none)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "flash_forward":
            return [a.arg for a in node.args.args + node.args.kwonlyargs]
    return []


def find_mine(exercises_dir=None, module: str | None = None):
    """(module name, flash_forward) of the learner's forward kernel exercise.

    Takes the first exercise module whose ``flash_forward`` has a ``scale`` parameter (the whole
    kernel, ``flash_forward(q, k, v, causal=False, scale=None)``), else ex07's; ``module`` picks one
    by name. Every forward exercise works on (Z, N, d) tensors, Z = batch x heads.
    """
    from flashlab.grading import find_exercises_dir

    folder = find_exercises_dir(exercises_dir)
    paths = [folder / f"{module}.py"] if module else sorted(folder.glob("ex*.py"))
    if module and not paths[0].is_file():
        raise ValueError(f"module={module!r}: no {paths[0]}")
    full = [p for p in paths if "scale" in _flash_forward_args(p)]
    chosen = paths[0] if module else (full[0] if full else folder / f"{MINE_EXERCISE}.py")
    if not chosen.is_file():
        raise ValueError(f"no {chosen.name} in {folder}: nothing of yours to time")
    spec = importlib.util.spec_from_file_location(f"flashlab_mine_{chosen.stem}", chosen)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(folder))
    fn = getattr(mod, "flash_forward", None)
    if not callable(fn):
        raise ValueError(f"{chosen} has no function flash_forward(q, k, v, ...)")
    return chosen.stem, fn


def _median_ms(fn) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=20, rep=60, return_mode="median"))


def time_mine(fn, shapes=MINE_SHAPES, d: int = MINE_D) -> list[dict]:
    """Time the learner's ``fn`` beside rungs v0-v3, flash_attention and SDPA (fp16, not causal).

    Each row: {"shape", "ms": {name: ms or None}, "mine_err", "sdpa_err", "ok"}; errors are max |out - ref|
    against float32 attention on the same inputs, and "ok" is the course's rule: at most twice SDPA's
    error plus fp16's floor. Needs a CUDA GPU.
    """
    import torch

    from flashlab.kernels import ladder
    from flashlab.kernels.attention import ERROR_FLOOR, attention_reference, flash_attention, max_error

    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for batch, heads, n in shapes:
        gen = torch.Generator(device="cuda").manual_seed(n)
        q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=torch.float16, generator=gen)
                   for _ in range(3))  # (B, H, N, d)
        flat = [x.reshape(batch * heads, n, d) for x in (q, k, v)]  # (Z, N, d), Z = B x H
        mine = lambda: fn(*flat).reshape(batch, heads, n, d)  # noqa: E731
        sl = (slice(0, 1), slice(0, 2))
        ref = attention_reference(q[sl], k[sl], v[sl]).float()  # (1, 2, N, d)
        with torch.no_grad():
            row = dict(shape=(batch, heads, n, d), ms={})
            try:
                row["mine_err"] = max_error(mine()[sl], ref)
            except Exception as exc:  # noqa: BLE001  the learner's kernel may raise: report, keep going
                row["mine_err"], row["error"] = float("inf"), f"{type(exc).__name__}: {exc}"
            row["sdpa_err"] = max_error(sdpa(q[sl], k[sl], v[sl]), ref)
            row["ok"] = row["mine_err"] <= 2 * row["sdpa_err"] + ERROR_FLOOR["float16"]
            timed = {"mine": mine if "error" not in row else None}
            timed.update({name: (lambda f=ladder.RUNGS[name]: f(q, k, v, False, None))
                          for name in ("v0_grid_bh", "v1_minimal", "v2_exp2_causal", "v3_autotuned")
                          if name in ladder.RUNGS})
            timed["flash_attention"] = lambda: flash_attention(q, k, v)
            timed["sdpa"] = lambda: sdpa(q, k, v)
            for name, call in timed.items():
                try:
                    row["ms"][name] = None if call is None else _median_ms(call)
                except Exception:  # noqa: BLE001  a rung that does not apply here is left blank
                    row["ms"][name] = None
        rows.append(row)
    return rows


def mine_table(rows: list[dict], module: str) -> str:
    """The rows of :func:`time_mine` as text: ms per implementation, your TFLOP/s and speed vs SDPA."""
    names = list(rows[0]["ms"]) if rows else []
    labels = {k: k.replace("_causal", "").replace("_autotuned", "") for k in names}
    width = {k: max(14, len(labels[k]) + 2) for k in names}  # a column never runs into the next
    lines = [f"your flash_forward ({module}) beside the course's kernels and PyTorch SDPA: fp16, not causal, "
             "median ms (triton.testing.do_bench)",
             f"{'B,H,N,d':<16}" + "".join(f"{labels[k]:>{width[k]}}" for k in names)
             + f"{'mine TFLOP/s':>14}{'SDPA/mine':>11}  check"]
    for r in rows:
        b, h, n, d = r["shape"]
        ms = r["ms"]
        cells = "".join(f"{ms[k]:>{width[k]}.3f}" if ms[k] else f"{'-':>{width[k]}}" for k in names)
        tflops = f"{4 * b * h * n * n * d / (ms['mine'] * 1e-3) / 1e12:>14.1f}" if ms.get("mine") else f"{'-':>14}"
        ratio = f"{ms['sdpa'] / ms['mine']:>10.2f}x" if ms.get("mine") and ms.get("sdpa") else f"{'-':>11}"
        check = "ok" if r["ok"] else f"WRONG (max err {r['mine_err']:.3g}) {r.get('error', '')}"
        lines.append(f"{b},{h},{n},{d}".ljust(16) + cells + tflops + ratio + "  " + check)
    return "\n".join(lines)


def mine(exercises_dir=None, module: str | None = None) -> str:
    """Your forward kernel timed beside the course's (a table), or why it cannot be timed here."""
    why = refusal()
    if why:
        from flashlab.course import wrap_prose

        return wrap_prose(f"flashlab bench --mine: not timing here: {why}")
    name, fn = find_mine(exercises_dir, module)
    return mine_table(time_mine(fn), name)


def mine_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="flashlab bench --mine", description=(
        "Time your forward kernel exercise beside rungs v0-v3, flash_attention and PyTorch SDPA (GPU only)."))
    parser.add_argument("--exercises-dir", metavar="DIR", help="the folder of your exercises")
    parser.add_argument("--module", metavar="NAME", help=f"the exercise module to time (default: a full-kernel "
                        f"exercise if there is one, else {MINE_EXERCISE})")
    args = parser.parse_args(argv)
    why = refusal()
    if why:
        print(f"flashlab bench --mine: refusing to time: {why}", file=sys.stderr)
        return 2
    try:
        print(mine(args.exercises_dir, args.module))
    except ValueError as exc:
        print(f"flashlab bench --mine: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--mine" in argv:
        return mine_main([a for a in argv if a != "--mine"])
    which = "attention"
    if argv and argv[0] in SCRIPTS:
        which, argv = argv[0], argv[1:]
    if not any(a in ("--dry-run", "-h", "--help") for a in argv):
        why = refusal()
        if why:
            print(f"flashlab bench: refusing to time: {why}", file=sys.stderr)
            return 2
    path = find_script(SCRIPTS[which])
    if any(a in ("-h", "--help") for a in argv):
        print(f"flashlab bench [{' | '.join(SCRIPTS)}] [ARGS...] runs benchmarks/{SCRIPTS[which]} (here: {which}); "
              "`flashlab bench --mine --help`: time your own kernel.\n")
    spec = importlib.util.spec_from_file_location(f"flashlab_bench_{which}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program, sys.argv[0] = sys.argv[0], f"flashlab bench {which}"  # the script's usage line names the command
    try:
        return int(module.main(argv) or 0)
    finally:
        sys.argv[0] = program
