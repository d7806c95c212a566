"""Text fitted to a terminal (issue 38): lines wider than it wrap at word boundaries with a hanging indent, a word
wider than it folds, and nothing else changes."""

from __future__ import annotations

from ampconfig.cli.output import fitted

_LOCATED = (
    "session.yaml:3: $.modify_mixlist: error: modify_mixlist names a file that cannot be used: mixlist file not "
    "found (relative paths in a config are resolved against the config file's folder)"
)


def test_a_located_error_wraps_at_words_within_the_width() -> None:
    lines = fitted(_LOCATED, 40).splitlines()
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert lines[0].startswith("session.yaml:3: $.modify_mixlist: error:")
    assert all(line.startswith("  ") for line in lines[1:])  # continuation lines hang under the first
    assert " ".join(line.strip() for line in lines) == _LOCATED  # every word kept, in order, none split


def test_a_word_wider_than_the_terminal_folds_and_short_lines_stay_as_they_are() -> None:
    path = "/very/long/folder/name/that/goes/on/and/on/model.onnx"
    lines = fitted(f"error: {path}: not found\n  hint:  as  is", 20).splitlines()
    assert all(len(line) <= 20 for line in lines)
    assert path in "".join(line.strip() for line in lines)
    assert lines[-1] == "  hint:  as  is"  # fits: untouched, its spacing too
