"""Cluster API external remediation through MAAS (MaasRemediation, issue 24) end to end: the real CAPI core
manager's MachineHealthCheck creates the MaasRemediations, the capmaas operator power-cycles (and redeploys)
the servers in the MAAS simulator, and the workload stand-in plays the kubelets.

The simulator's times are realistic ones scaled by :data:`SCALE` (deploy 10 minutes, a power cycle's boot 2
minutes): the "[e2e timing]" lines of the transient-fault test and of the replacement give the
time-to-healthy of a power cycle and of a replacement (docs/operating.md "Remediation"), with CAPI's reconcile
rate limit off (conftest): a CAPI v1.13 installation's health check acts on a NotReady Node up to 15 s later.

A *faulty* server is one whose Node stays NotReady whatever happens to it (power cycle, redeploy): its
hostname is in :data:`FAULTY`, which the simulator hooks below read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_support import (
    DEPLOYMENT_NAME_LABEL,
    INFRA_API,
    ProviderStack,
    apply,
    condition,
    get,
    maasmachinetemplate,
    machinedeployment,
    machinehealthcheck,
    start_operator,
    wait_for,
)

from capmaas_dev.demo.stack import OperatorProcess
from capmaas_dev.devcluster.workload import machine_addresses

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

#: Simulated seconds per real minute of a physical MAAS lab (deploy 10 min → 5 s, boot 2 min → 1 s).
SCALE = 0.5
DEPLOY, BOOT, RELEASE = 10 * SCALE, 2 * SCALE, 1 * SCALE
#: Hostnames whose Node never becomes Ready again.
FAULTY: set[str] = set()


@pytest.fixture(scope="module")
def stack(provider_stack: ProviderStack) -> Iterator[ProviderStack]:
    """The module's provider stack with realistic (scaled) times and kubelets that honour :data:`FAULTY`."""
    workload = provider_stack.workload

    async def deployed(machine: dict[str, Any]) -> None:  # the kubelet registers; a faulty one NotReady
        # At once NotReady, not Ready then NotReady: CAPI's health check (no rate limit here, conftest) would
        # see the moment between as a healthy Node, and the remediation would end "healthy again".
        hostname = str(machine["hostname"])
        await asyncio.to_thread(
            workload.register_node,
            hostname,
            addresses=machine_addresses(machine),
            ready=hostname not in FAULTY,
        )

    async def booted(machine: dict[str, Any]) -> None:  # the power cycle's boot: the kubelet reports again
        await asyncio.to_thread(
            workload.set_ready, str(machine["hostname"]), machine["hostname"] not in FAULTY
        )

    def configure(sim: Any) -> None:
        sim.timings = dataclasses.replace(sim.timings, deploy=DEPLOY, boot=BOOT, release=RELEASE)
        sim.on_deployed, sim.on_powered_on = deployed, booted

    provider_stack.sim.call(configure)
    yield provider_stack
    FAULTY.clear()


@pytest.fixture(scope="module")
def cluster(stack: ProviderStack) -> str:
    """One Cluster (with its control-plane Machine) for every test here; each adds a MachineDeployment."""
    name = f"rem-{secrets.token_hex(3)}"
    with stack.stage("Cluster + a control-plane Machine Running"):
        stack.create_cluster(name)
    return name


def _md(cluster: str) -> str:
    return f"{cluster}-{secrets.token_hex(2)}"


def _remediated_md(stack: ProviderStack, cluster: str, md: str, **strategy: Any) -> None:
    """One worker in a MachineDeployment whose health check remediates with a MaasRemediationTemplate."""
    ns = stack.namespace
    apply(stack.kubectl, maasmachinetemplate(f"{md}-v1", ns))
    apply(
        stack.kubectl,
        machinedeployment(md, ns, cluster, f"{md}-v1", replicas=1, bootstrap_secret=f"{cluster}-userdata"),
        {
            "apiVersion": INFRA_API,
            "kind": "MaasRemediationTemplate",
            "metadata": {"name": md, "namespace": ns},
            "spec": {"template": {"spec": strategy}},
        },
        machinehealthcheck(md, ns, cluster, md, timeout=2, template=md),
    )


