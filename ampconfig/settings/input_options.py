"""The run-input options as text: ``--shape NAME=1x128`` and ``--input NAME=FILE.npy``.

Parsed by the settings resolver (pure text, nothing read); :mod:`ampconfig.inputs.feeds` reads the files and
generates the arrays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ampconfig.errors import AmpconfigError

#: Dimensions in ASCII digits: `\d` also matches fullwidth and other scripts' digits, which int() takes.
_SHAPE_RE = re.compile(r"^\s*([^=\s][^=]*?)\s*=\s*(-?[0-9]+(?:\s*[x,]\s*-?[0-9]+)*)?\s*$")


def parse_shape_option(text: str) -> tuple[str, list[int]]:
    """``"input_ids=1x128"`` -> ``("input_ids", [1, 128])``; ``"x="`` is a scalar; commas work like ``x``; a
    dimension may be 0 (an empty input)."""
    match = _SHAPE_RE.match(text)
    if match is None:
        raise AmpconfigError(
            f"--shape {text!r}: expected NAME=DIMxDIM... with whole numbers in ASCII digits, 0 or more",
            hint="for example --shape input_ids=1x128",
        )
    name, dims_text = match.group(1), match.group(2)
    dims = [int(part) for part in re.split(r"\s*[x,]\s*", dims_text)] if dims_text else []
    negative = [dim for dim in dims if dim < 0]
    if negative:
        raise AmpconfigError(
            f"--shape {text!r}: dimension {negative[0]} is negative; dimensions are sizes, 0 or more",
            hint=f"for example --shape {name}=" + "x".join(str(abs(dim)) for dim in dims),
        )
    return name, dims


def parse_input_options(
    shapes: Iterable[str], input_files: Iterable[str]
) -> tuple[dict[str, list[int]], dict[str, Path]]:
    """Every ``--shape`` and every ``--input`` given, by input name; an input named twice by the same flag is
    refused."""
    parsed_shapes: dict[str, list[int]] = {}
    for text in shapes:
        name, dims = parse_shape_option(text)
        if name in parsed_shapes:
            raise AmpconfigError(f"--shape {name} is given twice", hint="give each input's shape once")
        parsed_shapes[name] = dims
    arrays: dict[str, Path] = {}
    for text in input_files:
        name, path = parse_input_option(text)
        if name in arrays:
            raise AmpconfigError(f"--input {name} is given twice", hint="give each input once")
        arrays[name] = path
    return parsed_shapes, arrays


def parse_input_option(text: str) -> tuple[str, Path]:
    """``"input_ids=ids.npy"`` -> ``("input_ids", Path("ids.npy"))``."""
    name, sep, file = text.partition("=")
    if not sep or not name.strip() or not file.strip():
        raise AmpconfigError(f"--input {text!r}: expected NAME=FILE.npy", hint="for example --input input_ids=ids.npy")
    return name.strip(), Path(file.strip())
