"""The network guard: the address table, URL checks, the pinning resolver, and end to end
through the prober (a blocked probe makes NO connection, counted at a loopback server)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from fake_internet import FakeDNS, FakeServer, RawServer
from yarl import URL

from pipeline.probing.netguard import (
    BlockedAddressError,
    GuardedResolver,
    GuardPolicy,
    builtin_reason,
    parse_address,
)
from pipeline.probing.probe import Prober, ProbeSettings, probe_url

BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.255", "cgnat"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.0.8", "reserved"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("192.0.2.10", "documentation"),
    ("198.51.100.10", "documentation"),
    ("203.0.113.10", "documentation"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456:789a::1", "private"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fec0::1", "private"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("2001::1", "reserved"),  # Teredo
    ("100::1", "reserved"),  # discard-only
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:169.254.169.254", "link-local"),
    ("::ffff:10.0.0.1", "private"),
    ("::127.0.0.1", "loopback"),  # IPv4-compatible (deprecated)
    ("::10.0.0.1", "private"),
    ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
    ("2002:c0a8:101::1", "private"),  # 6to4 of 192.168.1.1
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.128.0.1", "172.32.0.1", "2606:4700::1111",
          "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_builtin_table_refuses_every_special_range(address: str, reason: str) -> None:
    policy = GuardPolicy()
    assert policy.reason(ipaddress.ip_address(address.split("%")[0])) == reason
    with pytest.raises(BlockedAddressError, match=reason):
        policy.check_address(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert builtin_reason(ipaddress.ip_address(address)) is None
    GuardPolicy().check_address(address)


def test_allow_private_turns_the_table_off_but_keeps_explicit_denials() -> None:
    policy = GuardPolicy.from_strings(True, ["127.0.0.2/32", "fd00::/8"])
    assert policy.reason(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.reason(ipaddress.ip_address("127.0.0.2")) is not None
    assert policy.reason(ipaddress.ip_address("::ffff:127.0.0.2")) is not None
    assert policy.reason(ipaddress.ip_address("fd00::1")) is not None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com/",
        "http:///no-host",
        "http://127.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:8080/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://127.1/",
        "http://0x7f.0.0.1/",
        "http://0177.0.0.1/",
    ],
)
def test_check_url_refuses_schemes_and_blocked_literals(url: str) -> None:
    with pytest.raises(BlockedAddressError):
        GuardPolicy().check_url(URL(url))


@pytest.mark.parametrize("url", ["https://api.example.com/v1", "http://8.8.8.8/", "https://1.example"])
def test_check_url_passes_public_literals_and_leaves_names_to_the_resolver(url: str) -> None:
    GuardPolicy().check_url(URL(url))


@pytest.mark.parametrize("text", [
    "api.example.com", "1.example", "cafe", "ff", "1e100.net", "8.8.8.8", "8.8.8", "8.8.8.8.",
    "[::1]", "fe80::1%eth0", "::ffff:127.0.0.1", "2606:4700::1", "127.1", "0177.0.0.1",
    "2130706433", "\uff11\uff12\uff17.0.0.1", "\u0663.\u0663.\u0663.\u0663", "", ".", "[]", "a:b",
])
def test_an_address_is_read_as_ipaddress_reads_it_and_a_name_is_none(text: str) -> None:
    try:
        expected = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        expected = None
    assert parse_address(text) == expected


async def test_resolver_returns_only_checked_numeric_addresses() -> None:
    resolver = GuardedResolver(GuardPolicy(), FakeDNS({"api.test": [["8.8.8.8", "2606:4700::1"]]}))
    results = await resolver.resolve("api.test", 443)
    assert [r["host"] for r in results] == ["8.8.8.8", "2606:4700::1"]
    assert all(r["flags"] & socket.AI_NUMERICHOST for r in results)


async def test_resolver_refuses_the_host_if_any_address_is_blocked() -> None:
    dns = FakeDNS({"mixed.test": [["8.8.8.8", "10.0.0.5"]]})
    with pytest.raises(BlockedAddressError, match="private"):
        await GuardedResolver(GuardPolicy(), dns).resolve("mixed.test", 80)


async def test_resolver_checks_every_lookup_so_rebinding_is_caught() -> None:
    dns = FakeDNS({"rebind.test": [["8.8.8.8"], ["169.254.169.254"]]})
    resolver = GuardedResolver(GuardPolicy(), dns)
    assert (await resolver.resolve("rebind.test", 80))[0]["host"] == "8.8.8.8"
    with pytest.raises(BlockedAddressError, match="link-local"):
        await resolver.resolve("rebind.test", 80)


# --- end to end: blocked probes never reach the server -----------------------------------

GUARDED = ProbeSettings(per_host_interval=0, max_attempts=1, total_timeout=2)


@pytest_asyncio.fixture(loop_scope="function")  # the loop the test runs in
async def listener() -> AsyncIterator[RawServer]:
    """A loopback HTTP server that counts connections: a blocked probe must leave it at 0."""
    server = await RawServer("ok").start()
    yield server
    await server.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/",
        "http://localhost:{port}/",  # a name: refused by the resolver, not the literal check
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://2130706433:{port}/",
        "http://user:secret@127.0.0.1:{port}/",
    ],
)
async def test_guard_on_refuses_loopback_and_makes_no_connection(
    listener: RawServer, url: str
) -> None:
    result = await probe_url(url.format(port=listener.port), GUARDED)
    assert result.outcome == "unreachable"
    assert result.error_class == "blocked"
    assert result.http_status is None
    assert result.error and "blocked" in result.error
    assert listener.connections == 0


async def test_guard_refuses_a_name_whose_dns_answer_is_private(listener: RawServer) -> None:
    dns = FakeDNS({"api.example.test": [["127.0.0.1"]]})
    async with Prober(GUARDED, inner_resolver=dns) as prober:
        result = await prober.probe(f"http://api.example.test:{listener.port}/")
    assert (result.error_class, listener.connections) == ("blocked", 0)
    assert dns.calls == ["api.example.test"]


async def test_allow_private_turns_the_guard_off(listener: RawServer) -> None:
    result = await probe_url(listener.url(), ProbeSettings(allow_private=True, max_attempts=1))
    assert result.outcome == "live"
    assert listener.connections == 1


@pytest_asyncio.fixture(loop_scope="function")  # the loop the test runs in
async def second_address() -> AsyncIterator[RawServer]:
    """A counting server on 127.0.0.2: the redirect target the guard must refuse."""
    server = await RawServer("ok", host="127.0.0.2").start()
    yield server
    await server.close()


async def test_redirect_hop_to_a_blocked_literal_is_refused(second_address: RawServer) -> None:
    origin = await FakeServer().start()
    try:
        settings = ProbeSettings(
            allow_private=True, blocked_networks=("127.0.0.2/32",), per_host_interval=0
        )
        probed = origin.url(f"/redirect?to={second_address.url()}")
        result = await probe_url(probed, settings)
    finally:
        await origin.close()
    assert result.outcome == "unreachable"
    assert result.error_class == "blocked"
    assert result.redirects == 1
    assert result.final_url == probed  # the last URL requested, not the one refused
    assert origin.hits["/redirect"] == 1
    assert second_address.connections == 0


async def test_redirect_hop_to_a_blocked_name_is_refused_by_the_resolver() -> None:
    """The origin is on 127.0.0.2; the hop goes to `localhost` (127.0.0.1), which is denied."""
    target = await RawServer("ok").start()
    origin = await FakeServer(hosts=("127.0.0.2",)).start()
    try:
        settings = ProbeSettings(
            allow_private=True, blocked_networks=("127.0.0.1/32", "::1/128"), per_host_interval=0
        )
        hop = f"http://localhost:{target.port}/"
        result = await probe_url(origin.url(f"/redirect?to={hop}"), settings)
    finally:
        await origin.close()
        await target.close()
    assert (result.error_class, result.redirects) == ("blocked", 1)
    assert "localhost" in (result.error or "")
    assert target.connections == 0


async def test_redirect_to_another_scheme_is_refused() -> None:
    origin = await FakeServer().start()
    try:
        settings = ProbeSettings(allow_private=True, per_host_interval=0)
        result = await probe_url(origin.url("/redirect?to=file:///etc/passwd"), settings)
    finally:
        await origin.close()
    assert result.error_class == "blocked"