def _worker(stack: ProviderStack, cluster: str, md: str) -> dict[str, Any]:
    """The MachineDeployment's one Machine once Running and healthy: its name, UID, MaasMachine, server."""
    selector = f"{DEPLOYMENT_NAME_LABEL}={md}"
    (machine,) = stack.wait_for(
        lambda: stack.running_machines(cluster, selector, 1), f"{md} Running", timeout=180
    )
    name = machine["metadata"]["name"]

    # CAPI sets no HealthCheckSucceeded=True on a Machine never remediated (external remediation): its count.
    stack.wait_for(
        lambda: _healthy_count(stack, md), f"the MachineHealthCheck sees {name} healthy", timeout=60
    )
    (mm,) = stack.maasmachines(cluster, selector)
    sid = mm["spec"]["systemID"]
    return {
        "name": name,
        "uid": machine["metadata"]["uid"],
        "mm": mm,
        "sid": sid,
        "hostname": stack.machine_states()[sid]["hostname"],
    }


def _healthy(stack: ProviderStack, machine: str) -> bool:
    m = get(stack.kubectl, "machine", machine, "-n", stack.namespace)
    return bool(m) and (condition(m, "HealthCheckSucceeded") or {}).get("status") == "True"


def _healthy_count(stack: ProviderStack, md: str) -> bool:
    st = (get(stack.kubectl, "machinehealthcheck", md, "-n", stack.namespace) or {}).get("status") or {}
    return st.get("expectedMachines") == 1 and st.get("currentHealthy") == 1


def _power_offs(stack: ProviderStack, sid: str) -> int:
    return int(stack.sim.call(lambda s: sum(1 for i, st in s.power_log if i == sid and st == "off")))


def _remediation(stack: ProviderStack, name: str) -> dict[str, Any] | None:
    return get(stack.kubectl, "maasremediation", name, "-n", stack.namespace)  # type: ignore[no-any-return]


def _events(stack: ProviderStack, name: str) -> set[str]:
    got = get(stack.kubectl, "events", "-n", stack.namespace, f"--field-selector=involvedObject.name={name}")
    return {str(e.get("reason")) for e in got["items"]}


def _restart_operator(stack: ProviderStack) -> None:
    """The same :class:`OperatorProcess` started again (the fixture's teardown stops that object), on fresh
    health and metrics ports: the killed one's may have been taken since (``start_operator``)."""
    op: OperatorProcess = stack.operator
    assert op.popen is not None
    op.popen.wait(timeout=30)
    start_operator(op)


def _kill_operator_on(stack: ProviderStack, method: str, sid: str) -> list[str]:
    """SIGKILL the operator inside the simulator's ``method`` (a Lifecycle method whose first argument is the
    machine) the first time it runs for ``sid``: MAAS acted, the answer never arrives, nothing after it is
    written. Returns the list the calls for ``sid`` are appended to."""
    pid, calls = stack.operator.pid, []

    def install(sim: Any) -> None:
        plain = getattr(type(sim), method)

        def hooked(m: Any, *args: Any) -> Any:
            result = plain(sim, m, *args)
            if m.system_id == sid:
                calls.append(method)
                if len(calls) == 1:
                    os.killpg(pid, signal.SIGKILL)
            return result

        setattr(sim, method, hooked)

    stack.sim.call(install)
    return calls


def _resume_after_kill(stack: ProviderStack, name: str) -> dict[str, Any]:
    """Wait for the kill, restart the operator; returns the MaasRemediation's status as the kill left it."""
    wait_for(lambda: stack.operator.exited() is not None, "the operator killed", timeout=120)
    at_kill: dict[str, Any] = (_remediation(stack, name) or {}).get("status") or {}
    _restart_operator(stack)
    return at_kill


