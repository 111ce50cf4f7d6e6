"""A fake internet on loopback for the prober tests: every server on 127.0.0.x, ephemeral ports.

`FakeServer` is an aiohttp low-level server whose protocol factory counts TCP
connections, opened and still open, so a test can prove that the guard let NO connection
through, or that the prober closed a host's connections. Every
request is recorded (method, headers, body length, arrival time, local address)
and the number of requests in flight is tracked per local address and overall.
`RawServer` speaks plain asyncio for what HTTP servers will not do: never answer,
answer garbage, reset the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

if TYPE_CHECKING:
    from cryptography import x509

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

HUGE_BODY = 1 << 30  # announced Content-Length of /huge: 1 GiB
CHUNK = 64 * 1024


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body_length: int
    arrived: float  # time.monotonic()
    local: str  # the address the request came in on


@dataclass
class FakeServer:
    """An HTTP server on one or more loopback addresses, same port, with canned routes."""

    hosts: Sequence[str] = ("127.0.0.1",)
    ssl_context: ssl.SSLContext | None = None
    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    connections: int = 0
    opened: Counter[str] = field(default_factory=Counter)  # connections, by local address
    open_now: Counter[str] = field(default_factory=Counter)  # of those, still open
    active: Counter[str] = field(default_factory=Counter)
    max_active: Counter[str] = field(default_factory=Counter)
    max_active_total: int = 0
    streamed: int = 0  # body bytes /huge managed to hand to the kernel
    stream_done: asyncio.Event = field(default_factory=asyncio.Event)
    hits: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _servers: list[asyncio.AbstractServer] = field(default_factory=list)
    _low_level: web.Server | None = None

    async def start(self) -> FakeServer:
        self.routes = {**default_routes(self), **self.routes}
        low_level = _CountingServer(self._handle, self)

        def factory() -> asyncio.Protocol:
            self.connections += 1
            return low_level()

        loop = asyncio.get_running_loop()
        for host in self.hosts:  # the first bind picks the port, the others share it
            server = await loop.create_server(
                factory, host=host, port=self.port, ssl=self.ssl_context
            )
            self.port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
        self._low_level = low_level
        return self

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        if self._low_level is not None:
            await self._low_level.shutdown(0.1)
        for server in self._servers:
            await server.wait_closed()

    def url(self, path: str = "/", host: str | None = None) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{host or self.hosts[0]}:{self.port}{path}"

    def arrivals(self, path: str | None = None, local: str | None = None) -> list[float]:
        return [
            r.arrived
            for r in self.requests
            if (path is None or r.path == path) and (local is None or r.local == local)
        ]

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local = sockname[0] if sockname else "?"
        body = await request.read()
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                query=request.query_string,
                headers=dict(request.headers),
                body_length=len(body),
                arrived=time.monotonic(),
                local=local,
            )
        )
        self.hits[request.path] += 1
        self.active[local] += 1
        self.max_active[local] = max(self.max_active[local], self.active[local])
        self.max_active_total = max(self.max_active_total, sum(self.active.values()))
        try:
            handler = self.routes.get(request.path)
            if handler is None:
                return web.Response(status=404, text="not found")
            return await handler(request)
        finally:
            self.active[local] -= 1


class _CountingServer(web.Server):
    """aiohttp's low-level server, counting its connections opened and still open by the
    local address they came in on."""

    def __init__(self, handler: Handler, fake: FakeServer) -> None:
        super().__init__(handler, access_log=None)
        self._fake = fake
        self._local: dict[object, str] = {}

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        local = self._local[handler] = transport.get_extra_info("sockname")[0]
        self._fake.opened[local] += 1
        self._fake.open_now[local] += 1
        super().connection_made(handler, transport)

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        if (local := self._local.pop(handler, None)) is not None:
            self._fake.open_now[local] -= 1
        super().connection_lost(handler, exc)


def default_routes(server: FakeServer) -> dict[str, Handler]:
    """The canned cases; `server` gives handlers their counters."""

    async def ok(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(text="ok")

    async def slow(r: web.BaseRequest) -> web.StreamResponse:
        await asyncio.sleep(float(r.query.get("d", "0.3")))
        return web.Response(text="slow")

    def status(code: int, headers: dict[str, str] | None = None) -> Handler:
        async def respond(_r: web.BaseRequest) -> web.StreamResponse:
            return web.Response(status=code, headers=headers or {}, text=f"status {code}")

        return respond

    async def flaky(r: web.BaseRequest) -> web.StreamResponse:
        """500 on the first request, 200 afterwards."""
        return web.Response(status=500 if server.hits[r.path] == 1 else 200)

    async def rate(r: web.BaseRequest) -> web.StreamResponse:
        """429 with Retry-After (seconds, from ?after=) on the first request, then 200."""
        if server.hits[r.path] == 1:
            return web.Response(status=429, headers={"Retry-After": r.query.get("after", "1")})
        return web.Response(text="ok")

    async def rate_date(r: web.BaseRequest) -> web.StreamResponse:
        """Like /rate, with Retry-After as an HTTP date two seconds ahead."""
        if server.hits[r.path] == 1:
            when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
            stamp = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
            return web.Response(status=429, headers={"Retry-After": stamp})
        return web.Response(text="ok")

    async def chain(r: web.BaseRequest) -> web.StreamResponse:
        """/chain?n=3 -> /chain?n=2 -> ... -> /ok (relative Location headers)."""
        left = int(r.query.get("n", "3"))
        target = f"/chain?n={left - 1}" if left > 1 else "/ok"
        return web.Response(status=302, headers={"Location": target})

    async def slow_chain(r: web.BaseRequest) -> web.StreamResponse:
        """/slow-chain?n=6&d=0.6: each hop answers its redirect after `d` seconds."""
        await asyncio.sleep(float(r.query.get("d", "0.6")))
        left = int(r.query.get("n", "6"))
        target = f"/slow-chain?n={left - 1}&d={r.query.get('d', '0.6')}" if left > 1 else "/ok"
        return web.Response(status=302, headers={"Location": target})

    async def loop_a(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(status=301, headers={"Location": "/loop-b"})

    async def loop_b(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "/loop-a"})

    async def redirect_to(r: web.BaseRequest) -> web.StreamResponse:
        """Redirect to ?to= (any absolute URL: another host, a blocked address)."""
        return web.Response(status=302, headers={"Location": r.query["to"]})

    async def cookie(_r: web.BaseRequest) -> web.StreamResponse:
        response = web.Response(status=302, headers={"Location": "/ok"})
        response.set_cookie("session", "secret")
        return response

    async def huge(r: web.BaseRequest) -> web.StreamResponse:
        """Announces 1 GiB and streams it until the client goes away; counts what got out."""
        response = web.StreamResponse(headers={"Content-Length": str(HUGE_BODY)})
        await response.prepare(r)
        chunk = b"x" * CHUNK
        try:
            while server.streamed < HUGE_BODY:
                await response.write(chunk)
                server.streamed += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        finally:
            server.stream_done.set()
        return response

    return {
        "/ok": ok,
        "/": ok,
        "/slow": slow,
        "/auth": status(401),
        "/forbidden": status(403),
        "/challenge": status(403, {"cf-mitigated": "challenge", "Server": "cloudflare"}),
        "/linkedin": status(999),
        "/missing": status(404),
        "/gone": status(410),
        "/method": status(405),
        "/teapot": status(418),
        "/unavailable": status(503),
        "/not-modified": status(304),
        "/flaky": flaky,
        "/rate": rate,
        "/rate-date": rate_date,
        "/chain": chain,
        "/loop-a": loop_a,
        "/loop-b": loop_b,
        "/redirect": redirect_to,
        "/slow-chain": slow_chain,
        "/cookie": cookie,
        "/huge": huge,
    }


async def _cancel_the_rest() -> None:
    """Cancel what still runs on this loop and let it end: handlers of connections a client
    left open (kept alive, or waiting on a hanging route) would otherwise be destroyed
    pending when the loop closes, each an error in the log."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@contextmanager
