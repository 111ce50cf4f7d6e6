"""The release served by real nginx (the shipped site config) and by `apidir serve`.

Both hosts must answer alike: JSON as `application/json; charset=utf-8`, CORS on `/api/` with
preflights answered, compression, ETag and Last-Modified with 304s, the caching and security
headers of `pipeline.release.hosting`, and a 404 with the JSON body of `api/404.json` for an
unknown category id.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pipeline.release.conditional import content_etag
from pipeline.release.hosting import (
    HEADER_CSP,
    IMMUTABLE_CACHE,
    LIVE_CACHE,
    NOT_FOUND_JSON,
    HeaderRule,
    headers_for,
    matching_headers,
    parse_headers_file,
    release_header_rules,
)
from pipeline.release.layout import RELEASE_INDEX
from pipeline.release.openapi import openapi_document
from pipeline.release.preview_server import IDLE_TIMEOUT
from pipeline.release.serve import HIDDEN, preview_started
from tests.conftest import REPO
from tests.postgres_server import free_port
from tests.site_release import (
    FORMER_ID,
    LONG_NAME_ID,
    SampleRelease,
    publish_sample_release,
)
from tests.static_host import (
    SITE_CONFIG,
    checked_nginx,
    run_nginx,
    run_serve,
    wait_for_port,
)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass(frozen=True)
class Host:
    name: str
    base_url: str
    release: Path

    def get(self, path: str, method: str = "GET", **headers: str) -> Answer:
        address = urlsplit(self.base_url)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        try:
            connection.request(method, path, headers={k.replace("_", "-"): v
                                                      for k, v in headers.items()})
            response = connection.getresponse()
            return Answer(response.status, response.headers, response.read())
        finally:
            connection.close()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleRelease:
    return publish_sample_release(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module", params=["nginx", "apidir-serve"])
def host(request: pytest.FixtureRequest, sample: SampleRelease,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    runner = run_nginx if request.param == "nginx" else run_serve
    with runner(sample.folder, tmp_path_factory.mktemp(request.param)) as base_url:
        yield Host(request.param, base_url, sample.folder)


@pytest.fixture(scope="module")
def hosts(sample: SampleRelease,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, Host]]:
    """nginx and `apidir serve` at once, for tests that ask both the same and compare."""
    with (run_nginx(sample.folder, tmp_path_factory.mktemp("nginx-pair")) as nginx,
          run_serve(sample.folder, tmp_path_factory.mktemp("serve-pair")) as serve):
        yield Host("nginx", nginx, sample.folder), Host("apidir-serve", serve, sample.folder)


def asset(host: Host, suffix: str) -> str:
    return "/" + next(p for p in (host.release / "assets").iterdir()
                      if p.suffix == suffix).relative_to(host.release).as_posix()


def test_the_site_config_passes_nginx_t_without_a_warning(tmp_path: Path) -> None:
    """Included next to Debian's mime.types, as the README says, `nginx -t` warned of a
    duplicate MIME type: text/html is in charset_types by default."""
    (tmp_path / "root").mkdir()
    checked_nginx(tmp_path / "root", tmp_path / "nginx", free_port())


JSON_PATHS = ["/api/apis.json", "/api/categories/ai.json", "/api/categories.json",
              "/api/openapi.json"]


@pytest.mark.parametrize("path", JSON_PATHS)
def test_json_is_served_as_utf8_json_to_any_origin(host: Host, path: str) -> None:
    answer = host.get(path)
    assert answer.status == 200
    assert answer.header("Content-Type") == "application/json; charset=utf-8"
    assert answer.header("Access-Control-Allow-Origin") == "*"
    assert answer.body == (host.release / path.lstrip("/")).read_bytes()
    json.loads(answer.body)


def test_pages_and_assets_have_their_types_and_no_cors(host: Host) -> None:
    page = host.get("/index.html")
    assert page.status == 200 and page.header("Content-Type") == "text/html; charset=utf-8"
    assert page.header("Access-Control-Allow-Origin") is None
    assert host.get("/").body == page.body
    entry = host.get("/apis/openai.html")
    assert entry.status == 200 and b"OpenAI API" in entry.body
    assert host.get(asset(host, ".css")).header("Content-Type") == "text/css; charset=utf-8"
    script = host.get(asset(host, ".js")).header("Content-Type")
    assert script in ("application/javascript; charset=utf-8", "text/javascript; charset=utf-8")


def test_the_feed_and_the_agent_files_have_their_types(host: Host) -> None:
    kinds = {"/changes.atom": ("application/atom+xml", b"<feed"),
             "/apis/openai.md": ("text/markdown", b"# OpenAI API"),
             "/llms.txt": ("text/plain", b"# "),
             "/robots.txt": ("text/plain", b"Sitemap:")}
    for path, (kind, start) in kinds.items():
        answer = host.get(path)
        assert answer.status == 200, (host.name, path)
        assert answer.header("Content-Type").split(";")[0] == kind, (host.name, path)
        assert start in answer.body, (host.name, path)
        assert answer.header("Cache-Control") == LIVE_CACHE, (host.name, path)


@pytest.mark.parametrize("path", ["/api/apis.json", "/index.html", "/apis/openai.html",
                                  "/api/categories/nosuch.json"])
def test_text_is_compressed_when_the_client_accepts_it(host: Host, path: str) -> None:
    plain = host.get(path)
    packed = host.get(path, Accept_Encoding="gzip")
    assert plain.header("Content-Encoding") is None
    assert packed.header("Content-Encoding") == "gzip"
    assert "Accept-Encoding" in (packed.header("Vary") or "")
    assert gzip.decompress(packed.body) == plain.body
    assert len(packed.body) < len(plain.body)


@pytest.mark.parametrize("path", ["/sitemap.xml", "/changes.atom", "/apis/openai.md",
                                  "/categories/ai.md", "/llms.txt"])
def test_both_hosts_type_and_compress_the_other_texts_alike(hosts: tuple[Host, Host],
                                                           path: str) -> None:
    """The sitemap was text/xml from nginx and application/xml from the preview, neither with
    a charset; nginx named no charset for the feed and compressed neither it, the sitemap nor
    the Markdown."""
    nginx, serve = (host.get(path, Accept_Encoding="gzip") for host in hosts)
    assert nginx.status == serve.status == 200
    for name in ("Content-Type", "Content-Encoding", "Vary", "Cache-Control"):
        assert nginx.header(name) == serve.header(name), (path, name)
    assert nginx.header("Content-Type").endswith("; charset=utf-8"), path
    assert nginx.header("Content-Encoding") == "gzip", path
    published = (hosts[0].release / path.lstrip("/")).read_bytes()
    assert gzip.decompress(nginx.body) == gzip.decompress(serve.body) == published


@pytest.mark.parametrize("path", ["/api/categories/nosuch.json", "/api/categories/AI.json",
                                  "/api/categories/", "/api/nothing-here",
                                  "/api/apis/no-such-api.json", "/api/no-such-page.md"])
def test_an_unknown_document_is_a_404_with_a_json_body(host: Host, path: str) -> None:
    answer = host.get(path)
    assert answer.status == 404
    assert answer.header("Content-Type") == "application/json; charset=utf-8"
    assert answer.header("Access-Control-Allow-Origin") == "*"
    assert answer.body == (host.release / NOT_FOUND_JSON).read_bytes()
    error = json.loads(answer.body)["error"]
    assert error["status"] == 404
    # It names every kind of document the release serves, each of which exists.
    for document in ("api/apis.json", "api/search.json", "api/categories.json"):
        assert (host.release / document).is_file()
    assert all(kind in error["message"] for kind in
               ("api/apis.json", "api/apis/{id}.json", "api/search.json",
                "api/categories/{categoryId}.json"))


@pytest.mark.parametrize("path", ["/no-such-page.html", "/apis/no-such-api.html", "/apis/",
                                  "/categories/", "/categories", "/assets/",
                                  "/apis/no-such-api.md", "/categories/no-such.md", "/_headers",
                                  "/_redirects"])
def test_a_missing_page_is_a_404_with_the_release_404_page(host: Host, path: str) -> None:
    """Folders without an index page had nginx's bare 403 (or a 301 to it), every missing
    page the preview's bare text, and a missing Markdown file or a host file nginx's bare
    page; all now answer as static hosts do, with `404.html`."""
    answer = host.get(path)
    assert answer.status == 404
    assert answer.header("Content-Type") == "text/html; charset=utf-8"
    assert answer.body == (host.release / "404.html").read_bytes()
    assert answer.header("Content-Security-Policy") == HEADER_CSP


@pytest.fixture(scope="module")
def json_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, Host]]:
    """A release published without its reader pages, served by nginx and `apidir serve`."""
    release = publish_sample_release(tmp_path_factory.mktemp("json-only"), pages=False).folder
    with (run_nginx(release, tmp_path_factory.mktemp("nginx-json-only")) as nginx,
          run_serve(release, tmp_path_factory.mktemp("serve-json-only")) as serve):
        yield Host("nginx", nginx, release), Host("apidir-serve", serve, release)


@pytest.mark.parametrize("path", ["/nope.html", "/", "/index.html", "/apis/", "/nope.md"])
def test_a_json_only_release_answers_a_missing_page_with_its_own_404_page(
        json_only: tuple[Host, Host], path: str) -> None:
    """A release without pages had no `404.html`, which both hosts name for a miss outside
    /api/: nginx answered its own page, the preview its bare text. Each now sends the
    release's own, whose links lead to the JSON the release holds."""
    release = json_only[0].release
    assert not (release / "index.html").exists()
    assert (release / "404.html").is_file()
    for host in json_only:
        answer = host.get(path)
        assert answer.status == 404, host.name
        assert answer.header("Content-Type") == "text/html; charset=utf-8", host.name
        assert answer.body == (release / "404.html").read_bytes(), host.name
        assert answer.header("Content-Security-Policy") == HEADER_CSP, host.name
        links = re.findall(r'href="([^"]+)"', answer.body.decode())
        assert links and all(host.get(link).status == 200 for link in links), (host.name, links)
        missed = host.get("/api/nope.json")
        assert missed.status == 404 and missed.body == (release / NOT_FOUND_JSON).read_bytes()


