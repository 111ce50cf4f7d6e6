"""The contract models: round trips, enums and formats, and the generated OpenAPI document."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_openapi
from pydantic import ValidationError

from pipeline import contract
from pipeline.contract import (
    CATEGORY_IDS,
    SLUG_PATTERN,
    APIEntry,
    BuilderScore,
    CategoryDataset,
    Cors,
    EndpointStatus,
    EntryDocument,
    FullDataset,
    Https,
    Lifecycle,
    Meta,
    Pricing,
    SearchIndex,
    SearchItem,
    Status,
    Uptime,
    price_text,
)
from pipeline.release.openapi import openapi_document, render_openapi
from pipeline.release.publish import published_entry
from pipeline.release.search import search_item
from tests.conftest import REPO, VALID_ENTRY, make_entry


def published(**changes: object) -> dict:
    entry = make_entry(**changes)
    entry.pop("sources")
    entry.pop("verified")
    return entry


META = {
    "version": "2.0.0+20261121.1",
    "generated": "2026-11-21T03:00:00Z",
    "totalAPIs": 1,
    "source": "https://directory.test/api/apis.json",
    "license": "CC BY 4.0",
}


def test_entry_round_trip_keeps_every_field_and_camel_case_names() -> None:
    raw = published()
    entry = APIEntry.model_validate(raw)
    dumped = entry.model_dump(mode="json", exclude_unset=True)
    assert dumped == raw
    assert APIEntry.model_validate(dumped) == entry
    assert entry.base_url == "https://api.example.com/v1"  # kept as written, no trailing slash


def test_presented_values_default_to_unchecked_and_null() -> None:
    dumped = APIEntry.model_validate(published()).model_dump(mode="json")
    assert dumped["status"]["state"] == "unchecked"
    assert dumped["builderScore"] is None
    assert dumped["uptime"] is None


def test_full_dataset_round_trip_through_json() -> None:
    document = {"meta": META, "apis": [published()]}
    dataset = FullDataset.model_validate_json(json.dumps(document))
    again = FullDataset.model_validate_json(dataset.model_dump_json())
    assert again == dataset
    assert again.meta.generated == datetime(2026, 11, 21, 3, tzinfo=UTC)
    assert '"totalAPIs":1' in dataset.model_dump_json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", "Not A Slug"),
        ("id", "double--hyphen"),
        ("category", "games"),
        ("authType", "token"),
        ("color", "#12345"),
        ("color", "blue"),
        ("baseUrl", "api.example.com"),
        ("baseUrl", "ftp://api.example.com"),
        ("docsUrl", "https://"),
        ("endpoints", [{"method": "FETCH", "path": "/a"}]),
        ("pricing", {"model": "cheap"}),
        ("pricing", {"startingCentsPerMonth": -1}),
    ],
)
def test_entry_rejects_values_outside_the_seed(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        APIEntry.model_validate(published(**{field: value}))


def _split_rule(value: str) -> bool:
    """The URL rule as it reads without its fast path: `urlsplit`'s scheme and host, and the
    release's `format: uri` check."""
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and not re.search(
            r"[\s{}<>\"|\\^`]", value) and contract.is_uri(value)
    except ValueError:
        return False


@pytest.mark.parametrize("value", [
    "https://api.example.com", "http://api.example.com/v1?q=1#top", "https://a.b:8443/x",
    "https://host:/p", "https://host:99999/", "https://./", "https://-", "HTTPS://api.example.com",
    "https://user:pw@api.example.com/", "https://@/x", "https://:80/", "https://", "https:///a",
    "https://[::1]:8080/", "http://[broken/", "https://host:abc/", "https://ho st/",
    "https://host\n", "https://host/\t", "\x01https://api.example.com", " https://a.b",
    "https://a.b/{id}", "ftp://a.b", "api.example.com", "https://a_b.example.com/", "https://é.fr/",
    "https://a.b?x", "https://a.b#f", "https://a.b\\c", "https://a.b/café", "https://a.b/[x]",
    "https://a.b/%zz", "https://a.b/%", "https://a.b/#x#y", "https://a.b/\u202e", "https://a.b/\x7f",
    "https://[::1%25eth0]/", "https://a.b/caf%C3%A9",
])
def test_the_url_rule_judges_as_urlsplit_does(value: str) -> None:
    try:
        contract._absolute_uri(value)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is _split_rule(value)


@pytest.mark.parametrize("field", ["id", "name", "provider", "category", "baseUrl", "authType"])
def test_entry_requires_the_six_required_fields(field: str) -> None:
    with pytest.raises(ValidationError):
        APIEntry.model_validate(published(**{field: None}))


