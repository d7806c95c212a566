"""Writing op types in TensorFlow's or Ascend's names, so an answer found here can be handed to ATC (docs/op-names.md,
"Writing Ascend names"). ``tune --op-names ascend`` uses it; so can any command that writes a mixlist or keep_dtype
file (a ``lock`` command too).

Each ONNX op is written as every name the vocabulary has for it (:func:`~ampconfig.opinfo.op_names.names_in`),
which :func:`~ampconfig.opinfo.op_names.read_op_name` reads back as that ONNX op: the round trip keeps the
decisions. An ONNX op without a name there is written as its ONNX name; where that name means another op in the
vocabulary (ONNX's elementwise ``Mean`` is TensorFlow's reduction), a warning says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ampconfig.documents.keep_dtype_file import OP_TYPE_PREFIX
from ampconfig.opinfo.op_names import AmbiguousOpName, Vocabulary, names_in, read_op_name

_LIST_KEYS = ("black-list", "white-list", "gray-list")


def written_names(onnx_key: str, vocabulary: Vocabulary | str | None, warnings: list[str] | None = None) -> list[str]:
    """The names ``onnx_key`` is written as in ``vocabulary`` (None or ``onnx``: itself)."""
    if vocabulary is None or Vocabulary(vocabulary) is Vocabulary.ONNX:
        return [onnx_key]
    names = list(names_in(vocabulary, onnx_key))
    if names:
        return names
    try:
        read_back = read_op_name(onnx_key, vocabulary).onnx
    except AmbiguousOpName:  # pragma: no cover - a vocabulary is given, so nothing is ambiguous
        read_back = None
    if read_back != onnx_key and warnings is not None:
        warnings.append(
            f"ONNX op {onnx_key!r} has no {Vocabulary(vocabulary).value} name; written as {onnx_key!r}, which "
            f"{Vocabulary(vocabulary).value} reads as {read_back!r}"
        )
    return [onnx_key]


def _translated(ops: Iterable[str], vocabulary: Vocabulary | str | None, warnings: list[str]) -> list[str]:
    return list(dict.fromkeys(name for op in ops for name in written_names(op, vocabulary, warnings)))


def mixlist_in(data: Mapping[str, Any], vocabulary: Vocabulary | str | None) -> tuple[dict[str, Any], list[str]]:
    """Mixlist JSON data whose entries are ONNX op keys, with every entry written in ``vocabulary``; and warnings
    for ops that cannot be written there faithfully."""
    warnings: list[str] = []
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in _LIST_KEYS and isinstance(value, Mapping):
            out[key] = {action: _translated(ops, vocabulary, warnings) for action, ops in value.items()}
        else:
            out[key] = value
    return out, warnings


def keep_dtype_lines_in(lines: Sequence[str], vocabulary: Vocabulary | str | None) -> tuple[list[str], list[str]]:
    """keep_dtype lines whose ``OpType::`` entries name ONNX ops, with those written in ``vocabulary`` (node names
    stay as they are); and warnings as :func:`mixlist_in`."""
    warnings: list[str] = []
    out: list[str] = []
    for line in lines:
        if line.startswith(OP_TYPE_PREFIX):
            op = line[len(OP_TYPE_PREFIX) :]
            out.extend(OP_TYPE_PREFIX + name for name in written_names(op, vocabulary, warnings))
        else:
            out.append(line)
    return list(dict.fromkeys(out)), warnings
