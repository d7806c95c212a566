"""The document reader's words: every pattern a file format's schema holds is said in words when a value does not
match it (issue 44: an exponent key out of form printed a regex)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ampconfig.documents.parsing import PATTERN_WORDS
from ampconfig.settings.json_schemas import SCHEMA_KINDS, generate_schema


def _patterns(schema: Any) -> Iterator[str]:
    """Every regex in a JSON Schema: ``pattern`` values and ``patternProperties`` keys."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from _patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)


def test_every_pattern_of_every_schema_has_words() -> None:
    found = {pattern for kind in SCHEMA_KINDS for pattern in _patterns(generate_schema(SCHEMA_KINDS[kind]))}
    assert found, "the schemas hold patterns"
    assert found <= set(PATTERN_WORDS), found - set(PATTERN_WORDS)
