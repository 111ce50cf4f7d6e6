"""Reader pages: rendered with each release from its documents, escaped, self-contained, checked."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from datetime import date, timedelta
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import pytest
from markupsafe import Markup
from pydantic import BaseModel
from sqlmodel import Session

import pipeline.release.entry_site as entry_site
import pipeline.release.pages as pages
from pipeline.catalogue.entries import load_categories
from pipeline.contract import CATEGORY_IDS, APIEntry, ErrorBody, Pricing, Provenance
from pipeline.judging.day_figures import DayFigures, SentDay, sent_days
from pipeline.release.files import dataset_lines
from pipeline.release.hosting import HEADERS_FILE, NOT_FOUND_JSON, REDIRECTS_FILE, headers_for
from pipeline.release.layout import (
    CHANGES_FEED,
    FULL_DATASET,
    LLMS_TXT,
    NOT_FOUND_PAGE,
    ROBOTS,
    SEARCH_INDEX,
    SITEMAP,
    category_file,
    category_markdown,
    entry_document,
    entry_markdown,
)
from pipeline.release.pages import (
    AUTH_LABELS,
    NO_AUTH_HEADER,
    NO_QUOTA_WORDS,
    PageError,
    category_page,
    cents_text,
    check_pages,
    entry_page,
    free_quota_text,
    grade_basis,
    pricing_facts,
    pricing_text,
    share_text,
    uptime_basis_text,
)
from pipeline.release.publish import publish_release
from pipeline.release.validate import validate_release
from pipeline.store.tables import make_engine
from tests.conftest import REPO, ingested_session, make_entry
from tests.site_release import (
    BARE_ID,
    BASE_URL,
    DEPRECATED_ID,
    DEPRECATION_NOTE,
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


def cards_of(html: Elements) -> list[dict[str, str | None]]:
    return [attrs for tag, attrs in html.tags if tag == "li" and "data-category" in attrs]


SECTIONING = frozenset(("body", "main", "section", "article", "nav", "aside"))
TERMS = frozenset(("dt", "th", "caption"))


class Outline(HTMLParser):
    """A page's title, its headings and terms (dt, th, caption) by the section they sit in,
    the names of its labelled sections, the links of its site header, and every element's
    tooltip (`title` attribute) with the element's own text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.headings: list[tuple[int, str, int]] = []  # (level, text, section)
        self.terms: list[tuple[str, int]] = []
        self.named_sections: list[tuple[str, int]] = []  # (aria-label, section)
        self.header_links: list[str] = []
        self.tooltips: list[tuple[str, str]] = []  # (title attribute, the element's text)
        self._open: list[dict] = []
        self._sections = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in pages.VOID_ELEMENTS:
            return
        named = dict(attrs)
        section = self._open[-1]["section"] if self._open else 0
        if tag in SECTIONING:
            self._sections += 1
            section = self._sections
            if named.get("aria-label"):
                self.named_sections.append((named["aria-label"], section))
        in_header = (tag == "header" and "site" in (named.get("class") or "").split()) or any(
            e["in_header"] for e in self._open[-1:])
        self._open.append({"tag": tag, "text": "", "section": section, "title": named.get("title"),
                           "in_header": in_header})

    def handle_endtag(self, tag: str) -> None:
        element = self._open.pop()
        text = " ".join(element["text"].split())
        if tag == "title" and not any(e["tag"] == "svg" for e in self._open):
            self.title = text
        elif re.fullmatch(r"h[1-6]", tag):
            self.headings.append((int(tag[1]), text, element["section"]))
        elif tag in TERMS:
            self.terms.append((text, element["section"]))
        elif tag == "a" and element["in_header"]:
            self.header_links.append(text)
        if element["title"] is not None:
            self.tooltips.append((element["title"], text))

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element["text"] += data


def test_no_page_says_a_title_twice(sample: SampleRelease) -> None:
    """One h1 per page, said by no other heading nor by the site's header; no two headings of
    one level alike in a section; no heading that repeats a term of its section or the name of
    its section; heading levels that never skip; no tooltip that repeats its element's text;
    and a title of its own for every page."""
    titles: dict[str, str] = {}
    for path in sorted(sample.folder.rglob("*.html")):
        where = str(path.relative_to(sample.folder))
        outline = Outline(path.read_text(encoding="utf-8"))
        said = [(level, text.casefold(), section) for level, text, section in outline.headings]
        h1 = [text for level, text, _ in said if level == 1]
        assert len(h1) == 1, (where, h1)
        assert [text for _, text, _ in said].count(h1[0]) == 1, (where, h1)
        assert h1[0] not in {link.casefold() for link in outline.header_links}, where
        assert len(set(said)) == len(said), (where, sorted(said))
        terms = {(text.casefold(), section) for text, section in outline.terms}
        names = {(name.casefold(), section) for name, section in outline.named_sections}
        for _, text, section in said:
            assert (text, section) not in terms | names, (where, text)
        levels = [level for level, _, _ in said]
        assert all(b <= a + 1 for a, b in pairwise(levels)), (where, levels)
        for tooltip, text in outline.tooltips:
            assert tooltip.casefold() not in text.casefold(), (where, tooltip)
        assert outline.title and outline.title not in titles, (where, titles.get(outline.title))
        titles[outline.title] = where
    assert len(titles) > len(CATEGORY_IDS)


def test_every_entry_and_category_has_a_page(sample: SampleRelease) -> None:
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    index = Elements(page(sample, "index.html"))
    links = {attrs.get("href") for tag, attrs in index.tags if tag == "a"}
    listed = []
    for category in CATEGORY_IDS:
        assert (sample.folder / category_page(category)).is_file()
        assert category_page(category) in links
        members = [card["data-id"] for card in cards_of(Elements(page(sample, category_page(
            category))))]
        assert sorted(members) == sorted(a["id"] for a in apis if a["category"] == category)
        listed += members
    assert sorted(listed) == sorted(api["id"] for api in apis)
    for api in apis:
        assert (sample.folder / entry_page(api["id"])).is_file()


def test_the_index_lists_the_apis_from_the_search_index_not_the_dataset(
    sample: SampleRelease,
) -> None:
    raw = page(sample, "index.html")
    index = Elements(raw)
    [api_list] = [attrs for tag, attrs in index.tags if attrs.get("id") == "api-list"]
    assert api_list["data-source"] == SEARCH_INDEX
    assert cards_of(index) == []  # the script builds them from api/search.json
    labels = json.loads(api_list["data-labels"])
    assert labels == {c.id: c.label for c in CATEGORIES}
    assert json.loads(api_list["data-states"])["unchecked"] == "Not checked"
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    assert not any(api["description"] in raw for api in apis if api.get("description"))
    assert "api/apis.json" not in [a.get("data-source") for _, a in index.tags]
    assert len(raw.encode()) < 8_000  # whatever the size of the catalogue


def test_category_cards_are_sorted_by_builder_score_and_carry_search_text(
    sample: SampleRelease,
) -> None:
    cards = cards_of(Elements(page(sample, category_page("ai"))))
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
    assert quota["recurring"] is True and quota["amount"] == 5000
    assert html.by_id("free-quota") == (
        f"5,000 {quota['unit']}/{quota['period']}, renewed each period — {quota['note']}")
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
        f"Last 24 hours {share_text(uptime['last1d'])} ({uptime_basis_text(uptime, 'last1d')}) "
        f"Last 7 days {share_text(uptime['last7d'])} ({uptime_basis_text(uptime, 'last7d')}) "
        f"Last 30 days {share_text(uptime['last30d'])} ({uptime_basis_text(uptime, 'last30d')})"
    )
    for endpoint in api["endpoints"]:
        assert f"{endpoint['method']} {endpoint['path']}" in html.by_id("endpoints")
    assert html.by_id("sample-request") == api["sampleRequest"].strip()
    assert json.loads(html.text["sample-response"]) == json.loads(api["sampleResponse"])
    buttons = [a for t, a in html.tags if t == "button" and "data-copy" in a]
    assert {b["data-copy"] for b in buttons} == {"sample-request", "sample-response"}


def test_an_entry_without_any_optional_field_gets_its_page_and_markdown(
    sample: SampleRelease,
) -> None:
    """Pricing, description, rate limit, docs, endpoints, samples and sources are optional: an
    entry without them is published, and its page and Markdown say what is not stated."""
    html = Elements(page(sample, entry_page(BARE_ID)))
    for element in ("auth-header", "rate-limit", "pricing-model", "docs-url"):
        assert html.by_id(element) == "not stated", element
    assert html.by_id("free-quota") == "none stated"
    assert html.by_id("provenance") == "never"
    assert html.by_id("no-sample") == "No sample request or response stated."
    assert html.by_id("grade-basis") == (
        "Provisional: Pricing is not stated, and Latency is graded after 5 probes on 3 days "
        "within 7 days, none so far, so this grade comes from Depth alone.")
    text = page(sample, entry_markdown(BARE_ID))
    for line in ("- **Auth header:** not stated", "- **Rate limit:** not stated",
                 "- **Pricing:** not stated", "- **Free quota:** none stated",
                 "- **Documentation:** not stated", "No endpoints listed.",
                 "## Samples\n\nNo sample request or response stated.", "Last verified: never.",
                 "so this grade comes from Depth alone."):
        assert line in text, line
    assert BARE_ID in page(sample, category_page("storage"))


def optional_fields() -> list[str]:
    """The curated fields an entry may leave out, those of its pricing and provenance too
    (`pricing.sandbox`)."""
    def optional(model: type[BaseModel], prefix: str = "") -> list[str]:
        return [prefix + (field.alias or name) for name, field in model.model_fields.items()
                if not field.is_required() and (field.alias or name) not in pages.NIGHTLY_FIELDS]
    return optional(APIEntry) + optional(Pricing, "pricing.") + optional(Provenance, "provenance.")


@pytest.mark.parametrize("field", optional_fields())
def test_an_entry_page_and_markdown_draw_without_each_optional_field(
    sample: SampleRelease, field: str
) -> None:
    from pipeline.release.markdown import markdown_problems, render_entry_markdown

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    meta = json.loads(page(sample, FULL_DATASET))["meta"]
    *parents, name = field.split(".")
    holder = api[parents[0]] if parents else api
    holder.pop(name, None)
    presented = pages.presented_entry(api)
    categories = json.loads(page(sample, "api/categories.json"))["categories"]
    common = pages.page_context(meta, categories, pages.asset_files()[1])
    html = pages.render_entry_page(presented, common, [], pages.entry_badges(presented))
    release = {p.relative_to(sample.folder).as_posix() for p in sample.folder.rglob("*")}
    assert pages.page_problems(entry_page("stripe"), html, release) == []
    text = render_entry_markdown(presented, meta, common["labels"])
    assert markdown_problems(entry_markdown("stripe"), text, release) == []


def test_an_endpoint_without_method_or_path_is_said_so_in_markdown(sample: SampleRelease) -> None:
    from pipeline.release.markdown import nightly_markdown_parts

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    api["endpoints"] = [{"description": "Something."}, {"path": "/x"}]
    parts = nightly_markdown_parts(pages.presented_entry(api), {"version": "2.0.0", "license": ""})
    assert "\n- Method and path not stated: Something.\n" in parts["endpoints"]
    assert "\n- `/x`\n" in parts["endpoints"]