@pytest.mark.parametrize(("path", "document"), [
    ("/api/releases/2.0.0_20200101.1/apis.json", "/" + NOT_FOUND_JSON),
    ("/assets/missing.css", "/404.html"), ("/api/nope.json", "/" + NOT_FOUND_JSON)])
def test_a_miss_carries_the_headers_of_the_404_document(host: Host, path: str,
                                                        document: str) -> None:
    """The rules of a missing immutable path (a release not kept, an asset of no release) are
    not the answer's: the preview sent them, and a client kept the 404 for a year."""
    answer = host.get(path)
    assert answer.status == 404
    assert answer.body == (host.release / document.lstrip("/")).read_bytes()
    assert answer.header("Cache-Control") == LIVE_CACHE, host.name
    for name, value in headers_for(document).items():
        assert answer.header(name) == value, (host.name, path, name)
    if not document.startswith("/api/"):
        assert answer.header("Access-Control-Allow-Origin") is None, host.name


@pytest.mark.parametrize("path", ["/api/categories/nosuch.json", "/no-such-page.html"])
def test_both_hosts_tag_a_miss_with_its_404_document_alike(hosts: tuple[Host, Host],
                                                            path: str) -> None:
    """nginx names the ETag of the document it answers a miss with (weak when gzipped) and no
    Last-Modified; the preview named neither. Neither answers a condition on a miss."""
    for extra in ({}, {"Accept_Encoding": "gzip"}):
        nginx, serve = (host.get(path, **extra) for host in hosts)
        assert nginx.status == serve.status == 404
        for answer in (nginx, serve):
            assert answer.header("Last-Modified") is None, (path, extra)
            assert answer.header("ETag") is not None, (path, extra)
        assert (nginx.header("ETag").startswith("W/")
                == serve.header("ETag").startswith("W/")
                == bool(extra)), (path, extra)
        document = NOT_FOUND_JSON if path.startswith("/api/") else "404.html"
        expected = content_etag((hosts[1].release / document).read_bytes())
        assert serve.header("ETag").removeprefix("W/") == expected
        for host in hosts:
            tag = host.get(path, **extra).header("ETag")
            assert host.get(path, If_None_Match=tag, **extra).status == 404, host.name
            assert host.get(path, If_Match='"another-version"').status == 404, host.name


def test_the_host_s_own_error_text_is_not_labelled_json(host: Host) -> None:
    """A refusal under /api/ is the host's text (nginx's HTML, the preview's plain text), not
    a JSON document, whatever type the /api/ rules give a file there."""
    for method in ("DELETE", "POST"):
        refused = host.get("/api/apis.json", method=method)
        assert refused.status == 405
        kind = refused.header("Content-Type").split(";")[0]
        assert kind == ("text/plain" if host.name == "apidir-serve" else "text/html"), kind
        assert refused.header("Access-Control-Allow-Origin") == "*"


def release_paths(release: Path) -> list[str]:
    """The URL path of every file the release publishes (but the host files, which the hosts
    hide: `serve.HIDDEN`)."""
    return sorted("/" + p.relative_to(release).as_posix() for p in release.rglob("*")
                  if p.is_file() and p.relative_to(release).as_posix() not in HIDDEN)


def kept_dataset(release: Path) -> str:
    """The URL path of the kept copy of the live `apis.json`."""
    return "/" + json.loads((release / RELEASE_INDEX).read_text())["releases"][0]["path"]


def test_both_hosts_encode_every_published_file_alike(hosts: tuple[Host, Host]) -> None:
    """nginx gzips no text under 256 bytes (gzip_min_length) and names no Vary for it; the
    preview gzipped every text, the robots file and the favicon among them."""
    paths = release_paths(hosts[0].release)
    assert any((hosts[0].release / path.lstrip("/")).stat().st_size < 256 for path in paths)
    for path in paths:
        for extra in ({}, {"Accept_Encoding": "gzip"}):
            nginx, serve = (host.get(path, **extra) for host in hosts)
            assert nginx.status == serve.status == 200, (path, extra)
            for name in ("Content-Encoding", "Vary"):
                assert nginx.header(name) == serve.header(name), (path, extra, name)


def published_rules(release: Path) -> list[HeaderRule]:
    """The header rules of the release's own `_headers`."""
    return parse_headers_file((release / "_headers").read_text(encoding="utf-8"))


def test_the_preview_of_a_folder_without_headers_takes_the_rules_a_publish_writes(
        sample: SampleRelease) -> None:
    """`apidir serve` falls back on the rules of what the folder holds: its kept release
    folders and assets immutable, nothing else under them."""
    assert published_rules(sample.folder) == list(release_header_rules(sample.folder))


def test_every_published_file_has_one_caching_rule(sample: SampleRelease) -> None:
    """Immutable where a name never changes content, live elsewhere; and no path gets one
    header from two rules (Cloudflare Pages would join their values with a comma)."""
    paths = release_paths(sample.folder)
    rules = published_rules(sample.folder)
    assert any(path.startswith("/api/releases/") for path in paths)
    for path in [*paths, "/", "/api/categories/nosuch.json"]:
        names = [name.lower() for name, _ in matching_headers(path, rules)]
        assert len(names) == len(set(names)), path
        immutable = path.startswith(("/api/releases/", "/assets/"))
        assert headers_for(path, rules)["Cache-Control"] == (
            IMMUTABLE_CACHE if immutable else LIVE_CACHE), path


