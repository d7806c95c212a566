"""customize_dtypes against the model: which nodes each entry names, checked against their facts (docs/design.md §4).

The file is read and its format checked in :mod:`ampconfig.documents.customize_dtypes_file`; here each node gets
a :class:`~ampconfig.documents.customize_dtypes_file.NodeSignature` from its facts (its present inputs and outputs,
which of them its compute type variable binds, what the schema and the target's kernels allow), the entries are
checked against those, and every customised node gets the dtype it computes in. :class:`~ampconfig.decide.passes.fixed.
FixedVerdicts` turns that into a verdict under rule ``customized``, before keep_dtype (Ascend's precedence).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import onnx_ir as ir

from ampconfig.decide.decision_state import is_flexible
from ampconfig.decide.facts import NodeFacts, iter_scopes
from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError, Severity
from ampconfig.opinfo.library import OpInfoLibrary, op_key
from ampconfig.opinfo.typing_source import TypingSource

if TYPE_CHECKING:  # the file's pydantic models: imported when a customize_dtypes file is given
    from ampconfig.documents.customize_dtypes_file import CustomizeFile, NodeSignature


def _dtype_name(value: ir.Value) -> str | None:
    """``float32``, ``int64``, ``bool``...: the element type as customize_dtypes files spell it; None if unknown."""
    if not isinstance(value.type, ir.TensorType):
        return None
    try:
        name = value.type.dtype.numpy().name
    except (TypeError, ValueError):  # a type numpy has no dtype for
        return None
    return "string" if name == "object" else name


def _present(values: Iterable[ir.Value | None]) -> list[tuple[int, ir.Value]]:
    return [(index, value) for index, value in enumerate(values) if value is not None and value.name]


def _blocker(facts: NodeFacts) -> str | None:
    if is_flexible(facts):
        return "a Cast or constant takes the dtype its consumers need; customise its consumers instead"
    if facts.blocker is not None:
        return f"it cannot be retyped ({facts.blocker.value})"
    return None


def signature(facts: NodeFacts, library: OpInfoLibrary) -> NodeSignature:
    """What checking a customize_dtypes entry needs to know of ``facts``' node."""
    from ampconfig.documents.customize_dtypes_file import NodeSignature

    node = facts.node
    inputs, outputs = _present(node.inputs), _present(node.outputs)
    return NodeSignature(
        name=node.name or "",
        op_key=facts.key,
        input_dtypes=tuple(_dtype_name(value) for _, value in inputs),
        output_dtypes=tuple(_dtype_name(value) for _, value in outputs),
        input_names=tuple(value.name or "" for _, value in inputs),
        output_names=tuple(value.name or "" for _, value in outputs),
        compute_inputs=frozenset(i for i, (index, _) in enumerate(inputs) if index in facts.input_slots),
        compute_outputs=frozenset(i for i, (index, _) in enumerate(outputs) if index in facts.output_slots),
        schema_allows=frozenset(str(dtype) for dtype in facts.schema_allows),
        kernel_dtypes=library.kernel_dtypes(facts.key),
        blocker=_blocker(facts),
    )


def match_customized(
    file: CustomizeFile, model: ir.Model, library: OpInfoLibrary, low_dtype: Dtype, typing: TypingSource
) -> tuple[dict[ir.Node, tuple[Dtype, str]], list[str]]:
    """Every node the file customises, with the dtype it computes in and the reason the report shows; and the
    warnings (an op type no node has). Any error (unknown node, wrong dtype count, a dtype the schema or the
    target's kernels do not allow) raises one AmpconfigError carrying every error, each at its line."""
    from ampconfig.documents.customize_dtypes_file import check_against_model

    facts = [f for scope in iter_scopes(model, low_dtype, typing) for f in scope.facts]
    by_name = {f.node.name: f.node for f in facts if f.node.name}
    chosen, problems = check_against_model(file, [signature(f, library) for f in facts], library.target)
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        raise AmpconfigError(
            f"{len(errors)} customize_dtypes entr{'y' if len(errors) == 1 else 'ies'} cannot apply to this model: "
            + first.message,
            file=first.file,
            line=first.line,
            hint=first.hint,
            problems=errors,
        )
    customized = {by_name[name]: (Dtype(choice.dtype), choice.reason) for name, choice in chosen.items()}
    return customized, [problem.format() for problem in problems if problem.severity is Severity.WARNING]


def customized_names(file: CustomizeFile | None, model: ir.Model) -> set[str]:
    """The names of the nodes the file's entries name (by name, or by op type): kept out of rewrites that would
    replace them before they are decided (the LayerNorm fold)."""
    if file is None:
        return set()
    names = {entry.name for entry in file.entries if entry.name is not None}
    op_types: Mapping[str, bool] = {entry.op_type: True for entry in file.entries if entry.op_type is not None}
    if op_types:
        for graph in model.graphs():
            names.update(node.name for node in graph if node.name and op_key(node.domain, node.op_type) in op_types)
    return names
