"""What readers need and how many casts a plan implies (ampconfig/decide/needs.py), against the rewrite.

Through :func:`tests.cast_audit.audit_casts`: the plan's casts equal, as (value, dtype) sets, the Cast nodes the
rewrite inserts, and every island count (as decided, and with the island's dtype flipped) equals the Casts the
rewrite puts on that island's edges:

- on the exporter-shaped models (tests/exporter_models.py) in every mode, both targets, with and without
  keep_io_types;
- on every model of the tests in every mode, for both targets;
- on ONNX's node tests: every case in every mode in tests/models/test_conformance.py (as decided), and every tenth case
  with the islands flipped here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import onnx
import pytest

from ampconfig import rewrite_model_detailed
from ampconfig.decide.facts import graphs_of
from ampconfig.errors import AmpconfigError
from tests import exporter_models
from tests.cast_audit import audit_casts
from tests.graphs import MODES, plan_for

EXPORTER_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "cnn": exporter_models.cnn,
    "gpt2": exporter_models.gpt2,
    "ocr": exporter_models.ocr,
    "gpt2_overflow": exporter_models.gpt2_overflow,
}
#: Modes that introduce a low dtype on these models, so casts and islands exist to compare.
LOWERING = ("force_fp16", "allow_fp32_to_fp16", "allow_mix_precision", "allow_mix_precision_bf16")


def _rewrite(model: onnx.ModelProto, mode: str, target: str, keep_io_types: bool = True) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rewrite_model_detailed(model, mode, target=target, keep_io_types=keep_io_types)


@pytest.mark.parametrize("mode", MODES)
def test_casts_and_island_counts_equal_the_rewrite_on_exporter_models(mode: str) -> None:
    with audit_casts() as audit:
        for build in EXPORTER_MODELS.values():
            model = build()
            for target in ("cuda", "cpu"):
                for keep_io_types in (True, False):
                    _rewrite(model, mode, target, keep_io_types)
    assert audit.mismatches == []
    assert audit.plans == len(EXPORTER_MODELS) * 4
    assert audit.groups > 0  # float32 groups were counted and compared
    if mode in LOWERING:
        assert audit.casts > 0  # real Cast nodes were compared


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize("mode", MODES)
def test_casts_and_island_counts_equal_the_rewrite_on_every_test_model(mode: str, target: str) -> None:
    from tests.decide.test_passes import _test_models

    names, refused = [], []
    with audit_casts() as audit:
        for name, build in _test_models():
            try:
                _rewrite(build(), mode, target)
            except AmpconfigError as exc:
                # The acceptance check runs a checker-rejected input's rewrite on the CPU, which has no bfloat16
                # kernels: see test_checker_rejected_input_for_cuda_in_bfloat16_is_refused_on_the_cpu. The plan
                # was applied before that check, so its casts are compared all the same.
                assert (target, mode) == ("cuda", "allow_mix_precision_bf16"), exc.message
                assert name.startswith("defect_") and "Could not find an implementation" in exc.message, exc.message
                refused.append(name)
            names.append(name)
    assert audit.mismatches == []
    assert len(names) >= 40 and audit.plans >= len(names)
    if mode in LOWERING:
        assert audit.casts > 0


@pytest.mark.parametrize("mode", ["allow_mix_precision", "allow_mix_precision_bf16"])
def test_island_counts_flipped_equal_the_rewrite_on_onnx_node_tests(mode: str) -> None:
    from tests.node_cases import float32_cases

    sample = float32_cases()[::10]
    with audit_casts() as audit:
        for case in sample:
            _rewrite(case.model, mode, "cuda")
    assert audit.mismatches == []
    assert audit.plans >= len(sample) > 100 and audit.groups > 100


@pytest.mark.parametrize("mode", LOWERING)
def test_a_nodes_inputs_asked_together_need_what_each_asked_alone_needs(mode: str) -> None:
    """``Needs.required_inputs`` (the rewrite asks it once per node) answers ``required`` for every input."""
    asked = 0
    for build in EXPORTER_MODELS.values():
        ir_model, plan = plan_for(build(), mode)
        for graph in graphs_of(ir_model):
            for node in graph:
                together = plan.needs.required_inputs(node)
                assert together == [plan.needs.required(node, index) for index in range(len(node.inputs))]
                asked += sum(dtype is not None for dtype in together)
    assert asked > 0