def test_cache_and_security_headers_follow_the_published_rules(host: Host) -> None:
    paths = release_paths(host.release)
    rules = published_rules(host.release)
    assert len(paths) > 200
    for path in ["/", *paths]:
        answer = host.get(path)
        assert answer.status == 200, path
        expected = headers_for(path, rules)
        for name, value in expected.items():
            assert answer.header(name) == value, (host.name, path, name)
    assert host.get(kept_dataset(host.release)).header("Cache-Control") == IMMUTABLE_CACHE
    assert host.get(asset(host, ".css")).header("Cache-Control") == IMMUTABLE_CACHE
    for live in ("/api/apis.json", "/api/releases.json", "/api/categories/ai.json",
                 "/apis/openai.html", "/"):
        assert host.get(live).header("Cache-Control") == LIVE_CACHE, live
    assert host.get("/index.html").header("Content-Security-Policy") == HEADER_CSP


def test_only_reads_are_allowed_and_host_files_are_not_served(host: Host) -> None:
    for method in ("POST", "PUT", "DELETE", "TRACE", "PATCH"):
        refused = host.get("/api/apis.json", method=method)
        assert refused.status == 405, method
        assert refused.header("Allow") == "GET, HEAD, OPTIONS", method
    assert host.get("/api/apis.json").header("Allow") is None
    assert host.get("/_headers").status == 404
    assert host.get("/_redirects").status == 404
    assert host.get("/_renamed.map").status == 404
    assert host.get("/../pyproject.toml").status in (400, 404)


@pytest.mark.parametrize("former, now", [
    (f"/api/apis/{FORMER_ID}.json", f"/api/apis/{LONG_NAME_ID}.json"),
    (f"/apis/{FORMER_ID}.html", f"/apis/{LONG_NAME_ID}.html"),
    (f"/apis/{FORMER_ID}.md", f"/apis/{LONG_NAME_ID}.md")])
def test_a_renamed_entry_s_former_addresses_redirect_to_its_own(host: Host, former: str,
                                                                 now: str) -> None:
    """Links to an entry's former id keep working: a permanent redirect to its new address,
    from the release's own host files (`_redirects`, `_renamed.map`)."""
    moved = host.get(former)
    assert moved.status == 301
    assert urlsplit(moved.header("Location")).path == now
    assert host.get(now).status == 200
    assert f"{former}  {now}  301" in (host.release / "_redirects").read_text()


PREFLIGHT = {"Origin": "http://127.0.0.2:8080", "Access-Control-Request-Method": "GET",
             "Access-Control-Request-Headers": "if-none-match,if-modified-since,range,if-range"}


@pytest.mark.parametrize("path", ["/api/apis.json", "/api/categories/ai.json",
                                  "/api/categories/nosuch.json", "kept"])
def test_a_cors_preflight_is_answered(host: Host, path: str) -> None:
    path = kept_dataset(host.release) if path == "kept" else path
    answer = host.get(path, method="OPTIONS", **PREFLIGHT)
    assert answer.status == 204 and answer.body == b""
    assert answer.header("Access-Control-Allow-Origin") == "*"
    methods = {m.strip() for m in answer.header("Access-Control-Allow-Methods").split(",")}
    assert methods == {"GET", "HEAD", "OPTIONS"}
    allowed = {h.strip().lower() for h in answer.header("Access-Control-Allow-Headers").split(",")}
    # every condition the hosts answer (304 and 412) and a range (206) may be sent from
    # another origin
    assert {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "range",
            "if-range"} <= allowed
    assert int(answer.header("Access-Control-Max-Age")) >= 600
    assert answer.header("Allow") == "GET, HEAD, OPTIONS"
    assert answer.header("X-Content-Type-Options") == "nosniff"


def test_pages_grant_no_cross_origin_reads(host: Host) -> None:
    answer = host.get("/index.html", method="OPTIONS", **PREFLIGHT)
    assert answer.status == 204
    assert answer.header("Access-Control-Allow-Origin") is None
    assert answer.header("Access-Control-Allow-Headers") is None


def test_documents_carry_validators_a_script_on_another_origin_may_read(host: Host) -> None:
    for path in ("/api/apis.json", "/api/categories/ai.json", "/index.html",
                 asset(host, ".js"), kept_dataset(host.release)):
        answer = host.get(path)
        etag = answer.header("ETag")
        assert etag and etag.startswith('"') and etag.endswith('"'), (path, etag)  # strong
        modified = (host.release / path.lstrip("/")).stat().st_mtime
        assert answer.header("Last-Modified") == formatdate(int(modified), usegmt=True), path
    # and a script resuming a download reads where its part lies and that ranges are taken
    for extra in ({}, {"Range": "bytes=0-99"}, {"Range": "bytes=0-9,20-29"}):
        answer = host.get("/api/apis.json", **extra)
        exposed = {h.strip().lower()
                   for h in answer.header("Access-Control-Expose-Headers").split(",")}
        assert exposed >= {"etag", "last-modified", "content-range", "accept-ranges"}, extra


@pytest.mark.parametrize("path", ["/api/apis.json", "/api/categories/finance.json",
                                  "/apis/openai.html", "kept"])
def test_if_none_match_answers_304_while_the_file_is_unchanged(host: Host, path: str) -> None:
    path = kept_dataset(host.release) if path == "kept" else path
    first = host.get(path)
    etag = first.header("ETag")
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = host.get(path, If_None_Match=sent)
        assert again.status == 304 and again.body == b"", (host.name, sent)
        assert again.header("ETag") == etag
        assert again.header("Cache-Control") == first.header("Cache-Control")
        assert again.header("Access-Control-Allow-Origin") == first.header(
            "Access-Control-Allow-Origin")
    changed = host.get(path, If_None_Match='"not-this-file"')
    assert changed.status == 200 and changed.body == first.body


def served_path(path: str, operation: dict, release: Path) -> str:
    """`path` of the OpenAPI document with each path parameter filled by a value the release
    holds: the first of its enum, else the first entry's id."""
    first_entry = json.loads((release / "api" / "search.json").read_bytes())["apis"][0]["id"]
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path":
            value = parameter["schema"].get("enum", [first_entry])[0]
            path = path.replace(f"{{{parameter['name']}}}", value)
    return path


def test_every_operation_declares_the_304_its_host_answers(host: Host) -> None:
    """Both hosts answer a conditional GET of every document 304, so every operation of the
    published description says so: the conditions, the 304 and the validators of its 200."""
    document = openapi_document()
    conditions = [{"$ref": f"#/components/parameters/{name}"}
                  for name in document["components"]["parameters"]]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            served = served_path(path, operation, host.release)
            first = host.get(served, method.upper())
            assert first.status == 200, served
            again = host.get(served, method.upper(), If_None_Match=first.header("ETag"))
            assert again.status == 304, (host.name, served)
            name = operation["operationId"]
            assert operation["responses"]["304"] == {
                "$ref": "#/components/responses/NotModified"}, name
            assert all(condition in operation["parameters"] for condition in conditions), name
            assert set(operation["responses"]["200"]["headers"]) == {
                "ETag", "Last-Modified", "Cache-Control"}, name


def test_every_operation_declares_the_ranges_its_host_answers(host: Host) -> None:
    """Both hosts answer a Range of every document 206 (416 past its end), so every operation
    of the published description says so: Range and If-Range, the 206 and the 416; it named
    neither."""
    document = openapi_document()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            name, served = operation["operationId"], served_path(path, operation,
                                                                  host.release)
            size = len(host.get(served, method.upper()).body)
            part = host.get(served, method.upper(), Range="bytes=0-99")
            assert part.status == 206, (host.name, served)
            assert part.header("Content-Range") == f"bytes 0-99/{size}", (host.name, served)
            past = host.get(served, method.upper(), Range=f"bytes={size}-")
            assert past.status == 416, (host.name, served)
            assert past.header("Content-Range") == f"bytes */{size}", (host.name, served)
            assert operation["responses"]["206"] == {
                "$ref": "#/components/responses/PartialContent"}, name
            assert operation["responses"]["416"] == {
                "$ref": "#/components/responses/RangeNotSatisfiable"}, name
            for parameter in ("Range", "IfRange"):
                assert {"$ref": f"#/components/parameters/{parameter}"} in operation[
                    "parameters"], name
    partial = document["components"]["responses"]["PartialContent"]
    assert set(partial["content"]) == {"application/json", "multipart/byteranges"}
    assert "Content-Range" in partial["headers"]


