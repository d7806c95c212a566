"""Modules onnx-ir imports but ampconfig never uses, imported on their first use instead of at start-up.

onnx-ir imports sympy when it is imported (0.4-0.7 s on a 2-core machine, a third of ``ampconfig rewrite``'s
start-up) for arithmetic on symbolic dimensions, which ampconfig never does. Stand-ins for sympy and for onnx-ir's
dimension-expression parser go into ``sys.modules`` before onnx-ir is imported. A stand-in imports the real module
on its first attribute access and from then on holds the real module's attributes, so code that does use sympy
gets all of it, only later.

A stand-in is a package that has not run its ``__init__``: ``import sympy.printing`` while it is in
``sys.modules`` would run sympy's submodules against an uninitialised package. The command line (the process is
ours, and imports no sympy submodule) installs the stand-ins for the whole process (:func:`defer_unused_imports`);
the library's entry points only while they import onnx-ir (:func:`unused_imports_deferred`), after which
``sys.modules`` forgets them: onnx-ir keeps its references, and any later ``import sympy`` in the user's process
imports the real package as usual.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Imported by onnx-ir at start-up, used only for symbolic dimension arithmetic (onnx-ir 0.1.12 to 1.x).
_DEFERRED: tuple[str, ...] = ("sympy", "onnx_ir._symbolic_shapes")

_LOCK = threading.RLock()


class _StandIn(types.ModuleType):
    """A module not imported yet: its spec, file and path are real (the import system reads them without
    triggering anything); any other attribute imports the module."""

    def __getattr__(self, name: str) -> Any:  # only called for attributes the stand-in does not have yet
        if name == "__path__":
            raise AttributeError(name)  # not a package: the import system asks, and must not load it
        return getattr(_load(self), name)


def _load(stand_in: _StandIn) -> types.ModuleType:
    with _LOCK:
        name = stand_in.__name__
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        module = importlib.import_module(name)
        # Later lookups through the stand-in (onnx-ir holds it as a global) find the real attributes directly.
        stand_in.__dict__.update(module.__dict__)
        return module


def _stand_in(spec: importlib.machinery.ModuleSpec) -> _StandIn:
    module = _StandIn(spec.name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    if spec.submodule_search_locations is not None:
        module.__path__ = list(spec.submodule_search_locations)
    return module


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The module's spec, found without importing it or its package."""
    package, _, _ = name.rpartition(".")
    if not package:
        return importlib.util.find_spec(name)
    parent = importlib.util.find_spec(package)  # a top-level find_spec imports nothing
    locations = parent.submodule_search_locations if parent is not None else None
    return importlib.machinery.PathFinder.find_spec(name, list(locations)) if locations else None


def defer_unused_imports() -> None:
    """Install the stand-ins for the rest of the process, unless onnx-ir (or a deferred module) is already
    imported: then there is nothing left to save, and the real modules stay as they are."""
    _install()


@contextmanager
def unused_imports_deferred() -> Iterator[None]:
    """The stand-ins while the block runs (it imports onnx-ir), taken out of ``sys.modules`` after it: what the
    block imported keeps its references to them, and nothing imported later meets one."""
    installed = _install()
    try:
        yield
    finally:
        with _LOCK:
            for name in installed:
                if isinstance(sys.modules.get(name), _StandIn):
                    del sys.modules[name]


def _install() -> list[str]:
    """The names given a stand-in (none when onnx-ir or a deferred module is imported already, or onnx-ir's
    layout is not the one known here)."""
    with _LOCK:
        if "onnx_ir" in sys.modules or any(name in sys.modules for name in _DEFERRED):
            return []
        try:
            specs = [_spec(name) for name in _DEFERRED]
        except (ImportError, ValueError):
            return []
        if any(spec is None or spec.loader is None for spec in specs):
            return []  # a different onnx-ir layout: import everything as usual
        for spec in specs:
            assert spec is not None
            sys.modules[spec.name] = _stand_in(spec)
        return [spec.name for spec in specs if spec is not None]
