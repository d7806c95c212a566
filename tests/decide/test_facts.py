"""Node facts worked out once per kind of node (``iter_scopes``) are each node's own facts (``node_facts``)."""

from __future__ import annotations

from collections.abc import Callable

import onnx
import pytest

from ampconfig.decide.facts import iter_scopes, node_facts
from ampconfig.dtypes import Dtype
from ampconfig.model_io.ir_bridge import stand_in_nodes, to_ir
from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.types import annotate_dtypes
from tests import exporter_models, unusual_models, value_models
from tests.graphs import transformer_block

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "gpt2": exporter_models.gpt2,  # many nodes of few kinds
    "ocr": exporter_models.ocr,
    "transformer_block": transformer_block,
    "zipmap": unusual_models.zipmap_classifier_model,  # a map: stand-ins
    "sparse": unusual_models.sparse_initializer_model,
    "bfloat16_io": unusual_models.bfloat16_io_model,
    "constant_of_shape": lambda: unusual_models.constant_of_shape_model(20),
    "if": value_models.vad_if,  # subgraphs: their nodes' facts too
    "loop": value_models.char_lstm_loop,
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("low", [Dtype.FLOAT16, Dtype.BFLOAT16])
def test_facts_shared_by_kind_are_each_nodes_own(name: str, low: Dtype) -> None:
    model = to_ir(MODELS[name]())
    name_unnamed_nodes(model)
    annotate_dtypes(model)
    stand_ins = stand_in_nodes(model)
    facts = [each for scope in iter_scopes(model, low) for each in scope.facts]
    assert facts and len({each.node for each in facts}) == len(facts)
    assert name not in ("if", "loop") or any(each.scope for each in facts)
    for each in facts:
        assert each == node_facts(each.node, model, each.scope, low, stand_ins=stand_ins)
