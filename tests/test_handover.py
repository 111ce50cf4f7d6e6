"""The presented values go from the score task to the publish task through a file: what is
read back is what was saved, in every field, and the file goes when the run is done."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from pipeline.contract import (
    BUILDER_SCORE_EXAMPLES,
    CORS_EXAMPLE,
    ENDPOINT_STATUS_EXAMPLES,
    HTTPS_EXAMPLE,
    LIFECYCLE_EXAMPLES,
    STATUS_EXAMPLES,
    UPTIME_EXAMPLE,
    BuilderScore,
    Cors,
    EndpointStatus,
    Https,
    Lifecycle,
    Status,
    Uptime,
)
from pipeline.judging.health import RunVerdict
from pipeline.judging.present import EntryValues, Presented, WrittenValues
from pipeline.operations.handover import (
    ENTRY,
    HEADER_BYTES,
    discard,
    handed_over,
    handover_dir,
    join_presented,
    load_entry_figures,
    save_presented,
)
from pipeline.release.publish import DEFAULT_STALE_DAYS, published_entry


def json_form(model: type[BaseModel], example: dict[str, Any]) -> dict[str, Any]:
    """A presented value in its JSON form, as the score stage builds it."""
    return model.model_validate(example).model_dump(mode="json")


def presented_values() -> Presented:
    """Every field of `Presented` filled from the contract's own examples."""
    checked = datetime(2026, 11, 23, 2, 30, tzinfo=UTC)
    return Presented(
        statuses={"github": Status.model_validate(STATUS_EXAMPLES[0])},
        scores={"github": BuilderScore.model_validate(BUILDER_SCORE_EXAMPLES[0])},
        uptimes={"github": json_form(Uptime, UPTIME_EXAMPLE)},
        endpoints={"github": {0: json_form(EndpointStatus, ENDPOINT_STATUS_EXAMPLES[0]),
                              2: json_form(EndpointStatus, {})}},
        verdicts={"github": RunVerdict(run_id=7, checked_at=checked, targets=3, failed=1,
                                       dead=0)},
        https={"github": json_form(Https, HTTPS_EXAMPLE)},
        cors={"github": json_form(Cors, CORS_EXAMPLE)},
        lifecycles={"github": Lifecycle.model_validate(LIFECYCLE_EXAMPLES[0])},
    )


def test_presented_values_read_back_equal_in_every_field() -> None:
    presented = presented_values()
    path = save_presented(presented.items(), run_id=7)
    try:
        with handed_over(path) as values:
            again = Presented.gather(values.items())
            assert values.states == {"github": (presented.statuses["github"].state,
                                                presented.statuses["github"].checked_at)}
            assert values.verdicts == presented.verdicts
        presented.lifecycles = {}  # judged by the publisher, never handed over
        assert again == presented
        assert list(again.endpoints["github"]) == [0, 2]  # endpoint positions stay numbers
        assert again.verdicts["github"].failed == 1
    finally:
        discard(path)
    assert not path.exists()


def test_an_entry_line_is_what_pydantic_writes_for_its_values() -> None:
    """orjson writes each entry's line (a third of pydantic's cost): the same bytes pydantic
    writes for the same values, models and JSON forms alike, times with `Z`, endpoint
    positions as keys, the lifecycle left out."""
    presented = presented_values()
    presented.statuses["stripe"] = Status(state="unreachable")
    presented.scores["stripe"] = presented.scores["github"].model_dump(mode="json")
    path = save_presented(presented.items(), run_id=7)
    try:
        lines = path.read_bytes().splitlines()[1:3]
    finally:
        discard(path)
    written = [ENTRY.dump_json(values) for _, values in presented.items()]
    assert lines == written and b'"checked_at":"2026-11-23T02:30:00Z"' in lines[0]
    assert all(b"lifecycle" not in line for line in written)


def test_each_entry_is_a_line_read_when_reached_with_the_lifecycle_judged_since() -> None:
    presented = presented_values()
    presented.statuses["stripe"] = Status(state="unreachable")
    path = save_presented(presented.items(), run_id=7)
    try:
        lines = path.read_bytes().splitlines()
        assert len(lines) == 1 + 2 + 1 + 3  # header, two entries, figures, the index's three
        assert presented.lifecycles["github"] is not None  # judged again, never handed over
        assert all(b"lifecycle" not in line for line in lines[1:3])
        with handed_over(path) as values:
            values.lifecycles["stripe"] = Lifecycle.model_validate(LIFECYCLE_EXAMPLES[0])
            stripe = values.entry("stripe")
            assert stripe.status == Status(state="unreachable") and stripe.score is None
            assert stripe.lifecycle == values.lifecycles["stripe"]
            assert values.entry("github").lifecycle is None
            unknown = values.entry("not-handed-over")
            assert unknown == EntryValues()
        assert load_entry_figures(path)["stripe"]["state"] == "unreachable"
    finally:
        discard(path)


