"""The rewrite's options (``ampconfig/decide/rewrite_options.py``): frozen, and holding read-only copies of the
mappings and lists a caller hands in, so what the caller changes afterwards changes no options already made."""

from __future__ import annotations

import dataclasses

import pytest

from ampconfig.decide.decisions import Rule
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.decide.user_judgements import Judgement
from ampconfig.engine.in_place import rewrite_with_options
from ampconfig.precision_modes import PrecisionMode
from tests.graphs import transformer_block


def test_a_callers_dicts_and_lists_changed_afterwards_change_nothing() -> None:
    overflow = {"n1": "calibration saw 1e6"}
    refused = {"n2": "ORT refused it"}
    judges = {"Erf": Judgement("black", "ours")}
    mixlist = {"black-list": {"to-add": ["Erf"]}}
    keep = ["n3"]
    options = RewriteOptions(
        PrecisionMode.ALLOW_MIX_PRECISION,
        overflow_nodes=overflow,
        runtime_refused=refused,
        judges=judges,
        modify_mixlist=mixlist,
        keep_dtype=keep,
    )
    overflow["n4"] = "added"
    refused.clear()
    judges["Gelu"] = Judgement("white", "added")
    mixlist["black-list"]["to-add"].append("Gelu")
    keep.append("n5")
    assert dict(options.overflow_nodes) == {"n1": "calibration saw 1e6"}
    assert dict(options.runtime_refused) == {"n2": "ORT refused it"}
    assert list(options.judges) == ["Erf"]
    assert options.modify_mixlist == {"black-list": {"to-add": ["Erf"]}}
    assert options.keep_dtype == ("n3",)


@pytest.mark.parametrize("name", ["overflow_nodes", "runtime_refused", "judges", "modify_mixlist"])
def test_the_mappings_held_are_read_only(name: str) -> None:
    options = RewriteOptions.of("allow_mix_precision", modify_mixlist={"black-list": {"to-add": ["Erf"]}})
    with pytest.raises(TypeError):
        getattr(options, name)["x"] = "y"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(options, name, {})


def test_a_rewrite_decides_with_the_lists_as_they_were_when_the_options_were_made() -> None:
    keep = ["q_proj"]
    options = RewriteOptions.of("force_fp16", target="cuda", keep_dtype=keep)
    keep.clear()  # the caller's list, emptied before the rewrite runs
    decisions = {d.name: d for d in rewrite_with_options(transformer_block(), options).decisions}
    assert decisions["q_proj"].dtype == "float32" and decisions["q_proj"].rule is Rule.KEEP_DTYPE
    assert decisions["k_proj"].dtype == "float16"