def test_an_endpoints_reason_and_confirmed_failure_read_alike_in_page_and_markdown(
    sample: SampleRelease,
) -> None:
    """Page and Markdown say why an endpoint answered or failed in a reader's words, not its
    code, and both say a failure the run confirmed."""
    from pipeline.release.markdown import nightly_markdown_parts

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    api["endpoints"] = [
        {"method": "GET", "path": "/gone", "status": {
            "state": "online", "httpStatus": 404, "reason": "not_found", "failure": "dead"}},
        {"method": "GET", "path": "/tls", "status": {
            "state": "unreachable", "reason": "tls", "failure": "tls"}},
        {"method": "GET", "path": "/new", "status": {"state": "online", "httpStatus": 418,
                                                      "reason": "a_code_not_yet_labelled"}},
    ]
    presented = pages.presented_entry(api)
    html = Elements(pages.nightly_page_parts(presented, "", Markup(""), "")["endpoints"])
    text = nightly_markdown_parts(presented, {"version": "2.0.0", "license": ""})["endpoints"]
    rows = [" ".join(row.split()) for row in html.text.get("endpoints", "").split("GET")[1:]]
    assert rows == ["/gone Online HTTP 404 (not found) dead (404/410 or no such host)",
                    "/tls Unreachable (TLS certificate or handshake failed) TLS (certificate or "
                    "handshake)",
                    "/new Online HTTP 418 (a_code_not_yet_labelled)"]
    assert ("- `GET /gone` Status: Online, HTTP 404 (not found), failed: dead (404/410 or no "
            "such host).\n") in text
    assert ("- `GET /tls` Status: Unreachable (TLS certificate or handshake failed), failed: TLS "
            "(certificate or handshake).\n") in text
    assert "(a\\_code\\_not\\_yet\\_labelled)" in text
    assert "not_found" not in text and "(tls)" not in text


def test_an_endpoints_table_has_a_status_column_only_when_an_endpoint_has_a_status(
    sample: SampleRelease,
) -> None:
    """Endpoints published without a status of their own (none probed each apart) are listed
    without a Status column, rather than under a heading over empty cells."""
    api = json.loads(page(sample, entry_document(LIVE_ID)))["api"]
    assert api["endpoints"] and not any("status" in endpoint for endpoint in api["endpoints"])
    drawn = Elements(page(sample, entry_page(LIVE_ID)))
    assert drawn.by_id("endpoints").startswith("Method Path What it does GET /rates")
    assert not any(attrs.get("class") == "endpoint-status" for _, attrs in drawn.tags)

    api["endpoints"][0]["status"] = {"state": "live", "httpStatus": 200, "responseTimeMs": 90}
    parts = pages.nightly_page_parts(pages.presented_entry(api), "", Markup(""), "")
    table = Elements(parts["endpoints"])
    assert table.by_id("endpoints").startswith("Method Path What it does Status")
    statuses = [attrs for tag, attrs in table.tags if attrs.get("class") == "endpoint-status"]
    assert len(statuses) == len(api["endpoints"])


def test_a_note_beside_a_probe_is_not_called_not_probed_in_page_or_markdown(
    sample: SampleRelease,
) -> None:
    """An endpoint not probed says so with its note; one probed whose redirect was not followed
    carries a note too, which the page and Markdown printed as "not probed" beside its answer."""
    from pipeline.release.markdown import nightly_markdown_parts

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    followed = "its redirect to b.example was not followed this run"
    api["endpoints"] = [
        {"method": "GET", "path": "/moved", "status": {
            "state": "online", "httpStatus": 301, "reason": "redirect", "note": followed}},
        {"method": "POST", "path": "/send", "status": {
            "state": "unchecked", "note": "method is POST"}},
    ]
    presented = pages.presented_entry(api)
    html = Elements(pages.nightly_page_parts(presented, "", Markup(""), "")["endpoints"])
    text = nightly_markdown_parts(presented, {"version": "2.0.0", "license": ""})["endpoints"]
    page_text = " ".join(html.text.get("endpoints", "").split())
    assert f"HTTP 301 (redirected) {followed}" in page_text
    assert "not probed: method is POST" in page_text and page_text.count("not probed") == 1
    assert f"HTTP 301 (redirected), {followed}." in text
    assert "not probed: method is POST." in text and text.count("not probed") == 1


def test_the_markdown_keeps_a_sample_requests_indentation(sample: SampleRelease) -> None:
    from pipeline.release.markdown import render_entry_markdown

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    api["sampleRequest"] = "  curl -s https://api.stripe.com/v1/charges \\\n    -u KEY:\n"
    meta = json.loads(page(sample, FULL_DATASET))["meta"]
    text = render_entry_markdown(pages.presented_entry(api), meta, {})
    assert "```sh\n  curl -s https://api.stripe.com/v1/charges \\\n    -u KEY:\n```\n" in text


def test_the_grade_basis_names_the_sub_scores_that_count() -> None:
    assert grade_basis({"pricing": 60, "latency": 70, "depth": 50}) is None
    assert grade_basis({"pricing": 60, "latency": None, "depth": 50}) == (
        "Latency is graded after 5 probes on 3 days within 7 days, so this grade comes from "
        "Pricing and Depth alone.")
    evidence = {"probes": 4, "days": 2, "minimumSamples": 5, "minimumDays": 3}
    assert grade_basis({"pricing": 60, "latency": None, "depth": 50,
                        "evidence": {"latency": evidence}}) == (
        "Latency is graded after 5 probes on 3 days within 7 days, 4 probes on 2 days so far, "
        "so this grade comes from Pricing and Depth alone.")
    assert grade_basis({"pricing": None, "latency": 70, "depth": 50}) == (
        "Pricing is not stated, so this grade comes from Latency and Depth alone.")


def test_status_has_its_three_forms(sample: SampleRelease) -> None:
    live = Elements(page(sample, entry_page(LIVE_ID)))
    assert live.by_id("status") == "Live — HTTP 200, response time 84 ms."
    down = Elements(page(sample, entry_page(UNREACHABLE_ID)))
    assert down.by_id("status") == "Unreachable — no response."
    for html in (live, down):
        assert html.by_id("checked-at") == "2026-11-21 02:59 UTC"
    unchecked = Elements(page(sample, entry_page("openweathermap")))
    assert unchecked.by_id("status").startswith("Not checked yet")


def test_an_entry_never_probed_says_so_plainly_on_its_page_and_in_its_markdown(
    sample: SampleRelease,
) -> None:
    """An entry no run has probed says just that, in the same words on its page and in its
    Markdown: "a run whose network was down counts for none" told a reader of a rule of the
    runs, not of the entry."""
    html = Elements(page(sample, entry_page("openweathermap")))
    text = page(sample, entry_markdown("openweathermap"))
    assert html.by_id("status") == "Not checked yet — no run has probed this API yet."
    assert "\nNot checked yet: no run has probed this API yet.\n" in text


def test_an_entry_without_probes_says_so_once_on_its_page_and_in_its_markdown(
    sample: SampleRelease,
) -> None:
    """Without a probe in the last 30 days, none lies in the 7 days or the 24 hours within
    them: the uptime says so once, not "no probes" in each of three rows and thrice in one
    Markdown sentence. An entry with probes keeps its three windows."""
    html = Elements(page(sample, entry_page("openweathermap")))
    text = page(sample, entry_markdown("openweathermap"))
    assert html.by_id("uptime") == "No probes in the last 30 days."
    assert "\nUptime: no probes in the last 30 days.\n" in text
    assert page(sample, entry_page("openweathermap")).count("no probes") == 0
    assert text.count("no probes") == 1
    probed = Elements(page(sample, entry_page(LIVE_ID))).by_id("uptime")
    assert probed.startswith("Last 24 hours ") and " Last 30 days " in probed


def test_a_status_left_unchecked_by_the_latest_run_says_what_was_left_and_why(
        sample: SampleRelease) -> None:
    """A status the latest run left undone (its redirect not followed) says so on the page and
    in its Markdown, with the URL and the probe's note, not "Not checked yet", which tells of an
    entry never probed."""
    from pipeline.release.markdown import render_entry_markdown

    api = json.loads(page(sample, entry_document("stripe")))["api"]
    url = "https://api.stripe.com/v1/charges?a=<b>"
    note = "redirect to an unchecked host not followed"
    api["status"] = {"state": "unchecked", "httpStatus": None, "responseTimeMs": None,
                     "checkedAt": "2026-11-21T02:59:00Z", "url": url, "note": note}
    presented = pages.presented_entry(api)
    meta = json.loads(page(sample, FULL_DATASET))["meta"]
    categories = json.loads(page(sample, "api/categories.json"))["categories"]
    common = pages.page_context(meta, categories, pages.asset_files()[1])
    html = Elements(pages.render_entry_page(presented, common, [],
                                            pages.entry_badges(presented)))
    assert html.by_id("status") == f"Not checked — the latest run left {url} undone: {note}."
    text = render_entry_markdown(presented, meta, common["labels"])
    assert f"## Status\n\nNot checked: the latest run left `{url}` undone: {note}." in text

    # An entry with no URL to probe any longer: unchecked with the reason alone, no URL.
    why = "base address is per account (YOUR_PROJECT_REF)"
    api["status"] = {"state": "unchecked", "httpStatus": None, "responseTimeMs": None,
                     "checkedAt": None, "url": None, "note": why}
    presented = pages.presented_entry(api)
    html = Elements(pages.render_entry_page(presented, common, [],
                                            pages.entry_badges(presented)))
    assert html.by_id("status") == f"Not checked — no URL it lists can be probed: {why}."
    text = render_entry_markdown(presented, meta, common["labels"])
    escaped = why.replace("_", "\\_")  # Markdown's own escape of the placeholder
    assert f"## Status\n\nNot checked: no URL it lists can be probed: {escaped}." in text


def test_no_auth_shows_a_comment_as_its_header(sample: SampleRelease) -> None:
    html = Elements(page(sample, entry_page(UNREACHABLE_ID)))
    assert html.by_id("auth-header") == NO_AUTH_HEADER == "# No auth required"


def test_the_auth_type_is_said_once(sample: SampleRelease) -> None:
    """The auth rows of the page and the Markdown name the auth type once: inside the
    description when that names it (the description's own repeats aside), else before it; its
    machine value rides in `<data>` (in code, in the Markdown)."""
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    named = 0
    for api in apis:
        html = Elements(page(sample, entry_page(api["id"])))
        label = re.compile(rf"\b{re.escape(AUTH_LABELS[api['authType']])}\b", re.IGNORECASE)
        said = len(label.findall(f"{html.by_id('auth-type')} {html.by_id('auth-header')}"))
        in_description = len(label.findall(api.get("authDescription") or ""))
        in_example = len(label.findall(api.get("authExample") or ""))
        assert said == max(1, in_description) + in_example, api["id"]
        auth_line = next(line for line in page(sample, entry_markdown(api["id"])).splitlines()
                         if line.startswith("- **Auth:** "))
        machine_value = f" (`{api['authType']}`)"
        assert machine_value in auth_line, api["id"]
        words = auth_line.replace(machine_value, "")
        assert len(label.findall(words)) == max(1, in_description), api["id"]
        assert [a["value"] for t, a in html.tags if t == "data"] == [api["authType"]], api["id"]
        named += in_description > 0
    assert named > 10  # the catalogue's descriptions often name the scheme
    openai = Elements(page(sample, entry_page(ONLINE_ID)))
    assert openai.by_id("auth-type").count("Bearer token") == 1
    assert openai.by_id("auth-header") == next(
        a["authExample"] for a in apis if a["id"] == ONLINE_ID)


