"""The packaged op info files: they load, cover every op, keep the strategy's colours, and their kernel claims
hold in a real ONNX Runtime CPU session."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.opsinfo import Colour, load_ops_info
from ampconfig.probe import default_domain_op_types, probe_models
from ampconfig.runner.kernels import CPU, check_kernel
from ampconfig.strategy import STRATEGY

runner = CliRunner()


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_packaged_files_load_and_cover_every_op(target: str) -> None:
    library = load_ops_info(target)
    assert library.target == target
    assert [op for op in default_domain_op_types() if not library.knows(op)] == []
    assert set(STRATEGY) <= set(library.entries)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_colours_are_the_strategy_and_invariants_hold(target: str) -> None:
    library = load_ops_info(target)
    for key, entry in library.entries.items():
        assert entry.colour is STRATEGY[key].colour, key
        assert entry.reference == STRATEGY[key].reference
        assert not (entry.clear and entry.precision_reduce is not None)
        if entry.dtype_source == "not-probed":
            assert entry.dtypes == [], key  # unknown, not "no kernel"
    lists = library.lists()
    assert {"MatMul", "Gemm", "Conv"} <= set(lists.members(Colour.WHITE))
    assert {"Softmax", "LayerNormalization", "ReduceSum"} <= set(lists.members(Colour.BLACK))


def test_sources_per_target() -> None:
    cpu, cuda = load_ops_info("cpu"), load_ops_info("cuda")
    assert cpu.provider == "CPUExecutionProvider" and cuda.provider == "CUDAExecutionProvider"
    assert {e.dtype_source for e in cpu.entries.values()} <= {"probe", "not-probed"}
    assert {e.dtype_source for e in cuda.entries.values()} <= {"kernel-table", "not-probed"}
    assert cuda.has_kernel("MatMul", "float16") and cuda.has_kernel("LayerNormalization", "bfloat16")


def _claims(fp16: bool) -> list[str]:
    library = load_ops_info("cpu")
    return sorted(
        key
        for key, entry in library.entries.items()
        if entry.dtype_source == "probe" and "float32" in entry.dtypes and ("float16" in entry.dtypes) is fp16
    )


def test_sampled_fp16_claims_load_natively_in_ort_cpu() -> None:
    claims = _claims(fp16=True)
    assert len(claims) >= 10
    for key in random.Random(7).sample(claims, 10):
        verdicts = [check_kernel(p.model, CPU) for p in probe_models(key, "float16")]
        assert any(v.native for v in verdicts), key


def test_sampled_no_fp16_claims_hold_in_ort_cpu() -> None:
    claims = [key for key in _claims(fp16=False) if probe_models(key, "float16")]
    assert len(claims) >= 3
    for key in ["MatMul", "Relu", *random.Random(7).sample(claims, 3)]:
        verdicts = [check_kernel(p.model, CPU) for p in probe_models(key, "float16")]
        assert verdicts and not any(v.native for v in verdicts), key


def test_show_prints_entries_as_json() -> None:
    result = runner.invoke(app, ["ops-info", "show", "MatMul", "NoSuchOp", "--target", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    assert '"colour": "white"' in result.stdout and '"NoSuchOp"' in result.stdout
