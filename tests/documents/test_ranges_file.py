"""The value ranges file's format: version 2 (exponent histograms, zeros, the weights digest) written and read back
exactly, version 1 files still read with what they cannot tell said, a newer version refused as newer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.decide.ranges_input import read_ranges
from ampconfig.documents.ranges_file import RANGES_FORMAT_VERSION, load_ranges, parse_ranges, ranges_text
from ampconfig.errors import AmpconfigError
from ampconfig.model_io.models import open_model
from tests.graphs import FLOAT
from tests.lock_trees import cli
from tests.spectrum_models import loud_frames, write_power_spectrum


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ranges_file")
    model, inputs = write_power_spectrum(folder)
    ranges = folder / "ranges.json"
    assert cli("calibrate", model, "--inputs", inputs, "-o", ranges).exit_code == 0
    return model, ranges


def _version_1(data: dict) -> dict:
    """The file as ampconfig wrote it before histograms: no zeros, exponents nor weights digest."""
    old = json.loads(json.dumps(data))
    old["format_version"] = 1
    del old["model"]["weights_sha256"]
    for value in old["values"].values():
        del value["zeros"], value["exponents"], value["elements"]
    return old


def test_version_2_reads_back_as_written(measured: tuple[Path, Path]) -> None:
    _, path = measured
    ranges, _ = load_ranges(path)
    assert ranges.format_version == RANGES_FORMAT_VERSION == 3
    assert ranges_text(ranges) == path.read_text(encoding="utf-8")
    power = ranges.values["power"]
    assert power.exponents is not None and power.zeros == 0
    assert sum(power.exponents.values()) + power.zeros + power.nonfinite == 12 * 33  # every element counted
    assert list(power.exponents) == sorted(power.exponents, key=int)  # in exponent order: diffs stay small


def test_version_1_still_reads_and_says_what_it_cannot_judge(measured: tuple[Path, Path], tmp_path: Path) -> None:
    model, path = measured
    old = tmp_path / "old.ranges.json"
    old.write_text(json.dumps(_version_1(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
    current = read_ranges(path, open_model(model).proto)
    ranges = read_ranges(old, open_model(model).proto)
    assert ranges.peaks == current.peaks and not ranges.spreads and current.spreads
    assert len(ranges.notes) == 1 and "version 1" in ranges.notes[0] and not current.notes
    result = cli("rewrite", model, "--ranges", old, "-o", tmp_path / "out.onnx", "--json")
    assert result.exit_code == 0
    assert any("version 1" in warning for warning in json.loads(result.stdout)["warnings"])


def test_a_newer_version_is_named_as_newer(measured: tuple[Path, Path]) -> None:
    _, path = measured
    data = json.loads(path.read_text(encoding="utf-8"))
    with pytest.raises(AmpconfigError) as raised:
        parse_ranges(json.dumps({**data, "format_version": RANGES_FORMAT_VERSION + 1}), "newer.json")
    newer = RANGES_FORMAT_VERSION + 1
    problem = raised.value.problems[0]
    assert (
        f"written by a newer ampconfig (format {newer}; this one reads up to {RANGES_FORMAT_VERSION})"
        in problem.message
    )
    assert problem.json_path == "$.format_version" and "upgrade ampconfig" in str(problem.hint)


# ------------------------------------------------------------------------- the file as a whole (issue 44)
def _with_value(measured: tuple[Path, Path], tmp_path: Path, name: str, **fields: object) -> Path:
    """The measured file with value ``power``'s fields replaced (its elements kept consistent unless given)."""
    data = json.loads(measured[1].read_text(encoding="utf-8"))
    value = {**data["values"]["power"], **fields}
    if "elements" not in fields:
        value["elements"] = value["zeros"] + value["nonfinite"] + sum(value["exponents"].values())
    data["values"]["power"] = value
    path = tmp_path / f"{name}.ranges.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


_SMALL = {"min": -2.9, "max": 1.5, "max_abs": 2.9, "nonfinite": 0, "zeros": 0}


