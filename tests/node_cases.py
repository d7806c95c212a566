"""ONNX's own node test cases as a conformance corpus: rewrite each fp32 case in a mode, check, load, run, compare.

Used by tests/models/test_conformance.py and by the benchmark that compares ampconfig with its peers.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import onnx
import onnxruntime as ort

from ampconfig.errors import AmpconfigError
from ampconfig.model_io.models import light_proto
from ampconfig.model_io.node_checks import NodePieces, check_output
from ampconfig.rewrite.names import with_node_names

TOLERANCE = 1e-2


@dataclass(frozen=True)
class NodeCase:
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]
    reference_matches: bool  # does ORT's fp32 run of the original model match the expected outputs?


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _value_matches(actual: object, want: object, tolerance: float) -> bool:
    if isinstance(want, (list, tuple)):  # sequence outputs
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(want)
            and all(_value_matches(a, w, tolerance) for a, w in zip(actual, want, strict=True))
        )
    actual_array, want_array = np.asarray(actual), np.asarray(want)
    if actual_array.shape != want_array.shape:
        return False
    if want_array.dtype.kind in "fc":
        return bool(
            np.allclose(
                actual_array.astype(np.complex128 if want_array.dtype.kind == "c" else np.float64),
                want_array,
                rtol=tolerance,
                atol=tolerance,
                equal_nan=True,
            )
        )
    return bool(np.array_equal(actual_array, want_array))


def outputs_match(got: list, expected: list, tolerance: float = TOLERANCE) -> bool:
    return len(got) == len(expected) and all(
        _value_matches(actual, want, tolerance) for actual, want in zip(got, expected, strict=True)
    )


def _has_float32_io(model: onnx.ModelProto) -> bool:
    values = (*model.graph.input, *model.graph.output)
    return any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in values)


@cache
def float32_cases() -> tuple[NodeCase, ...]:
    """Every node test case with a float32 graph input or output whose fp32 model runs in ORT CPU."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = collect_testcases("")
    cases = []
    for case in collected:
        if case.model is None or not case.data_sets or not _has_float32_io(case.model):
            continue
        inputs, expected = case.data_sets[0]
        names = [i.name for i in case.model.graph.input]
        feeds = {name: value for name, value in zip(names, inputs, strict=False) if name}
        try:
            reference = _session(case.model).run(None, feeds)
        except Exception:  # the fp32 model itself does not run in ORT CPU: not part of the corpus
            continue
        cases.append(NodeCase(case.name, case.model, feeds, list(expected), outputs_match(reference, expected)))
    return tuple(cases)


@dataclass
class ModeReport:
    mode: str
    counts: Counter = field(default_factory=Counter)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)

    @property
    def written(self) -> int:
        return sum(self.counts[k] for k in ("match", "mismatch", "reference_mismatch", "invalid", "unloadable"))

    @property
    def valid_and_loadable(self) -> int:
        return sum(self.counts[k] for k in ("match", "mismatch", "reference_mismatch"))

    @property
    def within_tolerance_rate(self) -> float:
        judged = self.counts["match"] + self.counts["mismatch"]
        return self.counts["match"] / judged if judged else 1.0


Converter = Callable[[onnx.ModelProto, str], onnx.ModelProto]


#: Where strict inference names a node; a rewrite names unnamed nodes, so complaints compare without it.
def _full_check_complaint(model: onnx.ModelProto) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def new_checker_complaint(original: onnx.ModelProto, rewritten: onnx.ModelProto) -> str | None:
    """The full checker's complaint about ``rewritten`` that ``original`` did not have: a converter must not make a
    model worse than its input (ONNX's own ``test_mvn`` already fails the strict check: inference of its function
    body disagrees with itself). Judged by verdicts, not wording: any complaint counts when ``original`` passes;
    when it does not, a complaint counts where a node (matched by name, unnamed nodes named as ampconfig names
    them) fails on its own in ``rewritten`` and passed in ``original`` (``ampconfig.model_io.node_checks``)."""
    complaint = _full_check_complaint(rewritten)
    if complaint is None or _full_check_complaint(original) is None:
        return complaint
    reference = NodePieces(light_proto(with_node_names(original)))
    return check_output(light_proto(rewritten), (), lambda: reference, input_passes=False).complaint


def conform(
    mode: str, convert: Converter, cases: Iterator[NodeCase] | tuple[NodeCase, ...] | None = None
) -> ModeReport:
    report = ModeReport(mode)
    for case in cases if cases is not None else float32_cases():
        try:
            rewritten = convert(case.model, mode)
        except AmpconfigError as exc:
            report.counts["refused"] += 1
            report.excluded.append((case.name, exc.message.splitlines()[0][:200]))
            continue
        except Exception as exc:  # a crash is a finding, never a pass
            report.counts["crash"] += 1
            report.failures.append((case.name, "crash", f"{type(exc).__name__}: {exc}"[:300]))
            continue
        complaint = new_checker_complaint(case.model, rewritten)
        if complaint is not None:
            report.counts["invalid"] += 1
            report.failures.append((case.name, "invalid", complaint[:300]))
            continue
        try:
            got = _session(rewritten).run(None, case.feeds)
        except Exception as exc:
            report.counts["unloadable"] += 1
            report.failures.append((case.name, "unloadable", str(exc)[:300]))
            continue
        if not case.reference_matches:
            report.counts["reference_mismatch"] += 1
        elif outputs_match(got, case.expected):
            report.counts["match"] += 1
        else:
            report.counts["mismatch"] += 1
            report.failures.append((case.name, "mismatch", ""))
    return report
