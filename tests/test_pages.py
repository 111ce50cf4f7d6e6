"""Reader pages: rendered with each release from its documents, escaped, self-contained, checked."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from sqlmodel import Session

import pipeline.release.pages as pages
from pipeline.catalogue.entries import load_categories
from pipeline.contract import CATEGORY_IDS, ErrorBody
from pipeline.release.hosting import HEADERS_FILE, NOT_FOUND_JSON, REDIRECTS_FILE, headers_for
from pipeline.release.layout import FULL_DATASET
from pipeline.release.pages import (
    NO_AUTH_HEADER,
    PageError,
    category_page,
    check_pages,
    entry_page,
    free_quota_text,
    share_text,
)
from pipeline.release.publish import publish_release
from pipeline.release.validate import validate_release
from pipeline.store.tables import make_engine
from tests.conftest import REPO
from tests.site_release import (
    HOSTILE_DESCRIPTION,
    HOSTILE_NAME,
    LIVE_ID,
    NOW,
    ONLINE_ID,
    UNREACHABLE_ID,
    SampleRelease,
    publish_sample_release,
)

CATEGORIES = load_categories(REPO / "data" / "categories.yaml")


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleRelease:
    return publish_sample_release(tmp_path_factory.mktemp("site"))


def page(sample: SampleRelease, path: str) -> str:
    return (sample.folder / path).read_text(encoding="utf-8")


class Elements(HTMLParser):
    """Text by element id (tags count as spaces), and every tag with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.handle_data(" ")  # tags separate words, as a browser shows cells and items
        if tag not in pages.VOID_ELEMENTS:
            self._open.append(dict(attrs).get("id"))
            if self._open[-1]:
                self.text.setdefault(self._open[-1], "")

    def handle_endtag(self, tag: str) -> None:
        self._open.pop()
        self.handle_data(" ")

    def handle_data(self, data: str) -> None:
        for element in self._open:
            if element:
                self.text[element] += data

    def by_id(self, element: str) -> str:
        return " ".join(self.text[element].split())


def test_every_entry_and_category_has_a_page(sample: SampleRelease) -> None:
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    index = Elements(page(sample, "index.html"))
    links = {attrs.get("href") for tag, attrs in index.tags if tag == "a"}
    for api in apis:
        assert (sample.folder / entry_page(api["id"])).is_file()
        assert entry_page(api["id"]) in links
    for category in CATEGORY_IDS:
        assert (sample.folder / category_page(category)).is_file()
        assert category_page(category) in links
    cards = [attrs for tag, attrs in index.tags if tag == "li" and "data-category" in attrs]
    assert sorted(card["data-id"] for card in cards) == sorted(api["id"] for api in apis)
    security = Elements(page(sample, category_page("security")))
    members = [a["data-id"] for t, a in security.tags if t == "li" and "data-category" in a]
    assert sorted(members) == sorted(a["id"] for a in apis if a["category"] == "security")


def test_index_cards_are_sorted_by_builder_score_and_carry_search_text(
    sample: SampleRelease,
) -> None:
    index = Elements(page(sample, "index.html"))
    cards = [attrs for tag, attrs in index.tags if tag == "li" and "data-category" in attrs]
    scores = [float(card["data-score"]) for card in cards]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1
    openai = next(card for card in cards if card["data-id"] == ONLINE_ID)
    for word in ("openai api", "openai", "embeddings", "hosted gpt models"):
        assert word in openai["data-search"]


def test_entry_page_presents_every_item(sample: SampleRelease) -> None:
    api = next(a for a in json.loads(page(sample, FULL_DATASET))["apis"] if a["id"] == ONLINE_ID)
    html = Elements(page(sample, entry_page(ONLINE_ID)))
    assert html.by_id("base-url") == api["baseUrl"]
    assert "Bearer token" in html.by_id("auth-type")
    assert api["authExample"] in html.by_id("auth-header")
    assert html.by_id("rate-limit") == api["rateLimit"]
    assert html.by_id("pricing-model").startswith(api["pricing"]["model"])
    quota = api["pricing"]["freeQuota"]
    assert html.by_id("free-quota") == (quota["note"] if quota else "none stated")
    assert html.by_id("docs-url") == api["docsUrl"]
    assert html.by_id("status") == "Online — HTTP 401: path returned an error or may require " \
                                   "auth; response time 312 ms."
    assert html.by_id("checked-at") == "2026-11-21 02:59 UTC"
    score = api["builderScore"]
    assert html.by_id("builder-score") == f"{score['grade']} {score['percent']}% builder-friendly"
    subscores = html.by_id("subscores")
    for part in ("pricing", "latency", "depth"):
        assert f"{part.title()} {score[part]}" in subscores
        for reason in score["reasons"][part]:
            assert reason in subscores
    uptime = api["uptime"]
    assert html.by_id("uptime") == (
        f"Last 24 hours {share_text(uptime['last1d'])} Last 7 days {share_text(uptime['last7d'])} "
        f"Last 30 days {share_text(uptime['last30d'])}"
    )
    for endpoint in api["endpoints"]:
        assert f"{endpoint['method']} {endpoint['path']}" in html.by_id("endpoints")
    assert html.by_id("sample-request") == api["sampleRequest"].strip()
    assert json.loads(html.text["sample-response"]) == json.loads(api["sampleResponse"])
    buttons = [a for t, a in html.tags if t == "button" and "data-copy" in a]
    assert {b["data-copy"] for b in buttons} == {"sample-request", "sample-response"}


