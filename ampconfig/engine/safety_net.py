"""The safety net: a rewritten model that ONNX Runtime crashes on or refuses, in ``run`` (while the fp32 model runs)
and in the load check every written model passes (:mod:`ampconfig.engine.load_check`: ``rewrite``, the API, the
onnx-ir pass).

Op info says which kernels exist, not every way ONNX Runtime can fail on a graph: a float16 op its optimiser
fuses into something that crashes, or a kernel that takes float16 for some attributes only. The rewrite is the
cause when the fp32 model runs and the rewritten one does not, so the net looks for the lowered nodes whose dtype
triggers it and keeps them in their original dtype (rule ``runtime_refuses``, a warning each), then goes on.

The search (:func:`find_kept`): nodes ONNX Runtime names in its message are kept first; otherwise a binary search
over the lowered nodes in graph order finds the shortest prefix whose keeping makes the model run, and its last
node is kept; repeated until the model runs. Each probe rewrites the model with the nodes kept so far and loads
and runs it once in the worker (:mod:`ampconfig.worker.client`), so that a crash of a probe is an answer, not the
end of ``ampconfig`` (the next probe gets a new worker). ``1 + log2(lowered nodes)`` probes a node: 12 on 2,000
lowered nodes.

The load check's probes only load (:func:`check_rewrite` without a sample).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

import numpy as np

from ampconfig.errors import AmpconfigError
from ampconfig.inputs.feeds import adapt_feeds
from ampconfig.model_io.models import open_model, save_model_atomic
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.sessions import LOAD_FAILED, RUN_FAILED, ModelFile, create_session, run_once
from ampconfig.worker.client import Phase, WorkerCrashed

#: At most this many nodes are kept by the net: more means the cause is not a few nodes' dtypes.
MAX_KEPT = 16

_LOW_DTYPES = frozenset({"float16", "bfloat16"})
_WHILE = {Phase.LOAD: "loading", Phase.RUN: "running"}


class Outcome(str, Enum):
    REFUSED = "refused"  # ONNX Runtime raised an exception (a Python error: the worker lives on)
    CRASHED = "crashed"  # the worker died (a signal, or an exit without a word)


@dataclass(frozen=True)
class Failure:
    """What ONNX Runtime did with a model: crashed or refused it, in which phase, in its own words."""

    outcome: Outcome
    phase: Phase
    message: str

    def says(self) -> str:
        """E.g. "crashed (killed by SIGSEGV) while loading" or "refused it while running: <ORT's words>"."""
        if self.outcome is Outcome.CRASHED:
            return f"crashed ({self.message}) while {_WHILE[self.phase]}"
        return f"refused it while {_WHILE[self.phase]}: {self.message}"


def lowered_nodes(result: RewriteResult) -> list[str]:
    """The nodes the rewrite moved to a low dtype (retargeted casts included), in graph order."""
    return [d.name for d in result.decisions if d.changed and d.dtype in _LOW_DTYPES]


def _named_in(message: str, candidates: Sequence[str]) -> list[str]:
    """Candidates ONNX Runtime's message names as it names nodes: "(name)", "'name'" or '"name"'."""
    return [name for name in candidates if any(f"{o}{name}{c}" in message for o, c in ("()", "''", '""'))]


def find_kept(
    candidates: Sequence[str],
    failure: Failure,
    fails_keeping: Callable[[Mapping[str, str]], Failure | None],
    reason: Callable[[Failure], str],
    *,
    fp32_ran: bool = True,
) -> dict[str, str]:
    """The nodes to keep, with why, so that ``fails_keeping(kept)`` is None (the model runs); ``failure`` is how
    the model with none kept failed. Raises :class:`AmpconfigError` when keeping every candidate does not help,
    or when more than :data:`MAX_KEPT` nodes would have to be kept (the search then stops: each node costs
    ``2 + log2(len(candidates))`` probes at most). ``fp32_ran``: whether the fp32 model is known to run (said when
    the search gives up)."""
    kept: dict[str, str] = {}

    def probe(names: Sequence[str]) -> Failure | None:
        return fails_keeping({**kept, **dict.fromkeys(names, reason(failure))})

    while True:
        remaining = [name for name in candidates if name not in kept]
        found = _named_in(failure.message, remaining)
        if not found:
            if not remaining or probe(remaining) is not None:
                raise _gave_up(failure, "keeping every node ampconfig lowered did not help", fp32_ran)
            low, high = 1, len(remaining)  # keeping remaining[:high] makes it run
            while low < high:
                middle = (low + high) // 2
                if probe(remaining[:middle]) is None:
                    high = middle
                else:
                    low = middle + 1
            found = [remaining[low - 1]]
        kept.update(dict.fromkeys(found, reason(failure)))
        if len(kept) > MAX_KEPT:
            raise _gave_up(failure, f"more than {MAX_KEPT} nodes would have to keep their dtype", fp32_ran)
        next_failure = probe([])
        if next_failure is None:
            return kept
        failure = next_failure


