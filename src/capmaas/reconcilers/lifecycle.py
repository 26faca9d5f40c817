"""One machine lifecycle, whatever provisions the machine: the steps a bare-metal machine and an LXD VM share.

A :class:`Provisioner` (:mod:`~capmaas.reconcilers.baremetal`, :mod:`~capmaas.reconcilers.lxd`) gets a MAAS
machine that is ours (``acquire``), handles the states only its mode has (``follow``), gives a failed one back
(``give_back``) and deletes (``delete``). Everything else happens here, once: deploying with the bootstrap
data, the deploy timeout, Deployed (powered on, addresses, Ready), the workload Node's providerID, and the
end of a deletion. Each provisioner keeps its own state; this module keeps the shared memory (power-on
requests, Nodes already patched, and the :class:`~capmaas.reconcilers.ownership.Ownership` it hands to the
provisioners) and the settings. A provisioner is a strategy: it is given what it needs at construction
(:class:`Strategy`) and never calls back into the lifecycle; it answers :class:`Finished` when a deletion
is done, or hands on a machine for the shared steps to deploy.

Everything after acquisition reads machine state from the shared poller behind the
:class:`~capmaas.reconcilers.ports.MaasPort`, never with a GET of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from capmaas import backoff, maas
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts, vmhost
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import (
    CONTROL_PLANE_LABEL,
    DEPLOY_REFUSED,
    DEPLOY_STARTED,
    FAILURES,
    MACHINE_FINALIZER,
)
from capmaas.reconcilers.ownership import Mode, Ownership
from capmaas.reconcilers.ports import KubePort, MaasPort, NodePatchResult, Recorder
from capmaas.reconcilers.scope import MachineScope, Requeue
from capmaas.reconcilers.tenancy import Tenancy

#: Deploy form errors about the machine, not our request ("Node must be configured to use a network"): that
#: machine is marked broken and another one tried. Any other field names our request (image, kernel, user
#: data): no machine would take it.
MACHINE_REFUSAL_FIELDS = frozenset({"network"})
#: Form fields whose refusal is a wrong image or kernel (reason InvalidImage).
IMAGE_FIELDS = frozenset({"distro_series", "hwe_kernel", "osystem"})


@dataclass(frozen=True)
class MachineSettings:
    """Tunables (from :class:`capmaas.config.MachineSection`); seconds unless stated."""

    deploy_timeout: float = 3600.0
    max_deploy_attempts: int = 3
    retry_base: float = 5.0
    retry_max: float = 300.0
    power_on_retry: float = 60.0
    node_retry: float = 30.0
    #: Node reuse (:mod:`capmaas.reconcilers.reuse`): how long a new MaasMachine of a ``nodeReuse`` template
    #: waits for a server its owner released, and how long such a record lives.
    reuse_wait: float = 60.0
    reuse_ttl: float = 1800.0
    #: How long after an allocate was first sent a lookup by agent name that finds nothing still proves
    #: nothing (:func:`capmaas.maas.in_doubt_window` of the operator's MAAS client settings).
    allocate_in_doubt: float = maas.in_doubt_window(30.0, maas.RetryPolicy())

    def backoff(self, attempt: int, *, cap: float | None = None) -> float:
        """The delay before retry ``attempt`` (0-based) of a reconcile step (full jitter)."""
        limit = self.retry_max if cap is None else min(cap, self.retry_max)
        return backoff.full_jitter(attempt, base=self.retry_base, cap=limit)


@dataclass(frozen=True)
class Finished(Requeue):
    """A provisioner's deletion is done: nothing of ours is left in MAAS (the lifecycle drops the
    finalizer)."""


class Provisioner(Mode, Protocol):
    """How one ``provisioningMode`` gets, keeps and gives back a MAAS machine (CAPA's machine service): a
    strategy the :class:`Lifecycle` drives; it never calls back into the lifecycle."""

    @property
    def mode(self) -> str:
        """The ``spec.provisioningMode`` this provisioner serves."""
        ...

    @property
    def kept(self) -> str:
        """What lives on in MAAS when clusterctl moves the object away ("MAAS machine", "VM")."""
        ...

    def provider_id(self, zone: str, system_id: str) -> str:
        """The machine's ``spec.providerID`` (and the workload Node's)."""
        ...

    async def acquire(self, scope: MachineScope, port: MaasPort) -> str | Requeue:
        """The system ID of the MAAS machine that is ours (allocating, composing or adopting one), or the end
        of this pass."""
        ...

    async def unseen(self, scope: MachineScope, port: MaasPort, system_id: str) -> Requeue:
        """The poller has no state for ``system_id`` yet (or reports it gone)."""
        ...

    async def follow(
        self, scope: MachineScope, port: MaasPort, m: maas.Machine
    ) -> Requeue | maas.Machine | None:
        """The mode's own status fields and states; None hands ``m`` to the shared lifecycle, a machine hands
        on that one (MAAS's answer to the mode's own last request, e.g. the VM just allocated)."""
        ...

    def deploying(self, scope: MachineScope, system_id: str) -> None:
        """The mode's conditions while MAAS deploys (MachineProvisioned is the lifecycle's)."""
        ...

    def deployed(self, scope: MachineScope, m: maas.Machine) -> None:
        """The mode's conditions once MAAS reports Deployed."""
        ...

    def refusal(self, exc: maas_errors.MaasError) -> str:
        """MAAS's refusal of a deploy, as the reason to give the machine back."""
        ...

    async def give_back(
        self, scope: MachineScope, port: MaasPort, system_id: str, reason: str, why: str
    ) -> Requeue:
        """Give this machine up (released, broken or decomposed); the next pass acquires another."""
        ...

    async def delete(self, scope: MachineScope, port: MaasPort) -> Requeue:
        """Give everything of ours back to MAAS; :class:`Finished` once MAAS confirms."""
        ...


