"""Bare-metal MaasMachine reconciliation: wait → allocate (idempotent) → deploy → watch → Ready → release.

Crash safety of allocation (no machine is ever allocated twice or leaked):

1. Before ``allocate`` the annotation ``…/allocating`` is written (a Kubernetes write, no MAAS request).
2. ``allocate`` passes the MaasMachine UID as MAAS ``agent_name``.
3. The returned system ID goes to ``spec.systemID``/``spec.providerID`` at once (the annotation goes away).

A pass that finds ``…/allocating`` but no system ID (a crash between 1 and 3) looks the UID up in MAAS and
adopts what it finds instead of allocating again; without the annotation no allocation can have happened, so
the happy path spends no lookup request. Giving a failed machine back has its own crash window (released,
then ``spec.systemID`` cleared), closed the same way: see :mod:`capmaas.reconcilers.machine_replace`.
Everything after allocation reads machine state from the shared poller (:mod:`capmaas.reconcilers.maasgw`),
never with a GET of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from capmaas import maas, placement
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import lxd, lxd_placer, machine_delete, machine_replace
from capmaas.reconcilers.credentials import connect, maas_failure
from capmaas.reconcilers.errors import ReconcileError, TerminalError, TransientError
from capmaas.reconcilers.machine_facts import (
    _bootstrap_secret,
    _infra_provisioned,
    addresses,
    describe,
    detect_format,
    distro_series,
    provider_id,
)
from capmaas.reconcilers.ports import (
    MAASMACHINE,
    Body,
    KubePort,
    MaasConnector,
    MaasCredentials,
    MaasPort,
    NodePatchResult,
    NullRecorder,
    Recorder,
)
from capmaas.reconcilers.scope import (
    CLUSTER_NAME_LABEL,
    ConditionStatus,
    ObjectScope,
    Requeue,
    is_paused,
    owner_ref,
)
from capmaas.reconcilers.spread import ZoneSpread

__all__ = [  # the LXD path reuses the user-data helpers through this module
    "ALLOCATING",
    "FINALIZER",
    "MachineReconciler",
    "MachineScope",
    "MachineSettings",
    "_bootstrap_secret",
    "detect_format",
    "distro_series",
]

FINALIZER = "maasmachine.infrastructure.cluster.x-k8s.io"
ALLOCATING = "allocating"
DEPLOY_STARTED = "deploy-started"


@dataclass(frozen=True)
class MachineSettings:
    """Tunables (from :class:`capmaas.config.MachineSection`); seconds unless stated."""

    deploy_timeout: float = 3600.0
    max_deploy_attempts: int = 3
    retry_base: float = 5.0
    retry_max: float = 300.0
    power_on_retry: float = 60.0
    node_retry: float = 30.0


class MachineScope(ObjectScope):
    """The MaasMachine plus its owner Machine, the Cluster and the MaasCluster (from the caches)."""

    machine: Body | None = None
    cluster: Body | None = None
    maascluster: Body | None = None
    #: ``deploy-started`` was written with the allocation in this pass (the deploy follows at once).
    deploy_stamped: bool = False

    @property
    def cluster_name(self) -> str | None:
        if self.machine is not None:
            name = (self.machine.get("spec") or {}).get("clusterName")
            if name:
                return str(name)
        return self.labels.get(CLUSTER_NAME_LABEL)

    def set_condition(
        self, type_: str, status: bool | ConditionStatus, reason: str, message: str = ""
    ) -> None:
        super().set_condition(type_, status, reason, message)
        if type_ == C.MACHINE_PROVISIONED_CONDITION and status not in (True, "True") and not self.deleting:
            # Ready summarises: while not provisioned it says the current step, not an earlier one's message.
            super().set_condition(C.READY_CONDITION, status, reason, message)

    def wait(self, reason: str, message: str) -> None:
        """Not provisioned yet, for an outside reason: both conditions say which. A provisioned machine stays
        so: an owner missing from the cache or a failed MAAS call says nothing about it (no stale message)."""
        provisioned = (self.condition(C.MACHINE_PROVISIONED_CONDITION) or {}).get("status") == "True"
        if not (self.status.get("ready") and provisioned):
            self.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, message)


class MachineReconciler:
    """Reconciles one MaasMachine per call; holds only soft, rebuildable memory between calls."""

    def __init__(
        self,
        kube: KubePort,
        connector: MaasConnector,
        *,
        default_credentials: MaasCredentials | None,
        settings: MachineSettings | None = None,
        recorder: Recorder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.connector = connector
        self.default_credentials = default_credentials
        self.settings = settings or MachineSettings()
        self.recorder: Recorder = recorder or NullRecorder()
        self.clock = clock
        self._power_on_sent: dict[str, float] = {}
        self._released: set[str] = set()
        self._node_done: set[str] = set()
        self.spread = ZoneSpread(clock)
        self.lxd = lxd_placer.LxdPlacer()  # reservation book + shared VM-host listing per endpoint

    async def reconcile(self, body: Body) -> Requeue:
        scope = MachineScope(self.kube, MAASMACHINE, body)
        try:
            if scope.deleting and lxd.is_lxd(scope.spec):
                return await lxd.reconcile_delete(self, scope)
            if scope.deleting:
                return await machine_delete.reconcile_delete(self, scope)
            return await self._normal(scope)
        except ReconcileError as exc:
            if not scope.deleting:
                scope.wait(exc.reason, exc.message)
            raise
        finally:
            await scope.close()

    # --- loading -----------------------------------------------------------------------------------------
    def load(self, scope: MachineScope) -> str | None:
        """Fill the scope from the caches; returns why it cannot continue (a waiting reason), or None."""
        ref = owner_ref(scope.body, "Machine")
        if ref is None:
            scope.wait(C.WAITING_FOR_MACHINE_OWNER_REASON, "waiting for Cluster API to set the Machine owner")
            return C.WAITING_FOR_MACHINE_OWNER_REASON
        scope.machine = self.kube.get_machine(scope.namespace, str(ref.get("name")))
        if scope.machine is None:
            scope.wait(C.WAITING_FOR_MACHINE_OWNER_REASON, f"owner Machine {ref.get('name')} not found yet")
            return C.WAITING_FOR_MACHINE_OWNER_REASON
        name = scope.cluster_name
        scope.cluster = self.kube.get_cluster(scope.namespace, name) if name else None
        if scope.cluster is None:
            scope.wait(C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON, f"Cluster {name} not found yet")
            return C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON
        infra = (scope.cluster.get("spec") or {}).get("infrastructureRef") or {}
        if infra.get("name"):
            scope.maascluster = self.kube.get_maascluster(scope.namespace, str(infra["name"]))
        return None

    async def session(self, scope: MachineScope) -> MaasPort:
        if scope.maascluster is None and scope.deleting and scope.cluster_name:
            # The Cluster may already be gone (namespace deletion): the MaasCluster conventionally shares its
            # name, and without one the operator's default credentials still release the machine.
            scope.maascluster = self.kube.get_maascluster(scope.namespace, scope.cluster_name)
            if scope.maascluster is None and self.default_credentials is not None:
                try:
                    return await self.connector.connect(self.default_credentials)
                except maas_errors.MaasError as exc:
                    raise maas_failure(exc, self.default_credentials, "connecting") from exc
        if scope.maascluster is None:
            raise TransientError(
                C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON,
                "the Cluster's MaasCluster is not found",
                delay=15,
            )
        return await connect(self.kube, self.connector, scope.maascluster, self.default_credentials)

    # --- normal ------------------------------------------------------------------------------------------
    async def _normal(self, scope: MachineScope) -> Requeue:
        if self.load(scope) is not None:
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        scope.add_finalizer(FINALIZER)
        assert scope.cluster is not None
        assert scope.machine is not None
        sid = scope.spec.get("systemID")
        if not sid:
            if not _infra_provisioned(scope.cluster):
                scope.wait(
                    C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON, "Cluster infrastructure not provisioned"
                )
                return Requeue()
            if not _bootstrap_secret(scope.machine):
                scope.wait(
                    C.WAITING_FOR_BOOTSTRAP_DATA_REASON, "Machine.spec.bootstrap.dataSecretName not set"
                )
                return Requeue()
        port = await self.session(scope)
        if lxd.is_lxd(scope.spec):
            return await lxd.reconcile(self, scope, port)
        if sid and machine_replace.interrupted(scope, sid):
            if await machine_replace.still_ours(scope, port, sid) is None:
                machine_replace.forget(scope, port, sid)
                msg = f"{sid} was given back before the last pass ended; allocating another"
                scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_NOT_FOUND_REASON, msg)
                await scope.flush()
                return Requeue(0.0)
            scope.set_annotation(machine_replace.REPLACING, None)  # still ours: decide again below
        if not sid:
            sid = await self._allocate(scope, port)
        port.watch(sid, scope.key)
        m = port.snapshot(sid)
        if m is None:
            if port.is_gone(sid):
                return await self._replace(scope, port, sid, C.MACHINE_NOT_FOUND_REASON, "gone from MAAS")
            scope.set_condition(
                C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_ALLOCATED_REASON, f"{sid}: waiting for MAAS"
            )
            return Requeue()
        return await self._follow(scope, port, m)

    async def _allocate(self, scope: MachineScope, port: MaasPort) -> str:
        agent = machine_replace.agent_name(scope)
        if scope.annotation(ALLOCATING):
            try:
                found = await port.find_by_agent(agent)
            except maas_errors.MaasError as exc:
                raise maas_failure(exc, None, "looking up an earlier allocation") from exc
            if found:
                m = found[0]
                scope.event(
                    "Normal", "MachineAdopted", f"adopted MAAS machine {m.system_id} allocated earlier"
                )
                self._record_allocation(scope, m)
                await scope.flush()
                return m.system_id
        attempts = int(scope.status.get("attempts") or 0)
        if attempts >= self.settings.max_deploy_attempts:
            raise TerminalError(
                C.RETRIES_EXHAUSTED_REASON, f"{attempts} MAAS machines tried; delete the Machine to try again"
            )
        constraints, chosen_zone = self._constraints(scope)
        scope.set_annotation(ALLOCATING, str(int(self.clock())))
        scope.set_annotation(lxd.AGENT_NAME, agent)  # same patch: survives a move with the allocate in doubt
        await scope.flush()
        started = self.clock()
        try:
            if chosen_zone:
                m, constraints = await self.spread.allocate(
                    port, constraints, agent_name=agent, comment=f"capmaas {scope.key}"
                )
            else:
                m = await port.allocate(constraints, agent_name=agent, comment=f"capmaas {scope.key}")
        except maas_errors.NoMachineAvailableError as exc:
            scope.set_annotation(ALLOCATING, None)
            raise TransientError(
                C.NO_MACHINE_AVAILABLE_REASON,
                f"no Ready MAAS machine matches {describe(constraints)}",
                delay=self._backoff(scope),
            ) from exc
        except maas_errors.MaasError as exc:
            # The allocate may or may not have happened: keep the annotation, so the next pass looks first.
            raise maas_failure(exc, None, "allocating") from exc
        self.recorder.allocation_duration(self.clock() - started)
        scope.status["attempts"] = attempts + 1
        self._record_allocation(scope, m)
        if m.status == maas.NodeStatus.ALLOCATED:
            # The deploy follows in this pass: stamping it now saves a metadata patch per machine (the deploy
            # timeout then also counts the few milliseconds of the deploy request).
            scope.set_annotation(DEPLOY_STARTED, str(self.clock()))
            scope.deploy_stamped = True
        scope.event(
            "Normal", "MachineAllocated", f"allocated MAAS machine {m.system_id} in zone {m.zone.name}"
        )
        await scope.flush()
        return m.system_id

    def _record_allocation(self, scope: MachineScope, m: maas.Machine) -> None:
        scope.set_spec(systemID=m.system_id, providerID=provider_id(m.zone.name, m.system_id))
        scope.set_spec(failureDomain=m.zone.name)
        scope.set_annotation(ALLOCATING, None)
        scope.set_annotation(DEPLOY_STARTED, None)
        scope.set_annotation("failures", None)  # allocation backoff: over

    def _constraints(self, scope: MachineScope) -> tuple[maas.AllocateConstraints, bool]:
        spec = scope.spec
        machine_spec = (scope.machine or {}).get("spec") or {}
        zone = spec.get("failureDomain") or machine_spec.get("failureDomain")
        chosen = False
        if not zone and scope.maascluster is not None:
            domains = [
                str(d["name"])
                for d in ((scope.maascluster.get("status") or {}).get("failureDomains") or ())
                if d.get("name")
            ]
            now = self.clock()
            wet = [d for d in domains if not self.spread.is_dry(d, now)]
            if wet:
                domains = wet
            if domains:
                counts: dict[str, int] = {}
                for sibling in self.kube.list_maasmachines(scope.namespace, scope.cluster_name or ""):
                    uid = str(sibling.get("metadata", {}).get("uid", ""))
                    z = (sibling.get("spec") or {}).get("failureDomain") or self.spread.chosen_zone(uid)
                    if z and uid != scope.uid:
                        counts[z] = counts.get(z, 0) + 1
                zone = placement.choose_zone(counts, domains, machine=scope.name)
                self.spread.remember_choice(scope.uid, zone)
                chosen = True
        storage = f"root:{int(spec['minDiskSize'])}" if spec.get("minDiskSize") else None
        return (
            maas.AllocateConstraints(
                cpu_count=spec.get("minCPU"),
                mem=spec.get("minMemory"),
                tags=tuple(spec.get("tags") or ()),
                zone=zone,
                pool=spec.get("resourcePool"),
                storage=storage,
                # A composed VM is Ready between commissioning and its own allocate: never take it here.
                not_pod_type=(lxd.LXD,),
            ),
            chosen,
        )

    def _backoff(self, scope: MachineScope) -> float:
        failures = int(scope.annotation("failures") or 0) + 1
        scope.set_annotation("failures", str(failures))
        return float(min(self.settings.retry_max, self.settings.retry_base * 2 ** (failures - 1)))

    # --- following MAAS ----------------------------------------------------------------------------------
    async def _follow(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        S = maas.NodeStatus
        scope.status.update(
            machineState=m.status_name or m.status.name,
            machinePowered=m.power_state == maas.PowerState.ON,
            hostname=m.hostname,
            failureDomain=m.zone.name,
            provisioningMode="bare-metal",
        )
        if m.status == S.ALLOCATED:
            return await self._deploy(scope, port, m)
        if m.status == S.DEPLOYING:
            started = float(scope.annotation(DEPLOY_STARTED) or self.clock())
            if self.clock() - started > self.settings.deploy_timeout:
                return await self._replace(
                    scope, port, m.system_id, C.DEPLOYMENT_TIMED_OUT_REASON,
                    f"still Deploying after {int(self.settings.deploy_timeout)}s",
                )  # fmt: skip
            scope.set_condition(
                C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{m.system_id} deploying"
            )
            scope.set_condition(
                C.READY_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{m.system_id} deploying"
            )
            return Requeue(max(1.0, started + self.settings.deploy_timeout - self.clock()))
        if m.status == S.DEPLOYED:
            return await self._deployed(scope, port, m)
        if m.status == S.FAILED_DEPLOYMENT:
            return await self._replace(
                scope,
                port,
                m.system_id,
                C.DEPLOYMENT_FAILED_REASON,
                m.error_description or "Failed deployment",
            )
        if m.status == S.BROKEN:
            return await self._replace(
                scope, port, m.system_id, C.MACHINE_BROKEN_REASON, m.error_description or "Broken"
            )
        if m.status in (S.READY, S.NEW, S.RELEASING, S.DISK_ERASING) or m.owner is None:
            # Released behind our back: it is no longer ours. Allocate another.
            return await self._replace(
                scope, port, m.system_id, C.MACHINE_NOT_FOUND_REASON, "released in MAAS"
            )
        scope.set_condition(
            C.MACHINE_PROVISIONED_CONDITION,
            "Unknown",
            C.MACHINE_DEPLOYING_REASON,
            f"MAAS state {m.status_name}",
        )
        return Requeue(self.settings.retry_base * 6)

    async def _deploy(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        assert scope.machine is not None
        secret_name = _bootstrap_secret(scope.machine)
        if not secret_name:
            scope.wait(C.WAITING_FOR_BOOTSTRAP_DATA_REASON, "Machine.spec.bootstrap.dataSecretName not set")
            return Requeue()
        data = await self.kube.read_secret_fresh(scope.namespace, secret_name)
        if data is None or not data.get("value"):
            raise TransientError(
                C.WAITING_FOR_BOOTSTRAP_DATA_REASON,
                f"bootstrap Secret {secret_name} is missing or has no 'value'",
                delay=10,
            )
        fmt = detect_format(data)
        try:
            new = await port.deploy(
                m.system_id,
                user_data=data["value"],
                distro_series=distro_series(scope.spec.get("image")),
                hwe_kernel=scope.spec.get("hweKernel"),
                ephemeral_deploy=bool(scope.spec.get("deployInMemory")),
                comment=f"capmaas {scope.key}",
                register_vmhost=bool(scope.spec.get("registerVMHost")),
            )
        except maas_errors.ConflictError as exc:
            raise TransientError(C.MACHINE_DEPLOYING_REASON, f"deploy refused: {exc}", delay=5) from exc
        except maas_errors.BadRequestError as exc:
            return await self._replace(scope, port, m.system_id, C.DEPLOYMENT_FAILED_REASON, f"{exc}")
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, "deploying") from exc
        if not scope.deploy_stamped:
            scope.set_annotation(DEPLOY_STARTED, str(self.clock()))
        scope.set_annotation("failures", None)
        deploying = f"deploying {m.system_id} with {fmt} user data"
        allocated = scope.take_event("MachineAllocated")  # same pass: one Event says both
        scope.event("Normal", "MachineDeploying", f"{allocated}; {deploying}" if allocated else deploying)
        scope.set_condition(
            C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{m.system_id} deploying"
        )
        scope.set_condition(C.READY_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{m.system_id} deploying")
        scope.status["machineState"] = new.status_name or new.status.name
        return Requeue(self.settings.deploy_timeout)

    async def _deployed(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        if m.power_state != maas.PowerState.ON:
            reason, msg = (
                C.MACHINE_POWERED_OFF_REASON,
                f"{m.system_id} is Deployed but powered {m.power_state}",
            )
            scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, msg)
            scope.set_condition(C.READY_CONDITION, False, reason, msg)
            last = self._power_on_sent.get(m.system_id, 0.0)
            if self.clock() - last >= self.settings.power_on_retry:
                try:
                    await port.power_on(
                        m.system_id, comment=f"capmaas {scope.key}: powered off while deployed"
                    )
                except maas_errors.MaasError as exc:
                    raise maas_failure(exc, None, "powering on") from exc
                self._power_on_sent[m.system_id] = self.clock()
                scope.event("Warning", "MachinePoweredOff", f"{msg}; power on requested")
            return Requeue(self.settings.power_on_retry)
        self._power_on_sent.pop(m.system_id, None)
        if not scope.status.get("ready"):
            started = scope.annotation(DEPLOY_STARTED)
            if started:
                self.recorder.deploy_duration(self.clock() - float(started))
            scope.event(
                "Normal", "MachineDeployed", f"{m.system_id} ({m.hostname}) is deployed and powered on"
            )
        scope.status["ready"] = True
        scope.status["initialization"] = {"provisioned": True}
        scope.status["addresses"] = addresses(m)
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, True, C.PROVISIONED_REASON, "")
        scope.set_condition(C.READY_CONDITION, True, C.READY_REASON, "")
        # Ready is written now, before the Node step: that step reads the kubeconfig Secret (a queued GET
        # behind every starting machine's writes in a burst) and may dial a slow workload apiserver, and
        # CAPI is waiting on Ready, not on the Node's providerID (readiness lag). close() may run again.
        await scope.close()
        return await self._node(scope)

    async def _node(self, scope: MachineScope) -> Requeue:
        """Put our providerID on the workload Node (no cloud provider does it on bare metal)."""
        pid = str(scope.spec.get("providerID") or "")
        done_key = f"{scope.uid}/{pid}"
        name = scope.cluster_name
        if done_key in self._node_done or not name or not scope.status.get("hostname"):
            return Requeue()
        secret = await self.kube.get_secret(scope.namespace, f"{name}-kubeconfig")
        if secret is None or not secret.get("value"):
            return Requeue(self.settings.node_retry * 2)
        result, current = await self.kube.set_node_provider_id(
            secret["value"], str(scope.status["hostname"]), pid
        )
        if result is NodePatchResult.REJECTED:  # a tenant's kubeconfig we will not use: say which field
            scope.set_condition(C.NODE_PROVIDER_ID_CONDITION, False, C.KUBECONFIG_REJECTED_REASON, current)
            return Requeue(self.settings.node_retry * 2)
        if result in (NodePatchResult.PATCHED, NodePatchResult.ALREADY_SET):
            self._node_done.add(done_key)
            if scope.condition(C.NODE_PROVIDER_ID_CONDITION) is not None:
                scope.set_condition(C.NODE_PROVIDER_ID_CONDITION, True, C.NODE_PROVIDER_ID_SET_REASON, "")
            if result is NodePatchResult.PATCHED:
                scope.event(
                    "Normal", "NodeProviderIDSet", f"Node {scope.status['hostname']} providerID={pid}"
                )
            return Requeue()
        if result is NodePatchResult.CONFLICT:
            self._node_done.add(done_key)
            # Never overwritten (the apiserver would refuse anyway): another provider or a person owns it.
            scope.event(
                "Warning",
                "NodeProviderIDConflict",
                f"Node {scope.status['hostname']} already has providerID {current}, not ours ({pid}); "
                "left unchanged: check that this Node is the MAAS machine",
            )
            return Requeue()
        return Requeue(self.settings.node_retry)

    async def _replace(self, scope: MachineScope, port: MaasPort, sid: str, reason: str, why: str) -> Requeue:
        return await machine_replace.replace(self, scope, port, sid, reason=reason, why=why)