@pytest.mark.parametrize(
    ("case", "fields", "json_path", "named"),
    [
        ("bin above max_abs", {**_SMALL, "exponents": {"1": 10, "100": 1}}, 'exponents["100"]', "max_abs 2.9"),
        ("only tiny bins", {**_SMALL, "exponents": {"-30": 1000}}, "exponents", "no bin 1"),
        ("bin below min", {"min": 0.5, "max": 2.9, "max_abs": 2.9, "nonfinite": 0, "zeros": 0,
                           "exponents": {"-3": 1, "-1": 1, "1": 1}}, 'exponents["-3"]', "min 0.5"),
        ("no bin at min", {"min": 0.5, "max": 2.9, "max_abs": 2.9, "nonfinite": 0, "zeros": 0,
                           "exponents": {"1": 4}}, "exponents", "min 0.5"),
        ("max_abs apart", {**_SMALL, "max_abs": 7.0, "exponents": {"1": 3}}, "max_abs", "min and max"),
        ("min above max", {**_SMALL, "min": 3.0, "max": 2.9, "exponents": {"1": 3}}, "min", "max 2.9"),
        ("zeros outside", {"min": 0.5, "max": 2.9, "max_abs": 2.9, "nonfinite": 0, "zeros": 4,
                           "exponents": {"-1": 1, "1": 1}}, "zeros", "min 0.5"),
        ("a count of 10^40", {**_SMALL, "exponents": {"1": 10**40}}, 'exponents["1"]', "9223372036854775807"),
        ("counts beyond elements", {**_SMALL, "exponents": {"1": 10}, "elements": 9}, "elements", "add up to 10"),
        ("outside float32", {**_SMALL, "exponents": {"1": 1, "-150": 1}}, 'exponents["-150"]', "-149 to 127"),
        ("a 2^127 bin, no sentinel", {**_SMALL, "exponents": {"1": 10, "127": 4}, "sentinels": 0},
         'exponents["127"]', "sentinels says 0"),
        ("more in 2^127 than sentinels", {**_SMALL, "exponents": {"1": 10, "127": 4}, "sentinels": 3},
         'exponents["127"]', "sentinels says 3"),
    ],
)  # fmt: skip
def test_fields_that_contradict_each_other_are_refused_at_one_naming_the_other(
    measured: tuple[Path, Path], tmp_path: Path, case: str, fields: dict, json_path: str, named: str
) -> None:
    """Each of these passed on main (exit 0, no warning): every field was valid on its own. Measured on main
    (2026-12-07): "only tiny bins" given to value ``re`` of a version 2 file kept dft_re float32 by
    range_underflows in ``explain``, exit 0."""
    model, _ = measured
    path = _with_value(measured, tmp_path, case.replace(" ", "_"), **fields)
    with pytest.raises(AmpconfigError) as raised:
        load_ranges(path)
    problem = raised.value.problems[0]
    assert problem.json_path is not None and problem.json_path.endswith(json_path), problem
    assert "power" in problem.json_path and named in problem.message, problem.message
    result = cli("rewrite", model, "--ranges", path, "-o", tmp_path / "out.onnx")
    assert result.exit_code == 2 and json_path in result.stderr and not (tmp_path / "out.onnx").exists()


def test_a_sentinel_bin_above_max_abs_is_read_as_a_masks_fill(measured: tuple[Path, Path], tmp_path: Path) -> None:
    """The documented reading: magnitudes from 2^126 up may be sentinels (float32's min as an attention mask's fill
    lands in bin 127), which max_abs leaves out; such a bin beside a small max_abs is what calibrate writes for a
    masked value, with as many sentinels, and no range rule reads it. (Without the sentinel count, which issue 44
    asked for, a 2^127 bin beside max_abs 2.9 could not be told from a contradiction: the cases above refuse it.)"""
    path = _with_value(measured, tmp_path, "sentinel", **_SMALL, exponents={"1": 10, "127": 4}, sentinels=4)
    ranges, _ = load_ranges(path)
    assert ranges.values["power"].exponents == {"1": 10, "127": 4} and ranges.values["power"].sentinels == 4


def test_calibrate_counts_a_masks_fill_as_sentinels(tmp_path: Path) -> None:
    """A value holding an attention mask's fill (float32's lowest, -3.4e38) is written with its sentinel count, and
    the file reads back: its 2^127 bin is explained by it."""
    fill = float(np.finfo(np.float32).min)
    nodes = [oh.make_node("Where", ["keep", "x", "fill"], ["masked"], name="mask")]
    graph = oh.make_graph(
        nodes,
        "masked",
        [oh.make_tensor_value_info("keep", TensorProto.BOOL, [2, 3]), oh.make_tensor_value_info("x", FLOAT, [2, 3])],
        [oh.make_tensor_value_info("masked", FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(fill, np.float32), "fill")],
    )
    model = tmp_path / "masked.onnx"
    onnx.save_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10), model)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, keep=np.array([[True, False, True], [False, True, True]]), x=np.full((2, 3), 1.5, np.float32))
    ranges_path = tmp_path / "masked.ranges.json"
    result = cli("calibrate", model, "--inputs", inputs, "-o", ranges_path)
    assert result.exit_code == 0, result.stderr
    value = json.loads(ranges_path.read_text(encoding="utf-8"))["values"]["masked"]
    assert (value["max_abs"], value["sentinels"], value["exponents"]) == (1.5, 2, {"0": 4, "127": 2})
    ranges, _ = load_ranges(ranges_path)
    assert ranges.values["masked"].sentinels == 2


