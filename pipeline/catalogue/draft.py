"""Drafting an entry from a provider's official API description (OpenAPI 3.0/3.1, Swagger 2.0):
what the description states is filled in, and every field it cannot know (pricing, rate limit,
colour, samples, category) is left as a `TODO:` that `validate` rejects until a person fills
it from the provider's own pages.
"""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urljoin, urlsplit

import aiohttp
import yaml
from pydantic import TypeAdapter, ValidationError
from yarl import URL

from pipeline.catalogue.guard import (
    VALUE_ERRORS,
    YAML_LOADER,
    UnsafeEntryFile,
    check_json_depth,
    check_place,
    check_structure,
    decode_within,
    read_text,
)
from pipeline.contract import Slug
from pipeline.probing.netguard import BlockedAddressError, GuardedResolver, GuardPolicy
from pipeline.probing.probe import (
    FOLLOWED_REDIRECTS,
    MAX_REDIRECTS,
    clean_url,
    guard_refusal,
    redact_userinfo,
)

TODO = "TODO:"
MAX_ENDPOINTS = 8
MAX_DESCRIPTION_BYTES = 32 * 1024 * 1024  # the largest official descriptions are ~10 MB
# Official descriptions nest some twenty levels; the JSON parser recurses on depth.
MAX_DESCRIPTION_DEPTH = 100
# Values once every alias is expanded: a 10 MB description holds well under a million.
MAX_DESCRIPTION_NODES = 5_000_000
DOWNLOAD_DEADLINE = 60.0  # seconds for the whole download, however slowly the bytes come
# The prober's form of User-Agent; `apidir draft` names the configured address in it
# (`Settings.user_agent`).
DRAFT_PURPOSE = "reads an API description to draft an entry"
DRAFT_USER_AGENT = f"apidir-draft/2.0 (+https://github.com/apidir/apidir; {DRAFT_PURPOSE})"
# The prober's network guard, on: a download reaches public addresses only, on every hop.
PUBLIC_ONLY = GuardPolicy()
_METHODS = ("get", "post", "put", "patch", "delete")
_PLACEHOLDER = re.compile(r"\{[^}]*\}")
_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.DOTALL)


class DraftError(ValueError):
    """The source is not an API description a draft can be made from."""


def todo(what: str) -> str:
    return f"{TODO} {what}"


def load_description(source: str, deadline: float = DOWNLOAD_DEADLINE,
                     user_agent: str = DRAFT_USER_AGENT, policy: GuardPolicy = PUBLIC_ONLY,
                     ) -> dict[str, Any]:
    """The description at `source`: a file, or an http(s) URL downloaded within `deadline`
    seconds as `user_agent` through the prober's network guard (`policy`; tests on loopback
    allow private addresses as the prober's do). It keeps the entry files' limits (`guard`)
    with a description's size and depth, and the shape of every field a draft reads, so that
    no description ends in a traceback. A user name or password in the URL is never sent nor
    shown."""
    if not source.strip():
        raise DraftError("no description named: give its file or its http(s) URL")
    shown = redact_userinfo(source)
    if _of_another_scheme(source):
        raise DraftError(f"{shown}: only http(s) addresses are downloaded: give the "
                         "description's http(s) URL, or its file's path")
    try:
        text = (download(source, deadline, user_agent, policy) if _is_url(source)
                else read_text(Path(source), MAX_DESCRIPTION_BYTES, setting=None))
        document = parse_description(text)
    except UnsafeEntryFile as exc:
        line = f"line {exc.line}: " if exc.line else ""
        raise DraftError(f"{shown}: {line}{exc} [{exc.rule}]") from None
    except OSError as exc:
        raise DraftError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    except DraftError:
        raise
    except ValueError as exc:  # the text's syntax, or an address urllib cannot split
        raise DraftError(f"{shown}: {' '.join(str(exc).split())}") from None
    if not _is_description(document):
        raise DraftError(f"{shown}: not an OpenAPI 3.x or Swagger 2.0 description")
    problem = shape_problem(document, DESCRIPTION_SHAPE)
    if problem:
        raise DraftError(f"{shown}: {problem}")
    return document


def _is_description(document: Any) -> bool:
    """OpenAPI 3.x or Swagger 2.0, by its version field (a number or a string)."""
    if not isinstance(document, dict):
        return False
    version = document.get("openapi")
    return ((isinstance(version, str | int | float) and str(version).startswith("3."))
            or document.get("swagger") == "2.0")