def test_a_compressed_answer_has_a_weak_etag_that_revalidates(host: Host) -> None:
    plain = host.get("/api/apis.json")
    packed = host.get("/api/apis.json", Accept_Encoding="gzip")
    assert packed.header("Content-Encoding") == "gzip"
    assert packed.header("ETag") == f"W/{plain.header('ETag')}"
    again = host.get("/api/apis.json", Accept_Encoding="gzip",
                     If_None_Match=packed.header("ETag"))
    assert again.status == 304 and again.body == b""


def test_both_hosts_name_the_file_s_strong_etag_on_a_304(hosts: tuple[Host, Host]) -> None:
    """nginx's gzip filter weakens the ETag of the 200s it compresses and looks at no 304, so
    its 304 to a gzip request names the file's strong tag; the preview named the weak one."""
    for host in hosts:
        packed = host.get("/api/apis.json", Accept_Encoding="gzip")
        assert packed.header("ETag").startswith("W/"), host.name
        for sent in (packed.header("ETag"), packed.header("ETag").removeprefix("W/")):
            again = host.get("/api/apis.json", Accept_Encoding="gzip", If_None_Match=sent)
            assert again.status == 304, (host.name, sent)
            assert again.header("ETag") == packed.header("ETag").removeprefix("W/"), (
                host.name, sent)


def test_a_304_carries_the_vary_of_its_200_and_a_412_none(hosts: tuple[Host, Host]) -> None:
    """RFC 9110 §15.4.5: a 304 carries the Vary its 200 would have carried. nginx named none
    (gzip_vary looks only at answers it may compress), and the preview named it on a 412 too,
    whose text is the host's own, negotiated by nothing, where nginx names none."""
    release = hosts[0].release
    paths = ["/", "/robots.txt", *sorted({path.rsplit(".", 1)[-1]: path
                                          for path in release_paths(release)}.values())]
    varied = 0
    for path in paths:
        for extra in ({}, {"Accept_Encoding": "gzip"}):
            for host in hosts:
                whole = host.get(path, **extra)
                again = host.get(path, If_None_Match=whole.header("ETag"), **extra)
                assert again.status == 304, (host.name, path)
                assert again.header("Vary") == whole.header("Vary"), (host.name, path, extra)
                varied += again.header("Vary") is not None
                refused = host.get(path, If_Match='"another-version"', **extra)
                assert refused.status == 412, (host.name, path)
                assert refused.header("Vary") is None, (host.name, path, extra)
    assert 0 < varied < len(paths) * 4


# A file's time before 1970, as an archive or a copy may leave it: nginx writes it with a minus.
BEFORE_1970 = -315_619_200  # 1960-01-01


def test_a_304_names_the_vary_of_its_200_whatever_the_file_s_time(tmp_path: Path) -> None:
    """nginx's ETag is `"<mtime hex>-<size hex>"`, and `"-<hex>-<size hex>"` for a file dated
    before 1970: the site config read the size from the first form alone, so a 304 of such a
    file named no Vary where its 200 named `Accept-Encoding` (and read the path up to a space)."""
    release = tmp_path / "public"
    (release / "api").mkdir(parents=True)
    for name, modified in (("apis.json", BEFORE_1970), ("a b.json", None)):
        document = release / "api" / name
        document.write_text(json.dumps({"apis": ["x" * 600]}) + "\n")
        if modified is not None:
            os.utime(document, (modified, modified))
    for runner in (run_nginx, run_serve):
        with runner(release, tmp_path / runner.__name__) as base_url:
            host = Host(runner.__name__, base_url, release)
            for path, extra in itertools.product(("/api/apis.json", "/api/a%20b.json"),
                                                 ({}, {"Accept_Encoding": "gzip"})):
                whole = host.get(path, **extra)
                again = host.get(path, If_None_Match=whole.header("ETag"), **extra)
                assert again.status == 304, (host.name, path, whole.header("ETag"))
                assert again.header("Vary") == whole.header("Vary") == "Accept-Encoding", (
                    host.name, path, whole.header("ETag"), extra)


def test_if_modified_since_answers_304_unless_the_file_is_newer(host: Host) -> None:
    path = "/api/categories/weather.json"
    modified = int((host.release / path.lstrip("/")).stat().st_mtime)
    for since, status in ((modified, 304), (modified + 3600, 304), (modified - 3600, 200)):
        answer = host.get(path, If_Modified_Since=formatdate(since, usegmt=True))
        assert answer.status == status, (host.name, since - modified)
    for junk in ("yesterday", "", "Mon, 99 Foo 2026 99:99:99 GMT"):
        assert host.get(path, If_Modified_Since=junk).status == 200, junk


def test_if_none_match_decides_when_both_are_sent(host: Host) -> None:
    """RFC 9110 §13.2.2: If-Modified-Since is ignored when If-None-Match is sent. A changed
    ETag is never answered 304, whatever the date says, by either host."""
    path = "/api/categories/maps.json"
    first = host.get(path)
    future = formatdate(int((host.release / path.lstrip("/")).stat().st_mtime) + 3600,
                        usegmt=True)
    stale = host.get(path, If_None_Match='"an-older-version"', If_Modified_Since=future)
    assert stale.status == 200 and stale.body == first.body
    current = host.get(path, If_None_Match=first.header("ETag"),
                       If_Modified_Since=formatdate(0, usegmt=True))
    # nginx answers 304 only when both conditions hold (its not_modified filter); a client
    # sends both from one response, so they agree in practice (README, "Serving a release").
    assert current.status == (304 if host.name == "apidir-serve" else 200)


def test_a_failed_precondition_is_answered_412(host: Host) -> None:
    """If-Match (strong comparison) and If-Unmodified-Since guard a client against taking a
    newer file for the one it holds; the preview ignored both and sent the file."""
    path = "/api/categories/finance.json"
    first = host.get(path)
    etag = first.header("ETag")
    modified = int((host.release / path.lstrip("/")).stat().st_mtime)
    failing = ({"If_Match": '"not-this-file"'}, {"If_Match": f"W/{etag}"},
               {"If_Unmodified_Since": formatdate(modified - 3600, usegmt=True)})
    for condition in failing:
        refused = host.get(path, **condition)
        assert refused.status == 412, (host.name, condition)
        assert refused.header("Content-Type").split(";")[0] in ("text/plain", "text/html")
        assert refused.header("Access-Control-Allow-Origin") == "*"
    holding = ({"If_Match": etag}, {"If_Match": f'"other", {etag}'}, {"If_Match": "*"},
               {"If_Match": etag, "Accept_Encoding": "gzip"},
               {"If_Unmodified_Since": formatdate(modified, usegmt=True)})
    for condition in holding:
        answer = host.get(path, **condition)
        assert answer.status == 200, (host.name, condition)
    assert host.get(path, If_Match=etag).body == first.body
    # A date the host cannot read is no condition held: nginx answers 412, and so does the
    # preview, which ignored it (as RFC 9110 §13.1.4 would have it) and sent the file.
    for junk in ("yesterday", "", "Mon, 99 Foo 2026 99:99:99 GMT"):
        assert host.get(path, If_Unmodified_Since=junk).status == 412, (host.name, junk)