class Strategy:
    """What every provisioner is given, never the lifecycle itself: the Kubernetes port, the ownership
    bookkeeping (the lifecycle's :class:`Ownership`), the settings, the metrics recorder, the wall
    clock."""

    def __init__(
        self,
        kube: KubePort,
        ownership: Ownership,
        *,
        settings: MachineSettings,
        recorder: Recorder,
        clock: Callable[[], float],
    ) -> None:
        self.kube, self.ownership, self.settings = kube, ownership, settings
        self.recorder, self.clock = recorder, clock


class Lifecycle:
    """The shared steps, with the soft memory they need (rebuilt after a restart at one request's cost).

    ``clock`` is wall-clock time (epoch seconds): the times it stamps into annotations (``…/allocating``,
    ``…/deploy-started``) are read by whichever process runs the next pass."""

    def __init__(
        self,
        kube: KubePort,
        *,
        settings: MachineSettings,
        recorder: Recorder,
        clock: Callable[[], float],
        tenancy: Tenancy | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.tenancy = tenancy or Tenancy()
        #: MaasMachine UID -> system ID whose registered VM host carries the namespace's tag (soft memory).
        self.vm_hosts_tagged: dict[str, str] = {}
        self.recorder = recorder
        self.clock = clock
        self._power_on_sent: dict[str, float] = {}
        # Per MaasMachine UID, forgotten when its deletion finishes (bounded by the objects alive, not by
        # every object ever seen): the providerID already on its Node.
        self._node_done: dict[str, str] = {}
        #: The MAAS system ID this process has seen MAAS hold under each object's agent name (the ownership
        #: test, once per machine held), shared with the provisioners, which get it at construction.
        self.ownership = Ownership()

    @property
    def verified(self) -> dict[str, tuple[str, str]]:
        """UID -> (identity fingerprint, system ID) proven ours (:class:`Ownership`)."""
        return self.ownership.verified

    # --- normal ------------------------------------------------------------------------------------------
    async def run(self, p: Provisioner, scope: MachineScope, port: MaasPort) -> Requeue:
        """One pass of a MaasMachine whose owner, cluster and bootstrap data are in place."""
        refused = scope.annotation(DEPLOY_REFUSED)
        if refused and not scope.want.system_id:
            if refused == facts.deploy_inputs(scope.want, scope.machine):
                return Requeue()  # the condition says why; a spec change wakes this object
            scope.set_annotation(DEPLOY_REFUSED, None)
        vmhost.check_registration(scope, self.tenancy)
        got = await p.acquire(scope, port)
        if isinstance(got, Requeue):
            return got
        sid = got
        port.watch(sid, scope.key)
        m = port.snapshot(sid)
        if m is None:
            return await p.unseen(scope, port, sid)
        scope.set_status(
            machine_state=m.status_name or m.status.name,
            machine_powered=facts.powered(m),
            hostname=m.hostname,
            failure_domain=m.zone.name,
        )
        if CONTROL_PLANE_LABEL in scope.labels:
            # A control-plane machine's addresses every pass, from the machine held now: MAAS assigns the AUTO
            # IP seconds after the deploy answer, and this write wakes the MaasCluster, which puts it in the
            # DNS record then (not at Ready); a machine given back for another leaves no address of its
            # predecessor behind. Workers publish theirs at Deployed (one status write fewer each).
            scope.set_status(addresses=facts.addresses(m))
        done = await p.follow(scope, port, m)
        if isinstance(done, Requeue):
            return done
        return await self.follow(p, scope, port, m if done is None else done)

    async def follow(self, p: Provisioner, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        """Allocated → deploy; Deploying → wait (give it back after the deploy timeout); Deployed → Ready."""
        S = maas.NodeStatus
        if m.status == S.ALLOCATED:
            return await self.deploy(p, scope, port, m)
        if m.status == S.DEPLOYING:
            started = float(scope.annotation(DEPLOY_STARTED) or self.clock())
            timeout = self.settings.deploy_timeout
            if self.clock() - started > timeout:
                return await p.give_back(
                    scope, port, m.system_id, C.DEPLOYMENT_TIMED_OUT_REASON,
                    f"still Deploying after {int(timeout)}s",
                )  # fmt: skip
            self._deploying(p, scope, m.system_id)
            if scope.status_changes() <= {"machinePowered"}:
                scope.hold_status()  # MAAS powers it on and off as it installs: written with what follows
            return Requeue(max(1.0, started + timeout - self.clock()))
        if m.status == S.DEPLOYED:
            p.deployed(scope, m)
            done = await self.deployed(p, scope, port, m)
            later = await vmhost.tag_registered(scope, port, m, self.vm_hosts_tagged)
            if later is not None and (done.after is None or later < done.after):
                return Requeue(later)
            return done
        scope.set_condition(
            C.MACHINE_PROVISIONED_CONDITION,
            "Unknown",
            C.MACHINE_DEPLOYING_REASON,
            f"MAAS state {m.status_name}",
        )
        return Requeue(self.settings.retry_base * 6)

    def _deploying(self, p: Provisioner, scope: MachineScope, sid: str) -> None:
        p.deploying(scope, sid)
        scope.set_condition(
            C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{sid} deploying"
        )

    async def deploy(self, p: Provisioner, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        """Deploy ``m`` with the Machine's bootstrap data (read fresh, once)."""
        assert scope.machine is not None
        secret_name = scope.machine.bootstrap_secret
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
        fmt = facts.detect_format(data)
        spec = scope.want
        if not await self.ownership.confirm(p, scope, port, m.system_id, "deploying it"):
            return Requeue(0.0)
        request = maas.DeployRequest(
            user_data=data["value"],
            distro_series=facts.distro_series(spec.image),
            hwe_kernel=spec.hwe_kernel,
            ephemeral_deploy=bool(spec.deploy_in_memory),
            comment=f"capmaas {scope.key}",
            register_vmhost=facts.registers_vm_host(spec, scope.maascluster),
        )
        with maas_step(f"deploying {p.describe(m.system_id)}"):
            try:
                new = await port.deploy(m.system_id, request)
            except maas_errors.ConflictError as exc:
                raise TransientError(C.MACHINE_DEPLOYING_REASON, f"deploy refused: {exc}", delay=5) from exc
            except maas_errors.BadRequestError as exc:
                return await self.refused(p, scope, port, m.system_id, exc)
        if not scope.deploy_stamped:
            scope.set_annotation(DEPLOY_STARTED, str(self.clock()))
        scope.set_annotation(FAILURES, None)
        deploying = f"deploying {p.describe(m.system_id)} with {fmt} user data"
        allocated = scope.take_event("MachineAllocated")  # same pass: one Event says both
        scope.event("Normal", "MachineDeploying", f"{allocated}; {deploying}" if allocated else deploying)
        self._deploying(p, scope, m.system_id)
        scope.set_status(machine_state=new.status_name or new.status.name)
        return Requeue(self.settings.deploy_timeout)

    async def refused(
        self, p: Provisioner, scope: MachineScope, port: MaasPort, sid: str, exc: maas_errors.BadRequestError
    ) -> Requeue:
        """MAAS answered the deploy with 400. A refusal of the machine (no network link) gives it back
        broken and tries another; a refusal of our request (image, kernel, user data) releases the machine,
        says MAAS's words in a condition and tries no other machine until the deploy inputs change."""
        fields = exc.field_errors
        text = facts.refusal_text(fields) if fields else p.refusal(exc)
        if not fields or set(fields) <= MACHINE_REFUSAL_FIELDS:
            why = f"MAAS refused to deploy it: {text}"
            return await p.give_back(scope, port, sid, C.DEPLOYMENT_FAILED_REASON, why)
        reason = C.INVALID_IMAGE_REASON if IMAGE_FIELDS & set(fields) else C.DEPLOY_REQUEST_REFUSED_REASON
        scope.set_status(attempts=max(0, scope.attempts - 1))  # not the machine's failure
        await p.give_back(scope, port, sid, reason, f"MAAS refused the deploy request: {text}")
        scope.take_event(reason)  # the Event below says it all
        msg = (
            f"MAAS refused the deploy request: {text}; released {p.describe(sid)} (not marked broken); "
            "no other machine is tried until the MaasMachine's image, kernel or bootstrap data changes"
        )
        scope.set_annotation(DEPLOY_REFUSED, facts.deploy_inputs(scope.want, scope.machine))
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, msg)
        scope.event("Warning", reason, msg)
        await scope.flush()
        return Requeue()

    async def deployed(self, p: Provisioner, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
        """Deployed and not reported off: provisioned (Ready), then the Node step. Powered off: power it on.

        ``unknown`` and ``error`` are not ``off``: MAAS never queries a ``manual`` machine's power, so it
        stays ``unknown`` through deploy and power_on; a failed power query says nothing about the machine."""
        if m.power_state == maas.PowerState.OFF:
            reason, msg = (
                C.MACHINE_POWERED_OFF_REASON,
                f"{m.system_id} is Deployed but powered {m.power_state}",
            )
            scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, msg)
            last = self._power_on_sent.get(m.system_id, 0.0)
            if self.clock() - last >= self.settings.power_on_retry:
                if not await self.ownership.confirm(p, scope, port, m.system_id, "powering it on"):
                    return Requeue(0.0)
                with maas_step("powering on"):
                    await port.power_on(
                        m.system_id, comment=f"capmaas {scope.key}: powered off while deployed"
                    )
                self._power_on_sent[m.system_id] = self.clock()
                scope.event("Warning", "MachinePoweredOff", f"{msg}; power on requested")
            return Requeue(self.settings.power_on_retry)
        self._power_on_sent.pop(m.system_id, None)
        if not scope.ready:
            started = scope.annotation(DEPLOY_STARTED)
            if started:
                self.recorder.deploy_duration(self.clock() - float(started))
            # No Event: Ready turning True (its lastTransitionTime), machineState and machinePowered say
            # it, and CAPI's Machine says it again; an Event would be a write per machine (docs/scaling.md).
        scope.set_status(ready=True, initialization={"provisioned": True}, addresses=facts.addresses(m))
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, True, C.PROVISIONED_REASON, "")
        # Ready is written now, before the Node step: that step reads the kubeconfig Secret (a queued GET
        # behind every starting machine's writes in a burst) and may dial a slow workload apiserver, and
        # CAPI is waiting on Ready, not on the Node's providerID (readiness lag). close() may run again.
        await scope.close()
        return await self.node(scope, facts.node_labels(m, facts.region_of(scope.maascluster, port.endpoint)))

    async def node(self, scope: MachineScope, labels: Mapping[str, str]) -> Requeue:
        """Put our providerID and the topology labels on the workload Node (no cloud provider does it on bare
        metal); a label someone set to another value stays, said in a Warning Event."""
        pid = scope.want.provider_id or ""
        name = scope.cluster_name
        hostname = scope.hostname
        if self._node_done.get(scope.uid) == pid or not name or not hostname:
            return Requeue()
        secret = await self.kube.get_secret(scope.namespace, f"{name}-kubeconfig")
        if secret is None or not secret.get("value"):
            return Requeue(self.settings.node_retry * 2)
        done = await self.kube.set_node_provider_id(secret["value"], hostname, pid, labels)
        result, current = done.result, done.current
        if done.kept_labels:
            theirs = ", ".join(f"{k}={v} (ours: {labels[k]})" for k, v in sorted(done.kept_labels.items()))
            scope.event("Warning", "NodeLabelConflict", f"Node {hostname} has {theirs}; left unchanged")
        if result is NodePatchResult.REJECTED:  # a tenant's kubeconfig we will not use: say which field
            scope.set_condition(C.NODE_PROVIDER_ID_CONDITION, False, C.KUBECONFIG_REJECTED_REASON, current)
            return Requeue(self.settings.node_retry * 2)
        if result in (NodePatchResult.PATCHED, NodePatchResult.ALREADY_SET):
            self._node_done[scope.uid] = pid
            if scope.condition(C.NODE_PROVIDER_ID_CONDITION) is not None:
                scope.set_condition(C.NODE_PROVIDER_ID_CONDITION, True, C.NODE_PROVIDER_ID_SET_REASON, "")
            if result is NodePatchResult.PATCHED:
                scope.event("Normal", "NodeProviderIDSet", f"Node {hostname} providerID={pid}")
            return Requeue()
        if result is NodePatchResult.CONFLICT:
            self._node_done[scope.uid] = pid
            # Never overwritten (the apiserver would refuse anyway): another provider or a person owns it.
            scope.event(
                "Warning",
                "NodeProviderIDConflict",
                f"Node {hostname} already has providerID {current}, not ours ({pid}); "
                "left unchanged: check that this Node is the MAAS machine",
            )
            return Requeue()
        return Requeue(self.settings.node_retry)

    # --- delete ------------------------------------------------------------------------------------------
    async def delete(self, p: Provisioner, scope: MachineScope, port: MaasPort) -> Requeue:
        """The provisioner gives everything back; once it is :class:`Finished`, so is the object."""
        done = await p.delete(scope, port)
        return self.finished(scope) if isinstance(done, Finished) else done

    def finished(self, scope: MachineScope) -> Requeue:
        """Nothing of ours is left in MAAS: drop the finalizer (the object goes) and its phase metric."""
        scope.remove_finalizer(MACHINE_FINALIZER)
        self.recorder.machine_phase(scope.key, None)
        self._node_done.pop(scope.uid, None)
        self.ownership.drop(scope.uid)
        self.vm_hosts_tagged.pop(scope.uid, None)
        return Requeue()
