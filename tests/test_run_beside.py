"""Stages run beside another (the night's rollup beside its probing): the other is awaited as
if alone, so a time limit reaches it as before; those beside it are waited for once it ends,
their failures told first; a stopped stage stops them."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.operations.runs import run_beside


class Failed(Exception):
    pass


async def test_stages_beside_run_at_once_and_are_waited_for() -> None:
    order: list[str] = []
    probing_started = asyncio.Event()

    async def probe() -> str:
        probing_started.set()
        await asyncio.sleep(0.05)
        order.append("probe ended")
        return "probed"

    async def rollup() -> None:
        await probing_started.wait()  # runs while the probing does: no deadlock
        await asyncio.sleep(0.2)
        order.append("rollup ended")

    assert await run_beside(probe(), rollup()) == "probed"
    assert order == ["probe ended", "rollup ended"]  # waited for after the stage ended


async def test_a_failure_beside_is_raised_once_the_stage_ended_and_before_its_own() -> None:
    ended: list[str] = []

    async def probe(fails: bool) -> None:
        await asyncio.sleep(0.1)
        ended.append("probe")
        if fails:
            raise Failed("probe")

    async def rollup() -> None:
        raise Failed("rollup")

    with pytest.raises(Failed, match="rollup"):
        await run_beside(probe(False), rollup())
    assert ended == ["probe"]  # the probing went on to its end
    with pytest.raises(Failed, match="rollup"):
        await run_beside(probe(True), rollup())

    async def fine() -> None:
        await asyncio.sleep(0.1)
        ended.append("fine")

    with pytest.raises(Failed, match="probe"):
        await run_beside(probe(True), fine())
    assert ended[-1] == "fine"  # a failed stage still waits for those beside it


async def test_a_stopped_stage_stops_those_beside_it() -> None:
    stopped: list[str] = []

    async def stage(name: str) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(name)
            raise

    night = asyncio.ensure_future(run_beside(stage("probe"), stage("rollup")))
    await asyncio.sleep(0.05)
    night.cancel()  # as the run's time limit does
    with pytest.raises(asyncio.CancelledError):
        await night
    assert sorted(stopped) == ["probe", "rollup"]
