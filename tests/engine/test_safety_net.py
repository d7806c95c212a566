"""prove.safety_net: the lowered nodes that make ONNX Runtime crash on or refuse a rewritten model are found and
kept in their original dtype. The search is tested on its own (a rule for which keeps make the model run) and on
real rewrites whose probes run in ONNX Runtime's worker process (crashes injected from the tests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
import pytest

from ampconfig.api import rewrite_model_detailed
from ampconfig.decide.decisions import Rule
from ampconfig.engine.safety_net import MAX_KEPT, Failure, Outcome, check_rewrite, find_kept, lowered_nodes, repair
from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.results import RewriteResult
from ampconfig.worker.client import Phase
from tests.graphs import library, resize_chain
from tests.worker_faults import fresh_worker, inject

__all__ = ["fresh_worker"]  # the fixture, used by name

CRASH = Failure(Outcome.CRASHED, Phase.LOAD, "killed by SIGSEGV")
NODES = [f"n{index}" for index in range(40)]


def _fails_unless(*needed: str) -> tuple[list[frozenset[str]], Callable[[Mapping[str, str]], Failure | None]]:
    """A model that crashes unless every node of ``needed`` is kept; the probes it was asked about."""
    asked: list[frozenset[str]] = []

    def fails_keeping(kept: Mapping[str, str]) -> Failure | None:
        asked.append(frozenset(kept))
        return None if set(needed) <= set(kept) else CRASH

    return asked, fails_keeping


def _why(failure: Failure) -> str:
    return failure.says()


@pytest.mark.parametrize("needed", [("n0",), ("n17",), ("n39",), ("n3", "n30"), ("n8", "n9", "n25")])
def test_the_search_keeps_exactly_the_nodes_that_cause_the_crash(needed: tuple[str, ...]) -> None:
    asked, fails_keeping = _fails_unless(*needed)
    kept = find_kept(NODES, CRASH, fails_keeping, _why)
    assert set(kept) == set(needed)
    assert all(why == "crashed (killed by SIGSEGV) while loading" for why in kept.values())
    # A binary search per node, not a probe per node.
    assert len(asked) <= len(needed) * (2 + 6)


def test_a_node_that_onnx_runtime_names_is_kept_without_a_search() -> None:
    asked, fails_keeping = _fails_unless("n21")
    refusal = Failure(Outcome.REFUSED, Phase.RUN, "Non-zero status code returned while running Foo node. Name:'n21'")
    assert find_kept(NODES, refusal, fails_keeping, _why) == {"n21": _why(refusal)}
    assert asked == [frozenset({"n21"})]


def test_when_keeping_every_lowered_node_does_not_help_the_net_gives_up_with_a_clear_error() -> None:
    def always(kept: Mapping[str, str]) -> Failure | None:
        return CRASH

    with pytest.raises(AmpconfigError) as caught:
        find_kept(NODES, CRASH, always, _why)
    assert "crashed (killed by SIGSEGV) while loading the rewritten model" in caught.value.message
    assert "keeping every node ampconfig lowered did not help" in caught.value.message


def test_more_culprits_than_the_limit_is_an_error_not_a_model_kept_in_float32() -> None:
    _, fails_keeping = _fails_unless(*NODES[: MAX_KEPT + 1])
    with pytest.raises(AmpconfigError, match=f"more than {MAX_KEPT} nodes"):
        find_kept(NODES, CRASH, fails_keeping, _why)


# ------------------------------------------------------------------------------------------ real rewrites


def _resize_model(mode: str = "cubic") -> onnx.ModelProto:
    """x [8, 8] -> MatMul -> Reshape [1, 1, 4, 16] -> Resize (``mode``, x2) -> Relu -> y."""
    return resize_chain(mode, [1, 1, 4, 16], [1, 1, 2, 2], [1, 1, 8, 32], opset=17)


SAMPLE = {"x": np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)}
COLOURS = {"MatMul": "white", "Reshape": "clear", "Resize": "clear", "Relu": "clear"}


def test_a_real_crash_of_a_lowered_node_is_found_and_that_node_keeps_float32(
    monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    inject(monkeypatch, "load:segv:lowered:Resize")
    lib = library(COLOURS, ("float32", "float16"))

    def rewrite(kept: Mapping[str, str]) -> RewriteResult:
        return rewrite_model_detailed(
            _resize_model(), "force_fp16", op_info=lib, runtime_refused=kept, load_check=False
        )

    result = rewrite({})
    assert set(lowered_nodes(result)) >= {"mm", "reshape", "resize", "relu"}
    failure = check_rewrite(result, SAMPLE, "cpu")
    assert failure is not None and failure.outcome is Outcome.CRASHED and failure.phase is Phase.LOAD

    repaired = repair(result, failure, rewrite, SAMPLE, "cpu")
    by_name = {d.name: d for d in repaired.decisions}
    assert (by_name["resize"].dtype, by_name["resize"].rule) == ("float32", Rule.RUNTIME_REFUSES)
    assert "crashed (killed by SIGSEGV) while loading" in by_name["resize"].reason
    assert {by_name[name].dtype for name in ("mm", "relu")} == {"float16"}  # the rest stays lowered
    assert [w for w in repaired.warnings if "runtime_refuses" in w] == [
        "node resize kept float32 (rule runtime_refuses): ONNX Runtime crashed (killed by SIGSEGV) while loading "
        "the rewritten model with it in float16"
    ]  # repair's last probe loaded and ran this very rewrite in the worker


def test_a_real_refusal_from_an_op_info_gap_is_repaired() -> None:
    # Op info that claims bfloat16 MatMul, Resize and Relu on the CPU, which has no such kernels: ORT refuses them.
    lib = library(COLOURS, ("float32", "bfloat16"))

    def rewrite(kept: Mapping[str, str]) -> RewriteResult:
        return rewrite_model_detailed(
            _resize_model(), "allow_mix_precision_bf16", op_info=lib, runtime_refused=kept, load_check=False
        )

    result = rewrite({})
    failure = check_rewrite(result, SAMPLE, "cpu")
    assert failure is not None and failure.outcome is Outcome.REFUSED
    repaired = repair(result, failure, rewrite, SAMPLE, "cpu")
    kept = {d.name for d in repaired.decisions if d.rule is Rule.RUNTIME_REFUSES}
    assert kept and kept <= {"mm", "reshape", "resize", "relu"}