def _is_url(source: str) -> bool:
    return urlsplit(source).scheme in ("http", "https")


def _of_another_scheme(source: str) -> bool:
    """Whether `source` is an address of another kind than http(s) (`ftp://`, `file://`),
    which would be read as a file's name and told missing; not a file that exists."""
    try:
        scheme = urlsplit(source).scheme
    except ValueError:  # told where the source is read
        return False
    return ("://" in source and bool(scheme) and scheme not in ("http", "https")
            and not Path(source).exists())


def download(url: str, deadline: float = DOWNLOAD_DEADLINE,
             user_agent: str = DRAFT_USER_AGENT, policy: GuardPolicy = PUBLIC_ONLY) -> str:
    """The text at `url`, refused past `deadline` seconds in all (a server trickling bytes
    would hold the command for ever) and past the size a file may have, as a file is; every
    hop held to the prober's network guard."""
    return decode_within(asyncio.run(_download(url, deadline, user_agent, policy)),
                         MAX_DESCRIPTION_BYTES)


class BodyDecoder:
    """A body's bytes as its Content-Encoding gives them: as sent, or gzip or deflate (with
    the zlib header HTTP names, or raw, as some servers send it) decoded as they come. The
    limit is on the bytes decoded, so a small gzip bomb is refused as a large file is."""

    def __init__(self, url: str, coding: str) -> None:
        coding = coding.strip().lower()
        if coding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise DraftError(f"{url}: cannot download it: sent in the {coding!r} encoding, "
                             "where a draft reads gzip, deflate or none")
        self.url, self.coding, self.body = url, coding, bytearray()
        self._zlib: Any = None  # a zlib decompressor, made from the first bytes

    def feed(self, chunk: bytes, limit: int) -> bool:
        """Take `chunk`, keeping at most one byte past `limit` (enough to refuse the body);
        True when nothing more need be read."""
        if self.coding in ("", "identity"):
            self.body += chunk
            return len(self.body) > limit
        if self._zlib is None:
            if self.coding == "deflate":  # 0x78 opens the zlib header, or the stream is raw
                wbits = zlib.MAX_WBITS if chunk.startswith(b"\x78") else -zlib.MAX_WBITS
            else:
                wbits = zlib.MAX_WBITS | 16  # the gzip header and trailer
            self._zlib = zlib.decompressobj(wbits)
        try:
            self.body += self._zlib.decompress(chunk, limit + 1 - len(self.body))
        except zlib.error as exc:
            raise DraftError(f"{self.url}: cannot download it: its {self.coding} body is "
                             f"corrupt ({exc})") from None
        return len(self.body) > limit or self._zlib.eof

    def decoded(self, limit: int) -> bytes:
        """The body, refused when its compressed stream stopped short of its end."""
        whole = self._zlib is None or self._zlib.eof or len(self.body) > limit
        if self.coding not in ("", "identity") and not whole:
            raise DraftError(f"{self.url}: cannot download it: its {self.coding} body ends "
                             "before the end of its compressed stream")
        return bytes(self.body)


async def _download(url: str, deadline: float, user_agent: str, policy: GuardPolicy) -> bytes:
    """At most one byte more than a description may have: enough to refuse it. Identity is
    asked for; a body the server compresses anyway is decoded within the same limit. Errors
    name the URL without its user info."""
    shown = redact_userinfo(url)
    headers = {"User-Agent": user_agent, "Accept-Encoding": "identity"}
    resolver = GuardedResolver(policy)
    try:
        async with asyncio.timeout(deadline), aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=resolver), headers=headers,
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
        ) as session, await _get_guarded(session, URL(url), policy, shown) as response:
            if response.status >= 300:
                raise DraftError(f"{shown}: cannot download it: HTTP {response.status} "
                                 f"{response.reason or ''}".rstrip())
            body = BodyDecoder(shown, response.headers.get("Content-Encoding", ""))
            async for chunk in response.content.iter_chunked(1 << 16):
                if body.feed(chunk, MAX_DESCRIPTION_BYTES):
                    break
            return body.decoded(MAX_DESCRIPTION_BYTES)
    except DraftError:
        raise
    except TimeoutError:
        raise DraftError(f"{shown}: not downloaded within {deadline:g} s") from None
    except BlockedAddressError as exc:
        raise DraftError(f"{shown}: cannot download it: {redact_userinfo(str(exc))}") from None
    except (aiohttp.InvalidURL, ValueError):
        raise DraftError(f"{shown}: not a valid http(s) address") from None
    except aiohttp.ClientError as exc:
        reason = str(guard_refusal(exc) or exc)
        reason = redact_userinfo(" ".join(reason.split())) or type(exc).__name__
        raise DraftError(f"{shown}: cannot download it: {reason}") from None
    finally:
        await resolver.close()


