"""Conformance on ONNX's node test cases: every case is rewritten, in every mode (none refused); every rewritten
model has no full-checker complaint its input lacks, declares no shape its input did not declare for that tensor
(tests/shape_claims.py: ONNX Runtime plans memory by declared shapes) and runs in ORT CPU; in allow_mix_precision at
least 99% match the expected outputs within rtol=atol=1e-2. The exporter-shaped and unusual models run the same way
in tests/models/test_written_models_run.py. The Cast nodes each rewrite inserts are exactly the plan's casts,
and each island count equals the Casts on that island's edges (tests/cast_audit.py).

ONNX's own ``test_mvn`` fails the strict check (inference of MeanVarianceNormalization's function body
disagrees with itself) and runs in ORT: it is rewritten like every other case (the acceptance rule), and its
rewrite has that complaint and no other.
"""

from __future__ import annotations

import onnx
import pytest

from ampconfig import rewrite_model
from tests.cast_audit import audit_casts
from tests.graphs import MODES
from tests.node_cases import conform, float32_cases
from tests.shape_claims import added_shape_claims


def _convert(model, mode):
    # The sweep loads and runs every written model in ONNX Runtime itself (a crash or a refusal counted): the API's
    # load check would load each of ~9,000 rewrites once more.
    return rewrite_model(model, mode, target="cpu", load_check=False)


def test_mvn_is_in_the_corpus_and_fails_the_strict_check() -> None:
    # The case the acceptance rule is about must stay in the sweep: if ONNX fixes it, this says so.
    mvn = next(case for case in float32_cases() if case.name == "test_mvn")
    refusals = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)
    with pytest.raises(refusals, match="MeanVarianceNormalization"):
        onnx.checker.check_model(mvn.model, full_check=True)


def test_corpus_is_the_real_one() -> None:
    # ~1,113 cases with float32 I/O run in ORT CPU as fp32 (onnx 1.23, onnxruntime 1.31).
    assert len(float32_cases()) > 1000


@pytest.mark.parametrize("mode", MODES)
def test_every_written_model_is_valid_and_runs(mode: str) -> None:
    added: list[str] = []

    def convert(model: onnx.ModelProto, mode: str) -> onnx.ModelProto:
        written = _convert(model, mode)
        added.extend(f"{model.graph.name}: {claim}" for claim in added_shape_claims(model, written))
        return written

    with audit_casts(flip=False) as audit:
        report = conform(mode, convert)
    print(f"\n{mode}: {dict(report.counts)}")
    assert report.failures == [] or all(kind == "mismatch" for _, kind, _ in report.failures), report.failures[:10]
    assert report.counts["crash"] == report.counts["invalid"] == report.counts["unloadable"] == 0
    assert report.excluded == [], report.excluded  # ampconfig accepts every model ONNX Runtime loads
    if mode == "allow_mix_precision":
        assert report.within_tolerance_rate >= 0.99, report.failures
    assert audit.mismatches == [], audit.mismatches[:10]
    assert audit.plans >= len(float32_cases()) and audit.groups > 0
    assert added == [], added[:10]
