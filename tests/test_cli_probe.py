"""`apidir probe`: ad hoc probes printed for an operator, against a loopback server."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest_asyncio
from aiohttp import web

from tests.conftest import REPO


@pytest_asyncio.fixture(loop_scope="function")
async def loopback():
    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def locked(_: web.Request) -> web.Response:
        return web.Response(status=401)

    async def to_sign_in(_: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/login"})

    async def sign_in(_: web.Request) -> web.Response:
        return web.Response(text="<html>Sign in</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/locked", locked)
    app.router.add_get("/v1/things", to_sign_in)
    app.router.add_get("/login", sign_in)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def run_probe(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pipeline.cli", "probe", *args, cwd=REPO, env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode, out.decode(), err.decode()


async def test_probe_prints_json_results_for_urls(loopback: str) -> None:
    code, out, _ = await run_probe(f"{loopback}/ok", f"{loopback}/locked", "--allow-private",
                                   "--json")
    assert code == 0
    results = {r["url"]: r for r in map(json.loads, out.splitlines())}
    assert results[f"{loopback}/ok"]["outcome"] == "live"
    assert results[f"{loopback}/ok"]["http_status"] == 200
    assert results[f"{loopback}/locked"]["outcome"] == "online"
    assert results[f"{loopback}/locked"]["reason"] == "auth"
    assert results[f"{loopback}/ok"]["total_ms"] >= 0


async def test_a_redirect_to_a_sign_in_page_is_reported_as_a_run_publishes_it(
    loopback: str,
) -> None:
    """A URL redirected to an HTML page at another path (302 to /login, 200 text/html) is
    `online` with its own 302 and the page as where it ended, as a run publishes a listed
    endpoint's status (`finalUrl`), in both forms of the output; an unredirected URL names
    no final URL."""
    things, login = f"{loopback}/v1/things", f"{loopback}/login"
    code, out, err = await run_probe(things, f"{loopback}/ok", "--allow-private")
    assert code == 0, err
    line = next(line for line in out.splitlines() if things in line)
    assert line.split()[:2] == ["online", "302"] and "redirect" in line.split()
    assert line.endswith(f"{things} -> {login}")
    assert "->" not in next(line for line in out.splitlines() if f"{loopback}/ok" in line)
    code, out, err = await run_probe(things, "--allow-private", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["outcome"], result["http_status"], result["reason"], result["final_url"]) == (
        "online", 302, "redirect", login)
    code, out, err = await run_probe(f"{loopback}/ok", "--allow-private", "--json")
    assert code == 0, err
    assert json.loads(out)["final_url"] is None


async def test_probe_refuses_loopback_while_the_guard_is_on(loopback: str) -> None:
    code, out, err = await run_probe(f"{loopback}/ok")
    assert code == 1  # a probe that got no response fails the command
    assert "unreachable" in out and "blocked" in out
    assert "1 of 1 probe(s) got no HTTP response" in err


async def test_probe_names_an_unknown_entry() -> None:
    code, _, err = await run_probe("--entry", "no-such-entry")
    assert code == 2 and "no-such-entry" in err


async def test_credentials_in_a_url_never_reach_the_output(loopback: str) -> None:
    secret_url = loopback.replace("http://", "http://user:s3cret-word@") + "/ok"
    for args in (["--json"], []):
        code, out, err = await run_probe(secret_url, "--allow-private", *args)
        assert code == 0, err
        assert "s3cret-word" not in out + err and "user:" not in out + err
        assert f"{loopback}/ok" in out


async def test_a_failed_url_gets_its_second_look_and_is_counted_once(loopback: str) -> None:
    from fake_internet import closed_port

    refused = f"http://127.0.0.1:{closed_port()}/x"
    code, out, err = await run_probe(refused, f"{loopback}/ok", "--allow-private")
    assert code == 1
    lines = [line for line in out.splitlines() if refused in line]
    assert len(lines) == 2 and "[second look: transient]" in lines[1]
    assert "second look" not in lines[0]
    assert "1 of 2 probe(s) got no HTTP response" in err


async def test_a_warning_with_an_error_shows_on_the_terminal_as_its_line_alone() -> None:
    """`apidir probe` sets no log handler: a warning the prober logs with its error (an
    unexpected one) goes to Python's last resort, which shows its message, not a traceback."""
    script = ("import logging; from pipeline.cli import terminal_logs_without_tracebacks; "
              "terminal_logs_without_tracebacks(); terminal_logs_without_tracebacks(); "
              "logging.getLogger('pipeline.probing.probe').warning("
              "'unexpected error probing %s', 'http://a..b/', exc_info=ValueError('label'))")
    environment = {key: value for key, value in os.environ.items() if key != "APIDIR_DEBUG"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=REPO, env=environment,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert (process.returncode, err.decode()) == (0, "unexpected error probing http://a..b/\n")
