"""The aiohttp transport (``capmaas.maas.AiohttpTransport``) under the real client, on real loopback sockets.

Against the simulator for a whole machine lifecycle; against small raw servers for each failure the
transport must hand to the client as the ``httpx`` exception the client maps (connect failures as
``ConnectError`` so that a POST that never left is retried, timeouts, a dropped connection, garbage); and
against a TLS server, verified with the CA given as ``ca_data``, refused without it, accepted only when told
``insecure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from capmaas import maas
from capmaas.maas import _transports
from capmaas.maas import errors as maas_errors
from capmaas_dev.devcluster.pki import make_serving_pki
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings, serve

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"X-Two: a\r\nX-Two: b\r\n\r\n[]"
)


@contextlib.asynccontextmanager
async def raw_server(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A loopback server answering every connection with ``handler``; yields its base URL."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


async def _read_request(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        await reader.readuntil(b"\r\n\r\n")


def answer(reply: bytes) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(reply)
        with contextlib.suppress(Exception):
            await writer.drain()
            writer.close()

    return handle


async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    await asyncio.sleep(30)


async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.close()


def transport(**kwargs: object) -> maas.AiohttpTransport:
    return maas.AiohttpTransport(ssl_context=maas.ssl_context(**kwargs))  # type: ignore[arg-type]


async def send(
    t: maas.AiohttpTransport, url: str, *, read: float = 5.0, connect: float = 5.0
) -> httpx.Response:
    request = httpx.Request(
        "POST", url, content=b"x=1", extensions={"timeout": {"connect": connect, "read": read}}
    )
    try:
        response = await t.handle_async_request(request)
        await response.aread()
        await response.aclose()
        return response
    finally:
        await t.aclose()


async def test_a_machine_lifecycle_through_the_transport() -> None:
    sim = Simulator(Inventory.generate(machines=6, zones=3, seed=1), timings=Timings.fast(), faults=Faults())
    async with serve(sim, host="127.0.0.1", port=0) as url:
        c = maas.MaasClient(url, api_key=sim.api_key, transport=transport(), max_retries=0)
        try:
            assert (await c.whoami()).username
            m = await c.machines.allocate(maas.AllocateConstraints(zone="az2"), agent_name="u1", comment="t")
            assert m.zone.name == "az2"
            deployed = await c.machines.deploy(m.system_id, user_data=b"#cloud-config\n", comment="t")
            assert deployed.status == maas.NodeStatus.DEPLOYING
            assert [x.system_id for x in await c.machines.list(agent_name="u1")] == [m.system_id]
            await c.machines.release(m.system_id, comment="t")
            with pytest.raises(maas_errors.NotFoundError):  # a 404 still reaches the client as one
                await c.machines.get("nosuch")
        finally:
            await c.aclose()
    requests = {(method, op) for (method, _, op) in sim.counters}
    assert {("POST", "allocate"), ("POST", "deploy"), ("POST", "release"), ("GET", None)} <= requests


async def test_the_answer_keeps_status_headers_and_body() -> None:
    async with raw_server(answer(OK)) as url:
        response = await send(transport(), url + "/x")
    assert response.status_code == 200
    assert response.headers.get_list("x-two") == ["a", "b"]
    assert response.content == b"[]"


def body_then(reply: bytes, then: Callable[[], Awaitable[None]]) -> Handler:
    """Headers promising 100 bytes, ``reply`` of them, then ``then`` (hang, or drop the connection)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + reply)
        await writer.drain()
        await then()
        writer.close()

    return handle


async def _nothing() -> None:
    return None


async def _long() -> None:
    await asyncio.sleep(30)


async def test_a_body_cut_short_is_a_read_error() -> None:
    async with raw_server(body_then(b"[1,", _nothing)) as url:
        with pytest.raises(httpx.ReadError):
            await send(transport(), url)


async def test_a_body_that_stalls_is_a_read_timeout() -> None:
    async with raw_server(body_then(b"[1,", _long)) as url:
        with pytest.raises(httpx.ReadTimeout):
            await send(transport(), url, read=0.2)


async def test_a_body_abandoned_midway_drops_the_connection() -> None:
    """The client stops reading past its cap: closing the response then must not wait for the rest."""
    async with raw_server(body_then(b"[1,", _long)) as url:
        t = transport()
        try:
            response = await t.handle_async_request(httpx.Request("GET", url))
            await asyncio.wait_for(response.aclose(), 2)
        finally:
            await t.aclose()


async def test_refused_connection_is_a_connect_error() -> None:
    async with raw_server(answer(OK)) as url:
        pass  # closed again: nothing listens on that port now
    with pytest.raises(httpx.ConnectError):
        await send(transport(), url)