def test_direction_controls_in_an_entry_stay_inside_its_text(sample: SampleRelease) -> None:
    """An entry's name and provider are isolated on its card and page (`<bdi>`, without
    direction controls of their own, which could end the isolation), and in its page's title."""
    api = json.loads(page(sample, entry_document("stripe")))["api"]
    api.update(name="\u202eReversed API", provider="\u2069\u202eEvil Corp")
    presented = pages.presented_entry(api)
    meta = json.loads(page(sample, FULL_DATASET))["meta"]
    categories = json.loads(page(sample, "api/categories.json"))["categories"]
    common = pages.page_context(meta, categories, pages.asset_files()[1])
    badges = pages.entry_badges(presented)
    card = str(pages.card_html(presented, common["labels"], badges))
    assert '"><bdi>Reversed API</bdi></a></h3>' in card
    assert '<p class="provider"><bdi>Evil Corp</bdi> · <a href=' in card
    html = pages.render_entry_page(presented, common, [], badges)
    assert "<title>\u2068Reversed API\u2069 · API Directory</title>" in html
    assert '<span aria-current="page"><bdi>Reversed API</bdi></span>' in html
    assert "</svg> <bdi>Reversed API</bdi></h1>" in html
    assert '<p class="provider">by <bdi>Evil Corp</bdi></p>' in html
    assert "\u202e" not in re.sub(r"<[^>]*>", "", card)  # but in its data, never shown


def test_an_entrys_descriptions_take_their_direction_from_their_text(
    sample: SampleRelease,
) -> None:
    """`dir="auto"` on the descriptions of an entry's page and of its card: right-to-left
    text reads right to left, isolated from the page's own words."""
    html = Elements(page(sample, entry_page(LIVE_ID)))
    lead = [attrs for tag, attrs in html.tags if tag == "p" and attrs.get("class") == "lead"]
    assert lead and all(attrs.get("dir") == "auto" for attrs in lead)
    cards = Elements(page(sample, category_page("finance")))
    described = [attrs for tag, attrs in cards.tags
                 if tag == "p" and attrs.get("class") == "description"]
    assert described and all(attrs.get("dir") == "auto" for attrs in described)


def test_html_in_entries_shows_as_text(sample: SampleRelease) -> None:
    raw = page(sample, entry_page(UNREACHABLE_ID))
    assert "<script>alert" not in raw and "<img src=x" not in raw and "<h1>injected" not in raw
    html = Elements(raw)
    assert [t for t, _ in html.tags].count("script") == 1  # only the page's own script
    assert [t for t, _ in html.tags].count("img") == 0
    assert HOSTILE_NAME in html.by_id("main")
    assert HOSTILE_DESCRIPTION in html.by_id("main")
    listing = page(sample, category_page("security"))
    assert "<script>alert" not in listing and "&lt;script&gt;alert(&#34;pwned&#34;)" in listing


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
        own = ("/assets/",) if path.name == NOT_FOUND_PAGE else ("assets/", "../assets/")
        assert scripts and all(attrs.get("src", "").startswith(own) for attrs in scripts)
        policy = next(a["content"] for t, a in html.tags if a.get("http-equiv") ==
                      "Content-Security-Policy")
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe" not in policy
    for asset in (sample.folder / "assets").iterdir():
        # the SVG namespace (in the icon, and in the script that draws the index's cards) is a
        # name, never loaded
        text = asset.read_text().replace('"http://www.w3.org/2000/svg"', "")
        assert not re.search(r"https?://", text), asset


def test_links_are_relative_so_the_release_works_from_any_folder(sample: SampleRelease) -> None:
    for path in sorted(sample.folder.rglob("*.html")):
        if path == sample.folder / NOT_FOUND_PAGE:
            continue  # served at any missing address: its links start at the site's root
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
    from pipeline.release import site

    real_render = site.render_pages

    def render_with_a_dead_link(*args, **kwargs):
        rendered = real_render(*args, **kwargs)
        rendered["index.html"] = rendered["index.html"].replace(
            b"</main>", b'<a href="apis/missing.html">gone</a></main>'
        )
        return rendered

    monkeypatch.setattr(site, "render_pages", render_with_a_dead_link)
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with Session(engine) as session, pytest.raises(PageError, match=r"apis/missing\.html"):
        publish_release(session, out, "https://directory.test", CATEGORIES, NOW)
    engine.dispose()
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == live


def test_an_entry_without_a_free_quota_says_whether_it_has_a_free_tier(
    sample: SampleRelease,
) -> None:
    """A free quota left out reads as no free tier, or as one whose size the provider does not
    give, as the entry's `hasFreeTier` says: `none stated` told a reader neither (beside a
    Pricing reason saying "no free tier"). An entry that says neither keeps `none stated`."""
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    without = {api["id"]: api.get("hasFreeTier") for api in apis
               if not (api.get("pricing") or {}).get("freeQuota")}
    assert {True, False, None} <= set(without.values())  # the catalogue holds each kind
    for entry_id, has_free_tier in without.items():
        words = NO_QUOTA_WORDS.get(has_free_tier, "none stated")
        assert Elements(page(sample, entry_page(entry_id))).by_id("free-quota") == words
        assert f"- **Free quota:** {words}\n" in page(sample, entry_markdown(entry_id))


def test_pricing_says_each_fact_once(sample: SampleRelease) -> None:
    """A free API reads "free", not "free, from $0/month · free tier"; a freemium one says its
    free tier and what its paid plans start at, not "from $0/month", which is its free tier
    again; page and Markdown say the same words."""
    for entry_id, said in ((LIVE_ID, "free"), (DEPRECATED_ID, "free tier, paid from $29/month")):
        api = json.loads(page(sample, entry_document(entry_id)))["api"]
        details = api["pricing"]["details"]
        assert Elements(page(sample, entry_page(entry_id))).by_id("pricing-model") == \
            f"{said} {details}"
        assert f"\n- **Pricing:** {said}. {details}\n" in page(sample, entry_markdown(entry_id))
    words = pages.pricing_text
    assert words({"model": "free", "startingCentsPerMonth": 0}, True) == "free"
    freemium = {"model": "freemium", "startingCentsPerMonth": 0, "tiers": [
        {"name": "Pro", "monthlyCents": 2900, "included": "x"},
        {"name": "Free", "monthlyCents": 0, "included": "y"},
        {"name": "Hobby", "monthlyCents": 530, "included": "z"}]}
    assert words(freemium, True) == "free tier, paid from $5.30/month"
    assert words({"model": "freemium", "startingCentsPerMonth": 0}, True) == \
        "free tier, paid price not stated"
    # Past the free tier at a price per use or a fee, which the page states beside it: a
    # price, not one left unstated.
    unit = {"amountCents": 15, "per": 1_000_000, "unit": "input tokens"}
    assert words({"model": "freemium", "startingCentsPerMonth": 0, "unitCost": unit}, True) == \
        "free tier, then priced per use"
    fee = {"percent": 5.5}
    assert words({"model": "freemium", "startingCentsPerMonth": 0, "transactionFee": fee},
                 True) == "free tier, then a fee per transaction"
    assert words({"model": "subscription", "startingCentsPerMonth": 1995}, False) == \
        "subscription, from $19.95/month"
    assert words({"model": "pay-as-you-go", "startingCentsPerMonth": 0}, True) == \
        "pay-as-you-go, no monthly fee, free tier"
    assert words({"model": "enterprise"}, False) == "enterprise"
    assert words(None) == "not stated"


def test_free_quota_wording() -> None:
    assert free_quota_text({"amount": 1000, "unit": "requests", "period": "day"}) == \
        "1,000 requests/day"
    assert free_quota_text({"amount": 1000, "unit": "requests", "period": "month",
                            "recurring": True}) == "1,000 requests/month, renewed each period"
    assert free_quota_text({"amount": 50, "unit": "USD credit", "period": "one-time",
                            "recurring": False, "note": "Kept on upgrade."}) == \
        "50 USD credit/one-time, not renewed — Kept on upgrade."
    assert free_quota_text({"amount": None, "period": "month", "note": "10 GB storage"}) == \
        "10 GB storage"
    assert free_quota_text(None) == "none stated"
    assert free_quota_text(None, False) == "no free tier"
    assert free_quota_text(None, True) == "a free tier, its size not given"
    assert free_quota_text({"amount": 5, "unit": "GB", "period": "month"}, True) == "5 GB/month"
    # an unlimited allowance has no period to renew
    assert free_quota_text({"amount": None, "period": "unlimited", "recurring": True,
                            "note": "No request quota is published."}) == \
        "No request quota is published."
    assert free_quota_text({"period": "unlimited", "recurring": True}) == "unlimited"
    assert share_text(0.995) == "99.5%" and share_text(1.0) == "100%" and share_text(None) == \
        "no probes"


def test_each_source_link_names_its_host(sample: SampleRelease) -> None:
    """A reader sees where a fact comes from before following its link: the source's host,
    with its path where two sources share a host, numbered where still alike."""
    assert pages.source_links(["https://www.frankfurter.dev", "https://ecb.europa.eu/x"]) == [
        ("https://www.frankfurter.dev", "frankfurter.dev"),
        ("https://ecb.europa.eu/x", "ecb.europa.eu")]
    assert [text for _, text in pages.source_links([
        "https://frankfurter.dev", "https://frankfurter.dev/zh-cn/", "https://a.test/p?x=1",
        "https://a.test/p?x=2", "https://b.test/q", "https://b.test/q/"])] == [
        "frankfurter.dev", "frankfurter.dev/zh-cn", "a.test/p?x=1", "a.test/p?x=2",
        "b.test/q (1)", "b.test/q (2)"]
    api = json.loads(page(sample, entry_document(LIVE_ID)))["api"]
    html = Elements(page(sample, entry_page(LIVE_ID)))
    sources = api["provenance"]["sources"]
    shown = html.by_id("provenance")
    assert f"{len(sources)} sources: frankfurter.dev · frankfurter.dev/zh-cn · github.com/" \
        in shown
    linked = [attrs["href"] for tag, attrs in html.tags if tag == "a"]
    assert all(source in linked for source in sources)


@pytest.mark.parametrize(("days", "said"), [
    (60, "certificate expires in 60 days"), (1, "certificate expires in 1 day"),
    (0, "certificate expires today"), (-1, "certificate expired 1 day ago"),
    (-12, "certificate expired 12 days ago")])
def test_a_certificates_days_left_read_as_words(days: int, said: str) -> None:
    assert pages.https_text({"enabled": True, "tlsVersion": "TLSv1.3", "certDaysLeft": days}) \
        == f"yes, TLSv1.3; {said}"


def test_a_share_short_of_every_probe_or_none_is_never_shown_as_all_or_none() -> None:
    """`100%` says every probe answered and `0%` none did: the page, the Markdown and the
    trend chart's bars say a share by one function, which never rounds to either."""
    from pipeline.release import markdown

    assert share_text(1.0) == "100%" and share_text(0.0) == "0%"
    for short_of_all in (0.9995, 0.9996, 2879 / 2880, 1 - 1e-12):
        assert share_text(short_of_all) == "99.9%"
    for above_none in (0.00049, 0.0005, 1e-12):
        assert share_text(above_none) == "0.1%"
    assert share_text(0.9994) == "99.9%" and share_text(2 / 3) == "66.7%"
    api = pages.presented_entry(make_entry(
        id="x", uptime={"last1d": 2879 / 2880, "last7d": 0.00049, "last30d": 1.0}))
    status = pages.nightly_page_parts(api, "", Markup(""), "")["status"]
    assert Elements(status).by_id("uptime") == \
        "Last 24 hours 99.9% Last 7 days 0.1% Last 30 days 100%"
    text = markdown.environment().get_template("_entry_nightly.md").module.status_part(api)
    assert "Uptime: 99.9% over the last 24 hours, 0.1% over 7 days, 100% over 30 days." in text
    last = NOW.date()
    chart = pages.trend_svg(sent_days([DayFigures(last, 2880, 2879, 80.0),
                                       DayFigures(last - timedelta(days=1), 2880, 1, 80.0)]),
                            last)
    assert f"<title>{last}: 99.9% up, median 80 ms</title>" in chart
    assert f"<title>{last - timedelta(days=1)}: 0.1% up, median 80 ms</title>" in chart


