"""``clusterctl move`` of a provisioned cluster from one management cluster to another (issue 6).

Both management clusters are private control planes with the real CAPI core manager and a ``capmaas run``
each (see ``move_support``); there is one MAAS (the simulator). The target doubles as the workload cluster
(its kubeconfig is the ``<cluster>-kubeconfig`` Secret, and the simulator registers a Node there when MAAS
deploys a machine), which is the classic pivot: bootstrap cluster → the cluster it created.

The claims, each checked against the simulator (the one place a wrong release or allocation shows):

- the real ``clusterctl move`` refuses while the target's inventory lacks the MAAS provider, and succeeds
  once it is there;
- during the move capmaas sends MAAS *no write at all*: no release on the source's delete-for-move, no
  allocate or deploy on the target although every MaasMachine there has a new UID (the MAAS ``agent_name``
  the machines were allocated under): the target adopts ``spec.systemID``/``spec.providerID``;
- the moved MaasMachines go Ready on the target (their status is not moved: capmaas rebuilt it) and their
  Machines Running with the same Nodes; the source namespace is empty; the managed DNS record survives;
- the control plane is an LXD VM (composed on a MAAS VM host), the workers bare metal: both kinds survive;
- on the target a scale-up allocates exactly one machine (under the new UID) and a scale-down that picks a
  moved machine releases exactly that machine; deleting the Cluster releases the rest, decomposes the VM and
  deletes the DNS record;
- simulator invariants hold throughout (no double allocation), and nothing is left allocated at the end.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from e2e_support import (
    CLUSTER_NAME_LABEL,
    apply,
    bootstrap_secret,
    cluster,
    get,
    identity_secret,
    items,
    maascluster,
    maasmachinetemplate,
    machinedeployment,
    wait_for,
)
from move_support import (
    CORE,
    DELETE_MACHINE_ANNOTATION,
    MAAS,
    MOVE_LABEL,
    Management,
    Stages,
    clusterctl,
    control_plane_machine,
    count,
    maas_writes,
    start_management,
)

from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.simulator import Inventory, Simulator, Timings

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]
T = TypeVar("T")

CLUSTER = "moved"
WORKERS = 2
PROVISION_TIMEOUT = 180.0
RECONCILE_TIMEOUT = 120.0


class Stack:
    """Source and target management clusters, the one MAAS, the namespace that moves."""

    def __init__(
        self,
        src: Management,
        dst: Management,
        sim: SimulatorThread,
        namespace: str,
        workdir: Path,
        hosts: set[str],
    ) -> None:
        self.hosts = hosts
        self.src = src
        self.dst = dst
        self.sim = sim
        self.namespace = namespace
        self.workdir = workdir

    def wait(self, check: Callable[[], T | None], what: str, *, timeout: float = 60.0) -> T:
        """``wait_for`` that, on timeout, adds :meth:`why` as it is then."""
        try:
            return wait_for(check, what, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{self.why()}") from None

    def why(self) -> str:
        """Context for a failed wait: each side's MaasMachine/MaasCluster Ready conditions and the operators'
        last lines."""
        parts = []
        for side in (self.src, self.dst):
            parts.append(f"\n--- {side.name}: Ready conditions ---")
            for kind in ("maasclusters", "maasmachines"):
                found = side.kubectl("get", kind, "-n", self.namespace, "-o", "json", check=False)
                for obj in json.loads(found.stdout or '{"items": []}').get("items", []):
                    c = _condition(obj, "Ready")
                    parts.append(f"{kind}/{obj['metadata']['name']}: {c.get('reason')} {c.get('message')}")
            parts.append(f"--- {side.name}: capmaas ---\n{side.operator.tail(20)}")
        return "\n".join(parts)


@pytest.fixture(scope="module")
def stages(request: pytest.FixtureRequest) -> Iterator[Stages]:
    s = Stages(request.node.nodeid)
    yield s
    if s.times:
        print("\n" + s.summary())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, stages: Stages) -> Iterator[Stack]:
    from capmaas_dev.devcluster import MissingToolError, StartError
    from capmaas_dev.devcluster.capi import CapiStartError
    from capmaas_dev.devcluster.workload import WorkloadCluster

    workdir = tmp_path_factory.mktemp("move")
    namespace = f"move-{secrets.token_hex(3)}"
    sim = SimulatorThread(
        Inventory.generate(machines=9, zones=3, vmhosts=3, seed=11), Timings(deploy=1.0, release=0.3)
    ).start()
    sides: list[Management] = []
    try:
        with stages("start two management clusters (in parallel)"), ThreadPoolExecutor(2) as pool:
            # The target's inventory starts without the MAAS provider: the test shows clusterctl refusing.
            futures = [
                pool.submit(start_management, "source", workdir / "source", namespace, sim, (CORE, MAAS)),
                pool.submit(start_management, "target", workdir / "target", namespace, sim, (CORE,)),
            ]
            problem: str | None = None
            error: BaseException | None = None
            for f in futures:  # collect both, so a side that did start is stopped below
                try:
                    sides.append(f.result())
                except (MissingToolError, StartError, CapiStartError) as exc:
                    problem = f"clusterctl move e2e needs two management clusters: {exc}"
                except BaseException as exc:
                    error = exc
            if error is not None:
                raise error
            if problem is not None:
                pytest.fail(problem, pytrace=False)
        src, dst = sides
        for side in sides:
            print(f"  {side.name}: " + ", ".join(f"{k} {v:.1f}s" for k, v in side.startup.items()))
        # The target is also the workload cluster: MAAS deploying a machine registers its Node there.
        workload = WorkloadCluster(dst.kubeconfig)
        sim.call(lambda s: setattr(s, "on_deployed", workload.deploy_hook()))
        src.kubectl("create", "namespace", namespace)
        workload.publish_kubeconfig(src.kubeconfig, namespace, CLUSTER)
        # The VM hosts are deployed machines of their own; everything else starts Ready.
        hosts = {sid for sid, m in sim.machine_states().items() if m["owner"] is not None}
        yield Stack(src, dst, sim, namespace, workdir, hosts)
    finally:
        with stages("teardown (both management clusters, simulator)"):
            for side in sides:
                side.stop()
            sim.stop()


# -- helpers -------------------------------------------------------------------------------------------------
def _maasmachines(side: Management, ns: str) -> dict[str, dict[str, Any]]:
    return {
        m["metadata"]["name"]: m for m in items(side.kubectl, "maasmachines", ns, f"{CLUSTER_NAME_LABEL}")
    }


def _running_machines(side: Management, ns: str, n: int) -> dict[str, dict[str, Any]] | None:
    ms = items(side.kubectl, "machines", ns, f"{CLUSTER_NAME_LABEL}={CLUSTER}")
    if len(ms) != n or not all(
        m.get("status", {}).get("phase") == "Running" and m["status"].get("nodeRef") for m in ms
    ):
        return None
    return {m["metadata"]["name"]: m for m in ms}


def _ready_maasmachines(side: Management, ns: str, n: int) -> dict[str, dict[str, Any]] | None:
    mms = _maasmachines(side, ns)
    if len(mms) != n or not all(m.get("status", {}).get("ready") for m in mms.values()):
        return None
    return mms


def _ready(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    return obj if obj and obj.get("status", {}).get("ready") else None


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return {}


def _sim_machines(stack: Stack) -> dict[str, dict[str, Any]]:
    states: dict[str, dict[str, Any]] = stack.sim.machine_states()
    return states


def _owned(stack: Stack) -> set[str]:
    """System IDs MAAS counts as somebody's (allocated, deploying, deployed, releasing...), VM hosts aside."""
    machines = _sim_machines(stack)
    return {sid for sid, m in machines.items() if m["owner"] is not None and sid not in stack.hosts}


