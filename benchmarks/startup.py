"""Start-up as a user meets it: fresh processes, wall time of the whole process, rounds interleaved.

Issue 21 asks ``ampconfig --help`` and ``ampconfig validate`` of a small file to start in <= 0.3 s. The same run
times what nothing in ampconfig can go below: the interpreter alone, and the imports of the libraries a ``rewrite``
must load (onnx, onnx-ir with the sympy it imports, numpy, typer with the pydantic adapters it builds every
parameter with, ONNX Runtime for the float16 Cast kernel, rich) and the imports of a peer's process (onnx and the
converter). On a small model, those fixed costs bound how far ahead of a peer's own process a ``rewrite`` can be.
The commands that read a model are timed on the packaged ``small_convnet`` example: the command and the API.

Run by hand (from a folder outside the source tree, or ``python -m ampconfig`` would import the current folder):

    python benchmarks/startup.py --rounds 7 [--json startup.json]
    python benchmarks/startup.py --imports --rounds 9 [--before /tmp/base-tree]
    python benchmarks/startup.py --peer /tmp/peer/bin/python --rounds 7 [--before /tmp/base-tree]
    python benchmarks/startup.py --tree --rounds 3 [--before /tmp/base-tree]

It prints a Markdown table (best and median of the rounds per command) and, with ``--json``, every run.

``--imports`` times what issue 45's item 1 bounds instead: our own modules' cost on top of the libraries, as the
median fresh-process time of ``import ampconfig.api`` (and of the modules ``rewrite`` and ``run`` import before they
open the model) minus that of importing the same processes' libraries alone (``import onnx_ir``, and for the
commands the CLI's libraries too), each pair taking turns within a round.

``--peer PYTHON`` times, in turns, ``ampconfig rewrite`` of a CNN built here (50 residual blocks of a 3x3 Conv of
32 channels, a Relu and an Add: 150 nodes, 1.8 MB of weights; allow_mix_precision, target cpu) and the whole process
of onnxconverter-common (installed in PYTHON's environment, e.g. a throwaway venv) loading, converting
(``keep_io_types=True``) and saving the same model, and prints the medians and their ratio.

``--tree`` prints ``python -X importtime -c "import ampconfig.api"`` (with ``--before``, the base's too, taking
turns): the run of median total among the rounds, pruned to imports of 30 ms or more, 5 levels deep, and below it
the count of modules, of ours, and our modules' own time summed (each module's least over the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx
from large_model import ampconfig_command

from ampconfig.examples import example_path

#: What ``ampconfig rewrite`` loads that is not ampconfig.
REWRITE_DEPENDENCIES = "import numpy, onnx, onnx_ir, onnxruntime, pydantic, rich.console, typer, typer._adapters"
#: The API's first rewrite in a process: its imports, then one small model.
API_REWRITE = "import sys, ampconfig; ampconfig.rewrite_model(sys.argv[1], 'force_fp16')"
#: What a peer's own process loads before it converts (onnxconverter-common; ORT's converter is in onnxruntime).
PEER_IMPORTS = "import onnx, onnxconverter_common.float16"
#: The CLI's own libraries, which ``rewrite`` and ``run`` load whatever ampconfig does.
CLI_LIBRARIES = "import onnx_ir, typer, typer._adapters, rich.console, rich.table"
#: What the ``rewrite`` command imports before it opens the model: its command module, then the modules its
#: function imports (``cli/rewrite_cmd.py``), the engine among them.
REWRITE_IMPORTS = (
    "from ampconfig.cli import load_commands; load_commands(['rewrite']); "
    "import ampconfig.model_io.models, ampconfig.settings.declared_files, ampconfig.settings.resolve, "
    "ampconfig.engine.in_place, ampconfig.prove.calibration"
)
#: The same for ``run`` (``cli/run_cmd.py``; ONNX Runtime itself is imported by the worker process, not here;
#: tune's forecast after a FAIL only, the lock's format with ``--lock-out`` only; the engine's, the samples', the
#: proof's and the report's modules once the model is open: ``tests/test_startup.py`` checks what is loaded when it
#: opens).
RUN_IMPORTS = (
    "from ampconfig.cli import load_commands; load_commands(['run']); "
    "import ampconfig.model_io.models, ampconfig.settings.declared_files, ampconfig.prove.run"
)
#: What ``run`` imported before it opened the model at 80483c2 (``prove.run`` loaded the engine, the calibration and
#: the proof's modules, the command the report's).
RUN_IMPORTS_AT_80483C2 = RUN_IMPORTS + ", ampconfig.prove.calibration, ampconfig.report.run_report"
#: Each pair: (ours, the libraries alone), timed in the same round; a third statement is the ``--before`` tree's,
#: where it imported more.
IMPORT_PAIRS: dict[str, tuple[str, ...]] = {
    "import ampconfig.api": ("import ampconfig.api", "import onnx_ir"),
    "rewrite's imports": (REWRITE_IMPORTS, CLI_LIBRARIES),
    "run's imports": (RUN_IMPORTS, CLI_LIBRARIES, RUN_IMPORTS_AT_80483C2),
}


def commands(mixlist: Path, output: Path) -> dict[str, list[str]]:
    ampconfig = ampconfig_command()
    example = str(example_path("small_convnet"))
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "rewrite's dependencies, imported": [sys.executable, "-c", REWRITE_DEPENDENCIES],
        "occ's process, imports only": [sys.executable, "-c", PEER_IMPORTS],
        "ampconfig --help": [*ampconfig, "--help"],
        "ampconfig validate (one-line mixlist)": [*ampconfig, "validate", str(mixlist)],
        "ampconfig rewrite --help": [*ampconfig, "rewrite", "--help"],
        "import onnx_ir (and the sympy it imports)": [sys.executable, "-c", "import onnx_ir"],
        "ampconfig rewrite small_convnet.onnx -m force_fp16": [
            *ampconfig,
            "rewrite",
            example,
            "-o",
            str(output),
            "-m",
            "force_fp16",
        ],
        "python -c 'ampconfig.rewrite_model(small_convnet.onnx)'": [sys.executable, "-c", API_REWRITE, example],
    }


def _user_environment() -> dict[str, str]:
    """Bytecode caches written and read, as after a pip install (a development shell may turn them off)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, timeout=120)
    return time.perf_counter() - start, done.returncode


