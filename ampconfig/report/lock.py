"""Precision locks and their comparisons as text: plain text, Markdown (a pull-request comment or
``$GITHUB_STEP_SUMMARY``), GitHub annotations, JSON and HTML. Data in, strings out.

A :class:`Comparison` is what ``lock --check`` and ``diff`` both show: a :class:`~ampconfig.lock.drift.LockDiff`
with the names of its two sides, and (for a check) the lock file whose lines the annotations point at.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from html import escape as html_escape
from typing import Any

from ampconfig.documents.lock_file import LockDocument, PrecisionLock
from ampconfig.errors import Problem, Severity, printable
from ampconfig.lock.causes import Cause
from ampconfig.lock.check import LockCheck
from ampconfig.lock.drift import FieldChange, LockDiff, NodeChange
from ampconfig.report.annotations import github_annotation

#: Rows a Markdown or HTML table shows before "... and N more" (a step summary has a size limit).
MAX_ROWS = 100
#: Node annotations printed (GitHub shows a few per step; the causes come first and matter most).
MAX_NODE_ANNOTATIONS = 50
#: Recorded values listed in text, Markdown, HTML and annotations before "... and N more" (--json lists them all).
MAX_FIELD_LINES = 30
#: How long a recorded value is shown (a digest is shown by its first 12 digits, as git shows a commit).
_SHOWN_VALUE = 60
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
#: How a comparison titles itself: a lock checked, two locks, or two sides of settings on a model (no lock).
LOCK_TITLE = "ampconfig precision lock"
LOCKS_TITLE = "ampconfig precision locks"
DIFF_TITLE = "ampconfig diff"
_KIND_LABELS = {"dtype": "changed", "rule": "rule", "record": "record", "added": "added", "removed": "removed"}
_FIELD_NAMES = {
    "low_precision_nodes": "low-precision nodes",
    "casts": "casts",
    "estimated_us": "estimated time (us)",
    "estimated_float32_us": "estimated float32 time (us)",
}


def escape(text: str) -> str:
    """Text for the HTML report: control and bidi characters escaped (:func:`~ampconfig.errors.printable`), then
    its markup."""
    return html_escape(printable(text))


def shown_path(path: str | os.PathLike[str] | None) -> str | None:
    """A path as a report shows it: relative to the working directory when it lies under it (what GitHub
    annotations need in a checkout), else as given."""
    if path is None:
        return None
    text = os.fspath(path)
    absolute = os.path.abspath(text)
    here = os.getcwd()
    if absolute == here or absolute.startswith(here.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, here).replace(os.sep, "/")
    return text


@dataclass(frozen=True)
class Comparison:
    diff: LockDiff
    subject: str  # what was compared, for headings: "models/precision.lock.json" or "model.onnx"
    old_label: str = "lock"
    new_label: str = "now"
    lock_file: str | None = None  # the checked lock (annotations point at its lines)
    lock_document: LockDocument | None = None
    accept: str | None = None  # the command that accepts the new decisions
    notes: list[str] = field(default_factory=list)
    runs: dict[str, Any] | None = None  # diff --run: {"outputs": [{"name", old_label: {...}, new_label: {...}}]}
    failed: bool = False  # the check failed: annotations are errors, the accepting command is shown
    title: str = LOCK_TITLE  # the heading's first words (LOCKS_TITLE, DIFF_TITLE for diff)


# ------------------------------------------------------------------------------------------------- wording
def _arrow(old: Any, new: Any) -> str:
    return f"{old} -> {new}" if old != new else f"{new}"


def _signed(old: float, new: float) -> str:
    delta = new - old
    if isinstance(old, int) and isinstance(new, int):
        return f"{delta:+d}"
    return f"{delta:+.1f}"


def _node_label(change: NodeChange) -> str:
    node = change.node
    scope = f"{node.scope}/" if node.scope else ""
    return f"{scope}{node.name}"


def _node_path(comparison: Comparison, change: NodeChange) -> str | None:
    """Where a checked lock records the node (``$.nodes[3]``); None for a node the lock lacks, or outside a check."""
    if comparison.lock_file is None or change.old_index is None:
        return None
    return f"$.nodes[{change.old_index}]"


def _in_lock(comparison: Comparison, change: NodeChange) -> str:
    path = _node_path(comparison, change)
    return f" at {path}" if path else ""


def _dtype_text(change: NodeChange) -> str:
    if change.old is None:
        return f"added: {change.new.dtype if change.new else None}"
    if change.new is None:
        return f"removed: {change.old.dtype}"
    return _arrow(change.old.dtype, change.new.dtype)


def _rule_text(change: NodeChange) -> str:
    if change.old is None or change.new is None:
        side = change.new or change.old
        assert side is not None  # a change has a side
        return side.rule
    return _arrow(change.old.rule, change.new.rule)


def _record_text(change: NodeChange) -> str:
    """What changed of a node whose dtype and rule did not: its op, colour, original dtype or cause (``colour
    "gray" -> "black"``). A changed decision's other fields follow from it, and are left to --json."""
    if change.kind != "record":
        return ""
    return "; ".join(
        f"{item.path[-1]} {shown_value(item.old)} -> {shown_value(item.new)}"
        for item in change.fields
        if item.path[-1] not in ("dtype", "rule")
    )


