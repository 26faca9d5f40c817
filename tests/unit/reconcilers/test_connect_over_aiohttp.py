"""Connecting (credentials check, pool) over the aiohttp transport, against the simulator on a loopback
socket: failures become the conditions a person can act on. The transport's own tests: tests/unit/maas."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ALLOWED, FakeKube
from test_credentials_and_config import mc

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.gateway import MaasConnections
from capmaas.reconcilers.credentials import connect
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import MaasCredentials
from capmaas_dev.simulator import Simulator, serve


def client(c: MaasCredentials, **kwargs: Any) -> maas.MaasClient:
    context = maas.ssl_context(ca_data=c.ca_data, insecure=c.insecure)
    return maas.MaasClient(
        c.endpoint, api_key=c.api_key, transport=maas.AiohttpTransport(ssl_context=context), **kwargs
    )


async def test_a_wrong_key_is_still_invalid_credentials(sim: Simulator) -> None:
    async with serve(sim, host="127.0.0.1", port=0) as url:
        conns = MaasConnections(
            client_factory=lambda c: client(c, max_retries=0), fast=1, idle=1, batch_size=10, wake=print
        )
        bad = MaasCredentials(endpoint=url, api_key="aaa:bbb:ccc", namespaces=ALLOWED)
        with pytest.raises(TransientError) as info:
            await connect(FakeKube(), conns, mc(identity=None), bad)
        await conns.aclose()
    assert info.value.reason == C.INVALID_CREDENTIALS_REASON


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_no_answer_is_maas_unreachable_naming_the_endpoint(sim: Simulator, scheme: str) -> None:
    """Connection refused (nothing listens), and a TLS handshake with a plain-HTTP server."""
    async with serve(sim, host="127.0.0.1", port=0) as url:
        endpoint = url.replace("http://", "https://") if scheme == "https" else "http://127.0.0.1:9/MAAS"
        conns = MaasConnections(
            client_factory=lambda c: client(c, max_retries=0, timeout=5),
            fast=1,
            idle=1,
            batch_size=10,
            wake=print,
        )
        with pytest.raises(TransientError) as info:
            await connect(
                FakeKube(),
                conns,
                mc(identity=None),
                MaasCredentials(endpoint, sim.api_key, namespaces=ALLOWED),
            )
        await conns.aclose()
    assert info.value.reason == C.MAAS_UNREACHABLE_REASON
    assert endpoint in info.value.message
    assert sim.api_key not in info.value.message