def _statement(pair: tuple[str, ...], side: str) -> str:
    """A pair's statement for a side: ours first, the libraries second, the ``--before`` tree's third (else ours)."""
    if side == "libraries":
        return pair[1]
    return pair[2] if side == "before" and len(pair) > 2 else pair[0]


def import_costs(rounds: int, env: dict[str, str], before: Path | None) -> None:
    """Print, per pair, the medians of each side (wall and CPU seconds of the whole process) and our modules' cost:
    the median of each round's difference, ours minus the libraries' (on a shared machine the CPU time moves far
    less with the load than the wall time). With ``before``, the same statements with that source tree's ampconfig
    (a ``git archive`` of the base) take turns with this one's, in the same rounds."""
    sides: dict[str, dict[str, str]] = {"libraries": env, "ours": env}
    if before is not None:
        sides["before"] = {**env, "PYTHONPATH": str(before)}
    table = {
        (name, side): ([sys.executable, "-c", _statement(pair, side)], side_env)
        for name, pair in IMPORT_PAIRS.items()
        for side, side_env in sides.items()
    }
    runs = _interleaved(table, rounds)
    print("| statement | wall median s | CPU median s | ours minus libraries: wall s | CPU s |")
    print("|---|---|---|---|---|")
    for name, (_, libraries, *_) in IMPORT_PAIRS.items():
        theirs = runs[(name, "libraries")]
        print(f"| `{libraries}` | {_median(theirs, 0):.3f} | {_median(theirs, 1):.3f} | | |")
        for side in [side for side in sides if side != "libraries"]:
            mine = runs[(name, side)]
            wall, cpu = (statistics.median(m[i] - t[i] for m, t in zip(mine, theirs, strict=True)) for i in (0, 1))
            label = name if side == "ours" else f"{name}, before"
            print(f"| {label} | {_median(mine, 0):.3f} | {_median(mine, 1):.3f} | **{wall:.3f}** | **{cpu:.3f}** |")


