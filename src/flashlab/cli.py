"""The ``flashlab`` command: doctor, grade, progress, workarea, traffic, tiles, bench, tour, release.

Each sub-command lives in the module that owns its subject; this file only dispatches.
Every sub-command's ``main(argv)`` takes the remaining arguments and returns an exit code.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "doctor": ("flashlab.doctor", "main", "versions, GPU or not, Triton mode, known-bad combinations"),
    "grade": ("flashlab.grading.cli", "main", "grade exercises and print a score table"),
    "progress": ("flashlab.progress", "main", "exercises and self-tests: points so far, what to do next"),
    "traffic": ("flashlab.viz.cli", "traffic_main", "HBM traffic figures as PNG files"),
    "tiles": ("flashlab.viz.cli", "tiles_main", "the tile schedule as PNG and animated GIF"),
    "bench": ("flashlab.bench", "main", "time flash_attention against PyTorch SDPA (GPU only)"),
    "tour": ("flashlab.tour", "main", "a headless run of the main pipeline, no GPU needed"),
    "release": ("flashlab.release", "main", "write a student release or a Gradescope autograder"),
    "workarea": ("flashlab.workarea", "main", "create or update your work area (work/): notebooks, exercises"),
}


def usage() -> str:
    lines = ["usage: flashlab COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<8} {text}" for name, (_, _, text) in COMMANDS.items()]
    lines += ["", "`flashlab COMMAND --help` describes each command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"flashlab: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
