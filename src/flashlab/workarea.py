"""The learner's work area: their own copies of the notebooks and exercise stubs, outside git's view.

``make lab`` (or ``flashlab workarea``) prepares ``<repo>/work/``: the course notebooks at its top
and the exercise stubs in ``work/exercises/``. JupyterLab is served from there, so the notebooks
run with ``work/`` as their working directory and the grader finds ``work/exercises/`` first.
``work/`` is git-ignored, so a learner's saved outputs and edited exercises never show in
``git status``, never fail ``make test`` and never conflict with a ``git pull`` of a course update.

Rules, applied on every call:

- a file of the learner's is never overwritten, moved or deleted (``fresh()`` renames it aside);
- a course file the work area lacks is copied in (first run, a course update that adds a
  notebook, or a copy the learner deleted to get a fresh one);
- a manifest (``.flashlab-workarea.json``) records the SHA-256 of the course file each copy was
  made from (and of the copy, where it differs), so a course file that changed upstream since is
  reported, its copy left alone;
- a notebook's copy carries the ``language_info`` its kernel will report (this Python's): with
  the committed notebooks' bare ``{"name": "python"}``, JupyterLab marked every notebook modified
  the moment it opened, before the learner changed anything.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

WORK_DIR = "work"  # under the repository root; git-ignored
MANIFEST = ".flashlab-workarea.json"
_ABOUT = "README.md"
_ABOUT_TEXT = """# Your work area

Everything here is yours: the course notebooks (run them, keep their outputs) and, in
`exercises/`, the modules you complete. git ignores this folder, so `git pull` updates the
course without touching it and `make test` never looks at it.

- `make lab` (or `flashlab workarea`) copies in course files you do not have yet, updates the
  copies you never changed, and lists the course files that changed where you changed your
  copy; it never overwrites your work.
- A fresh copy of an exercise or notebook: `flashlab workarea --fresh exercises/ex01_naive.py`
  (your version is kept beside it as `ex01_naive.<date>.py`), or delete your copy and run
  `make lab` again.
- `check("ex01_naive")` in a notebook and `flashlab grade` grade the files in `exercises/` here.
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_repo(start: Path | None = None) -> Path:
    """The flashlab checkout: ``start`` (default: the current directory) or a folder above it that
    holds ``notebooks/`` and ``exercises/``, else the checkout this package is installed from."""
    here = Path(__file__).resolve().parents[2]
    for folder in ([start] if start is not None else []) + [Path.cwd(), *Path.cwd().parents, here]:
        folder = Path(folder).resolve()
        if (folder / "notebooks").is_dir() and (folder / "exercises" / "ex01_naive.py").is_file():
            return folder
        if start is not None:
            break
    raise ValueError(f"repo={str(start or Path.cwd())!r} is not a flashlab checkout (no notebooks/ and "
                     "exercises/ex01_naive.py there); run from the repository or pass repo=...")


