"""Every model ampconfig writes runs in ONNX Runtime wherever its input runs (issue 35, docs/design.md §6), not only
passes the checker: the exporter-shaped models (tests/exporter_models.py) and the unusual ones
(tests/unusual_models.py), among them models whose inputs and outputs share a symbolic size that differs at run
time, rewritten in every precision mode for both targets, from files, run on the CPU provider on the inputs the
project generates (``ampconfig.inputs.feeds``). ONNX's node tests run the same way in
tests/models/test_conformance.py.

The rewrite declares no shape its input did not declare for that tensor (tests/shape_claims.py): ONNX Runtime's
memory planner trusts declared shapes, and ``[N]`` copied from the output ``y`` onto the float16 value feeding its
Cast made a rewrite fail where its input ran ("Shape mismatch attempting to re-use buffer. {14} != {24}").

A model decided for cuda with a bfloat16 node the CPU provider has no bfloat16 kernel for (MatMul, Tanh: the CPU
op info says which) is checked, not run: ONNX Runtime casts around a float16 node its CPU provider lacks, not
around a bfloat16 one. That leaves allow_mix_precision_bf16 for cuda on the MatMul models; every other case runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from ampconfig import rewrite_model_detailed
from ampconfig.inputs.feeds import prepare_inputs
from ampconfig.opinfo.library import load_ops_info
from ampconfig.precision_modes import PrecisionMode
from tests.exporter_models import EXPORTER_MODELS
from tests.node_cases import new_checker_complaint
from tests.shape_claims import added_shape_claims
from tests.unusual_models import SHARED_SIZE_FEEDS, UNUSUAL_MODELS

CORPUS: dict[str, Callable[[], onnx.ModelProto]] = {
    **{f"exporter_{name}": build for name, build in EXPORTER_MODELS.items()},
    **UNUSUAL_MODELS,
}
CPU_OP_INFO = load_ops_info("cpu")
#: Every precision mode, aliases included (allow_mix_precision_fp16 is allow_mix_precision by another name).
EVERY_MODE = [mode.value for mode in PrecisionMode]


@dataclass(frozen=True)
class Output:
    """One output of a run: its shape, and its values where numpy holds them (not a bfloat16 tensor); a
    non-tensor output (ZipMap's maps) has neither."""

    shape: tuple[int, ...] | None
    values: np.ndarray | None


@dataclass(frozen=True)
class Input:
    """A corpus model saved to a file, the inputs it runs on and what its outputs were."""

    model: onnx.ModelProto
    path: Path
    feeds: dict[str, np.ndarray]
    outputs: list[Output]


def run_file(path: Path, feeds: Mapping[str, np.ndarray]) -> list[Output]:
    """Run a model file on the CPU provider; bfloat16 feeds go in as OrtValues (ORT's numpy bridge refuses them)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}  # alive while the values are
    values = {
        name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)
        if array.dtype == ml_dtypes.bfloat16
        else ort.OrtValue.ortvalue_from_numpy(array)
        for name, array in arrays.items()
    }
    outputs = []
    for value in session.run_with_ort_values(None, values):
        if not value.is_tensor():
            outputs.append(Output(None, None))
        else:
            numeric = value.data_type() != "tensor(bfloat16)"
            outputs.append(Output(tuple(value.shape()), value.numpy() if numeric else None))
    return outputs


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("written_models_run")


@cache
def _input(name: str, folder: Path) -> Input:
    model = CORPUS[name]()
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    feeds = prepare_inputs(model, shapes=SHARED_SIZE_FEEDS.get(name)).feeds
    return Input(model, path, feeds, run_file(path, feeds))  # the input runs: else it is no part of the corpus


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", EVERY_MODE)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_written_model_runs_where_its_input_runs(folder: Path, name: str, mode: str, target: str) -> None:
    given = _input(name, folder)
    result = rewrite_model_detailed(given.path, mode, target=target)
    written = folder / f"{name}.{mode}.{target}.onnx"
    onnx.save(result.model, written)
    rewritten = onnx.load(written)
    assert added_shape_claims(given.model, rewritten) == []
    assert new_checker_complaint(given.model, rewritten) is None
    if target == "cuda" and any(
        decision.dtype == "bfloat16" and CPU_OP_INFO.has_kernel(decision.op_type, "bfloat16") is not True
        for decision in result.decisions
    ):
        return  # a bfloat16 kernel of the GPU's that the CPU provider lacks (module docstring)
    got = run_file(written, given.feeds)
    assert [output.shape for output in got] == [output.shape for output in given.outputs]
    if name in SHARED_SIZE_FEEDS:  # sizes the declarations do not tell apart: the values must be right too
        for output, want in zip(got, given.outputs, strict=True):
            assert output.values is not None and want.values is not None
            np.testing.assert_allclose(output.values, want.values, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", sorted(SHARED_SIZE_FEEDS))
def test_the_shared_size_models_are_fed_sizes_that_differ(folder: Path, name: str) -> None:
    # What makes them hostile: one symbol N, two sizes at run time, and the input still runs.
    given = _input(name, folder)
    sizes = {array.shape[0] for input_name, array in given.feeds.items() if input_name in SHARED_SIZE_FEEDS[name]}
    assert sizes == {10, 14}
    declared = {
        value.type.tensor_type.shape.dim[0].dim_param for value in given.model.graph.input if value.name != "pick"
    }
    assert declared == {"N"}
    assert given.outputs[0].shape is not None and given.outputs[0].shape[0] == 24
