"""Headless Chromium reads the release as nginx serves it: the index built from the search
index, filter, search, show more, open an entry, copy; a category page's search and sort; grade
badges readable in both colour schemes; every page fitting a phone; the 404 page; and a page on
another origin reads and revalidates a document from nginx and `apidir serve`.

Chromium is Debian's package (`make test` installs it), driven by Playwright with a fresh
profile and every background service off, since the machine has no network beyond loopback.
Screenshots go to `test-output/browser/` (created by the tests, ignored by git): the index, a
category and an entry page at desktop (1280 px) and phone (375 px) widths, and the grade badges
in the light and dark schemes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, Request, expect, sync_playwright

from pipeline.contract import CATEGORY_IDS
from pipeline.judging.score import GRADE_BANDS
from pipeline.release.hosting import LIVE_CACHE
from pipeline.release.layout import FULL_DATASET, NOT_FOUND_PAGE, SEARCH_INDEX, entry_document
from pipeline.release.pages import (
    INDEX_PAGE,
    INDEX_PAGE_SIZE,
    NO_AUTH_HEADER,
    asset_files,
    category_page,
    entry_badges,
    entry_page,
    latency_wanting,
    page_context,
    presented_entry,
    render_entry_page,
    score_key,
)
from tests.conftest import REPO
from tests.site_release import (
    DEPRECATED_ID,
    HOSTILE_NAME,
    LIVE_ID,
    LONG_NAME,
    LONG_NAME_ID,
    ONLINE_ID,
    UNREACHABLE_ID,
    SampleRelease,
    publish_sample_release,
)
from tests.static_host import run_nginx, run_other_origin, run_serve

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "test-output" / "browser"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleRelease:
    return publish_sample_release(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def site(sample: SampleRelease, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with run_nginx(sample.folder, tmp_path_factory.mktemp("nginx")) as base_url:
        yield base_url


# The screens pages are read on: a desktop, and a phone 375 px wide at twice the pixel density.
SCREENS: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1280, "height": 900}},
    "phone": {"viewport": {"width": 375, "height": 812}, "device_scale_factor": 2},
}


@contextmanager
def chromium(profile: Path, **options: Any) -> Iterator[BrowserContext]:
    """Headless Chromium with a fresh profile and the given screen (viewport, pixel density)."""
    if not CHROMIUM.is_file():
        raise RuntimeError("chromium is not installed: run `make test`, which installs it")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            **options,
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    with chromium(tmp_path / "profile", **SCREENS["desktop"]) as context:
        yield context


class Watch:
    """Console errors, failed requests and dialogs of a page: a working page has none."""

    def __init__(self, page: Page) -> None:
        self.problems: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.problems.append(m.text))
        page.on("pageerror", lambda e: self.problems.append(str(e)))
        page.on("requestfailed", self._failed)
        page.on("response", lambda r: r.status >= 400 and self.problems.append(
            f"{r.status}: {r.url}"))
        page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))

    def _failed(self, request: Request) -> None:
        """A failed request is a problem, but for the favicon aborted by the next page opened:
        Chromium fetches it after the load event `goto` waits for, so a test that opens pages
        one after another can cut it short (net::ERR_ABORTED), with nothing wrong in the page.
        A favicon the host does not serve still answers 404, which `response` reports."""
        if request.failure == "net::ERR_ABORTED" and "/favicon." in urlsplit(request.url).path:
            return
        self.problems.append(f"failed: {request.url} ({request.failure})")


def visible_cards(page: Page) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "#api-list > li:not([hidden])",
        "cards => cards.map(c => ({id: c.dataset.id, category: c.dataset.category,"
        " name: c.dataset.name}))",
    )


def test_filter_search_and_open_an_entry(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    apis = json.loads((sample.folder / "api" / "apis.json").read_text())["apis"]
    page = browser.new_page()
    watch = Watch(page)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(urlsplit(request.url).path))
    page.goto(f"{site}/index.html")
    expect(page.locator("#filters")).to_be_visible()  # the script ran under the policy
    expect(page.locator("#result-count")).to_have_text(f"{len(apis)} APIs")
    assert f"/{SEARCH_INDEX}" in fetched and f"/{FULL_DATASET}" not in fetched
    assert len(visible_cards(page)) == min(len(apis), INDEX_PAGE_SIZE)

    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"

    page.select_option("#filter-category", "finance")
    finance = sorted(a["id"] for a in apis if a["category"] == "finance")
    assert sorted(card["id"] for card in visible_cards(page)) == finance
    expect(page.locator("#result-count")).to_have_text(
        f"Showing {len(finance)} of {len(apis)} APIs"
    )

    page.fill("#filter-q", "currency exchange")
    matches = [a["id"] for a in apis if a["category"] == "finance"
               and all(w in " ".join([a["name"], a["provider"], a.get("description", ""),
                                      *a.get("tags", [])]).lower() for w in ("currency",
                                                                              "exchange"))]
    assert LIVE_ID in matches
    assert sorted(card["id"] for card in visible_cards(page)) == sorted(matches)
    assert "category=finance" in page.url and "q=currency+exchange" in page.url
    page.screenshot(path=SCREENSHOTS / "index-filtered.png", full_page=True)

    page.select_option("#filter-sort", "name")
    names = [card["name"] for card in visible_cards(page)]
    assert names == sorted(names)

    page.fill("#filter-q", "no api has this text")
    expect(page.locator("#no-results")).to_be_visible()
    page.fill("#filter-q", "currency exchange")

    page.locator(f'#api-list a[href="apis/{LIVE_ID}.html"]').focus()
    page.keyboard.press("Enter")  # opened from the keyboard
    page.wait_for_url(f"**/apis/{LIVE_ID}.html")

    entry = next(a for a in apis if a["id"] == LIVE_ID)
    score = entry["builderScore"]
    expect(page.locator("h1")).to_contain_text(entry["name"])
    expect(page.locator("#base-url")).to_have_text(entry["baseUrl"])
    expect(page.locator("#auth-header")).to_contain_text(NO_AUTH_HEADER)
    expect(page.locator("#rate-limit")).to_have_text(entry.get("rateLimit") or "not stated")
    expect(page.locator("#pricing-model")).to_contain_text(entry["pricing"]["model"])
    expect(page.locator("#free-quota")).to_be_visible()
    expect(page.locator("#docs-url a")).to_have_attribute("href", entry["docsUrl"])
    expect(page.locator("#status")).to_have_text("Live — HTTP 200, response time 84 ms.")
    expect(page.locator("#checked-at")).to_have_text("2026-11-21 02:59 UTC")
    expect(page.locator("#builder-score")).to_have_text(
        f"{score['grade']} {score['percent']}% builder-friendly"
    )
    for part in ("Pricing", "Latency", "Depth"):
        row = page.locator("#subscores tr", has=page.locator(f"th:text-is('{part}')"))
        expect(row.locator("td.num")).to_have_text(str(score[part.lower()]))
        for reason in score["reasons"][part.lower()]:
            expect(row).to_contain_text(reason)
    expect(page.locator("#uptime")).to_contain_text("Last 7 days")
    expect(page.locator("#endpoints tbody tr")).to_have_count(len(entry["endpoints"]))
    expect(page.locator("#sample-request")).to_have_text(entry["sampleRequest"])

    browser.grant_permissions(["clipboard-read", "clipboard-write"], origin=site)
    page.click("button[data-copy='sample-request']")
    expect(page.locator("button[data-copy='sample-request']")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == entry["sampleRequest"]
    page.screenshot(path=SCREENSHOTS / "entry.png", full_page=True)
    assert watch.problems == []


def test_entry_with_html_shows_it_as_text_and_fits_a_phone(
    browser: BrowserContext, site: str
) -> None:
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    watch = Watch(page)
    page.goto(f"{site}/apis/{UNREACHABLE_ID}.html")
    expect(page.locator("h1")).to_have_text(HOSTILE_NAME)
    expect(page.locator("#status")).to_have_text("Unreachable — no response.")
    assert page.locator("main img, main script, main b").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=SCREENSHOTS / "entry-hostile-phone.png", full_page=True)
    assert watch.problems == []


def test_a_card_with_a_name_wider_than_a_phone_fits_it(site: str, tmp_path: Path) -> None:
    """A name or provider of one long word wraps inside its card, on the index (drawn by the
    script) and on its category page, rather than making the page scroll sideways."""
    width = SCREENS["phone"]["viewport"]["width"]
    with chromium(tmp_path / "profile", **SCREENS["phone"]) as context:
        page = context.new_page()
        watch = Watch(page)
        page.goto(f"{site}/{INDEX_PAGE}")
        page.fill("#filter-q", LONG_NAME.lower())
        assert [card["id"] for card in visible_cards(page)] == [LONG_NAME_ID]
        for where in ("index", "category"):
            if where == "category":
                page.goto(f"{site}/{category_page('developer')}")
            card = page.locator(f"#api-list li[data-id='{LONG_NAME_ID}']")
            expect(card.locator("h3")).to_have_text(LONG_NAME)
            box = card.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, where
            assert page.evaluate("document.documentElement.scrollWidth") <= width, where
    assert watch.problems == []


# The drawn size of every brand-colour dot of a page, beside the size its SVG asks for.
DOTS = """
() => [...document.querySelectorAll("svg.dot")].map(dot => ({
  width: dot.getBoundingClientRect().width, height: dot.getBoundingClientRect().height,
  asked: Number(dot.getAttribute("width")),
}))
"""


def test_a_brand_dot_keeps_its_size_beside_a_name_wider_than_a_phone(
    site: str, tmp_path: Path
) -> None:
    """The dot before a name is drawn round at its own size on the entry page, its category's
    cards and the index's cards, however long the name it sits beside, never squeezed into a
    sliver by the name's wrapping."""
    with chromium(tmp_path / "profile", **SCREENS["phone"]) as context:
        page = context.new_page()
        watch = Watch(page)
        for path in (entry_page(LONG_NAME_ID), category_page("developer"), INDEX_PAGE):
            page.goto(f"{site}/{path}")
            if path == INDEX_PAGE:
                page.fill("#filter-q", LONG_NAME.lower())
                assert [card["id"] for card in visible_cards(page)] == [LONG_NAME_ID]
            dots = page.evaluate(DOTS)
            assert dots, path
            for dot in dots:
                assert dot["width"] == dot["height"] == dot["asked"], (path, dot)
    assert watch.problems == []


