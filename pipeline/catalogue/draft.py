"""Drafting an entry from a provider's official API description (OpenAPI 3.0/3.1, Swagger 2.0):
what the description states is filled in, and every field it cannot know (pricing, rate limit,
colour, samples, category) is left as a `TODO:` that `validate` rejects until a person fills
it from the provider's own pages.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import yaml

from pipeline.catalogue.guard import VALUE_ERRORS, YAML_LOADER, read_text

TODO = "TODO:"
MAX_ENDPOINTS = 8
MAX_DESCRIPTION_BYTES = 32 * 1024 * 1024  # the largest official descriptions are ~10 MB
_METHODS = ("get", "post", "put", "patch", "delete")
_PLACEHOLDER = re.compile(r"\{[^}]*\}")
_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.DOTALL)


class DraftError(ValueError):
    """The source is not an API description a draft can be made from."""


def todo(what: str) -> str:
    return f"{TODO} {what}"


def load_description(source: str, timeout: float = 20.0) -> dict[str, Any]:
    """The description at `source`: a file, or an http(s) URL fetched when the network allows."""
    try:
        if urlsplit(source).scheme in ("http", "https"):
            request = urllib.request.Request(source, headers={"User-Agent": "apidir-draft"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read(MAX_DESCRIPTION_BYTES + 1).decode("utf-8")
        else:
            text = read_text(Path(source), MAX_DESCRIPTION_BYTES, setting=None)
    except (OSError, ValueError) as exc:
        raise DraftError(f"{source}: cannot read it: {exc}") from exc
    try:
        document = (json.loads(text) if text.lstrip().startswith("{")
                    else yaml.load(text, Loader=YAML_LOADER))
    except (yaml.YAMLError, *VALUE_ERRORS) as exc:
        reason = " ".join(str(exc).split())
        raise DraftError(f"{source}: neither JSON nor YAML: {reason}") from exc
    if not isinstance(document, dict) or not (
        str(document.get("openapi", "")).startswith("3.") or document.get("swagger") == "2.0"
    ):
        raise DraftError(f"{source}: not an OpenAPI 3.x or Swagger 2.0 description")
    return document


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "api"


def _server_url(server: Mapping[str, Any], source: str) -> str:
    """A server's URL with its variables at their defaults, made absolute against `source`."""
    url = str(server.get("url", ""))
    for name, variable in (server.get("variables") or {}).items():
        url = url.replace("{" + name + "}", str((variable or {}).get("default", "")))
    if not urlsplit(url).scheme and urlsplit(source).scheme in ("http", "https"):
        url = urljoin(source, url)
    return url.rstrip("/")


def base_url_of(document: Mapping[str, Any], source: str) -> str:
    """From `servers` (3.x; the first https one, else the first; path-level servers when the
    document has none), or `schemes`/`host`/`basePath` (2.0)."""
    if document.get("swagger") == "2.0":
        host = document.get("host")
        if not host:
            return todo("base address (the description names no host)")
        schemes = document.get("schemes") or ["https"]
        scheme = "https" if "https" in schemes else schemes[0]
        return f"{scheme}://{host}{document.get('basePath') or ''}".rstrip("/")
    servers = list(document.get("servers") or [])
    if not servers:
        for item in (document.get("paths") or {}).values():
            servers = list((item or {}).get("servers") or [])
            if servers:
                break
    urls = [_server_url(server, source) for server in servers if isinstance(server, dict)]
    urls = [url for url in urls if urlsplit(url).scheme]
    if not urls:
        return todo("base address (the description names no server)")
    return next((url for url in urls if url.startswith("https://")), urls[0])


