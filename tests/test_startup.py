"""Start-up: each command imports what it needs and nothing more. ``ampconfig --help`` and ``validate`` load no
onnx, onnx-ir, numpy or ONNX Runtime. Importing ampconfig changes no other module's import: ``sys.modules`` holds
only real modules, so a user's sympy (which onnx-ir imports) is the real package, whenever and from whichever
thread it is imported. Checked in fresh interpreters, by what ``sys.modules`` holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from ampconfig.cli import COMMAND_MODULES
from tests.fresh_process import command_in_fresh_process, script_in_fresh_process
from tests.graphs import transformer_block

HEAVY = ("onnx", "onnx_ir", "onnxruntime", "numpy", "sympy")
#: The modules of documents/ with no file format in them (constants and limits a rewrite uses).
LIGHT_FORMATS = {
    "ampconfig.documents",
    "ampconfig.documents.numeric_limits",
    "ampconfig.documents.document_limits",
}


#: The subcommands of the command groups (``ampconfig ops-info SUB``, ``ampconfig ranges SUB``).
GROUP_SUBCOMMANDS = {
    "ops-info": ("show", "apply-strategy", "probe", "import-table", "import-ascend", "import-kernels"),
    "ranges": ("merge",),
}
#: ``--help`` of the app, of every command and of every group's subcommand.
HELP_LINES = [
    ["--help"],
    *([name, "--help"] for name in COMMAND_MODULES),
    *([group, sub, "--help"] for group, subs in GROUP_SUBCOMMANDS.items() for sub in subs),
]
#: What only measuring (instrument/), explaining and reporting (report/) or diagnosing (diagnose/) uses.
NOT_FOR_A_REWRITE = ("ampconfig.instrument", "ampconfig.report", "ampconfig.diagnose")


def _under(modules: set[str], packages: tuple[str, ...]) -> set[str]:
    return {name for name in modules if name in packages or name.startswith(tuple(p + "." for p in packages))}


@pytest.mark.parametrize("args", HELP_LINES, ids=" ".join)
def test_help_loads_no_model_machinery(tmp_path: Path, args: list[str]) -> None:
    outcome = command_in_fresh_process(tmp_path, *args)
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "Usage" in outcome["stdout"]
    assert not outcome["modules"] & set(HEAVY)  # (typer itself imports pydantic for a subcommand's help)


def test_the_group_subcommands_listed_are_the_groups_own() -> None:
    """HELP_LINES reaches every subcommand: GROUP_SUBCOMMANDS names each group's, as the app registers them."""
    from ampconfig.cli import app

    groups = {info.name: info.typer_instance for info in app.registered_groups}
    assert set(groups) == set(GROUP_SUBCOMMANDS)
    for name, group in groups.items():
        assert group is not None
        assert {info.name for info in group.registered_commands} == set(GROUP_SUBCOMMANDS[name]), name


def test_schema_loads_no_model_machinery(tmp_path: Path) -> None:
    """It prints the formats' JSON schemas: no model library."""
    outcome = command_in_fresh_process(tmp_path, "schema", "mixlist")
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert json.loads(outcome["stdout"])["type"] == "object"
    assert not outcome["modules"] & set(HEAVY)
    commands = {name.rpartition(".")[2] for name in outcome["modules"] if name.endswith("_cmd")}
    assert commands == {"schema_cmd"}


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_lists_loads_no_onnx_runtime(tmp_path: Path, target: str) -> None:
    """The op lists come from the op info file: no ONNX Runtime, nothing of measuring or diagnosing. (It loads
    onnx-ir: the mixlist is applied by the engine's ``effective_lists``, whose module imports the rewrite's.) On
    main at ea62462 it loaded the ONNX Runtime worker's module (runner.worker, now worker.client)."""
    outcome = command_in_fresh_process(tmp_path, "lists", "--target", target, "--json")
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert json.loads(outcome["stdout"])
    assert "onnxruntime" not in outcome["modules"]
    assert not _under(outcome["modules"], ("ampconfig.instrument", "ampconfig.diagnose", "ampconfig.worker.client"))
    commands = {name.rpartition(".")[2] for name in outcome["modules"] if name.endswith("_cmd")}
    assert commands == {"lists_cmd"}