def test_auth_type_none_is_accepted() -> None:
    assert APIEntry.model_validate(published(authType="none")).auth_type == "none"


def test_every_category_id_is_accepted() -> None:
    for category in CATEGORY_IDS:
        assert APIEntry.model_validate(published(category=category)).category == category
    assert len(CATEGORY_IDS) == 14


def test_dataset_invariants_are_enforced() -> None:
    entry = published()
    with pytest.raises(ValidationError, match="totalAPIs"):
        FullDataset.model_validate({"meta": META | {"totalAPIs": 2}, "apis": [entry]})
    other = published(id="another-api")
    with pytest.raises(ValidationError, match="sorted"):
        FullDataset.model_validate({"meta": META | {"totalAPIs": 2}, "apis": [entry, other]})
    with pytest.raises(ValidationError, match="sorted"):
        FullDataset.model_validate({"meta": META | {"totalAPIs": 2}, "apis": [entry, entry]})
    category_meta = META | {"category": "ai", "label": "AI", "count": 1}
    with pytest.raises(ValidationError, match="category"):
        CategoryDataset.model_validate({"meta": category_meta, "apis": [entry]})
    with pytest.raises(ValidationError, match="count"):
        CategoryDataset.model_validate(
            {"meta": category_meta | {"count": 0}, "apis": [published(category="ai")]}
        )


def test_meta_version_must_be_semver_and_generated_must_carry_a_zone() -> None:
    with pytest.raises(ValidationError):
        Meta.model_validate(META | {"version": "nightly-3"})
    with pytest.raises(ValidationError):
        Meta.model_validate(META | {"generated": "2026-11-21T03:00:00"})


def test_builder_score_label_follows_its_percent() -> None:
    score = {
        "grade": "B",
        "percent": 81,
        "label": "81% builder-friendly",
        "pricing": 90,
        "latency": 70,
        "depth": 80,
        "rubric": "1",
    }
    assert BuilderScore.model_validate(score).percent == 81
    with pytest.raises(ValidationError):
        BuilderScore.model_validate(score | {"label": "80% builder-friendly"})
    with pytest.raises(ValidationError):
        BuilderScore.model_validate(score | {"percent": 101, "label": "101% builder-friendly"})


def test_status_states() -> None:
    assert Status().state == "unchecked"
    with pytest.raises(ValidationError):
        Status(state="down")


def test_openapi_document_is_valid_openapi_3_1() -> None:
    document = openapi_document()
    validate_openapi(document)
    assert document["openapi"].startswith("3.1")
    assert document["info"]["version"] == "2.0.0"
    operations = {op["operationId"] for path in document["paths"].values() for op in path.values()}
    assert operations == {"getAllAPIs", "getAPIsByCategory", "getAPI", "getSearchIndex",
                          "getCategories", "getReleases", "getChanges"}
    entry = document["paths"]["/api/apis/{apiId}.json"]["get"]
    assert entry["parameters"][0]["schema"]["pattern"] == SLUG_PATTERN
    assert set(entry["responses"]) == {"200", "206", "304", "404", "416"}
    parameter = document["paths"]["/api/categories/{categoryId}.json"]["get"]["parameters"][0]
    assert parameter["schema"]["enum"] == list(CATEGORY_IDS)
    auth_types = document["components"]["schemas"]["APIEntry"]["properties"]["authType"]["enum"]
    assert "none" in auth_types


def test_committed_openapi_copy_equals_the_generated_one() -> None:
    committed = (REPO / "docs" / "openapi.json").read_text(encoding="utf-8")
    assert committed == render_openapi(), "docs/openapi.json is stale: run `make openapi`"


def test_a_release_s_openapi_document_names_its_address_literally() -> None:
    """Many tools read `servers[0].url` as it is, never filling in a server variable: a
    release's copy names its own address there, and differs from the committed copy by that
    address alone."""
    published = json.loads(render_openapi("https://dir.example/"))
    assert published["servers"][0]["url"] == "https://dir.example"
    assert "variables" not in published["servers"][0]
    committed = json.loads((REPO / "docs" / "openapi.json").read_text(encoding="utf-8"))
    assert committed["servers"][0]["url"] == "http://localhost:8000"
    committed["servers"][0]["url"] = "https://dir.example"
    assert published == committed