def test_a_share_is_rounded_half_up_on_pages_and_in_markdown() -> None:
    """Shares are shown to a tenth rounded half up, as the rubric rounds: 1/16 of the probes is
    6.3 %, not the 6.2 % a float's round half to even gives; the page, the Markdown and the
    trend chart say it alike."""
    from pipeline.release import markdown

    assert share_text(1 / 16) == "6.3%" and share_text(3 / 16) == "18.8%"
    assert share_text(5 / 16) == "31.3%" and share_text(0.0125) == "1.3%"
    api = pages.presented_entry(make_entry(
        id="x", uptime={"last1d": 1 / 16, "last7d": 5 / 16, "last30d": 0.0125}))
    status = pages.nightly_page_parts(api, "", Markup(""), "")["status"]
    assert Elements(status).by_id("uptime") == \
        "Last 24 hours 6.3% Last 7 days 31.3% Last 30 days 1.3%"
    text = markdown.environment().get_template("_entry_nightly.md").module.status_part(api)
    assert "Uptime: 6.3% over the last 24 hours, 31.3% over 7 days, 1.3% over 30 days." in text
    chart = pages.trend_svg(sent_days([DayFigures(NOW.date(), 16, 1, 80.0)]), NOW.date())
    assert f"<title>{NOW.date()}: 6.3% up, median 80 ms</title>" in chart


def test_a_provisional_grade_is_said_so_in_the_category_markdown(sample: SampleRelease) -> None:
    """A category's Markdown list says "provisional" beside a provisional grade, as the entry's
    page and Markdown do."""
    apis = json.loads(page(sample, category_file("weather")))["apis"]
    provisional = [api for api in apis if api["builderScore"]["provisional"]]
    assert provisional
    text = page(sample, category_markdown("weather"))
    for api in provisional:
        score = api["builderScore"]
        line = next(line for line in text.splitlines()
                    if line.startswith("- [") and f"](../apis/{api['id']}.md): " in line)
        assert f"grade {score['grade']}, {score['label']}, provisional" in line, line
    confirmed = [api for api in json.loads(page(sample, FULL_DATASET))["apis"]
                 if api["builderScore"] and not api["builderScore"]["provisional"]]
    assert confirmed
    for api in confirmed:
        text = page(sample, category_markdown(api["category"]))
        line = next(line for line in text.splitlines()
                    if line.startswith("- [") and f"](../apis/{api['id']}.md): " in line)
        assert "provisional" not in line, line


@pytest.mark.parametrize(("probes", "days", "wanting"), [
    (0, 0, "none so far"),
    (4, 4, "4 probes on 4 days so far"),
    (6, 1, "6 probes on 1 day so far"),
    (1, 1, "1 probe on 1 day so far"),
])
def test_a_provisional_latency_names_what_its_evidence_lacks(
    probes: int, days: int, wanting: str,
) -> None:
    """Latency counts from `MIN_LATENCY_SAMPLES` probes on `MIN_LATENCY_DAYS` UTC days: the
    words name the entry's own shortfall, not only the rule, nor a count of probes alone."""
    from pipeline.judging.score import MIN_LATENCY_DAYS, MIN_LATENCY_SAMPLES

    evidence = {"probes": probes, "days": days, "minimumSamples": MIN_LATENCY_SAMPLES,
                "minimumDays": MIN_LATENCY_DAYS}
    assert pages.latency_wanting({"latency": None, "evidence": {"latency": evidence}}) == (
        f"Latency is graded after 5 probes on 3 days within 7 days, {wanting}")


def test_a_provisional_grade_says_what_latency_lacks_as_its_json_holds_it(
    sample: SampleRelease,
) -> None:
    """The entry's page, its Markdown and its card's "provisional" (the category page's) say
    what Latency waits for in the words of its JSON reason, from the probes and days its
    `builderScore.evidence.latency` holds: "graded after 5 probes on 3 days within 7 days,
    none so far"."""
    provisional = [api for api in json.loads(page(sample, FULL_DATASET))["apis"]
                   if api["builderScore"] and api["builderScore"]["provisional"]]
    assert provisional
    for api in provisional:
        evidence = api["builderScore"]["evidence"]["latency"]
        said = api["builderScore"]["reasons"]["latency"][0]
        assert said.startswith("graded after 5 probes on 3 days within 7 days, ")
        assert said.endswith(" so far") and (f"{evidence['probes']} probe" in said
                                             or evidence["probes"] == 0)
        assert said in Elements(page(sample, entry_page(api["id"]))).by_id("grade-basis")
        assert said in page(sample, entry_markdown(api["id"]))
        tags = Elements(page(sample, category_page(api["category"]))).tags
        card = next(i for i, (tag, attrs) in enumerate(tags) if attrs.get("data-id") == api["id"])
        word = next(attrs for tag, attrs in tags[card:] if attrs.get("class") == "provisional-word")
        assert said in (word.get("title") or ""), word


def test_curated_pricing_facts_reach_the_page_and_the_markdown(sample: SampleRelease) -> None:
    """Price per use, transaction fee, monthly minimum and sandbox, where the entry sets them."""
    stripe = Elements(page(sample, entry_page("stripe")))
    assert stripe.by_id("transaction-fee").startswith("2.9% + 30¢ per transaction (Standard ")
    assert stripe.by_id("monthly-minimum") == "none"
    assert stripe.by_id("sandbox") == "yes: a free sandbox or test mode to build against"
    assert "unit-cost" not in stripe.text
    text = page(sample, entry_markdown("stripe"))
    assert "- **Transaction fee:** 2.9% + 30¢ per transaction (Standard " in text
    assert "- **Monthly minimum:** none\n- **Sandbox:** yes: a free sandbox" in text
    mistral = Elements(page(sample, entry_page("mistral-ai")))
    assert mistral.by_id("unit-cost") == "$0.15 per 1,000,000 input tokens (Mistral Small 4)"
    assert "- **Price per use:** $0.15 per 1,000,000 input tokens" in \
        page(sample, entry_markdown("mistral-ai"))
    assert Elements(page(sample, entry_page("assemblyai"))).by_id("free-quota").startswith(
        "50 USD credit/one-time, not renewed — ")
    frankfurter = Elements(page(sample, entry_page(LIVE_ID)))
    assert not {"unit-cost", "transaction-fee", "monthly-minimum", "sandbox"} & set(
        frankfurter.text)
    assert pricing_facts(None) == [] and pricing_facts({"sandbox": False}) == [
        ("sandbox", "Sandbox", "no free sandbox or test mode")]
    assert pricing_facts({"monthlyMinimumCents": 2500})[0][2] == "$25/month once live"


def test_prices_show_in_the_currency_the_provider_states(sample: SampleRelease) -> None:
    """OpenWeather prices its plans in pounds: its page and Markdown show £30, not $30, and
    every text that shows a price says the pricing's currency, a dollar sign for none."""
    html = page(sample, entry_page("openweathermap"))
    assert Elements(html).by_id("pricing-model").startswith("free tier, paid from £30/month")
    assert '<tr><td>Startup</td><td class="per-month">£30</td>' in html
    markdown = page(sample, entry_markdown("openweathermap"))
    assert "  - Startup: £30/month, 600 calls/minute" in markdown
    assert "paid from £30/month" in markdown
    euros = {"model": "pay-as-you-go", "startingCentsPerMonth": 2500, "currency": "EUR",
             "unitCost": {"amountCents": 2, "per": 1000, "unit": "characters"},
             "transactionFee": {"percent": 1, "fixedCents": 20}, "monthlyMinimumCents": 3000}
    assert pricing_text(euros) == "pay-as-you-go, from €25/month"
    assert [text for _, _, text in pricing_facts(euros)] == [
        "€0.02 per 1,000 characters", "1% + €0.20 per transaction", "€30/month once live"]
    assert pricing_text(euros | {"currency": "CHF"}) == "pay-as-you-go, from 25 CHF/month"
    assert cents_text(2900) == "$29" and cents_text(None, "GBP") == "not stated"


def test_every_page_names_its_markdown_alternate_and_the_entry_page_its_json(
    sample: SampleRelease,
) -> None:
    expected = {"index.html": LLMS_TXT}
    expected |= {category_page(c): category_markdown(c) for c in CATEGORY_IDS}
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    expected |= {entry_page(api["id"]): entry_markdown(api["id"]) for api in apis}
    pages_found = {p.relative_to(sample.folder).as_posix()
                   for p in sample.folder.rglob("*.html")} - {NOT_FOUND_PAGE}
    assert pages_found == set(expected)
    for path, markdown in expected.items():
        html = Elements(page(sample, path))
        alternates = {a["type"]: a for t, a in html.tags
                      if t == "link" and a.get("rel") == "alternate"}
        assert set(alternates) == {"text/markdown", "application/atom+xml"}
        target = (sample.folder / path).parent / alternates["text/markdown"]["href"]
        assert target.resolve() == (sample.folder / markdown).resolve() and target.is_file()
        feed = (sample.folder / path).parent / alternates["application/atom+xml"]["href"]
        assert feed.resolve() == (sample.folder / CHANGES_FEED).resolve() and feed.is_file()
    html = Elements(page(sample, entry_page(ONLINE_ID)))
    [json_link] = [a for t, a in html.tags if a.get("id") == "entry-json"]
    assert json_link["href"] == f"../{entry_document(ONLINE_ID)}"
    document = json.loads(page(sample, entry_document(ONLINE_ID)))
    assert document["api"] == next(api for api in apis if api["id"] == ONLINE_ID)


def test_llms_txt_follows_the_convention_and_links_every_entry(sample: SampleRelease) -> None:
    text = page(sample, LLMS_TXT)
    lines = text.splitlines()
    assert lines[0] == "# API Directory" and lines[1] == ""
    assert lines[2].startswith("> A read-only directory of ")
    assert sum(1 for line in lines if line.startswith("# ")) == 1
    sections = [line[3:] for line in lines if line.startswith("## ")]
    assert sections[:2] == ["Data", "Categories"]
    labels = {c.id: c.label for c in CATEGORIES}
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    assert sections[2:] == [c.label for c in CATEGORIES if any(a["category"] == c.id
                                                                for a in apis)]
    links = re.findall(r"^- \[(.+?)\]\(([^)]+)\)", text, flags=re.M)
    targets = {target for _, target in links}
    for api in apis:
        assert entry_markdown(api["id"]) in targets
        section = text.split(f"\n## {labels[api['category']]}\n", 1)[1].split("\n## ", 1)[0]
        assert f"]({entry_markdown(api['id'])})" in section
    for target in targets:
        assert (sample.folder / target).is_file(), target
    assert {SEARCH_INDEX, FULL_DATASET, "api/openapi.json"} <= targets