#: onnxconverter-common's whole process: load, convert, save (argv: model, output).
PEER_PROCESS = (
    "import sys, onnx; from onnxconverter_common import float16; "
    "onnx.save(float16.convert_float_to_float16(onnx.load(sys.argv[1]), keep_io_types=True), sys.argv[2])"
)


def residual_cnn(path: Path, blocks: int = 50, channels: int = 32) -> Path:
    """``blocks`` residual blocks (3x3 Conv with bias, Relu, Add of the block's input) on a 1xCx32x32 image."""
    import numpy as np
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for index in range(blocks):
        kernel = rng.standard_normal((channels, channels, 3, 3)) * (0.5 / (9 * channels)) ** 0.5
        weights.append(numpy_helper.from_array(kernel.astype(np.float32), f"w{index}"))
        weights.append(numpy_helper.from_array(np.zeros(channels, np.float32), f"b{index}"))
        conv, relu, out = f"c{index}", f"r{index}", f"y{index}"
        nodes.append(oh.make_node("Conv", [previous, f"w{index}", f"b{index}"], [conv], name=conv, pads=[1] * 4))
        nodes.append(oh.make_node("Relu", [conv], [relu], name=relu))
        nodes.append(oh.make_node("Add", [relu, previous], [out], name=f"add{index}"))
        previous = out
    image = [1, channels, 32, 32]
    graph = oh.make_graph(
        nodes,
        "residual_cnn",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, image)],
        [oh.make_tensor_value_info(previous, TensorProto.FLOAT, image)],
        weights,
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def peer_ratio(peer_python: str, rounds: int, env: dict[str, str], before: Path | None, folder: Path) -> None:
    """Print the medians of ``ampconfig rewrite`` and of the peer's whole process on the CNN, and their ratio."""
    model = residual_cnn(folder / "cnn.onnx")
    rewrite = [*ampconfig_command(), "rewrite", str(model), "-o", str(folder / "ours.onnx")]
    rewrite += ["-m", "allow_mix_precision", "--target", "cpu"]
    table = {
        ("cnn", "ampconfig rewrite"): (rewrite, env),
        # The peer loads nothing in ONNX Runtime: the same command without its load check (issue 43), for scale.
        ("cnn", "ampconfig rewrite --no-load-check"): ([*rewrite, "--no-load-check"], env),
        ("cnn", "onnxconverter-common's process"): (
            [peer_python, "-c", PEER_PROCESS, str(model), str(folder / "peer.onnx")],
            env,
        ),
    }
    if before is not None:
        table[("cnn", "ampconfig rewrite, before")] = (rewrite, {**env, "PYTHONPATH": str(before)})
        table[("cnn", "ampconfig rewrite --no-load-check, before")] = (
            [*rewrite, "--no-load-check"],
            {**env, "PYTHONPATH": str(before)},
        )
    runs = _interleaved(table, rounds)
    peer = runs[("cnn", "onnxconverter-common's process")]
    peer_wall, peer_cpu = _median(peer, 0), _median(peer, 1)
    print(f"CNN: {model.stat().st_size / 1e6:.2f} MB, {len(onnx.load(model).graph.node)} nodes")
    print("| process | wall median s | CPU median s | wall / peer's | CPU / peer's |")
    print("|---|---|---|---|---|")
    for (_, name), each in runs.items():
        wall, cpu = _median(each, 0), _median(each, 1)
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / peer_wall:.2f}x | {cpu / peer_cpu:.2f}x |")


#: One ``-X importtime`` line: (own microseconds, cumulative microseconds, depth, module).
ImportLine = tuple[int, int, int, str]


def _import_lines(env: dict[str, str]) -> list[ImportLine]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ampconfig.api"], capture_output=True, text=True, env=env
    )
    lines = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        lines.append((int(own), int(cumulative), depth, name.strip()))
    return lines


