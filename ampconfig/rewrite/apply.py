"""The only module that mutates graphs: it applies a :class:`~ampconfig.decide.plan.Plan` to an onnx-ir model.

Invariants (docs/design.md §6): one Cast per (tensor, dtype) shared by all consumers, placed in the graph that
owns the tensor (so a Loop body reuses a cast made once outside it); a cast back to a Cast's own source is
replaced by the source (no round trips); existing Casts retargeted; initializers and Constant values converted
once (in place when every consumer agrees, else one copy per dtype), with out-of-range values clamped and
counted; graph outputs keep their names and dtypes; value types updated; nodes stay in topological order.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ampconfig.decide.facts import constant_tensor, graphs_of, is_onnx_op
from ampconfig.decide.needs import Conversion
from ampconfig.decide.plan import Plan
from ampconfig.dtypes import MOVABLE_DTYPES, Dtype
from ampconfig.model_io.ir_bridge import ir_shape
from ampconfig.rewrite.casts import hand_over_declaration, insert_cast, new_cast, owner_graph
from ampconfig.rewrite.names import NameAllocator
from ampconfig.rewrite.results import RewriteStats
from ampconfig.rewrite.tensors import Float16Encoder, TensorConverter, numpy_float16, set_dtype


class Rewriter:
    def __init__(
        self,
        model: ir.Model,
        plan: Plan,
        names: NameAllocator | None = None,
        encode_float16: Float16Encoder = numpy_float16,
        cast_before: dict[ir.TensorProtocol, np.ndarray] | None = None,
    ) -> None:
        self.model = model
        self.plan = plan
        self.needs = plan.needs
        self.names = names if names is not None else NameAllocator(model)
        self.stats = RewriteStats()
        self.tensors = TensorConverter(self.stats, encode_float16, plan.constant_bounds, cast_before or {})
        self._converted: dict[tuple[ir.Value, Dtype], ir.Value] = {}

    # -- producers ---------------------------------------------------------------------------------------------
    def retype_nodes(self) -> None:
        for node, dtype in self.plan.new_dtypes().items():
            facts = self.plan.facts_of[node]
            for index in facts.output_slots:
                set_dtype(node.outputs[index], dtype)
            if node.op_type == "Cast":
                node.attributes["to"] = ir.AttrInt64("to", dtype.data_type)
                self.stats.casts_retargeted += 1

    def retype_io(self) -> None:
        """keep_io_types=False: float32 graph inputs whose every consumer computes low become low themselves."""
        for value in self.model.graph.inputs:
            dtype = self.needs.retyped_input(value)
            if dtype is not None:
                set_dtype(value, dtype)

    # -- conversions -------------------------------------------------------------------------------------------
    def converted(self, value: ir.Value, dtype: Dtype) -> ir.Value:
        key = (value, dtype)
        if key not in self._converted:
            self._converted[key] = self._make_converted(value, dtype)
        return self._converted[key]

    def _make_converted(self, value: ir.Value, dtype: Dtype) -> ir.Value:
        # The source of a Cast is read as the graph has it now: retyped, and converted where that happened first.
        conversion = self.needs.conversion(value, dtype, dtype_of=Dtype.of_value)
        producer = value.producer()
        if conversion is Conversion.INITIALIZER:
            return self._initializer_copy(value, dtype)
        if conversion is Conversion.CAST or producer is None:
            return self._cast(value, dtype)
        if conversion is Conversion.CONSTANT:
            return self._constant_copy(producer, dtype)
        if conversion is Conversion.CONSTANT_OF_SHAPE:
            return self._convert_constant_of_shape(producer, dtype)
        source = producer.inputs[0]  # Conversion.SOURCE: Cast(x -> T) wanted back in x's dtype reads x
        assert source is not None
        return source

    def _cast(self, value: ir.Value, dtype: Dtype, output_name: str | None = None) -> ir.Value:
        self.stats.casts_inserted += 1
        return insert_cast(new_cast(value, dtype, self.names, output_name=output_name))

    def _initializer_copy(self, value: ir.Value, dtype: Dtype) -> ir.Value:
        graph = owner_graph(value)
        wanted = self.needs.wanted(value)
        tensor = value.const_value
        assert tensor is not None, "Conversion.INITIALIZER is a value with a tensor"
        if wanted == {dtype} and not value.is_graph_output():
            # Every consumer wants the same dtype: convert in place, no second copy kept.
            value.const_value = self.tensors.convert(tensor, dtype, value.name or "")
            set_dtype(value, dtype)
            self.stats.initializers_converted += 1
            return value
        name = self.names.value(f"{value.name}_{dtype.short}")
        converted = self.tensors.convert(tensor, dtype, name)
        # Its own tensor's shape, as onnx-ir gives an initializer it reads: the source's declaration is not copied.
        copy = ir.Value(name=name, shape=ir_shape(converted.shape), const_value=converted)
        set_dtype(copy, dtype)
        graph.register_initializer(copy)
        self.stats.initializers_converted += 1
        return copy

    def _constant_copy(self, constant: ir.Node, dtype: Dtype) -> ir.Value:
        value = constant.outputs[0]
        tensor = constant_tensor(constant)
        assert tensor is not None
        if self.needs.wanted(value) == {dtype} and not value.is_graph_output():
            for name in ("value_float", "value_floats"):  # the converted tensor replaces either form
                constant.attributes.pop(name, None)
            constant.attributes["value"] = ir.AttrTensor("value", self.tensors.convert(tensor, dtype, value.name or ""))
            set_dtype(value, dtype)
            self.stats.constants_converted += 1
            return value
        out = ir.Value(name=self.names.value(f"{value.name}_{dtype.short}"))  # shape: ONNX Runtime infers it
        set_dtype(out, dtype)
        copy = ir.Node(
            "",
            "Constant",
            [],
            [ir.AttrTensor("value", self.tensors.convert(tensor, dtype, value.name or ""))],
            outputs=[out],
            name=self.names.node(f"{constant.name}_{dtype.short}"),
        )
        owner_graph(value).insert_after(constant, copy)
        self.stats.constants_converted += 1
        return out

    def _convert_constant_of_shape(self, node: ir.Node, dtype: Dtype) -> ir.Value:
        attr = node.attributes.get("value")
        # ConstantOfShape's default value is a float32 zero.
        tensor = attr.value if attr is not None else ir.tensor(np.zeros(1, dtype=np.float32))
        converted = self.tensors.convert(tensor, dtype, node.outputs[0].name or "")
        node.attributes["value"] = ir.AttrTensor("value", converted)
        set_dtype(node.outputs[0], dtype)
        self.stats.constants_converted += 1
        return node.outputs[0]

    # -- no-op casts -------------------------------------------------------------------------------------------
    def drop_casts_made_no_ops(self) -> None:
        """Existing float Casts this rewrite made no-ops (retargeted to their input's dtype, or fed by a node now
        computing in their dtype: the casts of an earlier rewrite) are taken out, their consumers reading the
        input. So a rewritten model rewritten again keeps no float16 -> float16 Cast, and force_fp32 no
        float32 -> float32 one. A main-graph output keeps its name: the input's producer takes it over."""
        for node in [node for node in self.plan.facts_of if is_onnx_op(node, "Cast")]:
            source, out = node.inputs[0], node.outputs[0]
            if source is None or Dtype.of_value(source) not in MOVABLE_DTYPES:
                continue
            if Dtype.of_value(source) is not Dtype.of_value(out):
                continue
            if self.plan.original_dtype.get(source) is self.plan.original_dtype.get(out):
                continue  # a no-op in the input already: the model's own, kept
            if self._bypass(node, source, out):
                self.stats.casts_removed += 1

    def _bypass(self, cast: ir.Node, source: ir.Value, out: ir.Value) -> bool:
        graph = cast.graph
        if graph is None:
            return False
        if out.is_graph_output():
            producer = source.producer()
            takes_name = (
                graph is self.model.graph
                and producer is not None
                and producer.graph is graph
                and not source.is_graph_output()
            )
            if not takes_name:
                return False  # a subgraph's output, or an input passed straight through: the Cast stays
            name = out.name
            hand_over_declaration(out, source)  # the output's declaration, not the source's own
            graph.outputs[graph.outputs.index(out)] = source
            out.replace_all_uses_with(source)
            graph.remove(cast, safe=True)
            source.name = name
            return True
        out.replace_all_uses_with(source)
        graph.remove(cast, safe=True)
        return True

    # -- wiring ------------------------------------------------------------------------------------------------
    def fix_graph_outputs(self) -> None:
        """Graph outputs keep their dtype (keep_io_types; always for subgraphs) and, in the main graph, name."""
        for graph in graphs_of(self.model):
            is_main = graph is self.model.graph
            if not self.needs.keeps_outputs_of(graph):
                continue
            for index, value in enumerate(list(graph.outputs)):
                wanted = self.plan.original_dtype.get(value)
                have = Dtype.of_value(value)
                if wanted is None or have is None or have == wanted:
                    continue
                name = value.name
                produced_here = (producer := value.producer()) is not None and producer.graph is graph
                if is_main and produced_here:
                    # Keep the public name: the producer's tensor is renamed, the cast takes the old name.
                    value.name = self.names.value(f"{name}_{have.short}")
                    out = self._cast(value, wanted, output_name=name)
                else:
                    out = self._cast(value, wanted)
                if produced_here:
                    hand_over_declaration(value, out)
                else:
                    out.shape = value.shape  # an input or outer value: declared where it is defined, kept there
                self._converted[(value, wanted)] = out
                graph.outputs[index] = out

    def fix_inputs(self) -> None:
        for graph in graphs_of(self.model):
            for node in list(graph):
                inputs = node.inputs
                # What each input needs depends on the plan and the dtypes before the rewrite, not on the
                # conversions made here: asked once per node.
                for index, (value, wanted) in enumerate(zip(inputs, self.needs.required_inputs(node), strict=True)):
                    if value is None or wanted is None:
                        continue
                    have = Dtype.of_value(value)
                    if have is None or wanted == have:
                        continue
                    node.replace_input_with(index, self.converted(value, wanted))