def test_an_entry_document_is_the_whole_entry_with_its_meta() -> None:
    entry = published() | {"uptimeSla": "99.9%"}  # a field this version does not know yet
    document = EntryDocument.model_validate({"meta": META, "api": entry})
    assert document.api.id == "example-weather"
    with pytest.raises(ValidationError, match="api"):
        EntryDocument.model_validate({"meta": META})


def test_a_search_item_is_the_entry_cut_down_and_the_index_keeps_its_invariants() -> None:
    score = {"grade": "B", "percent": 81, "label": "81% builder-friendly", "pricing": 90,
             "latency": None, "depth": 80, "rubric": "2.0.0", "provisional": True}
    entry = published(builderScore=score, status={"state": "live", "httpStatus": 200},
                      lifecycle={"state": "degraded", "reason": "1 of 2 targets failed twice"},
                      https={"enabled": True, "tlsVersion": "TLSv1.3"},
                      cors={"state": "yes", "allowOrigin": "*"})
    item = search_item(entry)
    assert item == {
        "id": "example-weather", "name": entry["name"], "provider": entry["provider"],
        "category": "weather", "description": entry["description"], "tags": entry["tags"],
        "authType": "api-key", "hasFreeTier": True, "color": entry["color"], "state": "live",
        "grade": "B", "percent": 81, "provisional": True,
        # a score without its evidence: the rule alone
        "provisionalWhy": "Latency is graded after 5 probes on 3 days within 7 days",
        "lifecycle": "degraded", "https": True, "cors": "yes",
    }
    confirmed = search_item(entry | {"builderScore": score | {"provisional": False}})
    assert "provisionalWhy" not in confirmed  # only a provisional grade's
    # a successor only on a deprecated entry's item, freeOnly only on a free one's
    assert set(item) | {"successor", "freeOnly"} == {
        field.alias for field in SearchItem.model_fields.values()}
    free = search_item(published(pricing=entry["pricing"] | {"model": "free"}))
    assert free["freeOnly"] is True
    replaced = search_item(published(lifecycle={"state": "deprecated", "successor": "frankfurter"}))
    assert (replaced["lifecycle"], replaced["successor"]) == ("deprecated", "frankfurter")
    unscored = search_item(published(color=None))
    assert unscored["state"] == "unchecked" and "grade" not in unscored and "color" not in unscored
    SearchIndex.model_validate({"meta": META, "apis": [item]})
    with pytest.raises(ValidationError, match="totalAPIs"):
        SearchIndex.model_validate({"meta": META, "apis": [item, item]})
    with pytest.raises(ValidationError, match="sorted"):
        SearchIndex.model_validate({"meta": META | {"totalAPIs": 2}, "apis": [item, item]})
    with pytest.raises(ValidationError, match="grade"):
        SearchItem.model_validate(item | {"grade": "excellent"})


def _schema_nodes(node: Any) -> Iterator[dict]:
    """Every object of a JSON Schema, nested ones included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schema_nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_nodes(value)


def _resolved(schemas: dict, node: dict, key: str) -> Any:
    """`key` of a property, else of the component its bare `$ref` names (pydantic leaves out a
    title or description that only repeats the referenced schema's)."""
    if key in node or "$ref" not in node:
        return node.get(key)
    return schemas[node["$ref"].rsplit("/", 1)[-1]].get(key)


def test_every_property_has_a_description_and_a_title_from_its_json_name() -> None:
    schemas = openapi_document()["components"]["schemas"]
    properties = [(name, schema) for node in _schema_nodes(schemas)
                  for name, schema in (node.get("properties") or {}).items()]
    assert len(properties) > 150
    for name, schema in properties:
        description = _resolved(schemas, schema, "description")
        assert isinstance(description, str) and description.strip(), name
        title = _resolved(schemas, schema, "title")
        assert isinstance(title, str) and title.strip(), name
        if not re.fullmatch(r"[a-z]+", name):
            # a name of several words (checkedAt, totalAPIs, last7d) gets a title of words,
            # never pydantic's "Checkedat", "Totalapis", "Last7D"
            assert " " in title, (name, title)
        elif "$ref" not in schema:
            assert title.lower() == name, (name, title)
    entry = schemas["APIEntry"]["properties"]
    assert entry["baseUrl"]["title"] == "Base URL"
    assert schemas["Status"]["properties"]["checkedAt"]["title"] == "Checked at"
    assert schemas["Meta"]["properties"]["totalAPIs"]["title"] == "Total APIs"


MAIN_SCHEMAS_WITH_EXAMPLES = {
    "APIEntry", "Status", "EndpointStatus", "BuilderScore", "Meta", "CategoryMeta", "Pricing",
    "Uptime", "Lifecycle", "Https", "Cors", "Provenance", "SearchItem", "CatalogueEvent",
    "StateChangeItem", "LatencyEvidence",
}


def test_each_example_is_valid_against_its_own_schema_and_model() -> None:
    schemas = json.loads(json.dumps(openapi_document()["components"]["schemas"]))
    with_examples = {name for name, schema in schemas.items() if schema.get("examples")}
    assert with_examples >= MAIN_SCHEMAS_WITH_EXAMPLES
    checked = 0
    for node in _schema_nodes(schemas):
        for example in node.get("examples") or ():
            schema = {**node, "components": {"schemas": schemas}}
            jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            ).validate(example)
            checked += 1
    assert checked >= 25
    for name in with_examples:
        model = getattr(contract, name)
        for example in schemas[name]["examples"]:
            # the model reads it and writes it back as it was: an example is a published shape
            dumped = model.model_validate(example).model_dump(mode="json", exclude_unset=True)
            assert dumped == example, name


