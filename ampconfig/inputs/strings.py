"""STRING model inputs: text arrays checked and converted once, text files of one string a line, and strings
generated from the model's own vocabulary.

ONNX Runtime takes a STRING input as a NumPy ``<U`` (unicode), ``S`` (bytes) or object array. Every string
reaches ampconfig's feeds as one ``<U`` array: a plain array (no Python objects, so no pickle anywhere, and the
same bytes hash the same), which ONNX Runtime's CPU provider takes as it is. ``S`` arrays are decoded as UTF-8
here, as ONNX Runtime would decode them, so a byte string that is not UTF-8 is a located error instead of ONNX
Runtime's UnicodeDecodeError. A NUL character is refused: ONNX Runtime cuts a string at its first NUL, so the
model would read another string than the one given. Object arrays need pickle to be read from ``.npy``/``.npz``
and stay refused (:mod:`ampconfig.inputs.array_files`).

Generated strings are drawn from the keys of the ``ai.onnx.ml`` LabelEncoder or CategoryMapper that reads the
input, directly or through ops that pass strings through unchanged (Identity, Reshape, Squeeze, Unsqueeze,
Flatten): strings the model knows, so the run exercises its embeddings, not only the encoder's default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from ampconfig.domains import is_default_domain
from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import MAX_DOCUMENT_BYTES, read_bounded, refuse_other_unicode
from ampconfig.memory import check_input_memory

#: The largest text file of strings read for one input (``--input NAME=FILE.txt``): the documents' limit.
MAX_TEXT_INPUT_BYTES = MAX_DOCUMENT_BYTES
#: What a ``<U`` array takes per character.
_UNICODE_BYTES = 4
#: Ops whose output holds their first input's strings unchanged (only the shape changes).
_STRING_PASSING_OPS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
_ML_DOMAIN = "ai.onnx.ml"
#: The attributes that list the strings an ai.onnx.ml op maps from, by op type.
_VOCABULARY_ATTRIBUTES = {
    "LabelEncoder": ("keys_strings", "keys_tensor", "classes_strings"),  # classes_strings: LabelEncoder-1
    "CategoryMapper": ("cats_strings",),
}


def is_string(elem_type: int) -> bool:
    return elem_type == TensorProto.STRING


def save_text_hint(name: str) -> str:
    """How to save the strings of input ``name`` without pickle."""
    return (
        f"save the strings as a NumPy text array: numpy.save(path, array.astype(str)), or "
        f"numpy.savez(path, {name}=array.astype(str)) for --inputs"
    )


# ----------------------------------------------------------------------------------------------- text arrays
def text_array(name: str, array: np.ndarray, origin: str) -> np.ndarray:
    """The strings of ``array`` (``<U`` or ``S``, bytes read as UTF-8) as one ``<U`` array, or a located error:
    another kind of array, bytes that are not UTF-8, or a NUL character."""
    kind = array.dtype.kind
    if kind == "S":
        array = _decoded(name, array, origin)
    elif kind != "U":
        what = "Python objects" if kind == "O" else str(array.dtype)
        raise AmpconfigError(
            f"{origin}: input {name!r} is {what} but the model expects strings", hint=save_text_hint(name)
        )
    _check_encodable(name, array, origin)
    return np.ascontiguousarray(array)


def _decoded(name: str, array: np.ndarray, origin: str) -> np.ndarray:
    # A byte takes 4 once decoded into a <U array: the file's size checked the bytes, not this.
    check_input_memory(
        array.size * array.dtype.itemsize * _UNICODE_BYTES,
        f"{origin}: input {name!r} decoded from bytes to text",
        hint="give fewer or shorter strings, or save them as text already (array.astype(str))",
    )
    try:
        return np.char.decode(array, "utf-8")
    except UnicodeDecodeError:
        pass
    for index in np.ndindex(array.shape):  # only on failure: find the first string that is not UTF-8
        try:
            bytes(array[index]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AmpconfigError(
                f"{origin}: input {name!r} holds bytes that are not UTF-8{_at(index)} "
                f"(byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
                hint="ONNX Runtime reads byte strings as UTF-8: save UTF-8 text (array.astype(str))",
            ) from None
    raise AssertionError("np.char.decode failed on strings that each decode")  # pragma: no cover


def _check_encodable(name: str, array: np.ndarray, origin: str) -> None:
    """No NUL character inside a string (ONNX Runtime would cut the string there) and no code point UTF-8 cannot
    encode (a lone surrogate, which ONNX Runtime would fail on)."""
    width = array.dtype.itemsize // _UNICODE_BYTES
    if array.size == 0 or width == 0:
        return
    # A <U array pads each string with NULs up to its width, and numpy's own string functions treat a NUL as the
    # end: read the code points themselves. A string holds a NUL when fewer of its code points are non-zero than
    # its length (up to its last non-zero one).
    codes = np.ascontiguousarray(array).view(np.uint32).reshape(*array.shape, width)
    nonzero = codes != 0
    length = np.where(nonzero.any(axis=-1), width - np.argmax(nonzero[..., ::-1], axis=-1), 0)
    with_nul = np.count_nonzero(nonzero, axis=-1) < length
    if with_nul.any():
        raise AmpconfigError(
            f"{origin}: input {name!r} holds a NUL character in a string{_at(_first(with_nul))}; ONNX Runtime "
            "would cut the string there",
            hint="remove the NUL characters from the strings",
        )
    unencodable = np.any(((codes >= 0xD800) & (codes <= 0xDFFF)) | (codes > 0x10FFFF), axis=-1)
    if unencodable.any():
        raise AmpconfigError(
            f"{origin}: input {name!r} holds a string{_at(_first(unencodable))} that UTF-8 cannot "
            "encode (a lone surrogate)",
            hint="give the strings as valid Unicode text",
        )


def _first(found: np.ndarray | np.bool_) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(found)[0])


def _at(index: tuple[int, ...]) -> str:
    """Where in the array, for a message: " at index [0, 3]" (nothing for a scalar)."""
    return f" at index [{', '.join(str(i) for i in index)}]" if index else ""


def strings_from_lists(name: str, value: object, where: str) -> np.ndarray:
    """A (nested) list of strings, as a JSON data set gives it, as a ``<U`` array: every item a string and the
    lists rectangular."""
    try:
        array = np.array(value, dtype=object)
    except ValueError as exc:
        raise AmpconfigError(f"{where}: input {name!r} is not a rectangular array of strings ({exc})") from None
    for index in np.ndindex(array.shape):
        if not isinstance(array[index], str):
            raise AmpconfigError(
                f"{where}: input {name!r} is not a rectangular array of strings: {type(array[index]).__name__} "
                f"found{_at(index)}",
                hint="give a list (of lists) of strings, each list as long as the others",
            )
    return array.astype(str) if array.size else np.zeros(array.shape, dtype="<U1")


# ----------------------------------------------------------------------------------------------- text files
def read_text_lines(path: Path, name: str, label: str, notes: list[str] | None = None) -> np.ndarray:
    """The lines of the UTF-8 text file ``path`` as a rank-1 ``<U`` array, one string a line (a final newline
    ends the last line; ``\\r\\n`` line ends are read as ``\\n``; a byte-order mark is dropped). A file whose
    lines end in CR alone (classic Mac OS) is read as lines too, saying so in ``notes``; a UTF-16 or UTF-32 file
    is refused naming its encoding. ``label`` names the option in messages (``--input phs``)."""
    source = str(path)
    raw = read_bounded(
        path,
        f"{label}: text file of strings",
        MAX_TEXT_INPUT_BYTES,
        too_large_hint="give more strings than that as a .npy text array: numpy.save(path, array.astype(str))",
    )
    if not raw:
        raise AmpconfigError(
            f"{label}: the text file is empty; it must hold one string a line",
            file=source,
            hint=f"write the strings of input {name!r} one a line",
        )
    refuse_other_unicode(raw, source, f"{label}: the text file")
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise AmpconfigError(
            f"{label}: the text file holds a NUL byte at line {line}: is it a binary file?",
            file=source,
            line=line,
            hint="give UTF-8 text, one string a line (a .npy array with numpy.save for anything else)",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise AmpconfigError(
            f"{label}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} cannot be decoded",
            file=source,
            line=line,
            hint="save the file as UTF-8",
        ) from None
    text = text.removeprefix("\ufeff")
    if "\r" in text and "\n" not in text:
        text = text.replace("\r", "\n")
        if notes is not None:
            notes.append(f"{label}: {path.name} ends its lines with CR alone (classic Mac OS): read as lines")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no other
    lines = [line.removesuffix("\r") for line in lines]
    longest = max((len(line) for line in lines), default=0)
    # A <U array is as wide as its longest string: one long line among many short ones takes lines x longest.
    try:
        check_input_memory(
            len(lines) * max(longest, 1) * _UNICODE_BYTES,
            f"{label}: the {len(lines)} strings in {path.name} (the longest {longest} characters)",
            hint="give fewer or shorter strings",
        )
    except AmpconfigError as exc:
        raise replace(exc, file=source) from None
    array = np.array(lines, dtype=f"<U{max(longest, 1)}")
    _check_encodable(name, array, f"{label}={path}")
    return array


# ------------------------------------------------------------------------------------------------ generation
@dataclass(frozen=True)
class Vocabulary:
    """The strings a node of the model maps, and which node."""

    strings: tuple[str, ...]
    op_type: str
    node: str

    def describe(self) -> str:
        return f"strings from the {len(self.strings)} keys of {self.op_type} {self.node!r}"


def vocabulary(model: onnx.ModelProto, name: str) -> Vocabulary | None:
    """The keys of the first ``ai.onnx.ml`` LabelEncoder or CategoryMapper that reads ``name`` (followed through
    ops that pass strings through), or None when no such node reads it."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.input:  # the strings are the first input of every op followed or read here
            consumers.setdefault(node.input[0], []).append(node)
    seen: set[str] = set()
    frontier = [name]
    while frontier:
        tensor = frontier.pop(0)
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in consumers.get(tensor, []):
            if node.domain == _ML_DOMAIN and node.op_type in _VOCABULARY_ATTRIBUTES:
                strings = _keys(node)
                if strings:
                    return Vocabulary(strings, node.op_type, node.name or node.output[0])
            elif is_default_domain(node.domain) and node.op_type in _STRING_PASSING_OPS:
                frontier.extend(node.output[:1])
    return None


