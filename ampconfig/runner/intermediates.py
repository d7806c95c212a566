"""Run a model once with every intermediate float tensor exposed as an output (compare, range analysis, tune).

The exposed copy comes from :func:`ampconfig.rewrite.expose.expose_keys`: values inside If, Loop and Scan bodies
included, each known by its key (:mod:`ampconfig.rewrite.scopes`). ONNX Runtime may fuse fewer nodes in it than
in the plain model, which is the price of seeing each node's output. Every call is one model run: callers that
count runs (``tune``) count calls; when ONNX Runtime refuses a Loop body's values one slice per iteration (their
shapes differ between iterations), the same run is made once more with them flattened, and still counts as one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ampconfig.decide.value_ranges import SENTINEL
from ampconfig.domains import onnx_opset
from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.expose import (
    FLAT,
    STACKED,
    ExposedModel,
    QuickOutputs,
    StatsOutputs,
    expose_keys,
    expose_quick_stats,
    expose_stats,
    float_value_keys,
)
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.proof import PROGRESS_SAMPLES
from ampconfig.runner.sessions import ModelInFolder, Session, create_session, model_proto, run_once
from ampconfig.runner.timing import ProgressCallback
from ampconfig.runner.worker import WorkerCrashed

log = logging.getLogger(__name__)

#: How a crash message names the model whose values these runs expose (callers that run another one say which).
EXPOSED_WHAT = "the fp32 model (a copy of it that returns its values)"
REWRITTEN_EXPOSED = "a rewrite of the model (a copy of it that returns its values)"


@dataclass
class IntermediateRun:
    """One run: the model's own outputs, every exposed value by its key, the providers used.

    ``per_iteration``: keys of body values that came back one slice per Loop/Scan iteration; ``flattened``: keys
    of Loop body values that came back as every iteration's values flattened and joined."""

    outputs: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    output_names: list[str]
    providers: list[str]
    per_iteration: set[str] = field(default_factory=set)
    flattened: set[str] = field(default_factory=set)
    #: over several samples: each sample's own run (``values`` then holds every sample's values, flattened and
    #: joined in sample order; ``outputs`` the first sample's)
    samples: list[IntermediateRun] = field(default_factory=list)

    @property
    def first(self) -> IntermediateRun:
        """The first sample's run (itself for a run of one sample): values in their own shapes."""
        return self.samples[0] if self.samples else self

    @property
    def each(self) -> list[IntermediateRun]:
        """Every sample's run, in order."""
        return self.samples or [self]

    @property
    def sample_outputs(self) -> list[dict[str, np.ndarray]]:
        return [run.outputs for run in self.each]


def run_with_intermediates(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    device: str = "cpu",
    names: Sequence[str] | None = None,
    what: str = EXPOSED_WHAT,
) -> IntermediateRun:
    """Run ``model`` once on ``feeds`` (converted to its input dtypes) and return outputs and intermediates.

    ``names`` (value keys) defaults to every float value of every scope
    (:func:`~ampconfig.rewrite.expose.float_value_keys`). ``values`` also holds the graph inputs as fed, so a
    node reading a graph input finds it there.
    """
    keys = list(names) if names is not None else float_value_keys(model)
    exposed = expose_keys(model, keys, STACKED)
    adapted = adapt_feeds(feeds, model)
    try:
        results, providers = _run(exposed, adapted, device, what)
    except WorkerCrashed:
        raise
    except AmpconfigError:
        if not exposed.per_iteration:
            raise
        exposed = expose_keys(model, keys, FLAT)
        results, providers = _run(exposed, adapted, device, what)
    output_names = [value.name for value in model.graph.output]
    values: dict[str, np.ndarray] = dict(adapted)
    for name, array in results.items():
        if name in exposed.keys:
            values[exposed.keys[name]] = array
        elif name in output_names:
            values[name] = array
    outputs = {name: results[name] for name in output_names if name in results}
    return IntermediateRun(outputs, values, output_names, providers, exposed.per_iteration, exposed.flattened)


def run_samples_with_intermediates(
    model: onnx.ModelProto,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    names: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    label: str = "exposed",
    what: str = EXPOSED_WHAT,
) -> IntermediateRun:
    """:func:`run_with_intermediates` once per sample, pooled (see :func:`pooled`)."""
    runs = []
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    for index, feeds in enumerate(samples):
        if shown is not None:
            shown(f"{label}: samples", index, len(samples))
        runs.append(run_with_intermediates(model, feeds, device, names, what))
    if shown is not None:
        shown(f"{label}: samples", len(samples), len(samples))
    return pooled(runs)


