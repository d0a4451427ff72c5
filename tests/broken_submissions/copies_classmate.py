"""Cheating ex01_naive in a --batch run: reads a classmate's ex01_naive.py from the folder next to its
own (every student's folder sits in the same submissions folder) and runs it as its own."""
from pathlib import Path

_namespace: dict = {}
for _folder in sorted(Path(__file__).resolve().parents[1].iterdir()):
    _theirs = _folder / "ex01_naive.py"
    if _theirs.resolve() != Path(__file__).resolve() and _theirs.is_file():
        exec(compile(_theirs.read_text(), str(_theirs), "exec"), _namespace)
        break
naive_attention = _namespace.get("naive_attention")
naive_hbm_bytes = _namespace.get("naive_hbm_bytes")