def serving_in_thread(server: FakeServer) -> Iterator[FakeServer]:
    """`server` started on an event loop of its own in a thread, for the block's length: it
    answers while the test's own loop is busy, and other processes reach it (flow runs of
    workers). Its records are read once the block's work is done."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-internet", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
        yield server
    finally:  # a failed test's server winds down too, or its pending handlers litter the log
        for wind_down in (server.close, _cancel_the_rest):
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(wind_down(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


@dataclass(kw_only=True)
class _StreamServer:
    """What the servers spoken by hand over asyncio streams share: a loopback port of their
    own (`host` given by name), their URLs, and a close that ends every connection they hold."""

    scheme = "http"
    host: str = "127.0.0.1"
    port: int = 0
    _server: asyncio.AbstractServer | None = None
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "/") -> str:
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


@dataclass
class RawServer(_StreamServer):
    """A TCP server with a fixed misbehaviour: 'hang', 'garbage', 'reset', 'ok', or
    'drop-after-redirect' (a redirect on a kept-alive connection, which the server then closes
    when the next request arrives on it, unanswered; `/ok` on a fresh connection answers 200)."""

    mode: str
    connections: int = 0
    dropped: int = 0  # requests closed unanswered

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        if self.mode == "drop-after-redirect":
            if head.startswith(b"GET /ok "):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n"
                             b"\r\nok")
            else:
                writer.write(b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                    await reader.readuntil(b"\r\n\r\n")  # the next hop, on this connection
                self.dropped += 1
            await writer.drain()
        elif self.mode == "hang":
            await reader.read()  # until the client gives up
        elif self.mode == "garbage":
            writer.write(b"SSH-2.0-OpenSSH_9.6 definitely not HTTP\r\n\x00\xff\r\n\r\n")
            await writer.drain()
        elif self.mode == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif self.mode == "ok":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        writer.close()


@dataclass
class CannedServer(_StreamServer):
    """A TCP server that answers every request, on kept-alive connections, with the same bytes
    (`answer`: a status line and headers as a hostile server may send them, never checked),
    and counts the requests. `later`, if any, follows the answer a moment after it, in a
    write of its own: what a client reads after the answer, not with it."""

    answer: bytes
    later: bytes = b""
    requests: int = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        with suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                writer.write(self.answer)
                await writer.drain()
                if self.later:
                    await asyncio.sleep(0.2)
                    writer.write(self.later)
                    await writer.drain()
        writer.close()


@dataclass
class SilentCloseServer(_StreamServer):
    """An HTTPS server that never answers a client's TLS close (its close_notify), as some
    servers on the internet do. It speaks TLS itself over the TCP stream (an SSLObject), so it
    can read on after the client's close_notify without answering it; `ended` counts the
    connections the client closed. Every request gets 200, kept alive."""

    scheme = "https"
    context: ssl.SSLContext
    ended: int = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)
        received = b""
        with suppress(ConnectionError):
            while data := await reader.read(CHUNK):
                incoming.write(data)
                # SSLZeroReturnError: the client's close_notify, never answered.
                with suppress(ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    tls.do_handshake()
                    while chunk := tls.read(CHUNK):
                        received += chunk
                while b"\r\n\r\n" in received:
                    received = received.partition(b"\r\n\r\n")[2]
                    tls.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                if pending := outgoing.read():
                    writer.write(pending)
                    await writer.drain()
        self.ended += 1
        writer.close()


def closed_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def unaccepting_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port that listens but never accepts, its queue full: new SYNs are dropped, so a
    connection attempt times out (the loopback stand-in for a host behind a silent firewall)."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind((host, 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with suppress(BlockingIOError):
                filler.connect((host, port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def self_signed_context(
    folder: Path,
    host: str | Sequence[str] = "127.0.0.1",
    valid: tuple[dt.timedelta, dt.timedelta] = (dt.timedelta(minutes=-5), dt.timedelta(hours=1)),
    lifetime: dt.timedelta | None = None,
) -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate for `host` (an IP or a DNS
    name such as `*.example.net`, or several), valid from now + valid[0] to now + valid[1]
    (chosen validity: expiring soon, expired) or, with `lifetime`, from five minutes ago for
    that long; the certificate is `folder/cert.pem`, which clients can be told to trust."""
    if lifetime is not None:
        valid = (dt.timedelta(minutes=-5), lifetime)
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-internet")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + valid[0])
        .not_valid_after(now + valid[1])
        .add_extension(
            x509.SubjectAlternativeName([
                _subject_name(address) for address in ([host] if isinstance(host, str) else host)
            ]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


def _subject_name(host: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class FakeDNS(AbstractResolver):
    """Answers from a table, never the network. A list of answer lists is served in turn (to
    play DNS rebinding); an int is a failure with that EAI_* code; a missing name is NXDOMAIN.
    With `port`, every answer names that port instead of the one asked for, so names on the
    standard ports reach servers listening on ephemeral ones."""

    def __init__(
        self, answers: dict[str, list[list[str]] | int], port: int | None = None
    ) -> None:
        self.answers = answers
        self.port = port
        self.calls: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls.append(host)
        rounds = self.answers.get(host, socket.EAI_NONAME)
        if isinstance(rounds, int):
            raise socket.gaierror(rounds, f"fake resolver failure {rounds}")
        addresses = rounds.pop(0) if len(rounds) > 1 else rounds[0]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port if self.port is None else self.port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        pass
