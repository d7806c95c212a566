"""Models in and out (``ampconfig/model_io/models.py``): what ONNX's lenient type inference cannot type is left
untyped, and the log says why (never a silent empty answer)."""

from __future__ import annotations

import logging

import onnx
import pytest

from ampconfig.model_io.models import INFERENCE_FAILURES, inferred_types
from tests.graphs import recursive_function_model, transformer_block


def test_inference_failing_types_nothing_and_logs_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    model = recursive_function_model()
    with pytest.raises(INFERENCE_FAILURES):  # what the except catches is what inference raises here
        onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    with caplog.at_level(logging.INFO, logger="ampconfig.model_io.models"):
        assert inferred_types(model) == {}
    assert any("type inference failed" in r.message and "Cycle detected" in r.message for r in caplog.records)


def test_inference_types_every_value_of_a_model_it_reads() -> None:
    types = inferred_types(transformer_block())
    assert types["y"].tensor_type.elem_type == onnx.TensorProto.FLOAT and "scores" in types
