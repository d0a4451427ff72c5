"""Builds the course notebooks (``notebooks/NN_*.ipynb``) from their sources in ``notebooks/_src/``.

Each source is a Python file in the "percent" format, so cells are easy to edit and diff::

    # %% [markdown]
    # # A title
    # Prose, one ``# `` prefix per line.

    # %%
    code = "a code cell"

The notebooks are written without outputs or execution counts, nbformat 4, kernel ``flashlab``,
with cell ids derived from the notebook name and cell position, so a build is reproducible and
``tests/test_notebooks.py`` can check that the committed notebooks equal a fresh build.

    python notebooks/_build.py          # rewrite every notebook from its source
    python notebooks/_build.py --check  # exit 1 if a committed notebook differs from its source
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "_src"
KERNELSPEC = {"name": "flashlab", "display_name": "flashlab (Python 3)", "language": "python"}
_MARKER = re.compile(r"^# %%(?P<kind> \[markdown\])?\s*$")


def parse_cells(text: str) -> list[tuple[str, str]]:
    """[(cell_type, source)] of a percent-format file; text before the first marker is ignored."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _MARKER.match(line)
        if match:
            cells.append(("markdown" if match.group("kind") else "code", []))
        elif cells:
            cells[-1][1].append(line)
    out = []
    for kind, lines in cells:
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if kind == "markdown":
            bad = [ln for ln in lines if ln and not ln.startswith("#")]
            if bad:
                raise ValueError(f"markdown line without a '# ' prefix: {bad[0]!r}")
            lines = [ln[2:] if ln.startswith("# ") else ln[1:] for ln in lines]
        if lines:
            out.append((kind, "\n".join(lines)))
    return out


def build_notebook(source: Path):
    """The nbformat NotebookNode for one source file."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    stem = source.stem
    cells = []
    for index, (kind, text) in enumerate(parse_cells(source.read_text(encoding="utf-8"))):
        make = new_markdown_cell if kind == "markdown" else new_code_cell
        cells.append(make(text, id=f"{stem[:2]}-{index:03d}"))
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": dict(KERNELSPEC),
        "language_info": {"name": "python"},
    })
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nb


def render(source: Path) -> str:
    """The exact text written to ``notebooks/<stem>.ipynb``."""
    import nbformat

    return nbformat.writes(build_notebook(source)) + "\n"


def sources() -> list[Path]:
    return sorted(SOURCES.glob("[0-9][0-9]_*.py"))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source in sources():
        target = HERE / f"{source.stem}.ipynb"
        text = render(source)
        if check:
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                stale.append(target.name)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python notebooks/_build.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
