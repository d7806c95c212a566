"""runner.crash_guard: models loaded and run in a child process, whose real native crashes (the test hook's null
pointer read) come back as a model, a phase and a signal instead of killing the caller."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ampconfig.runner.crash_guard import TEST_CRASH_VARIABLE, GuardedModel, Outcome, Phase, check_in_child


def _relu(tmp_path: Path, name: str, elem: int = TensorProto.FLOAT) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        name,
        [helper.make_tensor_value_info("x", elem, [2, 3])],
        [helper.make_tensor_value_info("y", elem, [2, 3])],
    )
    path = tmp_path / f"{name}.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def _models(tmp_path: Path) -> list[GuardedModel]:
    return [
        GuardedModel("fp32", _relu(tmp_path, "fp32"), {"x": np.ones((2, 3), np.float32)}),
        GuardedModel("fp16", _relu(tmp_path, "fp16", TensorProto.FLOAT16), {"x": np.ones((2, 3), np.float16)}),
    ]


def test_models_that_run_are_ok(tmp_path: Path) -> None:
    checks = check_in_child(_models(tmp_path), "cpu")
    assert [(c.label, c.outcome) for c in checks] == [("fp32", Outcome.OK), ("fp16", Outcome.OK)]


def test_a_refusal_is_reported_with_its_phase_and_the_child_goes_on(tmp_path: Path) -> None:
    models = _models(tmp_path)
    wrong_rank = GuardedModel("wrong rank", models[0].path, {"x": np.ones((6,), np.float32)})
    unloadable = tmp_path / "not_a_model.onnx"
    unloadable.write_bytes(b"not a model")
    checks = check_in_child([wrong_rank, GuardedModel("garbage", unloadable, None), models[1]], "cpu")
    assert [(c.label, c.outcome, c.phase) for c in checks] == [
        ("wrong rank", Outcome.REFUSED, Phase.RUN),
        ("garbage", Outcome.REFUSED, Phase.LOAD),
        ("fp16", Outcome.OK, None),
    ]
    assert "rank" in checks[0].message.lower()


@pytest.mark.parametrize("phase", [Phase.LOAD, Phase.RUN])
def test_a_native_crash_names_the_model_the_phase_and_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: Phase
) -> None:
    monkeypatch.setenv(TEST_CRASH_VARIABLE, phase.value)
    checks = check_in_child(_models(tmp_path), "cpu")
    # The crash ends the child: the second model is not checked.
    assert [(c.label, c.outcome, c.phase) for c in checks] == [("fp32", Outcome.CRASHED, phase)]
    assert checks[0].message == "killed by SIGSEGV"


def test_a_crash_bound_to_a_dtype_spares_the_other_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_CRASH_VARIABLE, "load:Relu:float16")
    checks = check_in_child(_models(tmp_path), "cpu")
    assert [(c.label, c.outcome, c.phase) for c in checks] == [
        ("fp32", Outcome.OK, None),
        ("fp16", Outcome.CRASHED, Phase.LOAD),
    ]
