"""Value ranges from a ranges file (``--ranges``, config ``ranges:``, the API's ``ranges=``), checked against the
model they decide: the one reader every deciding command and the API use (:mod:`ampconfig.prove.calibration`
measures them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from ampconfig.decide.value_limits import ValueRanges, ValueSpread
from ampconfig.errors import AmpconfigError

if TYPE_CHECKING:  # the fingerprints (hashing every weight): imported when a ranges file is read or written
    from ampconfig.model_io.identity import ModelFingerprint, TensorBytes

#: What a deciding command says when neither ranges nor data were given (a warning: the result may overflow).
NOT_CHECKED = (
    "activations were not checked against the low type's range (no ranges and no data: constants were): a node "
    "whose values overflow it on real inputs is lowered anyway; give --ranges FILE (ampconfig calibrate) or --data"
)


def structure_sha256(model: onnx.ModelProto) -> str:
    """The structure value ranges are keyed by: the lock's structure hash without the declared types of
    intermediate values (``value_info``), which exporters and tools add or drop without moving any value. No weight
    is read."""
    from ampconfig.model_io.identity import model_fingerprint

    return model_fingerprint(model, weights=False, declared_types=False).structure_sha256


def ranges_identity(
    model: onnx.ModelProto, model_path: str | Path | None = None, left_out: Mapping[str, TensorBytes] | None = None
) -> ModelFingerprint:
    """The structure (:func:`structure_sha256`) and the weights digest (a lock's) of ``model``, in one walk that
    reads every weight once (external ones from the folder of ``model_path``; ``left_out``: the main-graph weights a
    weightless proto holds without their bytes)."""
    from ampconfig.model_io.identity import model_fingerprint

    return model_fingerprint(model, model_path, declared_types=False, left_out=left_out)


def read_ranges(
    path: Path,
    model: onnx.ModelProto,
    margin: float | None = None,
    *,
    model_path: str | Path | None = None,
    left_out: Mapping[str, TensorBytes] | None = None,
) -> ValueRanges:
    """The ranges of a ranges file, for ``model`` (the input model as opened, its external weights in the folder
    of ``model_path``; ``left_out``: the weights a weightless proto holds without bytes) with the range rule's
    ``margin`` (None: the default): a file measured on another model structure, or (version 2) on other weights,
    is refused (exit 2), both hashes named. Checking the weights reads each of them once."""
    from ampconfig.documents.ranges_file import load_ranges  # pydantic's models: only with a ranges file
    from ampconfig.model_io.identity import model_fingerprint

    ranges, sha256 = load_ranges(path)
    measured = f" (measured on {ranges.model.path})" if ranges.model.path else ""
    hint = "make the ranges again for this model: ampconfig calibrate MODEL --data DIR -o RANGES.json"
    recorded_weights = ranges.model.weights_sha256
    identity = (
        ranges_identity(model, model_path, left_out)
        if recorded_weights is not None
        else model_fingerprint(model, weights=False, declared_types=False)
    )
    if ranges.model.structure_sha256 != identity.structure_sha256:
        raise AmpconfigError(
            f"the value ranges were measured on another model structure{measured}: the file records structure "
            f"{ranges.model.structure_sha256}, the model has {identity.structure_sha256}",
            file=str(path),
            json_path="$.model.structure_sha256",
            hint=hint,
        )
    if recorded_weights is not None and recorded_weights != identity.weights_sha256:
        raise AmpconfigError(
            f"the value ranges were measured on other weights{measured} (a retrained or fine-tuned model's values "
            f"differ): the file records weights {recorded_weights}, the model has {identity.weights_sha256}",
            file=str(path),
            json_path="$.model.weights_sha256",
            hint=hint,
        )
    peaks = {key: value.max_abs for key, value in ranges.values.items()}
    spreads = {
        key: ValueSpread(value.zeros, value.nonfinite, {int(e): count for e, count in value.exponents.items()})
        for key, value in ranges.values.items()
        if value.zeros is not None and value.exponents is not None
    }
    return ValueRanges(
        peaks,
        f"{ranges.data.source} (ranges file {path})",
        margin,
        file=str(path),
        file_sha256=sha256,
        data_sha256=ranges.data.sha256,
        spreads=spreads,
        notes=(version_1_note(path),) if ranges.format_version == 1 else (),
    )


def version_1_note(path: Path) -> str:
    """What a version 1 ranges file cannot tell (it holds each value's extremes only, and no weights digest)."""
    return (
        f"the value ranges file {path} is format version 1: it holds no exponent histograms and no weights digest, "
        "so underflow (values below the low type's normal range) is not judged and the file is not checked against "
        "the model's weights; make it again to judge both (ampconfig calibrate)"
    )


def coverage_warnings(ranges: ValueRanges, keys: Sequence[str]) -> list[str]:
    """What a ranges file does not cover of a model whose float values are ``keys``, and what it names that the
    model lacks: warnings for every deciding command (the values not covered are not checked against the low
    type's range; the others decide nothing)."""
    present = set(keys)
    missing = [key for key in keys if key not in ranges.peaks]
    extra = [key for key in ranges.peaks if key not in present]
    warnings = []
    if missing:
        warnings.append(
            f"{len(missing)} float value(s) are not in the ranges file {ranges.file} and were not checked against the "
            f"low type's range: {_shown(missing)}; make the ranges again (ampconfig calibrate)"
        )
    if extra:
        warnings.append(
            f"the ranges file {ranges.file} names {len(extra)} value(s) the model does not have, which decide "
            f"nothing: {_shown(extra)}; make the ranges again for this model (ampconfig calibrate)"
        )
    return warnings


def _shown(keys: Sequence[str]) -> str:
    return ", ".join(repr(key) for key in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