def test_a_power_cycle_heals_a_transient_fault_without_a_replacement(
    stack: ProviderStack, cluster: str
) -> None:
    md = _md(cluster)
    _remediated_md(stack, cluster, md, retryLimit=2, timeoutSeconds=30, powerOffTimeoutSeconds=10)
    with stack.stage("worker Running and healthy"):
        w = _worker(stack, cluster, md)
    with stack.stage(f"transient fault: Node NotReady -> healthy again by a power cycle (scale {SCALE})"):
        t0 = time.monotonic()
        stack.workload.set_ready(w["hostname"], False)  # a hung kernel: the kubelet stopped reporting
        stack.wait_for(
            lambda: _remediation(stack, w["name"]), "MaasRemediation created by the MHC", timeout=60
        )
        t1 = time.monotonic()
        stack.wait_for(lambda: _healthy(stack, w["name"]), f"{w['name']} healthy again", timeout=90)
        print(f"[remediation] NotReady to MaasRemediation (CAPI's health check): {t1 - t0:.1f}s")
        print(f"[remediation] MaasRemediation to healthy by a power cycle: {time.monotonic() - t1:.1f}s")
        stack.wait_for(lambda: _remediation(stack, w["name"]) is None, "MaasRemediation deleted", timeout=60)
    assert _power_offs(stack, w["sid"]) == 1
    assert {"PowerOffRequested", "PowerCycled", "Remediated"} <= _events(stack, w["name"])
    # No replacement: the same Machine on the same server, the MaasMachine handed back (no hold left).
    same = _worker(stack, cluster, md)
    assert (same["uid"], same["sid"]) == (w["uid"], w["sid"])
    assert "capmaas.infrastructure.cluster.x-k8s.io/remediation" not in (
        same["mm"]["metadata"].get("annotations") or {}
    )
    assert stack.leaks() == []


def test_an_operator_killed_right_after_the_power_off_never_sends_a_second_one(
    stack: ProviderStack, cluster: str
) -> None:
    """The operator is SIGKILLed inside MAAS's handling of its power_off: the request took effect, the answer
    never arrived, nothing after it was written. The restarted operator finds the step recorded (written
    before the request) and powers the server on without powering it off again."""
    md = _md(cluster)
    _remediated_md(stack, cluster, md, retryLimit=1, timeoutSeconds=30, powerOffTimeoutSeconds=10)
    w = _worker(stack, cluster, md)
    offs = _kill_operator_on(stack, "power_action", w["sid"])  # the power-off: its first power action
    with stack.stage("operator killed at the power-off, restarted, server power-cycled once"):
        stack.workload.set_ready(w["hostname"], False)
        at_kill = _resume_after_kill(stack, w["name"])
        stack.wait_for(lambda: _healthy(stack, w["name"]), f"{w['name']} healthy again", timeout=90)
        stack.wait_for(lambda: _remediation(stack, w["name"]) is None, "MaasRemediation deleted", timeout=60)
    assert _power_offs(stack, w["sid"]) == 1
    assert len(offs) == 2  # the power-off, then the restarted operator's power-on
    assert at_kill.get("step") == "PowerOff", at_kill  # recorded before the request
    assert stack.machine_states()[w["sid"]]["status_name"] == "Deployed"
    assert _worker(stack, cluster, md)["uid"] == w["uid"]
    assert stack.leaks() == []