def pooled(runs: Sequence[IntermediateRun]) -> IntermediateRun:
    """The runs of several samples as one: every value present in all of them flattened and joined in sample
    order (what range analysis, compare and the sensitivity read: maxima and errors over the whole data set),
    the first sample's outputs, and every run kept in ``samples``. One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    keys = [key for key in runs[0].values if all(key in run.values for run in runs[1:])]
    values = {key: np.concatenate([np.ravel(run.values[key]) for run in runs]) for key in keys}
    per_iteration = set.intersection(*(run.per_iteration for run in runs))
    flattened = set.union(*(run.flattened for run in runs))
    first = runs[0]
    return IntermediateRun(
        first.outputs, values, first.output_names, first.providers, per_iteration, flattened, list(runs)
    )


@dataclass(frozen=True)
class ValueStats:
    """What a float value held over the samples, sentinels (:data:`~ampconfig.decide.value_ranges.SENTINEL`) and
    non-finite elements left out: its lowest and highest element (None when no element is left: the value was
    empty, or every element a sentinel, NaN or infinite) and its count of NaN and infinite elements."""

    minimum: float | None
    maximum: float | None
    nonfinite: int = 0

    @property
    def peak(self) -> float:
        """The largest finite |value| below the sentinel (0 when no element is left), as
        :func:`~ampconfig.decide.value_ranges.peak` computes it."""
        if self.minimum is None or self.maximum is None:
            return 0.0
        return max(abs(self.minimum), abs(self.maximum))

    def joined(self, other: ValueStats) -> ValueStats:
        """The numbers of both values' elements together (two samples of one value)."""
        return ValueStats(
            _joined(min, self.minimum, other.minimum),
            _joined(max, self.maximum, other.maximum),
            self.nonfinite + other.nonfinite,
        )


def _joined(pick: Callable[[float, float], float], first: float | None, second: float | None) -> float | None:
    if first is None or second is None:
        return second if first is None else first
    return pick(first, second)


def value_stats(array: np.ndarray) -> ValueStats:
    """:class:`ValueStats` of one array, in numpy (graph inputs, the model's outputs, and models below opset 9);
    a non-float array has none (``ValueStats(None, None)``). float16 and bfloat16 compare as float32 would."""
    values = np.asarray(array)
    if values.dtype.kind != "f" and values.dtype.name != "bfloat16":
        return ValueStats(None, None)
    wide = values.astype(np.float64, copy=False).ravel()
    finite = np.isfinite(wide)
    kept = wide[finite & (np.abs(wide) < SENTINEL)]
    nonfinite = int(wide.size - np.count_nonzero(finite))
    if not kept.size:
        return ValueStats(None, None, nonfinite)
    return ValueStats(float(kept.min()), float(kept.max()), nonfinite)


def run_value_stats(
    model: onnx.ModelProto | ModelInFolder,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    progress: ProgressCallback | None = None,
    label: str = "ranges",
) -> dict[str, ValueStats]:
    """:class:`ValueStats` of every float value (by key; graph inputs and the model's outputs included), over
    every sample: one run per sample of a copy that returns a few numbers per value, computed inside the session
    (:func:`~ampconfig.rewrite.expose.expose_stats`), not every intermediate. A :class:`ModelInFolder` keeps its
    weights on disk (the copy references them). Models below opset 9 (no Where) get their numbers from a run with
    every intermediate exposed, which needs every tensor in memory.

    ``progress`` hears of each step (``{label}: ...``): building the session of a large model takes seconds."""
    folder = model.folder if isinstance(model, ModelInFolder) else None
    model = model_proto(model)
    if (onnx_opset(model.opset_import) or 0) < PEAK_MIN_OPSET:
        if folder is not None:
            raise ValueError("models below opset 9 need every tensor in memory for their value peaks")
        run = run_samples_with_intermediates(model, samples, device, progress=progress, label=label)
        return {
            key: value_stats(array)
            for key, array in run.values.items()
            if np.asarray(array).dtype.kind == "f" or np.asarray(array).dtype.name == "bfloat16"
        }
    keys = float_value_keys(model)
    step = _Steps(f"{label}: fp32 values", 2 + len(samples), progress)  # the copy, its session, each sample
    step.start(f"building a copy that computes the ranges of {len(keys)} values")
    exposed = expose_quick_stats(model, keys, SENTINEL)
    session = _stats_session(exposed, folder, device, step)
    output_names = {value.name for value in model.graph.output}
    per_sample: list[dict[str, ValueStats]] = []
    unsure: dict[int, list[str]] = {}  # sample -> keys whose quick numbers are not their ranges
    for index, feeds in enumerate(samples):
        step.done(f"running sample {index + 1} of {len(samples)}")
        adapted = adapt_feeds(feeds, model)
        results = run_once(session, adapted)
        found = {name: value_stats(array) for name, array in adapted.items()}
        found.update({name: value_stats(results[name]) for name in output_names if name in results})
        for outputs in exposed.stats:
            found.update(_stats_of(outputs, results))
        for quick in exposed.quick:
            quick_stats, unsure_keys = _quick_stats_of(quick, results)
            found.update(quick_stats)
            if unsure_keys:
                unsure.setdefault(index, []).extend(unsure_keys)
        per_sample.append(found)
    if unsure:  # NaN, infinity or sentinels somewhere: those values' exact numbers, on the samples that had them
        wanted = list(dict.fromkeys(key for keys_of in unsure.values() for key in keys_of))
        step.more(2 + len(unsure), f"building a copy that computes the exact ranges of {len(wanted)} values")
        exact = expose_stats(model, wanted, SENTINEL)
        session = _stats_session(exact, folder, device, step)
        for number, (index, unsure_keys) in enumerate(unsure.items()):
            step.done(f"running sample {index + 1} again ({number + 1} of {len(unsure)})")
            results = run_once(session, adapt_feeds(samples[index], model))
            found = {key: value for outputs in exact.stats for key, value in _stats_of(outputs, results).items()}
            per_sample[index].update({key: found[key] for key in unsure_keys if key in found})
    stats: dict[str, ValueStats] = {}
    for found in per_sample:
        for key, value in found.items():
            stats[key] = stats[key].joined(value) if key in stats else value
    step.done("")
    return stats


