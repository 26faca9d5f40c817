"""The models the client returns share their field-name sets (issue 26: those sets were about two thirds of a
kept machine's memory), without any change a caller can see, and with the table of shared sets bounded
whatever a MAAS answers."""

from __future__ import annotations

import json

import httpx
import pydantic
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, machine, ok

from capmaas.maas import MaasClient, Machine, Zone, _compact
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


async def test_equal_sub_models_are_one_object_within_and_across_answers() -> None:
    """A machine's boot disk, its entry among the block devices and among the physical ones are one object
    (with their partitions and filesystems); the zone, pool, VLAN and subnet every machine repeats are one
    object across machines and answers. What callers read is unchanged."""
    sim = Simulator(Inventory.generate(machines=12, zones=1, seed=1))
    transport = httpx.ASGITransport(app=sim.app)
    async with MaasClient("http://maas.test/MAAS", api_key=sim.api_key, transport=transport) as maas:
        listed = await maas.machines.list()
        alone = [await maas.machines.get(m.system_id) for m in listed]
    for m in [*listed, *alone]:
        assert m.boot_disk is not None
        assert m.boot_disk is m.blockdevice_set[0]
        assert m.boot_disk is m.physicalblockdevice_set[0]
        link = m.interface_set[0].links[0]
        assert link.subnet is not None
        assert m.interface_set[0].vlan is link.subnet.vlan
    first = listed[0]
    pools: dict[object, object] = {}
    for m in [*listed[1:], *alone]:
        assert m.zone is first.zone
        assert m.interface_set[0].links[0].subnet is first.interface_set[0].links[0].subnet
        assert pools.setdefault(m.pool, m.pool) is m.pool
    assert len(pools) > 1
    assert listed == alone
    for m in alone:
        fresh = Machine.model_validate(m.model_dump(exclude_unset=True))
        assert fresh == m
        assert fresh.model_dump(exclude_unset=True) == m.model_dump(exclude_unset=True)
    changed = first.model_copy(update={"zone": first.zone.model_copy(update={"name": "other"})})
    assert changed.zone.name == "other"
    assert all(m.zone.name == first.zone.name != "other" for m in listed)


def test_models_are_shared_only_when_interchangeable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal values with other field-name sets, or children with other field-name sets, stay apart: every
    model keeps exactly the ``model_fields_set`` it was validated with, at every depth."""
    monkeypatch.setattr(_compact, "_common", {})
    zone = {"id": 1, "name": "z"}
    explicit = _compact.compact(Zone.model_validate({**zone, "description": ""}))
    implicit = _compact.compact(Zone.model_validate(zone))
    assert explicit == implicit
    assert explicit is not implicit
    assert implicit.model_fields_set == {"id", "name"}
    assert _compact.compact(Zone.model_validate(zone)) is implicit

    disk = {"id": 1, "name": "sda", "size": 10, "partitions": [{"id": 2, "size": 5}]}
    disk_explicit = {**disk, "partitions": [{"id": 2, "size": 5, "bootable": False}]}
    m = _compact.compact(
        Machine.model_validate(
            {
                "system_id": "x",
                "hostname": "h",
                "status": 4,
                "zone": zone,
                "boot_disk": disk,
                "blockdevice_set": [disk_explicit],
                "physicalblockdevice_set": [disk],
            }
        )
    )
    assert m.boot_disk is not None
    assert m.boot_disk == m.blockdevice_set[0]
    assert m.boot_disk is not m.blockdevice_set[0]
    assert m.boot_disk is m.physicalblockdevice_set[0]
    assert m.blockdevice_set[0].partitions[0].model_fields_set == {"id", "size", "bootable"}
    assert m.boot_disk.partitions[0].model_fields_set == {"id", "size"}


def test_values_equal_across_types_are_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """``1 == 1.0 == True`` and ``0.0 == -0.0``: a class with a field whose values could compare equal across
    types (or a float) is never shared, whatever the answers hold."""
    monkeypatch.setattr(_compact, "_common", {})

    class Loose(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(frozen=True)
        value: int | bool | None = None

    class Floating(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(frozen=True)
        value: float = 0.0

    monkeypatch.setattr(_compact, "ACROSS_ANSWERS", frozenset({Loose, Floating}))
    one, true = (_compact.compact(Loose(value=v)) for v in (1, True))
    assert one == true
    assert one is not true
    assert type(one.value) is int
    assert type(true.value) is bool
    zero, minus = (_compact.compact(Floating(value=v)) for v in (0.0, -0.0))
    assert zero is not minus
    assert str(minus.value) == "-0.0"
    assert _compact._common == {}


def test_the_table_of_shared_models_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers with ever new zones keep no more than MAX_COMMON of them for sharing; past that each answer's
    models are its own (still shared within the answer)."""
    monkeypatch.setattr(_compact, "_common", {})
    monkeypatch.setattr(_compact, "MAX_COMMON", 8)
    for i in range(50):
        z = _compact.compact(Zone.model_validate({"id": i, "name": f"z{i}"}))
        assert (z.id, z.name) == (i, f"z{i}")
    assert len(_compact._common) == 8
    late = [_compact.compact(Zone.model_validate({"id": 40, "name": "z40"})) for _ in range(2)]
    assert late[0] == late[1]
    assert late[0] is not late[1]


def test_each_machine_is_compacted_as_it_is_validated() -> None:
    """The machines of a listing are compacted one by one as pydantic validates them (their after-validator),
    so the listing never holds every machine's own sets and disk copies at once; the client's own pass then
    leaves them as they are."""
    disk = {"id": 1, "name": "sda", "size": 10, "partitions": [{"id": 2, "size": 5}]}
    one = {
        "system_id": "x",
        "hostname": "h",
        "status": 4,
        "zone": {"id": 1, "name": "z"},
        "boot_disk": disk,
        "blockdevice_set": [disk],
    }
    listed = pydantic.TypeAdapter(list[Machine]).validate_json(json.dumps([one, {**one, "system_id": "y"}]))
    for m in listed:
        assert m.boot_disk is m.blockdevice_set[0]
        assert _compact.compact(m) is m
    assert listed[0].zone is listed[1].zone
    assert listed[0].__pydantic_fields_set__ is listed[1].__pydantic_fields_set__
