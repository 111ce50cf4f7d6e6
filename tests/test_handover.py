"""The presented values go from the score task to the publish task through a file: what is
read back is what was saved, in every field, and the file goes when the run is done."""

from __future__ import annotations

from datetime import UTC, datetime

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
from pipeline.judging.present import Presented
from pipeline.operations.handover import PRESENTED, discard, load_presented, save_presented


def presented_values() -> Presented:
    """Every field of `Presented` filled from the contract's own examples."""
    checked = datetime(2026, 11, 23, 2, 30, tzinfo=UTC)
    return Presented(
        statuses={"github": Status.model_validate(STATUS_EXAMPLES[0])},
        scores={"github": BuilderScore.model_validate(BUILDER_SCORE_EXAMPLES[0])},
        uptimes={"github": Uptime.model_validate(UPTIME_EXAMPLE)},
        endpoints={"github": {0: EndpointStatus.model_validate(ENDPOINT_STATUS_EXAMPLES[0]),
                              2: EndpointStatus()}},
        verdicts={"github": RunVerdict(run_id=7, checked_at=checked, targets=3, failed=1,
                                       dead=0)},
        https={"github": Https.model_validate(HTTPS_EXAMPLE)},
        cors={"github": Cors.model_validate(CORS_EXAMPLE)},
        lifecycles={"github": Lifecycle.model_validate(LIFECYCLE_EXAMPLES[0])},
    )


def test_presented_values_read_back_equal_in_every_field() -> None:
    presented = presented_values()
    path = save_presented(presented, run_id=7)
    try:
        again = load_presented(path)
        assert again == presented
        assert list(again.endpoints["github"]) == [0, 2]  # endpoint positions stay numbers
        assert again.verdicts["github"].failed == 1
        _figures, written = path.read_bytes().split(b"\n")  # written a field at a time
        assert written == PRESENTED.dump_json(presented)
    finally:
        discard(path)
    assert not path.exists()


def test_each_save_is_a_file_of_its_own_and_private() -> None:
    first, second = (save_presented(Presented(), run_id=7) for _ in range(2))
    try:
        assert first != second
        assert first.parent.stat().st_mode & 0o077 == 0
    finally:
        discard(first)
        discard(second)
    discard(first)  # already gone: fine