# Range questions, each with the answer nginx gives: status, Content-Range, the bytes sent
# (None: the whole file; a list: the parts of a multipart body). `{etag}` and `{modified}` stand
# for the validators the host gave the file.
RANGE_QUESTIONS: list[tuple[str, dict[str, str], int, str | None, object]] = [
    ("/api/apis.json", {"Range": "bytes=0-99"}, 206, "bytes 0-99/{size}", slice(0, 100)),
    ("/api/apis.json", {"Range": "bytes=100-"}, 206, "bytes 100-{last}/{size}", slice(100, None)),
    ("/api/apis.json", {"Range": "bytes=-100"}, 206, "bytes {size-100}-{last}/{size}",
     slice(-100, None)),
    ("/api/apis.json", {"Range": "BYTES= 0 - 0 "}, 206, "bytes 0-0/{size}", slice(0, 1)),
    ("/api/apis.json", {"Range": "bytes=5-99999999999"}, 206, "bytes 5-{last}/{size}",
     slice(5, None)),
    ("/api/apis.json", {"Range": "bytes=-99999999999"}, 206, "bytes 0-{last}/{size}", None),
    ("/api/apis.json", {"Range": "bytes=99999999999-,0-1"}, 206, "bytes 0-1/{size}",
     slice(0, 2)),
    # several ranges: one multipart body, in the order asked, overlaps kept
    ("/api/apis.json", {"Range": "bytes=10-19,0-4"}, 206, None, [slice(10, 20), slice(0, 5)]),
    ("/api/apis.json", {"Range": "bytes=0-99,50-149"}, 206, None, [slice(0, 100),
                                                                   slice(50, 150)]),
    # more bytes than the file: the whole file
    ("/api/apis.json", {"Range": "bytes=0-,0-"}, 200, None, None),
    # not satisfiable, or no byte range nginx can read
    ("/api/apis.json", {"Range": "bytes=99999999999-"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=-0"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=5-2"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=0-1,"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=abc"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=99999999999999999999-"}, 416, "bytes */{size}", None),
    ("/api/apis.json", {"Range": "bytes=\u0661-"}, 416, "bytes */{size}", None),  # an Arabic 1
    # another unit, or no range at all: the whole file
    ("/api/apis.json", {"Range": "items=0-9"}, 200, None, None),
    ("/api/apis.json", {"Range": "bytes="}, 200, None, None),
    # If-Range: the range only for the file as the client knows it
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": "{etag}"}, 206, "bytes 0-99/{size}",
     slice(0, 100)),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": "{modified}"}, 206,
     "bytes 0-99/{size}", slice(0, 100)),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": "W/{etag}"}, 200, None, None),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": '"another-version"'}, 200, None,
     None),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": "Mon, 01 Jan 2024 00:00:00 GMT"},
     200, None, None),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Range": "yesterday"}, 200, None, None),
    # the conditions first: a current copy is 304, a failed one 412
    ("/api/apis.json", {"Range": "bytes=0-99", "If-None-Match": "{etag}"}, 304, None, None),
    ("/api/apis.json", {"Range": "bytes=0-99", "If-Match": '"another-version"'}, 412, None,
     None),
    # a gzipped answer is whole; a text too small to gzip is cut
    ("/api/apis.json", {"Range": "bytes=0-99", "Accept-Encoding": "gzip"}, 200, None, None),
    ("/api/apis.json", {"Range": "bytes=0-99", "Accept-Encoding": "gzip;q=0"}, 206,
     "bytes 0-99/{size}", slice(0, 100)),
    ("/robots.txt", {"Range": "bytes=0-6", "Accept-Encoding": "gzip"}, 206, "bytes 0-6/{size}",
     slice(0, 7)),
    ("/index.html", {"Range": "bytes=-10"}, 206, "bytes {size-10}-{last}/{size}",
     slice(-10, None)),
    # a missing document is a whole 404
    ("/api/categories/nosuch.json", {"Range": "bytes=0-9"}, 404, None, None),
]

BOUNDARY = re.compile(r"multipart/byteranges; boundary=(\S+)")


def range_answer(host: Host, path: str, headers: dict[str, str], method: str = "GET") -> Answer:
    """The answer to a range question, with `{etag}` and `{modified}` filled from the host."""
    first = host.get(path)
    known = {"{etag}": first.header("ETag") or "", "{modified}": first.header("Last-Modified")}
    filled = {}
    for name, value in headers.items():
        for mark, current in known.items():
            value = value.replace(mark, current or "")
        # http.client sends a value as Latin-1: its UTF-8 bytes go as they are
        filled[name.replace("-", "_")] = value.encode().decode("latin-1")
    return host.get(path, method, **filled)


def multipart_parts(answer: Answer) -> list[tuple[str, str, bytes]]:
    """The (Content-Type, Content-Range, bytes) of each part of a multipart/byteranges body,
    read by its boundary."""
    boundary = BOUNDARY.fullmatch(answer.header("Content-Type")).group(1).encode()
    chunks = answer.body.split(b"\r\n--" + boundary)
    assert chunks[0] == b"" and chunks[-1] == b"--\r\n", answer.body[:200]
    parts = []
    for chunk in chunks[1:-1]:
        head, data = chunk.removeprefix(b"\r\n").split(b"\r\n\r\n", 1)
        fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        parts.append((fields["Content-Type"], fields["Content-Range"], data))
    return parts


@pytest.mark.parametrize(("path", "headers", "status", "content_range", "cut"), RANGE_QUESTIONS)
def test_both_hosts_answer_a_range_alike(hosts: tuple[Host, Host], path: str,
                                         headers: dict[str, str], status: int,
                                         content_range: str | None, cut: object) -> None:
    """A consumer resuming a download of `api/apis.json` asks for the bytes it lacks; nginx
    answers 206 as RFC 9110 §14 says, and the preview, which sent the whole file, answers
    alike (a gzipped answer is whole on both, and `Accept-Ranges` is named where nginx names
    it)."""
    file = hosts[0].release / path.lstrip("/")
    published = file.read_bytes() if file.is_file() else b""
    size = len(published)
    expected_range = None if content_range is None else content_range.format_map(
        {"size": size, "last": size - 1, "size-100": size - 100, "size-10": size - 10})
    nginx, serve = (range_answer(host, path, headers) for host in hosts)
    for answer in (nginx, serve):
        assert answer.status == status, (answer, headers)
        assert answer.header("Content-Range") == expected_range
    for name in ("Content-Encoding", "Accept-Ranges", "Content-Range"):
        assert nginx.header(name) == serve.header(name), (headers, name)
    assert nginx.header("Vary") == serve.header("Vary"), headers
    if status in (304, 412, 416):
        return
    if isinstance(cut, list):
        kind = hosts[0].get(path).header("Content-Type")
        expected = [(kind, f"bytes {part.indices(size)[0]}-{part.indices(size)[1] - 1}/{size}",
                     published[part]) for part in cut]
        assert multipart_parts(nginx) == multipart_parts(serve) == expected
        assert nginx.header("Content-Length") == serve.header("Content-Length"), headers
        return
    assert nginx.header("Content-Type") == serve.header("Content-Type"), headers
    if nginx.header("Content-Encoding") == "gzip":  # (nginx sends it chunked)
        assert gzip.decompress(nginx.body) == gzip.decompress(serve.body) == published
        return
    assert nginx.header("Content-Length") == serve.header("Content-Length"), headers
    expected_body = published[cut] if isinstance(cut, slice) else (
        published if status == 200 else nginx.body)
    assert nginx.body == serve.body == expected_body, headers


def test_both_hosts_answer_a_range_of_head_alike(hosts: tuple[Host, Host]) -> None:
    """HEAD with a Range is the 206's head: its Content-Range and the length of the part."""
    for host in hosts:
        answer = range_answer(host, "/api/apis.json", {"Range": "bytes=0-99"}, "HEAD")
        assert answer.status == 206 and answer.body == b"", host.name
        assert answer.header("Content-Length") == "100", host.name
        assert answer.header("Content-Range").startswith("bytes 0-99/"), host.name
        assert answer.header("Accept-Ranges") is None, host.name