def test_a_persistent_fault_is_redeployed_on_the_same_server_then_replaced(
    stack: ProviderStack, cluster: str
) -> None:
    md = _md(cluster)
    _remediated_md(
        stack, cluster, md, retryLimit=1, timeoutSeconds=4, powerOffTimeoutSeconds=5, redeploy=True,
        redeployTimeoutSeconds=int(DEPLOY) + 6, markBrokenOnFailure=True,
    )  # fmt: skip
    w = _worker(stack, cluster, md)
    FAULTY.add(w["hostname"])
    # The operator is killed inside MAAS's allocate of the redeploy: the server is allocated, the operator
    # never hears of it. The restarted one finds the step recorded, looks the agent name up: no 2nd allocate.
    allocations = _kill_operator_on(stack, "acquire", w["sid"])
    with stack.stage(
        "persistent fault: power cycle, redeploy of the same server (operator killed), replacement"
    ):
        t0 = time.monotonic()
        stack.workload.set_ready(w["hostname"], False)
        at_kill = _resume_after_kill(stack, w["name"])
        assert at_kill.get("step") == "Allocate", at_kill

        def redeployed() -> dict[str, Any] | None:
            rem = _remediation(stack, w["name"]) or {}
            return rem if (condition(rem, "Redeployed") or {}).get("status") == "True" else None

        rem = stack.wait_for(redeployed, "the same server allocated again for the redeploy", timeout=120)
        assert (rem["status"]["retryCount"], rem["status"]["systemID"]) == (1, w["sid"])
        # The MaasMachine deploys the same server under its own agent name; providerID unchanged.
        seen: list[str] = []

        def deployed_again() -> bool:
            seen.append(stack.machine_states()[w["sid"]]["status_name"])
            return seen[-1] == "Deployed"

        try:
            stack.wait_for(deployed_again, "redeployed", timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; MAAS states seen: {seen}") from exc
        mm = get(stack.kubectl, "maasmachine", w["mm"]["metadata"]["name"], "-n", stack.namespace)
        assert mm["spec"]["providerID"] == w["mm"]["spec"]["providerID"]
        assert stack.machine_states()[w["sid"]]["agent_name"] == w["mm"]["metadata"]["uid"]

        # Still NotReady: the remediation gives up, CAPI's MachineSet replaces the Machine.
        def old_gone() -> bool:
            m = get(stack.kubectl, "machine", w["name"], "-n", stack.namespace)
            return m is None or bool(m["metadata"].get("deletionTimestamp"))

        stack.wait_for(old_gone, "the Machine deleted by its MachineSet", timeout=120)
        t2 = time.monotonic()
        new = stack.wait_for(
            lambda: [m for m in stack.running_machines(cluster, f"{DEPLOYMENT_NAME_LABEL}={md}", 1) or []
                     if m["metadata"]["uid"] != w["uid"]] or None,
            "a replacement Machine Running", timeout=180,
        )  # fmt: skip
        t3 = time.monotonic()
        stack.wait_for(lambda: _healthy_count(stack, md), "the replacement healthy", timeout=60)
        print(f"[remediation] replacement: Machine deleted to a new one Running {t3 - t2:.1f}s, healthy "
              f"{time.monotonic() - t2:.1f}s; NotReady to replacement Running {t3 - t0:.1f}s")  # fmt: skip
    assert new[0]["metadata"]["name"] != w["name"]
    assert _power_offs(stack, w["sid"]) == 1
    assert allocations == ["acquire"]  # allocated once for the redeploy, never again after the restart
    assert stack.invariants() == []
    # markBrokenOnFailure: the server is out of the pool, not handed to the replacement.
    state = stack.machine_states()[w["sid"]]
    assert state["status_name"] == "Broken", state
    assert {"PowerCycled", "RedeployStarted", "Redeploying", "RemediationFailed", "MarkedBroken"} <= _events(
        stack, w["name"]
    )

    # MAAS keeps a server marked Broken while on (``Node.mark_broken``: release path, then Broken, owner kept
    # until a power-off is confirmed): held by our MAAS user for no MaasMachine, on purpose. Nothing else is.
    def others() -> list[str]:
        return [p for p in stack.leaks() if w["sid"] not in p]

    wait_for(lambda: others() == [], "no leaked MAAS machine", timeout=60)
    print(
        f"[remediation] the Broken server in the leak report: {[p for p in stack.leaks() if w['sid'] in p]}"
    )
