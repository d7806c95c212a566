"""Input arrays from ``.npy`` and ``.npz`` files, checked before their data is read.

numpy allocates what a file's header declares before reading the data, so a damaged or hostile header (a shape of
10^11 x 64) becomes a MemoryError, and an empty file an EOFError. Here every header is read first: the data it
declares must fit in the file (or the archive member) and in the input memory budget
(:mod:`ampconfig.memory`); arrays of Python objects (pickles) are refused.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npy_format

from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular
from ampconfig.memory import check_input_memory

_SAVE_HINT = "save it with numpy.save(path, array) (numpy.savez for a .npz of several inputs)"
#: How every .npy array starts (numpy.lib.format's magic string).
NPY_MAGIC = b"\x93NUMPY"


def _describe(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{'x'.join(str(dim) for dim in shape) or 'scalar'} {dtype}"


def _read_header(stream: IO[bytes], label: str, source: str | None) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from the .npy header at the stream's position (the stream is left after the header)."""
    try:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            shape, _fortran, dtype = npy_format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _fortran, dtype = npy_format.read_array_header_2_0(stream)
        else:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
    except (ValueError, EOFError, OSError, SyntaxError, TypeError) as exc:
        raise AmpconfigError(f"{label}: not a .npy array: {_first_line(exc)}", file=source, hint=_SAVE_HINT) from None
    if dtype.hasobject:
        raise AmpconfigError(
            f"{label}: the array holds Python objects ({dtype}), which ampconfig does not load (pickles run code)",
            file=source,
            hint="save numbers as a numeric array, and strings as a NumPy text array: numpy.save(path, "
            "array.astype(str))",
        )
    return tuple(int(dim) for dim in shape), dtype


def _check_extent(shape: tuple[int, ...], dtype: np.dtype, stored: int, label: str, source: str | None) -> int:
    """The data bytes the header declares, which must be in the file: a shorter file is truncated."""
    declared = math.prod(shape) * dtype.itemsize
    if declared > stored:
        raise AmpconfigError(
            f"{label}: the header declares a {_describe(shape, dtype)} array ({declared} bytes) but only {stored} "
            "bytes of data follow: the file is truncated or damaged",
            file=source,
            hint=_SAVE_HINT,
        )
    return declared


def load_npy(path: Path, label: str) -> np.ndarray:
    """The array in ``path``; ``label`` names it in messages (``--input x``)."""
    source = str(path)
    try:
        with open_regular(path, f"{label}: file", hint="check the path") as stream:
            shape, dtype = _read_header(stream, label, source)
            stored = os.fstat(stream.fileno()).st_size - stream.tell()
            declared = _check_extent(shape, dtype, stored, label, source)
            check_input_memory(declared, f"{label}: the {_describe(shape, dtype)} array in {path.name}", _SMALLER)
            stream.seek(0)
            return np.load(stream, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise AmpconfigError(f"{label}: cannot read the file as .npy: {_first_line(exc)}", file=source) from None


_SMALLER = "feed a smaller batch or shorter sequences"


def load_npz(path: Path, label: str = "--inputs") -> dict[str, np.ndarray]:
    """The arrays of a .npz archive by name (the member name without ``.npy``), every header checked first."""
    source = str(path)
    if label == "--inputs":
        what, hint = "inputs file (.npz)", "check --inputs / run.inputs"
    else:  # a data set (--data, --calibration-data)
        what, hint = f"{label} data set (.npz)", "check the path"
    with open_regular(path, what, hint=hint) as file:  # a FIFO is refused, never waited on
        return _read_npz(file, label, source, path.name)


def _read_npz(file: Path | IO[bytes], label: str, source: str | None, name: str) -> dict[str, np.ndarray]:
    """The arrays of the archive ``file`` (a path or a stream; ``name`` says which in messages)."""
    try:
        with zipfile.ZipFile(file) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()]
            total = 0
            for info in members:
                member = f"{label}: member {info.filename!r}"
                with archive.open(info) as stream:
                    shape, dtype = _read_header(stream, member, source)
                    header_bytes = stream.tell()
                total += _check_extent(shape, dtype, info.file_size - header_bytes, member, source)
            check_input_memory(total, f"{label}: the arrays in {name}", _SMALLER)
            arrays = {}
            for info in members:
                with archive.open(info) as stream:
                    arrays[info.filename.removesuffix(".npy")] = npy_format.read_array(stream, allow_pickle=False)
            return arrays
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
        raise AmpconfigError(
            f"{label}: cannot read {name} as a .npz archive: {_first_line(exc)}",
            file=source,
            hint="write it with numpy.savez(path, **{input_name: array})",
        ) from None


def load_array_bytes(data: bytes, label: str, source: str | None = None) -> np.ndarray:
    """The array in ``data``, bytes as ``numpy.save`` writes them, or a .npz archive of exactly one array (an
    older Polygraphy encoding); headers are checked as a file's are (``label`` names it in messages)."""
    stream = io.BytesIO(data)
    if zipfile.is_zipfile(stream):
        arrays = _read_npz(stream, label, source, "the bytes")
        if len(arrays) != 1:
            raise AmpconfigError(
                f"{label}: a .npz archive of {len(arrays)} arrays ({', '.join(arrays) or 'none'}) where one array "
                "is expected",
                file=source,
                hint=_SAVE_HINT,
            )
        return next(iter(arrays.values()))
    stream.seek(0)
    shape, dtype = _read_header(stream, label, source)
    declared = _check_extent(shape, dtype, len(data) - stream.tell(), label, source)
    check_input_memory(declared, f"{label}: the {_describe(shape, dtype)} array", _SMALLER)
    stream.seek(0)
    try:
        return npy_format.read_array(stream, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise AmpconfigError(f"{label}: cannot read the .npy bytes: {_first_line(exc)}", file=source) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
