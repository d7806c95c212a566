"""Models whose inputs are not float32 (issue 35, item 2), built with onnx.helper.

- :func:`phoneme_model`: a singing-synthesis front end: STRING phonemes -> ``ai.onnx.ml`` LabelEncoder (strings to
  int64 ids) -> Gather of a float embedding -> MatMul -> Add -> Tanh -> MatMul, so every precision mode has float
  nodes to lower. The vocabulary can be given as ``keys_strings`` or as a string ``keys_tensor`` (LabelEncoder-4),
  read directly or through a Reshape.
- :func:`category_model`: the same after a CategoryMapper (``cats_strings``).
- :func:`normalized_phoneme_model`: a StringNormalizer (lower-casing) before the LabelEncoder: the strings the
  encoder's keys name are not the ones the input takes, so no vocabulary is read through it.
- :func:`typed_inputs_model`: one input of every type ampconfig feeds besides float32 (bool, every integer width,
  float16), each cast to float32 and summed into a MatMul.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from tests.graphs import IR_VERSION

#: Phonemes as a singing-synthesis model's dictionary writes them (SP: silence, AP: breath).
PHONEMES = ("SP", "AP", "a", "ai", "an", "ang", "b", "ch", "sh", "zh", "i", "ing", "u", "ü", "e", "er")
HIDDEN = 16
#: The domains and versions every model here imports (LabelEncoder's keys_tensor needs ai.onnx.ml 4).
_OPSETS = [oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 4)]


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto],
    name: str,
) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = oh.make_model(graph, opset_imports=_OPSETS)
    model.ir_version = IR_VERSION  # onnx 1.23 stamps IR 14, which ONNX Runtime 1.31 refuses
    onnx.checker.check_model(model, full_check=True)
    return model


def _float_layers(ids: str, vocabulary: int, rank: int, seed: int = 0) -> tuple[list, list]:
    """Gather of an embedding by ``ids``, then MatMul -> Add -> Tanh -> MatMul: nodes and weights."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.standard_normal((vocabulary, HIDDEN)).astype(np.float32), "embedding"),
        numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(HIDDEN) / 10).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((HIDDEN, 4)) / 4).astype(np.float32), "w2"),
    ]
    nodes = [
        oh.make_node("Gather", ["embedding", ids], ["embedded"], name="embed"),
        oh.make_node("MatMul", ["embedded", "w1"], ["h"], name="mm1"),
        oh.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
        oh.make_node("Tanh", ["hb"], ["ht"], name="tanh1"),
        oh.make_node("MatMul", ["ht", "w2"], ["y"], name="mm2"),
    ]
    return nodes, weights


def _dims(rank: int) -> list[str]:
    return ["batch", "frames"][-rank:] if rank <= 2 else [f"d{axis}" for axis in range(rank)]


def phoneme_model(rank: int = 2, keys: str = "keys_strings", through_reshape: bool = False) -> onnx.ModelProto:
    """phs STRING [batch, frames] (or [frames] for ``rank`` 1) -> LabelEncoder -> ... -> y float [..., 4].

    ``keys``: ``keys_strings`` or ``keys_tensor``; ``through_reshape``: a Reshape to the same shape stands
    between the input and the encoder (a model that flattens and restores its phonemes)."""
    encoder_input = "phs_reshaped" if through_reshape else "phs"
    if keys == "keys_strings":
        key_attribute = {"keys_strings": list(PHONEMES)}
    else:
        key_attribute = {"keys_tensor": oh.make_tensor("keys", TensorProto.STRING, [len(PHONEMES)], list(PHONEMES))}
    encoder = oh.make_node(
        "LabelEncoder",
        [encoder_input],
        ["ids"],
        domain="ai.onnx.ml",
        name="phoneme_ids",
        values_int64s=list(range(len(PHONEMES))),
        default_int64=0,
        **key_attribute,
    )
    layers, weights = _float_layers("ids", len(PHONEMES), rank)
    nodes = [encoder, *layers]
    if through_reshape:
        shape = numpy_helper.from_array(np.array([0] * rank, np.int64), "same_shape")
        nodes.insert(0, oh.make_node("Reshape", ["phs", "same_shape"], [encoder_input], name="keep_shape"))
        weights.append(shape)
    dims = _dims(rank)
    return _model(
        nodes,
        [oh.make_tensor_value_info("phs", TensorProto.STRING, dims)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [*dims, 4])],
        weights,
        f"phonemes_rank{rank}",
    )


