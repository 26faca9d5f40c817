"""The control-plane DNS record against the simulator: whose record it is (issue 10 item 4), when addresses
reach it (issue 16 item 5) and which address of a machine with several (issue 15 part 2)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_env import ENDPOINT, Env, make_env

from capmaas.api import conditions as C
from capmaas.reconcilers.cluster import (
    CONTROL_PLANE_GONE_SECONDS,
    ClusterReconciler,
    dns_name,
    legacy_dns_name,
)
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DELETE_FOR_MOVE_ANNOTATION, DNS_RECORD
from capmaas.reconcilers.tenancy import Tenancy
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

RECORD = ANNOTATION_PREFIX + DNS_RECORD
PXE, API = "10.40.0.0/24", "10.50.0.0/24"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def two_nic_inventory(machines: int = 4) -> Inventory:
    """Machines with two AUTO-linked NICs: eth0 on the PXE network (listed first), eth1 on the API one."""
    return Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": PXE, "name": "pxe"}, {"cidr": API, "name": "api"}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [
                {"hostname": f"m{n}", "zone": "az1", "cpu_count": 4, "memory": 8192,
                 "interfaces": [{"name": "eth0", "subnet": "pxe"},
                                {"name": "eth1", "subnet": "api", "tags": ["api"]}]}
                for n in range(machines)
            ],
        }
    )  # fmt: skip


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def nenv(clock: Clock) -> AsyncIterator[Env]:
    sim = Simulator(two_nic_inventory(), timings=Timings(deploy=30.0, auto_ip=(2.0, 2.0)), clock=clock)
    e = make_env(sim)
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def records(env: Env) -> dict[str, list[str]]:
    return {r.name: sorted(r.ips) for r in env.sim.state.dns_resources.values()}


def cond(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == type_)


async def add_cluster(env: Env, name: str = "c1", ns: str = "ns", **spec: Any) -> dict[str, Any]:
    env.kube.add("clusters", demo.cluster(name, ns))
    uid = env.kube.get("clusters", name, ns)["metadata"]["uid"]
    body = demo.maascluster(name, ns, cluster_uid=uid)
    body["metadata"]["uid"] = f"uid-{ns}-{name}"
    body["spec"].update(spec)
    env.kube.add("maasclusters", body)
    mc = await reconcile(env, name, ns)
    env.kube.get("clusters", name, ns)["status"] = {"initialization": {"infrastructureProvisioned": True}}
    return mc


async def reconcile(env: Env, name: str = "c1", ns: str = "ns", r: ClusterReconciler | None = None) -> Any:
    await (r or env.clusters).reconcile(env.kube.get("maasclusters", name, ns))
    return env.kube.objects.get(("maasclusters", ns, name))


async def delete(env: Env, name: str, ns: str, r: ClusterReconciler | None = None) -> None:
    env.kube.get("maasclusters", name, ns)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await reconcile(env, name, ns, r)


def running_cp(env: Env, name: str, ip: str, ns: str = "ns", cluster: str = "c1") -> None:
    """A control-plane MaasMachine as the watch cache shows it once deployed (its MAAS machine is not one
    the simulator has: the record follows its status)."""
    body = demo.maasmachine(name, ns, cluster, control_plane=True)
    body["metadata"]["namespace"] = ns
    body["spec"]["systemID"] = f"sid-{ns}-{name}"
    body["status"] = {
        "machineState": "Deployed",
        "machinePowered": True,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "ExternalIP", "address": ip}],
    }
    env.kube.add("maasmachines", body)


# --- issue 10 item 4: ownership -------------------------------------------------------------------------


async def test_the_record_id_is_kept_in_the_protected_annotation_and_shown_in_status(env: Env) -> None:
    mc = await add_cluster(env)
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    (rec,) = env.sim.state.dns_resources.values()
    assert mc["metadata"]["annotations"][RECORD] == f"{rec.id}/{fqdn}"
    assert mc["status"]["network"] == {"dnsName": fqdn, "dnsRecordID": rec.id}
    assert "DNSRecordCreated" in env.kube.reasons()


async def test_a_cluster_of_the_same_name_in_another_namespace_cannot_take_the_record(env: Env) -> None:
    victim = await add_cluster(env)
    running_cp(env, "cp0", "10.0.0.10")
    await reconcile(env)
    fqdn = victim["spec"]["controlPlaneEndpoint"]["host"]
    short = fqdn.split(".")[0]
    assert records(env) == {short: ["10.0.0.10"]}

    # The attacker: same cluster name, another namespace, the victim's name as its endpoint, no control plane
    # (before the fix: the record was emptied, then deleted with the attacker's cluster).
    # It uses MAAS credentials of its own (an identity Secret: the operator's default credentials may be
    # limited to some namespaces), good enough to write DNS in the same MAAS.
    env.kube.secrets[("evil", "maas")] = {
        "MAAS_ENDPOINT": ENDPOINT.encode(),
        "MAAS_API_KEY": env.sim.api_key.encode(),
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",  # the in-process simulator: nothing crosses a network
    }
    evil = await add_cluster(
        env, "c1", "evil", controlPlaneEndpoint={"host": fqdn, "port": 6443}, identityRef={"name": "maas"}
    )
    c = cond(evil, C.DNS_READY_CONDITION)
    # Refused before MAAS is asked: the victim's name is not the attacker's own (issue 21; was
    # DNSRecordConflict, found by the record's id, before names were checked).
    assert (c["status"], c["reason"]) == ("False", C.DNS_NAME_NOT_OWN_REASON)
    assert fqdn in c["message"]
    assert not evil["status"].get("ready")
    assert RECORD not in evil["metadata"].get("annotations", {})
    assert "network" not in evil["status"]
    running_cp(env, "x0", "10.66.0.1", ns="evil")  # the attacker's own control plane
    await reconcile(env, "c1", "evil")
    assert env.kube.reasons().count(C.DNS_NAME_NOT_OWN_REASON) == 1  # one Event, not one per pass
    assert records(env) == {short: ["10.0.0.10"]}
    await delete(env, "c1", "evil")
    assert ("maasclusters", "evil", "c1") in env.kube.objects  # x0 still there
    del env.kube.objects[("maasmachines", "evil", "x0")]
    await delete(env, "c1", "evil")
    assert ("maasclusters", "evil", "c1") not in env.kube.objects
    assert records(env) == {short: ["10.0.0.10"]}  # untouched: not the attacker's record

    # The victim still owns and deletes its record.
    del env.kube.objects[("maasmachines", "ns", "cp0")]
    await delete(env, "c1", "ns")
    assert records(env) == {}


async def test_a_record_recreated_by_someone_else_is_a_conflict_and_never_deleted(env: Env) -> None:
    mc = await add_cluster(env)
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    (rec,) = env.sim.state.dns_resources.values()
    # Someone deletes our record in MAAS and makes their own of the same name.
    port = await env.connections.connect(env.creds)
    await port.dns_delete(rec.id)
    other = await port.dns_create(fqdn, frozenset({"192.0.2.99"}))
    running_cp(env, "cp0", "10.0.0.10")
    mc = await reconcile(env)
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.DNS_RECORD_CONFLICT_REASON
    assert records(env) == {fqdn.split(".")[0]: ["192.0.2.99"]}
    del env.kube.objects[("maasmachines", "ns", "cp0")]
    await delete(env, "c1", "ns")
    assert [r.id for r in env.sim.state.dns_resources.values()] == [other.id]


async def test_upgrade_adopts_by_name_only_under_the_migration_setting(env: Env) -> None:
    """A MaasCluster reconciled by an operator from before the annotation: no id recorded anywhere. Its record
    is adopted by name only with ``dns.adopt_records_by_name`` (issue 21: a name is no proof; it was adopted
    by default before)."""
    mc = await add_cluster(env)
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    (rec,) = env.sim.state.dns_resources.values()
    del mc["metadata"]["annotations"][RECORD]
    del mc["status"]["network"]
    fresh = ClusterReconciler(env.kube, env.connections, default_credentials=env.creds)  # the default
    mc = await reconcile(env, r=fresh)
    assert RECORD not in mc["metadata"]["annotations"]
    c = cond(mc, C.DNS_READY_CONDITION)
    assert c["reason"] == C.DNS_RECORD_CONFLICT_REASON
    assert "dns.adopt_records_by_name" in c["message"]
    migrating = ClusterReconciler(
        env.kube, env.connections, default_credentials=env.creds, tenancy=Tenancy(adopt_dns_by_name=True)
    )
    mc = await reconcile(env, r=migrating)
    assert mc["metadata"]["annotations"][RECORD] == f"{rec.id}/{fqdn}"
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.WAITING_FOR_CONTROL_PLANE_REASON
    assert "DNSRecordAdopted" in env.kube.reasons()

    # A managed-shape name that is not this MaasCluster's own (another UID's suffix) is refused before MAAS is
    # asked, migration or not, and deleting the cluster leaves it.
    port = await env.connections.connect(env.creds)
    other = dns_name("c2", "some-other-uid", "maas")
    await port.dns_create(other, frozenset({"192.0.2.7"}))
    mc2 = await add_cluster(env, "c2", controlPlaneEndpoint={"host": other, "port": 6443})
    assert cond(mc2, C.DNS_READY_CONDITION)["reason"] == C.DNS_NAME_NOT_OWN_REASON
    await reconcile(env, "c2", r=migrating)
    again = env.kube.get("maasclusters", "c2")
    assert cond(again, C.DNS_READY_CONDITION)["reason"] == C.DNS_NAME_NOT_OWN_REASON
    await delete(env, "c2", "ns", migrating)
    assert other.split(".")[0] in records(env)


async def test_an_earlier_releases_24_bit_name_is_adopted_under_the_migration_setting_only(env: Env) -> None:
    """Clusters created by a release whose names carried 24 bits keep their endpoint: with the migration
    setting their record (named by the old scheme) is adopted; without it, it is a conflict."""
    env.kube.add("clusters", demo.cluster("c3", "ns"))
    body = demo.maascluster("c3", "ns", cluster_uid=env.kube.get("clusters", "c3")["metadata"]["uid"])
    body["metadata"]["uid"] = "uid-ns-c3"
    old = legacy_dns_name("c3", "uid-ns-c3", "maas")
    assert len(old.split(".")[0]) == len("c3-") + 6
    body["spec"]["controlPlaneEndpoint"] = {"host": old, "port": 6443}
    env.kube.add("maasclusters", body)
    port = await env.connections.connect(env.creds)
    rec = await port.dns_create(old, frozenset({"10.0.0.9"}))
    mc = await reconcile(env, "c3")
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.DNS_NAME_NOT_OWN_REASON
    assert "dns.adopt_records_by_name" in cond(mc, C.DNS_READY_CONDITION)["message"]
    migrating = ClusterReconciler(
        env.kube, env.connections, default_credentials=env.creds, tenancy=Tenancy(adopt_dns_by_name=True)
    )
    mc = await reconcile(env, "c3", r=migrating)
    assert mc["metadata"]["annotations"][RECORD] == f"{rec.id}/{old}"
    # Once recorded, the record is the cluster's with the setting off again.
    mc = await reconcile(env, "c3")
    assert mc["spec"]["controlPlaneEndpoint"]["host"] == old
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.WAITING_FOR_CONTROL_PLANE_REASON
    await delete(env, "c3", "ns")
    assert old.split(".")[0] not in records(env)


async def test_clusterctl_move_keeps_the_record_status_does_not_travel(env: Env) -> None:
    src = await add_cluster(env)
    fqdn = src["spec"]["controlPlaneEndpoint"]["host"]
    (rec,) = env.sim.state.dns_resources.values()
    # clusterctl creates the object on the target management cluster (same namespace) with spec and
    # annotations but without status, and the target apiserver gives it a new UID ...
    moved = copy.deepcopy(src)
    moved.pop("status")
    moved["metadata"]["uid"] = "uid-after-move"
    moved["metadata"].pop("finalizers", None)
    # ... then deletes the source (its Cluster paused, as clusterctl pauses it first) with delete-for-move:
    # the record is left alone.
    env.kube.get("clusters", "c1", "ns")["spec"]["paused"] = True
    env.kube.get("maasclusters", "c1")["metadata"]["annotations"][DELETE_FOR_MOVE_ANNOTATION] = ""
    await delete(env, "c1", "ns")
    assert ("maasclusters", "ns", "c1") not in env.kube.objects
    assert [r.id for r in env.sim.state.dns_resources.values()] == [rec.id]
    del env.kube.get("clusters", "c1", "ns")["spec"]["paused"]  # clusterctl resumes the target's Cluster

    env.kube.add("maasclusters", moved)  # (one fake apiserver plays both management clusters)
    target = ClusterReconciler(env.kube, env.connections, default_credentials=env.creds)  # another operator
    running_cp(env, "cp0", "10.0.0.10")
    mc = await reconcile(env, r=target)
    assert mc["status"]["network"] == {"dnsName": fqdn, "dnsRecordID": rec.id}
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.DNS_RECORD_READY_REASON
    assert records(env) == {fqdn.split(".")[0]: ["10.0.0.10"]}
    del env.kube.objects[("maasmachines", "ns", "cp0")]
    await delete(env, "c1", "ns", target)
    assert records(env) == {}


def dns_puts(env: Env) -> int:
    return sum(
        n for (method, path, _), n in env.sim.counters.items() if method == "PUT" and "dnsresources" in path
    )


async def test_a_move_target_whose_cache_lacks_the_control_plane_leaves_the_record_alone(env: Env) -> None:
    """The target of a clusterctl move (or an operator just started) can see the MaasCluster and its resumed
    Cluster before the MaasMachines' watch events: no control plane in its cache for a moment. The record of
    a live cluster is not emptied for that (it was: MAAS writes during a move, the endpoint briefly wiped)."""
    await add_cluster(env)
    running_cp(env, "cp0", "10.0.0.10")
    src = await reconcile(env)
    fqdn = src["spec"]["controlPlaneEndpoint"]["host"]
    assert records(env) == {fqdn.split(".")[0]: ["10.0.0.10"]}
    cp0 = env.kube.objects.pop(("maasmachines", "ns", "cp0"))  # not in the target's cache yet
    moved = copy.deepcopy(src)
    moved.pop("status")
    moved["metadata"]["uid"] = "uid-after-move"
    env.kube.objects[("maasclusters", "ns", "c1")] = moved
    target = ClusterReconciler(env.kube, env.connections, default_credentials=env.creds)
    puts = dns_puts(env)
    wish = await target.reconcile(env.kube.get("maasclusters", "c1", "ns"))
    assert records(env) == {fqdn.split(".")[0]: ["10.0.0.10"]}
    assert wish.after is not None  # looks again when the record may be emptied
    assert 0 < wish.after <= CONTROL_PLANE_GONE_SECONDS
    env.kube.add("maasmachines", cp0)  # the MaasMachine's event arrives
    mc = await reconcile(env, r=target)
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.DNS_RECORD_READY_REASON
    assert records(env) == {fqdn.split(".")[0]: ["10.0.0.10"]}
    assert dns_puts(env) == puts  # not one DNS write


async def test_a_cache_that_has_seen_part_of_the_control_plane_does_not_shrink_the_record(env: Env) -> None:
    """The same, with 3 control-plane machines of which the target (or a restarted operator) has seen 2: the
    record keeps the third's address (it was shrunk, then grown back: two MAAS writes during a move). A
    control-plane machine really gone leaves it at once, as before."""
    await add_cluster(env)
    for i in range(3):
        running_cp(env, f"cp{i}", f"10.0.0.1{i}")
    mc = await reconcile(env)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    assert records(env) == {short: ["10.0.0.10", "10.0.0.11", "10.0.0.12"]}
    puts, lists = dns_puts(env), env.kube.lists
    env.kube.unlisted.add("cp2")  # the apiserver has it, the cache not yet
    await reconcile(env)
    assert records(env) == {short: ["10.0.0.10", "10.0.0.11", "10.0.0.12"]}
    assert dns_puts(env) == puts
    assert env.kube.lists == lists + 1  # asked once, before the write that would have removed an address
    env.kube.unlisted.clear()  # its event arrives
    await reconcile(env)
    assert dns_puts(env) == puts
    assert env.kube.lists == lists + 1  # nothing to remove: no LIST
    del env.kube.objects[("maasmachines", "ns", "cp2")]  # really gone
    await reconcile(env)
    assert records(env) == {short: ["10.0.0.10", "10.0.0.11"]}
    assert dns_puts(env) == puts + 1


async def test_the_record_is_emptied_once_the_control_plane_has_been_gone_for_a_while(env: Env) -> None:
    clock = Clock()
    r = ClusterReconciler(env.kube, env.connections, default_credentials=env.creds, clock=clock)
    await add_cluster(env)
    running_cp(env, "cp0", "10.0.0.10")
    mc = await reconcile(env, r=r)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    del env.kube.objects[("maasmachines", "ns", "cp0")]  # the whole control plane deleted
    for waited, left in ((0.0, CONTROL_PLANE_GONE_SECONDS), (29.0, 1.0)):
        clock.now += waited
        wish = await r.reconcile(env.kube.get("maasclusters", "c1", "ns"))
        assert records(env) == {short: ["10.0.0.10"]}
        assert wish.after == pytest.approx(left)
    clock.now += 1.0
    wish = await r.reconcile(env.kube.get("maasclusters", "c1", "ns"))
    assert records(env) == {short: []}
    assert wish.after is None
    event = [e for e in env.kube.events if e[2] == "DNSRecordUpdated"][-1]
    assert event[3].endswith("-> [] (no control-plane MaasMachine for 30 s)")
    # A control plane again: the record follows it at once, and a later absence waits the time again.
    running_cp(env, "cp1", "10.0.0.11")
    await reconcile(env, r=r)
    assert records(env) == {short: ["10.0.0.11"]}
    del env.kube.objects[("maasmachines", "ns", "cp1")]
    await r.reconcile(env.kube.get("maasclusters", "c1", "ns"))
    assert records(env) == {short: ["10.0.0.11"]}


# --- issue 16 item 5: addresses as soon as MAAS has them, never a released one ---------------------------


async def test_the_record_gets_the_auto_ip_while_the_machine_still_deploys(nenv: Env, clock: Clock) -> None:
    env = nenv
    mc = await add_cluster(env)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    env.machine("cp0", cp=True)
    await env.drive(["cp0"], lambda b: b.get("status", {}).get("machineState") == "Deploying")
    sid = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]
    assert env.sim.state.machines[sid].interfaces[0].ip is None  # the deploy answer had no address
    await reconcile(env)
    assert records(env) == {short: []}

    clock.now += 2.0  # MAAS assigns the AUTO IPs; the deploy itself takes 30 s more
    await env.settle()
    await env.step("cp0")
    ips = env.sim.state.machines[sid]
    pxe_ip = ips.interfaces[0].ip
    assert pxe_ip is not None
    mm = env.kube.get("maasmachines", "cp0")
    assert mm["status"]["machineState"] == "Deploying"
    assert not mm["status"].get("ready")
    assert {"type": "InternalIP", "address": pxe_ip} in mm["status"]["addresses"]
    mc = await reconcile(env)
    assert records(env) == {short: [pxe_ip]}
    assert cond(mc, C.DNS_READY_CONDITION)["status"] == "True"


async def test_a_released_machines_ip_is_never_written_back(nenv: Env, clock: Clock) -> None:
    env = nenv
    mc = await add_cluster(env)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    for n in ("cp0", "cp1"):
        env.machine(n, cp=True)
    await env.drive(["cp0", "cp1"], lambda b: b.get("status", {}).get("machineState") == "Deploying")
    clock.now += 40.0
    await env.settle()
    await env.drive(["cp0", "cp1"], lambda b: bool(b.get("status", {}).get("ready")))
    await reconcile(env)
    sid0 = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]
    ip0 = env.sim.state.machines[sid0].interfaces[0].ip
    sid1 = env.kube.get("maasmachines", "cp1")["spec"]["systemID"]
    ip1 = env.sim.state.machines[sid1].interfaces[0].ip
    assert records(env) == {short: sorted([ip0, ip1])}

    # cp0's machine is released in MAAS behind our back: its AUTO IP is freed (the record keeps a null
    # entry), and the MaasMachine allocates and deploys again; the new AUTO IP comes seconds after the deploy.
    port = await env.connections.connect(env.creds)
    await port.release(sid0, erase=False, secure_erase=False, quick_erase=False, comment="by hand")
    clock.now += 40.0
    await env.settle()
    assert env.sim.state.machines[sid0].interfaces[0].ip is None
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    raw = await port.client.dns_resources.list(fqdn=fqdn)  # type: ignore[attr-defined]
    assert sorted(a.ip or "" for a in raw[0].ip_addresses) == ["", ip1]  # MAAS's {"ip": null} entry
    found = await port.dns_find(fqdn)
    assert found is not None
    assert found.ips == {ip1}  # skipped when read
    for _ in range(4):
        await env.step("cp0")
        await env.settle()
        await reconcile(env)
        assert ip0 not in records(env)[short]  # freed: may be someone else's machine now
    new = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]  # MAAS may hand the same machine back
    assert env.kube.get("maasmachines", "cp0")["status"]["machineState"] == "Deploying"
    assert records(env) == {short: [ip1]}
    clock.now += 2.0
    await env.settle()
    await env.step("cp0")
    await reconcile(env)
    ip_new = env.sim.state.machines[new].interfaces[0].ip
    assert records(env) == {short: sorted([ip_new, ip1])}


# --- issue 15 part 2: preferred subnets ------------------------------------------------------------------


async def deployed_cp(env: Env, clock: Clock, name: str = "cp0") -> tuple[str, str]:
    """Deploy control-plane MaasMachine ``name``; its (PXE, API) addresses."""
    env.machine(name, cp=True)
    await env.drive([name], lambda b: b.get("status", {}).get("machineState") == "Deploying")
    clock.now += 40.0
    await env.settle()
    await env.drive([name], lambda b: bool(b.get("status", {}).get("ready")))
    m = env.sim.state.machines[env.kube.get("maasmachines", name)["spec"]["systemID"]]
    pxe, api = (i.ip for i in m.interfaces)
    assert pxe
    assert api
    assert pxe.startswith("10.40.")
    assert api.startswith("10.50.")
    return pxe, api


async def test_without_preferred_subnets_the_first_address_is_used(nenv: Env, clock: Clock) -> None:
    mc = await add_cluster(nenv)
    pxe, _ = await deployed_cp(nenv, clock)
    await reconcile(nenv)
    assert records(nenv) == {mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]: [pxe]}


async def test_spec_preferred_subnets_pick_the_address(nenv: Env, clock: Clock) -> None:
    mc = await add_cluster(nenv, preferredSubnets=[API])
    _, api = await deployed_cp(nenv, clock)
    mc = await reconcile(nenv)
    assert records(nenv) == {mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]: [api]}
    assert cond(mc, C.DNS_READY_CONDITION)["message"] == api


async def test_an_interface_tag_or_name_picks_the_address(nenv: Env, clock: Clock) -> None:
    """Issue 23 item 3: the API network may be eth1 on one server and eno2 on another; a MAAS tag on the
    interface names it on all of them."""
    mc = await add_cluster(nenv, preferredSubnets=["tag:api"])
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    pxe, api = await deployed_cp(nenv, clock)
    mc = await reconcile(nenv)
    assert records(nenv) == {short: [api]}
    nenv.kube.get("maasclusters", "c1")["spec"]["preferredSubnets"] = ["interface:eth0"]
    await reconcile(nenv)
    assert records(nenv) == {short: [pxe]}


async def test_interfaces_not_known_yet_never_take_an_address_out_of_the_record(
    nenv: Env, clock: Clock
) -> None:
    """A new operator process has no MAAS view of a machine's interfaces until its first pass: with an
    interface selector, the cluster's pass must not drop the machine's address from the record meanwhile."""
    mc = await add_cluster(nenv, preferredSubnets=["tag:api"])
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    _, api0 = await deployed_cp(nenv, clock, "cp0")
    _, api1 = await deployed_cp(nenv, clock, "cp1")
    await reconcile(nenv)
    assert records(nenv) == {short: sorted([api0, api1])}
    fresh = ClusterReconciler(nenv.kube, nenv.connections, default_credentials=nenv.creds)
    sid1 = nenv.kube.get("maasmachines", "cp1")["spec"]["systemID"]
    for session in nenv.connections.sessions():
        session.poller._snap.pop(sid1, None)  # as in a new process: cp1's pass has not run yet
    mc = await reconcile(nenv, r=fresh)
    assert records(nenv) == {short: sorted([api0, api1])}
    assert (
        "interfaces not known yet (record kept for them): cp1" in cond(mc, C.DNS_READY_CONDITION)["message"]
    )


async def test_the_go_providers_configmap_is_used_and_the_spec_wins(nenv: Env, clock: Clock) -> None:
    env = nenv
    env.kube.configmaps[("ns", "maas-preferred-subnet")] = {"preferredSubnets": f" 192.0.2.0/24, {API} "}
    mc = await add_cluster(env)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    pxe, api = await deployed_cp(env, clock)
    await reconcile(env)
    assert records(env) == {short: [api]}
    env.kube.get("maasclusters", "c1")["spec"]["preferredSubnets"] = [PXE]
    await reconcile(env)
    assert records(env) == {short: [pxe]}


async def test_a_bad_configmap_is_a_condition_and_the_record_is_left_alone(nenv: Env, clock: Clock) -> None:
    env = nenv
    mc = await add_cluster(env)
    short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
    pxe, _ = await deployed_cp(env, clock)
    await reconcile(env)
    assert records(env) == {short: [pxe]}
    env.kube.configmaps[("ns", "maas-preferred-subnet")] = {"preferredSubnets": "10.50.0.0/24, not-a-net"}
    mc = await reconcile(env)  # no exception: a condition
    c = cond(mc, C.DNS_READY_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.INVALID_PREFERRED_SUBNETS_REASON)
    assert "'not-a-net'" in c["message"]
    assert "maas-preferred-subnet" in c["message"]
    assert records(env) == {short: [pxe]}
    assert mc["status"]["ready"] is True  # readiness is never taken back


async def test_a_machine_with_no_address_in_the_preferred_subnets_is_left_out(
    nenv: Env, clock: Clock
) -> None:
    mc = await add_cluster(nenv, preferredSubnets=["172.16.0.0/12"])
    await deployed_cp(nenv, clock)
    mc = await reconcile(nenv)
    c = cond(mc, C.DNS_READY_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.NO_ADDRESS_IN_PREFERRED_SUBNETS_REASON)
    assert "cp0" in c["message"]
    assert "172.16.0.0/12" in c["message"]
    assert records(nenv) == {mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]: []}


def lxd_two_subnet_inventory() -> Inventory:
    """One LXD VM host on the PXE and the API networks; its VMs ask for a NIC on each (compose)."""
    return Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": PXE, "name": "pxe"}, {"cidr": API, "name": "api"}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [
                {"hostname": "kvm0", "zone": "az1", "status": "deployed", "owner": "admin", "cpu_count": 32,
                 "memory": 65536, "disks": [{"name": "sda", "size": "1T"}],
                 "interfaces": [{"name": "eth0", "subnet": "pxe", "ip": "10.40.0.200"},
                                {"name": "eth1", "subnet": "api", "ip": "10.50.0.200"}]}
            ],
            "vm_hosts": [
                {"name": "lxd0", "host": "kvm0", "tags": ["capmaas-shared"],
                 "storage_pools": [{"name": "default", "size": "500G",
                                                                    "default": True}]}
            ],
        }
    )  # fmt: skip


async def test_an_lxd_vm_with_two_addresses_uses_the_preferred_one(clock: Clock) -> None:
    sim = Simulator(lxd_two_subnet_inventory(), timings=Timings.fast(), faults=Faults(), clock=clock)
    env = make_env(sim)
    try:
        mc = await add_cluster(env, preferredSubnets=[API])
        short = mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]
        # lxdConfig.network.subnets: compose interfaces eth0:subnet=pxe;eth1:subnet=api, two AUTO-linked NICs
        env.machine("cp0", cp=True, lxd_config={"network": {"subnets": ["pxe", "api"]}})
        await env.drive(["cp0"], lambda b: bool(b.get("spec", {}).get("systemID")))
        vm = sim.state.machines[env.kube.get("maasmachines", "cp0")["spec"]["systemID"]]
        assert vm.pod_id is not None
        api_subnet = next(s.id for s in sim.state.subnets.values() if s.cidr == API)
        assert [(i.name, i.subnet_id == api_subnet, i.auto) for i in vm.interfaces] == [
            ("eth0", False, True),
            ("eth1", True, True),
        ]
        await env.drive(["cp0"], lambda b: bool(b.get("status", {}).get("ready")))
        pxe, api = (i.ip for i in vm.interfaces)
        assert pxe
        assert api
        assert api.startswith("10.50.")
        await reconcile(env)
        assert records(env) == {short: [api]}
    finally:
        await env.connections.aclose()
        await asyncio.sleep(0)


async def test_a_manual_power_control_plane_machine_is_in_the_record(clock: Clock) -> None:
    """MAAS never queries a manual-power machine: its power stays ``unknown``, which is not off."""
    inventory = Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": API, "name": "api"}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [
                {"hostname": "man0", "zone": "az1", "cpu_count": 4, "memory": 8192, "power_type": "manual",
                 "interfaces": [{"name": "eth0", "subnet": "api"}]}
            ],
        }
    )  # fmt: skip
    env = make_env(Simulator(inventory, timings=Timings.fast(), faults=Faults(), clock=clock))
    try:
        mc = await add_cluster(env)
        env.machine("cp0", cp=True)
        await env.drive(["cp0"], lambda b: bool(b.get("status", {}).get("ready")))
        assert "machinePowered" not in env.kube.get("maasmachines", "cp0")["status"]  # unknown
        ip = next(iter(env.sim.state.machines.values())).interfaces[0].ip
        await reconcile(env)
        assert records(env) == {mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]: [ip]}
    finally:
        await env.connections.aclose()
        await asyncio.sleep(0)
