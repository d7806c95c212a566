"""Real models of the kinds exporters write that ampconfig once failed on (issue 18), built with onnx.helper:
sparse constants and initializers, a scikit-learn-style classifier ending in ZipMap, bfloat16 and zero-size
inputs, ConstantOfShape, training info, inputs and outputs that share a symbolic size differing at run time. Each
one loads and runs in ONNX Runtime."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from tests.graphs import IR_VERSION

FEATURES = 8


def _model(graph: onnx.GraphProto, opset: int = 17, ml: bool = False) -> onnx.ModelProto:
    imports = [oh.make_opsetid("", opset), *([oh.make_opsetid("ai.onnx.ml", 3)] if ml else [])]
    model = oh.make_model(graph, opset_imports=imports)
    model.ir_version = IR_VERSION
    return model


def _weight(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)


def _x_to_y(
    nodes: list[onnx.NodeProto],
    name: str,
    weights: dict[str, np.ndarray],
    opset: int = 17,
    sparse_initializer: tuple[onnx.SparseTensorProto, ...] = (),
) -> onnx.ModelProto:
    """A graph from input x (float32, [n, 8]) to output y (float32, [n, 4]) with these float32 weights."""
    graph = oh.make_graph(
        nodes,
        name,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(array, weight) for weight, array in weights.items()],
        sparse_initializer=list(sparse_initializer),
    )
    return _model(graph, opset=opset)


def _sparse(name: str, values: list[float], positions: list[int], size: int) -> onnx.SparseTensorProto:
    return oh.make_sparse_tensor(
        numpy_helper.from_array(np.array(values, np.float32), name),
        numpy_helper.from_array(np.array(positions, np.int64), f"{name}_indices"),
        [size],
    )


def sparse_constant_model() -> onnx.ModelProto:
    """x -> Add(Constant(sparse_value)) -> MatMul -> y: the Constant's value is stored sparse."""
    nodes = [
        oh.make_node("Constant", [], ["offset"], name="sparse_const", sparse_value=_sparse("v", [1.5, -2], [1, 5], 8)),
        oh.make_node("Add", ["x", "offset"], ["shifted"], name="add"),
        oh.make_node("MatMul", ["shifted", "w"], ["y"], name="mm"),
    ]
    return _x_to_y(nodes, "sparse_constant", {"w": _weight(FEATURES, 4)})


def sparse_initializer_model() -> onnx.ModelProto:
    """x -> Add(sparse initializer) -> MatMul -> y. ONNX Runtime reads the initializer as a dense tensor; ONNX's
    checker types it sparse, which Add does not take, so the full check rejects this model."""
    nodes = [
        oh.make_node("Add", ["x", "offset"], ["shifted"], name="add"),
        oh.make_node("MatMul", ["shifted", "w"], ["y"], name="mm"),
    ]
    offset = _sparse("offset", [0.5, 3], [0, 7], FEATURES)
    return _x_to_y(nodes, "sparse_initializer", {"w": _weight(FEATURES, 4)}, sparse_initializer=(offset,))


#: ZipMap's output in every scikit-learn classifier export: one {class: probability} map per row.
PROBABILITY_MAPS = oh.make_sequence_type_proto(
    oh.make_map_type_proto(TensorProto.INT64, oh.make_tensor_type_proto(TensorProto.FLOAT, []))
)


def zipmap_classifier_model() -> onnx.ModelProto:
    """x -> MatMul -> LinearClassifier -> (label, ZipMap probabilities): the tail of a scikit-learn export."""
    classes = 3
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["features"], name="mm"),
        oh.make_node(
            "LinearClassifier",
            ["features"],
            ["label", "probabilities"],
            domain="ai.onnx.ml",
            name="classifier",
            coefficients=_weight(classes, 4, seed=1).ravel().tolist(),
            intercepts=[0.1, -0.2, 0.05],
            classlabels_ints=list(range(classes)),
            post_transform="SOFTMAX",
        ),
        oh.make_node(
            "ZipMap",
            ["probabilities"],
            ["probability_maps"],
            domain="ai.onnx.ml",
            name="zipmap",
            classlabels_int64s=list(range(classes)),
        ),
    ]
    graph = oh.make_graph(
        nodes,
        "zipmap_classifier",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
        [
            oh.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
            oh.make_value_info("probability_maps", PROBABILITY_MAPS),
        ],
        [numpy_helper.from_array(_weight(FEATURES, 4, seed=2), "w")],
    )
    return _model(graph, ml=True)


#: The models ONNX Runtime runs but onnx-ir cannot hold as they are (by name, for test ids).
SPARSE_AND_MAP_MODELS = {
    "sparse_constant": sparse_constant_model,
    "sparse_initializer": sparse_initializer_model,
    "zipmap_classifier": zipmap_classifier_model,
}