def _stats_session(exposed: ExposedModel, folder: Path | None, device: str, step: _Steps) -> Session:
    step.done(f"building its ONNX Runtime session ({len(exposed.model.graph.node)} nodes)")
    copy = exposed.model if folder is None else ModelInFolder(exposed.model, folder)
    return create_session(copy, device, in_node_order=True, what=EXPOSED_WHAT)


def _quick_stats_of(
    outputs: QuickOutputs, results: Mapping[str, np.ndarray]
) -> tuple[dict[str, ValueStats], list[str]]:
    """The :class:`ValueStats` of the values of one :class:`QuickOutputs` whose quick numbers are their ranges,
    and the keys of the others (a sum that is not finite: NaN or infinity inside; a bound at or beyond the
    sentinel)."""
    numbers = np.asarray(results[outputs.numbers], np.float64).reshape(len(outputs.keys), 3)
    found: dict[str, ValueStats] = {}
    unsure: list[str] = []
    for key, (low, high, total) in zip(outputs.keys, numbers.tolist(), strict=True):
        if not math.isfinite(total) or low <= -SENTINEL or high >= SENTINEL:
            unsure.append(key)
        elif low > high:  # empty: ONNX Runtime reduces nothing to +inf and -inf
            found[key] = ValueStats(None, None)
        else:
            found[key] = ValueStats(low, high)
    return found, unsure


def _stats_of(outputs: StatsOutputs, results: Mapping[str, np.ndarray]) -> dict[str, ValueStats]:
    """The :class:`ValueStats` of the values of one :class:`StatsOutputs` from a run's results."""
    count = len(outputs.keys)
    bounds = np.asarray(results[outputs.bounds], np.float64).reshape(count, -1, 2)
    nonfinite = np.asarray(results[outputs.nonfinite], np.int64).reshape(count, -1)
    found: dict[str, ValueStats] = {}
    for index, key in enumerate(outputs.keys):
        low = float(bounds[index, :, 0].min(initial=math.inf))
        high = float(bounds[index, :, 1].max(initial=-math.inf))
        kept = low <= high  # a value with no element left: +inf, -inf (or no iteration ran)
        found[key] = ValueStats(low if kept else None, high if kept else None, int(nonfinite[index].sum()))
    return found


class _Steps:
    """Progress through the range run's steps: the ``progress`` callback's bar, and ``-v`` log lines."""

    def __init__(self, label: str, total: int, progress: ProgressCallback | None) -> None:
        self.label, self.total, self.progress = label, total, progress
        self.finished = 0
        self.started = time.perf_counter()

    def more(self, steps: int, what: str) -> None:
        """``steps`` more steps, the first of them ``what``."""
        self.total += steps
        self.done(what)

    def start(self, what: str) -> None:
        log.info("%s: %s", self.label, what)
        if self.progress is not None:
            self.progress(self.label, 0, self.total)

    def done(self, then: str) -> None:
        """One step done; ``then`` says what comes next ("" at the end)."""
        self.finished += 1
        elapsed = time.perf_counter() - self.started
        if then:
            log.info("%s: %s (%.1f s so far)", self.label, then, elapsed)
        else:
            log.info("%s: done in %.1f s", self.label, elapsed)
        if self.progress is not None:
            self.progress(self.label, self.finished, self.total)


#: Where (the peak computation's select) needs opset 9.
PEAK_MIN_OPSET = 9


def _run(
    exposed: ExposedModel, feeds: Mapping[str, np.ndarray], device: str, what: str
) -> tuple[dict[str, np.ndarray], list[str]]:
    session = create_session(exposed.model, device, what=what)
    return run_once(session, feeds), list(session.providers)
