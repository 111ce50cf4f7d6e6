"""`apidir draft`: an entry drafted from a provider's official API description (OpenAPI 3.0,
3.1, Swagger 2.0 fixtures), every unknowable field a TODO that `validate` rejects."""

from __future__ import annotations

import asyncio
import gzip
import os
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from pipeline.catalogue.draft import (
    MAX_DESCRIPTION_BYTES,
    MAX_DESCRIPTION_DEPTH,
    PUBLIC_ONLY,
    DraftError,
    draft_entry,
    load_description,
    render_draft,
    write_draft,
)
from pipeline.catalogue.entries import read_catalog
from pipeline.probing.netguard import GuardPolicy
from pipeline.probing.probe import MAX_REDIRECTS
from pipeline.settings import Settings
from tests.conftest import REPO, make_entry

FIXTURES = REPO / "tests" / "fixtures" / "openapi"
# The servers of these tests are on loopback: allowed as the prober's tests allow them.
LOOPBACK = GuardPolicy(allow_private=True)


def drafted(name: str, **options: str) -> dict:
    source = str(FIXTURES / name)
    return draft_entry(load_description(source), source, **options)


def test_openapi_3_0() -> None:
    entry = drafted("petstore-3.0.yaml", category="developer")
    assert (entry["id"], entry["name"]) == ("swagger-petstore", "Swagger Petstore")
    assert entry["baseUrl"] == "http://petstore.swagger.io/v1"
    assert [(e["method"], e["path"]) for e in entry["endpoints"]] == [
        ("GET", "/pets"), ("GET", "/pets/{petId}"), ("POST", "/pets")]
    assert entry["endpoints"][0]["description"] == "List all pets"
    assert entry["category"] == "developer"


def test_openapi_3_1_with_a_bearer_scheme() -> None:
    entry = drafted("resend-3.1-trimmed.yaml")
    assert entry["baseUrl"] == "https://api.resend.com"
    assert (entry["authType"], entry["authExample"]) == (
        "bearer", "Authorization: Bearer YOUR_API_KEY")
    methods = [(e["method"], e["path"]) for e in entry["endpoints"]]
    assert len(methods) == 8  # up to eight, the probeable GETs first, none deprecated
    assert methods[:4] == [("GET", "/emails"), ("GET", "/domains"), ("GET", "/api-keys"),
                           ("GET", "/contacts")]
    assert methods[4][0] == "GET" and "{" in methods[4][1]
    assert "/audiences" not in {path for _, path in methods}
    assert entry["description"] == "Resend is the email platform for developers."


def test_servers_given_on_the_paths_only_and_no_security_scheme() -> None:
    """Some descriptions (Open-Meteo's among them) name their servers per path."""
    document = {
        "openapi": "3.1.0",
        "info": {"title": "Flood API", "contact": {"name": "Example Org"},
                 "description": "Daily river discharge forecasts. More text."},
        "paths": {"/v1/flood": {
            "servers": [{"url": "http://flood.example.org"}, {"url": "https://flood.example.org"}],
            "get": {"summary": "Daily river discharge forecast"}}},
    }
    entry = draft_entry(document, "flood.yml")
    assert entry["baseUrl"] == "https://flood.example.org"  # the https server preferred
    assert entry["provider"] == "Example Org"
    assert entry["description"] == "Daily river discharge forecasts."
    assert entry["authType"] == "none" and entry["authDescription"].startswith("TODO:")
    assert entry["endpoints"] == [{"method": "GET", "path": "/v1/flood",
                                   "description": "Daily river discharge forecast"}]


def test_swagger_2_0() -> None:
    entry = drafted("osv-swagger-2.0.json")
    assert (entry["id"], entry["baseUrl"]) == ("osv", "https://api.osv.dev")
    assert [(e["method"], e["path"]) for e in entry["endpoints"]][:2] == [
        ("GET", "/v1/vulns/{id}"), ("GET", "/v1experimental/importfindings/{source}")]
    assert {e["method"] for e in entry["endpoints"][2:]} == {"POST"}


def test_frankfurter_3_1_draft_states_what_it_cannot_know() -> None:
    entry = drafted("frankfurter-3.1.json", category="finance")
    assert entry["baseUrl"] == "https://api.frankfurter.dev/v1"
    for field in ("color", "pricing", "rateLimit", "sampleRequest", "sampleResponse",
                  "hasFreeTier", "verified", "docsUrl"):
        assert str(entry[field]).startswith("TODO:"), field


