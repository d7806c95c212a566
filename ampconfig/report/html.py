"""The ``explain --html`` / ``compare --html`` report: ONE self-contained HTML file.

Inline CSS and JavaScript, no network access (no external URL anywhere, not even an SVG namespace: inline SVG in
HTML5 needs none), so the file can be mailed or archived and opens offline. It opens with a picture of the model
(:func:`model_picture`: one mark per node in graph order, coloured by its dtype, the casts the rewrite added drawn
on the marks' edges), then the summary, a searchable and filterable node table (the filters dim the picture's
marks too), and, when compare data is given, an inline SVG plot of each node's relative L2 error in topological
order with the threshold and the first bad node marked. Every text from the model is escaped. Pure: payload
dicts in, a string out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ampconfig.errors import printable

#: Fits a narrow window (800 px): the node table's cells may wrap anywhere (a dotted node path has no space to
#: wrap at, and one long name pushed the cause and reason columns off the right edge); numbers stay whole; the
#: plot scales down with its viewBox. The table is not put in a scrolling box: its header would stop sticking.
_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1d2430;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.sub{color:#5b6472;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #d8dde4;border-radius:6px;padding:8px 12px;min-width:150px}
.card b{display:block;font-size:18px}.card span{color:#5b6472;font-size:12px}
.controls{display:flex;gap:10px;align-items:center;margin:8px 0;flex-wrap:wrap}
input[type=search]{width:320px;max-width:100%;box-sizing:border-box;padding:5px 8px;border:1px solid #b8c0cc;
border-radius:4px}
select{padding:4px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:12.5px}
th,td{border-bottom:1px solid #e4e8ee;padding:4px 6px;text-align:left;vertical-align:top}
td{overflow-wrap:anywhere}
th{position:sticky;top:0;background:#eef1f5;cursor:pointer}
tr.changed td.dt{font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;overflow-wrap:normal;white-space:nowrap}
.c-white{color:#334}.c-black{color:#b3261e}.c-gray{color:#8a6d00}.c-clear{color:#00707a}
tr.bad{background:#fdecea}.warn{color:#8a4b00}
svg{background:#fff;border:1px solid #d8dde4;border-radius:6px;max-width:100%;height:auto}
@media (max-width:900px){body{margin:12px}}
svg text{font-size:11px;fill:#5b6472}
#picture .mark{cursor:pointer}#picture .dim{opacity:.12}#picture .cast{fill:#1d2430;pointer-events:none}
#picture .dim+.cast,#picture .dim+.cast+.cast{opacity:.12}
#collapsed{color:#5b6472;font-size:12px;margin:6px 0 0}
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:6px 0 0;color:#5b6472;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
"""

#: A mark stands for one node (``data-i``) or, in a collapsed picture, a run of them (``data-first`` to
#: ``data-last``): it is dimmed when none of its nodes' rows passes the filters. A click on a node's mark searches for
#: its name; on a run's mark it lists the run's rows (until the search or a filter changes).
_JS = """
(function(){
  var q=document.getElementById('q'),col=document.getElementById('colour'),dt=document.getElementById('dtype'),
      ch=document.getElementById('changed'),count=document.getElementById('count'),
      rows=Array.prototype.slice.call(document.querySelectorAll('#nodes tbody tr')),
      marks=Array.prototype.slice.call(document.querySelectorAll('#picture .mark')),markOf={},span=null;
  marks.forEach(function(m){
    var first=+(m.dataset.first||m.dataset.i),last=+(m.dataset.last||m.dataset.i);
    for(var i=first;i<=last;i++){markOf[i]=m;}
    m.addEventListener('click',function(){
      if(m.dataset.first){q.value='';span=[first,last];}else{q.value=m.dataset.name;span=null;}
      apply();
      var row=document.querySelector('#nodes tbody tr[data-i="'+first+'"]');if(row){row.scrollIntoView();}
    });
  });
  function apply(){
    var text=q.value.toLowerCase(),c=col.value,d=dt.value,only=ch.checked,shown=0,lit=new Set();
    rows.forEach(function(r){
      var i=+r.dataset.i,ok=(!span||(i>=span[0]&&i<=span[1]))&&
             (!text||r.textContent.toLowerCase().indexOf(text)>=0)&&(!c||r.dataset.colour===c)&&
             (!d||r.dataset.dtype===d)&&(!only||r.dataset.changed==='1');
      r.style.display=ok?'':'none'; if(ok){shown++;lit.add(markOf[i]);}
    });
    marks.forEach(function(m){m.classList.toggle('dim',!lit.has(m));});
    count.textContent=shown+' of '+rows.length+' nodes'+(span?' (one mark of the picture: '+(span[1]-span[0]+1)+
      ' nodes from #'+span[0]+')':'');
  }
  [q,col,dt,ch].forEach(function(el){
    function changed(){span=null;apply();}
    el.addEventListener('input',changed);el.addEventListener('change',changed);});
  document.querySelectorAll('#nodes th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var body=document.querySelector('#nodes tbody'),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
      rows.sort(function(a,b){
        var x=a.children[i].dataset.v||a.children[i].textContent,y=b.children[i].dataset.v||b.children[i].textContent;
        var nx=parseFloat(x),ny=parseFloat(y),r=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return asc?r:-r;});
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
  apply();
})();
"""