def category_model() -> onnx.ModelProto:
    """pinyin STRING [frames] -> CategoryMapper -> Gather -> ... -> y [frames, 4]."""
    mapper = oh.make_node(
        "CategoryMapper",
        ["pinyin"],
        ["ids"],
        domain="ai.onnx.ml",
        name="pinyin_ids",
        cats_strings=list(PHONEMES),
        cats_int64s=list(range(len(PHONEMES))),
        default_int64=0,
    )
    layers, weights = _float_layers("ids", len(PHONEMES), 1, seed=1)
    return _model(
        [mapper, *layers],
        [oh.make_tensor_value_info("pinyin", TensorProto.STRING, ["frames"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["frames", 4])],
        weights,
        "pinyin",
    )


def normalized_phoneme_model() -> onnx.ModelProto:
    """phs STRING [frames] -> StringNormalizer (lower case) -> LabelEncoder -> ...: no vocabulary to draw from."""
    normalizer = oh.make_node(
        "StringNormalizer",
        ["phs"],
        ["lowered"],
        name="lower",
        case_change_action="LOWER",
        is_case_sensitive=0,
        locale="C",  # the default, en_US.UTF-8, is missing where no language pack is installed
    )
    encoder = oh.make_node(
        "LabelEncoder",
        ["lowered"],
        ["ids"],
        domain="ai.onnx.ml",
        name="phoneme_ids",
        keys_strings=[item.lower() for item in PHONEMES],
        values_int64s=list(range(len(PHONEMES))),
        default_int64=0,
    )
    layers, weights = _float_layers("ids", len(PHONEMES), 1)
    return _model(
        [normalizer, encoder, *layers],
        [oh.make_tensor_value_info("phs", TensorProto.STRING, ["frames"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["frames", 4])],
        weights,
        "normalized_phonemes",
    )


def phoneme_strings(count: int, seed: int = 0) -> np.ndarray:
    """``count`` phonemes of the vocabulary, a rank-1 ``<U`` array."""
    rng = np.random.default_rng(seed)
    return np.array(PHONEMES)[rng.integers(0, len(PHONEMES), size=count)]


#: The types of :func:`typed_inputs_model`'s inputs, each named by its numpy type.
TYPED_INPUTS = {
    "bool": TensorProto.BOOL,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "float16": TensorProto.FLOAT16,
}
TYPED_WIDTH = 8


def typed_inputs_model() -> onnx.ModelProto:
    """One input per :data:`TYPED_INPUTS` type, ``[batch, 8]``, each cast to float32, scaled (the integers
    down to about 1) and summed, then MatMul -> Add -> Tanh -> MatMul -> y [batch, 4]."""
    rng = np.random.default_rng(3)
    nodes: list[onnx.NodeProto] = []
    weights = [numpy_helper.from_array(np.float32(0.01), "int_scale")]
    terms = []
    for name, elem in TYPED_INPUTS.items():
        nodes.append(oh.make_node("Cast", [name], [f"{name}_f"], to=TensorProto.FLOAT, name=f"cast_{name}"))
        term = f"{name}_f"
        if elem not in (TensorProto.BOOL, TensorProto.FLOAT16):
            nodes.append(oh.make_node("Mul", [term, "int_scale"], [f"{name}_s"], name=f"scale_{name}"))
            term = f"{name}_s"
        terms.append(term)
    nodes.append(oh.make_node("Sum", terms, ["total"], name="sum"))
    weights += [
        numpy_helper.from_array((rng.standard_normal((TYPED_WIDTH, HIDDEN)) / 4).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(HIDDEN) / 10).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((HIDDEN, 4)) / 4).astype(np.float32), "w2"),
    ]
    nodes += [
        oh.make_node("MatMul", ["total", "w1"], ["h"], name="mm1"),
        oh.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
        oh.make_node("Tanh", ["hb"], ["ht"], name="tanh1"),
        oh.make_node("MatMul", ["ht", "w2"], ["y"], name="mm2"),
    ]
    return _model(
        nodes,
        [oh.make_tensor_value_info(name, elem, ["batch", TYPED_WIDTH]) for name, elem in TYPED_INPUTS.items()],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        weights,
        "typed_inputs",
    )


def typed_values(batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Values for every input of :func:`typed_inputs_model`, each in its own type (integers in [0, 100))."""
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for name in TYPED_INPUTS:
        if name == "bool":
            values[name] = rng.integers(0, 2, size=(batch, TYPED_WIDTH)).astype(np.bool_)
        elif name == "float16":
            values[name] = rng.standard_normal((batch, TYPED_WIDTH)).astype(np.float16)
        else:
            values[name] = rng.integers(0, 100, size=(batch, TYPED_WIDTH)).astype(name)
    return values
