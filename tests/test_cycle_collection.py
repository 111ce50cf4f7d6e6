"""The cycle collector paused around the large stages: paused inside, restored after, also
when the stage fails, and left alone when the caller had already paused it."""

from __future__ import annotations

import gc

import pytest

from pipeline.operations.stages import cycle_collection_paused


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.enable() if enabled else gc.disable()


def test_paused_inside_and_enabled_after() -> None:
    gc.enable()
    with cycle_collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # what the stage built is left to the collector again


def test_enabled_again_when_the_stage_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), cycle_collection_paused():
        raise RuntimeError("stage failed")
    assert gc.isenabled()


def test_a_collector_paused_by_the_caller_stays_paused() -> None:
    gc.disable()
    with cycle_collection_paused(), cycle_collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