def _keys(node: onnx.NodeProto) -> tuple[str, ...]:
    """The strings ``node`` maps from, deduplicated in order (none when its keys are numbers)."""
    wanted = _VOCABULARY_ATTRIBUTES[node.op_type]
    for attribute in node.attribute:
        if attribute.name not in wanted:
            continue
        if attribute.name == "keys_tensor":
            if attribute.t.data_type != TensorProto.STRING:
                return ()
            raw = list(attribute.t.string_data)  # a STRING tensor keeps its strings here, never in raw_data
        else:
            raw = list(attribute.strings)
        strings = [item.decode("utf-8", errors="replace") for item in raw]
        return tuple(dict.fromkeys(item for item in strings if "\0" not in item))
    return ()


def generate_strings(
    vocab: Vocabulary, name: str, shape: list[int], rng: np.random.Generator, earlier_bytes: int
) -> np.ndarray:
    """Strings of ``vocab`` drawn uniformly, as a ``<U`` array of ``shape`` (checked against the input memory
    budget first, next to the ``earlier_bytes`` of the inputs before it)."""
    width = max((len(item) for item in vocab.strings), default=1) or 1
    count = math.prod(shape)
    check_input_memory(
        earlier_bytes + count * (8 + width * _UNICODE_BYTES),  # the drawn indices (int64), then the strings
        f"generating input {name!r} of shape {'x'.join(str(dim) for dim in shape) or 'scalar'} (strings)",
        hint=f"give smaller dimensions with --shape {name}=DIMxDIM..., or feed the input from a file",
    )
    table = np.array(vocab.strings, dtype=f"<U{width}")
    return table[rng.integers(0, len(table), size=shape)]


def no_vocabulary_error(name: str, dims: tuple[object, ...] | None) -> AmpconfigError:
    """Why a STRING input cannot be generated, and how to give it."""
    if dims is None or len(dims) == 1:
        file_option = f"--input {name}=FILE.txt (UTF-8, one string a line)"
    else:
        file_option = f"--input {name}=FILE.npy (numpy.save(path, array.astype(str)))"
    return AmpconfigError(
        f"input {name!r} takes strings, and no ai.onnx.ml LabelEncoder or CategoryMapper reads it to generate "
        "strings from its keys",
        hint=f"give it: --inputs FILE.npz with a text array (numpy.savez(path, {name}=array.astype(str))), or "
        f"{file_option}",
    )