def shown_value(value: Any) -> str:
    """A recorded value as a report shows it: JSON, a digest by its first 12 digits, long values cut."""
    if isinstance(value, str) and _DIGEST.match(value):
        return value[:12]
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 3] + "..."


def field_text(item: FieldChange) -> str:
    """``$.settings.modify_mixlist.sha256: fced6887d03a -> da89f6a1a13b``."""
    return f"{item.json_path}: {shown_value(item.old)} -> {shown_value(item.new)}"


def cause_text(cause: Cause, with_via: bool = True) -> str:
    where = shown_path(cause.file)
    text = cause.message + (f" (through {cause.via})" if with_via and cause.via else "")
    if where is None:
        return text
    return f"{where}:{cause.line}: {text}" if cause.line is not None else f"{where}: {text}"


def _headline(comparison: Comparison) -> str:
    diff = comparison.diff
    parts = []
    for changes, what in (
        (diff.dtype_changed, "changed dtype"),
        (diff.rule_changed, "changed rule"),
        (diff.record_changed, "changed record"),
        (diff.added, "added"),
        (diff.removed, "removed"),
    ):
        if changes:
            parts.append(f"{len(changes)} node{'s' if len(changes) != 1 else ''} {what}")
    if not parts and diff.model_changed:
        parts.append("the model changed, no decision did")
    failing = len(diff.failing_fields)
    if not parts and failing:
        parts.append(f"no decision changed, {failing} recorded value{'s' if failing != 1 else ''} did")
    if not parts:
        return "no decision changed"
    return ", ".join(parts)


def _summary_line(diff: LockDiff) -> str:
    items = []
    for name, (old, new) in diff.summary_delta().items():
        if name == "estimated_float32_us" and old == new:
            continue
        label = _FIELD_NAMES[name]
        items.append(f"{label} {_arrow(old, new)}" + (f" ({_signed(old, new)})" if old != new else ""))
    return "; ".join(items)


def _shown_fields(comparison: Comparison) -> tuple[list[FieldChange], int]:
    """The recorded values a report lists (those that fail first), and how many more there are."""
    fields = sorted(comparison.diff.fields, key=lambda item: not item.fails)
    return fields[:MAX_FIELD_LINES], max(0, len(fields) - MAX_FIELD_LINES)


def _strict_only(comparison: Comparison, item: FieldChange) -> str:
    """Said of a value that differs without failing a check (a lock checked: ``diff`` fails on nothing)."""
    return " (only --strict fails on it)" if comparison.lock_file is not None and not item.fails else ""