def test_a_broken_example_fails_its_schema() -> None:
    schemas = json.loads(json.dumps(openapi_document()["components"]["schemas"]))
    broken = contract.API_ENTRY_EXAMPLE | {"status": {"state": "down"}}
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/APIEntry", "components": {"schemas": schemas}})
    assert not validator.is_valid(broken)
    assert not validator.is_valid({k: v for k, v in contract.API_ENTRY_EXAMPLE.items()
                                   if k != "lifecycle"})


def test_required_names_exactly_what_the_publish_step_always_writes() -> None:
    schemas = openapi_document()["components"]["schemas"]
    minimal = {key: VALID_ENTRY[key] for key in schemas["APIEntry"]["required"]
               if key in VALID_ENTRY}
    assert set(minimal) == {"id", "name", "provider", "category", "baseUrl", "authType"}
    # whatever the presented values, an entry holds its required keys and no other
    bare = published_entry(minimal)
    scored = published_entry(minimal, Status(state="live", http_status=200),
                             BuilderScore.model_validate(contract.BUILDER_SCORE_EXAMPLES[0]),
                             Uptime(), lifecycle=Lifecycle(state="active"),
                             https=Https(enabled=True), cors=Cors(state="no"))
    for entry in (bare, scored):
        assert set(entry) == set(schemas["APIEntry"]["required"])
    # a presented value written whole holds every key its schema requires
    for name, value in (("Status", bare["status"]), ("BuilderScore", scored["builderScore"]),
                        ("Uptime", scored["uptime"])):
        assert set(value) == set(schemas[name]["required"]), name
    for name in ("Lifecycle", "Https", "Cors"):  # never null, written without null keys
        assert "anyOf" not in schemas["APIEntry"]["properties"][name.lower()], name
        assert set(scored[name.lower()]) == set(schemas[name]["required"]), name
        assert set(bare[name.lower()]) >= set(schemas[name]["required"]), name
    endpoint = EndpointStatus().model_dump(mode="json")
    assert set(endpoint) == set(schemas["EndpointStatus"]["required"])
    # the curated fields stay optional: a file sets them or not
    assert "description" not in schemas["APIEntry"]["required"]
    # input stays lenient: an entry without presented values (an older file) still validates
    assert APIEntry.model_validate(minimal).status.state == "unchecked"


def test_a_pricing_states_its_currency_by_its_iso_4217_code() -> None:
    """Prices in pounds are stated as the provider states them, in pence, with the currency
    they are in; a code that is not ISO 4217 as written is refused, and none is US dollars."""
    gbp = Pricing.model_validate({"currency": "GBP", "tiers": [
        {"name": "Free", "monthlyCents": 0, "included": "x"},
        {"name": "Startup", "monthlyCents": 3000, "included": "y"}]})
    assert gbp.currency == "GBP" and gbp.model_dump(mode="json")["currency"] == "GBP"
    assert Pricing.model_validate({}).currency is None
    for code in ("gbp", "XYZ", "GBPX", ""):
        with pytest.raises(ValidationError) as refused:
            Pricing.model_validate({"currency": code})
        [error] = refused.value.errors()
        assert error["loc"] == ("currency",)
    assert [price_text(3000, "GBP"), price_text(2500, "EUR"), price_text(3000, "CHF"),
            price_text(2900), price_text(2900, "USD"), price_text(499, "EUR")] == [
        "£30", "€25", "30 CHF", "$29", "$29", "€4.99"]