@dataclass
class NetGaveUp(AmpconfigError):
    """The net found no nodes whose keeping makes the model run; ``why`` says why it stopped (the load check words
    its own warning from it)."""

    why: str = ""


def _gave_up(failure: Failure, why: str, fp32_ran: bool) -> NetGaveUp:
    ran = " (the fp32 model ran)" if fp32_ran else ""
    return NetGaveUp(
        f"ONNX Runtime {failure.says()} the rewritten model{ran}, and ampconfig could not find the nodes that cause "
        f"it: {why}",
        hint="run with --precision-mode must_keep_origin_dtype, or pin nodes with keep_dtype; please report the "
        "model and the command",
        why=why,
    )


def repair(
    result: RewriteResult,
    failure: Failure,
    rewrite: Callable[[Mapping[str, str]], RewriteResult],
    sample: Mapping[str, np.ndarray] | None,
    device: str,
    *,
    tf32: bool = False,
    fp32_ran: bool = True,
) -> RewriteResult:
    """The rewrite again with the lowered nodes that make ONNX Runtime fail (``failure``, on ``sample``; None: while
    loading) kept in their original dtype, each named in a warning; probes run on ``device`` in a child process.
    ``fp32_ran``: whether the fp32 model is known to run, as :func:`find_kept` says when it gives up."""
    results: dict[frozenset[str], RewriteResult] = {}

    def fails_keeping(kept: Mapping[str, str]) -> Failure | None:
        key = frozenset(kept)
        if key not in results:
            results[key] = rewrite(kept)
        return check_rewrite(results[key], sample, device, tf32=tf32)

    def reason(found: Failure) -> str:
        return f"ONNX Runtime {found.says()} the rewritten model with it in {result.low_dtype}"

    kept = find_kept(lowered_nodes(result), failure, fails_keeping, reason, fp32_ran=fp32_ran)
    repaired = results[frozenset(kept)]
    original = {d.name: d.original_dtype for d in result.decisions}
    warnings = [f"node {name} kept {original.get(name)} (rule runtime_refuses): {why}" for name, why in kept.items()]
    return replace(repaired, warnings=[*repaired.warnings, *warnings])


def check_rewrite(
    result: RewriteResult, sample: Mapping[str, np.ndarray] | None, device: str, *, tf32: bool = False
) -> Failure | None:
    """Load the rewritten model in the worker (at ONNX Runtime's default optimisation level) and run it once on
    ``sample`` (None: load only): None when it loads and runs."""
    with tempfile.TemporaryDirectory(prefix="ampconfig-net-") as folder:
        path = save_model_atomic(result.savable, Path(folder) / "probe.onnx")
        try:
            if sample is None:  # loaded from its file; nothing of it is read here
                create_session(path, device, tf32=tf32, what="the rewritten model")
            else:
                model = ModelFile(path, open_model(path, map_weights=True).proto)
                session = create_session(model, device, tf32=tf32, what="a probe of the rewritten model")
                run_once(session, adapt_feeds(sample, model.proto))
        except WorkerCrashed as crash:
            return Failure(Outcome.CRASHED, crash.phase, crash.death)
        except AmpconfigError as exc:
            if exc.message.startswith(LOAD_FAILED):
                return Failure(Outcome.REFUSED, Phase.LOAD, exc.message.removeprefix(LOAD_FAILED))
            if exc.message.startswith(RUN_FAILED):
                return Failure(Outcome.REFUSED, Phase.RUN, exc.message.removeprefix(RUN_FAILED))
            raise
    return None