def _field_lines(comparison: Comparison) -> list[str]:
    """Each recorded value that differs, by its JSON path in the lock, old -> new; in a check, those that fail
    only ``--strict`` say so."""
    shown, more = _shown_fields(comparison)
    lines = [field_text(item) + _strict_only(comparison, item) for item in shown]
    if more:
        lines.append(f"... and {more} more (--json lists them all)")
    return lines


# ------------------------------------------------------------------------------------------------- text
def render_text(comparison: Comparison) -> str:
    diff = comparison.diff
    settings = diff.new.settings
    lines = [
        f"{comparison.subject}: {_headline(comparison)} "
        f"({settings.precision_mode.value}, target {settings.target.value})"
    ]
    for change in diff.changes:
        record = _record_text(change)
        lines.append(
            f"  {_KIND_LABELS[change.kind]:<8} {_node_label(change)} ({change.node.op}){_in_lock(comparison, change)}  "
            f"{_dtype_text(change)}  "
            f"[{_rule_text(change)}]" + (f"  {record}" if record else "") + f"  <- {cause_text(change.cause)}"
        )
    lines.append("  " + _summary_line(diff))
    for line in _field_lines(comparison):
        lines.append(f"  differs: {line}")
    lines.extend(_run_text(comparison))
    lines.extend(f"  note: {note}" for note in comparison.notes)
    if comparison.failed and comparison.accept:
        lines.append(f"to accept the new decisions: {comparison.accept}")
    return "\n".join(lines) + "\n"


def _run_text(comparison: Comparison) -> list[str]:
    if comparison.runs is None:
        return []
    old, new = comparison.old_label, comparison.new_label
    lines = [f"  error on the same inputs ({comparison.runs.get('device', '?')}):"]
    for output in comparison.runs["outputs"]:
        lines.append(
            f"    {output['name']}: rel_l2 {_number(output[old]['rel_l2'])} ({old}) -> "
            f"{_number(output[new]['rel_l2'])} ({new}); max_abs {_number(output[old]['max_abs'])} -> "
            f"{_number(output[new]['max_abs'])}"
        )
    return lines


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


# ------------------------------------------------------------------------------------------------- markdown
def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def render_markdown(comparison: Comparison) -> str:
    diff = comparison.diff
    old, new = comparison.old_label, comparison.new_label
    out = [f"### {comparison.title}: {_md_code(comparison.subject)}: {_headline(comparison)}", ""]
    if diff.changes:
        out += ["| node | op | dtype | rule | cause |", "|---|---|---|---|---|"]
        for change in diff.changes[:MAX_ROWS]:
            record = _record_text(change)
            rule = _rule_text(change) + (f"; {record}" if record else "")
            out.append(
                f"| {_md_code(_node_label(change))}{_md_node_path(comparison, change)} | {_md(change.node.op)} | "
                f"{_md(_dtype_text(change))} | "
                f"{_md(rule)} | {_md(cause_text(change.cause))} |"
            )
        if len(diff.changes) > MAX_ROWS:
            out.append(f"| ... and {len(diff.changes) - MAX_ROWS} more | | | | |")
        out.append("")
    out += [f"| | {old} | {new} | change |", "|---|---:|---:|---:|"]
    for name, (was, now) in diff.summary_delta().items():
        out.append(f"| {_FIELD_NAMES[name]} | {was} | {now} | {_signed(was, now) if was != now else ''} |")
    out.append("")
    fields = _md_field_lines(comparison)
    if fields:
        out += ["Recorded values that differ:", "", *fields, ""]
    if comparison.runs is not None:
        out += _run_markdown(comparison)
    out += [f"> {_md(note)}" for note in comparison.notes]
    if comparison.notes:
        out.append("")
    if comparison.failed and comparison.accept:
        out += [f"To accept the new decisions: {_md_code(comparison.accept)}", ""]
    return "\n".join(out)


