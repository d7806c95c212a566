"""Start-up: each command imports what it needs and nothing more. ``ampconfig --help`` and ``validate`` load no
onnx, onnx-ir, numpy or ONNX Runtime; a rewrite loads onnx-ir without sympy (``ampconfig/deferred_imports.py``),
and sympy still works for code that does use it. Checked in fresh interpreters, by what ``sys.modules`` holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.fresh_process import command_in_fresh_process
from tests.graphs import transformer_block

HEAVY = ("onnx", "onnx_ir", "onnxruntime", "numpy", "sympy")


@pytest.mark.parametrize(
    "args", [["--help"], ["rewrite", "--help"], ["run", "--help"], ["ops-info", "show", "--help"]], ids=" ".join
)
def test_help_loads_no_model_machinery(tmp_path: Path, args: list[str]) -> None:
    outcome = command_in_fresh_process(tmp_path, *args)
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "Usage" in outcome["stdout"]
    assert not outcome["modules"] & set(HEAVY)  # (typer itself imports pydantic for a subcommand's help)


def test_validate_of_a_mixlist_loads_no_model_machinery(tmp_path: Path) -> None:
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["Erf"]}, "white-list": {"to-remove": ["Conv"]}}))
    outcome = command_in_fresh_process(tmp_path, "validate", mixlist, "--format", "json")
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert json.loads(outcome["stdout"])["ok"] is True
    assert not outcome["modules"] & set(HEAVY)
    # Only the validate command is built, and none of the session config's or the lock's models.
    commands = {name.rpartition(".")[2] for name in outcome["modules"] if name.endswith("_cmd")}
    assert commands == {"validate_cmd"}
    assert not outcome["modules"] & {"ampconfig.settings.config", "ampconfig.settings.lock_file", "yaml"}


def test_each_command_name_registers_that_command() -> None:
    """COMMAND_MODULES, which the script reads to import one command's modules, names every command the app has
    and only its own modules."""
    from ampconfig.cli import COMMAND_MODULES, app

    registered = {info.name: info.callback for info in app.registered_commands}
    registered.update({info.name: info.typer_instance for info in app.registered_groups})
    assert set(registered) == set(COMMAND_MODULES)
    for name, info in registered.items():
        callbacks = [c.callback for c in info.registered_commands] if name == "ops-info" else [info]
        modules = {callback.__module__.rpartition(".")[2] for callback in callbacks}
        assert modules <= set(COMMAND_MODULES[name]), name


@pytest.mark.parametrize(
    ("args", "command"), [(["-v", "lists", "--target", "cpu"], "lists"), (["ops-info", "show", "Relu"], "ops-info")]
)
def test_a_command_line_builds_only_the_command_it_names(tmp_path: Path, args: list[str], command: str) -> None:
    """Global options before the command are skipped."""
    from ampconfig.cli import COMMAND_MODULES

    outcome = command_in_fresh_process(tmp_path, *args)
    assert outcome["exit_code"] == 0, outcome["stderr"]
    commands = {name.rpartition(".")[2] for name in outcome["modules"] if name.endswith("_cmd")}
    assert commands == set(COMMAND_MODULES[command])


def test_a_misspelt_command_builds_every_command(tmp_path: Path) -> None:
    """An unknown command is a usage error, with every command built, so click can suggest the closest."""
    from ampconfig.cli import COMMAND_MODULES

    outcome = command_in_fresh_process(tmp_path, "valdate")
    assert outcome["exit_code"] == 2
    commands = {name.rpartition(".")[2] for name in outcome["modules"] if name.endswith("_cmd")}
    assert commands == {module for modules in COMMAND_MODULES.values() for module in modules}


def test_validate_still_knows_onnx_ops_the_op_info_does_not_list(tmp_path: Path) -> None:
    """The ONNX schemas are read when an op is not in the target's op info: a real ONNX op passes, a typo warns."""
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["GridSample", "Softmaxx"]}}))
    outcome = command_in_fresh_process(tmp_path, "validate", mixlist, "--format", "json")
    messages = [problem["message"] for problem in json.loads(outcome["stdout"])["problems"]]
    assert [m for m in messages if "Softmaxx" in m] and not [m for m in messages if "GridSample" in m], messages
    assert "onnx" in outcome["modules"]


def test_rewrite_loads_onnx_ir_without_sympy_and_writes_a_valid_model(tmp_path: Path) -> None:
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    out = tmp_path / "out.onnx"
    outcome = command_in_fresh_process(
        tmp_path, "rewrite", model, "-o", out, "-m", "force_fp16", "--target", "cuda", "--json"
    )
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "onnx_ir" in outcome["modules"] and "sympy" not in outcome["modules"]
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_a_deferred_module_is_the_real_one_on_first_use(tmp_path: Path) -> None:
    """After the stand-ins are installed, onnx-ir's symbolic dimension arithmetic (which needs sympy) works, and a
    later ``import sympy`` is the real sympy."""
    script = """
import sys
from ampconfig.deferred_imports import _StandIn, defer_unused_imports
defer_unused_imports()
assert isinstance(sys.modules["sympy"], _StandIn)
import onnx_ir as ir
assert isinstance(sys.modules["sympy"], _StandIn)
print(ir.SymbolicDim("n") * 2 + 1)
import sympy
print(type(sympy.Symbol("x")).__name__, isinstance(sys.modules["sympy"], _StandIn))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2*n", "+", "1", "Symbol", "False"]


def test_the_api_defers_sympy_only_while_it_imports_onnx_ir(tmp_path: Path) -> None:
    """``ampconfig.rewrite_model`` imports onnx-ir without sympy, and leaves no stand-in behind: a sympy submodule
    imported first afterwards (as torch imports them) gets the real, initialised package, and onnx-ir's symbolic
    dimension arithmetic still works."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    script = f"""
import sys
import ampconfig
rewritten = ampconfig.rewrite_model({str(model)!r}, "force_fp16")
assert "onnx_ir" in sys.modules and "sympy" not in sys.modules and "onnx_ir._symbolic_shapes" not in sys.modules
import sympy.printing.str
import sympy
import onnx_ir as ir
from ampconfig.deferred_imports import _StandIn
assert not isinstance(sys.modules["sympy"], _StandIn)
print(ir.SymbolicDim("n") * 2 + 1, "|", sympy.Symbol("x") + 1, "|", len(rewritten.graph.node))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dims, symbol, nodes = done.stdout.strip().split(" | ")
    assert (dims, symbol) == ("2*n + 1", "x + 1") and int(nodes) > 0
