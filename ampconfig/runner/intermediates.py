"""Run a model with its intermediate float values carried out (range analysis and calibration, compare, tune).

The exposed copy comes from :func:`ampconfig.instrument.expose.expose_keys`: every value one graph output (values
inside If, Loop and Scan bodies carried out of them), each known by its key (:mod:`ampconfig.instrument.scopes`), and
one session for every sample of a command, running nodes in graph order. ONNX Runtime may fuse fewer nodes in the
copy than in the plain model, which is the price of seeing each node's output. Every call is one model run:
callers that count runs (``tune``) count calls; when ONNX Runtime refuses a Loop body's values one slice per
iteration (their shapes differ between iterations), the same run is made once more with them flattened, and still
counts as one.

:func:`run_value_stats` is the calibration: the same runs, and each value's numbers
(:func:`~ampconfig.decide.value_ranges.value_stats`: range, zeros, non-finite count, exponent histogram) computed
from the arrays that come back, one sample at a time. Every value it carries out stays alive until the run ends,
so a model whose values would not fit in :data:`CALIBRATION_MEMORY_FRACTION` of the memory is measured in parts,
one run per part and sample (:func:`value_parts`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ampconfig.decide.value_ranges import ValueStats as ValueStats
from ampconfig.decide.value_ranges import float_stats as float_stats
from ampconfig.decide.value_ranges import value_stats as value_stats
from ampconfig.errors import AmpconfigError
from ampconfig.inputs.feeds import adapt_feeds
from ampconfig.instrument.expose import FLAT, STACKED, ValueGroup, expose_keys, float_value_keys, static_shapes
from ampconfig.memory import available_memory
from ampconfig.model_io.models import INFERENCE_FAILURES, light_proto
from ampconfig.runner.proof import PROGRESS_SAMPLES
from ampconfig.runner.sessions import (
    RUN_FAILED,
    ModelInFolder,
    Session,
    create_session,
    first_line,
    model_proto,
    run_once,
)
from ampconfig.runner.timing import ProgressCallback
from ampconfig.value_counts import Counts
from ampconfig.worker.client import WorkerCrashed, WorkerRefused

log = logging.getLogger(__name__)

#: What a refused run's message tells the user to do (run_once's words).
_REAL_INPUTS = "give real inputs (--inputs FILE.npz, --input NAME=FILE.npy) or the shapes the model takes (--shape)"

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


class ExposedRunner:
    """One exposed copy of a model and its session, run on sample after sample (:meth:`run`, :meth:`stats`).
    ``folder``: the model's weights stay in their files there (a :class:`ModelInFolder`), read by the session,
    never copied."""

    def __init__(
        self,
        model: onnx.ModelProto,
        keys: Sequence[str],
        device: str,
        folder: Path | None = None,
        announce: Callable[[str], None] | None = None,
        what: str = EXPOSED_WHAT,
    ) -> None:
        self.model, self.keys, self.device, self.folder = model, list(keys), device, folder
        self.announce, self.what = announce, what
        #: the values of known shape leave joined (:func:`~ampconfig.instrument.expose.static_shapes`)
        self.group: dict[str, tuple[int, ...]] | None = static_shapes(model)
        self.exposed = expose_keys(model, self.keys, STACKED, group=self.group)
        self.session = self._session()
        self.output_names = [value.name for value in model.graph.output]

    def _session(self) -> Session:
        if self.announce is not None:
            self.announce(f"building its ONNX Runtime session ({len(self.exposed.model.graph.node)} nodes)")
        copy = self.exposed.model if self.folder is None else ModelInFolder(self.exposed.model, self.folder)
        return create_session(copy, self.device, in_node_order=True, what=self.what)

    def run(self, feeds: Mapping[str, np.ndarray]) -> IntermediateRun:
        """One run on ``feeds`` (converted to the model's input dtypes): outputs and every exposed value, the graph
        inputs as fed among them (a node reading a graph input finds it there)."""
        adapted, results = self.results(feeds)
        values: dict[str, np.ndarray] = dict(adapted)
        values.update(self._by_key(results))
        outputs = {name: results[name] for name in self.output_names if name in results}
        exposed = self.exposed
        return IntermediateRun(
            outputs, values, self.output_names, list(self.session.providers), exposed.per_iteration, exposed.flattened
        )

    def stats(self, feeds: Mapping[str, np.ndarray], io: bool = True) -> dict[str, ValueStats]:
        """One run on ``feeds``: the :class:`ValueStats` of every float value carried out (and, with ``io``, of
        the graph inputs and outputs), counted in ONNX Runtime's worker where the arrays are (only the numbers
        cross to this process), small values together (:func:`~ampconfig.value_counts.float_counts`)."""
        adapted = adapt_feeds(feeds, self.model)
        while True:
            keys = {**self.exposed.keys, **({name: name for name in self.output_names} if io else {})}
            groups = [(group.output, list(group.keys), list(group.shapes)) for group in self.exposed.groups]
            try:
                answer = self.session.stats(adapted, keys=keys, groups=groups, fed=io)
            except WorkerRefused as exc:
                if not self.exposed.per_iteration or self.exposed.flattened:
                    raise AmpconfigError(f"{RUN_FAILED}{first_line(exc)}", hint=_REAL_INPUTS) from None
                # ONNX Runtime refuses a Loop body's values one slice per iteration when their shapes differ
                self.exposed = expose_keys(self.model, self.keys, FLAT, group=self.group)
                self.session = self._session()
                continue
            if not answer["misfit"]:
                counted: dict[str, Counts] = answer["stats"]  # type: ignore[assignment]
                return {key: ValueStats(*numbers) for key, numbers in counted.items()}
            # a shape inference got wrong (a custom op's): those values leave one output each from now on
            self.group = None
            self.exposed = expose_keys(self.model, self.keys, FLAT if self.exposed.flattened else STACKED)
            self.session = self._session()

    def results(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The feeds as fed, and the run's results by output name."""
        adapted = adapt_feeds(feeds, self.model)
        try:
            results = run_once(self.session, adapted)
        except WorkerCrashed:
            raise  # the worker died: no layout saves that run
        except AmpconfigError:
            if not self.exposed.per_iteration:
                raise
            # ONNX Runtime refuses a Loop body's values one slice per iteration when their shapes differ
            self.exposed = expose_keys(self.model, self.keys, FLAT, group=self.group)
            self.session = self._session()
            results = run_once(self.session, adapted)
        if not all(_fits(group, results[group.output]) for group in self.exposed.groups):
            # a shape inference got wrong (a custom op's): those values leave one output each from now on
            self.group = None
            self.exposed = expose_keys(self.model, self.keys, FLAT if self.exposed.flattened else STACKED)
            self.session = self._session()
            results = run_once(self.session, adapted)
        return adapted, results

    def _by_key(self, results: Mapping[str, np.ndarray], io: bool = True) -> dict[str, np.ndarray]:
        """The exposed values (and, with ``io``, the model's outputs) by key, groups cut apart."""
        values: dict[str, np.ndarray] = {}
        for name, array in results.items():
            if name in self.exposed.keys:
                values[self.exposed.keys[name]] = array
            elif io and name in self.output_names:
                values[name] = array
        for group in self.exposed.groups:
            joined, offset = results[group.output], 0
            for key, shape in zip(group.keys, group.shapes, strict=True):
                values[key] = joined[offset : offset + shape[0]]
                offset += shape[0]
        return values