def bfloat16_io_model() -> onnx.ModelProto:
    """x (bfloat16) -> Cast -> MatMul -> Cast -> y (bfloat16): a model whose interface is bfloat16."""
    nodes = [
        oh.make_node("Cast", ["x"], ["x32"], name="to_float", to=TensorProto.FLOAT),
        oh.make_node("MatMul", ["x32", "w"], ["h"], name="mm"),
        oh.make_node("Relu", ["h"], ["h_relu"], name="relu"),
        oh.make_node("Cast", ["h_relu"], ["y"], name="to_bfloat16", to=TensorProto.BFLOAT16),
    ]
    graph = oh.make_graph(
        nodes,
        "bfloat16_io",
        [oh.make_tensor_value_info("x", TensorProto.BFLOAT16, ["n", FEATURES])],
        [oh.make_tensor_value_info("y", TensorProto.BFLOAT16, ["n", 4])],
        [numpy_helper.from_array(_weight(FEATURES, 4, seed=3), "w")],
    )
    return _model(graph)


def zero_size_model() -> onnx.ModelProto:
    """An input with a static dimension of size 0 (``z: [0, 8]``) next to an ordinary one."""
    nodes = [
        oh.make_node("MatMul", ["z", "w"], ["z_out"], name="mm_empty"),
        oh.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    graph = oh.make_graph(
        nodes,
        "zero_size",
        [
            oh.make_tensor_value_info("z", TensorProto.FLOAT, [0, FEATURES]),
            oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES]),
        ],
        [
            oh.make_tensor_value_info("z_out", TensorProto.FLOAT, [0, 4]),
            oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
        ],
        [numpy_helper.from_array(_weight(FEATURES, 4, seed=4), "w")],
    )
    return _model(graph)


def constant_of_shape_model(opset: int) -> onnx.ModelProto:
    """x -> MatMul -> h; Mul(h, ConstantOfShape(Shape(h))): a float32 ConstantOfShape whose consumer goes low.
    ConstantOfShape has no bfloat16 output before opset 20."""
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Shape", ["h"], ["h_shape"], name="shape"),
        oh.make_node(
            "ConstantOfShape", ["h_shape"], ["ones"], name="ones", value=numpy_helper.from_array(np.ones(1, np.float32))
        ),
        oh.make_node("Mul", ["h", "ones"], ["y"], name="mul"),
    ]
    return _x_to_y(nodes, "constant_of_shape", {"w": _weight(FEATURES, 4, seed=5)}, opset=opset)


def float32_island_model() -> onnx.ModelProto:
    """x -> MatMul -> Exp -> MatMul -> y: a mixed rewrite keeps Exp float32 between two casts."""
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["m"], name="mm1"),
        oh.make_node("Exp", ["m"], ["e"], name="exp"),
        oh.make_node("MatMul", ["e", "w2"], ["y"], name="mm2"),
    ]
    weights = {"w1": _weight(FEATURES, FEATURES, seed=6) * 0.1, "w2": _weight(FEATURES, 4, seed=7)}
    return _x_to_y(nodes, "float32_island", weights)


def training_info_model() -> onnx.ModelProto:
    """The float32 island model with a training algorithm that updates its weight ``w1``."""
    model = float32_island_model()
    info = model.training_info.add()
    info.algorithm.CopyFrom(
        oh.make_graph(
            [oh.make_node("Mul", ["w1", "decay"], ["w1_next"], name="decay_w1")],
            "train",
            [],
            [oh.make_tensor_value_info("w1_next", TensorProto.FLOAT, [FEATURES, FEATURES])],
            [numpy_helper.from_array(np.array(0.99, np.float32), "decay")],
        )
    )
    info.update_binding.add(key="w1", value="w1_next")
    return model


# ------------------------------------------------------------------------------------- shared symbolic sizes
# Exporters name one symbol for every dimension they cannot tell apart (``N`` for phonemes, notes and frames of a
# singing-synthesis model) although the tensors differ in size at run time. ONNX Runtime runs such a model; its
# memory planner reuses a freed buffer for a value declared with the same shape, so a declaration copied from one
# tensor onto another makes it fail ("Shape mismatch attempting to re-use buffer").

#: The sizes each shared-size model is run with: one symbol ``N``, different sizes.
SHARED_SIZE_FEEDS: dict[str, dict[str, list[int]]] = {
    "shared_size_concat": {"a": [10], "b": [14]},
    "shared_size_embeddings": {"a_ids": [10], "b_ids": [14]},
    "shared_size_two_outputs": {"a": [10], "b": [14]},
    "shared_size_if_branches": {"a": [10], "b": [14]},
}


def _shared_size_model(
    nodes: list[onnx.NodeProto],
    name: str,
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    weights: tuple[onnx.TensorProto, ...] = (),
) -> onnx.ModelProto:
    model = _model(oh.make_graph(nodes, name, inputs, outputs, list(weights)))
    onnx.checker.check_model(model, full_check=True)
    return model


