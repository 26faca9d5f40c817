"""The models the client returns share their field-name sets (issue 26: those sets were about two thirds of a
kept machine's memory), without any change a caller can see, and with the table of shared sets bounded
whatever a MAAS answers."""

from __future__ import annotations

import httpx
import pydantic
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok

from capmaas.maas import MaasClient, Machine, _compact
from capmaas_dev.simulator import Inventory, Simulator


def _models(m: pydantic.BaseModel) -> list[pydantic.BaseModel]:
    """``m`` and every model nested in it, depth first."""
    found = [m]
    for value in m.__dict__.values():
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, pydantic.BaseModel):
                found += _models(item)
    return found


async def test_machines_of_every_read_share_their_field_name_sets() -> None:
    """Listed, read alone, and allocated: machines with interfaces, links, disks and partitions as the
    simulator renders them. Models with the same fields share one set object across machines and answers;
    what callers read (equality, ``model_fields_set``, ``exclude_unset`` dumps) is unchanged."""
    sim = Simulator(Inventory.generate(machines=12, zones=3, seed=1))
    transport = httpx.ASGITransport(app=sim.app)
    async with MaasClient("http://maas.test/MAAS", api_key=sim.api_key, transport=transport) as maas:
        listed = await maas.machines.list()
        alone = [await maas.machines.get(m.system_id) for m in listed]
        allocated = await maas.machines.allocate(agent_name="a")
    machines = [*listed, *alone, allocated]
    models = [x for m in machines for x in _models(m)]
    assert len(models) > 12 * 10
    distinct = {id(x.__pydantic_fields_set__) for x in models}
    assert len(distinct) <= 30, len(distinct)
    for m in alone:
        fresh = Machine.model_validate(m.model_dump(exclude_unset=True))
        assert fresh == m
        assert fresh.model_fields_set == m.model_fields_set
        assert fresh.model_dump(exclude_unset=True) == m.model_dump(exclude_unset=True)
    assert listed == alone


async def test_a_copy_with_changes_leaves_the_other_machines_sets_alone(fake: FakeMaas) -> None:
    without_owner = {k: v for k, v in machine().items() if k != "owner"}
    fake.route(
        "GET", "machines/", None, ok([{**without_owner, "system_id": s} for s in ("aaa111", "bbb222")])
    )
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        a, b = await client.machines.list()
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    changed = a.model_copy(update={"owner": "someone"})
    assert "owner" in changed.model_fields_set
    assert "owner" not in a.model_fields_set
    assert "owner" not in b.model_fields_set
    with pytest.raises(pydantic.ValidationError):
        a.owner = "x"  # type: ignore[misc]  # frozen: nothing can add to a shared set
    assert "owner" not in b.model_fields_set


def test_the_table_of_shared_sets_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MAAS that sends a different set of fields in every answer gets no more than MAX_SHARED sets kept;
    past that each model keeps its own (still correct, just not shared)."""
    monkeypatch.setattr(_compact, "_shared", {})
    monkeypatch.setattr(_compact, "MAX_SHARED", 8)
    optional = ["fqdn", "status_name", "power_type", "cpu_count", "memory", "osystem"]
    base = {"system_id": "x", "hostname": "h", "status": 4, "zone": {"id": 1, "name": "z"}}
    for mask in range(2 ** len(optional)):
        extra = {name: machine()[name] for i, name in enumerate(optional) if mask >> i & 1}
        m = _compact.compact(Machine.model_validate({**base, **extra}))
        assert m.model_fields_set == {*base, *extra}
    assert len(_compact._shared) == 8


def test_models_that_are_not_frozen_keep_their_own_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Assignment adds to a model's set: only frozen models may share one."""
    monkeypatch.setattr(_compact, "_shared", {})

    class Loose(pydantic.BaseModel):
        a: int = 0
        b: int = 0

    first = _compact.compact(Loose.model_validate({"a": 1}))
    second = _compact.compact(Loose.model_validate({"a": 2}))
    assert first.__pydantic_fields_set__ is not second.__pydantic_fields_set__
    second.b = 3
    assert first.model_fields_set == {"a"}
    assert _compact._shared == {}