def _fits(group: ValueGroup, joined: np.ndarray) -> bool:
    """Whether a group came back in the shape its values' known shapes say."""
    first = sum(shape[0] for shape in group.shapes)
    return tuple(np.shape(joined)) == (first, *group.shapes[0][1:])


def run_with_intermediates(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    device: str = "cpu",
    names: Sequence[str] | None = None,
    what: str = EXPOSED_WHAT,
) -> IntermediateRun:
    """Run ``model`` once on ``feeds`` (converted to its input dtypes) and return outputs and intermediates.

    ``names`` (value keys) defaults to every float value of every scope
    (:func:`~ampconfig.instrument.expose.float_value_keys`). ``values`` also holds the graph inputs as fed, so a
    node reading a graph input finds it there.
    """
    keys = list(names) if names is not None else float_value_keys(model)
    return ExposedRunner(model, keys, device, what=what).run(feeds)


def run_samples_with_intermediates(
    model: onnx.ModelProto,
    samples: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
    names: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    label: str = "exposed",
    what: str = EXPOSED_WHAT,
) -> IntermediateRun:
    """:func:`run_with_intermediates` once per sample, one session for all, pooled (see :func:`pooled`)."""
    runs = []
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    keys = list(names) if names is not None else float_value_keys(model)
    runner = ExposedRunner(model, keys, device, what=what)
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
    memory_budget: int | None = None,
) -> dict[str, ValueStats]:
    """:class:`ValueStats` of every float value (by key; graph inputs and the model's outputs included), over
    every sample: one run per sample of the exposed copy (:class:`ExposedRunner`), each value's numbers computed
    from its array and the arrays dropped before the next sample; a model whose values would not fit in memory
    together runs once per part of them (:func:`value_parts`). A :class:`ModelInFolder` keeps its weights on disk
    (the copy references them).

    ``progress`` hears of each step (``{label}: ...``): building the session of a large model takes seconds."""
    folder = model.folder if isinstance(model, ModelInFolder) else None
    model = model_proto(model)
    keys = float_value_keys(model)
    parts = value_parts(model, keys, samples[0] if samples else {}, memory_budget)
    step = _Steps(f"{label}: fp32 values", len(parts) * (2 + len(samples)), progress)  # copy, session, samples
    what = f" in {len(parts)} parts, one run each, to stay within memory" if len(parts) > 1 else ""
    step.start(f"building a copy that carries out {len(keys)} values{what}")
    stats: dict[str, ValueStats] = {}
    for number, part in enumerate(parts):
        if number:
            step.done(f"building the copy of part {number + 1} of {len(parts)} ({len(part)} values)")
        runner = ExposedRunner(model, part, device, folder, announce=step.done)
        for index, feeds in enumerate(samples):
            step.done(f"running sample {index + 1} of {len(samples)}")
            for key, found in runner.stats(feeds, io=number == 0).items():
                stats[key] = stats[key].joined(found) if key in stats else found
        del runner
    step.done("")
    return stats


