"""The CPU accuracy copy of a rewritten model: every low-precision value rounded exactly once, as float16 hardware
stores it (``run`` measures accuracy on it when it runs on the CPU)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from ampconfig.decide.facts import ONNX_TYPING, graphs_of, node_facts
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.model_io.ir_bridge import stand_in_nodes, to_ir, to_proto
from ampconfig.model_io.models import open_model, save_model_sharing_data
from ampconfig.opinfo.library import load_ops_info
from ampconfig.opinfo.typing_source import TypingSource
from ampconfig.rewrite.casts import hand_over_declaration, insert_cast, new_cast, new_value
from ampconfig.rewrite.names import NameAllocator
from ampconfig.rewrite.tensors import set_dtype
from ampconfig.rewrite.types import annotate_dtypes


def round_like_low_precision(
    model: ir.Model, emulated: Callable[[str, Dtype], bool], typing_source: TypingSource = ONNX_TYPING
) -> int:
    """Make a CPU run of ``model`` round every low-precision value the way low-precision hardware stores it.

    ONNX Runtime's CPU provider runs a float16 node that has no float16 kernel by casting around it, and then
    removes each Cast(float32->float16)->Cast(float16->float32) pair its own casts create: chains of such nodes
    compute in float32 and never round to float16, so accuracy measured on the CPU would be the fp32 model's.
    Here each such node (``emulated(op_key, dtype)`` is true) computes in float32 between explicit casts, which
    ONNX Runtime keeps: every value it produces is rounded to float16 exactly once, as stored on a GPU.
    Used for accuracy only (the casts cost time). Returns how many nodes were wrapped; mutates ``model``.
    """
    names = NameAllocator(model)
    widened: dict[ir.Value, ir.Value] = {}
    wrapped = 0
    stand_ins = stand_in_nodes(model)
    for graph in graphs_of(model):
        for node in list(graph):
            facts = node_facts(node, model, "", typing_source=typing_source, stand_ins=stand_ins)
            if facts.dtype not in LOW_DTYPES or facts.blocker is not None or not emulated(facts.key, facts.dtype):
                continue
            for index in facts.input_slots:
                value = node.inputs[index]
                if value is None:  # input_slots holds present inputs only
                    continue
                if value not in widened:
                    widened[value] = insert_cast(new_cast(value, Dtype.FLOAT32, names))
                node.replace_input_with(index, widened[value])
            for index in facts.output_slots:
                _store_rounded(graph, node, node.outputs[index], Dtype(facts.dtype), names)
            wrapped += 1
    model.graph.sort()
    return wrapped


def _store_rounded(graph: ir.Graph, node: ir.Node, value: ir.Value, dtype: Dtype, names: NameAllocator) -> None:
    """The node now produces ``value`` in float32; its consumers (and graph outputs) read a rounded copy."""
    rounded = new_value(value, dtype, names, name=value.name)
    value.name = names.value(f"{value.name}_fp32")
    hand_over_declaration(value, rounded)
    set_dtype(value, Dtype.FLOAT32)
    ir.convenience.replace_all_uses_with(value, rounded, replace_graph_outputs=True)
    graph.insert_after(node, new_cast(value, dtype, names, output=rounded))


def round_like_cpu_low_precision(ir_model: ir.Model, typing_source: TypingSource) -> int:
    """Wrap the low-precision nodes without a native CPU kernel (see :func:`round_like_low_precision`): those the CPU
    provider would run in float32 without rounding, and those it cannot run in that dtype at all (a model decided
    for another target, such as a bfloat16 MatMul decided for cuda). ``typing_source`` types the nodes: the
    engine's (:data:`ampconfig.engine.typing_chain.TYPING`, ONNX Runtime's contrib ops too), as the rewrite typed
    them."""
    annotate_dtypes(ir_model, typing_source=typing_source)
    cpu = load_ops_info("cpu")
    return round_like_low_precision(ir_model, lambda key, dtype: not cpu.is_native(key, dtype), typing_source)


def low_precision_rounding_model(model: onnx.ModelProto, typing_source: TypingSource) -> tuple[onnx.ModelProto, int]:
    """A copy of a rewritten model whose CPU run rounds every float16 value as float16 hardware stores it.

    ONNX Runtime's CPU provider drops that rounding for ops it has no native float16 kernel for (see
    :func:`round_like_low_precision`); ``run`` measures accuracy on this copy on the CPU. Returns the copy and how
    many nodes compute in float32 between explicit casts in it.
    """
    ir_model = to_ir(model)
    wrapped = round_like_cpu_low_precision(ir_model, typing_source)
    return to_proto(ir_model), wrapped


def save_low_precision_rounding_copy(source: str | Path, destination: str | Path, typing_source: TypingSource) -> int:
    """:func:`low_precision_rounding_model` for a rewritten model saved at ``source``, without reading its
    tensors: the copy is written to ``destination`` (in the same folder), its weights still those of ``source``
    (in its external data file, or in ``source`` itself for a large single file). Writes nothing when no node
    needs rounding; returns how many nodes were wrapped."""
    ir_model = open_model(source, map_weights=True).to_ir()  # tensors stay on disk (mapped only when read)
    wrapped = round_like_cpu_low_precision(ir_model, typing_source)
    if wrapped:
        save_model_sharing_data(ir_model, destination)
    return wrapped
