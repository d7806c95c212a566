"""The load check: every model ampconfig writes (``rewrite -o``, ``run -o``, the API, the onnx-ir pass) is loaded
once in ONNX Runtime's worker, on its target's provider at the default graph optimisation level, before it is
reported written. The checker-clean output is no proof that ONNX Runtime loads it: its layout optimisations crash
(SIGSEGV) on some float16 graphs, a float16 Transpose or LSTM, that lower levels load. A crash goes to the safety
net (:mod:`ampconfig.engine.safety_net`, its probes only loading).

Importing this module starts nothing and imports no part of the runner: a target whose provider cannot be used here
(cuda on a machine with no NVIDIA driver) is told without ONNX Runtime, so rewriting for it stays decision-only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import PROVIDERS
from ampconfig.rewrite.results import RewriteResult


def load_checked(
    result: RewriteResult, rewrite: Callable[[Mapping[str, str]], RewriteResult], *, file: str | None = None
) -> RewriteResult:
    """The load check, before a rewritten model is reported written: ``result``'s model loaded once in the worker on
    its target's provider, at ONNX Runtime's default optimisation level. A crash or a refusal goes to the net
    (:func:`ampconfig.engine.safety_net.repair`; ``rewrite`` rewrites again with the nodes it is given kept, rule
    runtime_refuses), whose warnings name the nodes kept. A crash the net cannot help raises, located at ``file``
    (the input's): nothing may be written then. A refusal it cannot help is not the rewrite's (ONNX Runtime here
    refuses the model with every lowered node in its dtype too: an op it does not know): a warning says so and the
    model is kept as decided. Where the target's provider cannot be used here (CUDA on a machine without it), a note
    says the model was not loaded: deciding for a target needs no device."""
    device = result.target
    if device != "cpu" and (unusable := _cuda_unusable()) is not None:
        result.notes.append(
            f"the written model was not load-checked: it runs on ONNX Runtime's {PROVIDERS[device]}, which cannot be "
            f"used here ({unusable}); load it once where it will run"
        )
        return result
    from ampconfig.engine.safety_net import NetGaveUp, Outcome, check_rewrite, repair

    failure = check_rewrite(result, None, device)
    if failure is None:
        return result
    try:
        return repair(result, failure, rewrite, None, device, fp32_ran=False)
    except AmpconfigError as exc:
        if failure.outcome is Outcome.CRASHED:
            raise replace(
                exc,
                message=f"{exc.message}, so nothing was written",
                file=file,
                hint=f"{exc.hint}; --no-load-check (load_check=False) writes the model unchecked",
            ) from None
        why = exc.why if isinstance(exc, NetGaveUp) else exc.message
        words = failure.message.rpartition(" failed:")[2]  # after the temporary file's path
        result.warnings.append(
            f"ONNX Runtime's {PROVIDERS[device]} refuses the written model ({words}), and ampconfig found no node it "
            f"lowered that causes it ({why}): the model is written as decided; it loads where ONNX Runtime knows "
            "all its ops"
        )
    return result


#: Where an NVIDIA driver shows itself on Linux: without it no CUDA session can be built.
_NVIDIA_DRIVER = (Path("/proc/driver/nvidia/version"), Path("/dev/nvidiactl"))


def _cuda_unusable() -> str | None:
    """Why CUDA cannot be used here, or None. A machine with no NVIDIA driver is told without ONNX Runtime (no
    worker is started: deciding and rewriting for cuda stay decision-only there); else the worker builds a one-node
    CUDA session (:func:`ampconfig.runner.sessions.cuda_unavailable_reason`)."""
    if sys.platform == "darwin" or (sys.platform.startswith("linux") and not any(p.exists() for p in _NVIDIA_DRIVER)):
        return "no NVIDIA driver on this machine"
    from ampconfig.runner.sessions import cuda_unavailable_reason

    return cuda_unavailable_reason()