def test_validate_rejects_a_draft_until_every_todo_is_filled(tmp_path: Path) -> None:
    entries = tmp_path / "entries"
    path = entries / "finance" / "frankfurter-api.yaml"
    path.parent.mkdir(parents=True)
    entry = drafted("frankfurter-3.1.json", category="finance")
    path.write_text(render_draft(entry))
    problems = read_catalog([entries], entries).problems
    todo = {p.field for p in problems if p.rule == "draft-todo"}
    assert {"color", "pricing", "rateLimit", "sampleRequest", "verified"} <= todo
    assert all(p.line for p in problems if p.rule == "draft-todo")
    assert not [p for p in problems if p.field == "color" and p.rule != "draft-todo"]

    filled = make_entry(id="frankfurter-api", category="finance")
    for key, value in list(entry.items()):
        if isinstance(value, str) and value.startswith("TODO:"):
            entry[key] = filled.get(key)
    entry["tags"] = filled["tags"]
    entry["authDescription"] = "No key is needed."
    entry["docsUrl"] = "https://frankfurter.dev"
    entry["sources"] = ["https://frankfurter.dev"]
    entry["sampleRequest"] = 'curl "https://api.frankfurter.dev/v1/latest"'
    path.write_text(yaml.safe_dump(entry, sort_keys=False))
    assert read_catalog([entries], entries).problems == []


def test_not_an_api_description_is_one_clear_error(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("just: a mapping\n")
    with pytest.raises(DraftError, match=r"not an OpenAPI 3\.x or Swagger 2\.0 description"):
        load_description(str(other))


def apidir(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO,
                          env=os.environ | env, capture_output=True, text=True, timeout=120)


def test_the_command_writes_the_file_once_and_refuses_to_overwrite(
    settings_env: dict[str, str], data_dir: Path
) -> None:
    fixture = str(FIXTURES / "osv-swagger-2.0.json")
    done = apidir("draft", fixture, "--category", "security", "--id", "osv-draft",
                  env=settings_env)
    assert done.returncode == 0, done.stderr
    written = data_dir / "entries" / "security" / "osv-draft.yaml"
    assert yaml.safe_load(written.read_text())["baseUrl"] == "https://api.osv.dev"
    again = apidir("draft", fixture, "--category", "security", "--id", "osv-draft",
                   env=settings_env)
    assert again.returncode == 2 and "exists already" in again.stderr
    assert apidir("validate", str(written), env=settings_env).returncode == 1
    bad = apidir("draft", str(REPO / "pyproject.toml"), env=settings_env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


async def test_a_description_at_a_url_is_fetched_and_named(settings_env: dict[str, str]) -> None:
    """The request names the directory as the prober does (the draft sent a bare
    `apidir-draft`, with no version and no address to reach it at)."""
    body = (FIXTURES / "petstore-3.0.yaml").read_bytes()
    agents: list[str] = []

    async def serve(request: web.Request) -> web.Response:
        agents.append(request.headers.get("User-Agent", ""))
        return web.Response(body=body, content_type="application/yaml")

    async with serving(serve) as url:
        done = await asyncio.to_thread(apidir, "draft", url,
                                       env=settings_env | {"APIDIR_PROBE_ALLOW_PRIVATE": "true"})
    assert done.returncode == 0, done.stderr
    entry = yaml.safe_load(done.stdout)
    assert entry["openapiUrl"] == url and entry["sources"] == [url]
    assert entry["name"] == "Swagger Petstore"
    prober = Settings(base_url=settings_env["APIDIR_BASE_URL"]).probe_settings().user_agent
    assert agents == [f"apidir-draft/2.0 (+{settings_env['APIDIR_BASE_URL']}; reads an API "
                      "description to draft an entry)"]
    assert prober.startswith("apidir-prober/2.0 (+https://directory.test; ")


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(("coding", "pack"), [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("deflate", raw_deflate), ("identity", bytes)])
async def test_a_body_compressed_anyway_is_decoded(coding: str, pack: Callable[[bytes], bytes]
                                                   ) -> None:
    """Identity is asked for; a server that compresses anyway was refused as "not UTF-8"."""
    text = (FIXTURES / "petstore-3.0.yaml").read_bytes()

    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=pack(text), headers={"Content-Encoding": coding})

    async with serving(serve) as url:
        document = await asyncio.to_thread(load_description, url, policy=LOOPBACK)
    assert document["info"]["title"] == "Swagger Petstore"


async def test_a_gzip_bomb_is_refused_as_a_large_file_is() -> None:
    """A few kilobytes of gzip that expand past the limit are refused by the size rule, and
    never decoded further than one byte past it."""
    bomb = gzip.compress(b"openapi: 3.0.0\n#" + b"x" * MAX_DESCRIPTION_BYTES, compresslevel=9)
    assert len(bomb) < MAX_DESCRIPTION_BYTES // 100

    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})

    async with serving(serve) as url:
        message = await asyncio.to_thread(refusal, url)
    assert message == f"{url}: file is larger than {MAX_DESCRIPTION_BYTES:,} bytes [too-large]"