def test_the_api_loads_no_measuring_reporting_or_file_format_module() -> None:
    """``import ampconfig.api`` loads nothing of instrument/, report/ or diagnose/, none of the file formats (their
    pydantic models: imported when a file is given) and not the ONNX Runtime worker's process machinery (imported
    when a model runs). On main at ea62462 it loaded instrument.expose and instrument.scopes, 14 modules of
    formats/ (now documents/), runner.worker and runner.channel (now worker.client and worker.channel)."""
    done = script_in_fresh_process("import sys, ampconfig.api; print(' '.join(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr
    modules = set(done.stdout.split())
    assert "ampconfig.api" in modules and "onnx_ir" in modules
    assert not _under(modules, NOT_FOR_A_REWRITE)
    assert not _under(modules, ("ampconfig.documents",)) - LIGHT_FORMATS
    assert not modules & {"ampconfig.worker.client", "ampconfig.worker.channel", "ampconfig.documents.parsing"}


def test_a_rewrite_loads_no_measuring_or_diagnosing_module(tmp_path: Path) -> None:
    """A file-to-file ``rewrite`` with no data loads nothing of instrument/ or diagnose/, of report/ only the table
    it prints, and not the ranges file's format; the API's first rewrite with no file loads no file format either.
    On main at ea62462 the command loaded formats.ranges_file (through prove.calibration) and the API's rewrite
    instrument.expose, instrument.scopes and the formats."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    outcome = command_in_fresh_process(
        tmp_path, "rewrite", model, "-o", tmp_path / "out.onnx", "-m", "allow_mix_precision"
    )
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "ampconfig.engine.in_place" in outcome["modules"]
    assert _under(outcome["modules"], NOT_FOR_A_REWRITE) == {"ampconfig.report", "ampconfig.report.tables"}
    assert "ampconfig.documents.ranges_file" not in outcome["modules"]  # no --ranges, no data: none read or written
    done = script_in_fresh_process(
        f"import sys, ampconfig; ampconfig.rewrite_model({str(model)!r}, 'allow_mix_precision');"
        " print(' '.join(sorted(sys.modules)))"
    )
    assert done.returncode == 0, done.stderr
    modules = set(done.stdout.split())
    assert "ampconfig.engine.in_place" in modules
    assert not _under(modules, NOT_FOR_A_REWRITE)
    assert not _under(modules, ("ampconfig.documents",)) - LIGHT_FORMATS


#: The session config's format and the file formats it reads (a mixlist, a customize file, keep_dtype), which a
#: command needs only when a config or such a file is given.
SESSION_FORMATS = {
    "ampconfig.documents.session_config",
    "ampconfig.documents.parsing",
    "ampconfig.documents.mixlist_file",
    "ampconfig.documents.customize_dtypes_file",
    "ampconfig.documents.keep_dtype_file",
}


def test_the_api_and_its_first_rewrite_load_no_pydantic(tmp_path: Path) -> None:
    """The built-in op info is read without pydantic (``opinfo.library``): ``import ampconfig.api`` and a first
    rewrite with no file load none; a user's file brings it. On main at 73f8c17 ``opinfo.library`` imported it, and
    ``import ampconfig.api`` with it: about 50 ms of the 0.136 s CPU our modules cost on top of onnx-ir."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    done = script_in_fresh_process(
        "import sys, ampconfig.api; imported = 'pydantic' in sys.modules;"
        f" ampconfig.rewrite_model({str(model)!r}, 'allow_mix_precision');"
        " print(imported, 'pydantic' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_a_rewrite_loads_the_session_config_formats_only_with_a_config(tmp_path: Path) -> None:
    """Without a config (or a mixlist or customize file) a ``rewrite`` loads none of the session config's formats;
    with one it does, and the config's mode is the one used. On main at 73f8c17 ``settings.resolve`` imported them
    for every command."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    out = tmp_path / "out.onnx"
    plain = command_in_fresh_process(tmp_path, "rewrite", model, "-o", out, "--target", "cpu")
    assert plain["exit_code"] == 0, plain["stderr"]
    assert "onnx_ir" in plain["modules"] and not plain["modules"] & SESSION_FORMATS
    config = tmp_path / "ampconfig.json"
    config.write_text(json.dumps({"precision_mode": "force_fp16"}), encoding="utf-8")
    configured = command_in_fresh_process(tmp_path, "rewrite", model, "-o", out, "--target", "cpu", "--config", config)
    assert configured["exit_code"] == 0, configured["stderr"]
    assert "ampconfig.documents.session_config" in configured["modules"]
    assert "(force_fp16, target cpu)" in configured["stdout"] + configured["stderr"]


def test_a_run_that_passes_loads_no_diagnosing_module_nor_the_locks_format(tmp_path: Path) -> None:
    """``run`` imports tune's forecast (diagnose/) only after a FAIL, and the lock's format only with --lock-out.
    On main at 73f8c17 every run loaded diagnose.tune.forecast with 20 more modules of diagnose/ and instrument/,
    documents.lock_file and lock.record before it opened the model."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    outcome = command_in_fresh_process(
        tmp_path, "run", model, "-m", "allow_mix_precision", "--target", "cpu", "--warmup", "0", "--iterations", "1"
    )
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "PASS" in outcome["stdout"]
    assert not _under(outcome["modules"], ("ampconfig.diagnose",))
    assert not outcome["modules"] & {"ampconfig.documents.lock_file", "ampconfig.lock.record"}


