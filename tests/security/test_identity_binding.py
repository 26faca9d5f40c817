"""Issue 21, attacks 1-3: a tenant's MAAS cannot hand the operator references into the shared MAAS.

The setting of each test: the real apiserver with the chart's admission policy and RBAC, the operator as a
process, and two simulators: the shared MAAS (the operator's default credentials, which the tenant's namespace
may use: the precondition of the attacks) and the tenant's own MAAS, named by an identity Secret the tenant
writes. The tenant is ``kubectl --as=mallory`` with rights on its namespace only. Its MAAS answers with a
victim's system ID (a compose, an allocate) or DNS record id; the operator writes that into fields only it may
write. Then the tenant drops ``spec.identityRef`` (to the shared MAAS, with the operator's admin key) and
deletes or wakes its objects.

Before the fix: the victim's machine in the shared MAAS was deleted (attack 1: the LXD "already ours" memory
skipped the ownership lookup), deployed with the tenant's user data (attack 2: ``Lifecycle.verified``), and
the victim's DNS record deleted with the tenant's MaasCluster (attack 3). Now every reference is stamped with
the identity it came from, the switch is refused while references are held (``IdentityRefApplied=False``,
``IdentityChangeRefused``, naming them), and the victim's machine and record are untouched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml
from identity_support import (
    ForcedIds,
    condition,
    create_record,
    drop_identity_ref,
    get,
    hold_for_victim,
    poke,
    provision,
    record,
    rewrite_dns_create,
    serving,
    tenant_cluster,
    tenant_machine,
    tenant_sim,
    victim_view,
)
from operator_harness import Harness
from security_support import Installed, Tenant, wait_policy_active

from capmaas.api import conditions as C
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DNS_RECORD, IDENTITY
from capmaas_dev import demo
from capmaas_dev.simulator import NodeStatus

pytestmark = pytest.mark.k8s


async def switched_or_refused(h: Harness, t: Tenant, name: str) -> str:
    """After the tenant dropped identityRef: ``refused`` (the fix), or ``switched`` (connected to the shared
    MAAS: what the operator did before the fix)."""
    outcome: list[str] = []

    async def check() -> bool:
        refused = await condition(t, "maasclusters", name, C.IDENTITY_REF_APPLIED_CONDITION)
        if refused is not None and refused["reason"] == C.IDENTITY_CHANGE_REFUSED_REASON:
            outcome.append("refused")
            return True
        connected = await condition(t, "maasclusters", name, C.MAAS_CONNECTED_CONDITION)
        if connected is not None and connected["status"] == "True" and connected["message"] == h.url:
            outcome.append("switched")
            return True
        return False

    await h.wait("the identityRef change refused (or applied)", check, within=60)
    return outcome[-1]


async def unchanged_for(seconds: float, changed: Callable[[], bool]) -> None:
    """Give the operator ``seconds`` to act on the tenant's last move; returns early once ``changed()``."""
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / 0.2) + 1):
        if changed() or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.2)


def refusal_names(c: dict[str, Any] | None, *names: str) -> None:
    """The attacker's answer: ``IdentityRefApplied=False``/``IdentityChangeRefused`` naming what is held."""
    assert c is not None, "no IdentityRefApplied condition"
    assert (c["status"], c["reason"]) == ("False", C.IDENTITY_CHANGE_REFUSED_REASON), c
    for n in names:
        assert n in c["message"], c["message"]


def wait_for(
    h: Harness, what: str, check: Callable[[], Awaitable[bool]], within: float = 120
) -> Awaitable[None]:
    return h.wait(what, check, within=within)


async def test_attack1_lxd_identity_swap_cannot_delete_a_victims_machine(
    harness: Harness, policy: Installed, tenant: Tenant
) -> None:
    h = harness
    h.operator.start()
    victim = sorted(h.sim.state.machines)[0]
    hold_for_victim(h.sim, victim, NodeStatus.DEPLOYED)
    before = victim_view(h.sim, victim)
    own = tenant_sim(machines=4, zones=1, vmhosts=2, seed=5)
    assert victim not in own.state.machines
    own.rng = ForcedIds(victim)  # its compose answers with the victim's system ID

    async with serving(own) as url:
        await tenant_cluster(h, tenant, "t1", url, own.api_key, endpoint_host="api.t1.example")
        await provision(tenant, "t1")
        await tenant_machine(tenant, "t1", "w0", lxd_config={}, min_cpu=1, min_memory=1024)

        async def composed() -> bool:
            mm = await get(tenant, "maasmachines", "w0") or {}
            state = mm.get("status", {}).get("machineState")
            return mm.get("spec", {}).get("systemID") == victim and state in ("Deploying", "Deployed")

        await wait_for(
            h, "the tenant's VM, composed with the victim's system ID, allocated and deploying", composed
        )
        mm = await get(tenant, "maasmachines", "w0")
        assert mm is not None
        stamp = mm["metadata"]["annotations"].get(ANNOTATION_PREFIX + IDENTITY)

        await drop_identity_ref(tenant, "t1")
        await switched_or_refused(h, tenant, "t1")
        said = await condition(tenant, "maasclusters", "t1", C.IDENTITY_REF_APPLIED_CONDITION)
        await tenant.ak("delete", "maasmachines", "w0", "--wait=false")

        async def gone() -> bool:
            return await get(tenant, "maasmachines", "w0") is None

        await wait_for(h, "the tenant's MaasMachine deleted", gone, within=90)
        assert victim_view(h.sim, victim) == before, "the victim's machine in the shared MAAS was touched"
        assert stamp, "the system ID was written without the identity stamp"
        refusal_names(said, "MaasMachine w0", victim)

        # Once no reference is held any more, the change applies.
        await poke(tenant, "maasclusters", "t1", 1)

        async def applied() -> bool:
            c = await condition(tenant, "maasclusters", "t1", C.IDENTITY_REF_APPLIED_CONDITION)
            m = await condition(tenant, "maasclusters", "t1", C.MAAS_CONNECTED_CONDITION)
            return c is not None and c["status"] == "True" and m is not None and m["message"] == h.url

        await wait_for(h, "the identityRef change applied once nothing is held", applied, within=60)
        assert victim_view(h.sim, victim) == before