def _dns_names(stack: Stack) -> set[str]:
    def names(sim: Simulator) -> set[str]:
        return {f"{r.name}.{sim.state.domains[r.domain_id].name}" for r in sim.state.dns_resources.values()}

    found: set[str] = stack.sim.call(names)
    return found


def _writes(stack: Stack) -> dict[str, int]:
    return dict(maas_writes(stack.sim.counters()))


def _no_maas_write_since(stack: Stack, before: dict[str, int]) -> None:
    """Not one MAAS write since ``before``; else which operator wrote what: the MAAS-side Events of both
    management clusters (DNS, release, allocate ...) and the tails of their operators' logs."""
    writes = _writes(stack)
    if writes == before:
        return
    seen = []
    for side, mgmt in (("source", stack.src), ("target", stack.dst)):
        for e in items(mgmt.kubectl, "events", stack.namespace):
            seen.append(
                f"{side}: {e.get('reason')} {e.get('involvedObject', {}).get('name')}: {e.get('message')}"
            )
        seen.append(f"{side} operator log:\n{mgmt.operator.tail()}")
    raise AssertionError(f"MAAS writes {writes} != {before}\n" + "\n".join(seen))


# -- the test ------------------------------------------------------------------------------------------------
def test_clusterctl_move_keeps_every_maas_machine(stack: Stack, stages: Stages) -> None:
    src, dst, ns = stack.src, stack.dst, stack.namespace
    template = f"{CLUSTER}-workers-v1"
    secret_name = f"{CLUSTER}-userdata"
    userdata = bootstrap_secret(secret_name, ns, CLUSTER)
    # User-provided, no owner: clusterctl moves it only with the move label (the scale-up on the target
    # deploys with it, so it has to come along).
    userdata["metadata"]["labels"][MOVE_LABEL] = ""
    # The MaasCluster's credentials: a MAAS user of the cluster's own, in an identityRef Secret. Same story:
    # no owner and no CAPI secret-name suffix, so only the move label takes it along; without it the target's
    # MaasCluster reports IdentitySecretNotFound (the operators' default credentials are never used for it).
    # An admin: MAAS lets only admins compose VMs and create DNS records.
    user = stack.sim.call(lambda sim: sim.add_user(CLUSTER, admin=True))
    identity = identity_secret(f"{CLUSTER}-maas", ns, stack.sim.url, user.api_key)
    identity["metadata"]["labels"] = {MOVE_LABEL: ""}
    infra = maascluster(CLUSTER, ns)  # no endpoint: capmaas manages a DNS record in MAAS
    infra["spec"]["identityRef"] = {"kind": "Secret", "name": f"{CLUSTER}-maas"}

    with stages("provision on the source (LXD control plane + MachineDeployment of 2)"):
        apply(
            src.kubectl,
            identity,
            infra,
            cluster(CLUSTER, ns),
            userdata,
            maasmachinetemplate(template, ns),
            *control_plane_machine(
                f"{CLUSTER}-cp-0", ns, CLUSTER, secret_name, provisioningMode="lxd", minDiskSize=20
            ),
        )
        apply(
            src.kubectl,
            machinedeployment(
                f"{CLUSTER}-md", ns, CLUSTER, template, replicas=WORKERS, bootstrap_secret=secret_name
            ),
        )
        total = WORKERS + 1
        stack.wait(
            lambda: _running_machines(src, ns, total),
            f"{total} Machines Running on the source",
            timeout=PROVISION_TIMEOUT,
        )
        before = wait_for(lambda: _ready_maasmachines(src, ns, total), "MaasMachines Ready on the source")
        c = get(src.kubectl, "cluster", CLUSTER, "-n", ns)
        assert _condition(c, "ControlPlaneInitialized").get("status") == "True", c["status"]
        endpoint = get(src.kubectl, "maascluster", CLUSTER, "-n", ns)["spec"]["controlPlaneEndpoint"]

    recorded = {
        name: {
            "uid": mm["metadata"]["uid"],
            "systemID": mm["spec"]["systemID"],
            "providerID": mm["spec"]["providerID"],
            "readySince": _condition(mm, "Ready")["lastTransitionTime"],
        }
        for name, mm in before.items()
    }
    cp_sid = recorded[f"{CLUSTER}-cp-0"]["systemID"]
    assert recorded[f"{CLUSTER}-cp-0"]["providerID"].startswith("maas-lxd://")
    sids = {r["systemID"] for r in recorded.values()}
    assert len(sids) == total
    machines = _sim_machines(stack)
    for r in recorded.values():  # each allocated by the cluster's user under its MaasMachine's UID, deployed
        assert machines[r["systemID"]]["agent_name"] == r["uid"]
        assert machines[r["systemID"]]["owner"] == CLUSTER
        assert machines[r["systemID"]]["status_name"] == "Deployed"
    assert endpoint["host"] in _dns_names(stack)
    writes_before = _writes(stack)
    assert _owned(stack) == sids
    assert count(writes_before, "deploy") == total, writes_before
    assert count(writes_before, "release") == 0, writes_before
    args = ["move", "--kubeconfig", str(src.kubeconfig), "--to-kubeconfig", str(dst.kubeconfig),
            "--namespace", ns, "-v", "3"]  # fmt: skip

    with stages("clusterctl move refused: target inventory lacks infrastructure-maas"):
        out = clusterctl(stack.workdir / "clusterctl", *args)
        assert out.returncode != 0, out.stdout + out.stderr
        assert f"provider {MAAS.manifest_label} not found in the target cluster" in out.stderr, out.stderr
        # Refused before anything was touched: the source is not paused, nothing reached the target.
        assert not get(src.kubectl, "cluster", CLUSTER, "-n", ns)["spec"].get("paused")
        assert dst.kubectl("get", "namespace", ns, check=False).returncode != 0
        dst.add_provider(MAAS)

    with stages("clusterctl move"):
        out = clusterctl(stack.workdir / "clusterctl", *args)
        assert out.returncode == 0, out.stdout + out.stderr
        print(out.stderr[-3000:])

    with stages("source emptied without a MAAS write"):
        for kind in ("clusters", "machinedeployments", "machinesets", "machines", "maasmachines",
                     "maasclusters", "maasmachinetemplates"):  # fmt: skip
            assert items(src.kubectl, kind, ns) == [], kind
        assert get(src.kubectl, "secret", secret_name, "-n", ns) is None
        assert get(src.kubectl, "secret", f"{CLUSTER}-maas", "-n", ns) is None
        # The source provider ran through the whole move (pause, delete-for-move) and sent MAAS nothing.
        assert src.operator.running(), src.operator.tail()
        _no_maas_write_since(stack, writes_before)

    with stages("stop the source capmaas and CAPI manager (their part is over)"):
        src.operator.stop()
        src.stop_capi()

    with stages("moved MaasMachines reconcile on the target"):
        after = stack.wait(
            lambda: _ready_maasmachines(dst, ns, total),
            "moved MaasMachines Ready on the target",
            timeout=RECONCILE_TIMEOUT,
        )
        running = stack.wait(
            lambda: _running_machines(dst, ns, total),
            "moved Machines Running on the target",
            timeout=RECONCILE_TIMEOUT,
        )
        assert set(after) == set(recorded)
        for name, mm in after.items():
            r = recorded[name]
            assert mm["metadata"]["uid"] != r["uid"]  # a new object: the MAAS agent_name no longer matches
            assert mm["spec"]["systemID"] == r["systemID"]
            assert mm["spec"]["providerID"] == r["providerID"]
            ready = _condition(mm, "Ready")
            assert ready.get("status") == "True", mm["status"]
            # Rebuilt by the target's operator (status is not moved), not a copy of the source's.
            assert ready["lastTransitionTime"] > r["readySince"], (ready, r)
            assert running[name]["spec"]["providerID"] == r["providerID"]
        c = get(dst.kubectl, "cluster", CLUSTER, "-n", ns)
        assert not c["spec"].get("paused")  # clusterctl resumed it on the target
        for kind, name in (("maasmachinetemplate", template), ("secret", secret_name),
                           ("secret", f"{CLUSTER}-kubeconfig"), ("secret", f"{CLUSTER}-maas")):  # fmt: skip
            assert get(dst.kubectl, kind, name, "-n", ns) is not None, (kind, name)
        mc = get(dst.kubectl, "maascluster", CLUSTER, "-n", ns)
        assert mc["spec"]["controlPlaneEndpoint"] == endpoint
        mc = wait_for(
            lambda: _ready(get(dst.kubectl, "maascluster", CLUSTER, "-n", ns)),
            "MaasCluster Ready on the target",
        )
        connected = _condition(mc, "MaasConnected")  # through the moved identity Secret
        assert connected.get("status") == "True", mc["status"]
        # Not one MAAS write for the whole move: no release, no re-allocation, no redeploy.
        _no_maas_write_since(stack, writes_before)
        machines = _sim_machines(stack)
        for r in recorded.values():
            assert machines[r["systemID"]]["status_name"] == "Deployed"
            assert machines[r["systemID"]]["agent_name"] == r["uid"]  # still held as allocated on the source
        assert endpoint["host"] in _dns_names(stack)
        assert stack.sim.invariants() == []

    md = f"{CLUSTER}-md"
    with stages("scale-up on the target allocates exactly one machine"):
        dst.kubectl("patch", "machinedeployment", md, "-n", ns, "--type=merge",
                    "-p", json.dumps({"spec": {"replicas": WORKERS + 1}}))  # fmt: skip
        stack.wait(
            lambda: _running_machines(dst, ns, total + 1),
            "the scaled-up Machine Running on the target",
            timeout=PROVISION_TIMEOUT,
        )
        mms = wait_for(lambda: _ready_maasmachines(dst, ns, total + 1), "the new MaasMachine Ready")
        (new,) = [mm for name, mm in mms.items() if name not in recorded]
        new_sid = new["spec"]["systemID"]
        assert new_sid not in sids
        # Allocate *requests* may exceed one (zone spreading retries another zone when the chosen one has no
        # fitting machine); what MAAS holds is the measure: exactly one more machine, under the new UID.
        assert _owned(stack) == sids | {new_sid}
        assert _sim_machines(stack)[new_sid]["agent_name"] == new["metadata"]["uid"]
        assert _sim_machines(stack)[new_sid]["owner"] == CLUSTER  # the moved identity Secret's user
        writes = _writes(stack)
        assert count(writes, "deploy") == total + 1, writes
        assert count(writes, "release") == 0, writes

    with stages("scale-down on the target releases exactly the moved machine it picked"):
        victim = sorted(n for n in recorded if "-cp-" not in n)[0]
        victim_sid = recorded[victim]["systemID"]
        dst.kubectl("annotate", "machine", victim, "-n", ns, f"{DELETE_MACHINE_ANNOTATION}=true")
        dst.kubectl("patch", "machinedeployment", md, "-n", ns, "--type=merge",
                    "-p", json.dumps({"spec": {"replicas": WORKERS}}))  # fmt: skip
        stack.wait(
            lambda: get(dst.kubectl, "maasmachine", victim, "-n", ns) is None,
            f"MaasMachine {victim} deleted",
            timeout=RECONCILE_TIMEOUT,
        )
        wait_for(
            lambda: _sim_machines(stack)[victim_sid]["status_name"] == "Ready",
            f"{victim_sid} back to Ready in MAAS",
        )
        writes = _writes(stack)
        assert count(writes, "release", "{system_id}/") == 1, writes
        assert count(writes, "deploy") == total + 1, writes  # no replacement for a scale-down
        assert _owned(stack) == (sids - {victim_sid}) | {new_sid}
        machines = _sim_machines(stack)
        for sid in (sids - {victim_sid}) | {new_sid}:
            assert machines[sid]["status_name"] == "Deployed", (sid, machines[sid])
        wait_for(lambda: _running_machines(dst, ns, total), f"{total} Machines Running after the scale-down")

    with stages("delete the Cluster on the target: everything released"):
        dst.kubectl("delete", "cluster", CLUSTER, "-n", ns, "--wait=false")
        stack.wait(
            lambda: get(dst.kubectl, "cluster", CLUSTER, "-n", ns) is None,
            "the Cluster deleted on the target",
            timeout=RECONCILE_TIMEOUT,
        )
        wait_for(lambda: not _owned(stack), "every MAAS machine released", timeout=30)  # nothing leaked
        writes = _writes(stack)
        # Bare metal is released (both moved workers left and the one added on the target); the LXD VM is
        # deleted from MAAS, which decomposes it.
        assert count(writes, "release", "{system_id}/") == WORKERS + 1, writes
        assert cp_sid not in _sim_machines(stack)
        assert count(writes, "deploy") == total + 1, writes
        assert endpoint["host"] not in _dns_names(stack)
        assert stack.sim.invariants() == []
