"""A ranges file is bound to the model's structure and weights: the same MLP with its weights x1e5 (retrained,
fine-tuned) refuses the file of the original in every deciding command and in the API and the pass, naming both
digests; the digest reads each weight once, from memory, external data or a weightless IR alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from ampconfig import MixedPrecisionPass, rewrite_model
from ampconfig.decide.ranges_input import ranges_identity
from ampconfig.errors import AmpconfigError
from ampconfig.model_io.identity import model_fingerprint
from ampconfig.model_io.models import weightless_proto
from tests.lock_trees import cli
from tests.value_models import MLP_WIDTH, mlp


@pytest.fixture(scope="module")
def mlps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The MLP, the same MLP with its weights x1e5, and the ranges calibrate made of the first."""
    folder = tmp_path_factory.mktemp("mlps")
    onnx.save(mlp(), folder / "mlp.onnx")
    onnx.save(mlp(1e5), folder / "mlp_x1e5.onnx")
    np.savez(folder / "x.npz", x=np.random.default_rng(0).standard_normal((4, MLP_WIDTH)).astype(np.float32))
    assert cli("calibrate", folder / "mlp.onnx", "--inputs", folder / "x.npz", "-o", folder / "r.json").exit_code == 0
    return folder / "mlp.onnx", folder / "mlp_x1e5.onnx", folder / "r.json"


@pytest.mark.parametrize("command", ["rewrite", "lock", "explain", "diff"])
def test_the_ranges_of_other_weights_are_exit_2_naming_both(mlps: tuple[Path, Path, Path], command: str) -> None:
    original, scaled, ranges = mlps
    out = ranges.parent / f"{command}.out"
    args = {
        "rewrite": ["rewrite", scaled, "-o", out],
        "lock": ["lock", scaled, "-o", out],
        "explain": ["explain", scaled],
        "diff": ["diff", scaled, "--base-precision-mode", "force_fp32"],
    }[command]
    result = cli(*args, "-m", "force_fp16", "--ranges", ranges)
    assert result.exit_code == 2 and not out.exists()
    recorded = model_fingerprint(onnx.load(original)).weights_sha256
    found = model_fingerprint(onnx.load(scaled)).weights_sha256
    assert "other weights" in result.output and recorded in result.output and found in result.output
    assert "model.weights_sha256" in result.output


def test_the_api_and_the_pass_refuse_them_too(mlps: tuple[Path, Path, Path]) -> None:
    original, scaled, ranges = mlps
    assert rewrite_model(original, "force_fp16", ranges=ranges) is not None
    with pytest.raises(AmpconfigError, match="other weights"):
        rewrite_model(scaled, "force_fp16", ranges=ranges)
    # the pass checks an ir.Model: its weights are read from the IR, not from a proto
    MixedPrecisionPass("force_fp16", ranges=ranges)(ir.load(original))
    with pytest.raises(AmpconfigError, match="other weights"):
        MixedPrecisionPass("force_fp16", ranges=ranges)(ir.load(scaled))


def test_the_weights_digest_is_the_same_however_the_weights_are_held(tmp_path: Path) -> None:
    expected = model_fingerprint(mlp(), declared_types=False)
    onnx.save(mlp(), tmp_path / "external.onnx", save_as_external_data=True, size_threshold=0)
    external = onnx.load(tmp_path / "external.onnx", load_external_data=False)
    assert ranges_identity(external, tmp_path / "external.onnx") == expected
    proto, left_out = weightless_proto(ir.from_proto(mlp()))
    assert left_out  # the 4 KiB weights are held without bytes
    assert ranges_identity(proto, None, left_out) == expected
