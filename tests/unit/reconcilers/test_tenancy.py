"""VM-host tenancy and DNS names (issue 21, items 2 and 3): the rules on their own, then the reconcilers
against the simulator. The unit tests' namespace is "ns"; "other" plays another tenant."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from reconciler_env import Env, make_env
from test_lxd_lifecycle import add_lxd, cond, inventory, lxd_sim, ready

from capmaas.api import conditions as C
from capmaas.reconcilers.cluster import ClusterReconciler, dns_name, is_managed_name, legacy_dns_name
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DNS_PENDING, DNS_RECORD
from capmaas.reconcilers.tenancy import (
    SHARED_VM_HOST_TAG,
    Tenancy,
    foreign_namespace_tags,
    host_usable,
    namespace_tag,
)
from capmaas_dev import demo

TAG_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")  # MAAS's tag-name rule (shared reference, §5 Tags)


# --- the rules ---------------------------------------------------------------------------------------------


def test_namespace_tags_are_maas_tag_names_and_never_the_shared_tag() -> None:
    for ns in ("a", "team-a", "x" * 63, "shared", "0-1"):
        tag = namespace_tag(ns)
        assert TAG_NAME.match(tag), tag
        assert tag != SHARED_VM_HOST_TAG
    assert namespace_tag("a") != namespace_tag("a-")  # one-to-one


def test_a_host_is_usable_when_tagged_for_the_namespace_or_shared_never_untagged() -> None:
    assert host_usable(["capmaas-ns-ns"], "ns")
    assert host_usable(["lxd", SHARED_VM_HOST_TAG], "ns")
    assert not host_usable([], "ns")  # an admin's host registered by hand: nobody's until tagged
    assert not host_usable(["capmaas-ns-other"], "ns")
    assert not host_usable(["capmaas-ns-ns-2"], "ns")  # a prefix is not the namespace
    assert foreign_namespace_tags(["capmaas-ns-ns", "capmaas-ns-old", "lxd"], "ns") == ["capmaas-ns-old"]


def test_registration_and_dns_domains_follow_the_admins_lists() -> None:
    none = Tenancy()
    assert not none.may_register_vm_hosts("ns")
    assert none.dns_domain_allowed("ns", "anything.example")  # no list: any domain (as before)
    some = Tenancy(
        vm_host_namespaces=frozenset({"ns"}),
        dns_domains={"ns": frozenset({"a.maas"}), "*": frozenset({"Shared.Maas."})},
    )
    assert some.may_register_vm_hosts("ns")
    assert not some.may_register_vm_hosts("other")
    assert Tenancy(vm_host_namespaces=frozenset({"*"})).may_register_vm_hosts("other")
    assert some.dns_domain_allowed("ns", "a.maas")
    assert some.dns_domain_allowed("ns", "shared.maas")
    assert some.dns_domain_allowed("other", "shared.maas")
    assert not some.dns_domain_allowed("other", "a.maas")


def test_dns_names_carry_64_bits_and_fit_a_label() -> None:
    name = dns_name("c1", "6f1c1f4e-0000-4000-8000-000000000001", "maas")
    label = name.split(".")[0]
    suffix = label.rsplit("-", 1)[1]
    assert len(suffix) * 4 >= 64
    assert re.fullmatch(r"[0-9a-f]{16}", suffix)
    assert name == dns_name("c1", "6f1c1f4e-0000-4000-8000-000000000001", "maas")  # stable per UID
    long = dns_name("c" * 80, "u", "maas").split(".")[0]
    assert len(long) <= 63
    assert is_managed_name(dns_name("c" * 80, "u", "maas"), "c" * 80, "maas")
    old = legacy_dns_name("c1", "u", "maas")
    assert len(old.split(".")[0]) == len("c1-") + 6
    assert is_managed_name(old, "c1", "maas")
    assert not is_managed_name("api.example.com", "c1", "maas")


# --- VM hosts against the simulator ------------------------------------------------------------------------


def tagged_env(tags: list[list[str]], *, tenancy: Tenancy | None = None) -> Env:
    """One zone-spread host per entry of ``tags`` (the rest of ``inventory``'s hosts removed)."""
    sim = lxd_sim(inv=inventory(hosts_per_zone=1))
    for host, t in zip(sorted(sim.state.vm_hosts.values(), key=lambda h: h.id), tags, strict=True):
        host.tags = list(t)
    return make_env(sim) if tenancy is None else make_env(sim, tenancy=tenancy)


async def test_placement_uses_only_the_namespaces_and_shared_hosts() -> None:
    env = tagged_env([["capmaas-ns-other"], [], ["capmaas-ns-ns"]])
    try:
        await env.cluster()
        names = ["w0", "w1"]
        for n in names:
            add_lxd(env, n)
        await env.drive(names, ready)
        hosts = {env.kube.get("maasmachines", n)["status"]["lxdHost"] for n in names}
        assert hosts == {"lxd-az3-0"}  # the one tagged capmaas-ns-ns; never the untagged or the other's
        for h in env.sim.state.vm_hosts.values():
            if h.name != "lxd-az3-0":
                assert not h.vms, h.name
    finally:
        await env.connections.aclose()


async def test_no_usable_host_waits_and_counts_what_was_left_out_without_naming_it() -> None:
    env = tagged_env([["capmaas-ns-other"], [], ["lxd"]])
    try:
        await env.cluster()
        add_lxd(env, "w0")
        with pytest.raises(TransientError):
            await env.step("w0")
        c = cond(env.kube.get("maasmachines", "w0"), C.LXD_HOST_SELECTED_CONDITION)
        assert c["reason"] == C.NO_VM_HOST_AVAILABLE_REASON
        assert "3 VM host(s) left out, tagged neither capmaas-ns-ns nor capmaas-shared" in c["message"]
        assert "lxd-az1-0" not in c["message"]  # another tenant's host is not named
        assert all(not h.vms for h in env.sim.state.vm_hosts.values())
    finally:
        await env.connections.aclose()


async def test_a_pin_onto_another_namespaces_host_is_refused_naming_it() -> None:
    env = tagged_env([["capmaas-ns-other"], [SHARED_VM_HOST_TAG], ["capmaas-ns-ns"]])
    try:
        await env.cluster()
        add_lxd(env, "w0", lxd={"vmHost": "lxd-az1-0"})
        env.sim.reset_counters()
        with pytest.raises(TransientError):
            await env.step("w0")
        b = env.kube.get("maasmachines", "w0")
        c = cond(b, C.LXD_HOST_SELECTED_CONDITION)
        assert c["reason"] == C.VM_HOST_NOT_ALLOWED_REASON
        assert "lxd-az1-0" in c["message"]
        assert not b["spec"].get("systemID")
        assert not [k for k in env.sim.counters if k[0] == "POST"]  # nothing composed
        # A pin onto the shared host is placed.
        b["spec"]["lxdConfig"] = {"vmHost": "lxd-az2-0"}
        await env.drive(["w0"], ready)
        assert env.kube.get("maasmachines", "w0")["status"]["lxdHost"] == "lxd-az2-0"
    finally:
        await env.connections.aclose()


async def test_registering_a_vm_host_is_refused_outside_the_admins_namespaces() -> None:
    env = make_env(lxd_sim(inv=inventory(hosts_per_zone=0)), tenancy=Tenancy())
    try:
        await env.cluster()
        env.machine("host0", min_cpu=16, min_memory=65536)
        env.kube.get("maasmachines", "host0")["spec"]["registerVMHost"] = True
        env.sim.reset_counters()
        with pytest.raises(TerminalError) as err:
            await env.step("host0")
        assert err.value.reason == C.VM_HOST_REGISTRATION_NOT_ALLOWED_REASON
        assert "namespace ns may not register VM hosts" in err.value.message
        assert "CAPMAAS_LXD__VM_HOST_NAMESPACES" in err.value.message
        assert not env.kube.get("maasmachines", "host0")["spec"].get("systemID")
        assert not [k for k in env.sim.counters if k[0] == "POST"]  # nothing allocated or deployed
        # The cluster-wide switch (lxdConfig.enabled) is refused the same way.
        env.kube.get("maasmachines", "host0")["spec"]["registerVMHost"] = False
        env.kube.get("maasclusters", "c1")["spec"]["lxdConfig"] = {"enabled": True}
        with pytest.raises(TerminalError) as err:
            await env.step("host0")
        assert "lxdConfig.enabled" in err.value.message
    finally:
        await env.connections.aclose()


async def test_a_registered_host_is_tagged_for_its_namespace_only() -> None:
    env = make_env(lxd_sim(inv=inventory(hosts_per_zone=0)))
    try:
        await env.cluster()
        env.machine("host0", min_cpu=16, min_memory=65536)
        env.kube.get("maasmachines", "host0")["spec"]["registerVMHost"] = True
        await env.drive(["host0"], ready)
        sid = env.kube.get("maasmachines", "host0")["spec"]["systemID"]
        (host,) = env.sim.state.hosts_of(sid)
        for _ in range(3):
            if "capmaas-ns-ns" in host.tags:
                break
            await env.step("host0")
            await env.settle()
        assert host.tags == ["capmaas-ns-ns"]
        assert "VMHostTagged" in env.kube.reasons()
        # A tag of another namespace (say, before a move) is dropped: the host is this MaasMachine's.
        host.tags.append("capmaas-ns-old")
        await env.step("host0")  # remembered: no listing, no change
        assert "capmaas-ns-old" in host.tags
        env.machines.life.vm_hosts_tagged.clear()  # as in a restarted operator
        await env.step("host0")
        assert host.tags == ["capmaas-ns-ns"]
    finally:
        await env.connections.aclose()
        await asyncio.sleep(0)


# --- DNS names -------------------------------------------------------------------------------------------


RECORD = ANNOTATION_PREFIX + DNS_RECORD
PENDING = ANNOTATION_PREFIX + DNS_PENDING


def records(env: Env) -> dict[str, list[str]]:
    return {r.name: sorted(r.ips) for r in env.sim.state.dns_resources.values()}


async def test_a_managed_shaped_host_that_is_not_its_own_is_refused_and_nothing_created(env: Env) -> None:
    await env.cluster()
    assert len(records(env)) == 1
    env.kube.add("clusters", demo.cluster("c9", "ns"))
    body = _maascluster(env, "c9", controlPlaneEndpoint={"host": "c9-www.maas", "port": 6443})
    await env.clusters.reconcile(body)
    got = env.kube.get("maasclusters", "c9")
    c = cond(got, C.DNS_READY_CONDITION)
    assert c["reason"] == C.DNS_NAME_NOT_OWN_REASON
    assert "c9-www.maas" in c["message"]
    assert dns_name("c9", got["metadata"]["uid"], "maas") in c["message"]
    assert len(records(env)) == 1  # nothing planted
    assert not got["status"].get("ready")


async def test_a_domain_not_listed_for_the_namespace_is_refused(sim: Any) -> None:
    env = make_env(sim, tenancy=Tenancy(dns_domains={"other": frozenset({"maas"})}))
    try:
        env.kube.add("clusters", demo.cluster("c1", "ns"))
        await env.clusters.reconcile(_maascluster(env, "c1"))
        got = env.kube.get("maasclusters", "c1")
        c = cond(got, C.DNS_READY_CONDITION)
        assert c["reason"] == C.DNS_DOMAIN_NOT_ALLOWED_REASON
        assert "namespace ns" in c["message"]
        assert "CAPMAAS_DNS__NAMESPACE_DOMAINS" in c["message"]
        assert records(env) == {}
    finally:
        await env.connections.aclose()


async def test_a_crash_between_create_and_the_id_write_is_adopted_through_the_pending_mark(env: Env) -> None:
    mc = await env.cluster()
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    (rec,) = env.sim.state.dns_resources.values()
    assert PENDING not in mc["metadata"]["annotations"]  # cleared with the id write
    # The crash: the pending mark was written, MAAS created the record, the id never reached the object.
    mc["metadata"]["annotations"].pop(RECORD)
    mc["metadata"]["annotations"][PENDING] = fqdn
    mc.pop("status")
    fresh = ClusterReconciler(env.kube, env.connections, default_credentials=env.creds)
    await fresh.reconcile(env.kube.get("maasclusters", "c1"))
    got = env.kube.get("maasclusters", "c1")
    assert got["metadata"]["annotations"][RECORD] == f"{rec.id}/{fqdn}"
    assert PENDING not in got["metadata"]["annotations"]
    # Without the mark (and without the migration setting) the same name is not adopted.
    got["metadata"]["annotations"].pop(RECORD)
    got.pop("status")
    await fresh.reconcile(env.kube.get("maasclusters", "c1"))
    got = env.kube.get("maasclusters", "c1")
    assert RECORD not in got["metadata"]["annotations"]
    assert cond(got, C.DNS_READY_CONDITION)["reason"] == C.DNS_RECORD_CONFLICT_REASON


def _maascluster(env: Env, name: str, **spec: Any) -> dict[str, Any]:
    body = demo.maascluster(name, "ns", cluster_uid=env.kube.get("clusters", name)["metadata"]["uid"])
    body["spec"].update(spec)
    env.kube.add("maasclusters", body)
    return env.kube.get("maasclusters", name)
