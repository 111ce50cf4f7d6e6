"""The OpenAPI 3.1 document of the public interface, generated from the contract models.

A release's copy names the address it is published on (`APIDIR_BASE_URL`) as its first
server's URL, literally: tools (Swagger UI, client generators) call the first server, and many
read its URL as it is, without filling in server variables. With the neutral default, the
document is the copy committed under `docs/openapi.json`, compared byte for byte with a fresh
generation; a release's copy differs from it by that address alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic.json_schema import models_json_schema

from pipeline.contract import (
    CATEGORY_IDS,
    INTERFACE_VERSION,
    LICENSE,
    SLUG_PATTERN,
    CategoryDataset,
    CategoryIndex,
    ChangeLog,
    ContractJsonSchema,
    EntryDocument,
    ErrorBody,
    FullDataset,
    ReleaseIndex,
    SearchIndex,
)

REF_TEMPLATE = "#/components/schemas/{model}"
DEFAULT_SERVER = "http://localhost:8000"


# Every document may be fetched conditionally: the host answers 304 while the client's copy
# is current (pipeline.release.hosting, pipeline.release.conditional).
CONDITIONAL_PARAMETERS: dict[str, Any] = {
    "IfNoneMatch": {
        "name": "If-None-Match",
        "in": "header",
        "required": False,
        "description": "The ETag of the copy the client holds; answered 304 while it is "
                       "current (weak comparison).",
        "schema": {"type": "string"},
    },
    "IfModifiedSince": {
        "name": "If-Modified-Since",
        "in": "header",
        "required": False,
        "description": "The Last-Modified of the copy the client holds; answered 304 while "
                       "the document is not newer. Ignored when If-None-Match is sent.",
        "schema": {"type": "string"},
    },
}
# Every document may be read in parts, as both hosts answer a Range (pipeline.release.ranges):
# a consumer resumes a broken download of the full dataset where it stopped.
RANGE_PARAMETERS: dict[str, Any] = {
    "Range": {
        "name": "Range",
        "in": "header",
        "required": False,
        "description": "Byte ranges of the document (RFC 9110 §14): `bytes=0-99`, "
                       "`bytes=100-` or `bytes=-100`, several separated by commas; answered "
                       "206, or 416 when none lies within the document. A compressed answer "
                       "is always whole: ask without `Accept-Encoding: gzip`.",
        "schema": {"type": "string"},
        "example": "bytes=0-99",
    },
    "IfRange": {
        "name": "If-Range",
        "in": "header",
        "required": False,
        "description": "The strong ETag or the Last-Modified of the part the client holds: "
                       "the range is served while the document is still that version, "
                       "else the whole document (200).",
        "schema": {"type": "string"},
    },
}
VALIDATOR_HEADERS: dict[str, Any] = {
    "ETag": {
        "description": "The document's validator, for If-None-Match (weak, W/\"…\", on a "
                       "compressed answer).",
        "required": True,
        "schema": {"type": "string"},
    },
    "Last-Modified": {
        "description": "When the document was published, for If-Modified-Since.",
        "required": True,
        "schema": {"type": "string"},
    },
    "Cache-Control": {
        "description": "Reuse for five minutes then revalidate; a kept release's documents "
                       "(under api/releases/) never change and are immutable.",
        "required": True,
        "schema": {"type": "string"},
    },
}
RANGE_HEADERS: dict[str, Any] = {
    "Content-Range": {
        "description": "Where the part lies in the document, `bytes <first>-<last>/<size>`; "
                       "`bytes */<size>` on a 416. A multipart body names it in each part.",
        "required": False,
        "schema": {"type": "string"},
    },
}
PARTIAL_CONTENT: dict[str, Any] = {
    "description": "The bytes asked, of the document as it is (never compressed): one range "
                   "typed as the document, several as one multipart/byteranges body whose "
                   "parts each name their Content-Range.",
    "headers": {name: {"$ref": f"#/components/headers/{name}"}
                for name in (*VALIDATOR_HEADERS, *RANGE_HEADERS)},
    "content": {"application/json": {}, "multipart/byteranges": {}},
}
RANGE_NOT_SATISFIABLE: dict[str, Any] = {
    "description": "No range asked lies within the document, or the Range is no byte range: "
                   "Content-Range names the document's size; the body is the host's own text.",
    "headers": {name: {"$ref": f"#/components/headers/{name}"} for name in RANGE_HEADERS},
}
NOT_MODIFIED: dict[str, Any] = {
    "description": "Not modified: the client's copy is current; no body.",
    "headers": {name: {"$ref": f"#/components/headers/{name}"} for name in ("ETag",
                                                                           "Cache-Control")},
}


def _conditional_parameters() -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"}
            for name in (*CONDITIONAL_PARAMETERS, *RANGE_PARAMETERS)]


def _json_response(description: str, schema_name: str, validators: bool = False
                   ) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {
            "application/json": {"schema": {"$ref": REF_TEMPLATE.format(model=schema_name)}}
        },
    }
    if validators:
        response["headers"] = {name: {"$ref": f"#/components/headers/{name}"}
                               for name in VALIDATOR_HEADERS}
    return response


def component_schemas() -> dict[str, Any]:
    """JSON Schemas (2020-12) of every published document, keyed by model name: what the
    files hold (serialization), so a field the publish step always writes is required."""
    _, top = models_json_schema(
        [
            (FullDataset, "serialization"),
            (CategoryDataset, "serialization"),
            (CategoryIndex, "serialization"),
            (ReleaseIndex, "serialization"),
            (ChangeLog, "serialization"),
            (EntryDocument, "serialization"),
            (SearchIndex, "serialization"),
            (ErrorBody, "serialization"),
        ],
        ref_template=REF_TEMPLATE,
        schema_generator=ContractJsonSchema,
    )
    return top["$defs"]


def _get(operation_id: str, summary: str, description: str, schema: str,
         path_parameters: Sequence[dict[str, Any]] = (),
         errors: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One published document's GET: both hosts (nginx, `apidir serve`) tag every file they
    serve, answer a conditional request 304 and a Range 206 or 416, so every operation
    declares them, here alone."""
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "parameters": [*path_parameters, *_conditional_parameters()],
            "responses": {
                "200": _json_response(description, schema, validators=True),
                "206": {"$ref": "#/components/responses/PartialContent"},
                "304": {"$ref": "#/components/responses/NotModified"},
                "416": {"$ref": "#/components/responses/RangeNotSatisfiable"},
                **(errors or {}),
            },
        }
    }