#: What ``run`` needs only once the model is open: the engine (its decisions and the rewrite's steps, the value
#: ranges' calibration), the samples' modules (inputs/), the proof's (runner/), judging (``prove.verdict``,
#: ``prove.accuracy``), the load check and safety net, the accuracy copy's rounding (instrument/), the report
#: (``prove.outcome``, ``report.run_report``) and the JSON data set's scanner.
RUN_AFTER_OPENING = {
    "ampconfig.engine.in_place",
    "ampconfig.decide.plan",
    "ampconfig.rewrite.pipeline",
    "ampconfig.prove.calibration",
    "ampconfig.inputs.datasets",
    "ampconfig.inputs.feeds",
    "ampconfig.runner.proof",
    "ampconfig.runner.sessions",
    "ampconfig.runner.acceptance",
    "ampconfig.prove.verdict",
    "ampconfig.prove.accuracy",
    "ampconfig.prove.outcome",
    "ampconfig.engine.load_check",
    "ampconfig.engine.safety_net",
    "ampconfig.instrument.rounding",
    "ampconfig.report.run_report",
    "ampconfig.documents.parsing",
}
#: ``ampconfig run ARGS`` in this interpreter: prints what ``sys.modules`` held when the model file was first opened
#: (an audit hook on ``open``), then the command's exit code.
_MODULES_AT_OPENING = """
import json, os, sys
from ampconfig.cli import load_commands
model = os.path.abspath(sys.argv[1])
at_opening = []
def on_open(event, args):
    if event == "open" and not at_opening and isinstance(args[0], str) and os.path.abspath(args[0]) == model:
        at_opening.append(sorted(sys.modules))
sys.addaudithook(on_open)
try:
    load_commands(["run"])(["run", *sys.argv[1:]], prog_name="ampconfig")
    code = 0
except SystemExit as exc:
    code = exc.code
print(json.dumps({"at_opening": at_opening[0] if at_opening else None, "exit_code": code}))
"""


