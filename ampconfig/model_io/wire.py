"""The protobuf wire format, as much of it as writing a model's weights without copying them into a protobuf
message takes (and finding them in a model file without parsing them).

A message is a sequence of fields, each a key (field number << 3 | wire type, a varint) and a payload: a varint,
8 or 4 fixed bytes, or a varint length and that many bytes (strings, bytes, nested messages, packed numbers).
Repeated fields may appear in any order and are concatenated in the order read; the serialiser writes fields in
field-number order, so bytes assembled in that order equal what ``SerializeToString`` would give.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmap import mmap

    #: What the readers take: anything indexed byte by byte (a model file's memory map too).
    WireData = bytes | memoryview | mmap

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint: 7 bits a byte, least significant first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited_header(number: int, length: int) -> bytes:
    """The key and length of a length-delimited field (a nested message, bytes, a string) of ``length`` bytes."""
    return varint(number << 3 | LENGTH_DELIMITED) + varint(length)


def read_varint(data: WireData, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it."""
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("malformed protobuf: a varint longer than 10 bytes")


def fields(data: WireData, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Each top-level field of the message in ``data[start:end]``: (field number, where its key starts, where its
    payload starts, where it ends). A length-delimited payload is not looked into."""
    end = len(data) if end is None else end
    position = start
    while position < end:
        field_start = position
        key = data[position]
        if key < 0x80:
            position += 1
        else:
            key, position = read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == LENGTH_DELIMITED:
            length = data[position]
            if length < 0x80:
                position += 1
            else:
                length, position = read_varint(data, position)
            payload = position
            position += length
        elif wire_type == VARINT:
            payload = position
            _, position = read_varint(data, position)
        elif wire_type == FIXED64:
            payload, position = position, position + 8
        elif wire_type == FIXED32:
            payload, position = position, position + 4
        else:
            raise ValueError(f"malformed protobuf: wire type {wire_type} of field {number}")
        if position > end or number == 0:
            raise ValueError("malformed protobuf: a field runs past the end of its message")
        yield number, field_start, payload, position
