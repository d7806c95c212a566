"""What each reader needs from each value, and the casts that a set of verdicts implies: the one home of those rules.

- A node reads an input in its compute dtype where the input is bound to its compute type variable, in the dtype
  its verdict pins that input to where it pins one (:attr:`~ampconfig.decide.context.Verdict.input_dtypes`), else
  in the dtype the value has before the rewrite. A Cast reads whatever arrives.
- A graph output keeps its dtype in every subgraph, and in the main graph with keep_io_types.
- With keep_io_types off, a float32 main-graph input whose every reader needs one low dtype takes that dtype.
- A value is cast once per dtype some reader (or its kept output) needs and it does not have, except that constants
  are converted instead (initializers, Constants, a ConstantOfShape wanted in one dtype, where the schema holds
  the dtype) and that there are no round trips (a Cast's output wanted back in its source's dtype reads the
  source).

:class:`Needs` answers these questions over a mapping of verdicts. The decision state asks while deciding, the plan
once decided, the islands pass for an island that might go low, the cost report for its islands, and
:mod:`ampconfig.rewrite.apply` realises exactly the casts counted here (``tests/decide/test_needs.py`` compares the
counts with the Cast nodes the rewrite inserts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TypeVar, overload

import onnx_ir as ir

from ampconfig.decide.context import Verdict, verdict_dtype
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, constant_tensor, is_onnx_op
from ampconfig.dtypes import Dtype

_T = TypeVar("_T")

#: A cast the rewrite inserts: the value and the dtype it is cast to.
Cast = tuple[ir.Value, Dtype]


class _Overlay(Mapping[ir.Node, Verdict]):
    """``top`` over ``base``, read only: what ChainMap does for two maps, with a ``get`` of two dictionary lookups
    (ChainMap's walks its maps through a generator, and an island's count asks it for every reader of every
    member)."""

    __slots__ = ("base", "top")

    def __init__(self, top: Mapping[ir.Node, Verdict], base: Mapping[ir.Node, Verdict]) -> None:
        self.top, self.base = top, base

    @overload
    def get(self, key: ir.Node, /) -> Verdict | None: ...
    @overload
    def get(self, key: ir.Node, default: Verdict, /) -> Verdict: ...
    @overload
    def get(self, key: ir.Node, default: _T, /) -> Verdict | _T: ...
    def get(self, key: ir.Node, default: object = None, /) -> object:
        found = self.top.get(key)
        return found if found is not None else self.base.get(key, default)

    def __getitem__(self, key: ir.Node) -> Verdict:
        found = self.top.get(key)
        return found if found is not None else self.base[key]

    def __contains__(self, key: object) -> bool:
        return key in self.top or key in self.base

    def __iter__(self) -> Iterator[ir.Node]:
        yield from self.top
        yield from (key for key in self.base if key not in self.top)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Conversion(Enum):
    """How the rewrite gives a value a dtype it does not have."""

    CAST = "cast"  # a Cast node after the value, shared by every reader of that dtype
    SOURCE = "source"  # no round trip: the value is a Cast's output and the Cast's source has the dtype
    INITIALIZER = "initializer"  # the tensor is converted (in place when every reader agrees, else a copy)
    CONSTANT = "constant"  # a Constant's tensor is converted (in place when every reader agrees, else a copy)
    CONSTANT_OF_SHAPE = "constant_of_shape"  # its value attribute is converted in place (every reader agrees)


@dataclass(frozen=True)
class Needs:
    """The rules above over ``verdicts``. ``dtype_before`` gives a value's dtype before the rewrite (the graph's
    own types while deciding; a snapshot once a plan exists, since the rewrite changes them)."""

    facts_of: Mapping[ir.Node, NodeFacts]
    verdicts: Mapping[ir.Node, Verdict]
    dtype_before: Callable[[ir.Value], Dtype | None]
    main_graph: ir.Graph
    keep_io_types: bool
    #: graph outputs whose dtype is kept: every subgraph's, and the main graph's with keep_io_types
    kept_outputs: frozenset[ir.Value] = field(default_factory=frozenset)

    @classmethod
    def of(
        cls,
        facts_of: Mapping[ir.Node, NodeFacts],
        verdicts: Mapping[ir.Node, Verdict],
        dtype_before: Callable[[ir.Value], Dtype | None],
        graphs: Iterable[ir.Graph],
        keep_io_types: bool,
    ) -> Needs:
        """``graphs``: the main graph first, then every subgraph."""
        graphs = list(graphs)
        needs = cls(facts_of, verdicts, dtype_before, graphs[0], keep_io_types)
        kept = frozenset(value for graph in graphs if needs.keeps_outputs_of(graph) for value in graph.outputs)
        return replace(needs, kept_outputs=kept)

    def assuming(self, verdicts: Mapping[ir.Node, Verdict]) -> Needs:
        """The same rules with ``verdicts`` in place of the current verdicts of those nodes (nothing is copied)."""
        return replace(self, verdicts=_Overlay(dict(verdicts), self.verdicts))

    # -- what readers need -------------------------------------------------------------------------------------
    def required(self, node: ir.Node, index: int) -> Dtype | None:
        """The dtype ``node`` reads input ``index`` in after the rewrite; None for an absent input or a Cast (it
        reads whatever arrives)."""
        value = node.inputs[index]
        if value is None or is_onnx_op(node, "Cast"):
            return None
        verdict = self.verdicts.get(node)
        return self._required(value, index, verdict, self.facts_of.get(node) if verdict is not None else None)

    def required_inputs(self, node: ir.Node) -> list[Dtype | None]:
        """:meth:`required` of each input of ``node``, the node looked up once (the rewrite asks for every input
        of every node)."""
        inputs = node.inputs
        if is_onnx_op(node, "Cast"):
            return [None] * len(inputs)
        verdict = self.verdicts.get(node)
        facts = self.facts_of.get(node) if verdict is not None else None
        return [
            None if value is None else self._required(value, index, verdict, facts)
            for index, value in enumerate(inputs)
        ]

    def _required(self, value: ir.Value, index: int, verdict: Verdict | None, facts: NodeFacts | None) -> Dtype | None:
        if verdict is not None:
            if verdict.input_dtypes and (pinned := verdict.input_dtype(index)) is not None:
                return pinned
            if facts is not None and verdict.dtype is not None and index in facts.input_slots:
                return verdict.dtype
        return self.dtype_before(value)

    def keeps_outputs_of(self, graph: ir.Graph) -> bool:
        """The outputs of ``graph`` keep their dtypes: always in a subgraph, in the main graph with keep_io_types."""
        return graph is not self.main_graph or self.keep_io_types

    def keeps_output_dtype(self, value: ir.Value) -> bool:
        """``value`` is a graph output that must keep its dtype (keep_io_types; always in a subgraph)."""
        return value in self.kept_outputs

    def readers_need(self, value: ir.Value) -> set[Dtype]:
        """The dtypes ``value``'s readers need (Casts need none)."""
        return {dtype for use in value.uses() if (dtype := self.required(use.node, use.idx)) is not None}

    def wanted(self, value: ir.Value) -> set[Dtype]:
        """The dtypes ``value``'s readers need, plus its own where it is a graph output that keeps its dtype."""
        wanted = self.readers_need(value)
        if self.keeps_output_dtype(value) and (own := self.dtype_before(value)) is not None:
            wanted.add(own)
        return wanted

    # -- what values have --------------------------------------------------------------------------------------
    def retyped_input(self, value: ir.Value) -> Dtype | None:
        """keep_io_types off: the low dtype a float32 main-graph input takes because every reader needs it."""
        if self.keep_io_types or not value.is_graph_input() or value.graph is not self.main_graph:
            return None
        if self.dtype_before(value) is not Dtype.FLOAT32 or value.const_value is not None:
            return None
        wanted = self.readers_need(value)
        dtype = next(iter(wanted)) if len(wanted) == 1 else None
        return dtype if dtype is not None and dtype.is_low else None

    def produced(self, value: ir.Value) -> Dtype | None:
        """The dtype ``value`` has after the rewrite, before any cast of it (a constant's: as it is before the
        rewrite, which converts constants for their readers)."""
        producer = value.producer()
        if producer is not None and is_onnx_op(producer, CONSTANT_OPS):
            return self.dtype_before(value)
        return (
            verdict_dtype(value, self.facts_of, self.verdicts) or self.retyped_input(value) or self.dtype_before(value)
        )

    # -- casts -------------------------------------------------------------------------------------------------
    def conversion(
        self, value: ir.Value, dtype: Dtype, dtype_of: Callable[[ir.Value], Dtype | None] | None = None
    ) -> Conversion:
        """How the rewrite gives ``value`` the ``dtype`` a reader needs. ``dtype_of`` reads a Cast's source dtype:
        after the rewrite (the default), or as the graph has it now (the rewrite, mid-way)."""
        producer = value.producer()
        if value.const_value is not None and not value.is_graph_input():
            return Conversion.INITIALIZER
        if producer is None:
            return Conversion.CAST
        if is_onnx_op(producer, "Constant") and constant_tensor(producer) is not None:
            return Conversion.CONSTANT if self.constant_takes(value, dtype) else Conversion.CAST
        if (
            is_onnx_op(producer, "ConstantOfShape")
            and not value.is_graph_output()
            and self.wanted(value) == {dtype}
            and self.constant_takes(value, dtype)
        ):
            return Conversion.CONSTANT_OF_SHAPE
        source = producer.inputs[0] if is_onnx_op(producer, "Cast") else None
        if source is not None and (dtype_of or self.produced)(source) is dtype:
            return Conversion.SOURCE
        return Conversion.CAST

    def constant_takes(self, value: ir.Value, dtype: Dtype) -> bool:
        """Whether the constant node producing ``value`` may hold ``dtype`` itself: its schema at the model's opset
        allows that output type (ConstantOfShape has no bfloat16 before opset 20; it is cast instead)."""
        producer = value.producer()
        facts = self.facts_of.get(producer) if producer is not None else None
        return facts is None or dtype in facts.schema_allows

    def casts_of(self, value: ir.Value) -> set[Cast]:
        """The casts of ``value`` the rewrite inserts: one for its kept output dtype where the value lost it, one per
        dtype a reader needs that it does not have and no conversion gives (initializers and constants are
        converted, unless their schema cannot hold the dtype)."""
        have = self.produced(value)
        if have is None:
            return set()
        casts: set[Cast] = set()
        own = self.dtype_before(value) if self.keeps_output_dtype(value) else None
        if own is not None and own is not have:
            casts.add((value, own))  # the graph output keeps its dtype through a cast (and its name)
        for dtype in self.readers_need(value) - {have}:
            if dtype is own or self.conversion(value, dtype) is Conversion.CAST:
                casts.add((value, dtype))
        return casts

    def casts(self, values: Iterable[ir.Value]) -> set[Cast]:
        """Every cast of ``values`` the rewrite inserts."""
        return {cast for value in values for cast in self.casts_of(value)}

    def boundary_casts(self, nodes: Iterable[ir.Node], known: Mapping[ir.Value, set[Cast]] | None = None) -> set[Cast]:
        """The casts on the edges of a group of nodes: casts of a value a member writes, and casts whose dtype a
        member reads (so a cast a member and an outsider share counts here, and in the outsider's group too).
        ``known``: every value's casts, already counted under these verdicts (values missing there have none)."""
        members = set(nodes)
        # Each value's casts once per call: a weight shared by every block of a model (a LayerNorm's scale read by
        # 2,500 members of one island) has as many readers as members, and asking anew for each member was
        # quadratic (45 s for one island of the 25k-node synthetic graph). Local: the verdicts hold still here.
        found: dict[ir.Value, set[Cast]] = {}

        def casts_of(value: ir.Value) -> set[Cast]:
            if known is not None:
                return known.get(value, set())
            if value not in found:
                found[value] = self.casts_of(value)
            return found[value]

        casts: set[Cast] = set()
        for node in members:
            for output in node.outputs:
                if output.name:
                    casts |= casts_of(output)
            for index, read in enumerate(node.inputs):
                if read is None or read.producer() in members:
                    continue
                dtype = self.required(node, index)
                casts |= {cast for cast in casts_of(read) if cast[1] is dtype}
        return casts