def test_a_version_2_file_reads_without_element_counts(measured: tuple[Path, Path], tmp_path: Path) -> None:
    data = json.loads(measured[1].read_text(encoding="utf-8"))
    data["format_version"] = 2
    for value in data["values"].values():
        del value["elements"]
    path = tmp_path / "v2.ranges.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_ranges(path)[0].format_version == 2
    data["format_version"] = 3
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(AmpconfigError, match="version 3 value ranges file records every value's elements"):
        load_ranges(path)


# ------------------------------------------------------------------------- merging contradictions (issue 44)
@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Shards 1 and 2 of 2 of four samples of the power spectrum model: two samples each."""
    folder = tmp_path_factory.mktemp("shards")
    model, _ = write_power_spectrum(folder)
    data = folder / "samples"
    data.mkdir()
    for seed in range(4):
        np.savez(data / f"s{seed}.npz", frames=loud_frames(seed=seed))
    made = []
    for index in (1, 2):
        path = folder / f"ranges-{index}.json"
        assert cli("calibrate", model, "--calibration-data", data, "--shard", f"{index}/2", "-o", path).exit_code == 0
        made.append(path)
    return made[0], made[1]


def _relabelled(shard: Path, tmp_path: Path, *, index: int, source: bool) -> Path:
    """Shard 1's file edited to say it is shard ``index``; with ``source`` its data source edited to match."""
    data = json.loads(shard.read_text(encoding="utf-8"))
    data["data"]["shard"]["index"] = index
    if source:
        data["data"]["source"] = data["data"]["source"].replace("(shard 1 of 2)", f"(shard {index} of 2)")
    path = tmp_path / f"relabelled-{index}-{source}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_relabelled_shard_contradicts_its_data_source(two_shards: tuple[Path, Path], tmp_path: Path) -> None:
    """On main shard 1's file edited to say 2 merged with shard 1: "merged from 2 shards", shard 2 never measured."""
    first, _ = two_shards
    relabelled = _relabelled(first, tmp_path, index=2, source=False)
    result = cli("ranges", "merge", first, relabelled, "-o", tmp_path / "merged.json")
    assert result.exit_code == 2 and not (tmp_path / "merged.json").exists()
    assert "$.data.shard.index" in result.stderr and "data.source says shard 1 of 2" in result.stderr


def test_two_shards_with_one_data_digest_are_refused(two_shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, _ = two_shards
    relabelled = _relabelled(first, tmp_path, index=2, source=True)
    assert load_ranges(relabelled)[0].data.shard is not None  # every field agrees within the file
    result = cli("ranges", "merge", first, relabelled, "-o", tmp_path / "merged.json")
    assert result.exit_code == 2 and not (tmp_path / "merged.json").exists()
    assert "$.data.sha256" in result.stderr and "measured the same data" in result.stderr


def test_a_shard_whose_sample_count_is_not_its_shares_is_refused(two_shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, _ = two_shards
    data = json.loads(first.read_text(encoding="utf-8"))
    data["data"]["shard"]["files"] = 6  # shard 1 of 2 of six files holds three
    path = tmp_path / "six.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(AmpconfigError) as raised:
        load_ranges(path)
    assert raised.value.problems[0].json_path == "$.data.samples" and "holds 3" in raised.value.problems[0].message


@pytest.mark.parametrize(("edit", "named"), [("index", "beyond data.shard.count"), ("count", "more than data.shard")])
def test_a_shard_number_beyond_its_split_is_refused(
    two_shards: tuple[Path, Path], tmp_path: Path, edit: str, named: str
) -> None:
    first, _ = two_shards
    data = json.loads(first.read_text(encoding="utf-8"))
    data["data"]["shard"][edit] = 9
    path = tmp_path / f"{edit}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(AmpconfigError, match=named):
        load_ranges(path)


def test_a_shard_count_other_than_the_files_given_is_refused(two_shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = two_shards
    result = cli("ranges", "merge", first, "-o", tmp_path / "merged.json")
    assert result.exit_code == 2 and "the split has 2 shards (data.shard.count), but 1 file is given" in result.stderr
    assert cli("ranges", "merge", second, first, "-o", tmp_path / "merged.json").exit_code == 0


def test_one_file_given_twice_is_named_as_a_shard_given_twice(two_shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = two_shards
    result = cli("ranges", "merge", first, first, second, "-o", tmp_path / "merged.json")
    assert result.exit_code == 2 and "shard 1 is given twice" in result.stderr
