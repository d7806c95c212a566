"""What the HTML report costs as graphs grow: ``explain --html`` against ``explain --json`` (issue 45, item 3).

The models are chains of Add and Mul on a [4, 8] float32 tensor where every 7th node is a Sub
(``range_run.build_chain``), and a keep_dtype file (``OpType::Sub``) keeps the Subs in float32 under
``force_fp16``: the dtypes alternate (six float16 nodes, one float32, two casts around it) all along the graph, so a
picture that collapses runs of one dtype still draws thousands of marks. (An entry per node name would pin the same
nodes, but keep_dtype's match of names is entries x nodes, which is the decision's cost, not the picture's.) Each
measurement is a fresh process, in the folder of the model, the two commands interleaved per round:

    ampconfig explain -m force_fp16 --keep-dtype keep.cfg chainN.onnx --json
    ampconfig explain -m force_fp16 --keep-dtype keep.cfg chainN.onnx --html chainN.html

timed as wall clock and as CPU time (user + system); on a shared machine the best of the rounds is the steadier
number. It also renders each size's page (``render_html`` of the ``--json`` payload, in a process of the timed
checkout: the page's own cost and size) and, with ``--browser``, opens the page in headless Chromium
(``--dump-dom``: load, layout and the page's script), once per size.

    python benchmarks/html_picture.py --nodes 5000 20000 --repeat 3 [--browser] [--before /tmp/before]

``--before DIR`` times another checkout (the commit before a change: ``git archive``) in the same rounds, taking
turns with this one; ``--source DIR`` times another checkout instead of this one. It prints one JSON object: the
machine, and per checkout, per size each time, the best and the medians, ``html`` over ``json`` per size (best CPU
and best wall), and each command's best time at the largest size over its best at the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from range_run import build_chain, machine, medians, timed_ampconfig

#: Add and Mul in turn, every 7th node a Sub, which keep_dtype keeps in float32.
CHAIN_OPS = ("Add", "Mul", "Add", "Mul", "Add", "Mul", "Sub")
KEEP_DTYPE = "OpType::Sub\n"


#: Run in the timed checkout: the page of an ``explain --json`` payload, rendered; its cost and size.
RENDER = """
import json, sys, time
from ampconfig.report.html import render_html
payload = json.load(open(sys.argv[1], encoding="utf-8"))
start = time.perf_counter()
page = render_html(payload)
seconds = time.perf_counter() - start
open(sys.argv[2], "w", encoding="utf-8").write(page)
print(json.dumps({"render_html_s": round(seconds, 3), "page_mb": round(len(page.encode("utf-8")) / 1e6, 2)}))
"""


def _rendered(explain: list[str], folder: Path, source: Path | None) -> dict[str, object]:
    """``render_html`` of the ``explain --json`` payload, in a process of the timed checkout; the page is
    ``folder/page.html``."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source) + os.pathsep + env.get("PYTHONPATH", "")
    with (folder / "payload.json").open("w", encoding="utf-8") as out:
        subprocess.run([sys.executable, "-m", "ampconfig", *explain, "--json"], stdout=out, env=env, cwd=folder,
                       check=True)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", RENDER, "payload.json", "page.html"], capture_output=True,
                          text=True, env=env, cwd=folder, check=True)  # fmt: skip
    rendered: dict[str, object] = json.loads(done.stdout)
    return rendered


def _browser_seconds(page: Path) -> float | None:
    """Wall seconds of headless Chromium loading ``page`` and running its script (None without a Chromium)."""
    browser = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
    if browser is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ampconfig-chromium-") as profile:
        start = time.perf_counter()
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom",
             page.as_uri()],
            capture_output=True, check=True, timeout=600,
        )  # fmt: skip
        return round(time.perf_counter() - start, 2)


def _ratios(over: dict[str, object], under: dict[str, object]) -> dict[str, float]:
    """``over``'s best CPU and wall times over ``under``'s."""
    return {clock: round(float(over[f"{clock}_best"]) / float(under[f"{clock}_best"]), 2) for clock in ("cpu", "wall")}


def _measured(
    folder: Path, keep: Path, sizes: list[int], repeat: int, sources: dict[str, Path | None], browser: bool
) -> dict[str, dict[str, object]]:
    """Per checkout (``sources``: a label and its root, None for this one): per size, each command's times, the page
    rendered, and the ratios. Per round the checkouts and the commands take turns, so a burst of load on the machine
    hits them alike."""
    seconds: dict[str, dict[str, dict[str, dict[str, object]]]] = {label: {} for label in sources}
    pages: dict[str, dict[str, dict[str, object]]] = {label: {} for label in sources}
    for length in sizes:
        model = folder / f"chain{length}.onnx"
        onnx.save(build_chain(length, CHAIN_OPS), model)
        explain = ["explain", "-m", "force_fp16", "--keep-dtype", str(keep), str(model)]
        runs: dict[str, dict[str, list[tuple[float, float]]]] = {label: {"json": [], "html": []} for label in sources}
        for _ in range(repeat):
            for label, source in sources.items():
                runs[label]["json"].append(timed_ampconfig([*explain, "--json"], folder, source))
                runs[label]["html"].append(timed_ampconfig([*explain, "--html", "report.html"], folder, source))
        for label, source in sources.items():
            seconds[label][str(length)] = {
                command: {
                    **medians(times),
                    "wall_best": round(min(w for w, _ in times), 2),
                    "cpu_best": round(min(c for _, c in times), 2),
                }
                for command, times in runs[label].items()
            }
            pages[label][str(length)] = _rendered(explain, folder, source)
            if browser:
                pages[label][str(length)]["chromium_s"] = _browser_seconds(folder / "page.html")
    smallest, largest = str(min(sizes)), str(max(sizes))
    return {
        label: {
            "seconds": seconds[label],
            "pages": pages[label],
            "html_over_json": {size: _ratios(t["html"], t["json"]) for size, t in seconds[label].items()},
            f"{largest}_over_{smallest}": {
                command: _ratios(seconds[label][largest][command], seconds[label][smallest][command])
                for command in ("json", "html")
            },
        }
        for label in sources
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 20000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--browser", action="store_true", help="also time headless Chromium opening each page")
    parser.add_argument("--source", type=Path, help="another checkout's root to time instead of this one")
    parser.add_argument("--before", type=Path, help="a checkout to time beside it, in turns (e.g. the commit before)")
    args = parser.parse_args()
    sources: dict[str, Path | None] = {"after": args.source}
    if args.before is not None:
        sources = {"before": args.before, **sources}
    with tempfile.TemporaryDirectory(prefix="ampconfig-html-") as name:
        folder = Path(name)
        keep = folder / "keep.cfg"
        keep.write_text(KEEP_DTYPE, encoding="utf-8")
        measured = _measured(folder, keep, args.nodes, args.repeat, sources, args.browser)
    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "checkouts": {label: str(source) if source else "this checkout" for label, source in sources.items()},
        **measured,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