def import_trees(rounds: int, env: dict[str, str], before: Path | None) -> None:
    """Print the pruned ``-X importtime`` tree of ``import ampconfig.api`` for each side (see the module's doc)."""
    sides = {"after": env} if before is None else {"before": {**env, "PYTHONPATH": str(before)}, "after": env}
    for side_env in sides.values():  # untimed: bytecode caches written
        _import_lines(side_env)
    trees: dict[str, list[list[ImportLine]]] = {side: [] for side in sides}
    for _ in range(rounds):
        for side, side_env in sides.items():
            trees[side].append(_import_lines(side_env))
    for side, runs in trees.items():
        runs.sort(key=lambda lines: max(cumulative for _, cumulative, depth, _ in lines if depth == 0))
        shown = runs[len(runs) // 2]
        ours: dict[str, int] = {}
        for lines in runs:
            for own, _, _, name in lines:
                if name.startswith("ampconfig"):
                    ours[name] = min(own, ours.get(name, own))
        print(f"{side}: {len(shown)} modules, {len(ours)} ours, their own time {sum(ours.values()) / 1000:.0f} ms")
        print("```")
        # -X importtime prints a module after what it imports: reversed, each parent comes before its children.
        for own, cumulative, depth, name in reversed(shown):
            if cumulative >= 30_000 and depth < 5:
                print(f"{cumulative // 1000:7d} ms cum {own // 1000:6d} ms self  {'  ' * depth}{name}")
        print("```")


def _median(runs: list[tuple[float, float]], index: int) -> float:
    return statistics.median(run[index] for run in runs)


def _interleaved(
    table: dict[tuple[str, str], tuple[list[str], dict[str, str]]], rounds: int
) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Every command once per round, in turn, after one untimed round: (wall, CPU) seconds of each run. A failed
    command ends the benchmark."""
    for name, (command, env) in table.items():  # untimed: bytecode caches written, files in the page cache
        if _wall(command, env)[1] != 0:
            raise SystemExit(f"{name} failed: {command}")
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, (command, env) in table.items():
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds, _ = _wall(command, env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs[name].append((seconds, after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (one run of each per round)")
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--imports", action="store_true", help="time our modules' cost on top of the libraries")
    parser.add_argument(
        "--before", type=Path, help="with --imports, --peer or --tree: a source tree of the base, timed alongside"
    )
    parser.add_argument("--peer", help="a Python with onnxconverter-common: time rewrite against its process")
    parser.add_argument("--tree", action="store_true", help="print the -X importtime tree of import ampconfig.api")
    args = parser.parse_args()
    env = _user_environment()
    if args.tree:
        import_trees(args.rounds, env, args.before)
        return
    if args.peer:
        print(f"{platform.node()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds")
        with tempfile.TemporaryDirectory() as folder:
            peer_ratio(args.peer, args.rounds, env, args.before, Path(folder))
        return
    if args.imports:
        print(f"{platform.node()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds")
        import_costs(args.rounds, env, args.before)
        return
    with tempfile.TemporaryDirectory() as folder:
        mixlist = Path(folder) / "mixlist.json"
        mixlist.write_text(json.dumps({"black-list": {"to-add": ["Softmax"]}}))
        table = commands(mixlist, Path(folder) / "rewritten.onnx")
        for command in table.values():  # untimed: bytecode caches written, files in the page cache
            _wall(command, env)
        runs: dict[str, list[float]] = {name: [] for name in table}
        failed: dict[str, int] = {}
        loads = []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for name, command in table.items():
                seconds, code = _wall(command, env)
                runs[name].append(seconds)
                if code != 0:
                    failed[name] = code
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, load {min(loads):.1f}-"
        f"{max(loads):.1f}, {args.rounds} interleaved rounds"
    )
    print("| command | best s | median s |")
    print("|---|---|---|")
    for name, seconds in runs.items():
        note = f" (exit {failed[name]})" if name in failed else ""
        print(f"| {name}{note} | {min(seconds):.3f} | {statistics.median(seconds):.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "runs": runs, "failed": failed}, indent=1))


if __name__ == "__main__":
    main()
