"""The built-in colour strategy: complete over ONNX's default domain and consistent with the references."""

from __future__ import annotations

import pytest

from ampconfig.opinfo.colours import STRATEGY
from ampconfig.opinfo.library import Colour
from ampconfig.opinfo.probe_models import default_domain_op_types


def test_every_default_domain_schema_has_a_colour() -> None:
    missing = [op for op in default_domain_op_types() if op not in STRATEGY]
    assert missing == []
    assert len(default_domain_op_types()) > 150  # onnx.defs really was read


@pytest.mark.parametrize(
    ("key", "colour"),
    [
        ("MatMul", Colour.WHITE),
        ("Gemm", Colour.WHITE),
        ("Conv", Colour.WHITE),
        ("com.microsoft::FusedMatMul", Colour.WHITE),
        ("com.microsoft::GroupQueryAttention", Colour.WHITE),
        ("Softmax", Colour.BLACK),
        ("ReduceMean", Colour.BLACK),
        ("LayerNormalization", Colour.BLACK),
        ("com.microsoft::SkipLayerNormalization", Colour.BLACK),
        ("SoftmaxCrossEntropyLoss", Colour.BLACK),
        ("Add", Colour.GRAY),
        ("com.microsoft::FastGelu", Colour.GRAY),
        ("Reshape", Colour.CLEAR),
        ("Relu", Colour.CLEAR),
        ("MaxPool", Colour.CLEAR),
        ("Where", Colour.CLEAR),
        ("MatMulInteger", Colour.CLEAR),
    ],
)
def test_brief_colours(key: str, colour: Colour) -> None:
    entry = STRATEGY.get(key)
    assert entry is not None and entry.colour is colour


def test_disagreements_take_the_safer_colour_and_say_so() -> None:
    # TF puts Softmax/Log on its infer (gray) list, torch autocasts them to fp32: black wins.
    for key in ("Softmax", "Log", "LogSoftmax", "Reciprocal", "Softplus", "ReduceProd"):
        entry = STRATEGY[key]
        assert entry.colour is Colour.BLACK
        assert "disagree" in entry.reference and "TF" in entry.reference and "torch" in entry.reference
    # torch autocasts prelu to fp16, TF treats LeakyRelu as infer: gray wins over white.
    assert STRATEGY["PRelu"].colour is Colour.GRAY and "disagree" in STRATEGY["PRelu"].reference


def test_every_entry_names_its_reference_and_keys_are_well_formed() -> None:
    for key, entry in STRATEGY.items():
        assert entry.reference.strip(), key
        domain, _, op_type = key.rpartition("::")
        assert op_type and op_type[0].isupper(), key
        assert domain in ("", "com.microsoft"), key
