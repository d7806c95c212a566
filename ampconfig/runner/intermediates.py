"""Run a model once with every intermediate float tensor exposed as an output (compare, range analysis, tune).

The exposed copy comes from :func:`ampconfig.rewrite.expose.expose_values`; ONNX Runtime may fuse fewer nodes in it
than in the plain model, which is the price of seeing each node's output. Every call is one model run: callers
that count runs (``tune``) count calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ampconfig.rewrite.expose import EXPOSED_FLOAT32_SUFFIX, expose_values, float_node_outputs
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.sessions import create_session, run_once


@dataclass
class IntermediateRun:
    """One run: the model's own outputs, every exposed value by its name in the model, the providers used."""

    outputs: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    output_names: list[str]
    providers: list[str]


def run_with_intermediates(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    device: str = "cpu",
    names: Sequence[str] | None = None,
) -> IntermediateRun:
    """Run ``model`` once on ``feeds`` (converted to its input dtypes) and return outputs and intermediates.

    ``names`` defaults to every float node output of the main graph. ``values`` also holds the graph inputs as
    fed, so a node reading a graph input finds it there.
    """
    output_names = [value.name for value in model.graph.output]
    exposed = expose_values(model, list(names) if names is not None else float_node_outputs(model))
    session = create_session(exposed, device)
    adapted = adapt_feeds(feeds, model)
    results = run_once(session, adapted)
    values: dict[str, np.ndarray] = dict(adapted)
    own = {output for node in model.graph.node for output in node.output}
    for name, array in results.items():
        if name not in own and name.endswith(EXPOSED_FLOAT32_SUFFIX):
            name = name.removesuffix(EXPOSED_FLOAT32_SUFFIX)  # a bfloat16 value, exposed through a float32 Cast
        values[name] = array
    outputs = {name: results[name] for name in output_names if name in results}
    return IntermediateRun(outputs, values, output_names, list(session.providers))