def _md_node_path(comparison: Comparison, change: NodeChange) -> str:
    path = _node_path(comparison, change)
    return f" at {_md_code(path)}" if path else ""


def _md_field_lines(comparison: Comparison) -> list[str]:
    shown, more = _shown_fields(comparison)
    lines = [
        f"- {_md_code(item.json_path)}: {_md_code(shown_value(item.old))} -> {_md_code(shown_value(item.new))}"
        + _md(_strict_only(comparison, item))
        for item in shown
    ]
    return lines + ([f"- ... and {more} more (`--json` lists them all)"] if more else [])


def _run_markdown(comparison: Comparison) -> list[str]:
    assert comparison.runs is not None
    old, new = comparison.old_label, comparison.new_label
    out = [
        f"Error on the same inputs ({comparison.runs.get('device', '?')}):",
        "",
        f"| output | rel_l2 {old} | rel_l2 {new} | max_abs {old} | max_abs {new} |",
        "|---|---:|---:|---:|---:|",
    ]
    for output in comparison.runs["outputs"]:
        out.append(
            f"| {_md_code(output['name'])} | {_number(output[old]['rel_l2'])} | {_number(output[new]['rel_l2'])} | "
            f"{_number(output[old]['max_abs'])} | {_number(output[new]['max_abs'])} |"
        )
    return [*out, ""]


# ------------------------------------------------------------------------------------------------- findings
@dataclass(frozen=True)
class Finding:
    """One thing a check says about one line: GitHub shows it there, ``validate`` lists it as a problem."""

    level: str  # error, warning or notice
    message: str
    file: str | None = None
    line: int | None = None
    json_path: str | None = None


def comparison_findings(comparison: Comparison) -> list[Finding]:
    """Each settings line that changed decisions (on that line), each changed node (on its line in the lock),
    the summary (on the lock's summary), and a notice for what moved without changing a decision."""
    diff = comparison.diff
    lock = shown_path(comparison.lock_file)
    document = comparison.lock_document
    level = "error" if comparison.failed else "notice"
    found: list[Finding] = []
    for cause, changes in diff.causes():
        if cause.file is None:
            continue
        names = ", ".join(_node_label(change) for change in changes[:5])
        more = f" and {len(changes) - 5} more" if len(changes) > 5 else ""
        count = f"{len(changes)} node{'s' if len(changes) != 1 else ''}"
        message = f"{cause.message}: changes {count} of {lock or comparison.subject} ({names}{more})"
        found.append(Finding(level, message, shown_path(cause.file), cause.line))
    for change in diff.changes[:MAX_NODE_ANNOTATIONS]:
        record = _record_text(change)
        message = (
            f"{_node_label(change)} ({change.node.op}){_in_lock(comparison, change)}: {_dtype_text(change)}, "
            f"rule {_rule_text(change)}" + (f", {record}" if record else "") + f"; cause: {cause_text(change.cause)}"
        )
        index = change.old_index if change.old_index is not None else None
        path = f"$.nodes[{index}]" if index is not None else "$.nodes"
        found.append(Finding(level, message, lock, _lock_line(document, change), path))
    if len(diff.changes) > MAX_NODE_ANNOTATIONS:
        hidden = len(diff.changes) - MAX_NODE_ANNOTATIONS
        found.append(Finding(level, f"... and {hidden} more node changes", lock))
    summary_line = document.source.lines.get(("summary",)) if document is not None else None
    summary = f"{_headline(comparison)}; {_summary_line(diff)}"
    if comparison.failed and comparison.accept:
        summary += f"; to accept: {comparison.accept}"
    found.append(Finding(level, summary, lock, summary_line, "$.summary"))
    shown, hidden_fields = _shown_fields(comparison)
    for item in shown:
        line = document.source.line_of(item.path) if document is not None else None
        fails = comparison.failed and item.fails
        message = field_text(item) + _strict_only(comparison, item)
        found.append(Finding("error" if fails else "warning", message, lock, line, item.json_path))
    if hidden_fields:
        more = f"... and {hidden_fields} more recorded values differ (--json lists them all)"
        found.append(Finding("warning", more, lock))
    found.extend(Finding("warning", note, lock) for note in comparison.notes)
    return found


