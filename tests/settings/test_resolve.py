"""One settings resolver (``ampconfig/settings/resolve.py``): every command resolves the same settings from the same
config; flags win over the config, the config over the defaults; the decision target is not the device."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.session_config import Tolerance
from ampconfig.errors import AmpconfigError
from ampconfig.settings.resolve import (
    AUTO_DEVICE,
    DEFAULT_MODE,
    DEFAULT_SOURCE,
    DEFAULT_TARGET,
    Flags,
    require_config_files,
    resolve,
)
from tests.graphs import transformer_block

runner = CliRunner()

SETTINGS_LINE = "resolved settings: "

# Every setting differs from its default, so a command that ignored the config (or resolved on its own) shows.
CONFIG = """\
precision_mode_v2: mixed_float16
target: cpu
model: block.onnx
output: out/block.fp16.onnx
modify_mixlist: mixlist.json
keep_dtype: [OpType::LayerNormalization]
op_names: ascend
customize_dtypes: customize.cfg
keep_io_types: false
allow_tf32: true
clamp_values: true
data_max: 30000.0
tolerance: {rel_l2: 0.5, max_abs: 100.0}
run:
  device: cpu
  warmup: 0
  iterations: 1
  seed: 7
  shapes: {x: [2, 8, 32]}
"""
MIXLIST = {"black-list": {"to-add": ["Erf"]}}
CUSTOMIZE = "OpType::SoftmaxV2:InputDtype:float32,OutputDtype:float32\n"  # Ascend's name: op_names is ascend


@pytest.fixture(scope="module")
def session_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("session")
    onnx.save(transformer_block(), folder / "block.onnx")
    (folder / "mixlist.json").write_text(json.dumps(MIXLIST))
    (folder / "customize.cfg").write_text(CUSTOMIZE)
    (folder / "out").mkdir()
    config = folder / "session.yaml"
    config.write_text(CONFIG)
    return config


# What each command needs besides the config to get past its own checks (tune: an output for its answer).
COMMANDS: dict[str, list[str]] = {
    "run": ["run"],
    "rewrite": ["rewrite"],
    "explain": ["explain"],
    "compare": ["compare"],
    "tune": ["tune", "--max-runs", "6", "--keep-dtype-out", "{folder}/keep.cfg"],
    "lists": ["lists"],
    "validate": ["validate", "{config}"],
}


def _logged_settings(stderr: str) -> dict:
    lines = [line for line in stderr.splitlines() if SETTINGS_LINE in line]
    assert len(lines) >= 1, stderr
    return json.loads(lines[0].split(SETTINGS_LINE, 1)[1])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_resolves_the_same_settings(session_config: Path, command: str) -> None:
    """The acceptance test of the resolver: each command, given only the config, logs (-v) the settings it resolved;
    they are the settings `resolve` gives for the config: mode, target, device, model, mixlist, keep_dtype,
    keep_io_types, allow_tf32, tolerance, inputs, timing, and where each came from."""
    expected = resolve(Flags(config=session_config)).to_dict()
    args = [part.format(folder=session_config.parent, config=session_config) for part in COMMANDS[command]]
    if command != "validate":
        args += ["--config", str(session_config)]
    result = runner.invoke(app, ["-v", *args])
    assert result.exit_code in (0, 1), result.output  # the command did its work (1: a check it ran failed)
    assert _logged_settings(result.stderr) == expected
    if command not in ("lists", "validate"):  # the commands that decide decided with these settings
        decided = [line for line in result.stderr.splitlines() if "] decided " in line]
        assert decided and all("for allow_mix_precision_fp16 on target cpu" in line for line in decided), decided
    # and the settings are the config's, not defaults
    assert expected["precision_mode"] == "allow_mix_precision_fp16" and expected["target"] == "cpu"
    assert expected["device"] == "cpu" and expected["keep_io_types"] is False and expected["allow_tf32"] is True
    assert expected["keep_dtype"] == ["OpType::LayerNormalization"] and expected["op_names"] == "ascend"
    assert expected["clamp_values"] is True and expected["data_max"] == 30000.0
    assert expected["modify_mixlist"] == str(session_config.parent / "mixlist.json")
    assert expected["customize_dtypes"] == str(session_config.parent / "customize.cfg")
    assert expected["tolerance"] == {"rel_l2": 0.5, "max_abs": 100.0, "min_cosine": None}
    assert expected["inputs"]["seed"] == 7 and expected["inputs"]["shapes"] == {"x": [2, 8, 32]}
    from_config = {name for name, source in expected["sources"].items() if source == f"config {session_config}"}
    # The config names no .npz, no data set and no ranges file (and a config has no --input arrays); its shapes
    # are its own.
    assert set(expected["sources"]) - from_config == {"inputs", "data", "calibration_data", "arrays", "ranges"}
    assert "shapes" in from_config


def test_flags_win_over_the_config_and_say_so(session_config: Path) -> None:
    flags = Flags(config=session_config, precision_mode="force_fp16", target="CUDA", device="auto", tolerance=0.02)
    flags = dataclasses.replace(flags, modify_mixlist=None, keep_io_types=True, warmup=2, seed=3, shapes=("x=1x8x32",))
    with pytest.raises(AmpconfigError, match="does not accept a modify_mixlist") as raised:
        resolve(flags)  # the config's mixlist meets the flag's mode: located at the config's key
    assert raised.value.file == str(session_config) and raised.value.line == 5
    assert raised.value.json_path == "$.modify_mixlist" and "mode from --precision-mode" in raised.value.message

    settings = resolve(dataclasses.replace(flags, precision_mode="allow_mix_precision"))
    assert settings.precision_mode.value == "allow_mix_precision" and settings.target == "cuda"
    assert settings.device == AUTO_DEVICE and settings.keep_io_types is True and settings.warmup == 2
    assert settings.inputs.seed == 3 and dict(settings.inputs.shapes) == {"x": (1, 8, 32)}
    # --tolerance replaces rel_l2 only; the config's max_abs stays
    assert settings.tolerance == Tolerance(rel_l2=0.02, max_abs=100.0)
    assert settings.sources["precision_mode"] == "--precision-mode" and settings.sources["target"] == "--target"
    assert settings.sources["keep_dtype"] == f"config {session_config}"
    assert settings.iterations == 1 and settings.sources["iterations"] == f"config {session_config}"


def test_defaults_without_flags_or_config() -> None:
    settings = resolve(Flags())
    assert settings.precision_mode is DEFAULT_MODE and settings.target == DEFAULT_TARGET == "cuda"
    assert settings.device == AUTO_DEVICE and settings.example is not None and settings.model_path.is_file()
    assert settings.keep_io_types is True and settings.allow_tf32 is False and settings.tolerance == Tolerance()
    assert settings.sources["target"] == DEFAULT_SOURCE and settings.sources["device"] == DEFAULT_SOURCE
    assert any("is the default" in note for note in settings.notes)


def test_the_library_and_every_decision_command_share_the_default_target(tmp_path: Path) -> None:
    """Without a target named, the Python API decides for the same target as the command line does (one default,
    documented with the targets), and `ops-info show` shows that target's op info."""
    from ampconfig.api import rewrite_model, rewrite_model_detailed

    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    result = rewrite_model_detailed(model, "allow_mix_precision")
    assert result.target == resolve(Flags(model=model)).target == DEFAULT_TARGET
    for function in (rewrite_model, rewrite_model_detailed):
        assert inspect.signature(function).parameters["target"].default == DEFAULT_TARGET
    shown = runner.invoke(app, ["ops-info", "show", "MatMul", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["target"] == DEFAULT_TARGET


def test_settings_are_frozen() -> None:
    settings = resolve(Flags(target="cpu"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.target = "cuda"  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.sources["target"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (Flags(target="npu"), "unknown target 'npu'"),
        (Flags(device="tpu"), "unknown device 'tpu'"),
        (Flags(precision_mode="fp8"), "unknown precision mode 'fp8'"),
        (Flags(shapes=("x=-1x3",)), "dimension -1 is negative"),
        (Flags(input_files=("x=a.npy", "x=b.npy")), "--input x is given twice"),
        (Flags(shapes=("x=1x3", "x=2x3")), "--shape x is given twice"),
        (Flags(inputs_npz=Path("a.npz"), input_files=("x=a.npy",)), "--inputs and --input are given together"),
        (Flags(warmup=-1), "--warmup"),
        (Flags(tolerance=float("nan")), "--tolerance"),
    ],
)
def test_bad_flags_are_clear_errors(flags: Flags, message: str) -> None:
    with pytest.raises(AmpconfigError) as raised:
        resolve(flags)
    assert message in raised.value.message


def test_mixlist_flag_with_a_non_mixed_mode_names_the_flag_file(tmp_path: Path) -> None:
    mixlist = tmp_path / "m.json"
    mixlist.write_text(json.dumps(MIXLIST))
    with pytest.raises(AmpconfigError, match="does not accept a modify_mixlist") as raised:
        resolve(Flags(precision_mode="force_fp16", modify_mixlist=mixlist))
    assert raised.value.file == str(mixlist)


def test_config_target_and_device_are_independent(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("precision_mode: force_fp16\ntarget: cuda\nrun: {device: cpu}\n")
    settings = resolve(Flags(config=config))
    assert (settings.target, settings.device) == ("cuda", "cpu")
    assert resolve(Flags(config=config, device="auto")).target == "cuda"  # the device never changes the target


def test_a_config_s_missing_file_says_how_its_path_was_resolved_a_flag_s_does_not(tmp_path: Path) -> None:
    """Issue 31: the "relative paths in a config..." hint was printed for paths given on the command line; and a
    config's run.data was read relative to the working directory, not to the config."""
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "samples").mkdir()
    config = folder / "session.yaml"
    config.write_text("model: m.onnx\nmodify_mixlist: mixlist.json\nrun:\n  data: samples\n")
    settings = resolve(Flags(config=config))
    assert settings.inputs.data == folder / "samples"  # relative to the config, as every path in it
    with pytest.raises(AmpconfigError, match="mixlist file not found") as raised:
        require_config_files(settings)
    assert raised.value.file == str(folder / "mixlist.json")
    hint = raised.value.hint or ""
    assert "`modify_mixlist` in the config" in hint and "config file's folder" in hint
    given = runner.invoke(app, ["lists", "--modify-mixlist", str(tmp_path / "nope.json")])
    assert given.exit_code == 2 and "nope.json: mixlist file not found" in given.stderr
    assert given.stderr.rstrip().endswith("mixlist file not found (check the path)")


def test_the_settings_read_the_rewrites_options_once(session_config: Path) -> None:
    """The settings hold the choices as the user named them (the files by their paths, what the lock records);
    what the rewrite reads of them is one RewriteOptions with those files read, once (issue 46, item 4); the
    ranges file and its margin stay the commands' to read."""
    from ampconfig.decide.rewrite_options import RewriteOptions

    settings = resolve(Flags(config=session_config))
    assert settings.keep_dtype == ("OpType::LayerNormalization",)
    assert settings.modify_mixlist == session_config.parent / "mixlist.json"
    assert settings.customize_dtypes == session_config.parent / "customize.cfg"
    options = settings.rewrite_options
    assert isinstance(options, RewriteOptions) and settings.rewrite_options is options
    assert options.precision_mode is settings.precision_mode and options.target == settings.target == "cpu"
    assert (options.op_names, options.keep_io_types, options.clamp_values) == ("ascend", False, True)
    assert options.keep_dtype is not None and options.keep_dtype.source is None  # the config's list
    assert [entry.op_type for entry in options.keep_dtype.entries] == ["LayerNormalization"]
    assert options.modify_mixlist is not None and options.modify_mixlist.path == settings.modify_mixlist
    assert options.customize_dtypes is not None
    assert options.customize_dtypes.source == str(settings.customize_dtypes)
    assert options.data_max is None and settings.data_max == 30000.0
    assert "ranges" not in {field.name for field in dataclasses.fields(RewriteOptions)}  # a fact, read at the edge
