"""Cast nodes and their values (ampconfig/rewrite/casts.py): a new value declares no shape, and a place with its
declaration (a graph output, a name) passes from one value to another whole."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.dtypes import Dtype
from ampconfig.rewrite.casts import hand_over_declaration, insert_cast, new_cast, new_value
from ampconfig.rewrite.names import NameAllocator


def _graph_with_input(shape: ir.Shape) -> tuple[ir.Model, ir.Value]:
    x = ir.Value(name="x", shape=shape, type=ir.TensorType(ir.DataType.FLOAT))
    relu = ir.Node("", "Relu", [x], outputs=[ir.Value(name="y", shape=shape, type=ir.TensorType(ir.DataType.FLOAT))])
    graph = ir.Graph([x], relu.outputs, nodes=[relu], name="g", opset_imports={"": 17})
    return ir.Model(graph, ir_version=10), x


def test_a_new_value_takes_its_dtype_and_name_but_not_the_shape_of_the_value_it_is_made_like() -> None:
    model, x = _graph_with_input(ir.Shape(["N"]))
    value = new_value(x, Dtype.FLOAT16, NameAllocator(model))
    assert value.shape is None
    assert value.dtype == ir.DataType.FLOAT16 and value.name == "x_fp16"


def test_a_cast_of_a_graph_input_declares_no_shape() -> None:
    # ONNX Runtime infers the Cast's output shape itself; a copy of x's [N] would be a claim about another tensor.
    model, x = _graph_with_input(ir.Shape(["N", 4]))
    out = insert_cast(new_cast(x, Dtype.FLOAT16, NameAllocator(model)))
    assert out.shape is None and x.shape == ir.Shape(["N", 4])
    assert out.producer() is next(iter(model.graph))  # first in the graph, before x's reader


def test_handing_over_a_declaration_leaves_the_previous_value_without_one() -> None:
    model, _ = _graph_with_input(ir.Shape(["N"]))
    previous = model.graph.outputs[0]
    successor = new_value(previous, Dtype.FLOAT32, NameAllocator(model), name="y_out")
    hand_over_declaration(previous, successor)
    assert successor.shape == ir.Shape(["N"])
    assert previous.shape is None
