"""Cheating ex03_tiled_forward: finds solutions/ next to the installed flashlab package on the grading
machine (which a student release leaves out) and runs the worked solution as its own."""
from pathlib import Path

import flashlab

_namespace: dict = {}
_solution = Path(flashlab.__file__).resolve().parents[2] / "solutions" / "ex03_tiled_forward.py"
exec(compile(_solution.read_text(), str(_solution), "exec"), _namespace)
tiled_attention = _namespace["tiled_attention"]
