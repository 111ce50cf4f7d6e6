"""The JSON Schema of an entry file, generated from `EntryFile`, so editors check an entry
as it is typed.

It is written in JSON Schema draft-07, the draft that editors' YAML support (the YAML
language server behind VS Code's YAML extension) implements: definitions under
`definitions`, and a `$ref` with a description beside it wrapped in `allOf`, since draft-07
ignores whatever stands beside a `$ref`. The schema does not depend on configuration, so the
copy committed as `docs/entry.schema.json` can be compared byte for byte with a fresh one.
What the schema cannot say (lint, the credential gate, id = file name) `apidir validate`
still checks.
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.catalogue.entries import EntryFile
from pipeline.contract import ContractJsonSchema

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
DEFINITIONS = "#/definitions/"


def _draft_07(node: Any) -> Any:
    """`node` with every `$ref` that has keywords beside it wrapped in `allOf`."""
    if isinstance(node, list):
        return [_draft_07(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _draft_07(value) for key, value in node.items()}
    if "$ref" in node and len(node) > 1:
        node["allOf"] = [{"$ref": node.pop("$ref")}]
    return node


def entry_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of one file `data/entries/<category>/<id>.yaml`."""
    schema = EntryFile.model_json_schema(
        mode="validation", ref_template=DEFINITIONS + "{model}",
        schema_generator=ContractJsonSchema,
    )
    definitions = schema.pop("$defs", {})
    for definition in definitions.values():  # as `apidir validate` does: no unknown keys
        if "properties" in definition:
            definition.setdefault("additionalProperties", False)
    schema |= {
        "$schema": DRAFT_07,
        "title": "API Directory entry",
        "description": "One curated API of the directory: data/entries/<category>/<id>.yaml, "
                       "where <id> is the entry's id and <category> its category. The template "
                       "with every field explained is docs/entry-template.yaml; `apidir "
                       "validate` checks what a schema cannot (lint, placeholder credentials, "
                       "id and category matching the file's place).",
        "definitions": definitions,
    }
    return _draft_07(schema)


def render_entry_schema() -> str:
    """The schema as committed: sorted keys, two-space indent, trailing newline."""
    return json.dumps(entry_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