def test_status_has_its_three_forms(sample: SampleRelease) -> None:
    live = Elements(page(sample, entry_page(LIVE_ID)))
    assert live.by_id("status") == "Live — HTTP 200, response time 84 ms."
    down = Elements(page(sample, entry_page(UNREACHABLE_ID)))
    assert down.by_id("status") == "Unreachable — no response."
    for html in (live, down):
        assert html.by_id("checked-at") == "2026-11-21 02:59 UTC"
    unchecked = Elements(page(sample, entry_page("openweathermap")))
    assert unchecked.by_id("status").startswith("Not checked yet")


def test_no_auth_shows_a_comment_as_its_header(sample: SampleRelease) -> None:
    html = Elements(page(sample, entry_page(UNREACHABLE_ID)))
    assert html.by_id("auth-header") == NO_AUTH_HEADER == "# No auth required"


def test_html_in_entries_shows_as_text(sample: SampleRelease) -> None:
    raw = page(sample, entry_page(UNREACHABLE_ID))
    assert "<script>alert" not in raw and "<img src=x" not in raw and "<h1>injected" not in raw
    html = Elements(raw)
    assert [t for t, _ in html.tags].count("script") == 1  # only the page's own script
    assert [t for t, _ in html.tags].count("img") == 0
    assert HOSTILE_NAME in html.by_id("main")
    assert HOSTILE_DESCRIPTION in html.by_id("main")
    index = page(sample, "index.html")
    assert "<script>alert" not in index and "&lt;script&gt;alert(&#34;pwned&#34;)" in index


def test_pages_load_nothing_from_elsewhere_and_state_a_strict_policy(
    sample: SampleRelease,
) -> None:
    for path in sorted(sample.folder.rglob("*.html")):
        html = Elements(path.read_text(encoding="utf-8"))
        for tag, attrs in html.tags:
            for name in ("src", "href"):
                value = attrs.get(name) or ""
                if tag != "a":
                    assert not re.match(r"^(https?:)?//", value), (path, tag, value)
            assert "style" not in attrs, (path, tag)  # no inline style (CSP style-src 'self')
            assert not any(name.startswith("on") for name in attrs), (path, tag)
        scripts = [attrs for tag, attrs in html.tags if tag == "script"]
        assert all(attrs.get("src", "").startswith(("assets/", "../assets/")) for attrs in scripts)
        policy = next(a["content"] for t, a in html.tags if a.get("http-equiv") ==
                      "Content-Security-Policy")
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe" not in policy
    for asset in (sample.folder / "assets").iterdir():
        text = asset.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert not re.search(r"https?://", text), asset


def test_links_are_relative_so_the_release_works_from_any_folder(sample: SampleRelease) -> None:
    for path in sorted(sample.folder.rglob("*.html")):
        html = Elements(path.read_text(encoding="utf-8"))
        for _tag, attrs in html.tags:
            value = attrs.get("href") or attrs.get("src") or ""
            if value and not value.startswith(("http://", "https://", "#")):
                assert not value.startswith("/"), (path, value)
                assert (path.parent / value.split("?")[0]).resolve().is_file(), (path, value)


def test_host_files_ship_with_the_release(sample: SampleRelease) -> None:
    body = json.loads(page(sample, NOT_FOUND_JSON))
    ErrorBody.model_validate(body)  # the 404 response the OpenAPI document declares
    assert body["error"]["status"] == 404 and body["error"]["categoryIds"] == list(CATEGORY_IDS)
    headers = page(sample, HEADERS_FILE)
    assert "/api/*\n  Access-Control-Allow-Origin: *\n" in headers
    assert "/api/*  /api/404.json  404" in page(sample, REDIRECTS_FILE)
    assert headers_for("/api/apis.json")["Content-Type"] == "application/json; charset=utf-8"


def test_validation_still_checks_the_json_only(sample: SampleRelease) -> None:
    assert validate_release(sample.folder, CATEGORIES) == []


def test_the_page_check_finds_broken_links_and_tags() -> None:
    files = {
        "index.html": b'<main><a href="apis/x.html">x</a><p><b>bold</p></main>',
        "apis/y.html": b'<a href="../index.html">home</a><a href="https://x.test/">out</a>',
    }
    problems = check_pages(files)
    assert any("index.html: link to apis/x.html leads to no file" in p for p in problems)
    assert any("index.html: line 1: </p> closes <b>" in p for p in problems)
    assert not any(p.startswith("apis/y.html") for p in problems)


def test_a_malformed_page_fails_the_publish_and_keeps_the_live_release(
    sample: SampleRelease, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "public"
    live = {p.relative_to(sample.folder): p.read_bytes() for p in sample.folder.rglob("*")
            if p.is_file()}
    for relative, data in live.items():
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        (out / relative).write_bytes(data)
    real_render = pages.render_pages

    def render_with_a_dead_link(*args, **kwargs):
        rendered = real_render(*args, **kwargs)
        rendered["index.html"] = rendered["index.html"].replace(
            b"</main>", b'<a href="apis/missing.html">gone</a></main>'
        )
        return rendered

    monkeypatch.setattr(pages, "render_pages", render_with_a_dead_link)
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with Session(engine) as session, pytest.raises(PageError, match=r"apis/missing\.html"):
        publish_release(session, out, "https://directory.test", CATEGORIES, NOW)
    engine.dispose()
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == live


def test_free_quota_wording() -> None:
    assert free_quota_text({"amount": 1000, "unit": "requests", "period": "day"}) == \
        "1,000 requests/day"
    assert free_quota_text({"amount": None, "period": "month", "note": "10 GB storage"}) == \
        "10 GB storage"
    assert free_quota_text(None) == "none stated"
    assert share_text(0.995) == "99.5%" and share_text(1.0) == "100%" and share_text(None) == \
        "no probes"