def test_run_loads_the_engine_proof_and_report_only_once_the_model_is_open(tmp_path: Path) -> None:
    """When ``run`` opens the model (and then passes) it has loaded none of RUN_AFTER_OPENING. On main at 80483c2
    all of them were loaded before the model was opened (``prove.run`` and ``prove.request`` imported them at module
    level, ``inputs.datasets`` the document scanner): 1,144 modules, 150 of ampconfig (63 now), 0.109 s CPU of
    our modules over the libraries (``benchmarks/startup.py --imports``)."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    args = [str(model), "-m", "allow_mix_precision", "--target", "cpu", "--warmup", "0", "--iterations", "1"]
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AT_OPENING, *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome["exit_code"] == 0, done.stderr
    assert "PASS" in done.stdout
    at_opening = set(outcome["at_opening"])
    assert {"ampconfig.prove.run", "ampconfig.prove.request", "onnx_ir"} <= at_opening
    assert not at_opening & RUN_AFTER_OPENING


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
    assert not outcome["modules"] & {"ampconfig.documents.session_config", "ampconfig.documents.lock_file", "yaml"}


def test_each_command_name_registers_that_command() -> None:
    """COMMAND_MODULES, which the script reads to import one command's modules, names every command the app has
    and only its own modules."""
    from ampconfig.cli import COMMAND_MODULES, app

    registered = {info.name: info.callback for info in app.registered_commands}
    groups = {info.name: info.typer_instance for info in app.registered_groups}  # ops-info, ranges
    registered.update(groups)
    assert set(registered) == set(COMMAND_MODULES)
    for name, info in registered.items():
        callbacks = [c.callback for c in info.registered_commands] if name in groups else [info]
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


def test_rewrite_writes_a_valid_model(tmp_path: Path) -> None:
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    out = tmp_path / "out.onnx"
    outcome = command_in_fresh_process(
        tmp_path, "rewrite", model, "-o", out, "-m", "force_fp16", "--target", "cuda", "--json"
    )
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "onnx_ir" in outcome["modules"]
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_sympy_submodules_import_after_a_rewrite(tmp_path: Path) -> None:
    """After ``import ampconfig.cli`` and a rewrite in the same process, the imports torch's exporters do (sympy's
    submodules first) work, and onnx-ir's symbolic dimension arithmetic too."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    script = f"""
import sys
import ampconfig, ampconfig.cli
rewritten = ampconfig.rewrite_model({str(model)!r}, "force_fp16")
import sympy.printing
from sympy.core.symbol import Symbol
import onnx_ir as ir
print(ir.SymbolicDim("n") * 2 + 1, "|", Symbol("x") + 1, "|", sympy.printing.sstr(Symbol("y") ** 2), "|",
      len(rewritten.graph.node))
"""
    done = script_in_fresh_process(script)
    assert done.returncode == 0, done.stderr
    dims, symbol, printed, nodes = done.stdout.strip().split(" | ")
    assert (dims, symbol, printed) == ("2*n + 1", "x + 1", "y**2") and int(nodes) > 0


def test_sympy_imports_from_a_thread_during_the_first_rewrite(tmp_path: Path) -> None:
    """A second thread imports sympy's submodules while the main thread makes the process's first
    ``ampconfig.rewrite_model`` call and imports the API (onnx-ir, and with it sympy): both succeed."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    script = f"""
import sys, threading, time
import ampconfig
failures = []
def import_sympy():
    deadline = time.monotonic() + 60
    while "ampconfig.api" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.001)  # until the main thread is importing the API (and with it onnx-ir and sympy)
    try:
        import sympy.printing
        from sympy.core.symbol import Symbol
        assert sympy.printing.sstr(Symbol("x") + 1) == "x + 1"
    except BaseException as exc:
        failures.append(repr(exc))
worker = threading.Thread(target=import_sympy)
worker.start()
rewritten = ampconfig.rewrite_model({str(model)!r}, "force_fp16")
worker.join()
print(failures, len(rewritten.graph.node))
"""
    done = script_in_fresh_process(script)
    assert done.returncode == 0, done.stderr
    failures, nodes = done.stdout.strip().rsplit(" ", 1)
    assert failures == "[]" and int(nodes) > 0
