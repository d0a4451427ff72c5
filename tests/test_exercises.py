"""The exercises teach by construction: stubs hold the contract, never the code; each new exercise
catches the mistakes a learner plausibly makes; the Triton solutions compile for a real GPU.

- Stubs and solutions share at most three code lines (counted as described in _code_lines).
- Plausible mistakes: a solution with one realistic bug, graded with a fixed seed, fails that
  part (and only that part) with the expected kind of failure.
- The solutions' kernels compile for sm90 (tests/sm90_compile_exercises.py; no GPU needed): the
  interpreter accepts what a GPU rejects (dot shapes < 16, scalar loop-carried types, ...).
"""
import ast
import io
import json
import os
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from flashlab.grading import EXERCISES, check

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
MAX_SHARED_LINES = 3


def _code_lines(path: Path) -> set[str]:
    """The module's code lines, normalised (whitespace collapsed), as a set.

    Excluded: blank lines, comments, docstrings, imports, decorators, the signature lines of every
    ``def`` and ``class`` (from the decorator to the line before the body: the stub must keep them),
    ``pass`` and ``raise NotImplementedError(...)`` (the stub's placeholders).
    """
    source = path.read_text()
    tree = ast.parse(source)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            skip.update(range(first, node.body[0].lineno))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip.update(range(body[0].lineno, body[0].end_lineno + 1))  # a docstring
    comments = {}  # line -> column where its comment starts
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
    lines = set()
    for number, line in enumerate(source.splitlines(), 1):
        if number in skip:
            continue
        code = " ".join(line[:comments.get(number, len(line))].split())
        if code and code != "pass" and not code.startswith("raise NotImplementedError"):
            lines.add(code)
    return lines


def test_code_lines_skips_what_it_says():
    text = ('"""Doc."""\nimport numpy as np\n\n\n@deco\ndef f(a,\n      b):\n    """Doc\n    more."""\n'
            '    x = a + b  # add\n    # alone\n    pass\n    raise NotImplementedError("Exercise 01: f")\n'
            '    return x\n')
    path = HERE / "_code_lines_probe.py"
    try:
        path.write_text(text)
        assert _code_lines(path) == {"x = a + b", "return x"}
    finally:
        path.unlink()


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_stub_shares_at_most_three_code_lines_with_its_solution(name):
    shared = _code_lines(REPO / "exercises" / f"{name}.py") & _code_lines(REPO / "solutions" / f"{name}.py")
    assert len(shared) <= MAX_SHARED_LINES, f"{name}: the stub gives away {sorted(shared)}"


def test_every_part_unfolds_three_hint_levels():
    for name, exercise in EXERCISES.items():
        if not name.startswith("ex"):  # the notebooks' self-tests show an explanation instead
            continue
        for part in exercise.parts:  # the idea, the step, the pseudocode (for the quiz: the reasoning)
            assert len(part.hints) == 3 and all(part.hints), (name, part.function, len(part.hints))


# (exercise, the mistake, text in the solution, replacement, parts that must fail (the first with
# this failure kind), failure kind, whether the public cases already catch it). Mistakes the public
# cases catch are graded public-only (seconds); the others need the hidden cases (a fixed seed).
MISTAKES = [
    ("ex07_kernel_inner_loop", "padded keys not masked to -inf",
     'qk = tl.where(offs_n[None, :] < N_K, qk, float("-inf"))  # padded keys never count', "",
     ("flash_forward",), "value", False),
    ("ex08_kernel_causal", "diagonal excluded from the causal mask", "offs_n[None, :] <= offs_m[:, None]",
     "offs_n[None, :] < offs_m[:, None]", ("flash_forward",), "nan", True),
    ("ex08_kernel_causal", "loop bound from the block end, not the last real row",
     "tl.minimum((start_m + 1) * BLOCK_M, N_Q)", "(start_m + 1) * BLOCK_M + BLOCK_N", ("flash_forward",), "nan",
     False),
    ("ex12_triton_online_softmax", "running sum not rescaled when the max grows",
     "l_i = l_i * tl.exp(m_i - m_ref) +", "l_i = l_i +", ("online_row_softmax",), "value", True),
    ("ex12_triton_online_softmax", "no guard for a block that is all -inf",
     'm_ref = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_ref = m_new", ("online_row_softmax",), "nan",
     False),
    ("ex13_triton_backward", "causal mask not applied to the recomputed P",
     "keep = row_ok[:, None] & (offs_n[None, :] < N_K)\n        if CAUSAL:\n            keep = keep &",
     "keep = row_ok[:, None] & (offs_n[None, :] < N_K)\n        if CAUSAL:\n            keep = keep |",
     ("flash_backward_dkdv",), "value", True),
    ("ex13_triton_backward", "dK without the softmax scale", "dk += tl.dot(tl.trans(ds).to(q.dtype), q) * sm_scale",
     "dk += tl.dot(tl.trans(ds).to(q.dtype), q)", ("flash_backward_dkdv",), "value", True),
    ("ex13_triton_backward", "dQ without the softmax scale", "dq += tl.dot(ds.to(k.dtype), k) * sm_scale",
     "dq += tl.dot(ds.to(k.dtype), k)", ("flash_backward_dq",), "value", True),
    ("ex14_split_kv_decode", "empty split divides 0 by 0", "o = acc / tl.where(l_i > 0, l_i, 1.0)", "o = acc / l_i",
     ("split_kv_partials",), "nan", False),
    ("ex14_split_kv_decode", "splits averaged instead of weighted by exp(lse_s - lse)",
     "return (weights[..., None] * o_part).sum(dim=1)", "return o_part.mean(dim=1)", ("combine_splits",), "value",
     True),
    ("ex15_autograd_flash", "lse saved as log(l) without the max", "lse[..., q0:q1] = m_i + torch.log(l_i)",
     "lse[..., q0:q1] = torch.log(l_i)", ("flash_forward_lse", "forward_and_backward"), "value", True),
    ("ex15_autograd_flash", "backward recomputes P without the causal mask",
     "p = p.masked_fill(cols[None, :] > rows[:, None], 0.0)", "pass", ("forward_and_backward",), "value", True),
]


@pytest.mark.parametrize("exercise, mistake, old, new, parts, kind, public", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_plausible_mistake_fails_its_part(tmp_path, exercise, mistake, old, new, parts, kind, public):
    source = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert source.count(old) == 1, "the solution changed: update this mistake"
    (tmp_path / f"{exercise}.py").write_text(source.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path, seed=12345, public_only=public)
    status = {r["function"]: r["status"] for r in report.results}
    assert {f for f, s in status.items() if s == "failed"} == set(parts), status
    assert set(status.values()) <= {"failed", "public passed" if public else "passed"}, status
    failed = next(r for r in report.results if r["function"] == parts[0])
    assert failed["earned"] == 0 and failed["failure"]["kind"] == kind, failed["failure"]
    assert failed["failure"]["group"] == ("public" if public else "hidden"), failed["failure"]


def test_new_kernels_compile_for_sm90():
    names = ["ex07_kernel_inner_loop", "ex08_kernel_causal", "ex12_triton_online_softmax", "ex13_triton_backward",
             "ex14_split_kv_decode"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    env.pop("TRITON_INTERPRET", None)  # compiled mode
    run = subprocess.run([sys.executable, str(HERE / "sm90_compile_exercises.py"), *names], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert {key.split(".")[0] for key in report} == set(names)
    for key, builds in report.items():
        for build in builds:
            assert build["target"] and build["cubin"] > 0, (key, build)