def test_the_markdown_of_an_entry_tells_what_an_agent_needs(sample: SampleRelease) -> None:
    api = next(a for a in json.loads(page(sample, FULL_DATASET))["apis"] if a["id"] == ONLINE_ID)
    text = page(sample, entry_markdown(ONLINE_ID))
    assert text.startswith(f"# {api['name']}\n\n> {api['description']}\n")
    assert f"- **Base address:** `{api['baseUrl']}`" in text
    before, label, after = api["authDescription"].partition("Bearer token")
    auth_line = next(line for line in text.splitlines() if line.startswith("- **Auth:** "))
    assert auth_line == f"- **Auth:** {before}**{label}**{after} (`bearer`)"  # said once
    assert f"- **Auth header:** `{api['authExample']}`" in text
    assert "## Status\n\nOnline: HTTP 401, path returned an error or may require auth; " \
           "response time 312 ms.\nChecked 2026-11-21 02:59 UTC at " \
           "`https://api.openai.com/v1/models`." in text
    score = api["builderScore"]
    assert f"**{score['grade']}**, {score['label']}" in text
    for part in ("pricing", "latency", "depth"):
        value = score[part] if score[part] is not None else "not scored"
        assert f"- {part.title()}: {value}" in text
    for endpoint in api["endpoints"]:
        assert f"- `{endpoint['method']} {endpoint['path']}`: " in text
    assert f"## Sample request\n\n```sh\n{api['sampleRequest'].strip()}\n```" in text
    response = text.split("## Sample response\n\n```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(response) == json.loads(api["sampleResponse"])
    assert f"[{entry_document(ONLINE_ID)}](../{entry_document(ONLINE_ID)})" in text
    unchecked = page(sample, entry_markdown("openweathermap"))
    assert "## Status\n\nNot checked yet: no run has probed this API yet.\n" in unchecked


def test_the_markdown_states_the_lifecycle_failure_and_transport_the_page_shows(
    sample: SampleRelease,
) -> None:
    """The status part of an entry's Markdown says what the page's does: a failure confirmed
    in the last run, the lifecycle with its successor, the provider's word on a deprecation,
    HTTPS and CORS; the Markdown lists say an entry is deprecated and what replaces it."""
    html = Elements(page(sample, entry_page(UNREACHABLE_ID)))
    text = page(sample, entry_markdown(UNREACHABLE_ID))
    assert html.by_id("failure") == "Failed in the last run: dead (404/410 or no such host) ."
    assert "\nFailed in the last run: **dead (404/410 or no such host)**.\n" in text
    assert html.by_id("lifecycle") == "Lifecycle: Active — not judged from probes yet."
    assert "\nLifecycle: **Active**, not judged from probes yet.\n" in text
    assert html.by_id("https") == "yes" and "\n- HTTPS: yes\n" in text
    assert html.by_id("cors") == "unknown (nothing answered yet)"
    assert "\n- CORS: unknown (nothing answered yet)\n" in text  # one colon a line

    html = Elements(page(sample, entry_page(DEPRECATED_ID)))
    text = page(sample, entry_markdown(DEPRECATED_ID))
    # the successor by its name, as the release holds it; a deprecation not yet judged over
    # runs is the provider's, said as a judged one is, with its day
    assert html.by_id("lifecycle") == ("Lifecycle: Deprecated — deprecated by its provider on "
                                       "2026-10-01. Successor: Open-Meteo Forecast API .")
    assert ("\nLifecycle: **Deprecated**, deprecated by its provider on 2026-10-01. Successor: "
            "[Open-Meteo Forecast API](../apis/open-meteo-forecast.md).\n") in text
    said = f"The provider on its deprecation: {DEPRECATION_NOTE}"
    assert html.by_id("deprecation-note") == said and f"\n{said}\n" in text
    assert "deprecation-note" not in Elements(page(sample, entry_page(LIVE_ID))).text
    assert (f"[Old Forecast API](../apis/{DEPRECATED_ID}.md): Hourly forecasts for any "
            "coordinates. (Not checked, grade ") in page(sample, category_markdown("weather"))
    assert ("; deprecated, successor [Open-Meteo Forecast API](../apis/open-meteo-forecast.md))"
            "\n") in page(sample, category_markdown("weather"))
    assert (f"- [Old Forecast API](apis/{DEPRECATED_ID}.md): Hourly forecasts for any "
            "coordinates. (deprecated, successor [Open-Meteo Forecast API]"
            "(apis/open-meteo-forecast.md))\n") in page(sample, LLMS_TXT)
    assert f"- [Frankfurter](apis/{LIVE_ID}.md): " in page(sample, LLMS_TXT)
    assert "(active" not in page(sample, LLMS_TXT)


def test_a_deprecated_entrys_page_says_so_and_names_its_successor_under_its_name(
    sample: SampleRelease,
) -> None:
    """A reader learns that an entry is deprecated, and what replaces it, before its facts and
    samples tell how to use it: its lifecycle and the provider's word stand in a notice in the
    page's head, said once, not in its status near the end. An active entry has no notice."""
    text = page(sample, entry_page(DEPRECATED_ID))
    head = text[text.index('<header class="entry-head">'):text.index('id="facts"')]
    notice = Elements(head)
    assert notice.by_id("deprecation") == (
        "Lifecycle: Deprecated — deprecated by its provider on 2026-10-01. Successor: "
        f"Open-Meteo Forecast API . The provider on its deprecation: {DEPRECATION_NOTE}")
    assert {"id": "deprecation", "class": "notice", "role": "note"} in [
        attrs for _, attrs in notice.tags]
    assert text.count('id="lifecycle"') == text.count('id="deprecation-note"') == 1
    live = page(sample, entry_page(LIVE_ID))
    assert 'id="deprecation"' not in live
    assert 'id="lifecycle"' in live[live.index('id="facts"'):]  # in its status, as before


def test_a_deprecated_entrys_markdown_says_so_and_names_its_successor_under_its_name(
    sample: SampleRelease,
) -> None:
    """An agent reading an entry's Markdown learns that it is deprecated, and what replaces it,
    under its name, before its facts and samples, in the words of the notice on its page;
    said once, so its status no longer repeats it. An active entry's Markdown starts with its
    name and summary, its lifecycle in its status as before."""
    text = page(sample, entry_markdown(DEPRECATED_ID))
    top = text[:text.index("> Hourly forecasts")]
    assert top == (
        "# Old Forecast API\n\n<!--nightly:notice-->\nLifecycle: **Deprecated**, deprecated by "
        "its provider on 2026-10-01. Successor: [Open-Meteo Forecast API]"
        "(../apis/open-meteo-forecast.md).\n\n"
        f"The provider on its deprecation: {DEPRECATION_NOTE}\n<!--/nightly-->\n\n")
    assert text.count("Lifecycle:") == text.count("The provider on its deprecation") == 1
    live = page(sample, entry_markdown(LIVE_ID))
    assert live.startswith("# Frankfurter\n\n> ") and "nightly:notice" not in live
    status = live[live.index("## Status"):live.index("## Builder score")]
    assert "\nLifecycle: **Active**, " in status


def test_a_deprecated_entrys_card_names_its_successor(sample: SampleRelease) -> None:
    """A card says what replaces a deprecated entry, by name and with a link, as the Markdown
    lists do, not only "Deprecated"; the search index carries the successor's id for the
    index's cards, only on a deprecated entry's item, so the rest cost nothing more."""
    html = page(sample, category_page("weather"))
    card = html[html.index(f'<li class="card" data-id="{DEPRECATED_ID}"'):]
    card = card[:card.index("</li>")]
    assert "Use Open-Meteo Forecast API instead." in " ".join(re.sub(r"<[^>]+>", "", card).split())
    assert ("a", {"href": "../apis/open-meteo-forecast.html"}) in Elements(card).tags
    assert html.count('class="successor"') == 1
    items = json.loads(page(sample, SEARCH_INDEX))["apis"]
    assert {item["id"]: item["successor"] for item in items if "successor" in item} == {
        DEPRECATED_ID: "open-meteo-forecast"}


def test_text_from_entries_stays_text_in_markdown(sample: SampleRelease) -> None:
    text = page(sample, entry_markdown(UNREACHABLE_ID))
    assert text.startswith(r'# \<img src=x onerror="alert(1)"\>Hostile API' + "\n")
    assert "\n" + r'> Shows \<script\>alert("pwned")\</script\> and \<b\>bold\</b\> tags as text.' \
        + "\n" in text
    # No markup but autolinks and the file's own marks of its nightly parts and static key.
    unmarked = re.sub(r"<!--(?:nightly:[a-z]+|/nightly|static:[0-9a-f]{32})-->", "", text)
    assert unmarked.count("\n") == text.count("\n") and len(text) - len(unmarked) < 300
    assert not re.search(r"(?<!\\)<(?!https://)", unmarked.split("```")[0])
    assert r"\</p\>\</article\>\<h1\>injected\</h1\>" in text
    assert r"- **Rate limit:** \<u\>100\</u\> requests/minute" in text
    assert "- **Auth header:** `# No auth required`" in text
    request = 'curl "https://hostile.example/v1/forecast?q=<b>x</b>"'
    assert f"```sh\n{request}\n```" in text  # code keeps its characters, inside a fence
    listing = page(sample, LLMS_TXT)
    assert r"[\<img src=x onerror=" in listing and not re.search(r"(?<!\\)<", listing)


def test_markdown_escaping_and_fences() -> None:
    from pipeline.release.markdown import code_block, code_span, markdown_text

    assert markdown_text("[x](javascript:alert(1)) *b* _i_ <b> `c` | ~s~ \\") == \
        r"\[x\](javascript:alert(1)) \*b\* \_i\_ \<b\> \`c\` \| \~s\~ \\"
    assert markdown_text("# Title\n\nnext") == r"\# Title next"
    assert markdown_text("1. first") == r"1\. first" and markdown_text("- item") == r"\- item"
    assert markdown_text("## Two") == r"\## Two" and markdown_text("---") == r"\---"
    for plain in ("1.5 s", "-5 C", "#tag", "C# and F#"):  # no markup: as written
        assert markdown_text(plain) == plain
    assert markdown_text("AT&T &amp; co") == r"AT&T \&amp; co"
    assert markdown_text(None) == "" and markdown_text(72) == "72"
    assert code_span("a ` b") == "``a ` b``" and code_span("`x`") == "`` `x` ``"
    assert code_block("a\n```\nb", "sh") == "````sh\na\n```\nb\n````"
    assert code_span("GET /v1/items") == "`GET /v1/items`" and code_span(" a\n b ") == "`a b`"


@pytest.mark.parametrize("value", [
    "plain", "", "x<y", "a & b", 'say "hi"', "it's", "<script>", 200, -3, 0, 2.5, 1e400,
    float("nan"), True, None, Markup("<b>kept</b>"), ["<a>"], {"k": "<v>"},
])
def test_a_printed_value_is_escaped_as_markupsafe_escapes_it(value: object) -> None:
    """Pages print values through `printed_text`, which makes no Markup where nothing is
    escaped: the text is the same as `markupsafe.escape` gives, and so is each page."""
    from markupsafe import escape

    assert pages.printed_text(value) == escape(value)
    template = pages.environment().from_string("<p>{{ value }}</p>")
    assert template.render(value=value) == f"<p>{escape(value)}</p>"


def test_escaped_markdown_texts_are_kept_apart_from_markdown_and_bounded(monkeypatch) -> None:
    """A text escaped once is read back escaped the same; Markdown equal to it stays as it is;
    the kept texts never pass their bound; long ones are not kept."""
    from pipeline.release import markdown
    from pipeline.release.markdown import Markdown, markdown_text

    monkeypatch.setattr(markdown, "_ESCAPED", {})
    monkeypatch.setattr(markdown, "_ESCAPED_LIMIT", 3)
    for _ in range(2):
        assert markdown_text("*bold* [x](y)") == r"\*bold\* \[x\](y)"
        assert markdown_text(Markdown("*bold* [x](y)")) == "*bold* [x](y)"
        assert markdown_text("1. first") == r"1\. first"
    assert markdown_text(1.5) == "1.5" and markdown_text(True) == "True"
    for n in range(10):
        assert markdown_text(f"_{n}_") == rf"\_{n}\_"
        assert 0 < len(markdown._ESCAPED) <= 3
    long = "*" + "a" * markdown._ESCAPED_LENGTH
    assert markdown_text(long) == r"\*" + long[1:] and long not in markdown._ESCAPED


def test_the_markdown_check_finds_links_to_missing_files() -> None:
    from pipeline.release.markdown import check_markdown

    files = {"apis/x.md": b"[up](../llms.txt) [gone](../apis/y.md) \\[not](a link)"}
    with pytest.raises(PageError) as failure:
        check_markdown(files, {"llms.txt": b"", **files})
    assert failure.value.problems == [
        "apis/x.md: link to ../apis/y.md leads to no file of the release"]


def commonmark_links(text: str) -> list[str]:
    """The link targets a CommonMark reader finds in `text`, in order."""
    from markdown_it import MarkdownIt

    found = []
    for block in MarkdownIt("commonmark").parse(text):
        found += [t.attrGet("href") for t in block.children or () if t.type == "link_open"]
    return found


@pytest.mark.parametrize("text", [
    "- **Auth header:** `Authorization: Bearer YOUR_TOKEN](x)`\n",
    '```json\n{"data": "See [the docs](https://threatfox.abuse.ch/api/)."}\n```\n',
    "````\n```\n[in](x)\n```\n````\n\n[out](y)\n",
    "~~~\n[in](x)\n~~~\n[out](y)\n",
    "```\n[in](x) never closed\n",
    "\\`[out](y)` and ``[in](x)`` `` ` ``[out](z)\n",
    "`not closed [out](y)\n\n`[in](x)`\n",
    "a `b\nc [in](x)` d [out](y)\n",
    "a `b\n\nc [out](x)` d\n",
    "\\\\`[in](x)`\n",
])
def test_the_markdown_check_reads_links_as_commonmark_does(text: str) -> None:
    """Code spans and fenced blocks hold no links; what a CommonMark reader links is checked."""
    from pipeline.release.markdown import markdown_problems

    problems = markdown_problems("apis/x.md", text, {"llms.txt"})
    assert problems == [f"apis/x.md: link to {target} leads to no file of the release"
                        for target in commonmark_links(text)]


def test_an_entry_with_link_syntax_in_its_code_publishes(
    tmp_path: Path, write_entry, data_dir: Path,
) -> None:
    sample = '{"query_status": "ok", "data": "See [the docs](https://threatfox.abuse.ch/api/)."}'
    header = "Authorization: Bearer YOUR_TOKEN](x)"
    write_entry(make_entry(id="threatfox", sampleResponse=sample), name="threatfox")
    write_entry(make_entry(id="bearer", authExample=header, sampleRequest=(
        'curl -H "Authorization: Bearer YOUR_TOKEN" "https://api.example.com/v1/forecast"')),
        name="bearer")
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, tmp_path / "public", BASE_URL, CATEGORIES, NOW)
    threatfox = (tmp_path / "public" / entry_markdown("threatfox")).read_text()
    assert "[the docs](https://threatfox.abuse.ch/api/)" in threatfox
    assert "https://threatfox.abuse.ch/api/" not in commonmark_links(threatfox)
    bearer = (tmp_path / "public" / entry_markdown("bearer")).read_text()
    assert f"- **Auth header:** `{header}`" in bearer and "x" not in commonmark_links(bearer)


