"""Accuracy metrics of ampconfig.prove.accuracy on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ampconfig.prove.accuracy import (
    OutputMismatchError,
    Tolerance,
    compare_output,
    compare_outputs,
    tolerance_failures,
)


def test_identical_outputs_have_no_error() -> None:
    ref = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
    metrics = compare_output("y", ref, ref.copy())
    assert metrics.rel_l2 == 0.0
    assert metrics.max_abs == 0.0
    assert metrics.cosine == pytest.approx(1.0)
    assert metrics.nonfinite == 0
    assert metrics.argmax_agreement == 1.0
    assert metrics.shape == (4, 10)


def test_hand_computed_values() -> None:
    ref = np.array([3.0, 4.0], dtype=np.float32)
    cand = np.array([3.0, 4.5], dtype=np.float32)
    metrics = compare_output("y", ref, cand)
    assert metrics.rel_l2 == pytest.approx(0.5 / 5.0)
    assert metrics.max_abs == pytest.approx(0.5)
    expected_cos = (9 + 18) / (5.0 * math.hypot(3.0, 4.5))
    assert metrics.cosine == pytest.approx(expected_cos)
    assert metrics.argmax_agreement is None  # rank 1: no rows to arg-max


def test_metrics_are_computed_in_float64() -> None:
    # Squares of 1e30 overflow float32; in float64 the relative error is exactly the 1e-3 perturbation.
    ref = np.full(16, 1e30, dtype=np.float32)
    cand = (ref.astype(np.float64) * (1 + 1e-3)).astype(np.float32)
    metrics = compare_output("big", ref, cand)
    assert metrics.rel_l2 == pytest.approx(1e-3, rel=1e-3)
    assert math.isfinite(metrics.max_abs)


def test_float16_candidate_against_float32_reference() -> None:
    ref = np.linspace(-2, 2, 101, dtype=np.float32)
    cand = ref.astype(np.float16)
    metrics = compare_output("y", ref, cand)
    assert 0 < metrics.rel_l2 < 1e-3
    assert metrics.max_abs <= 2 * 2.0**-11 * 2  # at most one fp16 ulp near 2


def test_zero_reference_uses_absolute_l2() -> None:
    ref = np.zeros(4, dtype=np.float32)
    cand = np.array([0.0, 3e-4, 0.0, 4e-4], dtype=np.float32)
    metrics = compare_output("y", ref, cand)
    assert metrics.rel_l2 == pytest.approx(5e-4, rel=1e-5)
    assert metrics.cosine == 0.0
    assert any("all zeros" in note for note in metrics.notes)


def test_both_zero_is_a_perfect_match() -> None:
    zeros = np.zeros((2, 3), dtype=np.float32)
    metrics = compare_output("y", zeros, zeros)
    assert metrics.rel_l2 == 0.0
    assert metrics.cosine == 1.0


def test_nonfinite_in_candidate_is_infinite_error_and_counted() -> None:
    ref = np.ones(5, dtype=np.float32)
    cand = np.array([1, np.nan, 1, np.inf, 1], dtype=np.float32)
    metrics = compare_output("y", ref, cand)
    assert metrics.nonfinite == 2
    assert metrics.rel_l2 == math.inf
    data = metrics.to_dict()
    assert data["rel_l2"] is None and data["max_abs"] is None  # JSON has no infinity
    assert data["nonfinite"] == 2
    assert tolerance_failures([metrics], Tolerance(rel_l2=1.0))


def test_identical_nonfinite_positions_are_left_out() -> None:
    ref = np.array([-np.inf, 1.0, 2.0], dtype=np.float32)
    cand = np.array([-np.inf, 1.0, 2.0 + 1e-3], dtype=np.float32)
    metrics = compare_output("y", ref, cand)
    assert metrics.rel_l2 == pytest.approx(1e-3 / math.sqrt(5), rel=1e-3)
    assert metrics.nonfinite == 1
    assert metrics.notes


def test_integer_outputs_report_exact_match() -> None:
    ref = np.array([1, 2, 3, 4], dtype=np.int64)
    cand = np.array([1, 2, 0, 4], dtype=np.int64)
    metrics = compare_output("idx", ref, cand)
    assert metrics.mismatches == 1
    assert metrics.exact_match == pytest.approx(0.75)
    assert metrics.rel_l2 == pytest.approx(3 / math.sqrt(30))
    assert metrics.to_dict()["mismatches"] == 1


def test_bool_outputs() -> None:
    ref = np.array([True, False, True])
    metrics = compare_output("mask", ref, ref.copy())
    assert metrics.mismatches == 0 and metrics.exact_match == 1.0 and metrics.rel_l2 == 0.0


def test_string_outputs_exact_only() -> None:
    ref = np.array(["a", "b"], dtype=object)
    cand = np.array(["a", "c"], dtype=object)
    metrics = compare_output("labels", ref, cand)
    assert metrics.rel_l2 is None and metrics.mismatches == 1
    assert tolerance_failures([metrics], Tolerance()) == ["labels: 1 element(s) differ"]


def test_shape_change_is_an_accuracy_failure_with_both_shapes() -> None:
    metrics = compare_output("boxes", np.zeros((4, 6), np.float32), np.zeros((0, 6), np.float32))
    assert metrics.shape == (4, 6) and metrics.rewritten_shape == (0, 6)
    assert metrics.rel_l2 == math.inf and metrics.to_dict()["rewritten_shape"] == [0, 6]
    failures = tolerance_failures([metrics], Tolerance(rel_l2=1e9))
    assert failures == [
        "boxes: shape [0, 6] in the rewritten model, [4, 6] in the fp32 reference (a count or size changed)"
    ]


def test_argmax_agreement_fraction() -> None:
    ref = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=np.float32)
    cand = ref.copy()
    cand[1] = [0.2, 0.8]  # one row flips
    assert compare_output("logits", ref, cand).argmax_agreement == pytest.approx(0.75)
    three_d = np.stack([ref, ref])
    assert compare_output("logits", three_d, np.stack([ref, cand])).argmax_agreement == pytest.approx(0.875)
    assert compare_output("maps", np.zeros((1, 2, 3, 4)), np.zeros((1, 2, 3, 4))).argmax_agreement is None


def test_compare_outputs_order_and_missing() -> None:
    ref = {"a": np.ones(2), "b": np.zeros(2)}
    metrics = compare_outputs(ref, dict(ref), ["b", "a"])
    assert [m.name for m in metrics] == ["b", "a"]
    with pytest.raises(OutputMismatchError, match="missing from the rewritten model"):
        compare_outputs(ref, {"a": np.ones(2)})


def test_tolerance_bounds() -> None:
    ref = np.array([3.0, 4.0])
    metrics = [compare_output("y", ref, np.array([3.0, 4.5]))]  # rel 0.1, max_abs 0.5
    assert tolerance_failures(metrics, Tolerance(rel_l2=0.2)) == []
    assert tolerance_failures(metrics, Tolerance(rel_l2=0.05)) == ["y: rel_l2 0.1 > 0.05"]
    assert tolerance_failures(metrics, Tolerance(rel_l2=1.0, max_abs=0.1)) == ["y: max_abs 0.5 > 0.1"]
    assert len(tolerance_failures(metrics, Tolerance(rel_l2=1.0, min_cosine=0.99999))) == 1


def test_one_tolerance_object_for_config_and_judging() -> None:
    from ampconfig.documents.session_config import SessionConfig
    from ampconfig.documents.session_config import Tolerance as ConfigTolerance

    assert Tolerance is ConfigTolerance  # the config's section is what run/compare/tune judge by
    config = SessionConfig.model_validate(
        {"precision_mode": "force_fp16", "tolerance": {"rel_l2": 0.5, "min_cosine": 0.9}}
    )
    tol = config.tolerance
    assert tol == Tolerance(rel_l2=0.5, max_abs=None, min_cosine=0.9)
    assert tol.to_dict() == {"rel_l2": 0.5, "max_abs": None, "min_cosine": 0.9}