def _schemes(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    if document.get("swagger") == "2.0":
        return dict(document.get("securityDefinitions") or {})
    return dict((document.get("components") or {}).get("securitySchemes") or {})


def auth_of(document: Mapping[str, Any]) -> tuple[str, str, str]:
    """(authType, authDescription, authExample) from the security scheme the description
    requires (else the first it declares); `none` when it declares none."""
    schemes = _schemes(document)
    required = [name for requirement in document.get("security") or []
                for name in (requirement or {})]
    name = next((n for n in required if n in schemes), next(iter(schemes), None))
    if name is None:
        return ("none", todo("the description declares no security scheme: confirm in the "
                             "provider's docs that no key is needed"), "# No auth required")
    scheme = schemes[name] or {}
    kind = str(scheme.get("type", "")).lower()
    if kind == "http" and str(scheme.get("scheme", "")).lower() == "bearer":
        return ("bearer", "Send the token in the Authorization header as a bearer token.",
                "Authorization: Bearer YOUR_API_KEY")
    if kind == "basic" or (kind == "http" and str(scheme.get("scheme", "")).lower() == "basic"):
        return ("basic", "HTTP basic authentication.", "Authorization: Basic BASE64_CREDENTIALS")
    if kind == "apikey":
        where, key = scheme.get("in", "header"), scheme.get("name", "api_key")
        example = f"{key}: YOUR_API_KEY" if where == "header" else f"?{key}=YOUR_API_KEY"
        return ("api-key", f"Send the key in the {key} {where} parameter.", example)
    if kind in ("oauth2", "openidconnect"):
        return ("oauth2", "OAuth 2.0 access token in the Authorization header.",
                "Authorization: Bearer YOUR_ACCESS_TOKEN")
    return (todo(f"auth type (scheme {name!r} is of type {kind!r})"),
            todo("where the credential goes"), todo("auth header with a placeholder"))


def _operations(document: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in (document.get("paths") or {}).items():
        for method in _METHODS:
            operation = (item or {}).get(method)
            if isinstance(operation, dict) and not operation.get("deprecated"):
                yield method.upper(), str(path), operation


def endpoints_of(document: Mapping[str, Any], limit: int = MAX_ENDPOINTS) -> list[dict[str, str]]:
    """Up to `limit` representative operations: GET without placeholders first (they can be
    probed), then other GETs, then the rest, each group in the description's order."""
    def rank(op: tuple[str, str, dict[str, Any]]) -> int:
        method, path, _ = op
        return 0 if method == "GET" and not _PLACEHOLDER.search(path) else (
            1 if method == "GET" else 2)

    chosen = sorted(_operations(document), key=rank)[:limit]
    return [
        {"method": method, "path": path,
         "description": first_sentence(operation.get("summary") or operation.get("description")
                                       or operation.get("operationId") or "")
         or todo("what this endpoint does")}
        for method, path, operation in chosen
    ]


def first_sentence(text: str) -> str:
    text = " ".join(str(text).split())
    match = _SENTENCE.match(text)
    return match.group(1) if match else text


def draft_entry(document: Mapping[str, Any], source: str, category: str | None = None,
                entry_id: str | None = None, today: date | None = None) -> dict[str, Any]:
    """The draft entry, keys in the template's order."""
    info = document.get("info") or {}
    title = str(info.get("title") or "").strip()
    contact = info.get("contact") or {}
    provider = str(contact.get("name") or info.get("x-providerName") or "").strip()
    summary = first_sentence(info.get("summary") or info.get("description") or "")
    docs = (document.get("externalDocs") or {}).get("url")
    auth_type, auth_description, auth_example = auth_of(document)
    base_url = base_url_of(document, source)
    is_url = urlsplit(source).scheme in ("http", "https")
    entry: dict[str, Any] = {
        "id": entry_id or slug(title or "api"),
        "name": title or todo("display name"),
        "provider": provider or todo("who operates the API"),
        "category": category or todo("one of the 14 category ids"),
        "description": summary or todo("one sentence: what a builder gets"),
        "longDescription": todo("two to four sentences from the provider's own pages"),
        "color": todo("brand colour #rrggbb from the provider's own brand material"),
        "tags": [todo("lower-case tags")],
        "authType": auth_type,
        "authDescription": auth_description,
        "authExample": auth_example,
        "baseUrl": base_url,
        "docsUrl": docs or todo("https address of the API reference"),
        "hasFreeTier": todo("true or false, from the pricing page"),
        "pricing": todo("model, startingCentsPerMonth, freeQuota, tiers, unitCost, details "
                        "from the pricing page"),
        "rateLimit": todo("the rate limit as the provider states it"),
        "endpoints": endpoints_of(document) or todo("at least three endpoints"),
        "sampleRequest": todo("a ready-to-run curl command with a placeholder credential"),
        "sampleResponse": todo("the JSON the sample request returns, as documented"),
    }
    if is_url:
        entry["openapiUrl"] = source
    entry["sources"] = [source if is_url else todo(f"the address of {Path(source).name}")]
    entry["verified"] = todo(f"the day you checked every fact, e.g. {today or date.today()}")
    return entry


def render_draft(entry: Mapping[str, Any]) -> str:
    header = ("# Draft made by `apidir draft` from the provider's API description. Replace every\n"
              "# TODO from the provider's own pages, then run `apidir validate` on this file.\n")
    return header + yaml.safe_dump(dict(entry), sort_keys=False, allow_unicode=True, width=100)


def todo_fields(raw: Any, loc: tuple[int | str, ...] = ()) -> Iterator[tuple[int | str, ...]]:
    """Where a draft still holds a TODO."""
    if isinstance(raw, str) and raw.startswith(TODO):
        yield loc
    elif isinstance(raw, dict):
        for key, value in raw.items():
            yield from todo_fields(value, (*loc, key))
    elif isinstance(raw, list):
        for index, value in enumerate(raw):
            yield from todo_fields(value, (*loc, index))