async def _get_guarded(session: aiohttp.ClientSession, url: URL, policy: GuardPolicy,
                       shown: str) -> aiohttp.ClientResponse:
    """The answer at `url`, its redirects followed by hand as the prober follows them: no user
    info sent, each hop's address checked by the guard (the resolver checks the names), at
    most `MAX_REDIRECTS` hops. aiohttp's own following went to any address, a cloud metadata
    service or the machine itself included."""
    for _hop in range(MAX_REDIRECTS + 1):
        url = clean_url(url)
        policy.check_url(url)
        response = await session.get(url, allow_redirects=False)
        location = response.headers.get("Location")
        if response.status not in FOLLOWED_REDIRECTS or not location:
            return response
        response.release()
        url = url.join(URL(location))
    raise DraftError(f"{shown}: cannot download it: more than {MAX_REDIRECTS} redirects")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it gives a key twice (the YAML loader refuses it too):
    the JSON parser would keep the last one without a word."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"key {key!r} is given twice")
        mapping[key] = value
    return mapping


def parse_description(text: str) -> Any:
    """JSON (an object) or YAML, its depth and alias expansion checked before it is parsed;
    a syntax error is a ValueError saying which of the two the text was read as."""
    if text.lstrip().startswith("{"):
        check_json_depth(text, MAX_DESCRIPTION_DEPTH)
        try:
            return json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
        except ValueError as exc:  # a syntax error, a key given twice, a number too long
            raise ValueError(f"not valid JSON: {exc}") from None
    check_structure(text, MAX_DESCRIPTION_DEPTH, MAX_DESCRIPTION_NODES)
    try:
        return yaml.load(text, Loader=YAML_LOADER)
    except (yaml.YAMLError, *VALUE_ERRORS) as exc:
        raise ValueError(f"neither JSON nor YAML: {exc}") from None


@dataclass(frozen=True)
class Each:
    """A mapping whose every value, or a list whose every item, has the shape `item`;
    `extensions`: a mapping's `x-` keys are extensions, not items."""

    container: type[dict[Any, Any]] | type[list[Any]]
    item: Shape
    extensions: bool = False


SCALAR = "scalar"  # a string, number, boolean or date: never a collection a draft would print
# A dict: a mapping with these fields (others free).
Shape: TypeAlias = "str | Each | dict[str, Shape]"

_SERVERS = Each(list, {"url": SCALAR, "variables": Each(dict, {"default": SCALAR})})
_OPERATION = {"summary": SCALAR, "description": SCALAR, "operationId": SCALAR,
              "deprecated": SCALAR}
_SCHEME = {"type": SCALAR, "scheme": SCALAR, "in": SCALAR, "name": SCALAR}
# Every field a draft reads, and what it must be (absent or null is always allowed).
DESCRIPTION_SHAPE: Shape = {
    "openapi": SCALAR, "swagger": SCALAR,
    "info": {"title": SCALAR, "summary": SCALAR, "description": SCALAR,
             "x-providerName": SCALAR, "contact": {"name": SCALAR}},
    "externalDocs": {"url": SCALAR},
    "host": SCALAR, "basePath": SCALAR, "schemes": Each(list, SCALAR),
    "servers": _SERVERS,
    "paths": Each(dict, {"servers": _SERVERS, **{method: _OPERATION for method in _METHODS}},
                  extensions=True),
    "security": Each(list, {}),
    "components": {"securitySchemes": Each(dict, _SCHEME)},
    "securityDefinitions": Each(dict, _SCHEME),
}
_SCALARS = (str, int, float, date)  # bool is an int; a datetime a date
_KINDS = ((bool, "a boolean"), (str, "a string"), (int, "a number"), (float, "a number"),
          (date, "a date"), (dict, "a mapping"), (list, "a list"))
