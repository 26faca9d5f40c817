"""Retries: only what MAAS asks for (Retry-After on 409/503) or what cannot duplicate work; always bounded."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok, text

from capmaas.maas import (
    ConflictError,
    MaasClient,
    NoMachineAvailableError,
    RequestTimeoutError,
    RetryPolicy,
    ServiceUnavailableError,
    TransportError,
)


async def test_503_with_retry_after_is_retried_then_succeeds(
    client: MaasClient, fake: FakeMaas, sleeps: list[float], responses: list[tuple[str, str, int]]
) -> None:
    fake.route(
        "GET",
        "machines/abc123/",
        None,
        text(503, "busy", {"Retry-After": "10"}),
        text(503, "busy", {"Retry-After": "2"}),
        ok(machine()),
    )
    assert (await client.machines.get("abc123")).system_id == "abc123"
    assert len(fake.requests) == 3
    assert sleeps == [10.0, 2.0]
    assert [s for _, _, s in responses] == [503, 503, 200]
    # Each attempt is signed anew: MAAS rejects a reused nonce.
    assert len({r.headers["authorization"] for r in fake.requests}) == 3


async def test_409_with_retry_after_is_retried(
    client: MaasClient, fake: FakeMaas, sleeps: list[float]
) -> None:
    fake.route(
        "POST",
        "machines/",
        "allocate",
        text(409, "<html>serialization</html>", {"Retry-After": "5"}),
        ok(machine(status=10)),
    )
    assert (await client.machines.allocate()).status == 10
    assert sleeps == [5.0]
    assert len(fake.requests) == 2


async def test_409_without_retry_after_is_not_retried(
    client: MaasClient, fake: FakeMaas, sleeps: list[float]
) -> None:
    fake.route("POST", "machines/", "allocate", text(409, "No machine available."), ok(machine()))
    with pytest.raises(NoMachineAvailableError):
        await client.machines.allocate()
    assert len(fake.requests) == 1
    assert sleeps == []


async def test_503_without_retry_after_is_not_retried(
    client: MaasClient, fake: FakeMaas, sleeps: list[float]
) -> None:
    fake.route("POST", "vm-hosts/3/", "compose", text(503, "Unable to compose KVM instance"))
    with pytest.raises(ServiceUnavailableError) as info:
        await client.vm_hosts.compose(3)
    assert info.value.retry_after is None
    assert len(fake.requests) == 1
    assert sleeps == []


async def test_attempts_are_capped_and_the_last_answer_raised(
    client: MaasClient, fake: FakeMaas, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="capmaas.maas")
    fake.route("POST", "machines/", "allocate", text(409, "contention", {"Retry-After": "5"}))
    with pytest.raises(ConflictError) as info:
        await client.machines.allocate()
    # The contention 409 carries Retry-After, so it is not "no machine matches".
    assert not isinstance(info.value, NoMachineAvailableError)
    assert info.value.retry_after == 5.0
    assert len(fake.requests) == 4  # 1 + max_retries (3)
    assert sleeps == [5.0, 5.0, 5.0]
    assert "retry 3/3" in caplog.text
    assert "machines/?op=allocate" in caplog.text


async def test_retry_after_is_capped(fake: FakeMaas) -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    fake.route("GET", "zones/", None, text(503, "", {"Retry-After": "3600"}), ok([]))
    policy = RetryPolicy(max_retries=1, max_retry_after=7.0)
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(fake), retry=policy, sleep=sleep
    ) as m:
        await m.zones.list()
    assert sleeps == [7.0]


def test_backoff_grows_and_is_bounded() -> None:
    """The jitter's largest draw gives the ceiling: doubling from ``base_delay``, capped at ``max_delay``."""
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=lambda: 1.0)
    assert [policy.backoff(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_has_full_jitter() -> None:
    """A delay anywhere in [0, ceiling], so a burst of failed requests does not retry in step."""
    assert RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=lambda: 0.25).backoff(2) == 0.5
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
    draws = [policy.backoff(3) for _ in range(200)]
    assert all(0.0 <= d <= 3.0 for d in draws)
    assert len(set(draws)) > 100
    assert min(draws) < 1.0 < 2.0 < max(draws)


class Flaky:
    """Fails with ``exc`` ``times`` times, then answers ``reply``."""

    def __init__(self, exc: Exception, times: int, reply: httpx.Response) -> None:
        self.exc, self.times, self.reply, self.calls = exc, times, reply, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.times:
            raise self.exc
        return self.reply


async def _run(flaky: Flaky, method: str, max_retries: int = 3) -> tuple[list[float], object]:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    policy = RetryPolicy(max_retries=max_retries, jitter=lambda: 1.0)  # the ceiling: delays are exact
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(flaky), retry=policy, sleep=sleep
    ) as maas:
        if method == "GET":
            result: object = await maas.machines.get("abc123")
        else:
            result = await maas.machines.allocate()
    return sleeps, result


async def test_transport_errors_on_reads_are_retried_with_backoff() -> None:
    flaky = Flaky(httpx.ReadError("reset"), 2, ok(machine()))
    sleeps, _ = await _run(flaky, "GET")
    assert flaky.calls == 3
    assert sleeps == [0.5, 1.0]


async def test_connect_errors_are_retried_even_for_post() -> None:
    flaky = Flaky(httpx.ConnectError("refused"), 1, ok(machine(status=10)))
    sleeps, _ = await _run(flaky, "POST")
    assert flaky.calls == 2
    assert sleeps == [0.5]


