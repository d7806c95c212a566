"""Words the reports share."""

from __future__ import annotations


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 cast``, ``2 casts``, ``0 casts``: the number with its noun in the number's grammatical form."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
