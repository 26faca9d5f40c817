"""List answers are validated from the raw body in one pass (issue 26: no dict per machine), and fall back to
the per-item path whenever that pass fails, so what callers get and the errors they see do not change."""

from __future__ import annotations

import logging

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok, text

from capmaas.maas import MaasClient
from capmaas.maas.errors import ResponseParseError
from capmaas_dev.simulator import Inventory, Simulator

FALLBACK = "list answer read item by item"


async def test_the_one_pass_gives_the_models_the_per_item_path_gives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Machines with interfaces, links, disks and partitions, as the simulator renders them: the list (one
    pass over the bytes) equals each machine read alone (json, then the model)."""
    sim = Simulator(Inventory.generate(machines=12, zones=3, seed=1))
    transport = httpx.ASGITransport(app=sim.app)
    async with MaasClient("http://maas.test/MAAS", api_key=sim.api_key, transport=transport) as maas:
        with caplog.at_level(logging.DEBUG, logger="capmaas.maas"):
            listed = await maas.machines.list()
            lenient, skipped = await maas.machines.list_status_lenient(listed[0].status)
        alone = [await maas.machines.get(m.system_id) for m in listed]
    assert len(listed) == 12
    assert any(m.interface_set and m.blockdevice_set for m in listed)
    assert listed == alone
    assert skipped == []
    assert lenient == [m for m in listed if m.status is listed[0].status]
    assert FALLBACK not in caplog.text


async def test_one_bad_item_falls_back_and_the_good_ones_are_kept(
    fake: FakeMaas, caplog: pytest.LogCaptureFixture
) -> None:
    bad = machine(system_id="bad001")
    del bad["hostname"]
    fake.route("GET", "machines/", None, ok([machine(system_id="ok0001"), bad, machine(system_id="ok0002")]))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        with caplog.at_level(logging.DEBUG, logger="capmaas.maas"):
            machines, skipped = await client.machines.list_lenient(["ok0001", "bad001", "ok0002"])
        assert FALLBACK in caplog.text
        assert [m.system_id for m in machines] == ["ok0001", "ok0002"]
        assert skipped == ["bad001"]
        with pytest.raises(ResponseParseError, match=r"unexpected Machine JSON from machines/: hostname"):
            await client.machines.list()


async def test_a_body_in_another_charset_is_decoded_as_it_says(fake: FakeMaas) -> None:
    """The one pass reads UTF-8 only: bytes that are valid UTF-8 but declared Latin-1 must read as Latin-1,
    as the per-item path always read them."""
    body = ok([machine(hostname="m\u00e9")]).content
    latin1 = {"content-type": "application/json; charset=iso-8859-1"}
    fake.route("GET", "machines/", None, httpx.Response(200, content=body, headers=latin1))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        (m,) = await client.machines.list()
    assert m.hostname == "m\u00e9".encode().decode("latin-1")


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (text(200, ""), "expected a JSON list from GET machines/, got NoneType"),
        (text(200, "[{"), "is not JSON"),
        (ok({"a": 1}), "expected a JSON list from GET machines/, got dict"),
    ],
)
async def test_what_is_no_list_keeps_its_error(
    client: MaasClient, fake: FakeMaas, reply: httpx.Response, error: str
) -> None:
    fake.route("GET", "machines/", None, reply)
    with pytest.raises(ResponseParseError, match=error):
        await client.machines.list()


async def test_zone_names_are_the_zones_of_the_listed_machines() -> None:
    sim = Simulator(Inventory.generate(machines=12, zones=3, seed=1))
    transport = httpx.ASGITransport(app=sim.app)
    async with MaasClient("http://maas.test/MAAS", api_key=sim.api_key, transport=transport) as maas:
        listed = await maas.machines.list()
        names = await maas.machines.zone_names()
    assert names == {m.zone.name for m in listed}
    assert len(names) == 3


async def test_zone_names_read_only_the_zone_of_each_machine(fake: FakeMaas) -> None:
    """A machine with a field the full model refuses still holds its zone (only the zone is read)."""
    odd = machine(system_id="odd001", zone={"id": 2, "name": "az2", "description": ""})
    del odd["hostname"]
    fake.route("GET", "machines/", None, ok([machine(system_id="ok0001"), odd]))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        assert await client.machines.zone_names() == {machine()["zone"]["name"], "az2"}
