"""The release served by real nginx (the shipped site config) and by `apidir serve`.

Both hosts must answer alike: JSON as `application/json; charset=utf-8`, CORS on `/api/`,
compression, the caching and security headers of `pipeline.release.hosting`, and a 404 with the
JSON body of `api/404.json` for an unknown category id.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pipeline.release.hosting import (
    ASSET_CACHE,
    DOCUMENT_CACHE,
    HEADER_CSP,
    NOT_FOUND_JSON,
    headers_for,
)
from pipeline.release.openapi import openapi_document
from tests.site_release import SampleRelease, publish_sample_release
from tests.static_host import run_nginx, run_serve


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


def asset(host: Host, suffix: str) -> str:
    return "/" + next(p for p in (host.release / "assets").iterdir()
                      if p.suffix == suffix).relative_to(host.release).as_posix()


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


@pytest.mark.parametrize("path", ["/api/categories/nosuch.json", "/api/categories/AI.json",
                                  "/api/categories/", "/api/nothing-here"])
def test_an_unknown_category_is_a_404_with_a_json_body(host: Host, path: str) -> None:
    answer = host.get(path)
    assert answer.status == 404
    assert answer.header("Content-Type") == "application/json; charset=utf-8"
    assert answer.header("Access-Control-Allow-Origin") == "*"
    assert answer.body == (host.release / NOT_FOUND_JSON).read_bytes()
    assert json.loads(answer.body)["error"]["status"] == 404


def test_cache_and_security_headers_follow_the_published_rules(host: Host) -> None:
    paths = ["/", "/index.html", "/categories/ai.html", "/apis/openai.html",
             *JSON_PATHS, asset(host, ".css"), asset(host, ".js")]
    for path in paths:
        answer = host.get(path)
        assert answer.status == 200, path
        expected = headers_for(path)
        for name, value in expected.items():
            assert answer.header(name) == value, (host.name, path, name)
    assert headers_for(asset(host, ".css"))["Cache-Control"] == ASSET_CACHE
    assert headers_for("/apis/openai.html")["Cache-Control"] == DOCUMENT_CACHE
    assert host.get("/index.html").header("Content-Security-Policy") == HEADER_CSP


def test_only_reads_are_allowed_and_host_files_are_not_served(host: Host) -> None:
    for method in ("POST", "PUT", "DELETE", "TRACE", "OPTIONS"):
        refused = host.get("/api/apis.json", method=method)
        assert refused.status == 405, method
        assert refused.header("Allow") in ("GET, HEAD", "GET,HEAD"), method
    assert host.get("/api/apis.json").header("Allow") is None
    assert host.get("/api/apis.json", method="HEAD").status == 200
    assert host.get("/_headers").status == 404
    assert host.get("/_redirects").status == 404
    assert host.get("/../pyproject.toml").status in (400, 404)


def test_nginx_revalidates_by_etag(sample: SampleRelease, tmp_path: Path) -> None:
    with run_nginx(sample.folder, tmp_path / "nginx") as base_url:
        host = Host("nginx", base_url, sample.folder)
        first = host.get("/api/apis.json")
        assert first.header("ETag") and first.header("Last-Modified")
        again = host.get("/api/apis.json", If_None_Match=first.header("ETag"))
    assert again.status == 304 and again.body == b""


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


def raw_request(host: Host, target: str, method: str = "GET") -> tuple[int, str]:
    """A request line sent as written (no client normalising it): the status and the head."""
    address = urlsplit(host.base_url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                     .encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    return int(head.split(" ", 2)[1]), head


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


def test_every_refusal_carries_the_security_headers(host: Host) -> None:
    status, head = raw_request(host, "/api/apis.json", method="DELETE")
    assert status == 405
    assert "content-security-policy" in head.lower() and "nosniff" in head.lower()
