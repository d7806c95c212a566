"""The HTML report's structure (issue 31): each fact in one tile, and a style that fits an 800 px window (long names
wrap in their cell, numbers stay whole, the plot scales). The model's picture (issue 38): one mark per node in graph
order, coloured by dtype, the casts drawn; and in a real headless Chromium, the page checking itself: it renders,
one mark per node, the filters dim the right marks, a click finds the node. Where no Chromium can be had the
browser test skips, unless the CI variable is set: then it fails."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, cast

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.examples import example_path
from ampconfig.report.html import DTYPE_COLOURS, NO_DTYPE_COLOUR, render_html
from tests.transformer_stacks import StackSize, gpt2_stack

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


# ------------------------------------------------------------------------------------------ the model's picture
def test_the_report_opens_with_one_mark_per_node_coloured_by_dtype_with_the_casts() -> None:
    payload = _explained()
    page = render_html(payload)
    assert page.index('<svg id="picture"') < page.index('<div class="cards">')  # the picture comes first
    marks = re.findall(
        r'<rect class="mark" data-i="(\d+)" data-name="([^"]*)" data-dtype="([^"]*)"[^>]*fill="([^"]*)"'
        r"><title>([^<]*)</title>",
        page,
    )
    nodes = payload["nodes"]
    assert [int(index) for index, *_ in marks] == [node["index"] for node in nodes]  # graph order, one each
    for (_, name, dtype, fill, title), node in zip(marks, nodes, strict=True):
        assert (name, dtype, fill) == (node["name"], node["dtype"] or "none", _colour(node))
        assert title.startswith(f"{node['name']} ({node['op_type']}") and f"rule {node['rule']}" in title
    casts = page.count('<rect class="cast"')
    assert casts == sum(bool(node["casts_in"]) + bool(node["casts_out"]) for node in nodes) > 0


def _colour(node: dict[str, Any]) -> str:
    return DTYPE_COLOURS.get(node["dtype"], NO_DTYPE_COLOUR)


def _browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


#: The browsers a test may drive: Debian's chromium package first (what CI installs).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

#: The page checks itself once the report's own script ran, and writes what it found into the DOM (a <pre>), which
#: the browser's --dump-dom prints: rendered, one mark per node, each filter dims the marks it should, a click
#: finds the node.
_SELF_CHECK = """<script>
(function(){
  var out={};
  function dimmed(){return Array.prototype.map.call(document.querySelectorAll('#picture .mark'),
    function(m){return m.classList.contains('dim');});}
  function set(id,value){var el=document.getElementById(id);
    if(el.type==='checkbox'){el.checked=value;}else{el.value=value;}
    el.dispatchEvent(new Event('input'));el.dispatchEvent(new Event('change'));}
  try{
    var svg=document.getElementById('picture'),box=svg.getBoundingClientRect();
    var marks=Array.prototype.slice.call(document.querySelectorAll('#picture .mark'));
    out.rendered=box.width>0&&box.height>0;
    out.marks=marks.length;
    out.rows=document.querySelectorAll('#nodes tbody tr').length;
    out.drawn=marks.filter(function(m){var b=m.getBoundingClientRect();return b.width>0&&b.height>0;}).length;
    out.fills=marks.map(function(m){return m.getAttribute('fill');});
    out.titles=marks.map(function(m){return m.querySelector('title').textContent;});
    out.dim_at_start=dimmed().filter(Boolean).length;
    set('dtype','float32');
    out.dtype_float32={dim:dimmed(),count:document.getElementById('count').textContent};
    set('dtype','');set('changed',true);
    out.changed_only=dimmed();set('changed',false);
    set('colour','black');out.colour_black=dimmed();set('colour','');
    var target=marks[marks.length-1];
    target.dispatchEvent(new MouseEvent('click',{bubbles:true}));
    out.click={search:document.getElementById('q').value,dim:dimmed()};
  }catch(e){out.error=String(e);}
  var pre=document.createElement('pre');pre.id='selfcheck';pre.textContent=JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def _checked_in_browser(page: str, folder: Path) -> dict[str, Any]:
    """The report with its self-check, opened in headless Chromium; what the check wrote."""
    browser = _browser()
    if browser is None:
        reason = "no Chromium found (" + ", ".join(BROWSERS) + "); Debian: apt-get install -y chromium"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {reason}")
        pytest.skip(reason)
    path = folder / "report.html"
    path.write_text(page.replace("</body>", _SELF_CHECK + "</body>"), encoding="utf-8")
    profile = folder / "profile"
    profile.mkdir()
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--dump-dom",
        path.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="selfcheck">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found is not None, done.stdout[-2000:]
    return cast(dict[str, Any], json.loads(html.unescape(found.group(1))))


@pytest.mark.parametrize("model", ["transformer_block", "gpt2_of_2000_nodes"])
def test_the_picture_renders_and_filters_in_a_real_browser(tmp_path: Path, model: str) -> None:
    path = tmp_path / "model.onnx"
    if model == "transformer_block":
        shutil.copyfile(example_path(), path)
    else:  # a model of 2,000 nodes, whose table the issue found "a scroll, not a glance"
        onnx.save(gpt2_stack(StackSize(layers=40), decomposed_ln=True), path)
    mixlist = tmp_path / "mixlist.json"  # float32 islands to see: the softmaxes
    mixlist.write_text('{"black-list": {"to-add": ["Softmax"]}}', encoding="utf-8")
    result = runner.invoke(app, ["explain", str(path), "--modify-mixlist", str(mixlist), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    nodes = payload["nodes"]
    checked = _checked_in_browser(render_html(payload), tmp_path)
    assert "error" not in checked, checked["error"]
    assert checked["rendered"] and checked["marks"] == checked["rows"] == checked["drawn"] == len(nodes)
    assert checked["fills"] == [_colour(node) for node in nodes]
    for title, node in zip(checked["titles"], nodes, strict=True):  # the hover names the node and its rule
        assert title.startswith(node["name"] + " (") and f"rule {node['rule']}" in title
    assert checked["dim_at_start"] == 0
    float32 = [node["dtype"] == "float32" for node in nodes]
    assert any(float32) and not all(float32)  # an island to see, and something around it
    assert checked["dtype_float32"]["dim"] == [not keep for keep in float32]
    assert checked["dtype_float32"]["count"] == f"{sum(float32)} of {len(nodes)} nodes"
    assert checked["changed_only"] == [not node["changed"] for node in nodes]
    assert checked["colour_black"] == [node["colour"] != "black" for node in nodes]
    last = nodes[-1]["name"]  # clicking a mark searches for its node: it alone stays lit (no other name holds it)
    assert checked["click"]["search"] == last
    assert checked["click"]["dim"] == [last.lower() not in _row_text(node) for node in nodes]


def _row_text(node: dict[str, Any]) -> str:
    """What the table's search matches in a node's row (its cells' text), lower case."""
    cells = [node["index"], node["scope"], node["name"], node["op_type"], node["colour"] or "none"]
    cells += [node["original_dtype"] or "-", node["dtype"] or "none", node["rule"], node["cause"] or "-"]
    return "".join(str(cell) for cell in [*cells, node["reason"]]).lower()
