"""Run a model once with every intermediate float tensor exposed as an output (compare, range analysis, tune).

The exposed copy comes from :func:`ampconfig.rewrite.expose.expose_keys`: values inside If, Loop and Scan bodies
included, each known by its key (:mod:`ampconfig.rewrite.scopes`). ONNX Runtime may fuse fewer nodes in it than
in the plain model, which is the price of seeing each node's output. Every call is one model run: callers that
count runs (``tune``) count calls; when ONNX Runtime refuses a Loop body's values one slice per iteration (their
shapes differ between iterations), the same run is made once more with them flattened, and still counts as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from ampconfig.decide.values import SENTINEL, peak
from ampconfig.domains import onnx_opset
from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.expose import FLAT, STACKED, ExposedModel, expose_keys, expose_peaks, float_value_keys
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.proof import PROGRESS_SAMPLES
from ampconfig.runner.sessions import ModelInFolder, create_session, model_proto, run_once
from ampconfig.runner.timing import ProgressCallback


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
        results, providers = _run(exposed, adapted, device)
    except AmpconfigError:
        if not exposed.per_iteration:
            raise
        exposed = expose_keys(model, keys, FLAT)
        results, providers = _run(exposed, adapted, device)
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
) -> IntermediateRun:
    """:func:`run_with_intermediates` once per sample, pooled (see :func:`pooled`)."""
    runs = []
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    for index, feeds in enumerate(samples):
        if shown is not None:
            shown(f"{label}: samples", index, len(samples))
        runs.append(run_with_intermediates(model, feeds, device, names))
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


def run_value_peaks(
    model: onnx.ModelProto | ModelInFolder,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    progress: ProgressCallback | None = None,
    label: str = "ranges",
) -> dict[str, float]:
    """The largest finite |value| below :data:`~ampconfig.decide.values.SENTINEL` of every float value (by key),
    over every sample: one run per sample of a copy that returns one number per value, computed inside the
    session (:func:`~ampconfig.rewrite.expose.expose_peaks`), not every intermediate. A :class:`ModelInFolder`
    keeps its weights on disk (the copy references them). Models below opset 9 (no Where) get their peaks from a
    run with every intermediate exposed, which needs every tensor in memory."""
    folder = model.folder if isinstance(model, ModelInFolder) else None
    model = model_proto(model)
    if (onnx_opset(model.opset_import) or 0) < PEAK_MIN_OPSET:
        if folder is not None:
            raise ValueError("models below opset 9 need every tensor in memory for their value peaks")
        run = run_samples_with_intermediates(model, samples, device, progress=progress, label=label)
        return {key: peak(array) for key, array in run.values.items() if np.asarray(array).dtype.kind == "f"}
    exposed = expose_peaks(model, float_value_keys(model), SENTINEL)
    session = create_session(exposed.model if folder is None else ModelInFolder(exposed.model, folder), device)
    output_names = {value.name for value in model.graph.output}
    peaks: dict[str, float] = {}
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    for index, feeds in enumerate(samples):
        if shown is not None:
            shown(f"{label}: samples", index, len(samples))
        adapted = adapt_feeds(feeds, model)
        results = run_once(session, adapted)
        found = {name: peak(array) for name, array in adapted.items()}
        found.update({name: peak(results[name]) for name in output_names if name in results})
        for name, key in exposed.keys.items():
            values = np.asarray(results[name], np.float64)
            found[key] = float(values.max()) if values.size else 0.0
        for key, value in found.items():
            peaks[key] = max(peaks.get(key, 0.0), value)
    if shown is not None:
        shown(f"{label}: samples", len(samples), len(samples))
    return peaks


@dataclass(frozen=True)
class ValueStats:
    """One float value's range over every sample: the smallest and largest finite value (None when it had none),
    the largest finite |value| below :data:`~ampconfig.decide.values.SENTINEL` (what the range rule reads), and
    how many values were inf or NaN."""

    min: float | None
    max: float | None
    max_abs: float
    nonfinite: int


def stats_of(array: np.ndarray) -> ValueStats:
    values = np.asarray(array)
    finite = values[np.isfinite(values)] if values.size else values
    return ValueStats(
        float(finite.min()) if finite.size else None,
        float(finite.max()) if finite.size else None,
        peak(values),
        int(values.size - finite.size),
    )


def run_value_stats(
    model: onnx.ModelProto | ModelInFolder,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    progress: ProgressCallback | None = None,
    label: str = "ranges",
) -> dict[str, ValueStats]:
    """:class:`ValueStats` of every float value (by key) over every sample."""
    if isinstance(model, ModelInFolder):
        peaks = run_value_peaks(model, samples, device, progress, label)
        return {key: ValueStats(None, None, value, 0) for key, value in peaks.items()}
    run = run_samples_with_intermediates(model, samples, device, progress=progress, label=label)
    return {key: stats_of(array) for key, array in run.values.items() if np.asarray(array).dtype.kind == "f"}


#: Where (the peak computation's select) needs opset 9.
PEAK_MIN_OPSET = 9


def _run(
    exposed: ExposedModel, feeds: Mapping[str, np.ndarray], device: str
) -> tuple[dict[str, np.ndarray], list[str]]:
    session = create_session(exposed.model, device)
    return run_once(session, feeds), list(session.providers)
