"""Folding a written-out LayerNorm into one LayerNormalization node (opset 17 and later).

Older exporters write LayerNorm out: ``mean = ReduceMean(x)``, ``d = x - mean``, ``var = ReduceMean(d ** 2)``,
``y = d / sqrt(var + eps)``, then ``y * gamma + beta``. In low precision that chain is a hazard (the mean of squares
can overflow float16), so the painting keeps it float32 as one island, paid for with a cast in and a cast out per
LayerNorm. ``LayerNormalization`` computes the same function in one kernel, and ONNX Runtime's float16 kernels for
it sum in float32: folded, the norm can follow its neighbours into low precision at no cost in accuracy. ONNX
Runtime folds these chains itself when it loads a float32 model; folding them first lets the decision see it.

A chain is folded only when every intermediate value is used inside the chain alone, the reductions are over the
last axis with ``keepdims``, the exponent is 2 and ``eps``, ``gamma`` and ``beta`` are constants. Nodes a
keep_dtype entry or range analysis names are never folded away. Mutates the graph (the rewrite's stage).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ampconfig.decide.facts import constant_array, graphs_of
from ampconfig.domains import is_default_domain
from ampconfig.opinfo.schema import default_opset
from ampconfig.rewrite.names import NameAllocator

#: LayerNormalization joined the default domain at opset 17.
LAYER_NORM_OPSET = 17


@dataclass(frozen=True)
class _Chain:
    x: ir.Value
    nodes: tuple[ir.Node, ...]  # in graph order; the last one writes the result
    epsilon: float
    gamma: ir.Value | None
    beta: ir.Value | None


def fold_layer_norms(model: ir.Model, names: NameAllocator, keep: Collection[str] = ()) -> list[str]:
    """Fold every written-out LayerNorm of ``model`` into a ``LayerNormalization`` node; returns the new nodes'
    names. Nothing happens below opset 17, or to a chain holding a node named in ``keep``."""
    opset = default_opset(model.opset_imports, "")
    if opset is None or opset < LAYER_NORM_OPSET:
        return []
    folded: list[str] = []
    for graph in graphs_of(model):
        for node in list(graph):
            if node.op_type != "ReduceMean" or node.graph is not graph:
                continue  # removed by an earlier fold
            chain = _match(node, opset)
            if chain is None or any(member.name in keep for member in chain.nodes):
                continue
            folded.append(_fold(graph, chain, names))
    return folded


def _fold(graph: ir.Graph, chain: _Chain, names: NameAllocator) -> str:
    last = chain.nodes[-1]
    result = last.outputs[0]
    gamma = chain.gamma or _ones_like_last_axis(graph, chain.x, names)
    inputs = [chain.x, gamma] + ([chain.beta] if chain.beta is not None else [])
    out = ir.Value(name=names.value(f"{result.name}_layer_norm"), shape=result.shape, type=result.type)
    norm = ir.Node(
        "",
        "LayerNormalization",
        inputs,
        [ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", chain.epsilon)],
        outputs=[out],
        name=names.node(f"{chain.nodes[0].name}_folded_layer_norm"),
    )
    graph.insert_before(last, norm)
    public = result.name
    ir.convenience.replace_all_uses_with(result, out, replace_graph_outputs=True)
    graph.remove(list(chain.nodes), safe=True)
    out.name = public  # the result keeps its name: graph outputs and later lookups see no change
    return norm.name or ""


def _ones_like_last_axis(graph: ir.Graph, x: ir.Value, names: NameAllocator) -> ir.Value:
    size = x.shape[-1] if x.shape is not None and len(x.shape) else None
    assert isinstance(size, int), "matched only with a static last axis"
    dtype = x.dtype.numpy() if x.dtype is not None else np.float32
    value = ir.Value(name=names.value(f"{x.name}_layer_norm_scale"), const_value=ir.tensor(np.ones(size, dtype)))
    value.shape = ir.Shape([size])
    if x.dtype is not None:
        value.dtype = x.dtype
    graph.register_initializer(value)
    return value


# ------------------------------------------------------------------------------------------------------ matching


def _single_user(value: ir.Value) -> ir.Node | None:
    """The one node using ``value`` once, or None (several uses, a graph output, or unused)."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def _scalar(value: ir.Value | None) -> float | None:
    array = constant_array(value)
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 else None