def test_a_whole_file_sent_as_it_is_takes_byte_ranges(host: Host) -> None:
    """`Accept-Ranges: bytes` on a 200 sent as it is, as nginx names it; not on a gzipped
    answer, whose bytes are not the file's, nor on a 404 or a 304."""
    assert host.get("/api/apis.json").header("Accept-Ranges") == "bytes"
    assert host.get("/api/apis.json", method="HEAD").header("Accept-Ranges") == "bytes"
    assert host.get(asset(host, ".css")).header("Accept-Ranges") == "bytes"
    packed = host.get("/api/apis.json", Accept_Encoding="gzip")
    assert packed.header("Content-Encoding") == "gzip" and packed.header("Accept-Ranges") is None
    assert host.get("/api/categories/nosuch.json").header("Accept-Ranges") is None
    etag = host.get("/api/apis.json").header("ETag")
    assert host.get("/api/apis.json", If_None_Match=etag).header("Accept-Ranges") is None


def test_head_is_answered_like_get_without_the_body(host: Host) -> None:
    for path, extra in (("/api/apis.json", {}), ("/index.html", {"Accept_Encoding": "gzip"}),
                        ("/api/categories/nosuch.json", {})):
        got, head = host.get(path, **extra), host.get(path, method="HEAD", **extra)
        assert head.status == got.status and head.body == b"", path
        for name in ("Content-Type", "ETag", "Last-Modified", "Cache-Control",
                     "Access-Control-Allow-Origin", "Content-Encoding", "Vary", "Accept-Ranges"):
            assert head.header(name) == got.header(name), (host.name, path, name)
    revalidated = host.get("/api/apis.json", method="HEAD",
                           If_None_Match=host.get("/api/apis.json").header("ETag"))
    assert revalidated.status == 304


def test_a_kept_copy_has_the_etag_of_the_live_document(host: Host) -> None:
    """`apidir serve` tags a file by the MD5 of its bytes (S3's ETag of a one-part upload);
    nginx by its time and size, which a hard-linked kept copy shares too."""
    live, kept = host.get("/api/apis.json"), host.get(kept_dataset(host.release))
    assert live.body == kept.body and live.header("ETag") == kept.header("ETag")
    if host.name == "apidir-serve":
        assert live.header("ETag") == content_etag(live.body)
    else:
        stat = (host.release / "api" / "apis.json").stat()
        assert live.header("ETag") == f'"{int(stat.st_mtime):x}-{stat.st_size:x}"'


# A condition sent on two lines, `{etag}` standing for the host's tag of api/apis.json; with
# the status nginx answers.
REPEATED_CONDITIONS: list[tuple[str, tuple[str, ...], int]] = [
    ("GET", ('If-None-Match: "other"', "If-None-Match: {etag}"), 400),
    ("HEAD", ("If-None-Match: {etag}", "If-None-Match: {etag}"), 400),
    ("GET", ('If-Match: "other"', "If-Match: {etag}"), 400),
    ("GET", ("If-Modified-Since: {now}", "If-Modified-Since: {now}"), 400),
    ("GET", ("If-Unmodified-Since: {now}", "If-Unmodified-Since: {now}"), 400),
    ("GET", ("Range: bytes=0-9", "If-Range: {etag}", "If-Range: {etag}"), 400),
    ("OPTIONS", ("If-None-Match: {etag}", "If-None-Match: {etag}"), 400),
    # Range is read by its first line
    ("GET", ("Range: bytes=0-9", "Range: bytes=20-29"), 206),
    ("GET", ("Range: junk", "Range: bytes=0-9"), 200),
]


@pytest.mark.parametrize(("method", "lines", "status"), REPEATED_CONDITIONS)
def test_both_hosts_answer_a_repeated_condition_alike(hosts: tuple[Host, Host], method: str,
                                                     lines: tuple[str, ...], status: int
                                                     ) -> None:
    """nginx refuses a request that sends a condition twice (400), where the preview joined
    two If-None-Match or If-Match lines into one list (304, 200), ignored two If-Modified-Since
    lines (200) and failed two If-Unmodified-Since lines (412)."""
    now = formatdate(usegmt=True)
    for host in hosts:
        etag = host.get("/api/apis.json").header("ETag")
        sent = [line.format(etag=etag, now=now) for line in lines]
        answered, head = raw_request(host, "/api/apis.json", method, *sent)
        assert answered == status, (host.name, lines, answered)
        if status == 400:
            assert "access-control-allow-origin: *" in head.lower(), host.name
            assert "nosniff" in head.lower(), host.name
        if status == 206:
            assert "content-range: bytes 0-9/" in head.lower(), host.name


def test_a_replaced_file_gets_a_new_etag_and_no_304(tmp_path: Path) -> None:
    release = tmp_path / "public"
    (release / "api").mkdir(parents=True)
    document = release / "api" / "apis.json"
    document.write_text('{"apis": [], "meta": {}}\n')
    with run_serve(release, tmp_path / "serve") as base_url:
        host = Host("apidir-serve", base_url, release)
        first = host.get("/api/apis.json")
        assert host.get("/api/apis.json", If_None_Match=first.header("ETag")).status == 304
        replacement = release / "api" / ".apis.json.new"
        replacement.write_text('{"apis": [1], "meta": {}}\n')  # same size, same time below
        modified = document.stat().st_mtime
        os.utime(replacement, (modified, modified))
        replacement.replace(document)
        again = host.get("/api/apis.json", If_None_Match=first.header("ETag"))
    assert again.status == 200 and again.body == document.read_bytes()
    assert again.header("ETag") == content_etag(document.read_bytes()) != first.header("ETag")