def render_github(comparison: Comparison) -> str:
    """:func:`comparison_findings` as GitHub workflow annotations."""
    return "".join(
        github_annotation(item.level, item.message, item.file, item.line, comparison.title) + "\n"
        for item in comparison_findings(comparison)
    )


def comparison_problems(comparison: Comparison) -> list[Problem]:
    """:func:`comparison_findings` as ``validate`` problems: errors fail it, warnings do not, notices (the
    summary of a check that passed) are left out."""
    return [
        Problem(
            item.message,
            file=item.file,
            line=item.line,
            json_path=item.json_path,
            severity=Severity.ERROR if item.level == "error" else Severity.WARNING,
        )
        for item in comparison_findings(comparison)
        if item.level != "notice"
    ]


def check_comparison(checked: LockCheck, *, failed: bool, updated: bool = False) -> Comparison:
    """What a ``lock --check`` shows: the lock against today's decisions, with the command that accepts them."""
    lock = shown_path(checked.path) or str(checked.path)
    notes = list(checked.notes)
    if updated:
        notes.append(f"updated {lock}")
    elif checked.stale and not checked.diff.drifted:
        moved = [item.json_path for item in checked.diff.fields]
        what = ", ".join(moved[:5]) + (f" and {len(moved) - 5} more" if len(moved) > 5 else "")
        notes.append(
            f"no decision changed; the lock records other values than today's at {what or 'its sections'}, which "
            f"fail only --strict (versions move with upgrades); ampconfig lock --check {lock} --update records them"
        )
    if checked.lock.proof is not None and checked.diff.drifted:
        notes.append(
            "the recorded proof no longer holds (a decision, the model or its data changed); --update drops it: "
            "rerun ampconfig run --lock-out"
        )
    return Comparison(
        diff=checked.diff,
        subject=lock,
        lock_file=str(checked.path),
        lock_document=checked.document,
        accept=f"ampconfig lock --check {lock} --update",
        notes=notes,
        failed=failed,
    )


def _lock_line(document: LockDocument | None, change: NodeChange) -> int | None:
    if document is None:
        return None
    if change.old_index is not None:
        return document.source.lines.get(("nodes", change.old_index))
    return document.source.lines.get(("nodes",))


# ------------------------------------------------------------------------------------------------- json
def comparison_payload(comparison: Comparison, exit_code: int) -> dict[str, Any]:
    document = comparison.lock_document
    fields = [
        {**item.to_dict(), "line": document.source.line_of(item.path) if document is not None else None}
        for item in comparison.diff.fields
    ]
    return {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "subject": comparison.subject,
        "lock": shown_path(comparison.lock_file),
        "sides": [comparison.old_label, comparison.new_label],
        "drifted": comparison.diff.drifted,
        **comparison.diff.to_dict(),
        "fields": fields,
        "runs": comparison.runs,
        "notes": list(comparison.notes),
        "accept": comparison.accept if comparison.failed else None,
    }


# ------------------------------------------------------------------------------------------------- html
_CSS = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430}"
    "table{border-collapse:collapse;margin:8px 0}th,td{border-bottom:1px solid #e4e8ee;padding:4px 8px;"
    "text-align:left}th{background:#eef1f5}td.num{text-align:right}.f32{color:#b3261e}.low{color:#1a6b2f}"
)


def _dtype_class(dtype: str | None) -> str:
    return "low" if dtype in ("float16", "bfloat16") else "f32" if dtype == "float32" else ""