def _last_axis_mean(node: ir.Node, opset: int) -> bool:
    """A ReduceMean over the last axis only, keeping it."""
    if node.op_type != "ReduceMean" or not is_default_domain(node.domain):
        return False
    if node.attributes.get_int("keepdims", 1) != 1:
        return False
    if opset >= 18:
        axes = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    else:
        attribute = node.attributes.get("axes")
        axes = np.asarray(attribute.value) if attribute is not None else None
    rank = len(node.inputs[0].shape) if node.inputs[0] is not None and node.inputs[0].shape is not None else None
    return (
        axes is not None and axes.size == 1 and (int(axes[0]) == -1 or (rank is not None and int(axes[0]) == rank - 1))
    )


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of a two-input node that is not ``value``."""
    first, second = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    return second if first is value else first if second is value else None


def _match(mean: ir.Node, opset: int) -> _Chain | None:
    x = mean.inputs[0]
    if x is None or not _last_axis_mean(mean, opset):
        return None
    sub = _single_user(mean.outputs[0])
    if sub is None or sub.op_type != "Sub" or sub.inputs[0] is not x or sub.inputs[1] is not mean.outputs[0]:
        return None
    centred = sub.outputs[0]
    users = {use.node for use in centred.uses()}
    square = next((n for n in users if n.op_type in ("Pow", "Mul")), None)
    divide = next((n for n in users if n.op_type == "Div"), None)
    if square is None or divide is None or len(users) != 2 or centred.is_graph_output():
        return None
    if square.op_type == "Pow" and _scalar(square.inputs[1]) != 2.0:
        return None
    if square.op_type == "Mul" and not (square.inputs[0] is centred and square.inputs[1] is centred):
        return None
    variance = _single_user(square.outputs[0])
    if variance is None or not _last_axis_mean(variance, opset):
        return None
    add_eps = _single_user(variance.outputs[0])
    epsilon = (
        _scalar(_other(add_eps, variance.outputs[0])) if add_eps is not None and add_eps.op_type == "Add" else None
    )
    if add_eps is None or epsilon is None:
        return None
    sqrt = _single_user(add_eps.outputs[0])
    if sqrt is None or sqrt.op_type != "Sqrt" or _single_user(sqrt.outputs[0]) is not divide:
        return None
    if divide.inputs[0] is not centred or divide.inputs[1] is not sqrt.outputs[0]:
        return None
    nodes = [mean, sub, square, variance, add_eps, sqrt, divide]
    gamma, beta = _affine(nodes, divide.outputs[0])
    if gamma is None and not (x.shape is not None and len(x.shape) and isinstance(x.shape[-1], int)):
        return None  # no scale to reuse and none to make without the axis size
    return _Chain(x, tuple(nodes), epsilon, gamma, beta)


def _affine(nodes: list[ir.Node], normed: ir.Value) -> tuple[ir.Value | None, ir.Value | None]:
    """The ``* gamma + beta`` after the division, where constants over the last axis; appends the nodes it takes
    to ``nodes``."""
    gamma = beta = None
    user = _single_user(normed)
    if user is not None and user.op_type == "Mul" and _per_channel(_other(user, normed)):
        gamma = _other(user, normed)
        nodes.append(user)
        normed = user.outputs[0]
        user = _single_user(normed)
    if user is not None and user.op_type == "Add" and _per_channel(_other(user, normed)):
        beta = _other(user, normed)
        nodes.append(user)
    return gamma, beta


def _per_channel(value: ir.Value | None) -> bool:
    """A constant LayerNormalization can take as scale or bias: at most one axis (it broadcasts over the last)."""
    array = constant_array(value)
    return array is not None and array.ndim <= 1