def test_a_sample_response_shows_every_token_as_the_entry_wrote_it(
    tmp_path: Path, write_entry, data_dir: Path,
) -> None:
    """Indented for reading, never parsed and dumped: `9.90`, `1e5`, both of two equal keys,
    and `1e400` (which Python would dump as `Infinity`, no JSON) stay as written, in the page
    (whose copy button copies it) and in the Markdown."""
    written = '{"price": 9.90, "big": 1e5, "a": 1, "a": 2, "x": 1e400, "e": [], "s": "\\u00e9,"}'
    shown = ('{\n  "price": 9.90,\n  "big": 1e5,\n  "a": 1,\n  "a": 2,\n  "x": 1e400,\n'
             '  "e": [],\n  "s": "\\u00e9,"\n}')
    assert pages.shown_sample(written) == (shown, True)
    assert pages.shown_sample('{"x": NaN}') == ('{"x": NaN}', False)  # not JSON
    plain = '{"list": [1, {"b": {}}], "n": null, "t": "x"}'
    assert pages.shown_sample(plain)[0] == json.dumps(json.loads(plain), indent=2)
    write_entry(make_entry(id="prices", sampleResponse=written), name="prices")
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, tmp_path / "public", BASE_URL, CATEGORIES, NOW)
    html = (tmp_path / "public" / entry_page("prices")).read_text()
    assert Elements(html).text["sample-response"] == shown
    text = (tmp_path / "public" / entry_markdown("prices")).read_text()
    assert f"## Sample response\n\n```json\n{shown}\n```\n" in text


def commonmark_headings(text: str) -> list[str]:
    """The text of each heading a CommonMark reader finds in `text`, in order."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(text)
    return [inline.content if not inline.children else
            "".join(t.content for t in inline.children)
            for opening, inline in pairwise(tokens) if opening.type == "heading_open"]


@pytest.mark.parametrize("name", ["Channel #", "Channel ##", "# #", "C# and F#", "Issue #12"])
def test_a_heading_from_an_entry_reads_as_written_in_commonmark(name: str) -> None:
    from pipeline.release.markdown import markdown_text

    assert commonmark_headings(f"# {markdown_text(name)}\n") == [name]


def test_an_entry_reads_in_commonmark_as_on_its_page(
    tmp_path: Path, write_entry, data_dir: Path,
) -> None:
    """A name ending in `#` keeps it in the Markdown's heading; an address whose scheme is in
    capitals is a link there, as on the page."""
    docs = "HTTPS://docs.example.test/x"
    write_entry(make_entry(id="channel", name="Channel #", docsUrl=docs), name="channel")
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, tmp_path / "public", BASE_URL, CATEGORIES, NOW)
    text = (tmp_path / "public" / entry_markdown("channel")).read_text()
    assert commonmark_headings(text)[0] == "Channel #"
    assert "- **Documentation:** <HTTPS://docs.example.test/x>" in text
    assert commonmark_links(text).count(docs) == 1
    html = Elements((tmp_path / "public" / entry_page("channel")).read_text())
    assert ("a", {"href": docs, "rel": "noopener noreferrer"}) in html.tags
    listing = (tmp_path / "public" / LLMS_TXT).read_text()
    assert "- [Channel \\#](apis/channel.md)" in listing


def test_the_404_page_links_from_the_sites_root(sample: SampleRelease) -> None:
    html = Elements(page(sample, NOT_FOUND_PAGE))
    links = [a.get("href") or a.get("src") for t, a in html.tags if t in ("a", "link", "script")]
    local = [link for link in links if not link.startswith("#")]
    assert local and all(link.startswith("/") for link in local)
    for link in local:
        assert (sample.folder / link.lstrip("/")).is_file(), link
    assert "/index.html" in local and "/llms.txt" in local
    assert check_pages({"404.html": b'<a href="/sub/index.html">x</a>', "index.html": b""},
                       "/sub/") == []
    assert check_pages({"404.html": b'<a href="/index.html">x</a>', "index.html": b""},
                       "/sub/") == ["404.html: link to /index.html starts at the host's root, "
                                    "not at the page"]
    assert check_pages({"index.html": b'<a href="/index.html">x</a>'}) == [
        "index.html: link to /index.html starts at the host's root, not at the page"]
    assert pages.site_root("https://example.org/directory/") == "/directory/"
    assert pages.site_root("https://example.org") == "/"


def test_the_sitemap_lists_every_page_by_its_address_and_robots_names_it(
    sample: SampleRelease,
) -> None:
    from xml.etree import ElementTree

    from pipeline.release.crawlers import SITEMAP_NS

    root = ElementTree.fromstring((sample.folder / SITEMAP).read_bytes())
    assert root.tag == f"{{{SITEMAP_NS}}}urlset"
    locations = [loc.text for loc in root.iter(f"{{{SITEMAP_NS}}}loc")]
    apis = json.loads(page(sample, FULL_DATASET))["apis"]
    assert locations[0] == f"{BASE_URL}/"
    assert sorted(locations[1:]) == sorted(
        [f"{BASE_URL}/{category_page(c)}" for c in CATEGORY_IDS]
        + [f"{BASE_URL}/{entry_page(api['id'])}" for api in apis])
    assert page(sample, ROBOTS) == (
        "# API Directory: crawl every page and document; the kept releases are copies.\n"
        "User-agent: *\nDisallow: /api/releases/\n\n"
        f"Sitemap: {BASE_URL}/sitemap.xml\n")


def test_a_large_site_gets_a_sitemap_index_and_every_sitemap_is_checked() -> None:
    from pipeline.release.crawlers import check_sitemaps, robots_txt, sitemap_files

    base = "https://example.org/directory/"
    paths = ["", "categories/ai.html", "apis/a.html", "apis/b.html", "apis/c&d.html"]
    release = {"index.html": b"", **{path: b"" for path in paths[1:]}}
    files = sitemap_files(paths, base, limit=3)
    assert sorted(files) == ["sitemap.xml", "sitemaps/1.xml", "sitemaps/2.xml"]
    assert b"<sitemapindex" in files["sitemap.xml"]
    assert b"<loc>https://example.org/directory/sitemaps/2.xml</loc>" in files["sitemap.xml"]
    assert b"<loc>https://example.org/directory/apis/c&amp;d.html</loc>" in files[
        "sitemaps/2.xml"]
    check_sitemaps(files, release, base, limit=3)
    assert sitemap_files(paths, base, limit=5).keys() == {"sitemap.xml"}
    assert b"Disallow: /directory/api/releases/" in robots_txt(base)
    broken = {"sitemap.xml": files["sitemaps/1.xml"].replace(b"directory/", b"elsewhere/"),
              "sitemaps/1.xml": b"<urlset>", "sitemaps/2.xml": files["sitemaps/2.xml"]}
    with pytest.raises(PageError) as failure:
        check_sitemaps(broken, {}, base, limit=1)
    problems = failure.value.problems
    assert "sitemap.xml: https://example.org/elsewhere/ is no file of the release at " \
           "https://example.org/directory/" in problems
    assert any(p.startswith("sitemaps/1.xml: not well-formed XML") for p in problems)
    assert "sitemaps/2.xml: more than 1 addresses or 50 MB" in problems
    assert "sitemaps/2.xml: https://example.org/directory/apis/c&d.html is no file of the " \
           "release at https://example.org/directory/" in problems


def test_a_sitemap_that_breaks_the_protocol_fails_the_publish(
    sample: SampleRelease, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.release import site

    out = tmp_path / "public"
    shutil.copytree(sample.folder, out)
    live = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real_files = site.crawler_files
    monkeypatch.setattr(site, "crawler_files", lambda *args: {
        **real_files(*args), SITEMAP: b'<urlset xmlns="http://www.sitemaps.org/schemas/'
        b'sitemap/0.9"><url><loc>https://elsewhere.test/</loc></url></urlset>'})
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with Session(engine) as session, pytest.raises(PageError, match=r"elsewhere\.test"):
        publish_release(session, out, BASE_URL, CATEGORIES, NOW)
    engine.dispose()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == live


def test_the_page_check_reads_tags_as_a_browser_does() -> None:
    release = {"index.html": b"", "a.html": b""}
    quoted = ('<p data-search="&lt;img src=x&gt;" title=\'a > b\'><a href="a.html">a</a></p>'
              '<script src="a.html">if (a < b) { document.write("</p>") }</script>'
              '<svg><circle r="1"/></svg><!-- <b> --><br>')
    assert pages.page_problems("index.html", quoted, release) == []
    broken = '<main>\n<a href="b.html?x=1">b</a>\n<p><b>x</p>\n</main><div>'
    assert pages.page_problems("index.html", broken, release) == [
        "index.html: line 3: </p> closes <b>",
        "index.html: line 4: </main> closes <b>",
        "index.html: unclosed <main>, <p>, <b>, <div>",
        "index.html: link to b.html?x=1 leads to no file of the release",
    ]
    balanced = '<p><a href="b.html">b</a><a href="/a.html">a</a><img src="a.html"></p>'
    assert pages.page_problems("index.html", balanced, release) == [
        "index.html: link to b.html leads to no file of the release",
        "index.html: link to /a.html starts at the host's root, not at the page",
    ]


def restaged(sample: SampleRelease, folder: Path) -> Path:
    """The sample release's documents as they are staged before `write_site` runs."""
    shutil.copytree(sample.folder, folder, ignore=shutil.ignore_patterns(
        "*.html", "*.md", "llms.txt", "sitemap*", "assets", "robots.txt"))
    return folder


