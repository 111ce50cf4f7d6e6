"""The cycle collector paused around the large stages: paused inside, restored after, also
when the stage fails, and left alone when the caller had already paused it."""

from __future__ import annotations

import gc

import pytest

from pipeline.processes import paused_garbage_collection


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.enable() if enabled else gc.disable()


def test_paused_inside_and_enabled_after() -> None:
    gc.enable()
    with paused_garbage_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # what the stage built is left to the collector again


def test_enabled_again_when_the_stage_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), paused_garbage_collection():
        raise RuntimeError("stage failed")
    assert gc.isenabled()


def test_a_collector_paused_by_the_caller_stays_paused() -> None:
    gc.disable()
    with paused_garbage_collection(), paused_garbage_collection():
        assert not gc.isenabled()
    assert not gc.isenabled()
