"""Step 1, name: every node gets a name no other node in any scope has (keep_dtype files, reports and the
checker's tracing refer to nodes by name), and the names taken are collected for the values the rewrite adds."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.facts import graphs_of
from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.steps.run_context import RewriteRun


class NameNodesPass(ir.passes.InPlacePass):
    """Requires a fresh attempt (no names taken yet). Ensures every node has a name unique across scopes, and
    ``run.names`` is set."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        if self.run.names is not None:
            raise ir.passes.PreconditionError("naming starts an attempt: this attempt's nodes are named already")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        names = name_unnamed_nodes(model)
        self.run.names = names
        return ir.passes.PassResult(model, modified=names.renamed > 0)

    def ensures(self, model: ir.Model) -> None:
        seen: set[str] = set()
        for graph in graphs_of(model):
            for node in graph:
                if not node.name or node.name in seen:
                    raise ir.passes.PostconditionError(f"node {node.name!r} ({node.op_type}) is not uniquely named")
                seen.add(node.name)