PACKED = gzip.compress((FIXTURES / "petstore-3.0.yaml").read_bytes())


@pytest.mark.parametrize(("coding", "body", "problem"), [
    ("gzip", b"\x1f\x8b not gzip at all", "its gzip body is corrupt"),
    ("gzip", PACKED[:len(PACKED) // 2],
     "its gzip body ends before the end of its compressed stream"),
    ("br", b"\x0b\x02\x80openapi", "sent in the 'br' encoding, where a draft reads gzip, "
                                   "deflate or none"),
], ids=["corrupt", "cut-short", "brotli"])
async def test_a_body_that_cannot_be_decoded_is_one_line(coding: str, body: bytes,
                                                         problem: str) -> None:
    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Encoding": coding})

    async with serving(serve) as url:
        message = await asyncio.to_thread(refusal, url)
    assert message.startswith(f"{url}: cannot download it: {problem}"), message


@pytest.mark.parametrize("value", ["!!bool abc", "!!timestamp abc", "2026-02-30"])
def test_a_description_with_a_value_yaml_cannot_build_is_one_line(
    tmp_path: Path, value: str
) -> None:
    """`!!bool abc` raised a KeyError, `!!timestamp abc` an AttributeError: each is told as
    the description's own problem, in one line."""
    path = tmp_path / "openapi.yaml"
    path.write_text(f"openapi: 3.0.0\ninfo:\n  title: X\n  version: {value}\npaths: {{}}\n")
    with pytest.raises(DraftError, match=r"neither JSON nor YAML: .+") as refused:
        load_description(str(path))
    assert "\n" not in str(refused.value)


# Seven levels of ten aliases: ten million values once expanded, from a file of 1 KB.
ALIAS_BOMB = "".join(
    ["openapi: 3.0.0\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"]
    + [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 7)]
    + ["info:\n  title: Bomb\n  version: '1'\n  description: *a6\npaths: {}\n"]
)


def refusal(source: str | Path, policy: GuardPolicy = LOOPBACK, **options: float) -> str:
    """The one line `load_description` refuses `source` with."""
    with pytest.raises(DraftError) as refused:
        load_description(str(source), policy=policy, **options)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_an_alias_bomb_is_refused_by_the_entry_files_rule(tmp_path: Path) -> None:
    """The loader shares what an alias names, but a draft printed the description through
    `str`, which expands it: a file of 1 KB grew past a gigabyte."""
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    message = refusal(path)
    assert message.startswith(f"{path}: line ") and message.endswith("[alias-bomb]")


