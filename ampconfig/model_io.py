"""Reading input models and writing output models safely.

Inputs: a path or an in-memory ``onnx.ModelProto``; unreadable, truncated or invalid models become one clear
:class:`AmpconfigError`. Outputs are written atomically (a temporary file in the destination folder, then
``os.replace``), never over the input model, and only after the model passed the checker.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ampconfig.errors import AmpconfigError

#: Protobuf cannot serialise a single message above 2 GiB.
PROTOBUF_LIMIT = 2**31 - 1


def load_model(model: str | Path | onnx.ModelProto, *, what: str = "model") -> tuple[onnx.ModelProto, str | None]:
    """The model proto and its path (None for an in-memory model)."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    path = Path(model)
    if not path.exists():
        raise AmpconfigError(f"{what} file not found", file=str(path), hint="check the path")
    if path.is_dir():
        raise AmpconfigError(f"{what} path is a directory, expected an .onnx file", file=str(path))
    try:
        proto = onnx.load(str(path), load_external_data=True)
    except (
        DecodeError,
        ValueError,
        RuntimeError,
        OSError,
        onnx.onnx_cpp2py_export.checker.ValidationError,
    ) as exc:
        raise AmpconfigError(
            f"cannot read {what}: {_first_line(exc)}",
            file=str(path),
            hint="is it a complete .onnx file (not truncated, not another format)?",
        ) from None
    if not proto.graph.node and not proto.graph.output:
        raise AmpconfigError(f"{what} has an empty graph", file=str(path), hint="is it really an ONNX model?")
    return proto, str(path)


def check_input_model(proto: onnx.ModelProto, source: str | None) -> None:
    """The input must pass the same full check as every output: a model that already fails it cannot be
    rewritten into one that passes, so it is refused up front with the checker's reason."""
    try:
        if proto.ByteSize() > PROTOBUF_LIMIT:
            return  # too large for the in-memory checker; the path-based check runs on the output instead
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise AmpconfigError(
            f"the input model is not a valid ONNX model: {_first_line(exc)}",
            file=source,
            hint="fix or re-export the model; `python -m onnx.checker` style errors point at the node",
        ) from None


def output_model_problem(proto: onnx.ModelProto) -> str | None:
    """The full checker's complaint about a model about to be written, or None when it passes."""
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return _first_line(exc)
    return None


def refuse_invalid_output(problem: str) -> AmpconfigError:
    return AmpconfigError(
        f"the rewritten model would be invalid, so nothing was written: {problem}",
        hint="this is a bug in ampconfig; please report it with the model and the command",
    )


def save_model_atomic(proto: onnx.ModelProto, destination: str | Path, *, input_path: str | Path | None = None) -> Path:
    """Write ``proto`` to ``destination`` atomically; refuse to overwrite the input model."""
    target = Path(destination)
    if input_path is not None and target.resolve() == Path(input_path).resolve():
        raise AmpconfigError(
            "refusing to overwrite the input model", file=str(target), hint="choose another output path"
        )
    if target.is_dir():
        raise AmpconfigError("output path is a directory", file=str(target), hint="give a file name ending in .onnx")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise AmpconfigError("output folder does not exist", file=str(folder), hint="create it first")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        # mkstemp creates 0600; the output should get the permissions any new file gets here.
        os.chmod(temporary, 0o666 & ~_current_umask())
        onnx.save(proto, temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
