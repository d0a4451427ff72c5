"""The instructor's test pack: extra hidden cases and point weights (`flashlab grade --tests instructor`).

Left out of the student release (`flashlab release student`). Add cases for your class here:
students never see them, and they are graded against the course's own references. A case is
`Case(label, kwargs)` with NumPy inputs, as in `flashlab/grading/cases.py`; `why` says what it probes.
The grader ends each label with "[instructor's test pack]"; the Gradescope report withholds those cases'
inputs and values from students.
"""
from flashlab.grading.cases import attn_label, qkv
from flashlab.grading.spec import Case


def tiled_long_and_thin(rng):
    """One query row against many keys with blocks larger than the row count, causal and not."""
    out = []
    for causal, nq in ((False, 1), (True, 3)):
        kw = dict(qkv(rng, nq, 257, 8, dtype="float64"), causal=causal, block_q=64, block_k=32)
        out.append(Case(attn_label(kw, causal, " blocks 64x32"), kw,
                        why="a query block taller than the sequence; a key loop with a ragged last tile"))
    return out


def naive_bytes_large(rng):
    return [Case("nq=131072 nk=131072 d=128 dv=128 itemsize=2",
                 dict(nq=131072, nk=131072, d=128, dv=128, itemsize=2), why="sizes whose products pass 2**32")]


CASES = {
    "ex03_tiled_forward": {"tiled_attention": tiled_long_and_thin},
    "ex01_naive": {"naive_hbm_bytes": naive_bytes_large},
}

# Points per part for this class (the registry's own points where a part is not listed).
WEIGHTS = {
    "ex03_tiled_forward": {"tiled_attention": 6},
    "ex11_quiz": {"Q1": 0.5, "Q2": 0.5, "Q3": 0.5, "Q4": 0.5},
}
