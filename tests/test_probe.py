"""Probe models and the `ampconfig ops-info probe` command, with real ONNX Runtime sessions."""

from __future__ import annotations

from pathlib import Path

import onnx
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.opsinfo import parse_ops_info
from ampconfig.probe import PROBE_IR_VERSION, probe_models, synthesise_probe
from ampconfig.runner.kernels import CUDA, KernelStatus, check_kernel, require_provider

runner = CliRunner()


def _elem(model: onnx.ModelProto, name: str) -> int:
    for info in (*model.graph.input, *model.graph.output):
        if info.name == name:
            return info.type.tensor_type.elem_type
    raise KeyError(name)


def test_probe_cli_writes_a_valid_file(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    result = runner.invoke(app, ["ops-info", "probe", "--target", "cpu", "--ops", "Relu,MatMul", "--output", str(out)])
    assert result.exit_code == 0, result.output
    document = parse_ops_info(out.read_text(encoding="utf-8"), str(out))
    assert set(document.ops) == {"Relu", "MatMul"}
    assert document.provider == "CPUExecutionProvider" and document.onnxruntime_version
    for entry in document.ops.values():
        assert entry.dtype_source == "probe"
        assert "float32" in entry.dtypes
    assert document.ops["MatMul"].colour.value == "white"
    assert document.ops["Relu"].colour.value == "clear"
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write left no temp file behind


def test_probe_cli_rejects_unknown_ops_and_unusable_cuda(tmp_path: Path) -> None:
    unknown = runner.invoke(app, ["ops-info", "probe", "--ops", "NoSuchOp", "--output", str(tmp_path / "x.json")])
    assert unknown.exit_code == 2
    cuda_out = tmp_path / "c.json"
    cuda = runner.invoke(app, ["ops-info", "probe", "--target", "cuda", "--ops", "Relu", "--output", str(cuda_out)])
    try:
        require_provider(CUDA)
    except AmpconfigError:
        # onnxruntime-gpu lists the provider even where the CUDA libraries are missing (CI): a clear exit 2.
        assert cuda.exit_code == 2
        assert "CUDAExecutionProvider" in cuda.output
        assert not cuda_out.exists()
    else:
        assert cuda.exit_code == 0, cuda.output
        assert cuda_out.exists()


def test_retyping_follows_the_type_constraint_not_every_float() -> None:
    probes = probe_models("LayerNormalization", "float16")
    assert probes
    model = probes[0].model
    assert model.ir_version == PROBE_IR_VERSION
    node = model.graph.node[0]
    assert _elem(model, node.input[0]) == onnx.TensorProto.FLOAT16
    assert _elem(model, node.output[0]) == onnx.TensorProto.FLOAT16
    for stat in node.output[1:]:  # Mean / InvStdDev are the second variable U: they stay float32
        assert _elem(model, stat) == onnx.TensorProto.FLOAT
    onnx.checker.check_model(model, full_check=True)


def test_retyped_resize_keeps_float32_scales() -> None:
    probes = [p for p in probe_models("Resize", "float16") if len(p.model.graph.node[0].input) >= 3]
    assert probes
    model = probes[0].model
    node = model.graph.node[0]
    assert _elem(model, node.input[0]) == onnx.TensorProto.FLOAT16
    scales = node.input[2]
    if scales:
        assert _elem(model, scales) == onnx.TensorProto.FLOAT


def test_cast_fallback_is_not_a_native_kernel() -> None:
    # ORT CPU has float32 Relu only: at float16 it loads, but only through inserted casts.
    (fp32,) = probe_models("Relu", "float32")[:1]
    (fp16,) = probe_models("Relu", "float16")[:1]
    assert check_kernel(fp32.model, "CPUExecutionProvider").status is KernelStatus.NATIVE
    assert check_kernel(fp16.model, "CPUExecutionProvider").status is KernelStatus.CAST_FALLBACK
    bf16 = probe_models("Relu", "bfloat16")[0]
    assert check_kernel(bf16.model, "CPUExecutionProvider").status is KernelStatus.NO_KERNEL


def test_schema_synthesis_builds_a_loadable_model() -> None:
    model = synthesise_probe("SequenceEmpty", "float32")
    assert model is not None
    assert check_kernel(model, "CPUExecutionProvider").native
