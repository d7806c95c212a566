"""Deciding needs no device: the decision-only commands (rewrite, explain without runs, lists, validate) work for
--target cuda on a machine without a GPU and never import onnxruntime; --device is what asks for CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS
from tests.fresh_process import command_in_fresh_process
from tests.graphs import transformer_block


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A transformer block whose weights are all below the size the CLI converts with ONNX Runtime's Cast kernel."""
    model = transformer_block()
    assert max(onnx.numpy_helper.to_array(init).size for init in model.graph.initializer) < LARGE_ARRAY_ELEMENTS
    path = tmp_path_factory.mktemp("model") / "block.onnx"
    onnx.save(model, path)
    return path


def _config(folder: Path, model: Path) -> Path:
    mixlist = folder / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["Erf"]}}))
    config = folder / "session.yaml"
    config.write_text(
        f"precision_mode: allow_mix_precision\ntarget: cuda\nmodel: {model}\nmodify_mixlist: mixlist.json\n"
    )
    return config


DECISION_ONLY = {
    "rewrite": ["rewrite", "{model}", "-o", "{folder}/out.onnx", "-m", "force_fp16", "--target", "cuda", "--json"],
    "explain": ["explain", "{model}", "-m", "allow_mix_precision", "--target", "cuda", "--json"],
    "lists": ["lists", "-m", "allow_mix_precision", "--target", "cuda", "--json"],
    "validate": ["validate", "{config}", "--format", "json"],
    "explain --config": ["explain", "--config", "{config}", "--json"],
}


#: The module that starts ONNX Runtime's worker process and talks to it.
WORKER = "ampconfig.worker.client"


@pytest.mark.parametrize("command", sorted(DECISION_ONLY))
def test_decision_only_commands_do_not_import_onnxruntime(small_model: Path, tmp_path: Path, command: str) -> None:
    config = _config(tmp_path, small_model)
    args = [part.format(model=small_model, folder=tmp_path, config=config) for part in DECISION_ONLY[command]]
    outcome = command_in_fresh_process(tmp_path, *args)
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "onnxruntime" not in outcome["modules"]
    assert WORKER not in outcome["modules"]  # no worker process was started either
    payload = json.loads(outcome["stdout"])  # one JSON object, decided for cuda without a GPU
    if command in ("rewrite", "explain", "explain --config"):
        assert payload["target"] == "cuda"
        low = payload["nodes_by_dtype"] if command == "rewrite" else payload["summary"]["by_dtype"]
        assert low.get("float16", 0) > 0, payload


def test_the_probe_sees_the_worker_when_a_command_runs_models(small_model: Path, tmp_path: Path) -> None:
    """The check above can fail: `run` does start ONNX Runtime's worker, and the probe says so. The command's own
    process still never imports onnxruntime: every session lives in the worker."""
    outcome = command_in_fresh_process(
        tmp_path, "run", small_model, "--target", "cpu", "--device", "cpu", "--warmup", "0", "--iterations", "1"
    )
    assert outcome["exit_code"] in (0, 1), outcome["stderr"]
    assert WORKER in outcome["modules"]
    assert "onnxruntime" not in outcome["modules"]


def test_explain_decides_for_cuda_and_runs_on_the_device_asked_for(small_model: Path, tmp_path: Path) -> None:
    """explain --range-check runs the fp32 model on --device; the decisions stay cuda's."""
    outcome = command_in_fresh_process(
        tmp_path, "explain", small_model, "--target", "cuda", "--device", "cpu", "--range-check", "--json"
    )
    assert outcome["exit_code"] == 0, outcome["stderr"]
    payload = json.loads(outcome["stdout"])
    assert payload["target"] == "cuda" and "range_analysis" in payload and WORKER in outcome["modules"]


def test_device_cuda_without_cuda_is_exit_2_and_target_cuda_is_not(small_model: Path, tmp_path: Path) -> None:
    from ampconfig.runner.sessions import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA works on this machine")
    asked = command_in_fresh_process(tmp_path, "explain", small_model, "--compare", "--device", "cuda", "--json")
    assert asked["exit_code"] == 2
    error = json.loads(asked["stdout"])["error"]
    assert "device cuda was asked for but CUDA cannot be used" in error["message"] and "--device cpu" in error["hint"]
    decided = command_in_fresh_process(tmp_path, "explain", small_model, "--compare", "--target", "cuda", "--json")
    assert decided["exit_code"] == 0, decided["stderr"]
