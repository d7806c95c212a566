"""An Ascend ops-info file (``aic-<soc>-ops-info.json``, edited by a team) read into a target's op info.

Ascend keeps its lists in the ops-info files: per op type, ``"precision_reduce": {"flag": "true"}`` is the white
list, ``"false"`` the black list, no flag the gray list (the ATC ``--modify_mixlist`` documentation,
https://www.hiascend.com/document/detail/en/canncommercial/800/devaids/atc/atlasatcparam_16_0071.html). A team that
edited its file brings those colours as they are: :func:`ascend_colours` reads the file (every other key of an
entry, the kernel's inputs, formats and attributes, is Ascend's and ignored), maps each op name to its ONNX op
(docs/op-names.md; Ascend's names by default), and :func:`with_ascend_colours` sets those colours on a target's
op info, keeping its kernel facts. Names without an ONNX op are reported, not guessed.

When several Ascend names map to one ONNX op with different colours (MatMul white, BatchMatMulV2 gray), the one
that keeps more float32 wins (black over gray over white), with a warning naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ampconfig.documents.parsing import Document, describe_value
from ampconfig.errors import Problem, Severity
from ampconfig.opinfo.library import Colour
from ampconfig.opinfo.op_names import AmbiguousOpName, Vocabulary, read_op_name
from ampconfig.opinfo.ops_info_file import OpInfoEntry, OpsInfoFile, PrecisionReduce

#: Which colour wins when several Ascend names of one ONNX op disagree: the one keeping more float32.
_SAFER = {Colour.BLACK: 0, Colour.GRAY: 1, Colour.WHITE: 2, Colour.CLEAR: 3}


@dataclass
class AscendImport:
    """What reading an Ascend ops-info file found."""

    colours: dict[str, Colour] = field(default_factory=dict)  # ONNX op key -> colour
    names: dict[str, list[str]] = field(default_factory=dict)  # ONNX op key -> the Ascend names that set it
    unmapped: list[str] = field(default_factory=list)  # Ascend names without an ONNX op
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mapped": {
                key: {"colour": self.colours[key].value, "ascend_names": self.names[key]} for key in self.colours
            },
            "unmapped": self.unmapped,
            "problems": [problem.to_dict() for problem in self.problems],
        }


def ascend_colours(document: Document, op_names: str | None = Vocabulary.ASCEND.value) -> AscendImport:
    """The colours an Ascend ops-info document gives ONNX ops; every finding located at its line."""
    found = AscendImport()
    origin = document.source
    data = document.data
    found.problems.extend(document.problems)
    if not isinstance(data, Mapping):
        found.problems.append(
            origin.problem(f"an Ascend ops-info file is a JSON object of op types, got {describe_value(data)}")
        )
        return found
    for name, entry in data.items():
        colour = _colour_of(str(name), entry, found, document)
        if colour is None:
            continue
        try:
            read = read_op_name(str(name), op_names)
        except AmbiguousOpName as exc:
            found.problems.append(origin.problem(str(exc), (name,), hint=exc.hint))
            continue
        key = read.onnx
        if key is None or (read.foreign is None and not _known_onnx(key)):
            found.unmapped.append(str(name))
            continue
        _set(found, key, str(name), colour)
    for key, names in found.names.items():
        if len(names) > 1:
            found.problems.append(
                origin.problem(
                    f"Ascend names {', '.join(repr(n) for n in names)} all mean ONNX {key!r}: it takes the colour "
                    f"that keeps more float32 ({found.colours[key].value})",
                    (names[0],),
                    severity=Severity.WARNING,
                )
            )
    if found.unmapped:
        found.problems.append(
            origin.problem(
                f"{len(found.unmapped)} op type(s) have no ONNX op and were left out: " + ", ".join(found.unmapped),
                severity=Severity.WARNING,
                hint="docs/op-names.md lists the names ampconfig maps",
            )
        )
    return found


def _known_onnx(key: str) -> bool:
    import onnx.defs

    domain, _, op = key.rpartition("::")
    return onnx.defs.has(op, domain)


def _colour_of(name: str, entry: Any, found: AscendImport, document: Document) -> Colour | None:
    origin = document.source
    if not isinstance(entry, Mapping):
        found.problems.append(
            origin.problem(
                f"op {name!r}: expected an object of its ops-info fields, got {describe_value(entry)}", (name,)
            )
        )
        return None
    reduce = entry.get("precision_reduce")
    if reduce is None:
        return Colour.GRAY
    flag = reduce.get("flag") if isinstance(reduce, Mapping) else None
    if flag not in ("true", "false"):
        found.problems.append(
            origin.problem(
                f'op {name!r}: precision_reduce.flag must be "true" or "false", got {describe_value(flag)}',
                (name, "precision_reduce"),
                hint='"true": white list (low precision), "false": black list (float32); leave precision_reduce out '
                "for the gray list",
            )
        )
        return None
    return Colour.WHITE if flag == "true" else Colour.BLACK


def _set(found: AscendImport, key: str, name: str, colour: Colour) -> None:
    found.names.setdefault(key, []).append(name)
    current = found.colours.get(key)
    if current is None or _SAFER[colour] < _SAFER[current]:
        found.colours[key] = colour


def with_ascend_colours(base: OpsInfoFile, found: AscendImport, source: str) -> OpsInfoFile:
    """``base`` with the imported colours set; its kernel facts stay. An ONNX op ``base`` lacks is added with its
    colour and no kernel facts (dtype_source ``not-probed``)."""
    ops = dict(base.ops)
    for key, colour in found.colours.items():
        entry = ops.get(key, OpInfoEntry(note="added from an Ascend ops-info file; kernels not probed"))
        reduce = None if colour is Colour.GRAY else PrecisionReduce(flag="true" if colour is Colour.WHITE else "false")
        names = ", ".join(found.names[key])
        ops[key] = entry.model_copy(
            update={
                "precision_reduce": reduce,
                "clear": False,
                "reference": f"Ascend ops-info {source} ({names})",
                "colour_note": None,
            }
        )
    return base.model_copy(
        update={
            "ops": dict(sorted(ops.items())),
            "generated_by": f"{base.generated_by}; colours of {len(found.colours)} ops from Ascend ops-info {source}",
        }
    )
