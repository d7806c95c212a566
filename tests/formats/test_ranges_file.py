"""The value ranges file's format: version 2 (exponent histograms, zeros, the weights digest) written and read back
exactly, version 1 files still read with what they cannot tell said, a newer version refused as newer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampconfig.decide.ranges_input import read_ranges
from ampconfig.errors import AmpconfigError
from ampconfig.files.models import open_model
from ampconfig.formats.ranges_file import RANGES_FORMAT_VERSION, load_ranges, parse_ranges, ranges_text
from tests.lock_trees import cli
from tests.spectrum_models import write_power_spectrum


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
        del value["zeros"], value["exponents"]
    return old


def test_version_2_reads_back_as_written(measured: tuple[Path, Path]) -> None:
    _, path = measured
    ranges, _ = load_ranges(path)
    assert ranges.format_version == RANGES_FORMAT_VERSION == 2
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
