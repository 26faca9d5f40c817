"""Node reuse (issue 24 item 2): the record's rules, and the bare-metal provisioner against the simulator.

A MaasMachine cloned from a ``nodeReuse`` template is released without erase and recorded for its
MachineDeployment on the MaasCluster; the next MaasMachine of that MachineDeployment allocates that server by
system ID, under its own agent name, through the same identity only."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import httpx
import pytest
from fakes import FakeKube
from reconciler_env import (
    CLIENT_RETRY,
    CLIENT_TIMEOUT,
    ENDPOINT,
    TENANCY,
    Env,
    default_credentials,
    make_env,
)
from test_release_options import delete
from test_vmhost_delete import ready

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.related import CapiMachine
from capmaas.api.v1beta1 import ReleaseOptions
from capmaas.gateway import MaasConnections
from capmaas.reconcilers import reuse
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.errors import ConflictError, TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, IDENTITY, REUSABLE
from capmaas.reconcilers.lifecycle import MachineSettings
from capmaas.reconcilers.machine import MachineReconciler
from capmaas.reconcilers.ports import MaasCredentials
from capmaas_dev import demo
from capmaas_dev.demo import manifests
from capmaas_dev.simulator import Simulator

RECORD = ANNOTATION_PREFIX + REUSABLE


# --- the record's rules ----------------------------------------------------------------------------------
MD0 = "MachineDeployment/md-0"


def entry(sid: str, *, owner: str = MD0, identity: str = "id-a", at: float = 100.0) -> reuse.Reusable:
    return reuse.Reusable(owner=owner, system_id=sid, identity=identity, released=at)


def test_the_record_round_trips_and_an_unreadable_one_is_empty() -> None:
    records = [entry("abc"), entry("def", at=101.0)]
    text = reuse.dump(records)
    assert text is not None
    assert '"systemID":"abc"' in text
    assert reuse.parse(text) == records
    assert reuse.parse("not json") == []
    assert reuse.parse('[{"owner": "x"}]') == []
    assert reuse.dump([]) is None  # the annotation goes


def test_records_expire_and_stay_bounded() -> None:
    old, fresh = entry("old", at=0.0), entry("fresh", at=950.0)
    assert reuse.live([old, fresh], now=1000.0, ttl=100.0) == [fresh]
    many = [entry(f"s{i}", at=float(i)) for i in range(reuse.MAX_RECORDS + 10)]
    kept = reuse.live(many, now=float(len(many)), ttl=1e9)
    assert len(kept) == reuse.MAX_RECORDS
    assert kept[0].system_id == "s10"  # the oldest went first


def test_adding_a_server_again_replaces_its_entry() -> None:
    again = entry("abc", at=5.0, owner="MachineDeployment/md-1")
    assert reuse.added([entry("abc", at=1.0)], again, 6.0, 100.0) == [again]


def test_only_the_owners_entries_of_the_same_identity_are_candidates() -> None:
    records = [
        entry("other-identity", identity="id-b", at=1.0),
        entry("other-owner", owner="MachineDeployment/md-9", at=2.0),
        entry("ours", at=3.0),
        entry("ours-later", at=4.0),
    ]
    found = reuse.pick(records, "MachineDeployment/md-0", "id-a", "uid-1")
    assert found is not None
    assert found.system_id == "ours"
    assert reuse.pick(records, "MachineDeployment/md-0", "id-c", "uid-1") is None


def test_a_claimed_entry_is_its_claimants_only() -> None:
    records = reuse.claimed([entry("ours", at=1.0), entry("ours-later", at=2.0)], "ours", "uid-1")
    assert [r.claimant for r in records] == ["uid-1", None]
    assert reuse.claimed(records, "ours", "uid-2") == records  # claimed already: not taken over
    mine = reuse.pick(records, MD0, "id-a", "uid-1")
    assert mine is not None
    assert mine.system_id == "ours"  # found again by its claimant
    theirs = reuse.pick(records, MD0, "id-a", "uid-2")
    assert theirs is not None
    assert theirs.system_id == "ours-later"  # never another MaasMachine's claim
    assert reuse.parse(reuse.dump(records)) == records


def test_the_owner_is_the_machinedeployment_or_the_control_plane() -> None:
    md = CapiMachine.from_body({"metadata": {"labels": {reuse.DEPLOYMENT_NAME_LABEL: "md-0"}}})
    assert reuse.owner_of(md) == "MachineDeployment/md-0"
    kcp_ref = {"kind": "KubeadmControlPlane", "name": "cp", "controller": True, "apiVersion": "x/v1"}
    kcp = CapiMachine.from_body({"metadata": {"ownerReferences": [kcp_ref]}})
    assert reuse.owner_of(kcp) == "KubeadmControlPlane/cp"
    ms_ref = {"kind": "MachineSet", "name": "ms", "controller": True, "apiVersion": "x/v1"}
    assert reuse.owner_of(CapiMachine.from_body({"metadata": {"ownerReferences": [ms_ref]}})) is None
    assert reuse.owner_of(None) is None


def test_a_kept_server_is_released_without_any_erase() -> None:
    opts = ReleaseOptions(erase=True, secure_erase=True, quick_erase=True, scripts=["wipe-disks", "site-x"])
    kept = reuse.keeping(opts)
    assert (kept.erase, kept.secure_erase, kept.quick_erase) == (False, False, False)
    assert kept.scripts == ["site-x"]
    assert reuse.keeping(ReleaseOptions(scripts=["wipe"])).scripts is None


# --- against the simulator -------------------------------------------------------------------------------
def template(env: Env, name: str, *, node_reuse: bool) -> None:
    spec = manifests.maasmachine_spec()
    env.kube.add(
        "maasmachinetemplates",
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "MaasMachineTemplate",
            "metadata": {"name": name},
            "spec": {"template": {"spec": spec}, "nodeReuse": node_reuse},
        },
    )


def md_machine(env: Env, name: str, tmpl: str, **kw: Any) -> None:
    """A Machine of MachineDeployment md-0 and its MaasMachine cloned from ``tmpl`` (as CAPI makes them)."""
    env.machine(name, **kw)
    env.kube.get("machines", name)["metadata"]["labels"][reuse.DEPLOYMENT_NAME_LABEL] = "md-0"
    mm = env.kube.get("maasmachines", name)
    mm["metadata"]["annotations"] = {
        reuse.CLONED_FROM_NAME: tmpl,
        reuse.CLONED_FROM_GROUPKIND: reuse.TEMPLATE_GROUPKIND,
    }
    mm["spec"]["releaseOptions"] = {"erase": True}  # what a kept server must not get


def biggest_cpu(sim: Simulator) -> int:
    return max(m.cpu_count for m in sim.state.machines.values())


def identity_secret(env: Env, api_key: str) -> None:
    """The identity Secret ``own`` the MaasCluster of :func:`deploy_and_delete_w0` may name."""
    env.kube.secrets[("ns", "own")] = {
        "MAAS_ENDPOINT": ENDPOINT.encode(),
        "MAAS_API_KEY": api_key.encode(),
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",
    }


async def deploy_and_delete_w0(env: Env, *, node_reuse: bool, identity: str | None = None) -> str:
    """w0 (on a big server, so a fresh allocate of a small template would never get it) deployed and deleted;
    returns its system ID. Whether MAAS erased it is checked on the way. ``identity``: the MaasCluster names
    that identity Secret (else the operator's default credentials)."""
    if identity is None:
        await env.cluster()
    else:
        env.kube.add("clusters", demo.cluster("c1", "ns"))
        c = env.kube.get("clusters", "c1")
        uid = c["metadata"]["uid"]
        env.kube.add("maasclusters", demo.maascluster("c1", "ns", identity=identity, cluster_uid=uid))
        await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
        c["status"] = {"initialization": {"infrastructureProvisioned": True}}
    template(env, "t-old", node_reuse=node_reuse)
    md_machine(env, "w0", "t-old", min_cpu=biggest_cpu(env.sim))
    await env.drive(["w0"], ready)
    sid = str(env.kube.get("maasmachines", "w0")["spec"]["systemID"])
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await delete(env, "w0", rounds=40)
    # The one release sent: without erase when kept (releaseOptions asks for erase), with it otherwise.
    assert [(s, erased) for s, erased in env.sim.release_log if s == sid] == [(sid, not node_reuse)]
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"
    return sid


def records(env: Env) -> list[reuse.Reusable]:
    annotations = env.kube.get("maasclusters", "c1")["metadata"].get("annotations") or {}
    return reuse.parse(annotations.get(RECORD))


async def test_a_rollout_with_node_reuse_gets_the_same_server_back_unerased(env: Env) -> None:
    sid = await deploy_and_delete_w0(env, node_reuse=True)
    kept = records(env)
    assert [(r.owner, r.system_id) for r in kept] == [("MachineDeployment/md-0", sid)]
    template(env, "t-new", node_reuse=True)  # the rollout's new template
    md_machine(env, "w1", "t-new")
    await env.drive(["w1"], ready)
    w1 = env.kube.get("maasmachines", "w1")
    assert w1["spec"]["systemID"] == sid
    assert env.sim.machines_by_agent(w1["metadata"]["uid"])[0]["system_id"] == sid  # under its own agent name
    assert records(env) == []  # consumed
    assert "MachineKeptForReuse" in env.kube.reasons()


async def claim_and_be_refused(env: Env) -> str:
    """w0 kept for md-0, then w1's first pass claims it and its own next write is refused with 409: CAPI wrote
    the new MaasMachine (owner reference, labels) right after the operator read it. Returns w0's server."""
    sid = await deploy_and_delete_w0(env, node_reuse=True)
    template(env, "t-new", node_reuse=True)
    md_machine(env, "w1", "t-new")
    read = copy.deepcopy(env.kube.get("maasmachines", "w1"))  # what this pass acts on
    patch = env.kube.patch
    armed = [True]

    async def capi_writes(plural: Any, namespace: str, name: str, body: Any, *, status: bool) -> Any:
        done = await patch(plural, namespace, name, body, status=status)
        if plural == "maasclusters" and armed[0]:  # the claim
            armed[0] = False
            await patch("maasmachines", "ns", "w1", {"metadata": {"labels": {"by": "capi"}}}, status=False)
        return done

    env.kube.patch = capi_writes  # type: ignore[method-assign]
    with pytest.raises(ConflictError):
        await env.machines.reconcile(read)
    env.kube.patch = patch  # type: ignore[method-assign]
    assert not armed[0]
    assert [(r.system_id, r.claimant) for r in records(env)] == [(sid, "uid-maasmachines-w1")]
    assert not env.sim.machines_by_agent("uid-maasmachines-w1")  # nothing allocated yet
    return sid


async def test_a_claim_outlives_a_refused_write_of_its_maasmachine(env: Env) -> None:
    sid = await claim_and_be_refused(env)
    await env.drive(["w1"], ready)
    assert env.kube.get("maasmachines", "w1")["spec"]["systemID"] == sid
    assert records(env) == []  # consumed once held


async def test_a_claimant_deleted_before_it_allocates_drops_its_claim(env: Env) -> None:
    sid = await claim_and_be_refused(env)
    await delete(env, "w1", rounds=5)
    assert ("maasmachines", "ns", "w1") not in env.kube.objects
    assert records(env) == []
    assert env.sim.machine(sid)["status_name"] == "Ready"  # in the pool again, nobody's


async def test_without_node_reuse_a_rollout_gets_new_servers(env: Env) -> None:
    sid = await deploy_and_delete_w0(env, node_reuse=False)
    assert records(env) == []
    template(env, "t-new", node_reuse=False)
    md_machine(env, "w1", "t-new")
    await env.drive(["w1"], ready)
    assert env.kube.get("maasmachines", "w1")["spec"]["systemID"] != sid


async def test_a_server_taken_meanwhile_gives_a_fresh_one_at_once(env: Env) -> None:
    sid = await deploy_and_delete_w0(env, node_reuse=True)
    other = env.sim.add_user("someone")
    env.sim.acquire(env.sim.state.machines[sid], other.username, "their-agent")  # taken in MAAS
    template(env, "t-new", node_reuse=True)
    md_machine(env, "w1", "t-new")
    await env.drive(["w1"], ready)
    assert env.kube.get("maasmachines", "w1")["spec"]["systemID"] != sid
    assert "ReusableMachineTaken" in env.kube.reasons()
    assert records(env) == []


async def test_a_new_machine_waits_for_a_kept_server_then_takes_a_fresh_one(sim: Simulator) -> None:
    env = make_env(sim, MachineSettings(reuse_wait=30.0), clock_step=5.0)
    try:
        assert env.now is not None
        await env.cluster()
        template(env, "t-new", node_reuse=True)
        md_machine(env, "w1", "t-new")
        created = datetime.datetime.fromtimestamp(env.now[0], datetime.UTC)
        env.kube.get("maasmachines", "w1")["metadata"]["creationTimestamp"] = created.isoformat()
        await env.step("w1")
        w1 = env.kube.get("maasmachines", "w1")
        assert not w1["spec"].get("systemID")
        conditions = {c["type"]: c for c in w1["status"]["conditions"]}
        assert conditions[C.MACHINE_PROVISIONED_CONDITION]["reason"] == C.WAITING_FOR_REUSABLE_MACHINE_REASON
        await env.drive(["w1"], ready)  # the clock moves 5 s a round: the wait ends, a fresh server
    finally:
        await env.connections.aclose()


async def test_another_identitys_machine_never_reuses_the_record(env: Env) -> None:
    """The MaasCluster's identity Secret is pointed at another MAAS user after the server was kept: that
    identity's MaasMachine must not take the server back by system ID (its disks hold the first user's data);
    the entry stays for its own identity until it expires."""
    identity_secret(env, env.sim.api_key)
    sid = await deploy_and_delete_w0(env, node_reuse=True, identity="own")
    before = records(env)
    assert len(before) == 1
    identity_secret(env, env.sim.add_user("tenant2").api_key)  # same Secret, another MAAS user
    template(env, "t-new", node_reuse=True)
    md_machine(env, "w1", "t-new")
    await env.drive(["w1"], ready)
    w1 = env.kube.get("maasmachines", "w1")
    assert w1["metadata"]["annotations"][ANNOTATION_PREFIX + IDENTITY] != before[0].identity  # tenant2's
    assert w1["spec"]["systemID"] != sid
    assert env.sim.machine(sid)["status_name"] == "Ready"  # not handed to tenant2
    assert records(env) == before


class LoseOneAllocateAnswer(httpx.AsyncBaseTransport):
    """The simulator's app; once armed, the next allocate is acted on by MAAS but its answer is lost (the
    operator dies, or the connection drops, right after MAAS allocated)."""

    def __init__(self, sim: Simulator) -> None:
        self.inner = httpx.ASGITransport(app=sim.app)
        self.armed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.armed and request.url.params.get("op") == "allocate":
            self.armed = False
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


async def test_a_reused_allocate_whose_answer_is_lost_is_adopted_not_leaked(sim: Simulator) -> None:
    """The reused server goes through the ordinary crash-safe path: ``…/allocating`` before the allocate, the
    agent name looked up after a lost answer, the server adopted; nothing else allocated, nothing leaked."""
    transport = LoseOneAllocateAnswer(sim)
    kube = FakeKube()

    def factory(c: MaasCredentials) -> maas.MaasClient:
        return maas.MaasClient(
            c.endpoint, api_key=c.api_key, transport=transport, timeout=CLIENT_TIMEOUT, retry=CLIENT_RETRY
        )

    conns = MaasConnections(client_factory=factory, fast=3600, idle=3600, batch_size=200, wake=lambda k: None)
    creds = default_credentials(sim)
    env = Env(
        sim,
        kube,
        conns,
        MachineReconciler(kube, conns, default_credentials=creds, tenancy=TENANCY),
        ClusterReconciler(kube, conns, default_credentials=creds, tenancy=TENANCY),
        creds,
    )
    try:
        sid = await deploy_and_delete_w0(env, node_reuse=True)
        template(env, "t-new", node_reuse=True)
        md_machine(env, "w1", "t-new")
        transport.armed = True
        with pytest.raises(TransientError):
            await env.step("w1")
        assert not transport.armed  # the allocate was sent (by system ID) and MAAS acted on it
        uid = env.kube.get("maasmachines", "w1")["metadata"]["uid"]
        assert [m["system_id"] for m in sim.machines_by_agent(uid)] == [sid]
        assert [r.claimant for r in records(env)] == [uid]  # claimed before the allocate, for w1 alone
        await env.drive(["w1"], ready)
        assert env.kube.get("maasmachines", "w1")["spec"]["systemID"] == sid
        assert [m["system_id"] for m in sim.machines_by_agent(uid)] == [sid]  # adopted, not allocated again
        assert sim.check_invariants() == []
    finally:
        await conns.aclose()
