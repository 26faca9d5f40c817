"""Issue 10, item 5 (gateway part): a tenant's endpoint that never answers must not hold up another tenant.

Before: one pool-wide lock was held across every first connect (``whoami``), so three tenants pointing at a
tarpit delayed a healthy tenant's first connect until all three had timed out; every reconcile of a tarpit
tenant waited a whole request deadline again; and one poll round could take as long as its list calls and
their retries allowed. The pool here is the operator's own (:class:`MaasConnections` with the aiohttp
transport), the healthy tenant's MAAS the simulator, the tarpit a loopback listener that never answers.
No timing is asserted: the tests assert the *order* in which things finish, and connection counts.
"""

from __future__ import annotations

import asyncio

import pytest
from security_support import Tarpit

from capmaas import maas
from capmaas.gateway import MaasConnections, MachinePoller
from capmaas.reconcilers.ports import MaasCredentials
from capmaas_dev.simulator import Inventory, Simulator, serve

KEYS = ["t1aaaaaaaaaaaaaaaa:t1bbbbbbbbbbbbbbbb:t1cccccccccccccccccccccccccccc", "t2:t2:t2", "t3:t3:t3"]
TARPIT_DEADLINE = 3.0  # seconds the client gives one tarpit request (its only attempt)


def factory(c: MaasCredentials) -> maas.MaasClient:
    return maas.MaasClient(
        c.endpoint,
        api_key=c.api_key,
        transport=maas.AiohttpTransport(ssl_context=maas.ssl_context()),
        timeout=TARPIT_DEADLINE,
        max_retries=0,
    )


def pool(**kw: float) -> MaasConnections:
    return MaasConnections(
        client_factory=factory, fast=3600, idle=3600, batch_size=50, wake=lambda key: None, **kw
    )


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory.generate(machines=3, zones=1, seed=3))


async def test_three_tenants_at_a_tarpit_do_not_delay_a_healthy_tenants_first_connect(sim: Simulator) -> None:
    conns = pool()
    async with Tarpit().running() as tarpit, serve(sim, host="127.0.0.1", port=0) as url:
        parked = [
            asyncio.create_task(conns.connect(MaasCredentials(tarpit.url, key, source=f"Secret evil/{i}")))
            for i, key in enumerate(KEYS)
        ]
        await tarpit.connected.wait()  # a tarpit tenant is inside its first connect (whoami) now
        for _ in range(10):
            await asyncio.sleep(0)  # and the other two have started theirs
        healthy = await conns.connect(MaasCredentials(url, sim.api_key, source="Secret victim/maas"))
        assert healthy.endpoint == url
        # The healthy tenant got its session while every tarpit connect was still waiting for an answer.
        assert not any(t.done() for t in parked)
        for outcome in await asyncio.gather(*parked, return_exceptions=True):
            assert isinstance(outcome, maas.TransportError), outcome
        await conns.aclose()


async def test_a_failed_connect_is_remembered_briefly_instead_of_waiting_again(sim: Simulator) -> None:
    now = [0.0]
    conns = pool(negative_ttl=5.0)
    conns._clock = lambda: now[0]  # the pool's clock, stepped by the test
    async with Tarpit().running() as tarpit:
        creds = MaasCredentials(tarpit.url, KEYS[0], source="Secret evil/maas")
        with pytest.raises(maas.RequestTimeoutError) as first:
            await conns.connect(creds)
        assert tarpit.connections == 1
        # Within the TTL every connect fails at once with the same error: the tarpit sees no new connection.
        for _ in range(5):
            with pytest.raises(maas.RequestTimeoutError) as again:
                await conns.connect(creds)
            assert again.value is first.value
        assert tarpit.connections == 1
        now[0] = 5.1  # the TTL is over: the endpoint is tried again
        with pytest.raises(maas.TransportError):
            await conns.connect(creds)
        assert tarpit.connections == 2
    await conns.aclose()


async def test_a_poll_round_ends_at_its_deadline() -> None:
    """The poll's list call is parked by the tarpit; the round gives up at its own deadline (1 s here),
    recorded as the poller's error, instead of lasting the request's (and its retries') full time."""
    async with Tarpit().running() as tarpit:
        client = maas.MaasClient(
            tarpit.url,
            api_key=KEYS[0],
            transport=maas.AiohttpTransport(ssl_context=maas.ssl_context()),
            timeout=3600,  # the request alone would wait for an hour
            max_retries=0,
        )
        poller = MachinePoller(client, fast=1, idle=1, batch_size=10, wake=lambda key: None, deadline=1.0)
        poller.watch("abc123", "maasmachines/ns/m0")
        try:
            await asyncio.wait_for(poller.poll_once(), 60)  # a bound for the test run, not the assertion
        finally:
            await client.aclose()
    assert isinstance(poller.last_error, maas.RequestTimeoutError)
    assert "longer than 1.0s" in str(poller.last_error)
    assert poller.snapshot("abc123") is None
    assert not poller.is_gone("abc123")  # no answer is not "gone"