#: The share of the memory available when the calibration starts that the values it carries out of one run may
#: take (twice: ONNX Runtime's outputs, and their copies in numpy).
CALIBRATION_MEMORY_FRACTION = 0.25


def value_parts(
    model: onnx.ModelProto, keys: Sequence[str], feeds: Mapping[str, np.ndarray], budget: int | None = None
) -> list[list[str]]:
    """``keys`` in parts whose values, carried out of one run together, fit in ``budget`` bytes (default:
    :data:`CALIBRATION_MEMORY_FRACTION` of the memory available, halved for the copies): each value's size from
    the model's shapes with its inputs' dimensions set to those of ``feeds``, a value of unknown size counted as
    :data:`UNKNOWN_BYTES`. One part for most models; a value larger than the budget is a part of its own."""
    if budget is None:
        budget = int(available_memory() * CALIBRATION_MEMORY_FRACTION / 2)
    sizes = value_bytes(model, feeds)
    parts: list[list[str]] = [[]]
    held = 0
    for key in keys:
        size = sizes.get(key, UNKNOWN_BYTES)
        if parts[-1] and held + size > budget:
            parts.append([])
            held = 0
        parts[-1].append(key)
        held += size
    return parts


#: What a value of unknown size is counted as (a quarter of a million float32 elements).
UNKNOWN_BYTES = 1 << 20


def value_bytes(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The bytes of each main-graph value whose shape ONNX's shape inference finds with the model's inputs set to
    the dimensions of ``feeds`` (no weight is read: a light copy of the graph is inferred)."""
    light = light_proto(model)
    for value in light.graph.input:
        array = feeds.get(value.name)
        if array is None or not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for size in np.shape(array):
            shape.dim.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except INFERENCE_FAILURES as exc:  # best effort: every value then counts as unknown
        log.info("ONNX shape inference failed, so no value's size is known before the run: %s", exc)
        return {}
    sizes: dict[str, int] = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        if all(dim.HasField("dim_value") for dim in tensor.shape.dim):
            itemsize = 8 if tensor.elem_type == onnx.TensorProto.DOUBLE else 4
            elements = int(np.prod([dim.dim_value for dim in tensor.shape.dim], dtype=np.int64))
            sizes[value.name] = elements * itemsize
    return sizes


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
