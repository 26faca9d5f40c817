"""One odd machine must not fail the shared poll (issue 10, item 7): an unknown status number reads as
UNKNOWN, an unreadable item is left out (and counted), the rest of the answer is used."""

from __future__ import annotations

import logging

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok

from capmaas.maas import MaasClient, NodeStatus
from capmaas.maas.errors import ResponseParseError


def test_an_unknown_status_number_reads_as_unknown() -> None:
    assert NodeStatus(99) is NodeStatus.UNKNOWN
    assert NodeStatus(6) is NodeStatus.DEPLOYED
    with pytest.raises(ValueError, match="deployed"):
        NodeStatus("deployed")


async def test_get_of_a_machine_in_a_newer_state(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/abc123/", None, ok(machine(status=99, status_name="Frobnicating")))
    m = await client.machines.get("abc123")
    assert m.status is NodeStatus.UNKNOWN
    assert m.status_name == "Frobnicating"


async def test_lenient_list_leaves_out_unreadable_items_and_counts_them(
    fake: FakeMaas, caplog: pytest.LogCaptureFixture
) -> None:
    counted: list[str] = []
    no_hostname = machine(system_id="bad001")
    del no_hostname["hostname"]
    answer = [
        machine(system_id="ok0001"),
        machine(system_id="new001", status=42),
        no_hostname,
        {"status": "not even a machine"},
        "a string",
    ]
    fake.route("GET", "machines/", None, ok(answer))
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(fake), on_invalid_item=counted.append
    ) as client:
        with caplog.at_level(logging.WARNING):
            machines, skipped = await client.machines.list_lenient(["ok0001", "new001", "bad001"])
    assert [m.system_id for m in machines] == ["ok0001", "new001"]
    assert machines[1].status is NodeStatus.UNKNOWN
    assert skipped == ["bad001", "", ""]
    assert counted == ["machines/"] * 3
    assert "hostname: Field required" in caplog.text
    assert fake.last.url.params.get_list("id") == ["ok0001", "new001", "bad001"]


async def test_lenient_list_without_a_hook_and_with_a_failing_hook(
    fake: FakeMaas, caplog: pytest.LogCaptureFixture
) -> None:
    fake.route("GET", "machines/", None, ok([{"system_id": "x"}]))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        assert await client.machines.list_lenient(["x"]) == ([], ["x"])

    def broken(endpoint: str) -> None:
        raise RuntimeError("hook bug")

    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(fake), on_invalid_item=broken
    ) as client:
        assert await client.machines.list_lenient(["x"]) == ([], ["x"])
    assert "on_invalid_item hook failed" in caplog.text


async def test_lenient_list_still_refuses_an_answer_that_is_no_list(
    client: MaasClient, fake: FakeMaas
) -> None:
    fake.route("GET", "machines/", None, ok({"not": "a list"}))
    with pytest.raises(ResponseParseError, match="a JSON list"):
        await client.machines.list_lenient(["x"])


async def test_the_strict_list_still_fails_on_an_unreadable_item(client: MaasClient, fake: FakeMaas) -> None:
    """Callers that decide from a list whether a machine exists (the crash-recovery lookup) must not be told
    "no machine" because one did not parse: they keep the strict list."""
    fake.route("GET", "machines/", None, ok([machine(), {"system_id": "x"}]))
    with pytest.raises(ResponseParseError):
        await client.machines.list(agent_name="a")
