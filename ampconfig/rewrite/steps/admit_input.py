"""Step 0a, admit: the input checked as every output is checked, its stale or contradictory declarations repaired
first where the check needs it (:mod:`ampconfig.model_io.repair`). The repairs are found on the input's light proto
(its graphs without the large weights) and made in the ``ir.Model`` itself: nodes put in the same order, each
repaired value given the type and shape the repaired proto declares (or none, where its declaration was dropped).
No proto of the model's weights is made. Runs once, before the rewrite's attempts."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_ir as ir

from ampconfig.domains import is_default_domain
from ampconfig.model_io.ir_bridge import ir_shape, sparse_initializer_stand_ins, stand_in_type
from ampconfig.model_io.repair import SUBGRAPH_OPS, admit_input_model, graphs
from ampconfig.rewrite.steps.conditions import RewriteStep, read_before_made
from ampconfig.rewrite.steps.run_context import InputAdmission


class AdmitInputPass(RewriteStep):
    """Requires ``admission.light`` to be a light proto of the model as handed in: the same graphs, with as many
    nodes each (as :func:`~ampconfig.model_io.models.light_proto` or
    :func:`~ampconfig.model_io.models.light_proto_of_ir` make it). Ensures ``admission`` holds the inferred types,
    the repairs and the checker's remaining complaints; the model's graphs still match ``admission.light``, now
    repaired; and, where the checker accepts the input, every graph is in topological order (the admission sorts
    it). Modified when a repair changed something."""

    def __init__(self, admission: InputAdmission) -> None:
        super().__init__()
        self.admission = admission

    def requires(self, model: ir.Model) -> None:
        mismatch = misaligned(model, self.admission.light, "the light proto the admission reads")
        if mismatch is not None:
            raise self.unmet(mismatch)

    def ensures(self, model: ir.Model) -> None:
        mismatch = misaligned(model, self.admission.light, "the repaired light proto")
        if mismatch is None and not self.admission.checker_errors:
            mismatch = unsorted(model)
        if mismatch is not None:
            raise self.unkept(mismatch)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        admission = self.admission
        admitted = admit_input_model(admission.light)
        admission.types = admitted.types
        admission.repairs = admitted.repairs
        admission.checker_errors = admitted.checker_errors
        if not admitted.changed:
            return ir.passes.PassResult(model, modified=False)
        if admitted.node_orders:
            _reorder(model.graph, iter(admitted.node_orders))
        repaired = {repair.value for repair in admitted.repairs if repair.changed and repair.subject == "value"}
        if repaired:
            for light_graph, graph in zip(graphs(admitted.light.graph), _graphs(model.graph), strict=True):
                _redeclare(model, graph, light_graph, repaired)
        return ir.passes.PassResult(model, modified=True)


def misaligned(model: ir.Model, light: onnx.ModelProto, what: str) -> str | None:
    """Whether the model's graphs and ``light``'s, visited alike, do not hold as many nodes each: the repairs found
    on ``light`` are made in the model graph by graph, node by node. The stand-in of a sparse initializer is a node
    of the model that its proto does not have (:mod:`ampconfig.model_io.ir_bridge`)."""
    extra = sparse_initializer_stand_ins(model)
    counts = [sum(1 for node in graph if node not in extra) for graph in _graphs(model.graph)]
    light_counts = [len(graph.node) for graph in graphs(light.graph)]
    if counts == light_counts:
        return None
    return (
        f"{what} does not match the model: {len(light_counts)} graph(s) with {light_counts[:5]} nodes, the model "
        f"{len(counts)} with {counts[:5]}"
    )


def unsorted(model: ir.Model) -> str | None:
    """A node of the model that reads a value its graph makes later. The graphs are walked afresh: a list of them
    kept in the model's ``meta`` (:func:`~ampconfig.decide.facts.graphs_of`) would outlive the graph a restart
    puts back (:func:`ampconfig.rewrite.pipeline.restart_from_copy` copies the admitted model's ``meta``)."""
    return read_before_made(_graphs(model.graph))


def _subgraphs(node: ir.Node) -> Iterator[ir.Graph]:
    """A node's subgraphs in attribute order, where :func:`ampconfig.model_io.repair.graphs` looks for them."""
    if node.op_type not in SUBGRAPH_OPS and is_default_domain(node.domain):
        return
    for attribute in node.attributes.values():
        if attribute.is_ref():
            continue
        if attribute.type == ir.AttributeType.GRAPH:
            yield attribute.as_graph()
        elif attribute.type == ir.AttributeType.GRAPHS:
            yield from attribute.as_graphs()


def _graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """``graph`` and its subgraphs in the order :func:`ampconfig.model_io.repair.graphs` visits their protos."""
    yield graph
    for node in graph:
        for subgraph in _subgraphs(node):
            yield from _graphs(subgraph)


def _reorder(graph: ir.Graph, orders: Iterator[tuple[int, ...] | None]) -> None:
    """Put the nodes of ``graph`` and its subgraphs in the orders the light proto's sort chose (visited as the sort
    visits them). The proto's nodes are the graph's last ones: a graph with sparse initializers starts with the
    stand-in nodes for them (:mod:`ampconfig.model_io.ir_bridge`), which read nothing and stay first."""
    order = next(orders)
    if order is not None:
        nodes = list(graph)
        first = len(nodes) - len(order)
        moved = nodes[first:]
        graph.remove(moved, safe=False)  # only out of the node list: every input and use stays connected
        graph.extend([moved[index] for index in order])
    for node in graph:
        for subgraph in _subgraphs(node):
            _reorder(subgraph, orders)


def _redeclare(model: ir.Model, graph: ir.Graph, light: onnx.GraphProto, repaired: set[str]) -> None:
    """Give each repaired value this graph defines what the repaired light graph declares for it (as reading that
    proto would): a graph output its declared type and shape, an intermediate value its ``value_info`` entry's, or,
    where the entry was dropped, none (an initializer: its tensor's)."""
    outputs = {value.name: value for value in light.output if value.name in repaired}
    declared = {value.name: value for value in light.value_info if value.name in repaired}
    defined = {value.name: value for value in graph.initializers.values() if value.name in repaired}
    for node in graph:
        defined.update((value.name, value) for value in node.outputs if value.name in repaired)
    inputs = {value.name for value in graph.inputs}
    for name, value in defined.items():
        if name in inputs:
            continue  # an input's declaration is never repaired
        entry = outputs.get(name) or declared.get(name)
        if entry is not None:
            value.shape = ir.serde.deserialize_type_proto_for_shape(entry.type)
            value.type = stand_in_type(model, name, entry.type)
            continue
        tensor = value.const_value if value.is_initializer() else None
        value.type = ir.TensorType(tensor.dtype) if tensor is not None else None
        value.shape = ir_shape(tensor.shape) if tensor is not None else None
        value.doc_string = None
        value.metadata_props.clear()