def apply_plan(
    model: ir.Model,
    plan: Plan,
    names: NameAllocator | None = None,
    encode_float16: Float16Encoder = numpy_float16,
    cast_before: dict[ir.TensorProtocol, np.ndarray] | None = None,
) -> RewriteStats:
    """Mutate ``model`` to realise ``plan``; returns what was done. ``names``: the model's taken names, as
    :func:`~ampconfig.rewrite.names.name_unnamed_nodes` returned them (else collected here); ``encode_float16``
    converts large float32 weights (see :mod:`ampconfig.rewrite.tensors`); ``cast_before``: the float16 arrays of
    weights read before the decision (:class:`~ampconfig.rewrite.tensors.WeightReads`), taken out as converted."""
    rewriter = Rewriter(model, plan, names, encode_float16, cast_before)
    rewriter.retype_nodes()
    rewriter.retype_io()
    rewriter.fix_graph_outputs()
    rewriter.fix_inputs()
    rewriter.tensors.finish()  # the small weights converted above, in one cast
    rewriter.drop_casts_made_no_ops()
    # No sort: the input passed the full checker, so its nodes are in topological order, and every node added
    # here goes right after its input's producer (or first in the graph): the order stays topological, as the
    # output check confirms. Sorting cost ~8% of the rewrite on node-heavy graphs.
    return rewriter.stats
