"""An entry presented for the templates is what validating and dumping it gives."""

from __future__ import annotations

import orjson
import pytest

from pipeline.contract import APIEntry, Uptime
from pipeline.release.files import dataset_lines
from pipeline.release.pages import presented_entry
from tests.site_release import SampleRelease, publish_sample_release


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleRelease:
    return publish_sample_release(tmp_path_factory.mktemp("presented"))


def dumped(api: dict) -> dict:
    entry = APIEntry.model_validate(api).model_dump(mode="json")
    entry["uptime"] = entry["uptime"] or Uptime().model_dump(mode="json")
    return entry


def test_a_published_entry_is_presented_as_its_model_dumps_it(sample: SampleRelease) -> None:
    lines = list(dataset_lines(sample.folder / "api" / "apis.json"))
    assert lines
    for line in lines:
        api = orjson.loads(line)
        assert presented_entry(api) == dumped(api)


def test_fields_left_out_are_presented_with_their_defaults(sample: SampleRelease) -> None:
    api = orjson.loads(next(dataset_lines(sample.folder / "api" / "apis.json")))
    for key in ("status", "builderScore", "uptime", "https", "cors", "sdks", "provenance"):
        api.pop(key, None)
    api["pricing"].pop("freeQuota", None)
    api["endpoints"] = [{k: v for k, v in api["endpoints"][0].items() if k != "status"}]
    presented = presented_entry(api)
    assert presented == dumped(api)
    assert presented["status"]["state"] == "unchecked"
    assert presented["uptime"] == {"last1d": None, "last7d": None, "last30d": None,
                                   "evidence": None}
    assert presented_entry(api)["status"] is not presented["status"]


def test_presenting_leaves_the_entry_as_it_was(sample: SampleRelease) -> None:
    line = next(dataset_lines(sample.folder / "api" / "apis.json"))
    api = orjson.loads(line)
    api["endpoints"] = [{"method": "GET", "path": "/x"}]
    before = orjson.dumps(api)
    presented_entry(api)
    assert orjson.dumps(api) == before


def test_only_what_lacks_a_field_is_copied(sample: SampleRelease) -> None:
    """A presented entry shares every part that holds its fields already with the entry it
    was made from: presenting it again copies nothing."""
    for line in dataset_lines(sample.folder / "api" / "apis.json"):
        presented = presented_entry(orjson.loads(line))
        again = presented_entry(presented)
        assert again == presented
        assert all(again[key] is value for key, value in presented.items())
