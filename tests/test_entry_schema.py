"""The entry file's JSON Schema: committed fresh, valid draft-07, true of every real entry,
rejecting what `validate` rejects, and wired into editors (modeline, VS Code settings)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
import yaml
from pydantic import ValidationError

from pipeline.catalogue.entries import EntryFile, entry_files
from pipeline.catalogue.schema import entry_schema, render_entry_schema
from tests.conftest import REPO, make_entry

COMMITTED = REPO / "docs" / "entry.schema.json"
ENTRIES = REPO / "data" / "entries"


class EditorLoader(yaml.SafeLoader):
    """YAML as an editor's language server reads it (YAML 1.2): a date is a string."""


EditorLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def as_typed(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=EditorLoader)


@pytest.fixture(scope="module")
def validator() -> Any:
    return jsonschema_rs.Draft7Validator(json.loads(COMMITTED.read_text(encoding="utf-8")),
                                         validate_formats=True)


def test_committed_entry_schema_equals_the_generated_one() -> None:
    committed = COMMITTED.read_text(encoding="utf-8")
    assert committed == render_entry_schema(), "docs/entry.schema.json is stale: run `make openapi`"


def test_apidir_entry_schema_prints_it_as_make_openapi_commits_it() -> None:
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "entry-schema"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout == render_entry_schema()
    assert "apidir entry-schema > docs/entry.schema.json" in (REPO / "Makefile").read_text()


def test_the_schema_is_draft_07_with_every_field_described() -> None:
    schema = entry_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    text = json.dumps(schema)
    assert "$defs" not in text and "#/definitions/" in text
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"id", "name", "provider", "category", "authType",
                                       "baseUrl"}
    objects = [schema, *schema["definitions"].values()]
    for node in objects:
        for name, field in node.get("properties", {}).items():
            assert field.get("description") and field.get("title"), name
            assert "$ref" not in field or set(field) == {"$ref"}, name  # draft-07 ignores siblings
    assert set(schema["properties"]) == {field.alias or field_name for field_name, field
                                         in EntryFile.model_fields.items()}


def integer_fields(node: Any, at: str = "") -> list[tuple[str, Any]]:
    """Every integer field of a schema, by where it is, with its maximum (None: none)."""
    if isinstance(node, list):
        return [found for item in node for found in integer_fields(item, at)]
    if not isinstance(node, dict):
        return []
    found = [(at, node.get("maximum"))] if node.get("type") == "integer" else []
    return found + [item for key, value in node.items()
                    for item in integer_fields(value, f"{at}/{key}")]


def test_every_integer_field_is_bounded_to_what_json_readers_hold_exactly() -> None:
    """A JavaScript reader holds integers exactly up to 2**53 - 1 only; a larger one passed
    validate and then refused every publish."""
    found = integer_fields(entry_schema())
    assert len(found) >= 6
    assert [(at, top) for at, top in found if top is None or top > 2**53 - 1] == []


def test_every_entry_file_validates_as_an_editor_reads_it(validator: Any) -> None:
    files = entry_files([ENTRIES])
    assert len(files) > 50
    for path in files:
        errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}"
                  for e in validator.iter_errors(as_typed(path))]
        assert not errors, (path, errors)


def test_the_template_validates(validator: Any) -> None:
    template = as_typed(REPO / "docs" / "entry-template.yaml")
    assert validator.is_valid(template)
    EntryFile.model_validate(yaml.safe_load((REPO / "docs" / "entry-template.yaml").read_text()))


@pytest.mark.parametrize(
    "changes",
    [
        {"colour": "#123456"},
        {"category": "games"},
        {"authType": "token"},
        {"baseUrl": None},
        {"baseUrl": "api.example.com/v1"},
        {"color": "#12g456"},
        {"id": "Example_Weather"},
        {"endpoints": [{"method": "FETCH", "path": "/a"}]},
        {"pricing": {"model": "cheap"}},
        {"pricing": {"startingCentsPerMonth": -1}},
        {"pricing": {"startingCentsPerMonth": 2**53}},  # past what JSON readers hold exactly
        {"pricing": {"tiers": [{"name": "Pro", "monthlyCents": 10**20, "included": "All"}]}},
        {"pricing": {"freeQuota": {"amount": 5}}},  # its period is required
        {"sdks": [{"language": "Python"}]},
        {"verified": "last week"},
        {"tags": "forecast"},
    ],
)
def test_what_the_schema_rejects_validate_rejects_too(validator: Any, changes: dict) -> None:
    entry = make_entry(**changes)
    assert validator.is_valid(make_entry())
    assert not validator.is_valid(entry), changes
    with pytest.raises(ValidationError):
        EntryFile.model_validate(entry)


def test_the_template_modeline_finds_the_schema_from_where_an_entry_lives() -> None:
    first = (REPO / "docs" / "entry-template.yaml").read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert match, first
    copy = ENTRIES / "weather" / "example-api.yaml"  # where contributors copy the template
    assert (copy.parent / match.group(1)).resolve() == COMMITTED.resolve()


def test_vscode_maps_the_schema_to_exactly_the_entry_files() -> None:
    settings = json.loads((REPO / ".vscode" / "settings.json").read_text(encoding="utf-8"))
    (schema, globs), = settings["yaml.schemas"].items()
    assert (REPO / PurePosixPath(schema)).resolve() == COMMITTED.resolve()
    mapped = {path for pattern in globs for path in REPO.glob(pattern) if path.is_file()}
    assert mapped == set(entry_files([ENTRIES]))


def test_a_key_the_nested_models_do_not_know_is_refused_by_schema_and_validate(
    validator: Any, write_entry: Any, data_dir: Any,
) -> None:
    from pipeline.catalogue.entries import read_catalog

    endpoints = [{"method": "GET", "path": "/forecast", "description": "Forecast",
                  "hourly": None}]  # what `description: Forecast, hourly` in {...} reads as
    entry = make_entry(endpoints=endpoints)
    assert not validator.is_valid(entry)
    write_entry(entry)
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert [(p.field, p.rule) for p in report.problems] == [("endpoints[0].hourly",
                                                             "unknown-field")]
