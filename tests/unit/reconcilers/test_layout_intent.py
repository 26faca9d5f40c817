"""Network and storage intent (issue 25 item 2) against the real simulator (MAAS 3.7.3's state, permission and
text rules for bonds, VLAN interfaces, links and whole-disk filesystems): made on the Allocated server in
MAAS's order before the deploy, nothing made twice after an operator restart mid-way, everything capmaas
made undone before release (and MAAS dropping the acquired filesystem itself), a server that cannot take the
intent released (not broken) with ``LayoutRefused`` and MAAS's words."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import pytest
from reconciler_env import Env, make_env

from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, LAYOUT_MADE
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings
from capmaas_dev.simulator.models import NodeStatus

INVENTORY: dict[str, Any] = {
    "fabrics": [{"name": "fabric-0", "vlans": [{"vid": 0}, {"vid": 40, "name": "storage"}]}],
    "subnets": [
        {"cidr": "10.0.0.0/24", "name": "main", "gateway_ip": "10.0.0.1"},
        {"cidr": "10.40.0.0/24", "name": "storage", "vid": 40},
    ],
    "machines": [
        {
            "hostname": f"m{n}",
            "cpu_count": 8,
            "memory": 16384,
            "disks": [{"name": "sda", "size": "240G"}, {"name": "sdb", "size": "2T", "tags": ["nvme"]}],
            "interfaces": [{"name": "eth0", "subnet": "main"}, {"name": "eth1", "subnet": "main"}],
        }
        for n in (1, 2)
    ]
    # A server with one NIC: it cannot take a bond of two.
    + [
        {"hostname": "m0", "cpu_count": 2, "memory": 4096, "interfaces": [{"name": "eth0", "subnet": "main"}]}
    ],
}

NETWORK = {
    "bonds": [
        {"name": "bond0", "interfaces": ["eth0", "eth1"], "mode": "802.3ad", "subnet": "10.0.0.0/24"},
    ],
    "vlans": [{"parent": "bond0", "vid": 40, "subnet": "10.40.0.0/24"}],
}
FILESYSTEMS = [{"diskTags": ["nvme"], "fstype": "xfs", "mountPoint": "/var/lib/containerd"}]


class Recorder:
    """The MAAS requests in the order they reached the simulator (an ASGI wrapper around it: what went over
    the wire, the simulator unchanged)."""

    def __init__(self, sim: Simulator) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self._app = sim.app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            op = parse_qs(scope.get("query_string", b"").decode()).get("op", [""])[0]
            self.calls.append((scope["method"], scope["path"], op))
        await self._app(scope, receive, send)  # type: ignore[arg-type]

    def writes(self, sid: str) -> list[str]:
        """The writes to machine ``sid`` and its interfaces and disks, as ``op`` (or ``DELETE <kind>``)."""
        out = []
        for method, path, op in self.calls:
            if sid not in path or method == "GET":
                continue
            out.append(op or f"{method} {'interface' if '/interfaces/' in path else path}")
        return out


@pytest.fixture
async def lenv() -> AsyncIterator[tuple[Env, Recorder]]:
    sim = Simulator(Inventory(INVENTORY), timings=Timings.fast(), faults=Faults())
    rec = Recorder(sim)
    sim.app = rec  # type: ignore[method-assign]
    e = make_env(sim)
    yield e, rec
    await e.connections.aclose()
    await asyncio.sleep(0)


def machine_with(env: Env, name: str, **spec: Any) -> None:
    env.machine(name, min_cpu=4)
    env.kube.get("maasmachines", name)["spec"].update(spec)


def cond(mm: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in mm["status"]["conditions"] if c["type"] == C.MACHINE_PROVISIONED_CONDITION)


async def delete(env: Env, name: str) -> None:
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    for _ in range(30):
        if ("maasmachines", "ns", name) not in env.kube.objects:
            return
        await env.step(name)
        await env.settle()
    raise AssertionError(env.kube.get("maasmachines", name).get("status"))


def in_order(seq: list[str], wanted: list[str]) -> bool:
    """``wanted`` is a subsequence of ``seq``."""
    it = iter(seq)
    return all(any(x == w for x in it) for w in wanted)


def nics(env: Env, sid: str) -> dict[str, Any]:
    return {i.name: i for i in env.sim.state.machines[sid].interfaces}


async def test_bond_vlan_and_filesystem_made_before_deploy_and_undone_before_release(
    lenv: tuple[Env, Recorder],
) -> None:
    env, rec = lenv
    await env.cluster()
    machine_with(env, "w1", network=NETWORK, filesystems=FILESYSTEMS)
    await env.drive(["w1"], lambda b: bool(b.get("status", {}).get("ready")))
    sid = env.kube.get("maasmachines", "w1")["spec"]["systemID"]
    # In MAAS's order, all before the deploy: bond, its link, the VLAN on it, its link, format, mount.
    order = ["create_bond", "link_subnet", "create_vlan", "link_subnet", "format", "mount", "deploy"]
    assert in_order(rec.writes(sid), order), rec.writes(sid)
    have = nics(env, sid)
    assert have["bond0"].type == "bond"
    assert sorted(have["bond0"].parents) == ["eth0", "eth1"]
    assert have["bond0"].params["bond_mode"] == "802.3ad"
    assert have["bond0.40"].type == "vlan"
    # Deployed: the AUTO links of the bond and the VLAN got their addresses; the disk is mounted.
    assert have["bond0"].ip is not None
    assert have["bond0"].ip.startswith("10.0.0.")
    assert have["bond0.40"].ip is not None
    assert have["bond0.40"].ip.startswith("10.40.0.")
    mm = env.kube.get("maasmachines", "w1")
    assert {a["address"] for a in mm["status"]["addresses"]} >= {have["bond0"].ip, have["bond0.40"].ip}
    sdb = next(d for d in env.sim.state.machines[sid].disks if d.name == "sdb")
    assert sdb.acquired_fs is not None
    assert (sdb.acquired_fs.fstype, sdb.acquired_fs.mount_point) == ("xfs", "/var/lib/containerd")
    for _ in range(3):  # passes after Ready make nothing again
        await env.step("w1")
    assert rec.writes(sid).count("create_bond") == 1
    # Delete: capmaas deletes the VLAN interface and the bond, gives eth0/eth1 their links back; MAAS
    # drops the acquired filesystem at release. The next user finds the server as it was.
    await delete(env, "w1")
    m = env.sim.state.machines[sid]
    assert m.status == NodeStatus.READY
    assert sorted(nics(env, sid)) == ["eth0", "eth1"]
    assert all(i.subnet_id is not None and i.auto for i in m.interfaces)
    assert next(d for d in m.disks if d.name == "sdb").acquired_fs is None
    # MAAS lets nobody edit a Deployed server's interfaces: released first, taken back at once (allocated by
    # system ID under this MaasMachine's agent name), the VLAN and bond deleted, the NICs linked again,
    # released again.
    after = rec.writes(sid)[rec.writes(sid).index("deploy") :]
    assert in_order(after, ["release", "DELETE interface", "DELETE interface", "link_subnet", "release"]), (
        after
    )
    assert any(op == "allocate" for _, _, op in rec.calls[-20:])
    assert m.owner is None


async def test_an_operator_restart_mid_way_makes_nothing_twice(lenv: tuple[Env, Recorder]) -> None:
    """The crash window: MAAS makes the bond but the answer is lost (the connection cut after the commit).
    The next pass - in a new process, with nothing in memory - finds the bond in MAAS (and in
    ``…/layout-made``) and makes only the rest."""
    env, rec = lenv
    await env.cluster()
    machine_with(env, "w1", network=NETWORK)
    env.sim.faults.write_fault_ops = frozenset({"create_bond"})
    env.sim.faults.drop_after_commit_rate = 1.0
    with pytest.raises(TransientError, match="create_bond"):
        await env.step("w1")
    sid = env.kube.get("maasmachines", "w1")["spec"]["systemID"]
    assert "bond0" in nics(env, sid)  # made in MAAS; its answer never came
    made = env.kube.get("maasmachines", "w1")["metadata"]["annotations"][ANNOTATION_PREFIX + LAYOUT_MADE]
    assert "bond0" in made
    env.sim.faults.drop_after_commit_rate = 0.0
    env.machines = type(env.machines)(  # a new process: a reconciler with no memory
        env.kube, env.connections, default_credentials=env.creds, settings=env.machines.settings
    )
    await env.drive(["w1"], lambda b: bool(b.get("status", {}).get("ready")))
    writes = rec.writes(sid)
    assert writes.count("create_bond") == 1
    assert writes.count("create_vlan") == 1
    assert in_order(writes, ["create_bond", "create_vlan", "deploy"])


async def test_a_server_that_cannot_take_the_bond_is_released_not_broken(lenv: tuple[Env, Recorder]) -> None:
    env, _ = lenv
    await env.cluster()
    env.machine("w1", min_cpu=2)  # the one-NIC server is the cheapest match
    env.kube.get("maasmachines", "w1")["spec"]["network"] = NETWORK
    await env.step("w1")
    await env.settle()
    mm = env.kube.get("maasmachines", "w1")
    c = cond(mm)
    assert c["reason"] == C.LAYOUT_REFUSED_REASON
    assert "has no interface eth1 (for bond bond0)" in c["message"]
    assert "not marked broken" in c["message"]
    assert all(m.owner is None and m.status == NodeStatus.READY for m in env.sim.state.machines.values())


async def test_a_vlan_maas_lacks_is_refused_and_what_was_made_is_undone(lenv: tuple[Env, Recorder]) -> None:
    env, rec = lenv
    await env.cluster()
    network = {**NETWORK, "vlans": [{"parent": "bond0", "vid": 41}]}
    machine_with(env, "w1", network=network)
    await env.step("w1")
    await env.settle()
    c = cond(env.kube.get("maasmachines", "w1"))
    assert c["reason"] == C.LAYOUT_REFUSED_REASON
    assert "MAAS has no VLAN 41 on fabric fabric-0" in c["message"]
    # The bond made before the refusal was deleted before the release; the NICs have their links again.
    held = [m for m in env.sim.state.machines.values() if m.hostname in ("m1", "m2")]
    assert all(m.owner is None for m in held)
    for m in held:
        assert sorted(i.name for i in m.interfaces) == ["eth0", "eth1"]
        assert all(i.auto and i.subnet_id is not None for i in m.interfaces)
    assert any(op == "create_bond" for _, _, op in rec.calls)
