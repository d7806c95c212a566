"""The rewrite pauses Python's cyclic garbage collector and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from ampconfig import rewrite_model
from ampconfig.gc_pause import gc_paused, with_gc_paused
from tests.graphs import transformer_block


@pytest.mark.parametrize("enabled_before", [True, False])
def test_rewrite_leaves_the_collector_as_it_found_it(enabled_before: bool) -> None:
    seen_inside: list[bool] = []

    @with_gc_paused
    def inside() -> None:
        seen_inside.append(gc.isenabled())

    (gc.enable if enabled_before else gc.disable)()
    try:
        inside()
        rewrite_model(transformer_block(), "allow_mix_precision")
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert seen_inside == [False]


def test_collector_is_restored_when_the_block_raises() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        raise ValueError("boom")
    assert gc.isenabled()
