"""Precision locks and their comparisons as text: plain text, Markdown (a pull-request comment or
``$GITHUB_STEP_SUMMARY``), GitHub annotations, JSON and HTML. Data in, strings out.

A :class:`Comparison` is what ``lock --check`` and ``diff`` both show: a :class:`~ampconfig.lock.drift.LockDiff`
with the names of its two sides, and (for a check) the lock file whose lines the annotations point at.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ampconfig.errors import Problem, Severity
from ampconfig.lock.causes import Cause
from ampconfig.lock.check import LockCheck
from ampconfig.lock.drift import LockDiff, NodeChange
from ampconfig.report.annotations import github_annotation
from ampconfig.settings.lock_file import LockDocument, PrecisionLock

#: Rows a Markdown or HTML table shows before "... and N more" (a step summary has a size limit).
MAX_ROWS = 100
#: Node annotations printed (GitHub shows a few per step; the causes come first and matter most).
MAX_NODE_ANNOTATIONS = 50
#: How a comparison titles itself: a lock checked, two locks, or two sides of settings on a model (no lock).
LOCK_TITLE = "ampconfig precision lock"
LOCKS_TITLE = "ampconfig precision locks"
DIFF_TITLE = "ampconfig diff"
_KIND_LABELS = {"dtype": "changed", "rule": "rule", "added": "added", "removed": "removed"}
_FIELD_NAMES = {
    "low_precision_nodes": "low-precision nodes",
    "casts": "casts",
    "estimated_us": "estimated time (us)",
    "estimated_float32_us": "estimated float32 time (us)",
}


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
        (diff.added, "added"),
        (diff.removed, "removed"),
    ):
        if changes:
            parts.append(f"{len(changes)} node{'s' if len(changes) != 1 else ''} {what}")
    if not parts and diff.model_changed:
        parts.append("the model changed, no decision did")
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


def _moved_lines(comparison: Comparison) -> list[str]:
    diff = comparison.diff
    lines = [cause_text(cause) for cause in diff.moved]
    for item in diff.files:
        if item.old is None:
            lines.append(f"{item.setting} added: {item.new}")
        elif item.new is None:
            lines.append(f"{item.setting} removed: {item.old}")
        else:
            lines.append(f"{item.setting} changed: {item.old} -> {item.new}")
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
        lines.append(
            f"  {_KIND_LABELS[change.kind]:<8} {_node_label(change)} ({change.node.op})  {_dtype_text(change)}  "
            f"[{_rule_text(change)}]  <- {cause_text(change.cause)}"
        )
    lines.append("  " + _summary_line(diff))
    for moved in _moved_lines(comparison):
        lines.append(f"  moved: {moved}")
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
            out.append(
                f"| {_md_code(_node_label(change))} | {_md(change.node.op)} | {_md(_dtype_text(change))} | "
                f"{_md(_rule_text(change))} | {_md(cause_text(change.cause))} |"
            )
        if len(diff.changes) > MAX_ROWS:
            out.append(f"| ... and {len(diff.changes) - MAX_ROWS} more | | | | |")
        out.append("")
    out += [f"| | {old} | {new} | change |", "|---|---:|---:|---:|"]
    for name, (was, now) in diff.summary_delta().items():
        out.append(f"| {_FIELD_NAMES[name]} | {was} | {now} | {_signed(was, now) if was != now else ''} |")
    out.append("")
    moved = _moved_lines(comparison)
    if moved:
        out += ["Also changed:", ""] + [f"- {_md(line)}" for line in moved] + [""]
    if comparison.runs is not None:
        out += _run_markdown(comparison)
    out += [f"> {_md(note)}" for note in comparison.notes]
    if comparison.notes:
        out.append("")
    if comparison.failed and comparison.accept:
        out += [f"To accept the new decisions: {_md_code(comparison.accept)}", ""]
    return "\n".join(out)


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
        message = (
            f"{_node_label(change)} ({change.node.op}): {_dtype_text(change)}, rule {_rule_text(change)}; "
            f"cause: {cause_text(change.cause)}"
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
    found.extend(Finding("warning", f"moved: {moved}", lock) for moved in _moved_lines(comparison))
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
        notes.append(
            "no decision changed, but the lock no longer records today's settings files or versions exactly; "
            f"ampconfig lock --check {lock} --update records them"
        )
    if checked.lock.proof is not None and checked.diff.drifted:
        notes.append("the recorded proof was for the old decisions; --update drops it: rerun ampconfig run --lock-out")
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
    return {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "subject": comparison.subject,
        "lock": shown_path(comparison.lock_file),
        "sides": [comparison.old_label, comparison.new_label],
        "drifted": comparison.diff.drifted,
        **comparison.diff.to_dict(),
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
    moved = "".join(f"<li>{escape(line)}</li>" for line in _moved_lines(comparison))
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
        + (f"<h2>Also changed</h2><ul>{moved}</ul>" if moved else "")
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
