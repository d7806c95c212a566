"""counted: a count with its noun in the right number ("1 casts inserted", issue 31)."""

from __future__ import annotations

from ampconfig.report.words import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [counted(n, "cast") for n in (0, 1, 2)] == ["0 casts", "1 cast", "2 casts"]
    assert counted(3, "data set", "data sets") == "3 data sets" and counted(1, "index", "indices") == "1 index"
