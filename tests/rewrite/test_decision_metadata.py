"""Each node's decision in the rewritten model's node metadata (issue 38, item 6): ``ampconfig.rule`` equals the
rule ``explain --json`` gives the node, in every mode and model, subgraph bodies included; the model written still
passes the full checker and loads and runs in ONNX Runtime; the option and the config key leave every entry out;
a model below IR version 10 gets none, said in a note; rewriting a rewritten model adds none and changes none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.examples import example_path
from ampconfig.precision_modes import V1_NAMES
from ampconfig.rewrite.decision_metadata import CAUSE, INSERTED, PRECISION_MODE, PREFIX, RULE
from tests import exporter_models
from tests.value_models import char_lstm_loop, vad_if

runner = CliRunner()
#: The modes ONNX Runtime's CPU provider loads the rewrite of (a bfloat16 MatMul decided for cuda it lacks).
CPU_RUNNABLE = ("allow_mix_precision", "force_fp16", "force_fp32", "allow_fp32_to_fp16", "must_keep_origin_dtype")


def _models() -> dict[str, onnx.ModelProto]:
    return {
        "transformer_block": onnx.load(example_path()),
        "cnn": exporter_models.cnn(),
        "gpt2": exporter_models.gpt2(),
        "ocr": exporter_models.ocr(),  # an LSTM: a node no mode retypes
        "vad_if": vad_if(),  # an If with a float branch each way
        "char_lstm_loop": char_lstm_loop(),  # a Loop body
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("decided")
    paths = {}
    for name, model in _models().items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


def _cli(*args: str | Path) -> dict[str, Any]:
    result = runner.invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of the model, subgraph bodies included."""

    def walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
        for node in graph.node:
            yield node
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    yield from walk(attribute.g)
                for subgraph in attribute.graphs:
                    yield from walk(subgraph)

    yield from walk(model.graph)


def _entries(node: onnx.NodeProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in node.metadata_props if entry.key.startswith(PREFIX)}


def _runs_in_onnx_runtime(model: onnx.ModelProto) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for value in session.get_inputs():
        shape = [dim if isinstance(dim, int) else 2 for dim in value.shape]
        if "int" in value.type:
            feeds[value.name] = np.ones(shape, dtype=np.int64 if "64" in value.type else np.int32)
        elif "bool" in value.type:
            feeds[value.name] = np.ones(shape, dtype=bool)
        else:
            feeds[value.name] = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    outputs = session.run(None, feeds)
    assert outputs and all(np.asarray(output).size >= 0 for output in outputs)


@pytest.mark.parametrize("mode", V1_NAMES)
@pytest.mark.parametrize("name", list(_models()))
def test_every_decided_node_carries_the_rule_explain_gives(
    saved: dict[str, Path], tmp_path: Path, name: str, mode: str
) -> None:
    model = saved[name]
    explained = _cli("explain", model, "-m", mode, "--json")
    output = tmp_path / "out.onnx"
    _cli("rewrite", model, "-m", mode, "-o", output, "--json")
    written = onnx.load(output)
    onnx.checker.check_model(written, full_check=True)
    by_name = {node.name: node for node in _nodes(written)}
    decided = explained["nodes"]
    assert decided
    for node in decided:
        if node["name"] not in by_name:  # a Cast the rewrite made a no-op, taken out
            assert node["op_type"] == "Cast", node
            continue
        entries = _entries(by_name[node["name"]])
        assert entries[RULE] == node["rule"], (node["name"], entries, node)
        assert entries.get(CAUSE) == node["cause"]
        assert entries[PRECISION_MODE] == explained["precision_mode"]
    names = {node["name"] for node in decided}
    for node in _nodes(written):  # every other node was added by the rewrite, and says so
        if node.name not in names:
            assert _entries(node)[RULE] == INSERTED, node.name
    if mode in CPU_RUNNABLE:
        _runs_in_onnx_runtime(written)