@pytest.mark.parametrize(("name", "text", "line"), [
    ("deep.json", '{"openapi": "3.0.0", "x": ' + "[" * 5000 + "]" * 5000 + "}", 1),
    ("deep.yaml", "openapi: 3.0.0\nx: " + "[" * 500 + "]" * 500 + "\n", 2),
])
def test_a_description_nested_past_the_limit_is_refused(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    """Deep JSON ended in a RecursionError of the JSON parser."""
    path = tmp_path / name
    path.write_text(text)
    assert refusal(path) == (f"{path}: line {line}: nested deeper than "
                             f"{MAX_DESCRIPTION_DEPTH} levels [too-deep]")


def test_brackets_inside_json_strings_are_no_nesting(tmp_path: Path) -> None:
    path = tmp_path / "brackets.json"
    path.write_text('{"openapi": "3.0.0", "info": {"title": "B", "description": '
                    '"[[[{{ \\" ' + "[" * 500 + '"}, "paths": {}}')
    assert load_description(str(path))["info"]["title"] == "B"


def test_a_key_given_twice_in_json_is_refused_as_in_yaml(tmp_path: Path) -> None:
    """JSON kept the last of two keys without a word, where YAML refuses the file."""
    path = tmp_path / "twice.json"
    path.write_text('{"openapi": "3.0.0", "info": {"title": "A"}, "info": {"title": "B"}}')
    assert refusal(path) == f"{path}: not valid JSON: key 'info' is given twice"


@pytest.mark.parametrize(("text", "problem"), [
    ("info: hello", "info: expected a mapping, found a string"),
    ("info: {title: A, contact: [x]}", "info.contact: expected a mapping, found a list"),
    ("info: {title: {a: 1}}", "info.title: expected a string or number, found a mapping"),
    ("components: {securitySchemes: {key: hello}}",
     "components.securitySchemes.key: expected a mapping, found a string"),
    ("paths: {/pets: hello}", 'paths["/pets"]: expected a mapping, found a string'),
    ("paths: {/pets: {get: [1]}}", 'paths["/pets"].get: expected a mapping, found a list'),
    ("paths: {/pets: {servers: [x]}}",
     'paths["/pets"].servers[0]: expected a mapping, found a string'),
    ("servers: {url: x}", "servers: expected a list, found a mapping"),
    ("security: [oops]", "security[0]: expected a mapping, found a string"),
])
def test_a_field_of_the_wrong_shape_is_one_line_naming_it(
    tmp_path: Path, text: str, problem: str
) -> None:
    """Most ended in "unexpected AttributeError: 'str' object has no attribute 'get'"."""
    path = tmp_path / "spec.yaml"
    path.write_text(f"openapi: 3.0.0\n{text}\n")
    assert refusal(path) == f"{path}: {problem}"


def test_an_extension_among_the_paths_is_no_path(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("openapi: 3.1.0\ninfo: {title: X}\n"
                    "paths: {x-internal: yes, /pets: {get: {summary: List pets}}}\n")
    entry = draft_entry(load_description(str(path)), str(path))
    assert [(e["method"], e["path"]) for e in entry["endpoints"]] == [("GET", "/pets")]


def test_a_long_title_makes_an_id_of_the_entry_ids_length(tmp_path: Path) -> None:
    document = {"openapi": "3.0.0", "info": {"title": "word " * 60}, "paths": {}}
    entry_id = draft_entry(document, str(tmp_path / "spec.yaml"))["id"]
    assert len(entry_id) <= 100 and entry_id.startswith("word-word") and entry_id[-1] != "-"


def test_a_folder_or_no_path_is_told_by_its_name(tmp_path: Path) -> None:
    """Both said "[Errno 21] Is a directory: 3": the number of the file handle."""
    assert refusal(tmp_path) == f"{tmp_path}: cannot read it: Is a directory"
    assert refusal(tmp_path / "absent.yaml") == (
        f"{tmp_path / 'absent.yaml'}: cannot read it: No such file or directory")
    assert refusal("") == "no description named: give its file or its http(s) URL"


@pytest.mark.parametrize("source", ["ftp://provider.test/openapi.json",
                                    "file:///srv/openapi.json", "s3://bucket/openapi.yaml"])
def test_an_address_of_another_scheme_is_told_as_such_not_as_a_missing_file(
    source: str,
) -> None:
    """An address other than http(s) was read as a file's name and told missing ("No such
    file or directory"), as if mistyped; it is said that only http(s) is downloaded."""
    assert refusal(source) == (f"{source}: only http(s) addresses are downloaded: give the "
                               "description's http(s) URL, or its file's path")


def test_a_file_whose_name_looks_like_an_address_is_read(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that exists is read, whatever its name looks like."""
    (tmp_path / "v1:").mkdir()
    (tmp_path / "v1:" / "openapi.json").write_text(
        '{"openapi": "3.0.0", "info": {"title": "Odd"}, "paths": {}}')
    monkeypatch.chdir(tmp_path)
    assert load_description("v1://openapi.json")["info"]["title"] == "Odd"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """The address of `handler`, served on loopback (`host`) by a real aiohttp server."""
    app = web.Application()
    app.router.add_get("/openapi.yaml", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    try:
        yield f"http://{host}:{site._server.sockets[0].getsockname()[1]}/openapi.yaml"
    finally:
        await runner.cleanup()


async def test_an_alias_bomb_at_a_url_is_refused(tmp_path: Path) -> None:
    async def serve(_: web.Request) -> web.Response:
        return web.Response(text=ALIAS_BOMB)

    async with serving(serve) as url:
        message = await asyncio.to_thread(refusal, url)
    assert message.startswith(f"{url}: line ") and message.endswith("[alias-bomb]")


async def test_a_download_that_trickles_ends_at_its_deadline() -> None:
    """One byte at a time kept each read within its timeout, and the command for ever."""
    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        while True:
            await response.write(b"#")
            await asyncio.sleep(0.05)

    async with serving(trickle) as url:
        message = await asyncio.to_thread(refusal, url, deadline=0.5)
    assert message == f"{url}: not downloaded within 0.5 s"


async def test_a_description_past_the_size_limit_is_refused_alike_from_a_file_or_a_url(
    tmp_path: Path
) -> None:
    """A body past the limit was cut off at it and parsed, where a file was refused."""
    text = (FIXTURES / "petstore-3.0.yaml").read_text()
    padded = text + "# " + "x" * (MAX_DESCRIPTION_BYTES - len(text)) + "\n"
    path = tmp_path / "big.yaml"
    path.write_text(padded)

    async def serve(_: web.Request) -> web.Response:
        return web.Response(text=padded)

    async with serving(serve) as url:
        from_url = await asyncio.to_thread(refusal, url)
    reason = f": file is larger than {MAX_DESCRIPTION_BYTES:,} bytes [too-large]"
    assert (refusal(path), from_url) == (f"{path}{reason}", f"{url}{reason}")


async def test_a_url_that_answers_an_error_says_its_status() -> None:
    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404)

    async with serving(missing) as url:
        message = await asyncio.to_thread(refusal, url)
    assert message == f"{url}: cannot download it: HTTP 404 Not Found"


@pytest.mark.parametrize("entry_id", ["../../../escaped", "Bad ID", "a" * 101])
def test_an_id_that_is_no_entry_id_is_refused_and_nothing_written(
    data_dir: Path, entry_id: str
) -> None:
    """`--id ../../../escaped` wrote its file beside the data folder."""
    fixture = str(FIXTURES / "petstore-3.0.yaml")
    done = apidir("draft", fixture, "--category", "ai", "--id", entry_id,
                  env={"APIDIR_DATA_DIR": str(data_dir)})
    assert (done.returncode, done.stderr) == (2, f"apidir: --id {entry_id!r} is not an entry "
                                              "id: lower-case letters, digits and single "
                                              "hyphens, at most 100 characters\n")
    assert sorted(p.name for p in data_dir.parent.rglob("*.yaml")) == ["categories.yaml"]


def test_a_draft_is_never_written_through_a_symlink(data_dir: Path, tmp_path: Path) -> None:
    """A category folder linked out of the data folder, or a dangling link where the file
    goes, led the draft outside it."""
    entries, outside = data_dir / "entries", tmp_path / "outside"
    outside.mkdir()
    (entries / "weather").symlink_to(outside)
    (entries / "ai").mkdir()
    (entries / "ai" / "pets.yaml").symlink_to(outside / "pets.yaml")
    with pytest.raises(DraftError, match=r"weather/pets\.yaml: links outside the data folder"):
        write_draft("id: pets\n", entries, "weather", "pets")
    with pytest.raises(DraftError, match=r"ai/pets\.yaml: links to nothing"):
        write_draft("id: pets\n", entries, "ai", "pets")
    assert list(outside.iterdir()) == []
    assert write_draft("id: pets\n", entries, "maps", "pets").read_text() == "id: pets\n"


PETSTORE = (FIXTURES / "petstore-3.0.yaml").read_text()


def redirecting_to(target: str) -> Handler:
    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound(target)
    return redirect


@pytest.mark.parametrize("inside", ["127.0.0.2", "localhost"])
async def test_a_redirect_to_an_address_the_guard_refuses_is_never_followed(inside: str) -> None:
    """aiohttp followed a description's redirects to any address: a cloud metadata service or
    a service of the machine itself. Every hop is held to the prober's guard, an address
    written as an IP literal as well as a name resolving to one (here the refused networks
    stand for them, loopback being where the tests run)."""
    reached: list[str] = []

    async def inner(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.Response(text=PETSTORE)

    outer_host = "127.0.0.1" if inside == "127.0.0.2" else "127.0.0.2"
    refused = ["127.0.0.2/32"] if inside == "127.0.0.2" else ["127.0.0.1/32", "::1/128"]
    policy = GuardPolicy.from_strings(True, refused)
    async with serving(inner, host="127.0.0.1" if inside == "localhost" else inside) as target:
        target = target.replace("127.0.0.1", inside)
        async with serving(redirecting_to(target), host=outer_host) as url:
            message = await asyncio.to_thread(refusal, url, policy)
    assert message.startswith(f"{url}: cannot download it: blocked: {inside}"), message
    assert "in blocked network" in message and reached == []


async def test_the_guard_is_on_unless_turned_off_as_for_the_prober() -> None:
    reached: list[str] = []

    async def serve(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.Response(text=PETSTORE)

    async with serving(serve) as url:
        message = await asyncio.to_thread(refusal, url, PUBLIC_ONLY)
        done = await asyncio.to_thread(apidir, "draft", url,
                                       env={"APIDIR_PROBE_ALLOW_PRIVATE": "false"})
    assert message == f"{url}: cannot download it: blocked: 127.0.0.1 is loopback"
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().endswith(message) and done.stderr.count("\n") == 1
    assert reached == []


async def test_redirects_are_followed_up_to_the_probers_limit() -> None:
    hops: list[int] = []

    async def again(request: web.Request) -> web.Response:
        hop = int(request.query.get("hop", "0"))
        hops.append(hop)
        raise web.HTTPFound(f"/openapi.yaml?hop={hop + 1}")

    async with serving(again) as url:
        message = await asyncio.to_thread(refusal, url)
    assert message == f"{url}: cannot download it: more than {MAX_REDIRECTS} redirects"
    assert hops == list(range(MAX_REDIRECTS + 1))


async def test_a_user_name_and_password_in_the_url_are_never_sent_nor_shown() -> None:
    """`http://alice:s3cret@host/x` was sent as `Authorization: Basic …`, and the password
    printed in the error and written in the draft; a redirect's user info neither."""
    sent: list[str | None] = []

    async def serve(request: web.Request) -> web.Response:
        sent.append(request.headers.get("Authorization"))
        if request.query.get("missing"):
            return web.Response(status=404)
        if not request.query.get("moved"):
            raise web.HTTPFound(str(request.url.with_user("bob").with_password("pw2")
                                    .with_query(moved=1)))
        return web.Response(text=PETSTORE.replace("http://petstore.swagger.io/v1", "/v1"))

    async with serving(serve) as url:
        secret = url.replace("http://", "http://alice:s3cret@")
        message = await asyncio.to_thread(refusal, f"{secret}?missing=1")
        document = await asyncio.to_thread(load_description, secret, policy=LOOPBACK)
    assert message == f"{url}?missing=1: cannot download it: HTTP 404 Not Found"
    assert sent == [None, None, None]
    entry = draft_entry(document, secret)
    assert (entry["openapiUrl"], entry["sources"]) == (url, [url])
    assert entry["baseUrl"] == url.removesuffix("/openapi.yaml") + "/v1"
    assert "s3cret" not in render_draft(entry)


def test_the_drafts_day_is_today_in_utc_whatever_the_machines_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hint for `verified` names today as the directory counts days, in UTC: in a zone
    whose date differs from UTC's at this hour, the machine's own date would be a day off."""
    import time
    from datetime import UTC, datetime

    utc = datetime.now(UTC)
    try:
        with monkeypatch.context() as zone:
            # UTC-12 is a day behind before noon UTC, UTC+14 a day ahead from 10:00 UTC
            zone.setenv("TZ", "Etc/GMT+12" if utc.hour < 12 else "Etc/GMT-14")
            time.tzset()
            entry = draft_entry({"openapi": "3.1.0", "info": {"title": "Flood"}}, "flood.yml")
            after = datetime.now(UTC).date()
    finally:
        time.tzset()  # the zone this process had
    assert any(f"e.g. {day}" in entry["verified"] for day in {utc.date(), after}), \
        entry["verified"]


def test_an_integer_too_long_to_write_is_one_line(tmp_path: Path) -> None:
    """`title: 0xfff…` (20,000 bits) built, and the draft's `str` of it ended in an unexpected
    ValueError; it fails to build, as a decimal integer that long does."""
    path = tmp_path / "spec.yaml"
    path.write_text(f"openapi: 3.0.0\ninfo: {{title: 0x{'f' * 5000}, version: '1'}}\n"
                    "paths: {}\n")
    assert refusal(path) == (f"{path}: neither JSON nor YAML: an integer of 20,000 bits, past "
                             "the 4,300 digits a number may have")
