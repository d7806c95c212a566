"""Probe models, kernel verdicts and the `ampconfig ops-info probe` command, with real ONNX Runtime sessions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import node_facts
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.kernels import (
    CPU,
    CUDA,
    KernelStatus,
    KernelVerdict,
    check_kernel,
    claim,
    measure_op,
    require_provider,
)
from ampconfig.opinfo.library import parse_ops_info
from ampconfig.opinfo.probe_models import (
    PROBE_IR_VERSION,
    probe_models,
    random_inputs,
    synthesise_probe,
)
from ampconfig.opinfo.probe_models import _single_node_testcases as node_test_cases

runner = CliRunner()
F32, F16, BF16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16


def _elems(model: onnx.ModelProto) -> dict[str, int]:
    return {info.name: info.type.tensor_type.elem_type for info in (*model.graph.input, *model.graph.output)}


def test_probe_cli_writes_runs_and_native_dtypes(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    ops = "Relu,MatMul,LayerNormalization,ScatterND"
    result = runner.invoke(app, ["ops-info", "probe", "--target", "cpu", "--ops", ops, "--output", str(out)])
    assert result.exit_code == 0, result.output
    document = parse_ops_info(out.read_text(encoding="utf-8"), str(out))
    assert set(document.ops) == set(ops.split(","))
    assert document.provider == CPU and document.onnxruntime_version
    entries = document.ops
    for entry in entries.values():
        assert entry.dtype_source == "probe"
        assert "float32" in entry.native_dtypes
    # ORT CPU runs float16 MatMul/Relu through inserted casts: listed in dtypes, not native.
    for key in ("MatMul", "Relu"):
        assert entries[key].dtypes == ["float32", "float16"] and entries[key].native_dtypes == ["float32"], key
    assert entries["LayerNormalization"].native_dtypes == ["float32", "float16"]
    assert entries["ScatterND"].dtypes == ["float32"]  # its reduction cases fail at run time in float16
    assert entries["MatMul"].colour.value == "white" and entries["Relu"].colour.value == "clear"
    assert "float16 3" in result.output and "natively:" in result.output
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


def _rewrite_moves(fp32: onnx.ModelProto, dtype: str) -> tuple[set[str] | None, Rule | None]:
    """The float32 tensors the rewrite engine (node_facts) would move to ``dtype`` in this one-node model (None
    when it would not retype the node), and the rule that blocks it."""
    model = ir.from_proto(fp32)
    node = next(iter(model.graph))
    facts = node_facts(node, model, "", dtype)
    if not facts.retypable or dtype not in facts.schema_allows:
        return None, facts.blocker
    moved = {node.inputs[i].name for i in facts.input_slots} | {node.outputs[i].name for i in facts.output_slots}
    return {name for name in moved if _elems(fp32).get(name) == F32}, None


def _probe_moves(fp32: onnx.ModelProto, low: onnx.ModelProto | None) -> set[str] | None:
    if low is None:
        return None
    return {name for name, elem in _elems(low).items() if elem != _elems(fp32).get(name)}


def test_probes_retype_exactly_what_the_rewrite_moves() -> None:
    # Over every op's test cases: the probe's low-dtype model moves the tensors the rewrite moves (Attention's V
    # with Q/K, RMSNormalization's scale with X, not LayerNormalization's Mean/InvStdDev in float16 nor Resize's
    # scales), and exists only where the rewrite would retype the node (not for sequences, absent outputs...).
    compared = 0
    for key in sorted(node_test_cases()):  # the op types ONNX's single-node float32 test cases cover
        fp32 = {p.origin: p.model for p in probe_models(key, "float32")}
        for dtype in ("float16", "bfloat16"):
            low = {p.origin: p.model for p in probe_models(key, dtype)}
            for origin, model in fp32.items():
                expected, blocker = _rewrite_moves(model, dtype)
                got = _probe_moves(model, low.get(origin))
                if blocker is Rule.MODE_KEEPS or (got is None and expected == set()):
                    # Output-only ops (HannWindow, EyeLike) are probed through their dtype attribute, though the
                    # rewrite keeps them; a Cast to float16 has nothing left to move.
                    continue
                assert got == expected, (key, dtype, origin)
                compared += 1
    assert compared > 1000


def test_retyped_normalizations_keep_what_the_schema_pins() -> None:
    rms = probe_models("RMSNormalization", "float16")[0].model
    assert {_elems(rms)[name] for name in rms.graph.node[0].input} == {F16}  # X (T) and scale (V)
    layer_norm = next(p.model for p in probe_models("LayerNormalization", "float16") if len(p.model.graph.output) > 1)
    node = layer_norm.graph.node[0]
    assert layer_norm.ir_version == PROBE_IR_VERSION
    assert _elems(layer_norm)[node.output[0]] == F16
    assert {_elems(layer_norm)[stat] for stat in node.output[1:]} == {F32}  # U has no float16
    onnx.checker.check_model(layer_norm, full_check=True)
    resize = next(p.model for p in probe_models("Resize", "float16") if "".join(p.model.graph.node[0].input[2:3]))
    assert _elems(resize)[resize.graph.node[0].input[2]] == F32  # scales are tensor(float) whatever X is


def test_testcase_probes_carry_their_data_in_the_probed_dtype() -> None:
    probe = probe_models("MatMul", "bfloat16")[0]
    assert probe.inputs is not None
    node = probe.model.graph.node[0]
    assert {str(probe.inputs[name].dtype) for name in node.input} == {"bfloat16"}  # type: ignore[union-attr]


def test_verdicts_native_emulated_no_kernel_fails() -> None:
    # ORT CPU has float32 Relu only: float16 runs through inserted casts, bfloat16 has no kernel.
    relu = {dtype: probe_models("Relu", dtype)[0] for dtype in ("float32", "float16", "bfloat16")}
    verdicts = {dtype: check_kernel(p.model, CPU, p.inputs) for dtype, p in relu.items()}
    assert verdicts["float32"].status is KernelStatus.NATIVE and verdicts["float32"].ran
    assert verdicts["float16"].status is KernelStatus.EMULATED and verdicts["float16"].ran
    assert verdicts["bfloat16"].status is KernelStatus.NO_KERNEL
    # ScatterND with reduction loads in float16 and fails only when run: loading alone would call it emulated.
    scatter = next(p for p in probe_models("ScatterND", "float16") if p.origin.endswith("scatternd_add"))
    assert check_kernel(scatter.model, CPU).runs
    ran = check_kernel(scatter.model, CPU, scatter.inputs)
    assert ran.status is KernelStatus.FAILED and ran.ran and ran.message.startswith("run:")


def test_claim_is_conservative_over_probe_models() -> None:
    native, emulated = KernelVerdict(KernelStatus.NATIVE, CPU), KernelVerdict(KernelStatus.EMULATED, CPU)
    fails = KernelVerdict(KernelStatus.FAILED, CPU, "run: boom")
    verdicts = {
        "float32": {"a": native, "b": native, "broken": fails},
        "float16": {"a": emulated, "b": native, "broken": native},
        "bfloat16": {"a": native, "b": fails},
    }
    # 'broken' fails in float32, so it proves nothing either way; 'b' failing in bfloat16 removes bfloat16.
    assert claim(verdicts) == (("float32", "float16"), ("float32",))
    assert claim({"float32": {"a": fails}, "float16": {"a": native}}) == ((), ())


def test_measure_op_drops_float16_where_attribute_cases_fail() -> None:
    for key in ("ScatterND", "ScatterElements"):
        measured = measure_op(key, CPU, ("float32", "float16"))
        assert measured.dtypes == ("float32",), key
        failing = {o for o, v in measured.verdicts["float16"].items() if v.status is KernelStatus.FAILED}
        reducing = {p.origin for p in probe_models(key, "float16") if _reduction(p.model) not in ("", "none")}
        # only cases with a reduction fail (ScatterElements' max/min do run): the attribute, not the op
        assert failing and failing <= reducing, key
        assert all(v.runs for o, v in measured.verdicts["float16"].items() if o not in reducing), key


def _reduction(model: onnx.ModelProto) -> str:
    attrs = {a.name: a for a in model.graph.node[0].attribute}
    return attrs["reduction"].s.decode() if "reduction" in attrs else ""


def test_schema_synthesis_and_random_inputs() -> None:
    model = synthesise_probe("SequenceEmpty", "float32")
    assert model is not None
    assert check_kernel(model, CPU).native
    assert synthesise_probe("SequenceEmpty", "float16") is None  # a sequence type is not moved by the rewrite
    trilu = synthesise_probe("Trilu", "float16")
    assert trilu is not None and _elems(trilu)["in0"] == F16
    assert random_inputs(trilu) is None  # rank-unknown: load-only
    # Contrib signatures with static shapes run on random inputs.
    fused = probe_models("com.microsoft::FusedMatMul", "float16")[0]
    assert fused.inputs is not None and {a.dtype for a in fused.inputs.values()} == {np.dtype(np.float16)}  # type: ignore[union-attr]
    verdict = check_kernel(fused.model, CPU, fused.inputs)
    assert verdict.ran and verdict.runs
