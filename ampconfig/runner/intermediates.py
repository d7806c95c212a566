"""Run a model with its intermediate float values carried out (range analysis and calibration, compare, tune).

The exposed copy comes from :func:`ampconfig.rewrite.expose.expose_grouped`: main-graph values flattened and joined
into a few outputs (one session, few outputs, each value freed at its group's Concat), values inside If, Loop and
Scan bodies carried out one output each, every value known by its key (:mod:`ampconfig.rewrite.scopes`). The
arrays are cut apart again here, in their shapes. ONNX Runtime may fuse fewer nodes in the copy than in the plain
model, which is the price of seeing each node's output. Every call is one model run: callers that count runs
(``tune``) count calls; when ONNX Runtime refuses a Loop body's values one slice per iteration (their shapes differ
between iterations), the same run is made once more with them flattened, and still counts as one.

:func:`run_value_stats` is the calibration: the same runs, and each value's numbers
(:func:`~ampconfig.decide.value_ranges.value_stats`: range, zeros, non-finite count, exponent histogram) computed
from the arrays that come back, one sample at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from ampconfig.decide.value_ranges import ValueStats as ValueStats
from ampconfig.decide.value_ranges import segment_stats
from ampconfig.decide.value_ranges import value_stats as value_stats
from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.expose import FLAT, STACKED, ValueGroup, expose_grouped, float_value_keys
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.proof import PROGRESS_SAMPLES
from ampconfig.runner.sessions import ModelInFolder, Session, create_session, model_proto, run_once
from ampconfig.runner.timing import ProgressCallback

log = logging.getLogger(__name__)


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


class ExposedRunner:
    """One exposed copy of a model and its session, run on sample after sample (:meth:`run`). ``folder``: the
    model's weights stay in their files there (a :class:`ModelInFolder`), read by the session, never copied."""

    def __init__(
        self,
        model: onnx.ModelProto,
        keys: Sequence[str],
        device: str,
        folder: Path | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.model, self.keys, self.device, self.folder = model, list(keys), device, folder
        self.announce = announce
        self.exposed = expose_grouped(model, self.keys, STACKED)
        self.session = self._session()
        self.output_names = [value.name for value in model.graph.output]

    def _session(self) -> Session:
        if self.announce is not None:
            self.announce(f"building its ONNX Runtime session ({len(self.exposed.model.graph.node)} nodes)")
        copy = self.exposed.model if self.folder is None else ModelInFolder(self.exposed.model, self.folder)
        return create_session(copy, self.device, in_node_order=True)

    def run(self, feeds: Mapping[str, np.ndarray]) -> IntermediateRun:
        """One run on ``feeds`` (converted to the model's input dtypes): outputs and every exposed value, the graph
        inputs as fed among them (a node reading a graph input finds it there)."""
        adapted, results = self.results(feeds)
        values: dict[str, np.ndarray] = dict(adapted)
        values.update(self._single(results))
        for group in self.exposed.groups:
            values.update(ungrouped(group, results[group.values], results[group.shapes]))
        outputs = {name: results[name] for name in self.output_names if name in results}
        exposed = self.exposed
        return IntermediateRun(
            outputs, values, self.output_names, list(self.session.providers), exposed.per_iteration, exposed.flattened
        )

    def stats(self, feeds: Mapping[str, np.ndarray]) -> dict[str, ValueStats]:
        """One run on ``feeds``: the :class:`ValueStats` of every float value (graph inputs and outputs included),
        computed from the groups as they come back (:func:`~ampconfig.decide.value_ranges.segment_stats`)."""
        adapted, results = self.results(feeds)
        found = {name: value_stats(array) for name, array in adapted.items() if _is_float(array)}
        found.update({key: value_stats(array) for key, array in self._single(results).items() if _is_float(array)})
        for group in self.exposed.groups:
            sizes = [int(np.prod(shape, dtype=np.int64)) for shape in _shapes(group, results[group.shapes])]
            found.update(zip(group.keys, segment_stats(results[group.values], sizes), strict=True))
        return found

    def results(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The feeds as fed, and the run's results by output name."""
        adapted = adapt_feeds(feeds, self.model)
        try:
            return adapted, run_once(self.session, adapted)
        except AmpconfigError:
            if not self.exposed.per_iteration:
                raise
            # ONNX Runtime refuses a Loop body's values one slice per iteration when their shapes differ
            self.exposed = expose_grouped(self.model, self.keys, FLAT)
            self.session = self._session()
            return adapted, run_once(self.session, adapted)

    def _single(self, results: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The values that came back one output each (the model's outputs, body values), by key."""
        values: dict[str, np.ndarray] = {}
        for name, array in results.items():
            if name in self.exposed.keys:
                values[self.exposed.keys[name]] = array
            elif name in self.output_names:
                values[name] = array
        return values


def _is_float(array: np.ndarray) -> bool:
    return np.asarray(array).dtype.kind == "f"


def _shapes(group: ValueGroup, shapes: np.ndarray) -> list[tuple[int, ...]]:
    """Each value's shape, from a group's shapes output (each shape followed by -1)."""
    ends = np.flatnonzero(shapes == -1).tolist()
    if len(ends) != len(group.keys):
        raise AmpconfigError(f"the grouped values came back with {len(ends)} shapes for {len(group.keys)} values")
    starts = [0] + [end + 1 for end in ends[:-1]]
    return [tuple(int(dim) for dim in shapes[start:end]) for start, end in zip(starts, ends, strict=True)]


def ungrouped(group: ValueGroup, joined: np.ndarray, shapes: np.ndarray) -> dict[str, np.ndarray]:
    """The values of one :class:`~ampconfig.rewrite.expose.ValueGroup`, cut apart and in their shapes (float16
    values in float16 again; bfloat16 ones stay float32: numpy has no bfloat16)."""
    values: dict[str, np.ndarray] = {}
    offset = 0
    flat = np.ravel(joined)
    for key, shape, elem_type in zip(group.keys, _shapes(group, shapes), group.elem_types, strict=True):
        size = int(np.prod(shape, dtype=np.int64))
        array = flat[offset : offset + size].reshape(shape)
        values[key] = array.astype(np.float16) if elem_type == TensorProto.FLOAT16 else array
        offset += size
    if offset != flat.size:
        raise AmpconfigError(f"the grouped values came back with {flat.size} elements for shapes of {offset}")
    return values


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
    return ExposedRunner(model, keys, device).run(feeds)


def run_samples_with_intermediates(
    model: onnx.ModelProto,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    names: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    label: str = "exposed",
) -> IntermediateRun:
    """:func:`run_with_intermediates` once per sample, one session for all, pooled (see :func:`pooled`)."""
    runs = []
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    runner = ExposedRunner(model, list(names) if names is not None else float_value_keys(model), device)
    for index, feeds in enumerate(samples):
        if shown is not None:
            shown(f"{label}: samples", index, len(samples))
        runs.append(runner.run(feeds))
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


def run_value_stats(
    model: onnx.ModelProto | ModelInFolder,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    progress: ProgressCallback | None = None,
    label: str = "ranges",
) -> dict[str, ValueStats]:
    """:class:`ValueStats` of every float value (by key; graph inputs and the model's outputs included), over
    every sample: one run per sample of the exposed copy (:class:`ExposedRunner`), each value's numbers computed
    from its array and the arrays dropped before the next sample. A :class:`ModelInFolder` keeps its weights on
    disk (the copy references them).

    ``progress`` hears of each step (``{label}: ...``): building the session of a large model takes seconds."""
    folder = model.folder if isinstance(model, ModelInFolder) else None
    model = model_proto(model)
    keys = float_value_keys(model)
    step = _Steps(f"{label}: fp32 values", 2 + len(samples), progress)  # the copy, its session, each sample
    step.start(f"building a copy that carries out {len(keys)} values")
    runner = ExposedRunner(model, keys, device, folder, announce=step.done)
    stats: dict[str, ValueStats] = {}
    for index, feeds in enumerate(samples):
        step.done(f"running sample {index + 1} of {len(samples)}")
        for key, found in runner.stats(feeds).items():
            stats[key] = stats[key].joined(found) if key in stats else found
    step.done("")
    return stats


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