def release_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file()}


def test_the_site_streamed_in_worker_processes_is_the_site_published(
    sample: SampleRelease, tmp_path: Path
) -> None:
    from pipeline.release.site import write_site

    published = release_files(sample.folder)
    for workers in (1, 2):
        staging = restaged(sample, tmp_path / f"workers-{workers}")
        assert release_files(staging) != published
        write_site(staging, BASE_URL, workers=workers)
        assert release_files(staging) == published


def test_an_entry_page_with_a_dead_link_is_refused_by_name(
    sample: SampleRelease, tmp_path: Path
) -> None:
    from pipeline.release.site import write_site

    staging = restaged(sample, tmp_path / "staging")
    dataset = staging / FULL_DATASET
    lines = dataset.read_bytes().split(b"\n")
    number = next(n for n, line in enumerate(lines) if f'"id":"{LIVE_ID}"'.encode() in line)
    entry = json.loads(lines[number].removesuffix(b","))
    entry["lifecycle"] = {"state": "deprecated", "successor": "no-such-api"}
    lines[number] = json.dumps(entry).encode() + (b"," if lines[number].endswith(b",") else b"")
    dataset.write_bytes(b"\n".join(lines))
    for workers in (1, 2):
        with pytest.raises(PageError) as failure:
            write_site(staging, BASE_URL, workers=workers)
        assert failure.value.problems == [
            f"apis/{LIVE_ID}.html: link to ../apis/no-such-api.html leads to no file of the "
            "release",
            f"apis/{LIVE_ID}.md: link to ../apis/no-such-api.md leads to no file of the release",
            # its card names its successor too
            "categories/finance.html: link to ../apis/no-such-api.html leads to no file of the "
            "release"]


def test_pages_written_over_a_reused_folder_are_the_pages_of_a_new_one(
    sample: SampleRelease, tmp_path: Path
) -> None:
    """A staging folder that reuses a spare release's entry pages (`swap.stage_and_swap`) gets
    the site a new one gets: each entry's page and Markdown overwrite the file of the same name
    in place (its inode kept), the files of entries gone are removed before any page may link
    to them, and a link or a file linked from elsewhere is replaced, never written through."""
    from pipeline.release.site import write_site

    published = release_files(sample.folder)
    for workers in (1, 2):
        staging = restaged(sample, tmp_path / f"reused-{workers}")
        spare = staging / "apis"
        spare.mkdir(exist_ok=True)
        kept = spare / Path(entry_page(LIVE_ID)).name
        kept.write_bytes(b"x" * 200_000)  # larger than the page: the rest is cut off
        inode = kept.stat().st_ino
        (spare / "gone-api.html").write_text("<p>an entry no longer published</p>")
        (spare / "gone-api.md").write_text("gone")
        outside = tmp_path / f"outside-{workers}.html"
        outside.write_text("not the release's")
        (spare / Path(entry_page("stripe")).name).symlink_to(outside)
        shared = tmp_path / f"shared-{workers}.md"
        shared.write_text("another release's file")
        os.link(shared, spare / Path(entry_markdown("stripe")).name)
        write_site(staging, BASE_URL, workers=workers)
        assert release_files(staging) == published
        assert kept.stat().st_ino == inode
        assert outside.read_text() == "not the release's"
        assert shared.read_text() == "another release's file"
        assert not (spare / Path(entry_page("stripe")).name).is_symlink()


def lifecycle_state(entry: dict) -> str | None:
    return (entry.get("lifecycle") or {}).get("state")


def next_night(sample: SampleRelease, folder: Path, edit: dict[str, dict] | None = None) -> Path:
    """The sample release's documents staged as the night after would stage them: every
    entry's nightly fields (`pages.NIGHTLY_FIELDS`) taken from the entry after it, a new
    version and time, and the entries in `edit` with those fields set. A deprecated lifecycle
    stays with its entry, as it follows the entry's curated `deprecated`, a field of its key."""
    staging = restaged(sample, folder)
    dataset = staging / FULL_DATASET
    lines = dataset.read_bytes().split(b"\n")
    numbers = [n for n, line in enumerate(lines)
               if line.startswith(b'{"') and not line.startswith(b'{"apis":')]
    entries = [json.loads(lines[n].removesuffix(b",")) for n in numbers]
    for number, entry, following in zip(numbers, entries, entries[1:] + entries[:1], strict=True):
        changed = {**entry, **{name: following.get(name) for name in pages.NIGHTLY_FIELDS}}
        if "deprecated" in (lifecycle_state(entry), lifecycle_state(following)):
            changed["lifecycle"] = entry.get("lifecycle")
        changed.update((edit or {}).get(entry["id"], {}))
        lines[number] = json.dumps(changed).encode() + (
            b"," if lines[number].endswith(b",") else b"")
    dataset.write_bytes(b"\n".join(lines))
    index = staging / SEARCH_INDEX
    index.write_bytes(index.read_bytes().replace(b"20261121", b"20261122"))
    return staging


def next_night_trends(sample: SampleRelease) -> dict[str, tuple[SentDay, ...]]:
    ids = [path.stem for path in (sample.folder / "apis").glob("*.html")]
    day = NOW.date() + timedelta(days=1)
    return {entry_id: sent_days(DayFigures(day - timedelta(days=k), 24, 24 - k % 3, 90.0 + k)
                                for k in range(12)) for entry_id in ids}


def never_spliced(release: Path) -> set[str]:
    """The release's entries whose own text could stand for a mark (a sample response holding
    an HTML comment): `pages.may_splice` refuses them, whatever the night before kept, so the
    counts below follow the catalogue's data rather than assume none."""
    return {json.loads(line)["id"] for line in dataset_lines(release / FULL_DATASET)
            if not pages.may_splice(line)}


def test_a_night_draws_only_the_nightly_parts_of_an_unchanged_entrys_page(
    sample: SampleRelease, tmp_path: Path
) -> None:
    from pipeline.release.site import write_site

    trends = next_night_trends(sample)
    whole = next_night(sample, tmp_path / "whole")
    drawn = write_site(whole, BASE_URL, trends, workers=1)
    assert (drawn.entries, drawn.spliced) == (len(trends), 0)
    expected = release_files(whole)
    assert expected[entry_page(LIVE_ID)] != page(sample, entry_page(LIVE_ID)).encode()
    # The page before, with a word of its static part changed, shows the parts were reused.
    before = tmp_path / "before"
    shutil.copytree(sample.folder, before)
    marked = before / entry_page(LIVE_ID)
    marked.write_text(marked.read_text().replace(">At a glance<", ">At a glance!<"))
    for workers in (1, 2):
        staging = next_night(sample, tmp_path / f"spliced-{workers}")
        report = write_site(staging, BASE_URL, trends, workers=workers, previous=before)
        assert report == drawn.__class__(len(trends), len(trends) - len(never_spliced(staging)))
        found = release_files(staging)
        assert found.pop(entry_page(LIVE_ID)) == expected[entry_page(LIVE_ID)].replace(
            b">At a glance<", b">At a glance!<")
        assert found == {path: data for path, data in expected.items()
                         if path != entry_page(LIVE_ID)}


def test_a_page_is_drawn_whole_when_its_entry_or_the_page_before_is_not_as_kept(
    sample: SampleRelease, tmp_path: Path
) -> None:
    from pipeline.release.site import write_site

    trends = next_night_trends(sample)
    edit = {
        LIVE_ID: {"description": "A new description."},
        ONLINE_ID: {"longDescription": "Says <!--nightly:status--> in its text."},
    }
    whole = next_night(sample, tmp_path / "whole", edit)
    write_site(whole, BASE_URL, trends, workers=1)
    before = tmp_path / "before"
    shutil.copytree(sample.folder, before)
    outside = tmp_path / "outside.html"
    outside.write_bytes((before / entry_page("stripe")).read_bytes())
    (before / entry_page("stripe")).unlink()
    (before / entry_page("stripe")).symlink_to(outside)  # never read through a link
    (before / entry_page("assemblyai")).unlink()  # no page the night before
    doubled = before / entry_page("openweathermap")  # a part marked twice
    doubled.write_text(doubled.read_text().replace(
        "</main>", "<!--nightly:score--><!--/nightly--></main>"))
    damaged = before / entry_markdown("ably-pubsub-rest")  # its Markdown lost its key
    damaged.write_text(re.sub(r"<!--static:\w+-->", "", damaged.read_text()))
    huge = before / entry_page("brave-search")  # larger than any page a template draws
    huge.write_text(huge.read_text() + " " * entry_site.PREVIOUS_FILE_LIMIT)
    staging = next_night(sample, tmp_path / "spliced", edit)
    report = write_site(staging, BASE_URL, trends, workers=1, previous=before)
    kept_otherwise = {LIVE_ID, ONLINE_ID, "stripe", "assemblyai", "openweathermap",
                      "ably-pubsub-rest", "brave-search"}
    assert report.spliced == len(trends) - len(kept_otherwise | never_spliced(staging))
    assert release_files(staging) == release_files(whole)
    assert "A new description." in page(SampleRelease(staging, {}), entry_page(LIVE_ID))


def test_the_static_key_holds_everything_but_the_nightly_fields() -> None:
    common = {"labels": {"finance": "Finance"}, "assets": {"site.css": "assets/site.1.css"}}
    api = {"id": "x", "category": "finance", "description": "d", "status": {"state": "live"}}
    key = pages.static_key(api, common)
    assert pages.static_key({**api, "status": {"state": "unreachable"}, "uptime": None}, common) \
        == key
    assert pages.static_key({**api, "description": "e"}, common) != key
    assert pages.static_key(api, {**common, "labels": {"finance": "Money"}}) != key
    assert pages.static_key(api, {**common, "assets": {"site.css": "assets/site.2.css"}}) != key


def test_a_page_of_the_night_before_is_spliced_as_bytes() -> None:
    """Its bytes outside the nightly parts are kept as written, never decoded and encoded
    again; the parts drawn are written as UTF-8; a part not marked once is no splice."""
    before = "<p>Café — <!--static:k--><!--nightly:a-->old<!--/nightly--> ∎</p>".encode()
    assert pages.kept_key(before, "k") and not pages.kept_key(before, "j")
    assert pages.spliced(before, {"a": "new — ✓"}) == (
        "<p>Café — <!--static:k--><!--nightly:a-->new — ✓<!--/nightly--> ∎</p>".encode())
    assert pages.spliced(before, {"a": "x", "b": "y"}) is None
    assert pages.spliced(before.replace(b"<!--/nightly-->", b""), {"a": "x"}) is None
    assert pages.spliced(before + b"<!--nightly:a-->x<!--/nightly-->", {"a": "x"}) is None