# Each uptime figure's label (dt) and figure (dd): where each starts on the screen.
UPTIME_LINES = """
() => [...document.querySelectorAll("#uptime dt")].map(label => {
  const figure = label.nextElementSibling;
  return {label: label.textContent, labelTop: label.getBoundingClientRect().top,
          figureTop: figure.getBoundingClientRect().top,
          labelLeft: label.getBoundingClientRect().left,
          figureLeft: figure.getBoundingClientRect().left};
})
"""


@pytest.mark.parametrize("screen", ["phone", "narrowest"])
def test_each_uptime_figure_reads_beside_its_own_label_on_a_phone(
    screen: str, site: str, tmp_path: Path
) -> None:
    """On a phone an uptime figure sits on its label's line, right of it: the window's words
    never end a line whose next line starts with its figure, read as the next window's. An
    entry without probes has no windows, one line."""
    options = SCREENS["phone"] if screen == "phone" else NARROWEST
    with chromium(tmp_path / "profile", **options) as context:
        page = context.new_page()
        watch = Watch(page)
        page.goto(f"{site}/{entry_page(LONG_NAME_ID)}")
        expect(page.locator("#uptime")).to_have_text("No probes in the last 30 days.")
        for entry_id in (LIVE_ID, UNREACHABLE_ID):
            page.goto(f"{site}/{entry_page(entry_id)}")
            lines = page.evaluate(UPTIME_LINES)
            assert [line["label"] for line in lines] == [
                "Last 24 hours", "Last 7 days", "Last 30 days"]
            for line in lines:
                assert abs(line["figureTop"] - line["labelTop"]) < 8, (entry_id, line)
                assert line["figureLeft"] > line["labelLeft"], (entry_id, line)
    assert watch.problems == []


# Direction controls in an entry's name and provider: an override (RLO) that would reverse the
# card's own words after it, and an isolate's end (PDI) that would close an isolation early.
REVERSING_NAME, REVERSING_PROVIDER = "\u202eReversed API", "\u2069\u202eEvil Corp"

