"""End-to-end fixtures: the real Cluster API core manager on the shared ``kube`` control plane.

- ``capi`` (session): :class:`capmaas_dev.devcluster.capi.CapiManager` started with ``--namespace`` on a
  namespace of its own (``capi.namespace``), webhooks limited to it, so the CAPI controllers never touch
  objects that other test packages create in ``kube`` while playing CAPI themselves. Its reconcile rate
  limit is off (``capi.UNTHROTTLED_FEATURE_GATES``): a reconcile an event asks for runs at once; a
  stand-alone control-plane Machine then needs ``e2e_support.nudge_machine`` to find its Node. Its log is
  kept under pytest's basetemp (``.../capi0/cluster-api.log``).
- ``capmaas_crds`` (session): capmaas' CRDs (``crds/``) applied server-side and Established.
- ``kubeadm_crds`` (session): the kubeadm bootstrap/control-plane CRDs of the same CAPI release, from the Go
  module cache (no kubeadm controllers run: only the schemas, for validating cluster templates).
- ``workload`` (session): :class:`capmaas_dev.devcluster.workload.WorkloadCluster` on ``workload_kube``.

- ``provider_stack`` (module): the real provider around ``capi`` and ``workload`` — see below.

Missing binaries fail (never skip) the tests, as in ``tests/conftest.py``.

``provider_stack``: capmaas end to end
--------------------------------------
Yields an ``e2e_support.ProviderStack`` (``from e2e_support import ProviderStack`` for the type) with:

- ``.sim``: the MAAS simulator (``capmaas_dev.demo.simthread.SimulatorThread``) serving on 127.0.0.1 from its
  own thread: 16 machines (2+ CPUs, 4+ GiB, ubuntu/noble) over zones az1..az3, deploy 0.5s, release 0.2s
  (MAAS's asynchronous steps, short: no test here is about their length; a module that is sets its own).
  Its ``on_deployed`` hook calls ``workload.deploy_hook()``: a deployed machine registers a Ready Node named
  after its hostname (without providerID: capmaas writes it, as on bare metal) in the workload stand-in, so
  CAPI Machines reach Running with a nodeRef. Hostnames are ``<stack.hostname_prefix>-NN``, unique per
  stack, so Nodes of different modules never collide. Read the simulator only through ``.sim.call(fn)`` (it
  runs on the simulator's loop) or the helpers: ``.invariants()`` (``[]`` = no double allocation etc.),
  ``.machine_states()`` (system_id -> status_name/owner/agent_name/hostname/zone), ``.allocations()``
  (agent_name = MaasMachine UID -> system IDs), ``.leaks()`` (``[]`` when MAAS allocations and the live
  MaasMachines of the namespace agree one to one), ``.ready_in_maas(system_ids)``.
- ``.operator``: ``capmaas run --namespace <capi.namespace> --no-leader-elect`` (``capmaas_dev.demo.stack.
  OperatorProcess``), default credentials from ``CAPMAAS_MAAS__ENDPOINT``/``CAPMAAS_MAAS__API_KEY``, fast
  polling (a module adds settings of its own with a dict ``E2E_OPERATOR_ENV``); its log is ``.operator.log``
  under pytest's basetemp. Started by ``e2e_support.start_operator``:
  health and metrics ports from ``free_port``, started again on fresh ones if another program took one
  before the operator bound it; a test that restarts it does the same. A failing test that uses the fixture
  gets the tails of the operator and CAPI manager logs in its report (``.logs()``).
- ``.namespace`` (= ``capi.namespace``), ``.kubectl``, ``.kubeconfig`` (management), ``.capi``, ``.workload``.
- ``.create_cluster(name, identity=False, endpoint_host=None, control_plane=True)``: Cluster + MaasCluster (+
  with ``identity``, a MAAS admin user named after the cluster and an identityRef Secret holding its key) +
  ``<name>-kubeconfig`` (via ``workload.publish_kubeconfig``) + ``<name>-userdata`` (bootstrap Secret for
  ``dataSecretName``); waits for the MaasCluster ready and the Cluster's infrastructureProvisioned. With
  ``control_plane`` (the default) it also creates a stand-alone control-plane Machine ``<name>-cp-0`` (+
  MaasMachine, provisioned by capmaas) and waits for the Cluster's ``ControlPlaneInitialized``: without it
  CAPI (v1.13) keeps every Machine's NodeReady/NodeHealthy Unknown, so Machines reach Running but never Ready,
  MachineDeployments never become available, rolling updates stall and MachineHealthChecks see no Nodes. Pass
  ``control_plane=False`` only to build a cluster the way something else initialises (and then set the
  condition's source yourself). Count the control-plane MaasMachine in ``.allocations()``; select workers with
  ``cluster.x-k8s.io/deployment-name``.
- ``.delete_cluster(name)`` deletes a Cluster and waits until CAPI and capmaas are done (MAAS machines
  released). ``.track_cluster(name)``: for a Cluster you built yourself, so module teardown deletes it too.
- ``.machines(cluster, selector)``, ``.maasmachines(...)``, ``.running_machines(cluster, selector, n)``,
  ``.wait_for(check, what, timeout=)`` (fails at once if the operator died), ``.stage(what)`` (a context
  manager that prints ``[e2e timing] what: Ns`` and records it for the terminal summary).

Isolation: the CAPI manager watches one namespace (``capi.namespace``), shared by every e2e module of the
worker. That is fine because everything is scoped by cluster name: use a unique one (``<prefix>-<random
hex>``) and select with the ``cluster.x-k8s.io/cluster-name`` label. The stack (simulator, operator) is per
*module*, so each module's simulator starts fresh and its invariants and allocations concern that module
only; teardown deletes the clusters it still knows (operator still running, so MAAS machines are released),
stops the operator, strips leftover capmaas finalizers and removes the module's Nodes from the workload
stand-in. The modules of a worker run one after another, so two operators never reconcile the namespace at
once.

With pytest-xdist (``make test``) the e2e modules are in two groups, ``e2e-1`` and ``e2e-2``
(``tests/suite_plan.py``, ``E2E``), each on one worker. Every session fixture here is per worker: its own
``kube``, CRDs, CAPI manager and namespace, workload stand-in, and basetemp for the logs; nothing is shared
between the groups but the machine's ports (hence ``start_operator``'s retry). A module stays in one group
(its module-scoped fixtures); a new module is named in ``suite_plan.E2E``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from capmaas_dev.devcluster import ControlPlane
    from capmaas_dev.devcluster.capi import CapiManager
    from capmaas_dev.devcluster.workload import WorkloadCluster

from e2e_support import TIMINGS, Kubectl, ProviderStack, start_operator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def capmaas_crds(kube: ControlPlane, kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--field-manager=capmaas-e2e", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "crds"))


@pytest.fixture(scope="session")
def kubeadm_crds(kube: ControlPlane, kubectl: Kubectl) -> None:
    from capmaas_dev.devcluster import MissingToolError
    from capmaas_dev.devcluster.capi import kubeadm_crd_dirs

    try:
        dirs = kubeadm_crd_dirs()
    except MissingToolError as exc:
        pytest.fail(f"e2e test needs the Cluster API module: {exc}", pytrace=False)
    for d in dirs:
        kubectl("apply", "--server-side", "--field-manager=capmaas-e2e", "-f", str(d))
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(d))


@pytest.fixture(scope="session")
def capi(
    kube: ControlPlane, kubectl: Kubectl, capmaas_crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CapiManager]:
    from capmaas_dev.devcluster import MissingToolError
    from capmaas_dev.devcluster.capi import UNTHROTTLED_FEATURE_GATES, CapiManager, CapiStartError

    namespace = f"capi-e2e-{secrets.token_hex(3)}"
    kubectl("create", "namespace", namespace)
    problem = None
    try:
        mgr = CapiManager.start(
            kube.kubeconfig,
            watch_namespace=namespace,
            workdir=tmp_path_factory.mktemp("capi"),
            feature_gates=UNTHROTTLED_FEATURE_GATES,  # no 1 s / 15 s deferral of a reconcile (its doc)
        )
    except MissingToolError as exc:
        problem = f"e2e test needs the Cluster API manager: {exc}"
    except CapiStartError as exc:
        problem = f"the Cluster API manager did not start: {exc}"
    if problem is not None:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        pytest.fail(problem, pytrace=False)
    with mgr:
        yield mgr
    kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def workload(workload_kube: ControlPlane) -> WorkloadCluster:
    from capmaas_dev.devcluster.workload import WorkloadCluster

    return WorkloadCluster(workload_kube.kubeconfig)


@pytest.fixture(scope="module")
def provider_stack(
    request: pytest.FixtureRequest,
    kube: ControlPlane,
    kubectl: Kubectl,
    capi: CapiManager,
    workload: WorkloadCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProviderStack]:
    """The MAAS simulator + ``capmaas run`` around the CAPI manager and the workload stand-in (module doc)."""
    import os
    import time

    from capmaas_dev.demo.simthread import SimulatorThread
    from capmaas_dev.demo.stack import OperatorProcess
    from capmaas_dev.simulator import Inventory, Timings

    assert capi.namespace is not None
    prefix = f"e{secrets.token_hex(2)}"
    # A module may bring its own inventory (a callable ``E2E_INVENTORY``), e.g. NICs on AUTO links.
    custom = getattr(request.module, "E2E_INVENTORY", None)
    inventory = custom() if custom is not None else Inventory.generate(machines=16, zones=3, seed=11)
    for n, m in enumerate(inventory.data["machines"]):
        m["hostname"] = f"{prefix}-{n:02d}"
    sim = SimulatorThread(inventory, Timings(deploy=0.5, release=0.2))
    hook = workload.deploy_hook()
    sim.sim.on_deployed = hook  # the kubelet's part: a Node per deployed machine
    workdir = tmp_path_factory.mktemp("provider")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPMAAS_")}
    env.update(  # the health and metrics ports: start_operator's
        KUBECONFIG=str(kube.kubeconfig),
        CAPMAAS_SERVER__BIND_ADDRESS="127.0.0.1",
        CAPMAAS_LOGGING__FORMAT="text",
        CAPMAAS_LOGGING__LEVEL="INFO",
        CAPMAAS_POLLING__FAST_INTERVAL="0.3",
        CAPMAAS_POLLING__IDLE_INTERVAL="2",
        CAPMAAS_MACHINE__RETRY_BASE_DELAY="0.5",
        CAPMAAS_MACHINE__RETRY_MAX_DELAY="3",
        CAPMAAS_MACHINE__NODE_RETRY="0.3",  # the workload Node is registered ~0.5 s after the deploy
        CAPMAAS_KUBE__SECRET_CACHE_TTL="1",
        CAPMAAS_KUBE__FIELD_VALIDATION="Strict",  # a wrong key in any write fails the test
    )
    # A module may set operator settings of its own (a dict ``E2E_OPERATOR_ENV``), e.g. a shorter wait that
    # its test does not exercise.
    env.update(getattr(request.module, "E2E_OPERATOR_ENV", {}))
    started = time.monotonic()
    sim.start()
    env.update(CAPMAAS_MAAS__ENDPOINT=sim.url, CAPMAAS_MAAS__API_KEY=sim.api_key)
    # One operator serves every e2e test, each in a namespace of its own: this management cluster has one
    # tenant, so every namespace may use the default credentials (the explicit setting an admin gives).
    env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES"] = "*"
    operator = OperatorProcess(env, capi.namespace, workdir / "operator.log")
    stack = ProviderStack(
        kubectl=kubectl,
        kubeconfig=kube.kubeconfig,
        capi=capi,
        workload=workload,
        sim=sim,
        operator=operator,
        hostname_prefix=prefix,
        test_id=lambda: _CURRENT.get("test", request.node.nodeid),
    )
    try:
        start_operator(operator)  # again on fresh ports if another process took one (its docstring)
        TIMINGS.append(
            (request.node.nodeid, "provider stack up (simulator + operator)", time.monotonic() - started)
        )
        yield stack
    finally:
        began = time.monotonic()
        _teardown(stack, kubectl)
        operator.stop()
        sim.stop()
        TIMINGS.append((request.node.nodeid, "provider stack teardown", time.monotonic() - began))


#: The test running now (its node id), for the stage timings.
_CURRENT: dict[str, str] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    _CURRENT["test"] = item.nodeid
    try:
        return (yield)
    finally:
        _CURRENT.pop("test", None)


#: How many of TIMINGS were already sent with a report (an xdist worker sends each one once).
_SENT = [0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A failing test that used ``provider_stack`` carries the operator's and CAPI's log tails; every report
    carries the stage timings recorded since the last one (xdist: the controller prints them)."""
    report: pytest.TestReport = yield
    stack = getattr(item, "funcargs", {}).get("provider_stack")
    if report.failed and isinstance(stack, ProviderStack):
        report.sections.append(("capmaas operator / cluster-api logs", stack.logs(80)))
    if len(TIMINGS) > _SENT[0]:
        report.user_properties.append(("e2e_timings", TIMINGS[_SENT[0] :]))
        _SENT[0] = len(TIMINGS)
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In xdist's controller (a report from a worker has ``node``), gather the workers' stage timings."""
    if getattr(report, "node", None) is None:
        return
    for key, value in report.user_properties:
        if key == "e2e_timings":
            TIMINGS.extend(tuple(entry) for entry in value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Every ``ProviderStack.stage`` timing of the run, for the issue's closing note."""
    if not TIMINGS:
        return
    terminalreporter.section("e2e stage timings")
    for test, stage, seconds in TIMINGS:
        terminalreporter.write_line(f"{seconds:7.1f}s  {test.split('::')[-1]}: {stage}")


def _teardown(stack: ProviderStack, kubectl: Kubectl) -> None:
    """Delete what the module left (with the operator still running), then make sure nothing blocks the
    namespace and no Node of this stack stays in the workload stand-in."""
    ns = stack.namespace
    for name in list(stack.clusters):
        try:
            stack.delete_cluster(name, timeout=90)
        except AssertionError as exc:
            print(f"teardown: {exc}\n{stack.logs()}")
    unblock = '{"metadata":{"finalizers":null}}'
    for name in stack.created:
        for plural in ("maasmachines", "maasclusters"):
            sel = f"-l=cluster.x-k8s.io/cluster-name={name}"
            out = kubectl("get", plural, "-n", ns, sel, "-o", "name", check=False).stdout or ""
            for obj in out.split():
                kubectl("patch", obj, "-n", ns, "--type=merge", "-p", unblock, check=False)
        kubectl("delete", "cluster", name, "-n", ns, "--wait=false", "--ignore-not-found", check=False)
    for node in stack.workload.nodes():
        name = node["metadata"]["name"]
        if name.startswith(f"{stack.hostname_prefix}-"):
            stack.workload.remove_node(name)