def test_an_entry_published_from_the_file_is_the_one_published_from_memory() -> None:
    """The publisher writes each entry's values as the file holds them, in their JSON form,
    without building its models again: the entry it publishes is the same, byte for byte, for
    every field filled, for one measured in part, and for one never handed over."""
    presented = presented_values()
    presented.statuses["stripe"] = Status(state="unreachable")
    presented.https["stripe"] = json_form(Https, {"enabled": True})  # nulls never published
    presented.cors["stripe"] = json_form(Cors, {"state": "no"})
    content = {"id": "x", "baseUrl": "https://api.example.com",
               "endpoints": [{"method": "GET", "path": f"/{n}"} for n in range(3)]}

    def published(values: EntryValues | WrittenValues) -> bytes:
        return orjson.dumps(published_entry(
            content, values.status, values.score, values.uptime, None, DEFAULT_STALE_DAYS,
            values.endpoints, values.lifecycle, values.https, values.cors))

    path = save_presented(presented.items(), run_id=7)
    try:
        with handed_over(path) as values:
            values.lifecycles.update(presented.lifecycles)  # judged by the publisher
            for entry_id in ("github", "stripe", "not-handed-over"):
                from_file = values.published(entry_id)
                assert isinstance(from_file, WrittenValues)
                assert published(from_file) == published(presented.published(entry_id))
            github = orjson.loads(published(values.published("github")))
    finally:
        discard(path)
    assert github["builderScore"] is not None and github["lifecycle"] is not None
    assert [bool(endpoint.get("status")) for endpoint in github["endpoints"]] == [
        True, False, True]


def test_each_save_is_a_file_of_its_own_and_private() -> None:
    first, second = (save_presented((), run_id=7) for _ in range(2))
    try:
        assert first != second
        assert first.parent.stat().st_mode & 0o077 == 0
    finally:
        discard(first)
        discard(second)
    discard(first)  # already gone: fine


def test_a_stage_failing_mid_way_leaves_no_half_file() -> None:
    before = set(handover_dir().iterdir())

    def values() -> Iterator[tuple[str, EntryValues]]:
        yield "github", presented_values().entry("github")
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError, match="the store went away"):
        save_presented(values(), run_id=7)
    assert set(handover_dir().iterdir()) == before


@pytest.mark.parametrize("cuts", [(1,), (1, 2), (0, 1, 3), (2, 2)],
                         ids=["two parts", "a part each", "empty first and last", "empty middle"])
@pytest.mark.parametrize("kernel_copy", [True, False], ids=["kernel copy", "copied through"])
def test_parts_joined_are_the_file_saved_at_once(
        cuts: tuple[int, ...], kernel_copy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans of the entries saved apart and joined in order make the file one save of every
    entry makes, byte for byte: lines, figures, offsets, states and verdicts; parts with no
    entries, or none with a state, verdict or figures, join as well. Where the system has no
    copy in the kernel, the lines go through this process."""
    if not kernel_copy:
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    presented = presented_values()
    presented.statuses["stripe"] = Status(state="unreachable")
    presented.endpoints["twilio"] = {1: json_form(EndpointStatus, {})}  # no state nor verdict
    presented.lifecycles = {}
    entries = list(presented.items())
    whole = save_presented(entries, run_id=7)
    bounds = [0, *cuts, len(entries)]
    parts = [save_presented(entries[first:past], None)
             for first, past in pairwise(bounds)]
    joined = whole  # removed below whatever happens, even if the join fails
    try:
        joined = join_presented(parts, run_id=7)
        assert joined.read_bytes() == whole.read_bytes()
        assert joined.name.startswith("run-7-presented-") and joined != whole
        with handed_over(joined) as values:
            assert Presented.gather(values.items()) == presented
        assert load_entry_figures(joined) == load_entry_figures(whole)
    finally:
        for path in (whole, *parts, joined):
            discard(path)


@pytest.mark.parametrize("kept", [HEADER_BYTES + 10, -2], ids=["in its lines", "in its index"])
def test_a_part_cut_short_is_refused_and_leaves_no_joined_file(kept: int) -> None:
    presented = presented_values()
    part = save_presented(presented.items(), None)
    try:
        whole = part.read_bytes()
        part.write_bytes(whole[:whole.rindex(b"\n", 0, len(whole) - 1)] if kept < 0
                         else whole[:kept])  # its header places more, or its last line gone
        before = set(handover_dir().iterdir())
        with pytest.raises(ValueError, match=f"{part}: a hand-over file cut short"):
            join_presented([part], run_id=7)
        assert set(handover_dir().iterdir()) == before
    finally:
        discard(part)
