"""explain --json / --html and compare --html on real models (the HTML parsed with html.parser)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from tests.overflow_model import CULPRIT, write_case

runner = CliRunner()
_REQUIRED_NODE_KEYS = {"name", "op_type", "dtype", "colour", "reason", "rule", "cause", "original_dtype", "scope"}


class _Report(HTMLParser):
    """Collects what the tests look at: body rows of the node table, inputs, svg, scripts/links with sources."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []
        self.inputs: list[dict[str, str | None]] = []
        self.svg: list[str | None] = []  # each svg's id
        self.circles = 0
        self.marks = 0
        self.external: list[str] = []
        self._in_tbody = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        data = dict(attrs)
        if tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody:
            self.rows.append(data)
        elif tag == "input":
            self.inputs.append(data)
        elif tag == "svg":
            self.svg.append(data.get("id"))
        elif tag == "circle":
            self.circles += 1
        elif tag == "rect" and data.get("class") == "mark":
            self.marks += 1
        for key in ("src", "href", "xmlns"):
            if data.get(key):
                self.external.append(f"{tag} {key}={data[key]}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_tbody = False


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_case(tmp_path_factory.mktemp("explain"))


def _parse(path: Path) -> tuple[_Report, str]:
    text = path.read_text(encoding="utf-8")
    report = _Report()
    report.feed(text)
    report.close()
    return report, text


def test_explain_json_is_one_object_with_every_node(case: dict[str, Path]) -> None:
    result = runner.invoke(app, ["explain", str(case["model"]), "-c", str(case["config"]), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # exactly one JSON object, nothing else on stdout
    assert [node["name"] for node in payload["nodes"]][:3] == ["mm0", "add0", "relu0"]
    assert len(payload["nodes"]) == 11
    for node in payload["nodes"]:
        assert set(node) >= _REQUIRED_NODE_KEYS
    add0 = payload["nodes"][1]
    assert (add0["colour"], add0["rule"], add0["cause"]) == ("gray", "follows_inputs", "mm0")
    summary = payload["summary"]
    assert summary["by_colour"] == {"clear": 3, "gray": 3, "white": 5}
    assert summary["by_dtype"] == {"float16": 11}
    assert summary["casts_inserted"] >= 0 and "casts_retargeted" in summary


def test_explain_table_without_running(case: dict[str, Path]) -> None:
    result = runner.invoke(app, ["explain", str(case["model"]), "-c", str(case["config"])])
    assert result.exit_code == 0, result.output
    assert "white_list" in result.stdout and "by colour" in result.stdout and CULPRIT in result.stdout


def test_explain_html_is_self_contained_and_filterable(case: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "explain.html"
    result = runner.invoke(app, ["explain", str(case["model"]), "-c", str(case["config"]), "--html", str(out)])
    assert result.exit_code == 0, result.output
    report, text = _parse(out)
    assert len(report.rows) == 11 and {row["data-colour"] for row in report.rows} == {"white", "gray", "clear"}
    assert any(item.get("type") == "search" for item in report.inputs)
    assert report.svg == ["picture"]  # the model's picture; no compare data, no plot
    assert report.marks == 11
    assert not report.external and not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I)
    assert not list(tmp_path.glob(".*.tmp"))


def test_explain_html_leaves_the_node_table_to_the_report(case: dict[str, Path], tmp_path: Path) -> None:
    """With --html the terminal gets the summary and where the table is, not a row per node: on a chain of 20,000
    nodes rich's table cost 15 s of CPU, three times the decision (issue 45; main at e3889b8 printed every row)."""
    out = tmp_path / "explain.html"
    result = runner.invoke(app, ["explain", str(case["model"]), "-c", str(case["config"]), "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert f"every node's row is in {out}" in result.stdout and "by colour" in result.stdout
    assert CULPRIT not in result.stdout  # no node's row
    report, _ = _parse(out)
    assert len(report.rows) == 11  # the rows are in the report


def test_compare_html_has_the_error_plot(case: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    args = ["compare", str(case["model"]), "-c", str(case["config"]), "--no-range-check", "--html", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1  # without the range rule, the overflow breaks the tolerance
    assert f"first bad node: {CULPRIT}" in result.stdout
    report, text = _parse(out)
    assert report.svg == ["picture", "error-plot"] and report.circles == 11 and report.marks == 11
    assert f"first bad: {CULPRIT}" in text
    assert any("bad" in (row.get("class") or "") for row in report.rows)
    assert not report.external and "http" not in text


def test_explain_compare_json_carries_both(case: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "both.html"
    args = ["explain", str(case["model"]), "-c", str(case["config"]), "--compare", "--range-check", "--json"]
    result = runner.invoke(app, [*args, "--html", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["compare"]["passed"]  # range analysis kept square in float32
    assert payload["compare"]["first_bad_node"] is None
    assert next(n for n in payload["nodes"] if n["name"] == CULPRIT)["rule"] == "range_exceeds"
    report, _ = _parse(out)
    assert report.svg == ["picture", "error-plot"]
