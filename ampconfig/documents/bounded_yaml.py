"""YAML documents within the limits of :mod:`ampconfig.files.bounded`: composed from parser events without
recursion, aliases counted where they are used, recursive aliases refused. Its own module so that only a command
that reads YAML imports PyYAML (about 13 ms of every command's start-up otherwise)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingStartEvent,
    ScalarEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ampconfig.documents.document_limits import MAX_DOCUMENT_VALUES, MAX_NESTING_DEPTH, too_deep, too_many
from ampconfig.errors import AmpconfigError

#: The libyaml parser when PyYAML has it (about 30 times faster), else PyYAML's pure-Python one.
_YAML_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class _Anchored:
    """A node that carries an anchor: how many values it stands for and how deep it nests, once complete."""

    node: Node
    values: int = 0
    height: int = 0  # collections nested in it, itself included (a scalar: 0)
    complete: bool = False


@dataclass
class _OpenCollection:
    node: SequenceNode | MappingNode
    anchor: str | None
    values_before: int  # the document's value count before this collection
    height: int = 1
    key: Node | None = None  # a mapping key waiting for its value


class _BoundedComposer:
    """Builds the YAML node tree from parser events, as PyYAML's composer does, but without recursion and
    within the limits: nesting depth, values (aliases counted where they are used) and no recursive aliases.

    PyYAML's own composer is recursive (RecursionError on deep nesting) and shares an aliased node wherever it is
    used, so a small file can stand for an exponentially large document; everything that later walks the data
    expands it. Counting here refuses such a document before anything walks it."""

    def __init__(self, loader: yaml.SafeLoader, source: str | None) -> None:
        self.loader = loader
        self.source = source
        self.values = 0
        self.anchors: dict[str, _Anchored] = {}
        self.stack: list[_OpenCollection] = []

    def _line(self, event: yaml.Event) -> int:
        return event.start_mark.line + 1

    def _count(self, added: int, event: yaml.Event, alias: str | None = None) -> None:
        self.values += added
        if self.values > MAX_DOCUMENT_VALUES:
            raise too_many(self.source, self._line(event), alias)

    def _check_depth(self, depth: int, event: yaml.Event) -> None:
        if depth > MAX_NESTING_DEPTH:
            raise too_deep(self.source, self._line(event))

    def _register(self, anchor: str | None, event: yaml.Event, node: Node) -> _Anchored | None:
        if anchor is None:
            return None
        if anchor in self.anchors:
            raise AmpconfigError(
                f"YAML anchor &{anchor} is defined twice", file=self.source, line=self._line(event), hint="rename one"
            )
        anchored = _Anchored(node)
        self.anchors[anchor] = anchored
        return anchored

    def _alias(self, event: AliasEvent) -> tuple[Node, int]:
        anchored = self.anchors.get(event.anchor)
        if anchored is None:
            raise AmpconfigError(
                f"YAML alias *{event.anchor} refers to no anchor &{event.anchor} before it",
                file=self.source,
                line=self._line(event),
            )
        if not anchored.complete:
            raise AmpconfigError(
                f"YAML alias *{event.anchor} is inside the value it refers to (a recursive document)",
                file=self.source,
                line=self._line(event),
                hint="a recursive value has no end; write the value out",
            )
        self._check_depth(len(self.stack) + anchored.height, event)
        self._count(anchored.values, event, alias=event.anchor)
        return anchored.node, anchored.height

    def _scalar(self, event: ScalarEvent) -> tuple[Node, int]:
        self._count(1, event)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(ScalarNode, event.value, event.implicit)
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        anchored = self._register(event.anchor, event, node)
        if anchored is not None:
            anchored.values, anchored.complete = 1, True
        return node, 0

    def _open(self, event: CollectionStartEvent) -> None:
        self._check_depth(len(self.stack) + 1, event)
        values_before = self.values
        self._count(1, event)
        kind = MappingNode if isinstance(event, MappingStartEvent) else SequenceNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(kind, None, event.implicit)
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        self._register(event.anchor, event, node)
        self.stack.append(_OpenCollection(node, event.anchor, values_before))

    def _close(self, event: CollectionEndEvent) -> tuple[Node, int]:
        opened = self.stack.pop()
        opened.node.end_mark = event.end_mark
        if opened.anchor is not None:
            anchored = self.anchors[opened.anchor]
            anchored.values, anchored.height = self.values - opened.values_before, opened.height
            anchored.complete = True
        return opened.node, opened.height

    def _attach(self, node: Node, height: int) -> None:
        parent = self.stack[-1]
        parent.height = max(parent.height, height + 1)
        if isinstance(parent.node, SequenceNode):
            parent.node.value.append(node)
        elif parent.key is None:
            parent.key = node
        else:
            parent.node.value.append((parent.key, node))
            parent.key = None

    def compose_node(self) -> Node:
        """The node of one document (the parser is at its first node event)."""
        while True:
            event = self.loader.get_event()
            if isinstance(event, AliasEvent):
                node, height = self._alias(event)
            elif isinstance(event, ScalarEvent):
                node, height = self._scalar(event)
            elif isinstance(event, CollectionStartEvent):
                self._open(event)
                continue
            else:  # a collection's end: the parser only yields events that close an open collection
                node, height = self._close(event)
            if not self.stack:
                return node
            self._attach(node, height)


def compose_yaml(text: str, source: str | None) -> tuple[Node | None, yaml.SafeLoader]:
    """The node tree of a single-document YAML text within the limits (None when the stream is empty), and the
    loader, whose constructor turns the nodes into data. Syntax errors raise ``yaml.YAMLError`` as PyYAML does.

    libyaml (PyYAML's C parser, when present) scans ahead and applies limits of its own whose wording changes
    between releases (6.0.4 stops flow nesting at 1,000 itself). When it refuses a text, the pure-Python parser
    reads it again, so the diagnosis (our limits, our message, the line) is the same with or without libyaml."""
    try:
        return _compose_with(_YAML_LOADER, text, source)
    except yaml.YAMLError:
        if _YAML_LOADER is yaml.SafeLoader:
            raise
        return _compose_with(yaml.SafeLoader, text, source)


def _compose_with(loader_type: type, text: str, source: str | None) -> tuple[Node | None, yaml.SafeLoader]:
    loader = loader_type(text)
    try:
        loader.get_event()  # stream start
        if loader.check_event(StreamEndEvent):
            return None, loader
        loader.get_event()  # document start
        node = _BoundedComposer(loader, source).compose_node()
        loader.get_event()  # document end
        if loader.check_event(DocumentStartEvent):
            extra = loader.get_event()
            raise AmpconfigError(
                "more than one YAML document in the file (a second `---`)",
                file=source,
                line=extra.start_mark.line + 1,
                hint="keep one document",
            )
        return node, loader
    except BaseException:
        loader.dispose()
        raise