def shared_size_concat_model() -> onnx.ModelProto:
    """a [N], b [N] -> Max(a, a), Max(b, b) -> Concat -> y [N]: fed 10 and 14 elements, y has 24."""
    nodes = [
        oh.make_node("Max", ["a", "a"], ["a_max"], name="max_a"),
        oh.make_node("Max", ["b", "b"], ["b_max"], name="max_b"),
        oh.make_node("Concat", ["a_max", "b_max"], ["y"], name="concat", axis=0),
    ]
    inputs = [oh.make_tensor_value_info(name, TensorProto.FLOAT, ["N"]) for name in ("a", "b")]
    return _shared_size_model(
        nodes, "shared_size_concat", inputs, [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])]
    )


def shared_size_embeddings_model() -> onnx.ModelProto:
    """Token ids a_ids [N], b_ids [N] -> Gather from one float32 table [32, 4] -> Max -> Concat -> y [N, 4]."""
    nodes = [
        oh.make_node("Gather", ["table", "a_ids"], ["a_emb"], name="embed_a"),
        oh.make_node("Gather", ["table", "b_ids"], ["b_emb"], name="embed_b"),
        oh.make_node("Max", ["a_emb", "a_emb"], ["a_max"], name="max_a"),
        oh.make_node("Max", ["b_emb", "b_emb"], ["b_max"], name="max_b"),
        oh.make_node("Concat", ["a_max", "b_max"], ["y"], name="concat", axis=0),
    ]
    inputs = [oh.make_tensor_value_info(name, TensorProto.INT64, ["N"]) for name in ("a_ids", "b_ids")]
    outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])]
    table = numpy_helper.from_array(_weight(32, 4, seed=8), "table")
    return _shared_size_model(nodes, "shared_size_embeddings", inputs, outputs, (table,))


def shared_size_two_outputs_model() -> onnx.ModelProto:
    """The concatenation y [N] is an output and read again: z = Max(y, y) [N] is a second output."""
    nodes = [
        oh.make_node("Max", ["a", "a"], ["a_max"], name="max_a"),
        oh.make_node("Max", ["b", "b"], ["b_max"], name="max_b"),
        oh.make_node("Concat", ["a_max", "b_max"], ["y"], name="concat", axis=0),
        oh.make_node("Max", ["y", "y"], ["z"], name="max_y"),
    ]
    inputs = [oh.make_tensor_value_info(name, TensorProto.FLOAT, ["N"]) for name in ("a", "b")]
    outputs = [oh.make_tensor_value_info(name, TensorProto.FLOAT, ["N"]) for name in ("y", "z")]
    return _shared_size_model(nodes, "shared_size_two_outputs", inputs, outputs)


def _branch(op: str, name: str) -> onnx.GraphProto:
    """A branch that reads a and b from the outer graph: op(a, a), op(b, b) concatenated, declared [N]."""
    nodes = [
        oh.make_node(op, ["a", "a"], [f"{name}_a"], name=f"{name}_a"),
        oh.make_node(op, ["b", "b"], [f"{name}_b"], name=f"{name}_b"),
        oh.make_node("Concat", [f"{name}_a", f"{name}_b"], [f"{name}_out"], name=f"{name}_concat", axis=0),
    ]
    return oh.make_graph(nodes, name, [], [oh.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, ["N"])])


def shared_size_if_branches_model() -> onnx.ModelProto:
    """An If whose branches concatenate a [N] and b [N] into an output declared [N] (a subgraph's output)."""
    nodes = [
        oh.make_node(
            "If",
            ["pick"],
            ["y"],
            name="choose",
            then_branch=_branch("Max", "larger"),
            else_branch=_branch("Min", "smaller"),
        )
    ]
    inputs = [oh.make_tensor_value_info(name, TensorProto.FLOAT, ["N"]) for name in ("a", "b")]
    inputs.append(oh.make_tensor_value_info("pick", TensorProto.BOOL, []))
    outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])]
    return _shared_size_model(nodes, "shared_size_if_branches", inputs, outputs)


#: Models whose inputs and outputs share a symbolic size that differs at run time (by name, for test ids).
SHARED_SIZE_MODELS = {
    "shared_size_concat": shared_size_concat_model,
    "shared_size_embeddings": shared_size_embeddings_model,
    "shared_size_two_outputs": shared_size_two_outputs_model,
    "shared_size_if_branches": shared_size_if_branches_model,
}

#: Every model of this corpus by name (for the suites that run them all).
UNUSUAL_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    **SPARSE_AND_MAP_MODELS,
    "bfloat16_io": bfloat16_io_model,
    "zero_size": zero_size_model,
    **{f"constant_of_shape_{opset}": partial(constant_of_shape_model, opset) for opset in (13, 17, 20)},
    "float32_island": float32_island_model,
    "training_info": training_info_model,
    **SHARED_SIZE_MODELS,
}