# Where a card's provider line starts and where its category link starts, on the screen.
PROVIDER_LINE = """
card => {
  const line = card.querySelector(".provider");
  return {line: line.getBoundingClientRect().left,
          category: line.querySelector("a").getBoundingClientRect().left,
          provider: line.querySelector("bdi").textContent};
}
"""


def test_direction_controls_in_an_entry_never_reorder_its_cards_words(
    browser: BrowserContext, site: str
) -> None:
    """A card the script draws isolates the entry's name and provider: the category after the
    provider stays after it, read left to right, whatever controls the provider holds."""
    page = browser.new_page()
    watch = Watch(page)

    def reversing(route: Any) -> None:
        index = route.fetch().json()
        for item in index["apis"]:
            if item["id"] == UNREACHABLE_ID:
                item.update(name=REVERSING_NAME, provider=REVERSING_PROVIDER)
        route.fulfill(json=index)

    page.route(f"**/{SEARCH_INDEX}", reversing)
    page.goto(f"{site}/{INDEX_PAGE}")
    page.fill("#filter-q", "reversed api")
    assert [card["id"] for card in visible_cards(page)] == [UNREACHABLE_ID]
    card = page.locator(f'li.card[data-id="{UNREACHABLE_ID}"]')
    expect(card.locator("h3 bdi")).to_have_text("Reversed API")
    line = card.evaluate(PROVIDER_LINE)
    assert line["provider"] == "Evil Corp"
    assert line["category"] > line["line"] + 40, line  # after "Evil Corp · ", not before it
    assert watch.problems == []


# How a page fits its screen: the page's width, and each table's width beside the room its
# container gives it, with that container's horizontal overflow.
FIT = """
() => ({
  width: document.documentElement.scrollWidth,
  tables: [...document.querySelectorAll("main table")].map(table => ({
    table: table.className || table.id,
    width: table.scrollWidth,
    room: table.parentElement.clientWidth,
    overflowX: getComputedStyle(table.parentElement).overflowX,
  })),
})
"""