async def test_attack2_bare_metal_identity_swap_cannot_deploy_a_victims_machine(
    harness: Harness, policy: Installed, tenant: Tenant
) -> None:
    h = harness
    h.operator.start()
    own = tenant_sim()  # the shared MAAS's inventory: the same system IDs
    async with serving(own) as url:
        await tenant_cluster(h, tenant, "t1", url, own.api_key, endpoint_host="api.t1.example")
        await provision(tenant, "t1")
        await tenant_machine(tenant, "t1", "w0")

        async def deployed() -> bool:
            mm = await get(tenant, "maasmachines", "w0") or {}
            return mm.get("status", {}).get("machineState") == "Deployed"

        await wait_for(h, "the tenant's machine deployed in its own MAAS", deployed)
        mm = await get(tenant, "maasmachines", "w0")
        assert mm is not None
        sid = mm["spec"]["systemID"]
        # The same system ID in the shared MAAS: allocated to another user, not deployed yet.
        hold_for_victim(h.sim, sid, NodeStatus.ALLOCATED)
        before = victim_view(h.sim, sid)

        await drop_identity_ref(tenant, "t1")
        await switched_or_refused(h, tenant, "t1")
        await poke(tenant, "maasmachines", "w0", 1)
        await unchanged_for(10, lambda: victim_view(h.sim, sid) != before)
        assert victim_view(h.sim, sid) == before, "the victim's machine was deployed with the tenant's data"
        said = await condition(tenant, "maasclusters", "t1", C.IDENTITY_REF_APPLIED_CONDITION)
        refusal_names(said, "MaasMachine w0", sid)

        await tenant.ak("delete", "maasmachines", "w0", "--wait=false")

        async def gone() -> bool:
            return await get(tenant, "maasmachines", "w0") is None

        await wait_for(h, "the tenant's MaasMachine deleted", gone, within=90)
        assert victim_view(h.sim, sid) == before
        assert own.state.machines[sid].owner is None  # released in the tenant's own MAAS, where it was held


async def test_attack3_dns_identity_swap_cannot_touch_a_victims_record(
    harness: Harness, policy: Installed, tenant: Tenant
) -> None:
    h = harness
    h.operator.start()
    vid, _ = await create_record(h.url, h.sim.api_key, "victim-api.maas", ["10.9.8.7"])
    before = record(h.sim, vid)
    assert before == ("victim-api", ["10.9.8.7"])
    own = tenant_sim(seed=11)
    own.app = rewrite_dns_create(own.app, vid, "victim-api.maas")  # type: ignore[method-assign]
    async with serving(own) as url:
        await tenant_cluster(h, tenant, "t1", url, own.api_key)
        key = ANNOTATION_PREFIX + DNS_RECORD

        async def claimed() -> bool:
            mc = await get(tenant, "maasclusters", "t1") or {}
            return (mc.get("metadata", {}).get("annotations") or {}).get(key) == f"{vid}/victim-api.maas"

        await wait_for(
            h, "the operator recorded the victim's record id from the tenant's MAAS", claimed, within=60
        )

        await drop_identity_ref(tenant, "t1")
        await switched_or_refused(h, tenant, "t1")
        await poke(tenant, "maasclusters", "t1", 1)
        await unchanged_for(5, lambda: record(h.sim, vid) != before)
        assert record(h.sim, vid) == before, "the victim's DNS record was rewritten"
        said = await condition(tenant, "maasclusters", "t1", C.IDENTITY_REF_APPLIED_CONDITION)
        await tenant.ak("delete", "maasclusters", "t1", "--wait=false")

        async def gone() -> bool:
            return await get(tenant, "maasclusters", "t1") is None

        await wait_for(h, "the tenant's MaasCluster deleted", gone, within=90)
        assert record(h.sim, vid) == before, "the victim's DNS record was deleted with the tenant's cluster"
        refusal_names(said, f"DNS record {vid}/victim-api.maas")


async def test_a_tenant_cannot_forge_the_identity_stamp(
    harness: Harness, kubectl: Any, policy: Installed, tenant: Tenant
) -> None:
    """The stamp is one of the operator's annotations: the chart's policy refuses it to a tenant."""
    mc = demo.maascluster("f1", tenant.namespace)
    mc["metadata"]["annotations"] = {ANNOTATION_PREFIX + IDENTITY: "0" * 32}
    doc = yaml.safe_dump(mc)
    wait_policy_active(
        lambda: tenant.k("apply", "--dry-run=server", "-f", "-", input=doc, check=False).returncode != 0
    )
    denied = await tenant.ak("apply", "-f", "-", input=doc, check=False)
    assert denied.returncode != 0
    assert f"metadata.annotations[{ANNOTATION_PREFIX}{IDENTITY}]" in denied.stderr
