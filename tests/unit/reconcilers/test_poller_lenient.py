"""The shared poll survives one odd machine (issue 10, item 7): before, a machine with a status number newer
than our enum made every list call a parse error, so no tenant's machine on that MAAS was refreshed."""

from __future__ import annotations

import json
from typing import Any

import httpx

from capmaas import maas
from capmaas.gateway import MachinePoller

URL = "http://127.0.0.1:5240/MAAS"
KEY = "aaaaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbbbb:cccccccccccccccccccccccccccccccc"


def _machine(sid: str, status: int, **extra: Any) -> dict[str, Any]:
    data = {
        "system_id": sid,
        "hostname": f"host-{sid}",
        "status": status,
        "zone": {"id": 1, "name": "default"},
    }
    data.update(extra)
    return data


async def test_one_machine_in_an_unknown_state_or_unreadable_does_not_fail_the_poll() -> None:
    answer: list[Any] = [
        _machine("victim", 9),  # Deploying: another tenant's machine, must be refreshed
        _machine("odd001", 99),  # a status number MAAS added after this client was written
        {"system_id": "bad001", "status": 6},  # no hostname, no zone: unreadable
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(answer).encode())

    counted: list[str] = []
    woken: list[str] = []
    client = maas.MaasClient(
        URL, api_key=KEY, transport=httpx.MockTransport(handler), on_invalid_item=counted.append
    )
    poller = MachinePoller(client, fast=1, idle=1, batch_size=10, wake=woken.append)
    for sid in ("victim", "odd001", "bad001"):
        poller.watch(sid, f"maasmachines/ns/{sid}")
    try:
        await poller.poll_once()
        assert poller.last_error is None
        victim = poller.snapshot("victim")
        assert victim is not None
        assert victim.status is maas.NodeStatus.DEPLOYING
        odd = poller.snapshot("odd001")
        assert odd is not None
        assert odd.status is maas.NodeStatus.UNKNOWN
        # Unreadable is not gone: a machine reported gone would be replaced (a second allocation).
        assert poller.snapshot("bad001") is None
        assert not poller.is_gone("bad001")
        assert counted == ["machines/"]
        assert sorted(woken) == ["maasmachines/ns/odd001", "maasmachines/ns/victim"]
        # Still unreadable next time: still not gone, still counted.
        await poller.poll_once()
        assert not poller.is_gone("bad001")
        assert counted == ["machines/", "machines/"]
    finally:
        await client.aclose()
