"""Step 1, name: every node gets a name no other node in any scope has (keep_dtype files, reports and the
checker's tracing refer to nodes by name), and the names taken are collected for the values the rewrite adds."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.steps.conditions import RewriteStep, misnamed_or_untaken
from ampconfig.rewrite.steps.run_context import RewriteRun


class NameNodesPass(RewriteStep):
    """Requires nothing: it starts an attempt, on any model. Ensures every node has a name no other node in any
    scope has, and ``run.names`` holds every node's name (the names new nodes and values are allocated from).
    Modified when a node was named or renamed."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        names = name_unnamed_nodes(model)
        self.run.names = names
        return ir.passes.PassResult(model, modified=names.renamed > 0)

    def ensures(self, model: ir.Model) -> None:
        problem = misnamed_or_untaken(model, self.run.names)
        if problem is not None:
            raise self.unkept(problem)