_PLOT_W, _PLOT_H, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 1000, 280, 56, 16, 16, 36
_LOG_FLOOR = -8.0  # errors below 1e-8 (exact nodes) are drawn on the floor


def _e(value: Any) -> str:
    """Text for HTML: its control and bidi characters escaped as everywhere (a right-to-left override would reverse
    the text around it in the browser too), then its markup."""
    return escape(printable(_unicode("" if value is None else str(value))), quote=True)


def _unicode(text: str) -> str:
    """``text`` as UTF-8 can hold it: the undecodable bytes of a file name (Python keeps them as lone surrogates)
    become U+FFFD, as a browser would show them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate no byte stands for
            return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return "inf" if math.isinf(value) else "nan" if math.isnan(value) else format(value, ".3g")
    return str(value)


def _sort_value(value: Any) -> str:
    """A numeric sort key for the table (inf sorts last)."""
    if isinstance(value, str) and value in ("inf", "nan"):
        return "1e308"
    return "" if value is None else str(value)


def _cards(summary: Mapping[str, Any], extra: Sequence[tuple[str, str]]) -> str:
    """One tile per fact. The nodes in low precision are the low dtype's tile among the dtype tiles (a tile of
    their own repeated it, and sat beside "dtype changed", which often has the same count)."""
    items = [
        ("nodes", str(summary["nodes"])),
        ("dtype changed", str(summary["changed"])),
        ("casts inserted", str(summary["casts_inserted"])),
        ("casts retargeted", str(summary["casts_retargeted"])),
        ("values clamped", str(summary["values_clamped"])),
        *extra,
    ]
    for group in ("by_colour", "by_dtype"):
        for key, value in summary[group].items():
            items.append((f"{group.removeprefix('by_')} {key}", str(value)))
    return "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in items)


def _options(values: Sequence[str]) -> str:
    return "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)


def _table(nodes: Sequence[Mapping[str, Any]], errors: Mapping[str, Mapping[str, Any]], first_bad: str | None) -> str:
    headers = ["#", "scope", "node", "op", "colour", "dtype before", "dtype after", "rule", "cause", "reason"]
    if errors:
        headers += ["rel L2", "gain", "overflow"]
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    rows = []
    for node in nodes:
        colour = node.get("colour") or "none"
        dtype = node.get("dtype") or "none"
        classes = ["changed"] if node.get("changed") else []
        if node["name"] == first_bad:
            classes.append("bad")
        cells = [
            f'<td class="num" data-v="{node["index"]}">{node["index"]}</td>',
            f"<td>{_e(node.get('scope'))}</td>",
            f"<td>{_e(node['name'])}</td>",
            f"<td>{_e(node['op_type'])}</td>",
            f'<td class="c-{_e(colour)}">{_e(colour)}</td>',
            f"<td>{_e(node.get('original_dtype') or '-')}</td>",
            f'<td class="dt">{_e(dtype)}</td>',
            f"<td>{_e(node['rule'])}</td>",
            f"<td>{_e(node.get('cause') or '-')}</td>",
            f"<td>{_e(node['reason'])}</td>",
        ]
        if errors:
            err = errors.get(node["name"]) if not node.get("scope") else None
            error = err.get("error") if err else None
            gain = err.get("gain") if err else None
            cells += [
                f'<td class="num" data-v="{_e(_sort_value(error))}">{_e(_fmt(error))}</td>',
                f'<td class="num" data-v="{_e(_sort_value(gain))}">{_e(_fmt(gain))}</td>',
                f'<td class="warn">{_e("; ".join(err.get("overflow", [])) if err else "")}</td>',
            ]
        rows.append(
            f'<tr class="{" ".join(classes)}" data-i="{node["index"]}" data-colour="{_e(colour)}" '
            f'data-dtype="{_e(dtype)}" '
            f'data-changed="{1 if node.get("changed") else 0}">{"".join(cells)}</tr>'
        )
    return f'<table id="nodes"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


#: The picture's width (its viewBox: it scales down with the window) and the height it aims at; a mark is at most
#: :data:`_MAX_CELL` wide (a small model is one row of legible marks) and at least 2 (a large one stays a page).
_PICTURE_W, _PICTURE_H, _MAX_CELL, _MIN_CELL = 1000, 360, 18, 2
#: Each dtype's colour: the low types blue and violet, float32 orange (an island stands out among low nodes),
#: float64 brown, a node with no float dtype light gray.
DTYPE_COLOURS = {"float16": "#2f6fd6", "bfloat16": "#7b4fc9", "float32": "#e8702a", "float64": "#8c5a2b"}
NO_DTYPE_COLOUR = "#c9ced6"


def _picture_grid(count: int) -> tuple[int, int, int]:
    """(cell size, columns, rows) for ``count`` marks: cells as large as fit the aimed-at area, whole pixels."""
    cell = int(math.sqrt(_PICTURE_W * _PICTURE_H / max(count, 1)))
    cell = max(_MIN_CELL, min(_MAX_CELL, cell))
    columns = max(1, min(count, _PICTURE_W // cell))  # a small model's one row is no wider than its marks
    rows = max(1, math.ceil(count / columns))
    return cell, columns, rows


#: Above this many nodes a mark would be under 6 px (the picture's area over the node count), too small to point at
#: one node: the picture then draws each run of consecutive nodes of one dtype as one mark (:func:`_run_marks`).
COLLAPSE_ABOVE = _PICTURE_W * _PICTURE_H // 36


def model_picture(nodes: Sequence[Mapping[str, Any]], *, collapse_above: int = COLLAPSE_ABOVE) -> str:
    """Inline SVG: every node a mark in graph order (left to right, row by row), coloured by the dtype it computes
    in; a dark bar on a mark's left edge is a Cast the rewrite added on its inputs, on its right edge one on its
    outputs. Each mark's tooltip names the node, its op, dtype, rule and cause (the reason is in the table: on
    25,000 nodes it would be a third of the page); a click finds it in the table. Above ``collapse_above`` nodes,
    each run of one dtype is one mark over its nodes' cells (:func:`_run_marks`), and a line under the picture
    says so."""
    cell, columns, rows = _picture_grid(len(nodes))
    height = rows * cell
    parts = [
        f'<svg id="picture" width="{columns * cell}" height="{height}" viewBox="0 0 {columns * cell} {height}" '
        f'role="img" aria-label="the model\'s nodes in graph order, coloured by dtype">'
    ]
    note = ""
    if len(nodes) > collapse_above:
        runs = _runs(nodes)
        parts += _run_marks(nodes, runs, cell, columns)
        note = _collapsed_note(len(nodes), runs)
    else:
        parts += _node_marks(nodes, cell, columns)
    parts.append("</svg>")
    return "".join(parts) + note


def _dtype(node: Mapping[str, Any]) -> str:
    return node.get("dtype") or "none"


def _cast_bars(node: Mapping[str, Any], x: int, y: int, cell: int, gap: int) -> str:
    """The dark bars of the Casts the rewrite added on ``node``'s inputs (left edge) and outputs (right edge)."""
    bar = max(1, cell // 5)
    bars = ""
    if node.get("casts_in"):
        bars += f'<rect class="cast" x="{x}" y="{y}" width="{bar}" height="{cell - gap}"/>'
    if node.get("casts_out"):
        bars += f'<rect class="cast" x="{x + cell - gap - bar}" y="{y}" width="{bar}" height="{cell - gap}"/>'
    return bars


def _node_marks(nodes: Sequence[Mapping[str, Any]], cell: int, columns: int) -> list[str]:
    """One mark per node, its casts after it."""
    gap = 1 if cell >= 6 else 0
    parts = []
    for position, node in enumerate(nodes):
        x, y = (position % columns) * cell, (position // columns) * cell
        dtype = _dtype(node)
        fill = DTYPE_COLOURS.get(dtype, NO_DTYPE_COLOUR)
        before = node.get("original_dtype") or "none"
        changed = f"{before} -> {dtype}" if before != dtype else dtype
        where = f" in {node['scope']}" if node.get("scope") else ""
        label = f"{node['name']} ({node['op_type']}{where}): {changed}, rule {node['rule']}"
        cause = f" ({node['cause']})" if node.get("cause") else ""
        parts.append(
            f'<rect class="mark" data-i="{node["index"]}" data-name="{_e(node["name"])}" data-dtype="{_e(dtype)}" '
            f'x="{x}" y="{y}" width="{cell - gap}" height="{cell - gap}" fill="{fill}">'
            f"<title>{_e(label)}{_e(cause)}</title></rect>"
        )
        parts.append(_cast_bars(node, x, y, cell, gap))
    return parts


def _runs(nodes: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """The runs of consecutive nodes of one dtype, as (first position, last position), in graph order."""
    runs: list[tuple[int, int]] = []
    start = 0
    for position in range(1, len(nodes) + 1):
        if position == len(nodes) or _dtype(nodes[position]) != _dtype(nodes[start]):
            runs.append((start, position - 1))
            start = position
    return runs


def _run_outline(first: int, last: int, cell: int, columns: int) -> str:
    """An SVG path over the cells of positions ``first`` to ``last``: the row it starts in, the full rows between,
    the row it ends in."""
    top, bottom = first // columns, last // columns
    if top == bottom:
        pieces = [(first % columns, top, last % columns - first % columns + 1, 1)]
    else:
        pieces = [(first % columns, top, columns - first % columns, 1), (0, bottom, last % columns + 1, 1)]
        if bottom - top > 1:
            pieces.append((0, top + 1, columns, bottom - top - 1))
    return "".join(f"M{x * cell},{y * cell}h{w * cell}v{h * cell}h-{w * cell}z" for x, y, w, h in pieces)


def _run_marks(
    nodes: Sequence[Mapping[str, Any]], runs: Sequence[tuple[int, int]], cell: int, columns: int
) -> list[str]:
    """One mark per run of one dtype: a group holding the outline of its nodes' cells and their casts. Its tooltip
    names its first and last node, how many nodes of which op types and rules it holds; a click lists them in the
    table."""
    parts = []
    for first, last in runs:
        run = nodes[first : last + 1]
        dtype = _dtype(run[0])
        ops = ", ".join(f"{op} {count}" for op, count in sorted(Counter(n["op_type"] for n in run).items()))
        rules = ", ".join(f"{rule} {count}" for rule, count in sorted(Counter(n["rule"] for n in run).items()))
        names = run[0]["name"] if len(run) == 1 else f"{run[0]['name']} ... {run[-1]['name']}"
        label = f"{names}: {len(run)} node{'s' if len(run) > 1 else ''} in {dtype} ({ops}), rule {rules}"
        bars = "".join(
            _cast_bars(node, (position % columns) * cell, (position // columns) * cell, cell, 0)
            for position, node in enumerate(run, start=first)
            if node.get("casts_in") or node.get("casts_out")
        )
        parts.append(
            f'<g class="mark run" data-first="{run[0]["index"]}" data-last="{run[-1]["index"]}" '
            f'data-dtype="{_e(dtype)}"><title>{_e(label)}</title>'
            f'<path d="{_run_outline(first, last, cell, columns)}" fill="{DTYPE_COLOURS.get(dtype, NO_DTYPE_COLOUR)}"/>'
            f"{bars}</g>"
        )
    return parts


def _collapsed_note(count: int, runs: Sequence[tuple[int, int]]) -> str:
    """What the collapsed picture left out, and where each node is."""
    longest = max(last - first + 1 for first, last in runs)
    return (
        f'<p id="collapsed">The picture draws each run of consecutive nodes of one dtype as one mark: '
        f"{count} nodes in {len(runs)} marks (the longest run: {longest} nodes). Hover a mark for its first and "
        "last node, its op types and rules; click it to list its nodes in the table. Every node is in the table "
        "below, by name, with its dtype and rule.</p>"
    )


def _legend(nodes: Sequence[Mapping[str, Any]], casts: int) -> str:
    counts: dict[str, int] = {}
    for node in nodes:
        dtype = node.get("dtype") or "none"
        counts[dtype] = counts.get(dtype, 0) + 1
    items = [
        f'<span><i style="background:{DTYPE_COLOURS.get(dtype, NO_DTYPE_COLOUR)}"></i>{_e(dtype)} {count}</span>'
        for dtype, count in sorted(counts.items())
    ]
    items.append(f'<span><i style="background:#1d2430;width:3px"></i>a cast added ({casts})</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def _log_error(value: Any) -> float | None:
    """log10 of an error for the plot; None for NaN; +inf stays +inf (drawn at the top)."""
    if isinstance(value, str):
        return math.inf if value == "inf" else None
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return math.inf
    return max(_LOG_FLOOR, math.log10(value)) if value > 0 else _LOG_FLOOR


def error_plot(nodes: Sequence[Mapping[str, Any]], threshold: float, first_bad: str | None) -> str:
    """Inline SVG: per-node rel L2 error (log scale) in topological order, the threshold, the first bad node."""
    points = [(node, _log_error(node.get("error"))) for node in nodes]
    finite = [y for _, y in points if y is not None and math.isfinite(y)]
    top = math.ceil(max([*finite, math.log10(threshold), _LOG_FLOOR + 1.0]) + 0.5)
    bottom = math.floor(max(min([*finite, math.log10(threshold), 0.0]) - 0.5, _LOG_FLOOR))
    has_inf = any(y is not None and math.isinf(y) for _, y in points)
    ceiling = top + 1 if has_inf else top  # non-finite errors get their own row above the top decade
    inner_w, inner_h = _PLOT_W - _PAD_L - _PAD_R, _PLOT_H - _PAD_T - _PAD_B
    count = max(len(points), 1)

    def x_of(index: int) -> float:
        return _PAD_L + (index + 0.5) * inner_w / count

    def y_of(value: float) -> float:
        value = min(value, float(ceiling))
        return _PAD_T + (ceiling - value) / (ceiling - bottom) * inner_h

    parts = [
        f'<svg id="error-plot" width="{_PLOT_W}" height="{_PLOT_H}" viewBox="0 0 {_PLOT_W} {_PLOT_H}" role="img" '
        'aria-label="per-node relative L2 error">'
    ]
    for decade in range(int(bottom), int(top) + 1):
        y = y_of(decade)
        parts.append(f'<line x1="{_PAD_L}" x2="{_PLOT_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef1f5"/>')
        parts.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">1e{decade}</text>')
    if has_inf:
        y = y_of(ceiling)
        parts.append(f'<line x1="{_PAD_L}" x2="{_PLOT_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f3d6d3"/>')
        parts.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">inf</text>')
    ty = y_of(math.log10(threshold))
    parts.append(
        f'<line x1="{_PAD_L}" x2="{_PLOT_W - _PAD_R}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#b3261e" '
        'stroke-dasharray="5 4"/>'
        f'<text x="{_PLOT_W - _PAD_R}" y="{ty - 4:.1f}" text-anchor="end">threshold {threshold:g}</text>'
    )
    line = [f"{x_of(i):.1f},{y_of(y):.1f}" for i, (_, y) in enumerate(points) if y is not None]
    if line:
        parts.append(f'<polyline fill="none" stroke="#7a8594" stroke-width="1" points="{" ".join(line)}"/>')
    for index, (node, node_y) in enumerate(points):
        if node_y is None:
            continue
        bad = node.get("name") == first_bad
        fill = "#b3261e" if bad or node.get("overflow") else "#1f5fbf"
        radius = 6 if bad else 3.5
        label = f"{node.get('name')} ({node.get('op_type')}, {node.get('dtype')}): rel L2 {_fmt(node.get('error'))}"
        parts.append(
            f'<circle cx="{x_of(index):.1f}" cy="{y_of(node_y):.1f}" r="{radius}" fill="{fill}">'
            f"<title>{_e(label)}</title></circle>"
        )
        if bad:
            # Label on the side with room, so it is not clipped at the plot's right edge.
            right_half = x_of(index) > _PAD_L + inner_w / 2
            anchor, dx = ("end", -10) if right_half else ("start", 10)
            parts.append(
                f'<text x="{x_of(index) + dx:.1f}" y="{y_of(node_y) + 4:.1f}" text-anchor="{anchor}" '
                f'style="fill:#b3261e;font-weight:600">first bad: {_e(node.get("name"))}</text>'
            )
    parts.append(
        f'<text x="{_PAD_L + inner_w / 2:.0f}" y="{_PLOT_H - 8}" text-anchor="middle">'
        f"nodes in topological order ({len(points)}); y: relative L2 error vs fp32, log scale</text></svg>"
    )
    return "".join(parts)


def render_html(
    explain: Mapping[str, Any],
    compare: Mapping[str, Any] | None = None,
    *,
    command: str = "explain",
    collapse_above: int = COLLAPSE_ABOVE,
) -> str:
    """The whole report; ``compare`` (a compare payload) adds the error plot and per-node error columns.
    ``command`` names the command that wrote it in the title; above ``collapse_above`` nodes the picture draws
    runs of one dtype (:func:`model_picture`)."""
    summary = explain["summary"]
    nodes = explain["nodes"]
    errors: dict[str, Mapping[str, Any]] = {}
    extra: list[tuple[str, str]] = []
    plot = ""
    first_bad = None
    if compare is not None:
        localization = compare["localization"]
        errors = {node["name"]: node for node in localization["nodes"]}
        first_bad = localization.get("first_bad_node")
        extra = [
            ("first bad node", first_bad or "none"),
            ("outputs", "PASS" if compare.get("passed") else "FAIL"),
        ]
        plot = (
            "<h2>Per-node error vs fp32</h2>"
            + error_plot(localization["nodes"], float(localization["threshold"]), first_bad)
            + "".join(f'<p class="warn">{_e(f)}</p>' for f in compare.get("failures", []))
        )
    ranges = explain.get("range_analysis") or (compare or {}).get("range_analysis")
    range_html = ""
    if ranges:
        kept = ranges.get("overflow_nodes", {})
        items = "".join(f"<li><b>{_e(name)}</b>: {_e(reason)}</li>" for name, reason in kept.items())
        range_html = f"<h2>Range analysis (data_max {_e(_fmt(float(ranges['data_max'])))})</h2>" + (
            f"<ul>{items}</ul>" if items else "<p>no value out of range</p>"
        )
    colours = sorted({node.get("colour") or "none" for node in nodes})
    dtypes = sorted({node.get("dtype") or "none" for node in nodes})
    warnings = "".join(f"<p>note: {_e(n)}</p>" for n in explain.get("notes", [])) + "".join(
        f'<p class="warn">warning: {_e(w)}</p>' for w in explain.get("warnings", [])
    )
    title = f"ampconfig {command}: {explain.get('model', '')}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<div class="sub">precision mode <b>{_e(explain["precision_mode"])}</b>, target '
        f"<b>{_e(explain['target'])}</b>, low dtype {_e(explain['low_dtype'])}</div>"
        f"{model_picture(nodes, collapse_above=collapse_above)}{_legend(nodes, int(summary['casts_inserted']))}"
        f'<div class="cards">{_cards(summary, extra)}</div>'
        f"{warnings}{plot}{range_html}"
        "<h2>Nodes</h2>"
        '<div class="controls"><input id="q" type="search" placeholder="search name, op, rule, reason..." '
        'aria-label="search nodes">'
        f'<select id="colour" aria-label="colour"><option value="">every colour</option>{_options(colours)}</select>'
        f'<select id="dtype" aria-label="dtype"><option value="">every dtype</option>{_options(dtypes)}</select>'
        '<label><input id="changed" type="checkbox"> changed only</label><span id="count"></span></div>'
        f"{_table(nodes, errors, first_bad)}"
        f"<script>{_JS}</script></body></html>\n"
    )
