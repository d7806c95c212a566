"""Conformance on ONNX's node test cases: every rewritten model is checker-valid and runs in ORT CPU, in every
mode; in allow_mix_precision at least 99% match the expected outputs within rtol=atol=1e-2.

Cases are excluded only when ampconfig refuses them with a clear error (an input model that already fails the
full checker, or must_keep_origin_dtype naming a node the target cannot run); exclusions are bounded below.
"""

from __future__ import annotations

import pytest

from ampconfig import rewrite_model
from tests.graphs import MODES
from tests.node_cases import conform, float32_cases


def _convert(model, mode):
    return rewrite_model(model, mode, target="cpu")


def test_corpus_is_the_real_one() -> None:
    # ~1,113 cases with float32 I/O run in ORT CPU as fp32 (onnx 1.23, onnxruntime 1.31).
    assert len(float32_cases()) > 1000


@pytest.mark.parametrize("mode", MODES)
def test_every_written_model_is_valid_and_runs(mode: str) -> None:
    report = conform(mode, _convert)
    print(f"\n{mode}: {dict(report.counts)}")
    assert report.failures == [] or all(kind == "mismatch" for _, kind, _ in report.failures), report.failures[:10]
    assert report.counts["crash"] == report.counts["invalid"] == report.counts["unloadable"] == 0
    # Refusals must stay rare and explained: they are listed in the issue note.
    assert len(report.excluded) <= 5, report.excluded
    if mode == "allow_mix_precision":
        assert report.within_tolerance_rate >= 0.99, report.failures