def openapi_document(base_url: str = DEFAULT_SERVER) -> dict[str, Any]:
    """The interface description: the two seed operations, one document per entry and the
    documents published beside them, served from `base_url`."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "API Directory",
            "version": INTERFACE_VERSION,
            "description": (
                "A read-only directory of third-party REST APIs, served as static JSON. "
                "Every entry carries its endpoint status from the latest probe run, "
                "its builder score and its uptime."
            ),
            "license": {"name": LICENSE, "identifier": "CC-BY-4.0"},
        },
        "servers": [
            {
                "url": base_url.rstrip("/"),
                "description": "The static host the release is published on; a host serving "
                               "a copy of it answers the same paths at its own address.",
            }
        ],
        "paths": {
            "/api/apis.json": _get(
                "getAllAPIs", "The whole dataset with metadata.", "Every published entry.",
                "FullDataset",
            ),
            "/api/categories/{categoryId}.json": _get(
                "getAPIsByCategory", "Only the entries of one category.",
                "The entries of that category.", "CategoryDataset",
                [{"name": "categoryId", "in": "path", "required": True,
                  "schema": {"type": "string", "enum": list(CATEGORY_IDS)}}],
                {"404": _json_response("No such category: the body names the category ids.",
                                       "ErrorBody")},
            ),
            "/api/apis/{apiId}.json": _get(
                "getAPI", "One entry, whole, with the meta of its release.",
                "The entry with that id.", "EntryDocument",
                [{"name": "apiId", "in": "path", "required": True,
                  "description": "The entry's id, as listed in api/search.json.",
                  "schema": {"type": "string", "pattern": SLUG_PATTERN, "maxLength": 100}}],
                {"404": _json_response("No entry has that id.", "ErrorBody")},
            ),
            "/api/search.json": _get(
                "getSearchIndex", "Every entry cut down to what a search or a list shows: id, "
                "name, provider, category, tags, state and grade.", "The search index.",
                "SearchIndex",
            ),
            "/api/categories.json": _get(
                "getCategories", "Every category with its label and entry count.",
                "The category index.", "CategoryIndex",
            ),
            "/api/releases.json": _get(
                "getReleases", "The kept releases, newest first; each stays readable, never "
                "rewritten, at the path it lists.", "The release history.", "ReleaseIndex",
            ),
            "/api/changes.json": _get(
                "getChanges", "Recent changes of entries' presented state, newest first.",
                "The change log.", "ChangeLog",
            ),
        },
        "components": {
            "schemas": component_schemas(),
            "parameters": {**CONDITIONAL_PARAMETERS, **RANGE_PARAMETERS},
            "headers": {**VALIDATOR_HEADERS, **RANGE_HEADERS},
            "responses": {"NotModified": NOT_MODIFIED, "PartialContent": PARTIAL_CONTENT,
                          "RangeNotSatisfiable": RANGE_NOT_SATISFIABLE},
        },
    }


def render_openapi(base_url: str = DEFAULT_SERVER) -> str:
    """The document as published on `base_url`: sorted keys, two-space indent, trailing
    newline."""
    return json.dumps(openapi_document(base_url), indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"