@pytest.mark.parametrize("mode", ["allow_mix_precision", "force_fp16", "force_fp32", "allow_mix_precision_bf16"])
def test_rewriting_a_rewritten_model_changes_no_entry_and_adds_none(mode: str) -> None:
    model = exporter_models.gpt2()
    model.graph.node[0].metadata_props.add(key="exporter.note", value="kept")  # another tool's entry
    once = rewrite_model_detailed(model, mode, target="cuda").model
    twice = rewrite_model_detailed(once, mode, target="cuda").model
    assert twice.SerializeToString() == once.SerializeToString()
    for node in _nodes(twice):
        keys = [entry.key for entry in node.metadata_props]
        assert len(keys) == len(set(keys)), node.name  # one entry per key
        assert RULE in keys and PRECISION_MODE in keys, node.name
    assert {e.key: e.value for e in twice.graph.node[0].metadata_props}["exporter.note"] == "kept"


def test_a_second_rewrite_in_another_mode_replaces_every_entry() -> None:
    mixed = rewrite_model_detailed(exporter_models.gpt2(), "allow_mix_precision", target="cuda").model
    raised = rewrite_model_detailed(mixed, "force_fp32", target="cuda")
    rules = {decision.name: decision.rule.value for decision in raised.decisions}
    for node in _nodes(raised.model):
        entries = _entries(node)
        assert entries[PRECISION_MODE] == "force_fp32", node.name
        assert entries[RULE] == rules.get(node.name, INSERTED), node.name


def test_the_option_and_the_config_key_leave_every_entry_out(saved: dict[str, Path], tmp_path: Path) -> None:
    rewritten = tmp_path / "with.onnx"
    _cli("rewrite", saved["gpt2"], "-o", rewritten, "--json")
    assert all(_entries(node) for node in _nodes(onnx.load(rewritten)))
    without = tmp_path / "without.onnx"
    _cli("rewrite", rewritten, "-o", without, "--no-decision-metadata", "--json")  # an earlier rewrite's go too
    assert not any(_entries(node) for node in _nodes(onnx.load(without)))
    config = tmp_path / "session.yaml"
    config.write_text(f"model: {saved['cnn']}\ndecision_metadata: false\n", encoding="utf-8")
    from_config = tmp_path / "from_config.onnx"
    _cli("rewrite", "--config", config, "-o", from_config, "--json")
    written = onnx.load(from_config)
    assert not any(_entries(node) for node in _nodes(written))
    onnx.checker.check_model(written, full_check=True)
    assert runner.invoke(app, ["validate", str(config)]).exit_code == 0
    config.write_text(f"model: {saved['cnn']}\ndecision_metadata: 'no'\n", encoding="utf-8")
    invalid = runner.invoke(app, ["validate", str(config), "--json"])
    assert invalid.exit_code == 1
    assert any(problem["json_path"] == "$.decision_metadata" for problem in json.loads(invalid.stdout)["problems"])


def test_a_model_below_ir_10_gets_none_and_a_note_says_so(tmp_path: Path) -> None:
    model = exporter_models.cnn()
    model.ir_version = 9
    path, output = tmp_path / "ir9.onnx", tmp_path / "ir9.fp16.onnx"
    onnx.save(model, path)
    summary = _cli("rewrite", path, "-m", "force_fp16", "-o", output, "--json")
    written = onnx.load(output)
    assert written.ir_version == 9 and not any(node.metadata_props for node in _nodes(written))
    onnx.checker.check_model(written, full_check=True)
    _runs_in_onnx_runtime(written)
    assert any("IR version 9" in note and "no node metadata" in note for note in summary["notes"])
    quiet = _cli("rewrite", path, "-m", "force_fp16", "-o", output, "--no-decision-metadata", "--json")
    assert not any("node metadata" in note for note in quiet["notes"])  # nothing was asked that it lacks