@pytest.mark.parametrize("screen", list(SCREENS))
def test_pages_fit_the_screen_and_are_photographed(
    screen: str, site: str, sample: SampleRelease, tmp_path: Path
) -> None:
    """No page is wider than the screen; every table sits in a container that scrolls it
    (`overflow-x: auto`) and fits there, wrapped rather than cut off. On a phone every page of
    the release is read; on a desktop the photographed ones: the index, the largest category
    and the longest entry page, saved as `<page>-<screen>.png`."""
    apis = json.loads((sample.folder / FULL_DATASET).read_text())["apis"]
    categories = json.loads((sample.folder / "api" / "categories.json").read_text())["categories"]
    largest = max(categories, key=lambda category: category["count"])["id"]
    longest = max(sample.folder.glob("apis/*.html"), key=lambda path: path.stat().st_size)
    photographed = {"index": INDEX_PAGE, "category": category_page(largest),
                    "entry": f"apis/{longest.name}"}
    paths = list(photographed.values())
    if screen == "phone":
        paths += sorted({category_page(c["id"]) for c in categories} - set(paths))
        paths += sorted({entry_page(a["id"]) for a in apis} - set(paths))
    width = SCREENS[screen]["viewport"]["width"]
    with chromium(tmp_path / "profile", **SCREENS[screen]) as context:
        page = context.new_page()
        watch = Watch(page)
        for path in paths:
            fit = drawn_fit(page, f"{site}/{path}", path == INDEX_PAGE, len(apis))
            assert fit["width"] <= width, (path, fit["width"])
            for table in fit["tables"]:
                assert table["overflowX"] == "auto" and table["width"] <= table["room"], \
                    (path, table)
            for name, photo in photographed.items():
                if photo == path:
                    photograph(page, SCREENSHOTS / f"{name}-{screen}.png", SCREENS[screen],
                               screens=3 if name == "index" else None)
        assert len(paths) == (3 if screen == "desktop" else 1 + len(categories) + len(apis))
    assert watch.problems == []
    scale = SCREENS[screen].get("device_scale_factor", 1)
    for name in photographed:
        png = (SCREENSHOTS / f"{name}-{screen}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
        assert int.from_bytes(png[16:20], "big") == width * scale, name  # the screen's width


# The narrowest screen a page must reflow to (WCAG 1.4.10: 320 CSS px, nothing to scroll
# sideways but the samples, which scroll in their own named boxes).
NARROWEST = {"viewport": {"width": 320, "height": 640}}


def widest_entries(apis: list[dict[str, Any]]) -> dict[str, str]:
    """The entries hardest to fit a narrow screen, by what each stretches: its pricing tiers
    table, its sub-scores' reasons, its endpoints, its sample and its addresses."""
    def longest(text: str) -> int:
        return max(map(len, text.split()), default=0)

    measures = {
        "tiers": lambda a: sum(longest(" ".join(map(str, tier.values())))
                               for tier in (a.get("pricing") or {}).get("tiers") or []),
        "subscores": lambda a: max((longest(reason) for reasons in
                                    ((a.get("builderScore") or {}).get("reasons") or {}).values()
                                    for reason in reasons), default=0),
        "endpoints": lambda a: max((len(e.get("path") or "") for e in a.get("endpoints") or []),
                                   default=0),
        "sample": lambda a: len(a.get("sampleResponse") or ""),
        "addresses": lambda a: max(len(a.get(key) or "") for key in ("baseUrl", "docsUrl")),
    }
    return {what: max(apis, key=measure)["id"] for what, measure in measures.items()}


def test_every_kind_of_page_reflows_to_320_px(
    site: str, sample: SampleRelease, tmp_path: Path
) -> None:
    """At 320 CSS px no page scrolls sideways, nor any table in its box: a table's rows
    stack (the pricing tiers scrolled in their box, unnamed and out of the keyboard's reach).
    Read: the index, the largest category, the 404 page and the entries that stretch each
    table, their samples and their addresses the most."""
    apis = json.loads((sample.folder / FULL_DATASET).read_text())["apis"]
    categories = json.loads((sample.folder / "api" / "categories.json").read_text())["categories"]
    largest = max(categories, key=lambda category: category["count"])["id"]
    entries = widest_entries(apis)
    paths = [INDEX_PAGE, category_page(largest), NOT_FOUND_PAGE,
             *dict.fromkeys(entry_page(entry_id) for entry_id in entries.values())]
    width = NARROWEST["viewport"]["width"]
    with chromium(tmp_path / "profile", **NARROWEST) as context:
        page = context.new_page()
        watch = Watch(page)
        for path in paths:
            fit = drawn_fit(page, f"{site}/{path}", path == INDEX_PAGE, len(apis),
                            "table.tiers tbody tr" if path == entry_page(entries["tiers"])
                            else None)
            assert fit["width"] <= width, (path, fit["width"])
            for table in fit["tables"]:
                assert table["width"] <= table["room"], (path, table)
    assert watch.problems == []


def drawn_fit(page: Page, url: str, index: bool, apis: int, shown: str | None = None) -> dict:
    """How a page fits its screen (`FIT`) once drawn: on the index, once the script has drawn
    the cards of all `apis`; with `shown`, once that element is visible."""
    page.goto(url)
    if index:
        expect(page.locator("#result-count")).to_have_text(f"{apis} APIs")
    if shown is not None:
        expect(page.locator(shown).first).to_be_visible()
    return page.evaluate(FIT)


def photograph(page: Page, path: Path, screen: dict[str, Any], screens: int | None) -> None:
    """The whole page, or no more than its first `screens` screens (the index, whose hundred
    cards would make a picture tens of thousands of pixels long)."""
    if screens is None:
        page.screenshot(path=path, full_page=True)
        return
    viewport = screen["viewport"]
    height = min(page.evaluate("document.documentElement.scrollHeight"),
                 screens * viewport["height"])
    page.screenshot(path=path, full_page=True,
                    clip={"x": 0, "y": 0, "width": viewport["width"], "height": height})


@pytest.fixture(scope="module")
def hosts(sample: SampleRelease, site: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with run_serve(sample.folder, tmp_path_factory.mktemp("serve")) as serve:
        yield {"nginx": site, "apidir-serve": serve}


@pytest.fixture(scope="module")
def other_origin() -> Iterator[str]:
    with run_other_origin(REPO / "tests" / "fixtures" / "other-origin") as base_url:
        yield base_url


class Wire:
    """What went over the wire, from Chromium's own network log (DevTools protocol): each
    request's type and URL, and the status the server sent (a 304 the cache turned into a
    200 for the script shows here as the 304 it was)."""

    def __init__(self, browser: BrowserContext, page: Page) -> None:
        self.page = page
        self.requests: dict[str, tuple[str, str]] = {}
        self.statuses: dict[str, int] = {}
        session = browser.new_cdp_session(page)
        session.on("Network.responseReceived", lambda e: self.requests.__setitem__(
            e["requestId"], (e["type"], e["response"]["url"])))
        session.on("Network.responseReceivedExtraInfo", lambda e: self.statuses.__setitem__(
            e["requestId"], e["statusCode"]))
        session.send("Network.enable")

    def answers(self, kind: str, url: str, count: int) -> list[int]:
        """The wire statuses of the requests of `kind` to `url`, in order, once `count` of
        them have been seen (or 10 s have passed)."""
        for _ in range(200):
            ids = [i for i, (t, u) in self.requests.items() if (t, u) == (kind, url)]
            if len(ids) >= count and all(i in self.statuses for i in ids):
                break
            self.page.wait_for_timeout(50)  # lets the browser's events arrive
        return [self.statuses.get(i, 0) for i in ids]


@pytest.mark.parametrize("host", ["nginx", "apidir-serve"])
def test_a_page_on_another_origin_revalidates_a_document(
    browser: BrowserContext, hosts: dict[str, str], other_origin: str, sample: SampleRelease,
    host: str,
) -> None:
    page = browser.new_page()
    watch = Watch(page)
    wire = Wire(browser, page)
    page.goto(f"{other_origin}/index.html")
    url = f"{hosts[host]}/api/categories/finance.json"
    assert not url.startswith(other_origin)
    result = page.evaluate("url => revalidate(url)", url)

    body = (sample.folder / "api" / "categories" / "finance.json").read_text(encoding="utf-8")
    first, conditional, cached = result["first"], result["conditional"], result["cached"]
    assert first["status"] == 200 and first["body"] == body
    assert first["etag"] and first["lastModified"]  # exposed to the script
    assert first["cacheControl"] == LIVE_CACHE
    assert conditional["status"] == 304 and conditional["body"] == ""
    assert cached["status"] == 200 and cached["body"] == body
    assert wire.answers("Preflight", url, 1) == [204]
    assert wire.answers("Fetch", url, 3) == [200, 304, 304]
    assert watch.problems == []


@pytest.mark.parametrize("host", ["nginx", "apidir-serve"])
def test_a_page_on_another_origin_resumes_a_download(
    browser: BrowserContext, hosts: dict[str, str], other_origin: str, sample: SampleRelease,
    host: str,
) -> None:
    """A script on another origin reads a range of a document and where it lies: the preflight
    allows Range and If-Range, and the ETag and Content-Range are exposed to it."""
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{other_origin}/index.html")
    url = f"{hosts[host]}/api/apis.json"
    result = page.evaluate("url => resume(url)", url)
    published = (sample.folder / "api" / "apis.json").read_bytes()
    assert result["status"] == 206
    assert result["body"].encode() == published[100:200]
    assert result["contentRange"] == f"bytes 100-199/{len(published)}"
    assert watch.problems == []


def markup(html: str) -> str:
    return " ".join(re.sub(r">\s+<", "><", html).split())


def card_text(page: Page, entry_id: str) -> dict[str, str]:
    card = page.locator(f'li.card[data-id="{entry_id}"]')
    return {"text": card.inner_text(), "html": card.evaluate("c => c.outerHTML")}


def words_of(api: dict) -> str:
    return " ".join([api["name"], api["provider"], api.get("description") or "",
                     *api.get("tags", [])]).lower()


def test_a_category_page_searches_and_sorts_its_own_cards(
    site: str, sample: SampleRelease, tmp_path: Path
) -> None:
    """The category page lists every API without the script; with it, the index's search and
    sort act on the cards the page has drawn (hidden and ordered in place, none fetched), and
    the filters live in the address."""
    apis = json.loads((sample.folder / FULL_DATASET).read_text())["apis"]
    members = [a for a in apis if a["category"] == "finance"]
    by_score = [a["id"] for a in sorted(members, key=score_key)]
    address = f"{site}/{category_page('finance')}"
    with chromium(tmp_path / "no-script", java_script_enabled=False,
                  **SCREENS["desktop"]) as context:
        plain = context.new_page()
        plain.goto(address)
        expect(plain.locator("#filters")).to_be_hidden()
        assert [card["id"] for card in visible_cards(plain)] == by_score
        expect(plain.locator("#result-count")).to_have_text(f"{len(members)} APIs")

    with chromium(tmp_path / "profile", **SCREENS["desktop"]) as browser:
        page = browser.new_page()
        watch = Watch(page)
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(urlsplit(request.url).path))
        page.goto(address)
        expect(page.locator("#filters")).to_be_visible()  # the script ran under the policy
        expect(page.locator("#filter-category")).to_have_count(0)  # one category: no such field
        assert [card["id"] for card in visible_cards(page)] == by_score
        expect(page.locator("#result-count")).to_have_text(f"{len(members)} APIs")

        page.fill("#filter-q", "exchange rates")
        wanted = [a for a in members if all(w in words_of(a) for w in ("exchange", "rates"))]
        assert 0 < len(wanted) < len(members)
        assert [card["id"] for card in visible_cards(page)] == [
            a["id"] for a in sorted(wanted, key=score_key)]
        expect(page.locator("#result-count")).to_have_text(
            f"Showing {len(wanted)} of {len(members)} APIs")
        assert urlsplit(page.url).query == "q=exchange+rates"

        page.select_option("#filter-sort", "name")
        names = [card["name"] for card in visible_cards(page)]
        assert names == sorted(a["name"].lower() for a in wanted)
        assert urlsplit(page.url).query == "q=exchange+rates&sort=name"
        assert page.locator("#api-list > li.card").count() == len(members)  # hidden, not removed

        page.fill("#filter-q", "no api has this text")
        expect(page.locator("#no-results")).to_be_visible()
        assert visible_cards(page) == []

        page.goto(f"{address}?q=exchange+rates&sort=name")  # the filters come from the address
        expect(page.locator("#filter-q")).to_have_value("exchange rates")
        expect(page.locator("#filter-sort")).to_have_value("name")
        assert [card["name"] for card in visible_cards(page)] == names
        page.screenshot(path=SCREENSHOTS / "category-filtered.png", full_page=True)

        page.fill("#filter-q", "")
        page.select_option("#filter-sort", "score")
        assert [card["id"] for card in visible_cards(page)] == by_score
        assert urlsplit(page.url).query == ""
        assert f"/{SEARCH_INDEX}" not in fetched and f"/{FULL_DATASET}" not in fetched
        assert watch.problems == []


def test_the_index_cards_read_as_the_category_pages_cards_and_show_more(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    apis = {a["id"]: a for a in json.loads((sample.folder / FULL_DATASET).read_text())["apis"]}
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/index.html")
    expect(page.locator("#result-count")).to_have_text(f"{len(apis)} APIs")
    assert len(apis) > INDEX_PAGE_SIZE  # the sample release is larger than one page of cards
    more = page.locator("#show-more")
    left = len(apis) - INDEX_PAGE_SIZE
    expect(more).to_have_text(f"Show {min(left, INDEX_PAGE_SIZE)} more ({left} not shown)")
    more.click()
    assert len(visible_cards(page)) == min(len(apis), 2 * INDEX_PAGE_SIZE)

    page.fill("#filter-q", "hostile")
    assert [card["id"] for card in visible_cards(page)] == [UNREACHABLE_ID]
    expect(page.locator("#api-list h3")).to_have_text(HOSTILE_NAME)  # as text, never markup
    assert page.locator("#api-list img, #api-list script, #api-list b").count() == 0
    assert_cards_alike(browser, site, page, apis, (UNREACHABLE_ID, LIVE_ID, ONLINE_ID))
    page.screenshot(path=SCREENSHOTS / "index-hostile.png", full_page=True)
    assert watch.problems == []


def assert_cards_alike(browser: BrowserContext, site: str, index: Page, apis: dict[str, dict],
                       entry_ids: Iterable[str]) -> None:
    """The index's card of each entry (found by its name) reads as its category page's."""
    built = {}
    for entry_id in entry_ids:
        index.fill("#filter-q", apis[entry_id]["name"].lower())
        built[entry_id] = card_text(index, entry_id)
    served = browser.new_page()
    for entry_id, card in built.items():
        served.goto(f"{site}/{category_page(apis[entry_id]['category'])}")
        assert card_text(served, entry_id)["text"] == card["text"], entry_id
        # the same markup, but for whitespace between tags and links made from another folder
        assert markup(card_text(served, entry_id)["html"]).replace('href="../', 'href="') \
            == markup(card["html"]), entry_id


def test_a_free_api_reads_free_on_both_cards(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    """A free API's cards badged it "Free tier", as if a paid product lay past the tier: they
    say "Free", on the index as on its category page."""
    apis = {a["id"]: a for a in json.loads((sample.folder / FULL_DATASET).read_text())["apis"]}
    assert apis[LIVE_ID]["pricing"]["model"] == "free" and apis[LIVE_ID]["hasFreeTier"]
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/index.html")
    expect(page.locator("#result-count")).to_have_text(f"{len(apis)} APIs")
    assert_cards_alike(browser, site, page, apis, (LIVE_ID,))
    page.fill("#filter-q", apis[LIVE_ID]["name"].lower())
    expect(page.locator(f'li.card[data-id="{LIVE_ID}"] .badge.free')).to_have_text("Free")
    assert watch.problems == []


# What has the keyboard focus: its tag, and the entry of the card it is in.
FOCUSED = """
() => {
  const at = document.activeElement;
  const card = at.closest("li.card");
  return {tag: at.tagName, card: card && card.dataset.id};
}
"""


def test_show_more_from_the_keyboard_moves_the_focus_to_the_first_new_card(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    """Enter on "Show more" moves the focus to the first card it adds, and says how many it
    added; on the last page too, where the button hides (and would drop the focus to the
    page's body)."""
    search = json.loads((sample.folder / SEARCH_INDEX).read_text())
    real = search["apis"]
    total = 2 * INDEX_PAGE_SIZE + INDEX_PAGE_SIZE // 2  # three pages, the last one short
    search["apis"] = [real[n % len(real)] | {"id": f"{real[n % len(real)]['id']}-{n}",
                                             "percent": total - n, "provisional": False}
                      for n in range(total)]
    page = browser.new_page()
    watch = Watch(page)
    page.route(f"{site}/{SEARCH_INDEX}", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(search)))
    page.goto(f"{site}/{INDEX_PAGE}")
    expect(page.locator("#result-count")).to_have_text(f"{total} APIs")
    more = page.locator("#show-more")
    for shown in (2 * INDEX_PAGE_SIZE, total):
        first = len(visible_cards(page))
        more.focus()
        page.keyboard.press("Enter")
        cards = visible_cards(page)
        assert len(cards) == shown
        assert page.evaluate(FOCUSED) == {"tag": "A", "card": cards[first]["id"]}
        expect(page.locator("#more-status")).to_have_text(
            f"{shown - first} more shown: {shown} of {total} APIs.")
    expect(more).to_be_hidden()
    assert watch.problems == []


# The colours a badge's text is drawn in and on, as Chromium computes them: the text colour
# over the first opaque background behind it (layers with alpha composited in order).
COLOURS_OF_TEXT = """
badge => {
  const parse = value => {
    const [r, g, b, a] = value.match(/[\\d.]+/g).map(Number);
    return [r, g, b, a === undefined ? 1 : a];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[3] * top[i] + (1 - top[3]) * bottom[i]);
  const backgroundOf = node => {
    const layers = [];
    for (let at = node; at; at = at.parentElement) {
      layers.push(parse(getComputedStyle(at).backgroundColor));
    }
    return layers.reverse().reduce((below, layer) => over(layer, below), [255, 255, 255]);
  };
  const inked = [badge, ...badge.querySelectorAll("*")].filter(node =>
    [...node.childNodes].some(child => child.nodeType === 3 && child.textContent.trim()));
  return {
    text: badge.innerText,
    classes: badge.className,
    why: badge.querySelector(".provisional-word")?.title ?? null,
    fill: getComputedStyle(badge).backgroundColor,
    parts: inked.map(node => {
      const background = backgroundOf(node);
      return {text: node.textContent.trim(), background,
              colour: over(parse(getComputedStyle(node).color), background)};
    }),
  };
}
"""


def contrast(one: list[float], other: list[float]) -> float:
    """The WCAG 2 contrast ratio of two sRGB colours (0-255 channels)."""
    def luminance(rgb: list[float]) -> float:
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
                  for c in (channel / 255 for channel in rgb)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    lighter, darker = sorted((luminance(one), luminance(other)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def badges_of(page: Page, selector: str) -> list[dict]:
    return page.eval_on_selector_all(selector, f"badges => badges.map({COLOURS_OF_TEXT})")


def assert_readable(badges: list[dict], where: str) -> None:
    assert badges, where
    for badge in badges:
        for part in badge["parts"]:
            ratio = contrast(part["colour"], part["background"])
            assert ratio >= 4.5, (where, badge["classes"], part["text"], round(ratio, 2))


def test_grade_badges_are_coloured_by_band_and_readable_in_both_schemes(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    """Every band, confirmed and provisional, on the index's cards (drawn by the script from a
    search index whose grades are set to each band's floor) and on the server-rendered category
    and entry pages, in the light and the dark scheme: text at 4.5:1 or better."""
    search = json.loads((sample.folder / SEARCH_INDEX).read_text())
    real = search["apis"][: 2 * len(GRADE_BANDS)]
    bands = [(floor, letter, provisional) for floor, letter in GRADE_BANDS
             for provisional in (False, True)]
    search["apis"] = [  # without an entry's own wait: the word's tooltip gives the rule
        {key: value for key, value in item.items() if key != "provisionalWhy"}
        | {"grade": letter, "percent": floor, "provisional": provisional}
        for item, (floor, letter, provisional) in zip(real, bands, strict=True)]
    page = browser.new_page()
    watch = Watch(page)
    page.route(f"{site}/{SEARCH_INDEX}", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(search)))
    apis = json.loads((sample.folder / FULL_DATASET).read_text())["apis"]
    graded = {}
    for api in apis:  # an entry page for every grade the sample release holds
        score = api.get("builderScore")
        if score:
            graded.setdefault((score["grade"], bool(score.get("provisional"))), api["id"])
    assert len(graded) > 2
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{site}/index.html")
        expect(page.locator("#result-count")).to_have_text(f"{len(bands)} APIs")
        cards = badges_of(page, "#api-list .grade")
        assert len(cards) == len(bands)
        assert_readable(cards, f"index, {scheme}")
        fills, colours = set(), set()
        for badge in cards:
            letter = badge["parts"][0]["text"]
            assert letter in {letter for _, letter in GRADE_BANDS}
            assert re.search(r"\b\d+% builder-friendly\b", badge["text"]), badge
            colours.add(tuple(badge["parts"][0]["colour"]))
            if "provisional" in badge["classes"]:
                assert "PROVISIONAL" in badge["text"].upper()
                assert badge["why"] == latency_wanting({}), badge  # the rule, not a guess
                assert badge["fill"] == "rgba(0, 0, 0, 0)", badge  # outlined, not filled
            else:
                fills.add(badge["fill"])
        assert len(fills) == len(GRADE_BANDS) and len(colours) == len(GRADE_BANDS), scheme
        for category in CATEGORY_IDS:
            page.goto(f"{site}/{category_page(category)}")
            assert_readable(badges_of(page, "li.card .grade"), f"{category}, {scheme}")
        for entry_id in sorted(graded.values()):
            page.goto(f"{site}/apis/{entry_id}.html")
            assert_readable(badges_of(page, ".grade"), f"{entry_id}, {scheme}")
        page.goto(f"{site}/index.html")
        page.screenshot(path=SCREENSHOTS / f"grades-{scheme}.png", full_page=True)
    assert watch.problems == []


# Each card's id and the tooltip of its word "provisional" (null for a confirmed grade).
PROVISIONAL_WHY = """
cards => Object.fromEntries(cards.map(card => [
  card.dataset.id, card.querySelector(".provisional-word")?.title ?? null]))
"""


def test_a_provisional_grade_s_word_says_the_entry_s_own_wait_on_the_index_as_on_its_category(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    """The word "provisional" on an index card, drawn by the script from the search index, has
    the tooltip it has on the category page's card: what the entry's own Latency waits for (its
    probes and days so far), not the rule alone; a confirmed grade has no such word."""
    apis = json.loads((sample.folder / FULL_DATASET).read_text())["apis"]
    finance = {api["id"]: latency_wanting(api["builderScore"])
               if api["builderScore"].get("provisional") else None
               for api in apis if api["category"] == "finance"}
    assert finance[LIVE_ID] is None  # confirmed
    waits = {why for why in finance.values() if why}
    assert waits and latency_wanting({}) not in waits  # the entries' own wait, not the rule
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/{INDEX_PAGE}?category=finance")
    expect(page.locator("#result-count")).to_have_text(
        f"Showing {len(finance)} of {len(apis)} APIs")
    assert page.eval_on_selector_all("#api-list > li:not([hidden])", PROVISIONAL_WHY) == finance
    page.goto(f"{site}/{category_page('finance')}")
    assert page.eval_on_selector_all("li.card", PROVISIONAL_WHY) == finance
    assert watch.problems == []


# The colour of a control's edge, over what is behind it, beside the colours it separates: the
# control's own fill and the fill around it (each layer with alpha composited in order).
EDGE_COLOURS = """
control => {
  const parse = value => {
    const [r, g, b, a] = value.match(/[\\d.]+/g).map(Number);
    return [r, g, b, a === undefined ? 1 : a];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[3] * top[i] + (1 - top[3]) * bottom[i]);
  const fillOf = node => {
    const layers = [];
    for (let at = node; at; at = at.parentElement) {
      layers.push(parse(getComputedStyle(at).backgroundColor));
    }
    return layers.reverse().reduce((below, layer) => over(layer, below), [255, 255, 255]);
  };
  const inside = fillOf(control), outside = fillOf(control.parentElement);
  const style = getComputedStyle(control);
  return {control: control.id || control.className, width: style.borderTopWidth,
          edge: over(parse(style.borderTopColor), outside), inside, outside};
}
"""


def test_fields_and_buttons_have_edges_that_stand_out_in_both_schemes(
    browser: BrowserContext, site: str
) -> None:
    """The edge of every field and button (search, category, sort, "Show more", the copy
    buttons) is 3:1 or better against the fill inside it and the fill around it (WCAG 1.4.11),
    in the light and the dark scheme."""
    page = browser.new_page()
    watch = Watch(page)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        edges = []
        for path in (INDEX_PAGE, entry_page(LIVE_ID)):
            page.goto(f"{site}/{path}")
            expect(page.locator("button:visible").first).to_be_visible()
            edges += page.eval_on_selector_all(
                "main input:visible, main select:visible, main button:visible",
                f"controls => controls.map({EDGE_COLOURS})")
        assert {edge["control"] for edge in edges} >= {
            "filter-q", "filter-category", "filter-sort", "show-more", "copy"}, edges
        for edge in edges:
            assert edge["width"] == "1px", edge
            for fill in ("inside", "outside"):
                ratio = contrast(edge["edge"], edge[fill])
                assert ratio >= 3, (scheme, edge["control"], fill, round(ratio, 2))
    assert watch.problems == []


# A request indented as a shell script, and a response of 10 kB on one line, which the page
# shows indented over more than a thousand lines.
INDENTED_REQUEST = ("  curl -s \"https://api.frankfurter.dev/v1/latest\" \\\n"
                    "    -H 'Accept: application/json'\n")
LONG_RESPONSE = json.dumps({"rates": [{"day": n, "base": "EUR", "quote": "USD", "rate": 1.08}
                                      for n in range(220)]}, separators=(",", ":"))


def entry_page_with(sample: SampleRelease, entry_id: str, **fields: Any) -> str:
    """The page of a published entry with some fields set otherwise, as the release draws it."""
    api = json.loads((sample.folder / entry_document(entry_id)).read_text())["api"] | fields
    meta = json.loads((sample.folder / FULL_DATASET).read_text())["meta"]
    categories = json.loads((sample.folder / "api" / "categories.json").read_text())["categories"]
    common = page_context(meta, categories, asset_files()[1])
    presented = presented_entry(api)
    return render_entry_page(presented, common, [], entry_badges(presented))


def test_a_long_sample_scrolls_in_its_own_box_and_copies_as_stored(
    site: str, sample: SampleRelease, tmp_path: Path
) -> None:
    """On a phone 320 px wide, a 10 kB sample response shown over a thousand lines scrolls in
    a box of its own, which the keyboard scrolls, not the page; each copy button copies the
    sample as the entry stores it: the request with its indentation, the response on its one
    line, as it was written, not as the page indents it."""
    assert len(LONG_RESPONSE) > 10_000
    html = entry_page_with(sample, LIVE_ID, sampleRequest=INDENTED_REQUEST,
                           sampleResponse=LONG_RESPONSE)
    address = f"{site}/{entry_page('long-sample')}"
    with chromium(tmp_path / "profile", viewport={"width": 320, "height": 640}) as context:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site)
        page = context.new_page()
        watch = Watch(page)
        page.route(address, lambda route: route.fulfill(
            status=200, content_type="text/html; charset=utf-8", body=html))
        page.goto(address)
        shown = page.locator("#sample-response")
        assert shown.text_content().count("\n") > 1_000  # indented for reading
        box = page.locator("pre", has=shown)
        size = box.evaluate("pre => ({client: pre.clientHeight, scroll: pre.scrollHeight})")
        assert size["client"] <= 640 < size["scroll"], size
        assert page.evaluate("document.documentElement.scrollHeight") < 8_000
        box.focus()
        page.keyboard.press("End")  # scrolls smoothly: waited for, up to the usual timeout
        page.wait_for_function("pre => pre.scrollTop > 0", arg=box.element_handle())
        for element, stored in (("sample-request", INDENTED_REQUEST),
                                ("sample-response", LONG_RESPONSE)):
            button = page.locator(f"button[data-copy='{element}']")
            button.click()
            expect(button).to_have_text("Copied")
            assert page.evaluate("navigator.clipboard.readText()") == stored, element
    assert watch.problems == []


RTL_DESCRIPTION = "واجهة برمجة لأسعار الصرف"  # Arabic: "an API for exchange rates"


def test_a_right_to_left_description_reads_right_to_left_on_its_card_and_page(
    browser: BrowserContext, site: str, sample: SampleRelease
) -> None:
    """An entry's description takes its direction from its own text, on the index's card (drawn
    by the script), on its category page's card and on its page."""
    page = browser.new_page()
    watch = Watch(page)

    def arabic(route: Any) -> None:
        index = route.fetch().json()
        for item in index["apis"]:
            if item["id"] == LIVE_ID:
                item["description"] = RTL_DESCRIPTION
        route.fulfill(json=index)

    page.route(f"**/{SEARCH_INDEX}", arabic)
    page.goto(f"{site}/{INDEX_PAGE}")
    page.fill("#filter-q", RTL_DESCRIPTION.split()[0])
    assert [card["id"] for card in visible_cards(page)] == [LIVE_ID]
    direction = "node => getComputedStyle(node).direction"
    assert page.locator("#api-list .description").evaluate(direction) == "rtl"
    assert page.locator("#api-list .provider").evaluate(direction) == "ltr"

    entry = entry_page_with(sample, LIVE_ID, description=RTL_DESCRIPTION,
                            longDescription=RTL_DESCRIPTION)
    address = f"{site}/{entry_page('rtl-description')}"
    page.route(address, lambda route: route.fulfill(
        status=200, content_type="text/html; charset=utf-8", body=entry))
    page.goto(address)
    for prose in page.locator(".entry-head p[dir]").all():
        assert prose.evaluate(direction) == "rtl"
    assert page.locator(".entry-head p[dir]").count() == 2
    assert page.locator(".entry-head .provider").evaluate(direction) == "ltr"
    assert watch.problems == []


def accessible_names(browser: BrowserContext, page: Page, roles: set[str]) -> list[tuple]:
    """The (role, name) of each node of the page with one of `roles`, as Chromium's own
    accessibility tree gives them (DevTools protocol), in the page's order."""
    session = browser.new_cdp_session(page)
    nodes = session.send("Accessibility.getFullAXTree")["nodes"]
    return [(node["role"]["value"], node.get("name", {}).get("value", ""))
            for node in nodes if not node.get("ignored")
            and node.get("role", {}).get("value") in roles]


def test_each_sample_box_and_copy_button_has_a_name_of_its_own(
    browser: BrowserContext, site: str
) -> None:
    """Each sample's scrolling box is a region named by its heading, and each copy button
    says what it copies: two buttons both named "Copy" tell a screen reader nothing. The
    response is drawn once (the button holds its stored form, not shown)."""
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/{entry_page(LIVE_ID)}")
    expect(page.locator("button.copy").first).to_be_visible()
    shown = page.locator("#sample-response").inner_text()
    assert page.evaluate("document.body.innerText").count(shown) == 1
    named = accessible_names(browser, page, {"region", "button"})
    assert [node for node in named if node[1].lower().startswith(("sample", "copy"))] == [
        ("button", "Copy sample request"), ("region", "Sample request"),
        ("button", "Copy sample response"), ("region", "Sample response")]
    expect(page.locator("button.copy").first).to_have_text("Copy")
    assert watch.problems == []


# How a lifecycle badge is drawn: its words and whatever line is drawn through or under them.
BADGE_LINES = """
badge => ({text: badge.textContent, line: getComputedStyle(badge).textDecorationLine})
"""


def test_a_deprecated_badge_is_never_struck_through(
    browser: BrowserContext, site: str
) -> None:
    """The badge of a deprecated entry reads as the plain word on its page, its category's
    card and the index's card the script draws: a line through "Deprecated" made it the one
    badge hard to read."""
    page = browser.new_page()
    watch = Watch(page)
    card = f'li.card[data-id="{DEPRECATED_ID}"] .badge.lifecycle-deprecated'
    page.goto(f"{site}/{entry_page(DEPRECATED_ID)}")
    drawn = [page.locator(".badge.lifecycle-deprecated").evaluate(BADGE_LINES)]
    page.goto(f"{site}/{category_page('weather')}")
    drawn.append(page.locator(card).evaluate(BADGE_LINES))
    page.goto(f"{site}/index.html")
    page.fill("#filter-q", "old forecast")
    drawn.append(page.locator(card).evaluate(BADGE_LINES))
    assert drawn == [{"text": "Deprecated", "line": "none"}] * 3
    assert watch.problems == []


def test_a_deprecated_entrys_index_card_names_its_successor_as_its_category_card_does(
    browser: BrowserContext, site: str
) -> None:
    """The card the script draws from the search index says what replaces a deprecated entry,
    by the successor's name with a link to its page, in the markup of its category's card."""
    line = f'li.card[data-id="{DEPRECATED_ID}"] .successor'
    served = browser.new_page()
    served.goto(f"{site}/{category_page('weather')}")
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/index.html")
    page.fill("#filter-q", "old forecast")
    expect(page.locator(line)).to_have_text("Use Open-Meteo Forecast API instead.")
    assert served.locator(line).inner_text() == page.locator(line).inner_text()
    assert markup(served.locator(line).evaluate("p => p.outerHTML")).replace(
        'href="../', 'href="') == markup(page.locator(line).evaluate("p => p.outerHTML"))
    page.locator(f"{line} a").click()
    page.wait_for_url("**/apis/open-meteo-forecast.html")
    assert watch.problems == []


def test_the_404_page_reads_with_its_stylesheet(browser: BrowserContext, site: str) -> None:
    page = browser.new_page()
    watch = Watch(page)
    page.goto(f"{site}/{NOT_FOUND_PAGE}")
    expect(page.locator("h1")).to_have_text("Page not found")
    assert page.evaluate("getComputedStyle(document.querySelector('.skip')).position") \
        == "absolute"  # the site's stylesheet applies
    page.click("text=All APIs")
    page.wait_for_url("**/index.html")
    expect(page.locator("#filters")).to_be_visible()
    assert watch.problems == []


def test_the_index_opened_from_disk_says_its_list_cannot_load(
    browser: BrowserContext, sample: SampleRelease
) -> None:
    page = browser.new_page()
    page.goto((sample.folder / "index.html").as_uri())  # file:// refuses the index's request
    expect(page.locator("#load-error")).to_be_visible()
    expect(page.locator("#filters")).to_be_hidden()
    page.click("text=Finance & Markets")  # the categories still lead to every API
    expect(page.locator(f'li.card[data-id="{LIVE_ID}"]')).to_be_visible()
