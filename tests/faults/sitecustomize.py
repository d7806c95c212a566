"""Test faults for ONNX Runtime, injected from the tests: real native crashes and pauses in ampconfig's worker.

A test puts this folder first on ``PYTHONPATH`` and says which fault in ``AMPCONFIG_FAULT``; every new interpreter
then imports this module at start-up (Python's ``site`` imports ``sitecustomize``), and it patches
``onnxruntime.InferenceSession`` the moment onnxruntime is imported, in whichever process that is. The faults act
only inside ampconfig's worker, while it builds or runs a session for the main process (its ``Worker.open`` and
``Worker.run``/``Worker.time`` are on the stack), so the main process's own fixed models are never touched. The
package itself knows nothing of this (CPython's test suite injects faults the same way).

``AMPCONFIG_FAULT`` is ``PHASE:ACTION:WHICH[:ARG]``:

- PHASE ``load`` (building the session) or ``run`` (a run of it); or ``import`` with ACTION ``pause`` and WHICH a
  module name: the pause happens when that module is first imported, in any process (a moment of start-up); or
  ``start`` with ACTION ``print`` (and WHICH ``any``): every interpreter prints a line on its standard output as it
  starts, as a chatty ``sitecustomize`` or ``.pth`` file does;
- ACTION ``segv`` (a read through a null pointer: SIGSEGV), ``abort`` (SIGABRT) or ``pause`` (write the file named by
  ``AMPCONFIG_FAULT_MARKER``, then sleep for ten minutes: a test sends a signal meanwhile);
- WHICH ``any`` (every model), ``lowered:OP`` (a model with an OP node whose first input is float16: a rewrite
  that lowered it), ``rounding-copy`` (a model in which a float16 value is cast back to float32 by a Cast reading
  another Cast: only the CPU accuracy copy has such pairs, the rewrite never writes one), or
  ``optimised-rounding-copy`` (the same, only at ONNX Runtime's default graph optimisation level: an optimiser
  crash that a lower level avoids).
"""

from __future__ import annotations

import os
import sys
import time

# Nothing else at start-up: a pause at an import step (``import:pause:typing``) must find that module not imported
# yet, so the imports this module needs come where it uses them, and Any is only read by type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FAULT = os.environ.get("AMPCONFIG_FAULT", "")
FLOAT = 1
FLOAT16 = 10


def _in_worker_request() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(os.path.join("worker", "server.py")) and code.co_name in ("open", "run", "time"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _model(source: Any) -> Any:
    import onnx

    if isinstance(source, (str, os.PathLike)):
        return onnx.load(str(source), load_external_data=False)
    return onnx.load_from_string(bytes(source))


def _matches(which: str, model: Any, optimised: bool) -> bool:
    if which == "any":
        return True
    nodes = list(model.graph.node)
    if which.startswith("lowered:"):
        op_type = which.split(":", 1)[1]
        import onnx

        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.input)}
        types.update({t.name: t.data_type for t in model.graph.initializer})
        return any(n.op_type == op_type and n.input and types.get(n.input[0]) == FLOAT16 for n in nodes)
    if which in ("rounding-copy", "optimised-rounding-copy"):
        to = {
            out: next((a.i for a in n.attribute if a.name == "to"), None)
            for n in nodes
            if n.op_type == "Cast"
            for out in n.output
        }
        pair = any(
            n.op_type == "Cast" and to.get(n.output[0]) == FLOAT and to.get(n.input[0]) == FLOAT16 for n in nodes
        )
        return pair and (optimised or which == "rounding-copy")
    raise ValueError(f"unknown fault target {which!r}")


def _act(action: str) -> None:
    if action == "segv":
        import ctypes

        ctypes.string_at(0)
    elif action == "abort":
        os.abort()
    elif action == "pause":
        with open(os.environ["AMPCONFIG_FAULT_MARKER"], "w", encoding="utf-8") as marker:
            marker.write(str(os.getpid()))
        time.sleep(600)
    else:
        raise ValueError(f"unknown fault action {action!r}")


def _patch(ort: Any) -> None:
    phase, action, which = FAULT.split(":", 2)
    session_class = ort.InferenceSession
    create = session_class.__init__

    def init(self: Any, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> None:
        if _in_worker_request():
            level = getattr(sess_options, "graph_optimization_level", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
            optimised = level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            self._fault = _matches(which, _model(path_or_bytes), optimised)
            if phase == "load" and self._fault:
                _act(action)
        create(self, path_or_bytes, sess_options, *args, **kwargs)

    def running(method: Any) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if phase == "run" and getattr(self, "_fault", False) and _in_worker_request():
                _act(action)
            return method(self, *args, **kwargs)

        return run

    session_class.__init__ = init
    session_class.run = running(session_class.run)
    session_class.run_with_iobinding = running(session_class.run_with_iobinding)
    session_class.run_with_ort_values = running(session_class.run_with_ort_values)


class _PatchOnImport:  # a meta path finder (importlib.abc's base class would import typing at start-up)
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "onnxruntime":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _PauseOnImport:  # a meta path finder
    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == self.module:
            sys.meta_path.remove(self)
            _act("pause")
        return None


if FAULT.startswith("start:print:"):
    sys.stdout.write("sitecustomize says hello\n")
    sys.stdout.flush()
elif FAULT.startswith("import:pause:"):
    sys.meta_path.insert(0, _PauseOnImport(FAULT.split(":", 2)[2]))
elif FAULT:
    sys.meta_path.insert(0, _PatchOnImport())
