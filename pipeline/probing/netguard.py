"""Network guard: the prober only ever connects to public addresses.

A catalogue entry (or a redirect it answers with) must not make the prober reach
the machine it runs on, its network, or a cloud metadata service. Two checks:

- `GuardedResolver` is the connector's resolver: it resolves a host name, refuses
  the host if ANY of its addresses is blocked, and hands back exactly the addresses
  it checked (numeric, so nothing resolves them again). The connection therefore
  goes to an address that was checked: there is no DNS-rebinding window.
- `check_url` refuses other schemes than http(s) and blocked IP-literal hosts,
  which aiohttp connects to without asking the resolver. The prober calls it
  before every hop, redirects included.

`GuardPolicy(allow_private=True)` turns the built-in table off (tests on loopback);
`blocked_networks` is an extra deny list applied in both modes.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES: Final = frozenset({"http", "https"})


class BlockedAddressError(OSError):
    """A URL or resolved address the guard refuses to connect to.

    An OSError so that aiohttp treats it as a resolver failure (it wraps it in
    ClientConnectorDNSError); the prober unwraps it to report `blocked`.
    """

    def __init__(self, target: str, reason: str, address: str | None = None) -> None:
        self.target = target
        self.reason = reason
        self.address = address
        where = f"{target} ({address})" if address and address != target else target
        super().__init__(f"blocked: {where} is {reason}")


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), reason) for net, reason in pairs)


# Written out rather than taken from ipaddress' is_private/is_global, whose answers
# changed between Python patch releases; the first matching row names the reason.
_IPV4_BLOCKED = _nets(
    ("0.0.0.0/8", "unspecified"),  # "this network"
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),  # 169.254.169.254: cloud metadata
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved"),  # deprecated 6to4 relay anycast
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),  # includes 255.255.255.255
)
# Only global unicast 2000::/3 is allowed, minus these; outside it the reason is
# looked up in _IPV6_SPECIAL (default "reserved").
_IPV6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_IPV6_BLOCKED = _nets(
    ("2001::/23", "reserved"),  # IETF protocol assignments: Teredo, benchmarking, ORCHID
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
)
_IPV6_SPECIAL = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "private"),  # unique local addresses
    ("fe80::/10", "link-local"),
    ("fec0::/10", "private"),  # deprecated site-local
    ("ff00::/8", "multicast"),
)
# IPv6 forms that carry an IPv4 address: judged by the IPv4 address they carry.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Hosts like 2130706433, 127.1, 0x7f.1 or 0177.0.0.1: inet_aton reads them as addresses.
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$", re.IGNORECASE)


def parse_address(text: str) -> IPAddress | None:
    """The IP address written in `text` (brackets and an IPv6 zone allowed), else None."""
    text = text.strip("[]").split("%", 1)[0]
    if ":" not in text and not text.replace(".", "").isdigit():
        return None  # a host name: no IPv6 colon, not only digits and dots (the common case,
        # told without the two failed parses and the error ip_address raises for it)
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def builtin_reason(address: IPAddress) -> str | None:
    """Why the built-in table refuses `address` (e.g. "loopback"), or None if it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return builtin_reason(embedded)
        if address not in _IPV6_GLOBAL_UNICAST:
            return next((r for net, r in _IPV6_SPECIAL if address in net), "reserved")
        table: Iterable[tuple[IPNetwork, str]] = _IPV6_BLOCKED
    else:
        table = _IPV4_BLOCKED
    return next((reason for net, reason in table if address in net), None)


@dataclass(frozen=True)
class GuardPolicy:
    """Which addresses are refused: the built-in table unless allow_private, plus extras."""

    allow_private: bool = False
    blocked_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_strings(cls, allow_private: bool, blocked_networks: Iterable[str] = ()) -> GuardPolicy:
        nets = tuple(ipaddress.ip_network(net, strict=False) for net in blocked_networks)
        return cls(allow_private=allow_private, blocked_networks=nets)

    def reason(self, address: IPAddress) -> str | None:
        """Why `address` is refused, or None if it may be connected to."""
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            if embedded is not None:
                candidates.append(embedded)
        for candidate in candidates:
            for net in self.blocked_networks:
                if candidate.version == net.version and candidate in net:
                    return f"in blocked network {net}"
        return None if self.allow_private else builtin_reason(address)

    def check_address(self, address: str, target: str | None = None) -> IPAddress:
        """The parsed address, or BlockedAddressError if refused (or not an address)."""
        parsed = parse_address(address)
        if parsed is None:
            raise BlockedAddressError(target or address, "not an IP address", address)
        reason = self.reason(parsed)
        if reason is not None:
            raise BlockedAddressError(target or address, reason, address)
        return parsed

    def check_url(self, url: URL) -> None:
        """Refuse non-http(s) URLs, URLs without a host, and blocked IP-literal hosts."""
        if url.scheme not in ALLOWED_SCHEMES:
            raise BlockedAddressError(str(url), f"not http(s) (scheme {url.scheme or 'none'!r})")
        host = url.raw_host
        if not host:
            raise BlockedAddressError(str(url), "a URL without a host")
        if parse_address(host) is not None:
            self.check_address(host, target=host)
        elif _NUMERIC_HOST.match(host):
            raise BlockedAddressError(host, "a non-canonical IP address")


class GuardedResolver(AbstractResolver):
    """Resolves through `inner`, checks every address, returns only checked numeric ones."""

    def __init__(self, policy: GuardPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if not results:
            raise OSError(socket.EAI_NONAME, f"{host} has no address")
        checked: list[ResolveResult] = []
        for result in results:
            self.policy.check_address(result["host"], target=host)
            # Numeric flags: the connector must use this address as is, never look it up.
            checked.append({**result, "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV})
        return checked

    async def close(self) -> None:
        await self._inner.close()
