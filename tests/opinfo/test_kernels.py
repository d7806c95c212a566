"""Kernel claims that hold at the opsets real models use: ORT's kernel version rule, the multi-opset probe, the
kernel-registry import (a real CPU dump and a hand-made CUDA-like one), the crash-safe dump script, and the
colour strategy's contrib-op markers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.opinfo.colours import STRATEGY
from ampconfig.opinfo.kernel_claims import (
    OPEN_END,
    OpsetResult,
    OpsetStatus,
    measure_across_opsets,
    serves,
)
from ampconfig.opinfo.kernel_dump import dump_claims, read_kernel_dump
from ampconfig.opinfo.kernels import (
    CPU,
    CUDA,
    KernelStatus,
    KernelVerdict,
    OpMeasurement,
    check_kernel,
    claim,
    kernel_table_dtypes,
    measure_op,
    measure_op_across_opsets,
    opset_result,
)
from ampconfig.opinfo.library import Colour, parse_ops_info
from ampconfig.opinfo.numerics import KERNEL_ACCUMULATION, target_colour
from tests.fresh_process import command_in_fresh_process
from tests.graphs import IR_VERSION
from tests.worker_faults import fresh_worker, inject

__all__ = ["fresh_worker"]  # the fixture, used by name

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
CPU_DUMP = ROOT / "tests" / "data" / "ort-1.31.1-cpu-kernels-subset.json"
MS = "com.microsoft"


def _global_lp_pool(opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("GlobalLpPool", ["x"], ["y"])],
        "lp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def test_open_ended_kernels_serve_only_the_schema_version_they_start_at() -> None:
    assert serves(6, None, 6) and serves(6, OPEN_END, 6)
    assert not serves(6, None, 22) and not serves(6, OPEN_END, 13)  # "6+" is not "6 and later"
    assert serves(6, 21, 13) and serves(6, 21, 21) and not serves(6, 21, 22)
    # The real thing: ORT CPU registers GlobalLpPool "2+"; GlobalLpPool-22 has no kernel, GlobalLpPool-2 does.
    assert check_kernel(_global_lp_pool(21), CPU).status is KernelStatus.NATIVE
    refused = check_kernel(_global_lp_pool(22), CPU)
    assert refused.status is KernelStatus.NO_KERNEL and "GlobalLpPool(22)" in refused.message


def test_across_opsets_measures_each_schema_version_once_and_walks_down() -> None:
    calls: list[int] = []

    def measure(opset: int) -> OpsetResult:
        calls.append(opset)
        if opset >= 22:
            return OpsetResult(OpsetStatus.NO_KERNEL, message="none")
        return OpsetResult(OpsetStatus.KERNEL, ("float32", "float16"), ("float32",))

    # MaxPool's schema history: 13 and 17 both resolve to MaxPool-12, measured once.
    across = measure_across_opsets((1, 8, 10, 11, 12, 22), measure)
    assert calls == [13, 22]
    assert sorted(across.by_opset) == [13, 17, 22] and across.no_kernel_opsets == [22]
    assert across.dtypes == ("float32", "float16") and across.native_dtypes == ("float32",)
    assert "no kernel at opset 22" in across.reason()
    # An op that only exists after 17 (Gelu-20): the newest version, down until a kernel is found.
    calls.clear()
    walked = measure_across_opsets((20, 22), measure)
    assert calls == [22, 20] and walked.dtypes == ("float32", "float16")
    # Newer than the cap: nothing measured, and the note says why.
    later = measure_across_opsets((24,), measure)
    assert not later.known and "introduced at opset 24" in later.reason()


def test_claim_for_an_op_without_float32_kernel() -> None:
    def verdict(status: KernelStatus) -> KernelVerdict:
        return KernelVerdict(status, CUDA, ran=True)

    verdicts = {
        "float32": {"m": verdict(KernelStatus.NO_KERNEL)},
        "float16": {"m": verdict(KernelStatus.NATIVE)},
        "bfloat16": {"m": verdict(KernelStatus.NATIVE)},
    }
    assert claim(verdicts) == (("float16", "bfloat16"), ("float16", "bfloat16"))
    # A float32 model that fails for another reason proves nothing: no claim, and the opset is unmeasurable.
    broken = {"float32": {"m": verdict(KernelStatus.FAILED)}, "float16": {"m": verdict(KernelStatus.FAILED)}}
    assert claim(broken) == ((), ())
    result = opset_result(OpMeasurement("X", (), (), broken))
    assert result.status is OpsetStatus.UNPROBED and result.message.startswith("fails")


def test_probe_finds_the_kernel_an_older_schema_version_has() -> None:
    # The single-opset probe stamps ONNX's test cases at their own opset (22): "no kernel" for the op.
    old = measure_op("GlobalLpPool", CPU)
    assert old.dtypes == ()
    across = measure_op_across_opsets("GlobalLpPool", CPU).across
    assert across.no_kernel_opsets == [22]
    assert across.dtypes == ("float32", "float16") and across.native_dtypes == ("float32",)
    assert set(across.measured) == {13, 17}


def test_probe_cli_marks_unmeasurable_ops_not_probed_with_a_reason(tmp_path: Path) -> None:
    out, details = tmp_path / "cpu.json", tmp_path / "details.json"
    ops = "GlobalLpPool,TensorScatter,SimplifiedLayerNormalization"
    args = ["ops-info", "probe", "--target", "cpu", "--ops", ops, "--output", str(out), "--details", str(details)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    entries = parse_ops_info(out.read_text(encoding="utf-8"), str(out)).ops
    lp = entries["GlobalLpPool"]
    assert lp.dtype_source == "probe" and lp.no_kernel_opsets == [22] and "no kernel at opset 22" in (lp.note or "")
    assert lp.dtypes_by_opset == {"13": ["float32", "float16"], "17": ["float32", "float16"]}
    for key in ("TensorScatter", "SimplifiedLayerNormalization"):
        assert entries[key].dtype_source == "not-probed" and entries[key].dtypes == [], key
        assert entries[key].note, key
    rows = json.loads(details.read_text(encoding="utf-8"))
    refused = [r for r in rows if r["op"] == "GlobalLpPool" and r["opset"] == 22]
    assert refused and all(r["status"] == "no_kernel" for r in refused)


def test_kernel_table_reader_follows_the_version_rule(tmp_path: Path) -> None:
    table = tmp_path / "OperatorKernels.md"
    table.write_text(
        '<a name="cudaexecutionprovider"/>\n\n| Op Name | Parameters | OpSet Version | Types Supported |\n'
        "|---|---|---|---|\n|**Operator Domain:** *ai.onnx*||||\n"
        "|Elu|*in* X:**T**<br> *out* Y:**T**|6+|**T** = tensor(double), tensor(float), tensor(float16)|\n",
        encoding="utf-8",
    )
    assert kernel_table_dtypes(table, CUDA, opset=17)["Elu"] == ["float32", "float16"]
    assert kernel_table_dtypes(table, CUDA, opset=23)["Elu"] == []  # "6+" does not serve Elu-22


def test_import_kernels_from_a_real_cpu_registry_dump(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    result = runner.invoke(app, ["ops-info", "import-kernels", str(CPU_DUMP), "--target", "cpu", "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = parse_ops_info(out.read_text(encoding="utf-8"), str(out))
    assert document.onnxruntime_version == "1.31.1" and "import-kernels" in document.generated_by
    ops = document.ops
    assert ops["GlobalLpPool"].dtype_source == "kernel-registry" and ops["GlobalLpPool"].no_kernel_opsets == [22]
    assert ops["com.microsoft::SkipLayerNormalization"].dtypes == ["float32", "float16", "bfloat16"]
    assert ops["com.microsoft::FusedMatMul"].dtypes == ["float32"]
    assert ops["MatMul"].native_dtypes == ["float32"]
    assert ops["Add"].dtype_source == "not-probed" and ops["Add"].note  # not in the subset: unknown, said so
    # The registry and the probe agree on native kernels where both measure the same thing.
    for key in ("Elu", "MatMul", "LayerNormalization", "com.microsoft::SkipLayerNormalization"):
        probed = measure_op_across_opsets(key, CPU).across
        assert list(probed.native_dtypes) == ops[key].native_dtypes, key


def _cuda_dump(tmp_path: Path) -> Path:
    def row(op: str, since: int, types: dict[str, list[str]], domain: str = "ai.onnx") -> dict[str, object]:
        return {"op": op, "domain": domain, "provider": CUDA, "since": since, "until": OPEN_END, "types": types}

    floats = ["tensor(double)", "tensor(float)", "tensor(float16)"]
    rows = [
        row("Elu", 6, {"T": floats}),
        row("GroupQueryAttention", 1, {"T": ["tensor(bfloat16)", "tensor(float16)"], "M": ["tensor(int32)"]}, MS),
        row("SkipLayerNormalization", 1, {"T": ["tensor(bfloat16)", "tensor(float)", "tensor(float16)"]}, MS),
        {"op_name": "Relu", "domain": "", "provider": CUDA, "version_range": [14, OPEN_END], "types": {"T": floats}},
    ]
    path = tmp_path / "cuda-kernels.json"
    path.write_text(json.dumps({"onnxruntime": "1.31.1", "kernels": {CUDA: rows}}), encoding="utf-8")
    return path


def test_import_kernels_cuda_claims_and_version_notes(tmp_path: Path) -> None:
    claims = dump_claims(read_kernel_dump(_cuda_dump(tmp_path)), CUDA)
    assert claims["Elu"].dtypes == ("float32", "float16") and claims["Elu"].no_kernel_opsets == [22]
    assert claims["com.microsoft::GroupQueryAttention"].dtypes == ("float16", "bfloat16")  # no float32 kernel
    out = tmp_path / "cuda.json"
    args = ["ops-info", "import-kernels", str(_cuda_dump(tmp_path)), "--target", "cuda", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    ops = parse_ops_info(out.read_text(encoding="utf-8"), str(out)).ops
    assert ops["Relu"].dtypes == ops["Relu"].native_dtypes == ["float32", "float16"]
    skip = ops["com.microsoft::SkipLayerNormalization"]
    # The dump is from ONNX Runtime 1.31.1, after the float32-accumulation fix of 1.27.0: gray, and it says why.
    assert skip.colour is Colour.GRAY and "microsoft/onnxruntime#28682" in (skip.accumulation_source or "")
    assert ops["com.microsoft::MatMulNBits"].keeps_dtype and ops["com.microsoft::MatMulNBits"].colour is Colour.GRAY


def test_import_kernels_bad_input_exits_2_and_names_the_file(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["ops-info", "import-kernels", str(tmp_path / "none.json"), "-o", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "none.json" in missing.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"kernels": [\n  {"op": "Relu",\n', encoding="utf-8")
    invalid = runner.invoke(app, ["ops-info", "import-kernels", str(broken), "-o", str(tmp_path / "o")])
    assert invalid.exit_code == 2 and "broken.json" in invalid.output and "not valid JSON" in invalid.output
    empty = tmp_path / "empty.json"
    empty.write_text('{"onnxruntime": "1.31.1", "kernels": {}}', encoding="utf-8")
    nothing = runner.invoke(app, ["ops-info", "import-kernels", str(empty), "-o", str(tmp_path / "o")])
    assert nothing.exit_code == 2 and "lists no kernels" in nothing.output
    wrong = runner.invoke(
        app, ["ops-info", "import-kernels", str(CPU_DUMP), "--target", "cuda", "-o", str(tmp_path / "o")]
    )
    assert wrong.exit_code == 2 and "CPUExecutionProvider" in wrong.output  # says which providers it has
    assert not (tmp_path / "o").exists()


def test_dump_script_survives_a_crashing_registry(tmp_path: Path) -> None:
    """get_all_opkernel_def() segfaults in onnxruntime-gpu without the CUDA libraries: the script lists the
    registry in a child, and either writes a dump this project can import or reports the crash (exit 1)."""
    out = tmp_path / "kernels.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dump_kernels.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode == 0:
        assert read_kernel_dump(out).rows
    else:
        assert done.returncode == 1, done.stderr
        assert "child process" in done.stderr and ("signal" in done.stderr or "exit status" in done.stderr)
        assert not out.exists()


def test_apply_strategy_keeps_claims_and_adds_new_ops(tmp_path: Path) -> None:
    source = tmp_path / "cuda.json"
    document = json.loads((ROOT / "ops_info" / "cuda.json").read_text(encoding="utf-8"))
    del document["ops"]["com.microsoft::MatMulNBits"]
    document["ops"]["Relu"]["reference"] = "stale"
    source.write_text(json.dumps(document), encoding="utf-8")
    result = runner.invoke(app, ["ops-info", "apply-strategy", "--target", "cuda", "--file", str(source)])
    assert result.exit_code == 0, result.output
    ops = parse_ops_info(source.read_text(encoding="utf-8"), str(source)).ops
    assert ops["Relu"].reference == STRATEGY["Relu"].reference
    assert ops["Relu"].dtypes == document["ops"]["Relu"]["dtypes"]
    assert ops["com.microsoft::MatMulNBits"].dtype_source == "not-probed"
    wrong = runner.invoke(app, ["ops-info", "apply-strategy", "--target", "cpu", "--file", str(source)])
    assert wrong.exit_code == 2


ISSUE_CONTRIB_OPS = (
    "com.microsoft::Attention",
    "com.microsoft::MultiHeadAttention",
    "com.microsoft::GroupQueryAttention",
    "com.microsoft::SkipLayerNormalization",
    "com.microsoft::SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization",  # ORT registers it in the default ONNX domain
    "com.microsoft::EmbedLayerNormalization",
    "com.microsoft::BiasGelu",
    "com.microsoft::FastGelu",
    "com.microsoft::QuickGelu",
    "com.microsoft::BiasAdd",
    "com.microsoft::BiasSplitGelu",
    "com.microsoft::FusedMatMul",
    "com.microsoft::RotaryEmbedding",
    "com.microsoft::GemmFastGelu",
)


@pytest.mark.parametrize("key", ISSUE_CONTRIB_OPS)
def test_fused_contrib_ops_have_colours_that_name_the_pattern(key: str) -> None:
    entry = STRATEGY[key]
    assert entry.keeps_dtype is None
    assert "fus" in entry.reference.lower() or "RMS" in entry.reference  # the fused pattern it replaces is named


def test_quantized_and_packed_contrib_ops_keep_their_dtype_and_say_why() -> None:
    kept = {key: e for key, e in STRATEGY.items() if e.keeps_dtype}
    assert {"com.microsoft::MatMulNBits", "com.microsoft::QAttention", "com.microsoft::PackedAttention"} <= set(kept)
    assert all(e.reference.startswith("keeps its dtype") and e.colour is Colour.GRAY for e in kept.values())


def test_skip_norm_numerics_depend_on_the_onnxruntime_release() -> None:
    # CUDA's fused skip/embed norms summed in float16 before ONNX Runtime 1.27.0 (microsoft/onnxruntime#29034).
    fused = (
        "com.microsoft::SkipLayerNormalization",
        "com.microsoft::SkipSimplifiedLayerNormalization",
        "com.microsoft::EmbedLayerNormalization",
    )
    for key in fused:
        fact = KERNEL_ACCUMULATION["cuda"][key]
        assert fact.since_onnxruntime == "1.27.0" and "29034" in fact.source
        before = target_colour(key, Colour.BLACK, "cuda", ["float32", "float16"], ["float32", "float16"], "1.26.2")
        after = target_colour(key, Colour.BLACK, "cuda", ["float32", "float16"], ["float32", "float16"], "1.31.1")
        assert (before.colour, after.colour) == (Colour.BLACK, Colour.GRAY)
    assert not any(key in KERNEL_ACCUMULATION["cpu"] for key in fused)


def test_probe_never_imports_onnxruntime_in_the_command_process(tmp_path: Path) -> None:
    """``ops-info probe`` builds and runs every probe session in the worker: the command's own process never imports
    onnxruntime (on main it did, kernels.py imported it at the top), and the claims are still measured."""
    out = tmp_path / "cpu.json"
    ops = "Relu,ScatterND,com.microsoft::Gelu"
    outcome = command_in_fresh_process(tmp_path, "ops-info", "probe", "--target", "cpu", "--ops", ops, "-o", out)
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "onnxruntime" not in outcome["modules"]
    entries = parse_ops_info(out.read_text(encoding="utf-8"), str(out)).ops
    assert entries["Relu"].dtype_source == "probe" and "float16" in entries["Relu"].dtypes
    assert "float16" not in entries["ScatterND"].dtypes  # its reduction cases load in float16 and fail when run
    assert entries["com.microsoft::Gelu"].dtype_source == "probe", entries["com.microsoft::Gelu"]


def test_a_probe_that_crashes_onnx_runtime_is_a_failed_verdict(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime dying while it builds a probe's session (an injected SIGSEGV in the worker) fails that verdict
    and names the crash; the probe goes on (on main the session was built in this process, which died)."""
    inject(monkeypatch, "load:segv:any")
    verdict = check_kernel(_global_lp_pool(21), CPU)
    assert verdict.status is KernelStatus.FAILED and "killed by SIGSEGV" in verdict.message
