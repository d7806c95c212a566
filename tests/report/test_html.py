"""The HTML report's structure (issue 31): each fact in one tile, and a style that fits an 800 px window (long names
wrap in their cell, numbers stay whole, the plot scales). No browser renders it here; the rules are checked."""

from __future__ import annotations

import json
import re
from collections import Counter

from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.examples import example_path
from ampconfig.report.html import render_html

runner = CliRunner()


def _explained() -> dict:
    result = runner.invoke(app, ["explain", str(example_path()), "-m", "allow_mix_precision", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _rules(page: str) -> dict[str, str]:
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert style is not None
    return {selector.strip(): body for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", style.group(1))}


def test_every_tile_says_a_fact_of_its_own() -> None:
    payload = _explained()
    page = render_html(payload)
    tiles = re.findall(r'<div class="card"><b>([^<]*)</b><span>([^<]*)</span></div>', page)
    labels = Counter(label for _, label in tiles)
    assert labels and max(labels.values()) == 1, labels
    assert "low precision" not in labels  # the low dtype's own tile says it
    shown = dict((label, value) for value, label in tiles)
    low = payload["low_dtype"]
    assert shown[f"dtype {low}"] == str(payload["summary"]["low_precision_nodes"])
    assert shown["dtype changed"] == str(payload["summary"]["changed"])


def test_the_style_fits_a_narrow_window() -> None:
    rules = _rules(render_html(_explained()))
    assert "overflow-wrap:anywhere" in rules["td"]  # a long dotted node name wraps inside its cell
    assert "white-space:nowrap" in rules["td.num"]  # a number is never broken
    assert "max-width:100%" in rules["svg"] and "height:auto" in rules["svg"]  # the 1000 px plot scales down
    assert "max-width:100%" in rules["input[type=search]"]
    assert "width:100%" in rules["table"]  # as wide as the window, no wider