def test_a_file_of_the_night_before_is_read_as_its_bytes(tmp_path: Path) -> None:
    """Read whole, to the size its folder gave, as bytes; a file larger than the limit, a
    link or a folder is not read; text is read only when it is UTF-8."""
    from pipeline.release.files import Folders

    (tmp_path / "apis").mkdir()
    (tmp_path / "apis" / "a.html").write_bytes("Café —".encode() * 5000)
    (tmp_path / "apis" / "b.md").write_bytes(b"caf\xe9")
    (tmp_path / "apis" / "empty.md").write_bytes(b"")
    (tmp_path / "apis" / "link.html").symlink_to(tmp_path / "apis" / "a.html")
    with Folders(tmp_path) as folders:
        assert folders.read_bytes("apis/a.html", 1 << 20) == "Café —".encode() * 5000
        assert folders.read_bytes("apis/a.html", 100) is None
        assert folders.read_bytes("apis/b.md", 100) == b"caf\xe9"
        assert folders.read("apis/b.md", 100) is None
        assert folders.read_bytes("apis/empty.md", 100) == b""
        assert folders.read_bytes("apis/link.html", 1 << 20) is None
        assert folders.read_bytes("apis", 1 << 20) is None
        assert folders.read_bytes("apis/none.html", 1 << 20) is None


def test_a_template_calls_plain_functions_itself_and_the_rest_as_jinja_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain function (`entry_page`, a text's `strip`) is called by the template's own code;
    a function that asks for the context, a macro or a class still goes through
    `context.call`, and gets what it asks for (in a loop, the loop's variables)."""
    from jinja2 import pass_context
    from jinja2.runtime import Context

    through_jinja: list[str] = []
    call = Context.call

    def counted(self: Context, callee: object, *args: object, **kwargs: object) -> object:
        through_jinja.append(getattr(callee, "__name__", type(callee).__name__))
        return call(self, callee, *args, **kwargs)

    monkeypatch.setattr(Context, "call", counted)

    def plain(text: str) -> str:
        return text.strip().upper()

    @pass_context
    def named(context: Context, word: str) -> str:
        return f"{context['who']}:{word}"

    env = pages.DocumentEnvironment(autoescape=True)
    env.globals.update(plain=plain, named=named, who="page")
    template = env.from_string(
        "{% macro m(x) %}<{{ x }}>{% endmacro %}{{ plain(' a ') }}|{{ ' b '.strip() }}|"
        "{{ named('c') }}|{{ m('d') }}|{{ dict(e=1).e }}|"
        "{% for i in [1] %}{% set who = 'loop' %}{{ named('f') }}{% endfor %}")
    assert template.render() == "A|b|page:c|<d>|1|loop:f"
    assert through_jinja == ["named", "Macro", "dict", "named"]


def test_an_entry_whose_text_could_stand_for_a_mark_is_never_spliced() -> None:
    assert pages.may_splice(b'{"description":"<b>bold</b> --> and <!- not a comment"}')
    for text in (b"<!--nightly:status-->", b"<!--", b"\\u003c!--", b"\\u003C!--"):
        assert not pages.may_splice(b'{"description":"' + text + b'"}')


def test_a_spliced_page_is_refused_for_a_dead_link_in_its_nightly_parts(
    sample: SampleRelease, tmp_path: Path
) -> None:
    """The nightly parts of a spliced page are checked: a successor that is no entry of the
    release (its lifecycle is a nightly field, so the page is spliced) stops the publish."""
    from pipeline.release.site import write_site

    trends = next_night_trends(sample)
    edit = {LIVE_ID: {"lifecycle": {"state": "deprecated", "successor": "no-such-api"}}}
    whole = next_night(sample, tmp_path / "whole")
    assert write_site(whole, BASE_URL, trends, workers=1).spliced == 0
    staging = next_night(sample, tmp_path / "spliced", edit)
    with pytest.raises(PageError) as failure:
        write_site(staging, BASE_URL, trends, workers=1, previous=whole)
    assert failure.value.problems == [
        f"apis/{LIVE_ID}.html: link to ../apis/no-such-api.html leads to no file of the release",
        f"apis/{LIVE_ID}.md: link to ../apis/no-such-api.md leads to no file of the release",
        "categories/finance.html: link to ../apis/no-such-api.html leads to no file of the "
        "release"]  # its card names its successor too


def test_every_nightly_part_of_a_page_is_drawn_by_a_macro_balanced_by_construction() -> None:
    """Each nightly part of a spliced page is read only for links: its macro's tags balance for
    any entry, read from the templates once."""
    assert entry_site.proven_parts() == set(entry_site.NIGHTLY_PAGE_MACROS)


# Macros over text (`x`, `y`, `xs`): balanced for any of it, or not known to be.
BALANCED_MACROS = {
    "words in a tag": '<p class="a {{ x }}{% if y %} b{% endif %}">{{ x | lower }}</p>',
    "a branch of whole tags": "{% if y %}<b>{{ y }}</b>{% elif x %}<i></i>{% else %}-{% endif %}",
    "a loop of whole tags":
        "<ul>{% for i in xs %}<li>{{ i }}</li>{% else %}<li></li>{% endfor %}</ul>",
    "a proven macro": "<p>{{ inner(x) }}</p>",
    "a plain function": '<a href="{{ entry_page(x) }}">{{ x }}</a>',
    "a proven part passed in": "<p>{{ badges }} {{ x }}</p>",
}
UNPROVEN_MACROS = {
    "a tag opened in a branch": "{% if y %}<div>{% endif %}<p></p>{% if y %}</div>{% endif %}",
    "a tag ended in a branch": '<span class="a{% if y %}">{% else %}">{% endif %}</span>',
    "a quote in a branch": '<a title="{% if y %}"{% endif %}>b</a>',
    "a tag opened in a loop": "{% for i in xs %}<li>{% endfor %}",
    "unbalanced": "<p><b></p>",
    "a value as an attribute": "<span {{ x }}>t</span>",
    "a value unquoted": "<span class={{ x }}>t</span>",
    "a value marked safe": "<p>{{ x | safe }}</p>",
    "a filter that makes markup": "<p>{{ x | urlize }}</p>",
    "a function not known": "<p>{{ other(x) }}</p>",
    "a block assigned": "{% set a %}<b>{% endset %}<p>{{ a }}</p>",
    "a link attribute in capitals": '<a HREF="{{ x }}">x</a>',
    "a macro not proven": "<p>{{ broken(x) }}</p>",
    "a proven part passed in, in an attribute": '<p title="{{ badges }}">t</p>',
}


@pytest.mark.parametrize("body", [*BALANCED_MACROS.values(), *UNPROVEN_MACROS.values()],
                         ids=[*BALANCED_MACROS, *UNPROVEN_MACROS])
def test_a_macro_is_balanced_by_construction_only_when_each_branch_is(body: str) -> None:
    from jinja2 import DictLoader

    from pipeline.release.fragments import _proven

    source = ("{% macro inner(x) %}<b>{{ x }}</b>{% endmacro %}"
              "{% macro broken(x) %}<b>{{ x }}{% endmacro %}"
              "{% macro m(x, y, xs, badges) %}" + body + "{% endmacro %}")
    env = pages.DocumentEnvironment(loader=DictLoader({"t.html": source}), autoescape=True)
    env.filters.update(pages.SHARED_FILTERS)
    env.globals.update(entry_page=entry_page)
    assert ("m" in _proven(env, "t.html")) == (body in BALANCED_MACROS.values())


def test_a_card_is_read_for_its_links_alone_as_its_tags_balance_by_construction(
    sample: SampleRelease,
) -> None:
    """A category page's cards are drawn by a macro whose tags balance for any entry, given its
    entry's badges: each card is read for its links alone, the very links its tags hold, also
    when the entry's text looks like a link."""
    assert entry_site.cards_proven()
    api = json.loads(page(sample, entry_document(LIVE_ID)))["api"]
    api.update(name='x" href="../nowhere.html', description="<a href='../nowhere.html'>y</a>",
               tags=["src=../nowhere.html"])
    presented = pages.presented_entry(api)
    card = str(pages.card_html(presented, {api["category"]: "Label"},
                               pages.entry_badges(presented)))
    links = [f"../{entry_page(LIVE_ID)}", f"../{category_page(api['category'])}"]
    assert pages.part_links(card) == pages._balanced_links(card) == links


def test_a_macro_drawn_by_its_function_is_the_macro_drawn(sample: SampleRelease) -> None:
    """The nightly parts are drawn by the functions Jinja compiled their macros to, called with
    every argument: the same text as the macros called by name."""
    from jinja2 import DictLoader

    nightly = pages.macros("_entry_nightly.html")
    for entry_id in (LIVE_ID, ONLINE_ID, UNREACHABLE_ID, DEPRECATED_ID, BARE_ID):
        api = pages.presented_entry(json.loads(page(sample, entry_document(entry_id)))["api"])
        drawn = pages.page_macro("_entry_nightly.html", "status_section")(api, "", "../", None)
        assert drawn == str(nightly.status_section(api, "", "../"))
        assert pages.entry_badges(api) == pages.macros("_macros.html").entry_badges(api)
    env = pages.DocumentEnvironment(loader=DictLoader({"t.html": (
        "{% macro m(x) %}{{ caller() }}{% endmacro %}{% macro v() %}{{ varargs }}{% endmacro %}")}))
    module = env.get_template("t.html").module
    for name in ("m", "v"):
        with pytest.raises(TypeError):
            pages.macro_text(module, name)


def test_an_entrys_days_reach_the_page_workers_equal_and_small() -> None:
    """The page workers are sent 30 days of figures for every entry: each day as its ordinal
    and three numbers in a plain tuple, pickled without a call of Python code on either side,
    and drawn as the days themselves would be."""
    last = NOW.date()
    days = [DayFigures(last - timedelta(days=k), 24, 23 - k % 3,
                       None if k % 7 == 0 else 40.5 + k) for k in range(30)]
    sent = sent_days(days)
    data = pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data) == sent
    assert [(date.fromordinal(o), p, s, m) for o, p, s, m in sent] == [
        (d.day, d.probes, d.successes, d.p50_ms) for d in days]
    assert b"day_figures" not in data  # no function named to unpickle a day
    assert len(data) < 30 * 30


@pytest.mark.parametrize("timed", ["every day", "no day", "every other day"])
def test_the_trend_chart_balances_its_tags_for_every_count_of_days(timed: str) -> None:
    """A spliced page's check leaves its trend chart out: the chart is drawn from numbers and
    dates alone, so its tags are those of its count of days, each checked here."""
    last = NOW.date()
    for count in range(pages.TREND_DAYS + 2):
        days = [DayFigures(last - timedelta(days=k), 24, 24 - k % 5,
                           None if timed == "no day" or (timed != "every day" and k % 2)
                           else 50.0 + 40 * k)
                for k in range(count)]
        chart = pages.trend_svg(sent_days(days), last)
        assert (chart == "") == (count == 0)
        assert pages.page_problems(entry_page("x"), chart, frozenset()) == []
        assert pages._balanced_links(chart) == []  # balanced, and links nowhere
        shown = min(count, pages.TREND_DAYS)
        assert chart.count("<rect ") == (shown + 1 if shown else 0)


def test_a_whole_free_quota_is_published_as_written(sample: SampleRelease) -> None:
    """OpenWeather's free plan allows 1,000,000 calls a month, written `amount: 1000000`: the
    entry and its score's evidence publish 1000000, not 1000000.0 as a float field had it; a
    fraction stays one. So does a fee's whole percent (Paddle's 5 %)."""
    text = page(sample, "api/apis/openweathermap.json")
    assert '"amount":1000000,' in text and '"freeQuotaAmount":1000000,' in text
    assert "1000000.0" not in text
    fraction = page(sample, "api/apis/huggingface-inference-providers.json")
    assert '"amount":0.1,' in fraction
    fee = page(sample, "api/apis/paddle-billing.json")  # a whole percent, as written
    assert '"transactionFee":{"fixedCents":50,"note":' in fee and '"percent":5}' in fee