_PLAIN_KEY = re.compile(r"[A-Za-z_$][\w$-]*")


def _kind(value: Any) -> str:
    return next((name for kind, name in _KINDS if isinstance(value, kind)),
                f"a YAML {type(value).__name__}")


def _place(place: tuple[Any, ...]) -> str:
    """`paths["/pets"].get.summary`, `servers[0].url`: a field as a reader finds it."""
    text = ""
    for part in place:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            text += f".{part}" if text else str(part)
        else:
            text += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return text


def shape_problem(value: Any, shape: Shape, place: tuple[Any, ...] = ()) -> str | None:
    """The first field of `value` that is not of its `shape` (`info: expected a mapping,
    found a string`), else None: checked once, so the draft reads a field without a guard."""
    if value is None:
        return None
    if shape == SCALAR:
        expected, fits = "a string or number", isinstance(value, _SCALARS)
    else:
        container = shape.container if isinstance(shape, Each) else dict
        expected, fits = ("a list" if container is list else "a mapping"), isinstance(
            value, container)
    if not fits:
        return f"{_place(place) or 'the document'}: expected {expected}, found {_kind(value)}"
    if isinstance(shape, Each):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if shape.extensions and str(key).startswith("x-"):
                continue
            if problem := shape_problem(item, shape.item, (*place, key)):
                return problem
    elif isinstance(shape, dict):
        for key, field in shape.items():
            if problem := shape_problem(value.get(key), field, (*place, key)):
                return problem
    return None


_ENTRY_ID: TypeAdapter[str] = TypeAdapter(Slug)
MAX_ID_LENGTH: int = next(rule.max_length for rule in Slug.__metadata__
                          if getattr(rule, "max_length", None))


def slug(text: str) -> str:
    """An entry id made of `text`, kept to the id's length."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower())[:MAX_ID_LENGTH].strip("-") or "api"


def entry_id_problem(entry_id: str) -> str | None:
    """Why `entry_id` cannot be an entry's id (the contract's rule, which also keeps the
    file it names inside its category's folder), else None."""
    try:
        _ENTRY_ID.validate_python(entry_id)
    except ValidationError:
        return (f"--id {entry_id!r} is not an entry id: lower-case letters, digits and single "
                f"hyphens, at most {MAX_ID_LENGTH} characters")
    return None


def write_draft(text: str, entries_dir: Path, category: str, entry_id: str) -> Path:
    """Write the draft as `entries_dir/category/entry_id.yaml`, never over a file (nor
    through a symlink: the file is created new) and never outside the data folder."""
    target = entries_dir / category / f"{entry_id}.yaml"
    try:
        check_place(target, entries_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        check_place(target, entries_dir)  # the folder as made, a link found there followed
        with target.open("x", encoding="utf-8") as file:
            file.write(text)
    except UnsafeEntryFile as exc:
        raise DraftError(f"{target}: {exc} [{exc.rule}]") from None
    except FileExistsError:
        raise DraftError(f"{target} exists already: name another --id, or edit that file"
                         ) from None
    except OSError as exc:
        raise DraftError(f"{target}: cannot write it: {exc.strerror or exc}") from None
    return target


def _server_url(server: Mapping[str, Any], source: str) -> str:
    """A server's URL with its variables at their defaults, made absolute against `source`."""
    url = str(server.get("url", ""))
    for name, variable in (server.get("variables") or {}).items():
        url = url.replace("{" + str(name) + "}", str((variable or {}).get("default", "")))
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
        for _, item in _path_items(document):
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


def _path_items(document: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each path of the description with its item, in order; an `x-` key is an extension, not
    a path."""
    for path, item in (document.get("paths") or {}).items():
        if not str(path).startswith("x-"):
            yield str(path), item


def _operations(document: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in _path_items(document):
        for method in _METHODS:
            operation = (item or {}).get(method)
            if isinstance(operation, dict) and not operation.get("deprecated"):
                yield method.upper(), path, operation


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
    source = redact_userinfo(source)  # named in baseUrl, openapiUrl and sources
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
    # the day in UTC, as staleness is counted: a machine east of UTC is a day ahead at night
    day = today or datetime.now(UTC).date()
    entry["verified"] = todo(f"the day you checked every fact, e.g. {day}")
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
