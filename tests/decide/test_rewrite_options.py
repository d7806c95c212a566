"""The rewrite's options (``ampconfig/decide/rewrite_options.py``): frozen, and holding read-only copies of the
mappings and lists a caller hands in, so what the caller changes afterwards changes no options already made."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ampconfig.decide.chosen_lists import ChosenMixlist
from ampconfig.decide.decisions import Rule
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import RewriteOptions, from_keywords
from ampconfig.decide.user_judgements import Judgement
from ampconfig.documents.mixlist_file import Mixlist
from ampconfig.engine.in_place import rewrite_with_options
from ampconfig.errors import AmpconfigError
from ampconfig.precision_modes import PrecisionMode
from tests.graphs import transformer_block


def test_a_callers_dicts_and_lists_changed_afterwards_change_nothing() -> None:
    overflow = {"n1": "calibration saw 1e6"}
    refused = {"n2": "ORT refused it"}
    judges = {"Erf": Judgement("black", "ours")}
    mixlist = {"black-list": {"to-add": ["Erf"]}}
    keep = ["n3"]
    options = RewriteOptions(PrecisionMode.ALLOW_MIX_PRECISION, judges=judges, modify_mixlist=mixlist, keep_dtype=keep)
    facts = MeasuredFacts(overflow_nodes=overflow, runtime_refused=refused)
    overflow["n4"] = "added"
    refused.clear()
    judges["Gelu"] = Judgement("white", "added")
    mixlist["black-list"]["to-add"].append("Gelu")
    keep.append("n5")
    assert dict(facts.overflow_nodes) == {"n1": "calibration saw 1e6"}
    assert dict(facts.runtime_refused) == {"n2": "ORT refused it"}
    assert list(options.judges) == ["Erf"]
    assert isinstance(options.modify_mixlist, ChosenMixlist) and options.modify_mixlist.path is None
    assert options.modify_mixlist.mixlist.black_list.to_add == ["Erf"]
    assert options.keep_dtype is not None and [entry.name for entry in options.keep_dtype.entries] == ["n3"]


@pytest.mark.parametrize(
    ("held", "name"), [("facts", "overflow_nodes"), ("facts", "runtime_refused"), ("options", "judges")]
)
def test_the_mappings_held_are_read_only(held: str, name: str) -> None:
    options, facts, _ = from_keywords("allow_mix_precision", judges={}, overflow_nodes={}, runtime_refused={})
    holder = options if held == "options" else facts
    with pytest.raises(TypeError):
        getattr(holder, name)["x"] = "y"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(holder, name, {})


def test_the_api_keywords_split_into_choices_facts_and_the_ranges_file(tmp_path: Path) -> None:
    """The user's choices hold no measured fact and no ranges file: those travel apart (issue 46, item 4)."""
    ranges = tmp_path / "ranges.json"
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text('{"black-list": {"to-add": ["Erf"]}}')
    options, facts, ranges_file = from_keywords(
        "allow_mix_precision",
        modify_mixlist=str(mixlist),
        keep_dtype=["a", "b"],
        overflow_nodes={"n1": "big"},
        runtime_refused={"n2": "crashed"},
        ranges=str(ranges),
        data_max=1000.0,
    )
    choices = {field.name for field in dataclasses.fields(RewriteOptions)}
    assert not choices & {"value_ranges", "overflow_nodes", "runtime_refused", "ranges"}
    assert options.modify_mixlist is not None and options.modify_mixlist.path == mixlist
    assert options.keep_dtype is not None and [entry.name for entry in options.keep_dtype.entries] == ["a", "b"]
    assert options.data_max == 1000.0
    assert dict(facts.overflow_nodes) == {"n1": "big"} and dict(facts.runtime_refused) == {"n2": "crashed"}
    assert ranges_file == ranges
    assert dict(facts.refusing({"n3": "refused"}).runtime_refused) == {"n2": "crashed", "n3": "refused"}


def test_an_inline_mixlist_is_read_as_a_mixlist_without_a_round_trip_through_text() -> None:
    """A mapping that json.dumps cannot write (a set of op types) was a TypeError traceback from the JSON round
    trip on main; it is read as data now. A wrong key is said as a mixlist file's would be."""
    options = RewriteOptions.of("allow_mix_precision", modify_mixlist={"black-list": {"to-add": {"Erf"}}})
    assert options.modify_mixlist is not None and isinstance(options.modify_mixlist.mixlist, Mixlist)
    assert options.modify_mixlist.mixlist.black_list.to_add == ["Erf"]
    with pytest.raises(AmpconfigError, match="black-lsit"):
        RewriteOptions.of("allow_mix_precision", modify_mixlist={"black-lsit": {"to-add": ["Erf"]}})


def test_a_fact_of_the_wrong_type_is_named() -> None:
    with pytest.raises(AmpconfigError, match="runtime_refused must be a mapping of node names to reasons"):
        from_keywords("allow_mix_precision", runtime_refused={"n": 1})


def test_a_rewrite_decides_with_the_lists_as_they_were_when_the_options_were_made() -> None:
    keep = ["q_proj"]
    options = RewriteOptions.of("force_fp16", target="cuda", keep_dtype=keep)
    keep.clear()  # the caller's list, emptied before the rewrite runs
    decisions = {d.name: d for d in rewrite_with_options(transformer_block(), options).decisions}
    assert decisions["q_proj"].dtype == "float32" and decisions["q_proj"].rule is Rule.KEEP_DTYPE
    assert decisions["k_proj"].dtype == "float16"


def test_the_list_files_are_read_once_when_the_options_are_made(tmp_path: Path) -> None:
    """The edge reads the files the choices name: a file changed after the options were made changes no rewrite
    made with them, and each list holds one type, its content with the file it came from. On main the files were
    read at each rewrite (the options held their paths), so the emptied keep_dtype file pinned nothing."""
    keep = tmp_path / "keep.cfg"
    keep.write_text("q_proj\n")
    customize = tmp_path / "customize.cfg"
    customize.write_text("OpType::Softmax:InputDtype:float32,OutputDtype:float32\n")
    options = RewriteOptions.of("force_fp16", target="cuda", keep_dtype=keep, customize_dtypes=str(customize))
    keep.write_text("")
    customize.write_text("")
    assert options.keep_dtype is not None and options.keep_dtype.source == str(keep)
    assert options.customize_dtypes is not None and options.customize_dtypes.source == str(customize)
    decisions = {d.name: d for d in rewrite_with_options(transformer_block(), options).decisions}
    assert decisions["q_proj"].dtype == "float32" and decisions["q_proj"].rule is Rule.KEEP_DTYPE
    assert any(d.rule is Rule.CUSTOMIZED for d in decisions.values())


def test_a_broken_list_file_is_refused_when_the_options_are_made(tmp_path: Path) -> None:
    """The error names the file and line, as the rewrite's did, but before any model is opened."""
    keep = tmp_path / "keep.cfg"
    keep.write_text("q_proj\nOpType::\n")
    with pytest.raises(AmpconfigError) as raised:
        RewriteOptions.of("force_fp16", keep_dtype=keep)
    assert raised.value.file == str(keep) and raised.value.line == 2