async def test_no_answer_in_time_is_a_read_timeout() -> None:
    async with raw_server(hang) as url:
        with pytest.raises(httpx.ReadTimeout):
            await send(transport(), url, read=0.2)


async def test_a_dropped_connection_is_a_remote_protocol_error() -> None:
    async with raw_server(drop) as url:
        with pytest.raises(httpx.RemoteProtocolError):
            await send(transport(), url)


async def test_garbage_is_a_read_error() -> None:
    async with raw_server(answer(b"NOT HTTP AT ALL\r\n\r\n")) as url:
        with pytest.raises(httpx.ReadError):
            await send(transport(), url)


async def test_a_connect_that_takes_too_long_is_a_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connect phase is the event loop's; make it slower than the connect timeout."""
    loop = asyncio.get_running_loop()
    original = loop.create_connection

    async def slow(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(2)
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "create_connection", slow)
    async with raw_server(answer(OK)) as url:
        with pytest.raises(httpx.ConnectTimeout):
            await send(transport(), url, connect=0.2)


async def test_the_client_maps_transport_failures_to_its_tree() -> None:
    async with raw_server(hang) as url:
        c = maas.MaasClient(url + "/MAAS", api_key="a:b:c", transport=transport(), max_retries=0, timeout=0.3)
        with pytest.raises(maas_errors.RequestTimeoutError):
            await c.zones.list()
        await c.aclose()


async def test_closing_an_unused_transport_is_fine() -> None:
    await transport().aclose()


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    pki = make_serving_pki(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(pki.cert, pki.key)
    return server, pki.ca_cert.read_text()


async def test_tls_is_verified_against_the_given_ca(tls: tuple[ssl.SSLContext, str]) -> None:
    server, ca = tls
    async with raw_server(answer(OK), tls=server) as url:
        with pytest.raises(httpx.ConnectError):  # the system store does not know our CA
            await send(transport(), url)
        assert (await send(transport(ca_data=ca), url)).status_code == 200


async def test_insecure_skips_verification(tls: tuple[ssl.SSLContext, str]) -> None:
    server, _ = tls
    context = maas.ssl_context(insecure=True)
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname
    async with raw_server(answer(OK), tls=server) as url:
        assert (await send(maas.AiohttpTransport(ssl_context=context), url)).status_code == 200


def test_the_default_context_verifies() -> None:
    context = maas.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


@pytest.mark.parametrize(
    "ca", ["garbage", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"]
)
def test_a_ca_that_is_no_certificate_is_invalid_ca_error(ca: str) -> None:
    """Not ssl.SSLError escaping the client: the reconcilers map InvalidCaError to InvalidCredentials."""
    with pytest.raises(maas.InvalidCaError, match="not a PEM certificate"):
        maas.ssl_context(ca_data=ca)
    with pytest.raises(maas.InvalidCaError):
        maas.MaasClient("https://maas.example/MAAS", api_key="a:b:c", ca_data=ca)


@pytest.fixture
def store_loads(trust_store_loads: list[ssl.SSLContext]) -> Iterator[list[ssl.SSLContext]]:
    """Every load of the system's trust store from here on (the shared contexts made afresh)."""
    _transports._shared_context.cache_clear()
    yield trust_store_loads
    _transports._shared_context.cache_clear()


async def test_an_http_endpoint_never_loads_the_system_trust_store(
    store_loads: list[ssl.SSLContext], tls: tuple[ssl.SSLContext, str]
) -> None:
    """A transport without a context of its own loads the store at its first https request, not before, and
    every such transport shares that one context; verification stays on (our CA is not in the store)."""
    async with raw_server(answer(OK)) as url:
        assert (await send(maas.AiohttpTransport(), url)).status_code == 200
    assert store_loads == []
    server, _ = tls
    async with raw_server(answer(OK), tls=server) as url:
        for _ in range(2):
            with pytest.raises(httpx.ConnectError):
                await send(maas.AiohttpTransport(), url)
    assert len(store_loads) == 1


def test_one_context_per_trust_configuration(
    store_loads: list[ssl.SSLContext], tls: tuple[ssl.SSLContext, str]
) -> None:
    _, ca = tls
    assert maas.ssl_context() is maas.ssl_context()
    assert maas.ssl_context(ca_data=ca) is maas.ssl_context(ca_data=ca)
    assert maas.ssl_context(ca_data=ca) is not maas.ssl_context()
    assert maas.ssl_context(insecure=True) is not maas.ssl_context()
    assert len(store_loads) == 2  # the default and the CA's (system store plus the CA); insecure loads none
