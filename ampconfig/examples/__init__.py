"""The example models shipped inside the package (``ampconfig/examples/*.onnx``).

They are built by ``examples/build_examples.py`` in the repository and are small enough to run in a second on
a CPU: ``ampconfig run`` with no model runs :data:`DEFAULT_EXAMPLE`.
"""

from __future__ import annotations

from pathlib import Path

from ampconfig.errors import AmpconfigError

#: Bundled example name -> one line saying what it is.
EXAMPLES: dict[str, str] = {
    "transformer_block": "pre-LN transformer block: int64 ids [batch, seq] -> logits [batch, seq, 1000]",
    "small_convnet": "2x Conv-BatchNorm-Relu-MaxPool + Gemm: float image [N, 3, 32, 32] -> logits [N, 10]",
}

DEFAULT_EXAMPLE = "transformer_block"

_EXAMPLES_DIR = Path(__file__).resolve().parent


def example_names() -> list[str]:
    return list(EXAMPLES)


def example_path(name: str = DEFAULT_EXAMPLE) -> Path:
    """Path of a bundled example model; an unknown name or a missing file is an :class:`AmpconfigError`."""
    key = name.removesuffix(".onnx")
    if key not in EXAMPLES:
        raise AmpconfigError(f"unknown example {name!r}", hint="bundled examples: " + ", ".join(EXAMPLES))
    path = _EXAMPLES_DIR / f"{key}.onnx"
    if not path.is_file():
        raise AmpconfigError(
            f"bundled example {key!r} is missing from the installation",
            file=str(path),
            hint="rebuild it with `python examples/build_examples.py` from the repository",
        )
    return path
