"""What an endpoint that is not a friendly MAAS can cost: answers are capped while they stream, each attempt
has an overall deadline, error bodies stay out of messages, and the endpoint allow-list refuses other hosts.

The hostile answers here come through ``httpx.MockTransport`` (a byte stream of our making); the same attacks
against a real socket on loopback, through the operator, are in ``tests/security``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok, text

from capmaas.maas import (
    BadRequestError,
    EndpointAllowList,
    EndpointNotAllowedError,
    Limits,
    MaasClient,
    NotFoundError,
    ResponseParseError,
    ResponseTooLargeError,
)
from capmaas.maas import RequestTimeoutError as MaasTimeoutError


async def no_sleep(_: float) -> None:
    return None


def client_for(fake: FakeMaas, **kwargs: object) -> MaasClient:
    return MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake), sleep=no_sleep, **kwargs)  # type: ignore[arg-type]


class Chunks(httpx.AsyncByteStream):
    """A body of ``count`` chunks of ``size`` bytes, ``pause`` seconds apart; counts what was produced."""

    def __init__(self, count: int, size: int = 1, pause: float = 0.0, fill: bytes = b" ") -> None:
        self.count, self.size, self.pause, self.fill = count, size, pause, fill
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            if self.pause:
                await asyncio.sleep(self.pause)
            self.sent += self.size
            yield self.fill * self.size


async def test_an_oversized_answer_is_refused_while_streaming() -> None:
    fake = FakeMaas()
    body = Chunks(count=1000, size=1024)
    fake.route("GET", "machines/abc123/", None, httpx.Response(200, stream=body))
    statuses: list[int] = []
    async with client_for(
        fake, limits=Limits(max_response_bytes=64 * 1024), on_response=lambda m, e, s, _t: statuses.append(s)
    ) as maas:
        with pytest.raises(ResponseTooLargeError, match="larger than 65536 bytes") as info:
            await maas.machines.get("abc123")
    assert isinstance(info.value, ResponseParseError)
    assert body.sent <= 65 * 1024  # stopped reading right after the cap, not after the 1000 KiB
    assert len(fake.requests) == 1  # not retried
    assert statuses == [200]


async def test_a_machine_list_may_be_larger_than_one_object() -> None:
    fake = FakeMaas()
    machines = [machine(system_id=f"m{i:05d}") for i in range(20)]
    fake.route("GET", "machines/", None, ok(machines))
    fake.route("GET", "users/", "whoami", ok({"username": "x" * 4096, "email": "", "is_superuser": False}))
    limits = Limits(max_response_bytes=1024, max_list_bytes=1024 * 1024)
    async with client_for(fake, limits=limits) as maas:
        listed = await maas.machines.list()
        assert len(listed) == 20
        with pytest.raises(ResponseTooLargeError):  # a collection path, but one object: the small cap
            await maas.whoami()


async def test_an_error_body_is_read_only_up_to_its_start() -> None:
    fake = FakeMaas()
    body = Chunks(count=1000, size=1024, fill=b"x")
    fake.route("GET", "machines/abc123/", None, httpx.Response(404, stream=body))
    async with client_for(fake) as maas:
        with pytest.raises(NotFoundError) as info:
            await maas.machines.get("abc123")
    assert body.sent <= 65 * 1024
    assert "x" * 100 not in str(info.value)  # the body is on .body (capped), not in the message
    assert info.value.body.startswith("x" * 100)


async def test_a_trickled_body_ends_at_the_deadline() -> None:
    fake = FakeMaas()
    body = Chunks(count=100, size=1, pause=0.05)  # 5 s in all, never 0.05 s without a byte
    fake.route("GET", "machines/abc123/", None, lambda request: httpx.Response(200, stream=body))
    started = time.monotonic()
    async with client_for(fake, max_retries=1, limits=Limits(deadline=0.3)) as maas:
        with pytest.raises(MaasTimeoutError, match=r"no complete answer within 0.3s"):
            await maas.machines.get("abc123")
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, elapsed  # two attempts of 0.3 s, not 5 s each
    assert len(fake.requests) == 2  # a read is retried once (max_retries=1)


async def test_the_deadline_defaults_to_the_client_timeout() -> None:
    fake = FakeMaas()
    fake.route("GET", "version/", None, lambda request: httpx.Response(200, stream=Chunks(100, pause=0.05)))
    async with client_for(fake, timeout=0.2, max_retries=0) as maas:
        assert maas._http._limits.deadline == 0.2
        with pytest.raises(MaasTimeoutError):
            await maas.version()


async def test_a_post_that_timed_out_is_not_repeated() -> None:
    fake = FakeMaas()
    fake.route(
        "POST",
        "machines/abc123/",
        "deploy",
        lambda request: httpx.Response(200, stream=Chunks(100, pause=0.05)),
    )
    async with client_for(fake, limits=Limits(deadline=0.2)) as maas:
        with pytest.raises(MaasTimeoutError):
            await maas.machines.deploy("abc123")
    assert len(fake.requests) == 1


async def test_a_non_json_answer_keeps_its_body_out_of_the_message() -> None:
    fake = FakeMaas()
    fake.route("GET", "machines/abc123/", None, text(200, "<html>internal admin page</html>"))
    async with client_for(fake) as maas:
        with pytest.raises(ResponseParseError) as info:
            await maas.machines.get("abc123")
    assert "internal admin page" not in str(info.value)
    assert "internal admin page" in info.value.body


async def test_a_400_message_names_maas_fields_but_no_values() -> None:
    fake = FakeMaas()
    body = '{"distro_series": ["secret value"], "not a field name!": ["x"]}'
    fake.route("POST", "machines/abc123/", "deploy", text(400, body))
    async with client_for(fake) as maas:
        with pytest.raises(BadRequestError) as info:
            await maas.machines.deploy("abc123")
    message = str(info.value)
    assert message.endswith("MAAS refused field(s) distro_series")
    assert "secret value" not in message
    assert "not a field name" not in message
    fake.route("POST", "machines/abc123/", "deploy", text(400, '{"??": ["x"]}'))
    async with client_for(fake) as maas:
        with pytest.raises(BadRequestError) as info:
            await maas.machines.deploy("abc123")
    assert "refused" not in str(info.value)


# --- the endpoint allow-list -------------------------------------------------------------------------------


def test_an_empty_allow_list_allows_any_host() -> None:
    allow = EndpointAllowList([])
    assert not allow
    assert allow.allows("169.254.169.254")
    allow.check("http://anything.example:5240/MAAS")


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("10.20.3.4", True),
        ("10.21.0.1", False),
        ("192.0.2.7", True),
        ("192.0.2.8", False),
        ("fd00::5", True),
        ("maas.example.net", True),
        ("MAAS.Example.NET.", True),
        ("region.dc1.example.org", True),
        ("example.org", False),
        ("maas.example.net.evil.test", False),
        ("169.254.169.254", False),
        ("other.example.net", False),
    ],
)
def test_entries_match_ip_literals_by_network_and_names_by_name(host: str, allowed: bool) -> None:
    allow = EndpointAllowList(
        ["10.20.0.0/16", "192.0.2.7", "fd00::/64", "maas.example.net", "*.example.org", " "]
    )
    assert allow
    assert allow.entries == ("10.20.0.0/16", "192.0.2.7", "fd00::/64", "maas.example.net", "*.example.org")
    assert allow.allows(host) is allowed


def test_a_name_is_not_matched_against_networks() -> None:
    """Resolving would check one address and connect to another: names need a name entry."""
    assert not EndpointAllowList(["127.0.0.0/8"]).allows("localhost")


@pytest.mark.parametrize("entry", ["*.", "*.a*b", "10.0.0.0/33", "a b", "host:5240"])
def test_bad_entries_are_refused_when_the_list_is_built(entry: str) -> None:
    with pytest.raises(ValueError, match="endpoint allow-list entry"):
        EndpointAllowList([entry])


async def test_a_client_for_a_host_off_the_list_is_refused_before_any_request() -> None:
    fake = FakeMaas()
    allow = EndpointAllowList(["10.0.0.0/8"])
    with pytest.raises(
        EndpointNotAllowedError, match=r"host '127.0.0.1' is not in the operator's allow-list"
    ):
        client_for(fake, allowed_endpoints=allow)
    assert fake.requests == []
    async with client_for(fake, allowed_endpoints=EndpointAllowList(["127.0.0.1"])) as maas:
        assert maas.api_root.startswith("http://127.0.0.1")
