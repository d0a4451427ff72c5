"""Lazy public names for a package (PEP 562): a name's submodule is imported on first use.

This is how ``import flashlab`` stays NumPy-only while ``flashlab.flash_attention`` (torch,
triton) and ``flashlab.viz.plot_roofline`` (matplotlib) remain one attribute away.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``, where ``exports`` maps name -> submodule."""
    module = sys.modules[package]

    def __getattr__(name: str):
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(module, name, value)  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
