"""A typed client generated from the published OpenAPI document reads a release back unchanged.

datamodel-code-generator (a well-known generator, run offline on the release's own
`api/openapi.json`) writes pydantic models; every JSON document of a release the test
publishes is parsed with them and dumped back, and must come out as it was. Unknown keys are
forbidden in the generated models, so a published field the document does not describe fails
too; and what every file holds is typed as always present.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pipeline.release.layout import (
    CATEGORY_INDEX,
    CHANGES,
    ENTRY_DOCUMENTS,
    FULL_DATASET,
    OPENAPI,
    RELEASE_INDEX,
    SEARCH_INDEX,
)
from tests.site_release import publish_sample_release

# Addresses stay strings as written (a URL type would normalise them, adding a slash).
GENERATOR_OPTIONS = [
    "--input-file-type", "openapi",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--target-python-version", "3.11",
    "--use-union-operator", "--use-standard-collections", "--field-constraints",
    "--enum-field-as-literal", "all",
    "--output-datetime-class", "AwareDatetime",
    "--type-mappings", "uri=string",
    "--extra-fields", "forbid",
    "--use-schema-description", "--use-field-description",
    "--disable-timestamp", "--formatters", "builtin",
]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return publish_sample_release(tmp_path_factory.mktemp("release")).folder


@pytest.fixture(scope="module")
def client(release: Path, tmp_path_factory: pytest.TempPathFactory) -> types.ModuleType:
    """The models datamodel-codegen writes from the release's OpenAPI document, imported."""
    output = tmp_path_factory.mktemp("client") / "apidir_client.py"
    generator = Path(sys.executable).with_name("datamodel-codegen")
    result = subprocess.run(
        [str(generator), "--input", str(release / OPENAPI), "--output", str(output),
         *GENERATOR_OPTIONS],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    spec = importlib.util.spec_from_file_location("apidir_client", output)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' forward references here
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def round_trip(model: type[BaseModel], path: Path) -> tuple[Any, Any]:
    """The document as published, and as the generated model reads and writes it."""
    data = path.read_bytes()
    parsed = model.model_validate_json(data)
    return json.loads(data), parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)


def test_every_document_of_a_release_round_trips_through_the_generated_client(
    release: Path, client: types.ModuleType
) -> None:
    documents = {
        FULL_DATASET: client.FullDataset,
        SEARCH_INDEX: client.SearchIndex,
        CATEGORY_INDEX: client.CategoryIndex,
        RELEASE_INDEX: client.ReleaseIndex,
        CHANGES: client.ChangeLog,
        "api/404.json": client.ErrorBody,
    }
    documents |= {path.relative_to(release).as_posix(): client.CategoryDataset
                  for path in (release / "api" / "categories").glob("*.json")}
    documents |= {path.relative_to(release).as_posix(): client.EntryDocument
                  for path in (release / ENTRY_DOCUMENTS).glob("*.json")}
    assert len(documents) > 6 + 14 + 100
    for relative, model in sorted(documents.items()):
        published, again = round_trip(model, release / relative)
        assert again == published, relative
    full = json.loads((release / FULL_DATASET).read_bytes())
    changes = json.loads((release / CHANGES).read_bytes())
    # the release holds what the round trip is meant to cover
    assert {api["status"]["state"] for api in full["apis"]} >= {"live", "online", "unreachable"}
    assert any(api.get("provenance") for api in full["apis"])
    assert changes["events"], "a release event at least"


def test_the_document_examples_round_trip_through_the_generated_client(
    release: Path, client: types.ModuleType
) -> None:
    schemas = json.loads((release / OPENAPI).read_bytes())["components"]["schemas"]
    checked = 0
    for name, schema in sorted(schemas.items()):
        for example in schema.get("examples", ()):
            again = getattr(client, name).model_validate(example).model_dump(
                mode="json", by_alias=True, exclude_unset=True)
            assert again == example, name
            checked += 1
    assert checked >= 20


def _allows_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation) or annotation is None


@pytest.mark.parametrize(
    ("model", "field", "nullable"),
    [
        ("APIEntry", "id", False),
        ("APIEntry", "name", False),
        ("APIEntry", "category", False),
        ("APIEntry", "baseUrl", False),
        ("APIEntry", "authType", False),
        ("APIEntry", "status", False),
        ("APIEntry", "lifecycle", False),
        ("APIEntry", "https", False),
        ("APIEntry", "cors", False),
        ("APIEntry", "builderScore", True),
        ("APIEntry", "uptime", True),
        ("Status", "state", False),
        ("Status", "checkedAt", True),
        ("BuilderScore", "grade", False),
        ("BuilderScore", "latency", True),
        ("Meta", "totalAPIs", False),
        ("ChangeLog", "events", True),
    ],
)
def test_what_every_file_holds_is_required_in_the_generated_client(
    client: types.ModuleType, model: str, field: str, nullable: bool
) -> None:
    fields = getattr(client, model).model_fields
    info = next(info for name, info in fields.items() if (info.alias or name) == field)
    assert info.is_required(), (model, field)
    assert _allows_none(info.annotation) is nullable, (model, field, info.annotation)


def test_what_a_file_may_leave_out_stays_optional_in_the_generated_client(
    client: types.ModuleType,
) -> None:
    entry = client.APIEntry.model_fields
    for field in ("description", "color", "pricing", "provenance", "openapiUrl"):
        assert not entry[field].is_required(), field
