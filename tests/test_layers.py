"""The house (docs/design.md §10): each package imports only packages below it; no import runs back up. Read from
the source (every ``import ampconfig.X`` and ``from ampconfig.X import``, lazy ones inside functions included)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import ampconfig

#: Each top-level package or module of ampconfig and its level; an import must go to a lower level, or stay in its
#: own package. model_io (the ONNX model in and out) reads and writes through files (safe file I/O), opinfo finds
#: its data through files (data_dirs), and report reads what diagnose and lock found (data in, text out). worker (the
#: process boundary to ONNX Runtime) stands just above model_io: the op info probes ask it, and inputs (the users'
#: input data) stand above the settings that name them.
LEVELS: dict[str, float] = {
    "dtypes": 0,
    "version": 0,
    "domains": 0,
    "errors": 0,
    "contracts": 0,
    "gc_pause": 0,
    "value_counts": 0,
    "memory": 0.25,
    "precision_modes": 0.5,
    "examples": 1,
    "files": 1,
    "model_io": 1.1,
    "worker": 1.25,
    "opinfo": 1.5,
    "documents": 2,
    "inputs": 4.5,
    "settings": 8.5,
    "decide": 3,
    "rewrite": 5,
    "instrument": 6,
    "runner": 7,
    "engine": 8,
    "api": 9,
    "ir_pass": 9,
    "prove": 9,
    "diagnose": 10,
    "lock": 10,
    "report": 11,
    "cli": 12,
    "__init__": 13,
    "entry": 13,
    "__main__": 14,
}


def _top(name: str) -> str:
    return name.split(".")[1] if name.startswith("ampconfig.") else name


def test_no_import_runs_back_up() -> None:
    package = Path(ampconfig.__file__).parent
    upward, unplaced = [], []
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0]
        here = part.removesuffix(".py")
        if here not in LEVELS:
            unplaced.append(here)
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ampconfig."):
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names if alias.name.startswith("ampconfig.")]
            else:
                continue
            for target in map(_top, targets):
                if target == here:
                    continue
                if target not in LEVELS:
                    unplaced.append(target)
                elif LEVELS[target] >= LEVELS[here]:
                    upward.append(f"{path.relative_to(package)}:{node.lineno} imports ampconfig.{target}")
    assert unplaced == [], "place these in LEVELS (and in docs/design.md §10)"
    assert upward == []


def test_nothing_below_the_settings_imports_them() -> None:
    """The settings are the edge of the work (issue 46): the engine, the runner, the steps and the decision receive
    the choices and the measured facts they read, field by field, never a :class:`Settings` nor anything else of
    ``settings/``. On main engine/in_place.py, runner/inputs.py, runner/sessions.py and runner/proof.py did."""
    package = Path(ampconfig.__file__).parent
    below = {name for name, level in LEVELS.items() if level < LEVELS["settings"]}
    importers = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0].removesuffix(".py") not in below:
            continue
        importers.extend(
            f"{path.relative_to(package)}: {name}"
            for name in sorted(_imported_modules(path))  # lazy and TYPE_CHECKING imports included
            if name == "ampconfig.settings" or name.startswith("ampconfig.settings.") or name.endswith(".Settings")
        )
    assert {"engine", "runner", "rewrite", "decide"} <= below
    assert importers == []


def test_nothing_inside_the_package_imports_the_api() -> None:
    """``ampconfig.api`` is the users' facade over the engine: the package's own code goes to the engine itself
    (the package root's lazy public names aside, which are the facade's)."""
    package = Path(ampconfig.__file__).parent
    importers = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if "ampconfig.api" in names:
                importers.append(f"{path.relative_to(package)}:{node.lineno}")
    assert importers == []


def test_every_name_the_benchmarks_and_examples_import_from_ampconfig_exists() -> None:
    """Moving a module moves its importers' lines too: the benchmarks and examples run outside the suite, so a name
    they import from a module that moved would break only when someone runs them."""
    root = Path(ampconfig.__file__).parent.parent
    missing = []
    for path in sorted([*root.glob("benchmarks/*.py"), *root.glob("examples/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ampconfig"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ModuleNotFoundError:
                        missing.append(f"{path.relative_to(root)}:{node.lineno} {node.module}.{alias.name}")
    assert missing == []


def _imported_modules(path: Path) -> set[str]:
    """The ampconfig modules a source file imports, lazy ones inside functions and TYPE_CHECKING ones included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ampconfig."):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # a module imported from a package
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("ampconfig."))
    return names


def _reached_from(start: str) -> set[str]:
    """Every ampconfig module that ``start`` may import, however late (itself included)."""
    package = Path(ampconfig.__file__).parent
    seen: set[str] = set()
    waiting = [start]
    while waiting:
        name = waiting.pop()
        parts = name.split(".")[1:]
        path = package.joinpath(*parts).with_suffix(".py")
        if not path.exists():
            path = package.joinpath(*parts, "__init__.py")
        if name in seen or not path.exists():
            continue  # a name imported from a module, not a module
        seen.add(name)
        waiting.extend(_imported_modules(path))
    return seen


def test_the_onnx_runtime_worker_counts_values_without_decide() -> None:
    """The worker (``worker/server.py``, where a calibration's values are counted beside ONNX Runtime) and every
    ampconfig module it may import, however late, import nothing of decide/: it counts with the ground's
    ``value_counts``."""
    seen = _reached_from("ampconfig.worker.server")
    assert "ampconfig.value_counts" in seen
    assert sorted(name for name in seen if _top(name) == "decide") == []


def test_the_onnx_runtime_server_imports_nothing_above_its_package() -> None:
    """The worker's server runs generic requests (a session from bytes, a run of feeds, timed runs, counts of
    values): it and every ampconfig module it may import are the worker package's own or single ground modules
    (errors, value_counts), nothing of runner/, opinfo/ or the settings. On main at 73f8c17 it imported
    ``runner.timing``, and through it ``documents.numeric_limits``."""
    reached = _reached_from("ampconfig.worker.server")
    above = sorted(
        name
        for name in reached
        if not name.startswith("ampconfig.worker.") and not (name.count(".") == 1 and LEVELS[_top(name)] == 0)
    )
    assert "ampconfig.worker.channel" in reached
    assert above == []


def test_only_the_worker_client_imports_the_server() -> None:
    """This process never imports onnxruntime: the server module is started by the client in its own process, and
    nothing else of ampconfig imports it (the op info probes ask the client; on main at 73f8c17 nothing checked
    this)."""
    package = Path(ampconfig.__file__).parent
    importers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "ampconfig.worker.server" in _imported_modules(path) and path.name != "server.py"
    )
    assert importers == ["worker/client.py"]


#: What reading a user's file looks like in source: opening a path, numpy's and json's loaders, the bounded readers.
_FILE_READS = ("open(", "open_regular", "np.load", "numpy.load", "json.load", "read_bytes", "read_text", "read_bounded")


def test_no_runner_module_reads_a_users_file() -> None:
    """runner/ holds sessions, proof runs and timing; the users' input data (``.npy``/``.npz``, data folders,
    Polygraphy JSON, string ``.txt`` files) is read in inputs/, bounded. On main at 73f8c17 nine runner/ modules
    matched (array_files, datasets, inputs, strings, kernels, kernel_dump, memory, ort_worker, worker)."""
    runner = Path(ampconfig.__file__).parent / "runner"
    reads = [
        f"runner/{path.name}:{number} {line.strip()}"
        for path in sorted(runner.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(read in line for read in _FILE_READS)
    ]
    assert len(list(runner.glob("*.py"))) > 1
    assert reads == []