async def test_post_that_may_have_reached_maas_is_not_retried() -> None:
    # A lost allocate answer must not allocate a second machine: the caller recovers via agent_name.
    flaky = Flaky(httpx.ReadError("reset"), 1, ok(machine(status=10)))
    with pytest.raises(TransportError):
        await _run(flaky, "POST")
    assert flaky.calls == 1


async def test_transport_retries_are_capped() -> None:
    flaky = Flaky(httpx.ConnectError("refused"), 100, ok(machine()))
    with pytest.raises(TransportError):
        await _run(flaky, "GET", max_retries=2)
    assert flaky.calls == 3


async def test_on_response_gets_templates_never_ids(
    client: MaasClient, fake: FakeMaas, responses: list[tuple[str, str, int]]
) -> None:
    fake.route("POST", "machines/xyz789/", "deploy", ok(machine(status=9)))
    fake.route("GET", "machines/xyz789/", None, text(404, "No Machine matches the given query."))
    await client.machines.deploy("xyz789")
    with pytest.raises(Exception, match="404"):
        await client.machines.get("xyz789")
    assert responses == [
        ("POST", "machines/{system_id}/?op=deploy", 200),
        ("GET", "machines/{system_id}/", 404),
    ]


async def test_transport_failures_reach_on_response_as_status_0() -> None:
    seen: list[tuple[str, str, int]] = []
    flaky = Flaky(httpx.ConnectError("refused"), 1, ok([]))
    async with MaasClient(
        URL,
        api_key=API_KEY,
        transport=httpx.MockTransport(flaky),
        sleep=lambda _: _noop(),
        on_response=lambda m, e, s, _seconds: seen.append((m, e, s)),
    ) as maas:
        await maas.zones.list()
    assert seen == [("GET", "zones/", 0), ("GET", "zones/", 200)]


async def _noop() -> None:
    return None


async def test_on_response_gets_how_long_each_attempt_took() -> None:
    """The latency histogram's input: each attempt's own time, including reading the answer's body."""
    seen: list[tuple[int, float]] = []

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.3 if len(seen) == 0 else 0.0)
        return httpx.Response(503, headers={"Retry-After": "0"}) if not seen else httpx.Response(200, json=[])

    async with MaasClient(
        URL,
        api_key=API_KEY,
        transport=httpx.MockTransport(slow),
        sleep=lambda _: _noop(),
        on_response=lambda m, e, s, seconds: seen.append((s, seconds)),
    ) as maas:
        await maas.zones.list()
    assert [s for s, _ in seen] == [503, 200]
    assert seen[0][1] >= 0.3  # the slow first attempt, measured on its own
    assert seen[1][1] >= 0


async def test_a_failing_on_response_hook_does_not_fail_the_call(
    fake: FakeMaas, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(method: str, endpoint: str, status: int, seconds: float) -> None:
        raise RuntimeError("metrics down")

    fake.route("GET", "zones/", None, ok([]))
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(fake), on_response=hook
    ) as maas:
        assert await maas.zones.list() == []
    assert "on_response hook failed" in caplog.text


# A transport given to the client (httpx.ASGITransport in front of the in-process simulator) lets a bare
# OSError through where httpx's own transports raise httpx.TransportError: same failure, same handling.
async def test_bare_connection_reset_is_a_transport_error_and_a_read_is_retried() -> None:
    flaky = Flaky(ConnectionResetError("simulated dropped connection"), 1, ok(machine()))
    sleeps, result = await _run(flaky, "GET")
    assert flaky.calls == 2
    assert sleeps == [0.5]
    assert getattr(result, "system_id", None) == "abc123"


async def test_bare_connection_reset_on_post_is_a_transport_error_not_retried() -> None:
    flaky = Flaky(ConnectionResetError("simulated dropped connection"), 1, ok(machine(status=10)))
    with pytest.raises(TransportError, match="ConnectionResetError: simulated dropped connection") as info:
        await _run(flaky, "POST")
    assert not isinstance(info.value, RequestTimeoutError)
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert flaky.calls == 1


async def test_bare_connection_refused_is_retried_even_for_post() -> None:
    flaky = Flaky(ConnectionRefusedError("refused"), 1, ok(machine(status=10)))
    sleeps, _ = await _run(flaky, "POST")
    assert flaky.calls == 2
    assert sleeps == [0.5]


async def test_bare_timeout_is_the_timeout_error() -> None:
    flaky = Flaky(TimeoutError("no answer"), 100, ok(machine()))
    with pytest.raises(RequestTimeoutError):
        await _run(flaky, "GET", max_retries=1)
    assert flaky.calls == 2


async def test_dropped_connection_from_the_in_process_simulator_is_a_transport_error() -> None:
    # The real thing rather than a scripted raise: the simulator behind httpx.ASGITransport, dropping every
    # connection half-way through the answer.
    from capmaas_dev.simulator import Faults, Inventory, Simulator

    sim = Simulator(Inventory.generate(machines=2, zones=1, seed=1), faults=Faults(drop_rate=1.0))
    async with MaasClient(
        "http://maas.test/MAAS",
        api_key=sim.api_key,
        transport=httpx.ASGITransport(app=sim.app),
        max_retries=1,
        sleep=lambda _: _noop(),
    ) as maas:
        with pytest.raises(TransportError, match="no answer from MAAS"):
            await maas.machines.list()
        with pytest.raises(TransportError, match="no answer from MAAS"):
            await maas.machines.allocate(agent_name="a")
    assert sim.counters[("GET", "/MAAS/api/2.0/machines/", None)] == 2  # the read was retried once
    assert sim.counters[("POST", "/MAAS/api/2.0/machines/", "allocate")] == 1  # the allocate was not