def test_the_published_openapi_document_holds_for_the_served_release(
    host: Host, tmp_path: Path
) -> None:
    """Schemathesis reads the served `api/openapi.json` and runs every check against the host."""
    schemathesis = Path(sys.executable).with_name("schemathesis")
    result = subprocess.run(
        [str(schemathesis), "run", f"{host.base_url}/api/openapi.json", "--url", host.base_url,
         "--checks", "all", "--mode", "all", "--max-examples", "50", "--seed", "20261121",
         "--workers", "1", "--generation-database", "none"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    operations = sum(len(path) for path in openapi_document()["paths"].values())
    assert f"Selected: {operations}/{operations}" in result.stdout
    assert f"Tested: {operations}" in result.stdout
    counts = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert counts and int(counts.group(2)) == int(counts.group(1)) > 10
    assert "No issues found" in result.stdout


def test_serve_stops_on_sigterm_while_it_answers(tmp_path: Path) -> None:
    """SIGTERM (a service manager stopping the preview) ends it in order, "stopped" and exit 0,
    also while it answers: an exception raised by a handler of the process could land in a
    callback of its loop, which logged it and served on."""
    release = tmp_path / "public"
    release.mkdir()
    (release / "index.html").write_text("<!doctype html>\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(release), "--host",
         "127.0.0.1", "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, process, tmp_path / "none.log")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(20):  # a keep-alive connection, busy while the signal comes
            connection.request("GET", "/index.html")
            connection.getresponse().read()
        process.terminate()
        with contextlib.suppress(OSError, http.client.HTTPException):
            for _ in range(200):
                connection.request("GET", "/index.html")
                connection.getresponse().read()
        output, _ = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, output
    assert output.strip().splitlines()[-1] == "stopped", output
    assert "Traceback" not in output


def test_serve_names_a_missing_release_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-published"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(missing)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert f"{missing}: no published release here" in result.stderr


ODD_SPELLINGS_OF_HIDDEN = ["/./_headers", "/api/../_headers", "/%5Fheaders", "/_headers/",
                           "/%2e/_redirects", "/api/%2e%2e/_redirects", "//_headers",
                           "/_redirects%2f"]


def raw_request(host: Host, target: str, method: str = "GET",
                *lines: str) -> tuple[int, str]:
    """A request sent as written (no client normalising it), with any header `lines`: the
    status and the head."""
    head = "".join(f"{line}\r\n" for line in ("Host: x", "Connection: close", *lines))
    head, _ = raw_answer(host, f"{method} {target} HTTP/1.1\r\n{head}\r\n".encode())
    return int(head.split(" ", 2)[1]), head


def raw_answer(host: Host, request: bytes) -> tuple[str, bytes]:
    """The head and the body of the answer to `request`, sent as it is, read until the host
    closes the connection."""
    address = urlsplit(host.base_url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


def test_odd_paths_never_error_and_host_files_stay_hidden(host: Host) -> None:
    hidden = (host.release / "_headers").read_text()
    for target in ODD_SPELLINGS_OF_HIDDEN:
        status, _ = raw_request(host, target)
        assert status in (400, 404), (host.name, target, status)
        assert hidden[:40] not in host.get(target).body.decode("latin-1"), target
    for target in ("/%00", "/index.html%00.json", "/api/%00/apis.json"):
        status, head = raw_request(host, target)
        assert status == 400, (host.name, target, status)
        assert "nosniff" in head.lower(), (host.name, target)  # error answers keep the headers
    for target in ("/api/categories/%0Aai.json", "/api/%0D%0Aapis.json", "/api/%F2%99.json"):
        answer = host.get(target)
        assert answer.status == 404, (host.name, target)
        assert answer.body == (host.release / NOT_FOUND_JSON).read_bytes(), (host.name, target)
        assert answer.header("X-Content-Type-Options") == "nosniff", (host.name, target)


def test_a_percent_that_escapes_nothing_is_refused_by_both(hosts: tuple[Host, Host]) -> None:
    """nginx refuses such a target (400) before it looks for a file; the preview said 404."""
    for target in ("/api/%ZZ", "/api/apis.json%", "/index.html%2", "/api/%zz/apis.json"):
        statuses = [raw_request(host, target)[0] for host in hosts]
        assert statuses == [400, 400], (target, statuses)
    for target in ("/api/%61pis.json", "/%69ndex.html"):  # a good escape is read as its byte
        assert [raw_request(host, target)[0] for host in hosts] == [200, 200], target


def test_every_refusal_carries_the_security_headers(host: Host) -> None:
    status, head = raw_request(host, "/api/apis.json", method="DELETE")
    assert status == 405
    assert "content-security-policy" in head.lower() and "nosniff" in head.lower()


# Names no file system takes: a name over 255 bytes, a path over 4096.
UNTAKEABLE_PATHS = ["/api/" + "a" * 300 + ".json", "/" + "a/" * 2100, "/" + "a" * 300]


def test_a_path_the_file_system_refuses_is_a_404(host: Host) -> None:
    """ENAMETOOLONG from the file system is a missing file, as for nginx, not a bare 500."""
    for target in UNTAKEABLE_PATHS:
        status, head = raw_request(host, target)
        assert status == 404, (host.name, target[:20], status)
        assert "nosniff" in head.lower(), (host.name, target[:20])
    answer = host.get(UNTAKEABLE_PATHS[0])
    assert answer.body == (host.release / NOT_FOUND_JSON).read_bytes()
    assert answer.header("Access-Control-Allow-Origin") == "*"


def test_a_symlink_loop_in_the_release_is_a_404_and_logs_no_traceback(tmp_path: Path) -> None:
    release = tmp_path / "public"
    (release / "api").mkdir(parents=True)
    (release / "index.html").write_text("<!doctype html>\n")
    (release / "self").symlink_to("self")
    (release / "api" / "loop.json").symlink_to("loop.json")
    with run_serve(release, tmp_path / "serve") as base_url:
        host = Host("apidir-serve", base_url, release)
        for target in ("/self", "/self/", "/api/loop.json", "/self/x.json"):
            answer = host.get(target)
            assert answer.status == 404, (target, answer.status)
            assert answer.header("X-Content-Type-Options") == "nosniff", target
            # No 404 document in this release: the host's own text, typed as text.
            assert answer.header("Content-Type") == "text/plain; charset=utf-8", target
        assert host.get("/api/loop.json").header("Access-Control-Allow-Origin") == "*"
    log = (tmp_path / "serve" / "serve.log").read_text()
    assert "Traceback" not in log and "Error" not in log, log


def test_a_file_found_but_not_readable_is_a_403_as_nginx_answers(tmp_path: Path) -> None:
    """nginx answers 403 for a file it may not open; the preview had said 404, as if the file
    were missing."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root reads any file; setpriv, which would drop that, is missing")
    release = tmp_path / "public"
    (release / "api").mkdir(parents=True)
    (release / "index.html").write_text("<!doctype html>\n")
    (release / "api" / "closed.json").write_text("{}\n")
    (release / "api" / "closed.json").chmod(0)
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
              if os.geteuid() == 0 else [])
    with run_serve(release, tmp_path / "serve", prefix) as base_url:
        host = Host("apidir-serve", base_url, release)
        closed = host.get("/api/closed.json")
        assert host.get("/index.html").status == 200
        assert host.get("/api/missing.json").status == 404
    assert closed.status == 403
    assert closed.header("Content-Type") == "text/plain; charset=utf-8"
    assert closed.header("X-Content-Type-Options") == "nosniff"
    assert closed.header("Access-Control-Allow-Origin") == "*"
    log = (tmp_path / "serve" / "serve.log").read_text()
    assert "Traceback" not in log, log


def test_headers_are_those_of_the_path_served(host: Host) -> None:
    """The path is decoded and normalised once, as nginx does, and that one path picks both
    the file and its header rules: an encoded slash does not borrow another folder's rules."""
    page = host.get("/api/..%2Findex.html")
    assert page.status == 200 and page.body == (host.release / "index.html").read_bytes()
    assert page.header("Content-Type") == "text/html; charset=utf-8", host.name
    assert page.header("Access-Control-Allow-Origin") is None, host.name
    assert page.header("Cache-Control") == LIVE_CACHE, host.name
    live = host.get("/assets/..%2Fapi/categories.json")
    assert live.status == 200
    assert live.body == (host.release / "api" / "categories.json").read_bytes()
    assert live.header("Cache-Control") == LIVE_CACHE, host.name
    assert live.header("Access-Control-Allow-Origin") == "*", host.name
    missing = host.get("/index.html%2F..%2Fapi/nosuch.json")
    assert missing.status == 404
    assert missing.body == (host.release / NOT_FOUND_JSON).read_bytes(), host.name


def test_a_request_in_absolute_form_is_served_as_its_path(host: Host) -> None:
    """RFC 9112 §3.2.2: a server MUST accept the absolute form of a request target."""
    for target, kind in (("http://x/index.html", "text/html"), ("http://x/", "text/html"),
                         ("http://x/api/apis.json?a=b", "application/json")):
        status, head = raw_request(host, target)
        assert status == 200, (host.name, target, status)
        assert f"content-type: {kind}" in head.lower(), (host.name, target)


def test_targets_that_name_no_path_carry_the_security_headers(sample: SampleRelease,
                                                             tmp_path: Path) -> None:
    with run_serve(sample.folder, tmp_path / "serve") as base_url:
        host = Host("apidir-serve", base_url, sample.folder)
        status, head = raw_request(host, "*", method="OPTIONS")
        assert status == 404
        assert "nosniff" in head.lower() and "content-security-policy" in head.lower()
        status, head = raw_request(host, "example.org:443", method="CONNECT")
        assert status == 405
        assert "nosniff" in head.lower() and "allow: get, head, options" in head.lower()
        status, head = raw_request(host, "http://x")  # absolute form, no path: the root
        assert status == 200 and "content-type: text/html" in head.lower()


def test_no_host_serves_a_file_through_a_symlink_in_the_release(tmp_path: Path) -> None:
    """A release holds no symlinks (a publish writes files and hard links); one placed in it
    by hand leads nowhere. nginx followed a link out of the release, and served the file it
    led to, a secret beside it or anything its user may read; the preview followed one that
    stayed inside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not of the release\n")
    release = tmp_path / "public"
    (release / "api").mkdir(parents=True)
    (release / "index.html").write_text("<!doctype html>\n")
    (release / "api" / "categories.json").write_text("{}\n")
    (release / "leak.txt").symlink_to(outside / "secret.txt")
    (release / "api" / "leak.json").symlink_to(outside / "secret.txt")
    (release / "linked").symlink_to(outside, target_is_directory=True)
    (release / "api" / "alias.json").symlink_to("categories.json")
    with (run_nginx(release, tmp_path / "nginx") as nginx,
          run_serve(release, tmp_path / "serve") as serve):
        for host in (Host("nginx", nginx, release), Host("apidir-serve", serve, release)):
            assert host.get("/api/categories.json").status == 200, host.name
            for target in ("/leak.txt", "/api/leak.json", "/linked/secret.txt",
                           "/api/alias.json", "/api/..%2flinked/secret.txt"):
                answer = host.get(target)
                assert answer.status == 404, (host.name, target, answer.status)
                assert b"not of the release" not in answer.body, (host.name, target)


def test_a_refusal_of_an_immutable_file_is_not_cached_for_a_year(hosts: tuple[Host, Host]
                                                                 ) -> None:
    """An asset or a kept document is cached for a year as immutable, but a refusal at its
    address (a range past its end, a failed or repeated condition, a refused method) is no
    version of it: both hosts sent the year with it, which a cache in front that keeps error
    answers would have served at that address instead of the file for a year."""
    refusals = ((412, "GET", ('If-Match: "x"',)),
                (400, "GET", ('If-Match: "x"', 'If-Match: "y"')), (405, "POST", ()))
    for host in hosts:
        # nginx finds a range past the end after its headers were added for the file, and its
        # 416 carries the file's Cache-Control: the preview's alone here.
        range_refused = ((416, "GET", ("Range: bytes=99999999-",)),)
        refusals_here = refusals + range_refused if host.name == "apidir-serve" else refusals
        for path in (asset(host, ".css"), kept_dataset(host.release)):
            assert host.get(path).header("Cache-Control") == IMMUTABLE_CACHE, (host.name, path)
            etag = host.get(path).header("ETag")
            assert host.get(path, If_None_Match=etag).header("Cache-Control") == IMMUTABLE_CACHE
            for status, method, lines in refusals_here:
                answered, head = raw_request(host, path, method, *lines)
                assert answered == status, (host.name, path, status, answered)
                assert f"cache-control: {LIVE_CACHE}\r\n" in head.lower() + "\r\n", (
                    host.name, path, status, head)


def header_names(head: str) -> list[str]:
    """The names of the header lines of an answer's `head`, lower-cased, in order."""
    return [line.split(":", 1)[0].lower() for line in head.split("\r\n")[1:]]


def test_a_range_past_the_end_carries_each_header_once(host: Host) -> None:
    """nginx finds a Range past the file's end after its headers were added for the file, and
    sent the 416 by its error path, which added them all once more: two
    Access-Control-Allow-Origin values, which a browser refuses."""
    for path in ("/api/apis.json", asset(host, ".css"), "/index.html", "/apis/openai.md"):
        for method in ("GET", "HEAD"):
            status, head = raw_request(host, path, method, "Range: bytes=99999999-")
            assert status == 416, (host.name, path, method)
            names = header_names(head)
            assert sorted(names) == sorted(set(names)), (host.name, path, method, head)
            assert "x-content-type-options" in names, (host.name, path, method)
            assert ("access-control-allow-origin" in names) == path.startswith("/api/"), (
                host.name, path)


# Requests aiohttp refuses before the preview's code runs, each with a mark an echo would show:
# a method token with bad characters, a second Host, more than 128 header lines, a malformed
# request line.
UNPARSABLE = [
    b"G<ECHO> /index.html HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /index.html HTTP/1.1\r\nHost: x\r\nHost: <ECHO>\r\n\r\n",
    b"GET /index.html HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-%d: <ECHO>\r\n" % line for line in range(130)) + b"Connection: close\r\n\r\n",
    b"GET  /<ECHO> HTTP/1.1 junk\r\nHost: x\r\n\r\n",
]


@pytest.mark.parametrize("request_sent", UNPARSABLE)
def test_a_request_aiohttp_cannot_parse_is_refused_as_the_host_refuses(
        hosts: tuple[Host, Host], request_sent: bytes) -> None:
    """aiohttp answered these with its bare 400: no security header, and a body quoting the
    request back. Each refusal now carries the site's headers and a short text of its own, as
    nginx's does (which takes more than 128 header lines)."""
    for host in hosts:
        head, body = raw_answer(host, request_sent)
        status = int(head.split(" ", 2)[1])
        assert status == 400 or (host.name, status) == ("nginx", 200), (host.name, head)
        if status != 400:
            continue
        for name, value in headers_for("/").items():
            assert f"\r\n{name.lower()}: {value.lower()}\r\n" in head.lower() + "\r\n", (
                host.name, name, head)
        assert b"ECHO" not in body, (host.name, body)
        if host.name == "apidir-serve":
            assert body == b"400 bad request\n"


@pytest.mark.parametrize(("version", "status"), [
    ("HTTP/2.0", 505), ("HTTP/3.0", 505), ("HTTP/9.9", 505), ("HTTP/10.0", 505), ("HTTP/0.9", 400)])
def test_a_request_line_of_another_http_version_is_refused_as_nginx_refuses_it(
        hosts: tuple[Host, Host], version: str, status: int) -> None:
    """The preview took `HTTP/2.0` and `HTTP/0.9` request lines for versions it speaks, and
    sent the file under `HTTP/2.0 200 OK`; nginx answers in HTTP/1.1 that it speaks neither."""
    for host in hosts:
        head, _ = raw_answer(host, f"GET /index.html {version}\r\nHost: x\r\n\r\n".encode())
        assert head.startswith(f"HTTP/1.1 {status} "), (host.name, version, head)
        assert "\r\nx-content-type-options: nosniff" in head.lower(), (host.name, version)
        assert "\r\nconnection: close" in head.lower(), (host.name, version)


def test_the_preview_bounds_idle_connections_by_the_site_config() -> None:
    """aiohttp keeps an idle connection for 3,630 s; the preview closes it, and one whose
    request head is still arriving, as nginx does, after the shorter of the site config's
    `client_header_timeout` and `keepalive_timeout`."""
    config = SITE_CONFIG.read_text()
    bounds = [float(re.search(rf"(?m)^\s*{name}\s+(\d+)s;", config).group(1))
              for name in ("client_header_timeout", "keepalive_timeout")]
    assert min(bounds) == IDLE_TIMEOUT


async def closed_by_the_server(port: int, sent: bytes) -> bytes:
    """What the preview sends on a connection that sends `sent` and then nothing, until the
    preview closes it (a test timeout, where it never does)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(sent)
        return await asyncio.wait_for(reader.read(), timeout=60)
    finally:
        writer.close()


def test_the_preview_closes_a_connection_left_idle(tmp_path: Path) -> None:
    """A client that connects and says nothing, stops halfway through a request's head, or
    stays after its answer is closed by the preview, not held for aiohttp's 3,630 s."""
    (tmp_path / "index.html").write_text("<!doctype html>\n")

    async def scenario() -> list[bytes]:
        runner = await preview_started(tmp_path, "127.0.0.1", 0, idle_timeout=0.2)
        try:
            port = runner.addresses[0][1]
            return list(await asyncio.gather(*(closed_by_the_server(port, sent) for sent in (
                b"", b"GET /index.html HTTP/1.1\r\nHo",
                b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n"))))
        finally:
            await runner.cleanup()

    silent, halfway, answered = asyncio.run(scenario())
    assert silent == halfway == b""
    assert answered.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answered.endswith(b"<!doctype html>\n")
