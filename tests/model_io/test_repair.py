"""Repairs of contradicting declarations (``ampconfig/model_io/repair.py``): a model ONNX's inference cannot type has
nothing judged and nothing repaired, and the log says why."""

from __future__ import annotations

import logging

import pytest

from ampconfig.model_io.repair import repair_contradictions
from tests.graphs import recursive_function_model


def test_a_model_inference_refuses_is_not_repaired_and_the_log_says_why(caplog: pytest.LogCaptureFixture) -> None:
    model = recursive_function_model()
    before = model.SerializeToString()
    with caplog.at_level(logging.INFO, logger="ampconfig.model_io.repair"):
        assert repair_contradictions(model) == []
    assert model.SerializeToString() == before
    assert any("no declaration is checked" in r.message and "Cycle detected" in r.message for r in caplog.records)