def render_html(comparison: Comparison) -> str:
    """One self-contained page (no external resource): the changed nodes, the summary, what moved."""
    diff = comparison.diff
    old, new = comparison.old_label, comparison.new_label
    rows = []
    for change in diff.changes[:MAX_ROWS]:
        dtype = change.new.dtype if change.new else None
        rows.append(
            "<tr>"
            f"<td><code>{escape(_node_label(change))}</code></td><td>{escape(change.node.op)}</td>"
            f"<td class='{_dtype_class(dtype)}'>{escape(_dtype_text(change))}</td>"
            f"<td>{escape(_rule_text(change))}</td><td>{escape(cause_text(change.cause))}</td></tr>"
        )
    if len(diff.changes) > MAX_ROWS:
        rows.append(f"<tr><td colspan='5'>... and {len(diff.changes) - MAX_ROWS} more</td></tr>")
    summary = "".join(
        f"<tr><td>{escape(_FIELD_NAMES[name])}</td><td class='num'>{was}</td><td class='num'>{now}</td>"
        f"<td class='num'>{_signed(was, now) if was != now else ''}</td></tr>"
        for name, (was, now) in diff.summary_delta().items()
    )
    moved = "".join(f"<li>{escape(line)}</li>" for line in _field_lines(comparison))
    runs = _run_html(comparison)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{escape(comparison.title)}: {escape(comparison.subject)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(comparison.subject)}: {escape(_headline(comparison))}</h1>"
        + (
            "<table><thead><tr><th>node</th><th>op</th><th>dtype</th><th>rule</th><th>cause</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            if rows
            else ""
        )
        + f"<h2>Summary</h2><table><tr><th></th><th>{escape(old)}</th><th>{escape(new)}</th><th>change</th></tr>"
        f"{summary}</table>"
        + (f"<h2>Recorded values that differ</h2><ul>{moved}</ul>" if moved else "")
        + runs
        + "".join(f"<p>{escape(note)}</p>" for note in comparison.notes)
        + "</body></html>\n"
    )


def _run_html(comparison: Comparison) -> str:
    if comparison.runs is None:
        return ""
    old, new = comparison.old_label, comparison.new_label
    rows = "".join(
        f"<tr><td><code>{escape(output['name'])}</code></td>"
        f"<td class='num'>{_number(output[old]['rel_l2'])}</td><td class='num'>{_number(output[new]['rel_l2'])}</td>"
        f"<td class='num'>{_number(output[old]['max_abs'])}</td><td class='num'>{_number(output[new]['max_abs'])}</td>"
        "</tr>"
        for output in comparison.runs["outputs"]
    )
    return (
        f"<h2>Error on the same inputs ({escape(str(comparison.runs.get('device', '?')))})</h2>"
        f"<table><tr><th>output</th><th>rel_l2 {escape(old)}</th><th>rel_l2 {escape(new)}</th>"
        f"<th>max_abs {escape(old)}</th><th>max_abs {escape(new)}</th></tr>{rows}</table>"
    )


# ------------------------------------------------------------------------------------------------- a lock
def lock_summary_text(lock: PrecisionLock, where: str) -> str:
    """One line about a lock just written (``ampconfig lock -o``)."""
    summary = lock.summary
    return (
        f"wrote {where}: {summary.nodes} nodes, {summary.low_precision_nodes} in {summary.low_dtype}, "
        f"{summary.casts} cast{'s' if summary.casts != 1 else ''}, estimated {summary.estimated_us} us "
        f"({lock.settings.precision_mode.value}, target {lock.settings.target.value})"
    )


def lock_payload(lock: PrecisionLock, where: str) -> dict[str, Any]:
    return {
        "ok": True,
        "exit_code": 0,
        "lock": where,
        "precision_mode": lock.settings.precision_mode.value,
        "target": lock.settings.target.value,
        "summary": lock.summary.model_dump(mode="json"),
        "proof": lock.proof.model_dump(mode="json") if lock.proof is not None else None,
    }