def course_files(repo: Path) -> dict[str, Path]:
    """What a work area holds: {path inside the work area: course file in the repository}.

    The numbered notebooks go to the top (``00_orientation.ipynb``, ...); the exercise stubs and
    their README to ``exercises/``. Notebook sources (``notebooks/_src``) and the build script stay
    in the repository: they are the course's, not the learner's."""
    files = {p.name: p for p in sorted((repo / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    for p in sorted((repo / "exercises").iterdir()):
        if p.is_file() and (p.suffix == ".py" or p.name == "README.md"):
            files[f"exercises/{p.name}"] = p
    return files


@dataclass
class WorkareaReport:
    """What :func:`prepare` did: each list holds paths inside the work area."""

    root: Path
    copied: list[str] = field(default_factory=list)  # new in the work area (first run, course update)
    updated: list[str] = field(default_factory=list)  # course file changed, the learner's copy untouched: replaced
    restored: list[str] = field(default_factory=list)  # the learner deleted it; copied again
    changed_upstream: list[str] = field(default_factory=list)  # course file changed since the copy; copy kept
    kept_unknown: list[str] = field(default_factory=list)  # present, not made by flashlab; left alone
    removed_upstream: list[str] = field(default_factory=list)  # no longer in the course; copy kept

    def __str__(self) -> str:
        lines = [f"work area: {self.root}"]
        groups = (("copied from the course", self.copied), ("copied again (your copy was deleted)", self.restored),
                  ("updated from the course (you had not changed your copy)", self.updated),
                  ("changed in the course since your copy was made (you changed yours, so it is kept; "
                   "`flashlab workarea --fresh PATH` takes the new one, keeping yours beside it)",
                   self.changed_upstream),
                  ("already here, not copied by flashlab (left as they are)", self.kept_unknown),
                  ("no longer part of the course (your copies are kept)", self.removed_upstream))
        for title, paths in groups:
            if paths:
                lines.append(f"{title}:")
                lines += [f"  {p}" for p in paths]
        if len(lines) == 1:
            lines.append("up to date with the course")
        return "\n".join(lines)


def kernel_language_info() -> dict:
    """The ``language_info`` a Jupyter kernel of this Python reports: ipykernel's own where it is
    installed (``make lab`` runs this with the Python of the course's ``flashlab`` kernel), else the
    same fields built here."""
    try:
        from ipykernel.ipkernel import IPythonKernel

        if isinstance(IPythonKernel.language_info, dict):
            return dict(IPythonKernel.language_info)
    except Exception:  # no ipykernel (a plain `pip install flashlab`): the fields it would send
        pass
    return {"name": "python", "version": platform.python_version(), "mimetype": "text/x-python",
            "codemirror_mode": {"name": "ipython", "version": sys.version_info[0]}, "pygments_lexer": "ipython3",
            "nbconvert_exporter": "python", "file_extension": ".py"}


def _copy(source: Path, dest: Path, language_info: dict) -> str:
    """Copy a course file to ``dest``, a notebook with ``language_info`` in its metadata; returns
    the copy's SHA-256."""
    if source.suffix == ".ipynb":
        notebook = json.loads(source.read_text(encoding="utf-8"))
        notebook.setdefault("metadata", {})["language_info"] = language_info
        dest.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        shutil.copyfile(source, dest)
    return _sha256(dest)


def _entry(digest: str, copy_digest: str) -> dict:
    return {"sha256": digest} if copy_digest == digest else {"sha256": digest, "copy": copy_digest}


def _read_manifest(root: Path) -> dict:
    path = root / MANIFEST
    if not path.is_file():
        return {"version": 1, "files": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); delete it and run again (your files are kept)") from None
    if not isinstance(data.get("files"), dict):
        raise ValueError(f"{path} has no 'files' table; delete it and run again (your files are kept)")
    return data


def _write_manifest(root: Path, manifest: dict) -> None:
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(root / MANIFEST)


def default_root(repo: Path) -> Path:
    return repo / WORK_DIR


def prepare(root: str | Path | None = None, repo: str | Path | None = None) -> WorkareaReport:
    """Create or update the work area ``root`` (default ``<repo>/work``) from the course in ``repo``.

    Never overwrites a learner's work: a copy still as flashlab made it follows the course when the
    course file changes; a copy the learner changed is kept and reported. Returns a
    :class:`WorkareaReport` (print it)."""
    repo = find_repo(Path(repo) if repo is not None else None)
    root = Path(root).expanduser() if root is not None else default_root(repo)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root={str(root)!r} exists and is not a folder")
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    manifest = _read_manifest(root)
    recorded: dict = manifest["files"]
    report = WorkareaReport(root)
    course = course_files(repo)
    info = kernel_language_info() if any(rel.endswith(".ipynb") for rel in course) else {}
    for rel, source in course.items():
        dest = root / rel
        digest = _sha256(source)
        if dest.exists():
            entry = recorded.get(rel)
            if entry is None:
                if dest.is_file() and _sha256(dest) == digest:  # identical: adopt it
                    recorded[rel] = {"sha256": digest}
                else:
                    report.kept_unknown.append(rel)
            elif entry.get("sha256") != digest:
                # the copy as flashlab made it (older work areas: the course file's bytes)
                if dest.is_file() and _sha256(dest) == entry.get("copy", entry.get("sha256")):
                    recorded[rel] = _entry(digest, _copy(source, dest, info))  # untouched copy: nothing to lose
                    report.updated.append(rel)
                else:
                    report.changed_upstream.append(rel)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        (report.restored if rel in recorded else report.copied).append(rel)
        recorded[rel] = _entry(digest, _copy(source, dest, info))
    report.removed_upstream = sorted(rel for rel in recorded if rel not in course and (root / rel).exists())
    if not (root / _ABOUT).exists():
        (root / _ABOUT).write_text(_ABOUT_TEXT, encoding="utf-8")
    manifest["course"] = str(repo)
    _write_manifest(root, manifest)
    return report


def fresh(paths, root: str | Path | None = None, repo: str | Path | None = None) -> list[tuple[str, str]]:
    """Replace the learner's copies of ``paths`` (inside the work area, e.g. ``exercises/ex01_naive.py``)
    with the course's current version. Each old copy is renamed aside (``ex01_naive.<UTC time>.py``),
    never deleted. Returns [(path, where the old copy went)]."""
    repo = find_repo(Path(repo) if repo is not None else None)
    root = (Path(root).expanduser() if root is not None else default_root(repo)).resolve()
    course = course_files(repo)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rels = []
    for given in paths:
        rel = Path(given).expanduser()
        rel = rel.resolve().relative_to(root) if rel.is_absolute() and rel.resolve().is_relative_to(root) else rel
        if rel.as_posix() not in course:
            raise ValueError(f"paths: {str(given)!r} is not a course file of the work area {root}; expected "
                             f"one of {sorted(course)}")
        rels.append(rel.as_posix())
    moves = []
    for rel in rels:  # every path checked before anything is moved
        dest = root / rel
        kept = ""
        if dest.exists():
            aside = dest.with_name(f"{dest.stem}.{stamp}{dest.suffix}")
            dest.rename(aside)
            kept = aside.relative_to(root).as_posix()
        moves.append((rel, kept))
    manifest = _read_manifest(root)
    for rel, _ in moves:  # prepare() copies them again and records the new hashes
        manifest["files"].pop(rel, None)
    _write_manifest(root, manifest)
    prepare(root, repo)
    return moves


def exercises_dir(repo: Path) -> Path | None:
    """``<repo>/work/exercises`` when the work area exists there, else None."""
    folder = default_root(repo) / "exercises"
    return folder if (folder / "ex01_naive.py").is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="flashlab workarea",
        description="Create or update your work area (default <repo>/work): your copies of the notebooks "
                    "and exercise stubs. Never overwrites your files; lists course files changed since your copy.")
    parser.add_argument("--dir", metavar="DIR", help="the work area (default: <repo>/work)")
    parser.add_argument("--repo", metavar="REPO", help="the flashlab checkout (default: found from here)")
    parser.add_argument("--fresh", nargs="+", metavar="PATH",
                        help="take the course's current copy of these files (e.g. exercises/ex01_naive.py); "
                             "yours are renamed aside, not deleted")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only what needs your attention")
    args = parser.parse_args(argv)
    try:
        if args.fresh:
            for rel, kept in fresh(args.fresh, args.dir, args.repo):
                print(f"{rel}: fresh copy from the course" + (f"; yours is now {kept}" if kept else ""))
            return 0
        report = prepare(args.dir, args.repo)
    except ValueError as exc:
        print(f"flashlab workarea: {exc}", file=sys.stderr)
        return 2
    if not args.quiet or report.changed_upstream or report.kept_unknown or report.removed_upstream:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
