"""MaasMachineTemplate status: ``capacity``/``nodeInfo`` for the cluster autoscaler's scale-from-zero, and
``available``, the servers (LXD: VM slots) MAAS has Ready for the template now.

A template tied to a Cluster (its ``cluster.x-k8s.io/cluster-name`` label, or its ownerRef to the Cluster,
which CAPI sets on the templates a MachineDeployment uses) is counted against the MAAS identity of the
Cluster's MaasCluster, resolved as the machine reconcilers resolve it (``effective_ref`` + ``connect_ref``):
the count comes from that session's shared inventory (:mod:`capmaas.gateway.inventory`, listed in the
session's poller loop), never from a request of the template's own (:mod:`capmaas.operator.capacity`). A
template tied to no Cluster gets its status from its spec alone, as before.

One loop (:class:`TemplateCapacity`) writes: on a template's or a MachineDeployment's watch event, when an
inventory changes (a machine allocated, released, or seen Ready), and every inventory interval. Each write is
a compare-and-set against the cached object (its last answer or watch event): nothing is written when
nothing changed. Only the leader writes (``active()``), and nothing is written while the template's Cluster is
paused.

With a watch filter (sharded operators), a template is counted by the shard whose label it carries, and
left alone by the others.

A MachineDeployment whose machines still to allocate outnumber what is available gets a Warning Event on the
MachineDeployment (the object whose ``replicas`` asked; the template is shared by several and is not what a
user or the autoscaler looks at), once per shortfall. It never blocks allocation: MAAS may have more than the
last listing showed, and CAPI retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import kopf
from pydantic import ValidationError

from capmaas.api import conditions as C
from capmaas.api.related import CapiCluster
from capmaas.api.v1beta1 import GROUP, MaasMachineSpec
from capmaas.gateway import MaasSession
from capmaas.operator import capacity
from capmaas.operator.kube import object_key
from capmaas.reconcilers.credentials import connect_ref, effective_ref
from capmaas.reconcilers.errors import ReconcileError
from capmaas.reconcilers.handoff import cluster_paused
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL

if TYPE_CHECKING:
    from capmaas.config import OperatorConfig
    from capmaas.gateway import MaasConnections
    from capmaas.operator.kube import KubeAdapter, Store
    from capmaas.reconcilers.ports import MaasCredentials

log = logging.getLogger(__name__)

PLURAL = "maasmachinetemplates"
CAPI = "cluster.x-k8s.io"
DEPLOYMENTS = "machinedeployments"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"


class Wiring(Protocol):
    """What the loop needs of the operator's runtime (``capmaas.operator.runtime.Runtime`` has it)."""

    config: OperatorConfig
    store: Store
    kube: KubeAdapter
    connections: MaasConnections


def _always() -> bool:
    return True


def template_spec(body: Mapping[str, Any]) -> MaasMachineSpec | None:
    """The template's MaasMachine spec, or None (logged) when it does not parse; the status is not read (an
    older operator wrote numbers there)."""
    try:
        return MaasMachineSpec.model_validate(
            ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
        )
    except ValidationError as exc:
        meta = body.get("metadata", {})
        log.warning(
            "MaasMachineTemplate %s/%s: cannot derive its capacity: %s",
            meta.get("namespace"), meta.get("name"), exc.errors()[0].get("msg", exc),
        )  # fmt: skip
        return None


def cluster_of(body: Mapping[str, Any]) -> str | None:
    """The Cluster a template belongs to: its cluster-name label, else its ownerRef to a Cluster."""
    meta = body.get("metadata", {})
    label = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
    if label:
        return str(label)
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "Cluster" and str(ref.get("apiVersion", "")).startswith(CAPI + "/"):
            return str(ref.get("name"))
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def status_patch(
    body: Mapping[str, Any], want: Mapping[str, Any], cond: tuple[bool, str, str] | None
) -> dict[str, Any] | None:
    """The status merge patch that brings ``body`` to ``want`` (+ the MaasCapacity condition), or None when
    it is there already. Keys the desired capacity no longer has are set to None (a merge patch removes them);
    ``lastTransitionTime`` is kept while the condition's status stays."""
    have = body.get("status") or {}
    patch: dict[str, Any] = {}
    if have.get("capacity") != want["capacity"]:
        capacity: dict[str, Any] = dict.fromkeys(have.get("capacity") or {})
        capacity.update(want["capacity"])
        patch["capacity"] = capacity
    if have.get("nodeInfo") != want["nodeInfo"]:
        patch["nodeInfo"] = want["nodeInfo"]
    if have.get("available") != want.get("available"):
        patch["available"] = want.get("available")
    others = [c for c in have.get("conditions") or () if c.get("type") != C.MAAS_CAPACITY_CONDITION]
    old = next((c for c in have.get("conditions") or () if c.get("type") == C.MAAS_CAPACITY_CONDITION), None)
    if cond is None:
        if old is not None:
            patch["conditions"] = others or None
    else:
        status, reason, message = "True" if cond[0] else "False", cond[1], cond[2]
        if old is None or (old.get("status"), old.get("reason"), old.get("message")) != (
            status,
            reason,
            message,
        ):
            since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
            new = {
                "type": C.MAAS_CAPACITY_CONDITION,
                "status": status,
                "reason": reason,
                "message": message[:32768],
                "lastTransitionTime": since or _now(),
            }
            generation = body.get("metadata", {}).get("generation")
            if generation is not None:
                new["observedGeneration"] = generation
            patch["conditions"] = [*others, new]
    return patch or None


class TemplateCapacity:
    """The loop that keeps every template's status; see the module docstring."""

    def __init__(
        self,
        wiring: Wiring,
        default_credentials: MaasCredentials | None,
        active: Callable[[], bool] = _always,
    ) -> None:
        self._w = wiring
        self._default = default_credentials
        self._active = active
        cfg = wiring.config.capacity
        self._interval = cfg.inventory_interval
        self._spacing = wiring.config.polling.fast_interval
        self._device_reads = cfg.device_reads_per_round
        self._resources = {k.lower(): v for k, v in cfg.device_resources.items()}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._bound: dict[str, MaasSession] = {}  # template key -> the session it is counted on
        self._warned: dict[str, tuple[int, int]] = {}  # MachineDeployment key -> (to allocate, available)

    # --- events ------------------------------------------------------------------------------------------
    def template_seen(self, type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        key = object_key(PLURAL, ns, name)
        if not self._w.kube.in_shard(body):
            # Another shard's (the watch filter's label): its operator counts and writes it. Two shards
            # writing one template would undo each other's status (one counts, one cannot see the Cluster).
            self._w.store.forget(PLURAL, ns, name)
            self._mark(key)
            return
        if type == "DELETED" or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
            self._w.store.delete(PLURAL, ns, name, uid=meta.get("uid"))
        else:
            self._w.store.put(PLURAL, body)
        self._mark(key)

    def deployment_seen(self, type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if type == "DELETED":
            self._w.store.forget(DEPLOYMENTS, ns, name)
            self._warned.pop(object_key(DEPLOYMENTS, ns, name), None)
            return
        self._w.store.put(DEPLOYMENTS, body)
        ref = _infra_ref(body)
        if ref is not None:
            self._mark(object_key(PLURAL, ns, ref))

    def _mark(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    def _session_changed(self, session: MaasSession) -> None:
        for key, s in self._bound.items():
            if s is session:
                self._dirty.add(key)
        self._wake.set()

    # --- the loop ----------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            timed_out = False
            try:
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            except TimeoutError:
                timed_out = True
            self._wake.clear()
            # On the timer, every template again: a retry after a failed connect, a leader just elected.
            if timed_out:
                self._dirty.update(
                    object_key(PLURAL, b["metadata"].get("namespace", ""), b["metadata"].get("name", ""))
                    for b in self._w.store.values(PLURAL)
                )
            if not self._active():
                continue
            keys, self._dirty = self._dirty, set()
            for key in sorted(keys):
                try:
                    await self.reconcile(key)
                except ReconcileError as exc:
                    log.info("MaasMachineTemplate %s: %s", key, exc.message)
                except Exception:  # the loop must outlive any surprise; the next pass tries again
                    log.exception("MaasMachineTemplate %s: capacity pass failed", key)
            # At most one pass per spacing: while a fleet is allocated, every answer changes an inventory,
            # and a pass over every template for each would keep the event loop busy; they coalesce here.
            await asyncio.sleep(self._spacing)

    async def reconcile(self, key: str) -> None:
        """One template: count, write what changed, warn its MachineDeployments."""
        body = self._w.store.get(key)
        if body is None:
            self._unbind(key)
            return
        spec = template_spec(body)
        if spec is None or self._paused(body):
            return
        session, why_not = await self._session(key, body)
        counted = None
        if session is not None:
            inventory = session.poller.inventory
            counted = capacity.count(body, spec, inventory, self._resources)
            if counted is None:
                why_not = "MAAS not listed yet"
                if inventory.last_error is not None:
                    why_not = f"listing MAAS failed: {type(inventory.last_error).__name__}"
            elif counted.devices_unread and inventory.want_devices(counted.devices_unread):
                session.poller.kick()
        want, cond = capacity.desired(spec, counted, why_not, self._resources)
        patch = status_patch(body, want, cond)
        meta = body.get("metadata", {})
        if patch is not None:
            log.debug("MaasMachineTemplate %s: status %s", key, patch)
            await self._w.kube.patch_template_status(meta.get("namespace", ""), meta.get("name", ""), patch)
        if counted is None or (counted.devices_unread and not counted.capacity):
            return  # not counted (yet): no figure to warn with
        self._warn(body, counted.available, capacity.is_lxd(spec))

    def _paused(self, body: Mapping[str, Any]) -> bool:
        """The template's Cluster is paused (``clusterctl move`` pauses it before copying): nothing is
        written, as the reconcilers write nothing to a paused cluster's objects."""
        name = cluster_of(body)
        ns = str(body.get("metadata", {}).get("namespace", ""))
        return name is not None and cluster_paused(CapiCluster.view(self._w.store.find("clusters", ns, name)))

    async def _session(self, key: str, body: Mapping[str, Any]) -> tuple[MaasSession | None, str]:
        """The session the template is counted on, or None and why ("" when tied to no Cluster)."""
        meta = body.get("metadata", {})
        ns = str(meta.get("namespace", ""))
        name = cluster_of(body)
        if name is None:
            self._unbind(key)
            return None, ""
        cluster = self._w.store.find("clusters", ns, name)
        infra = ((cluster or {}).get("spec") or {}).get("infrastructureRef") or {}
        maascluster = self._w.kube.get_maascluster(ns, str(infra["name"])) if infra.get("name") else None
        if maascluster is None:
            self._unbind(key)
            return None, f"the MaasCluster of Cluster {name} is not found"
        try:
            port, _ = await connect_ref(
                self._w.kube, self._w.connections, ns, effective_ref(maascluster), self._default
            )
        except ReconcileError as exc:
            self._unbind(key)
            return None, exc.message
        if not isinstance(port, MaasSession):
            return None, "not a pooled MAAS session"
        old = self._bound.get(key)
        if old is not None and old is not port:
            old.poller.inventory.drop(key)
        self._bound[key] = port
        inventory = port.poller.inventory
        inventory.interval = self._interval
        inventory.device_reads = self._device_reads
        inventory.on_change = lambda: self._session_changed(port)
        spec = template_spec(body)
        if inventory.want(key, vm_hosts=spec is not None and capacity.is_lxd(spec)):
            port.poller.kick()
        return port, ""

    def _unbind(self, key: str) -> None:
        old = self._bound.pop(key, None)
        if old is not None:
            old.poller.inventory.drop(key)

    # --- MachineDeployments ------------------------------------------------------------------------------
    def _warn(self, template: Mapping[str, Any], available: int, lxd: bool) -> None:
        meta = template.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        for md in self._w.store.values(DEPLOYMENTS):
            md_meta = md.get("metadata", {})
            if md_meta.get("namespace") != ns or _infra_ref(md) != name:
                continue
            md_key = object_key(DEPLOYMENTS, ns, md_meta.get("name", ""))
            replicas = (md.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or md_meta.get("deletionTimestamp"):
                continue
            held = self._held(ns, str(md_meta.get("name", "")))
            to_allocate = replicas - held
            if to_allocate <= available:
                self._warned.pop(md_key, None)
                continue
            if self._warned.get(md_key) == (to_allocate, available):
                continue
            self._warned[md_key] = (to_allocate, available)
            what = "VM slots on the usable VM hosts" if lxd else "matching servers Ready"
            message = (
                f"asks for {replicas} machines of MaasMachineTemplate {name} ({held} hold one already): MAAS "
                f"has {available} {what} now, so {to_allocate - available} will wait until MAAS has more "
                "(allocation goes on; CAPI retries)"
            )
            self._w.kube.emit_event(md, "Warning", C.INSUFFICIENT_MAAS_CAPACITY_REASON, message)
            log.info("MachineDeployment %s/%s %s", ns, md_meta.get("name"), message)

    def _held(self, ns: str, deployment: str) -> int:
        """The deployment's Machines whose MaasMachine holds a MAAS machine already."""
        held = 0
        for m in self._w.store.values("machines"):
            m_meta = m.get("metadata", {})
            if (
                m_meta.get("namespace") != ns
                or (m_meta.get("labels") or {}).get(DEPLOYMENT_NAME_LABEL) != deployment
            ):
                continue
            ref = (m.get("spec") or {}).get("infrastructureRef") or {}
            mm = self._w.store.find("maasmachines", ns, str(ref.get("name", "")))
            if mm is not None and (
                (mm.get("spec") or {}).get("systemID") or (mm.get("spec") or {}).get("providerID")
            ):
                held += 1
        return held


def _infra_ref(md: Mapping[str, Any]) -> str | None:
    """The MaasMachineTemplate a MachineDeployment's machines are made from (v1beta2 ``apiGroup`` or v1beta1
    ``apiVersion`` refs)."""
    ref = (((md.get("spec") or {}).get("template") or {}).get("spec") or {}).get("infrastructureRef") or {}
    if ref.get("kind") != "MaasMachineTemplate":
        return None
    group = ref.get("apiGroup") or str(ref.get("apiVersion", "")).split("/", 1)[0]
    return str(ref["name"]) if group == GROUP and ref.get("name") else None


def register(
    registry: kopf.OperatorRegistry,
    wiring: Wiring,
    default_credentials: MaasCredentials | None,
    active: Callable[[], bool] = _always,
) -> TemplateCapacity:
    """Attach the template and MachineDeployment handlers and the loop; it writes only while ``active()``
    (this process holds the Lease)."""
    loop = TemplateCapacity(wiring, default_credentials, active)
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.event(GROUP, PLURAL, registry=registry)
    async def maasmachinetemplate_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        loop.template_seen(type, body)

    @kopf.on.event(CAPI, DEPLOYMENTS, registry=registry)
    async def machinedeployment_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        loop.deployment_seen(type, body)

    @kopf.on.startup(registry=registry)
    async def start_template_capacity(**_: Any) -> None:
        tasks.append(asyncio.create_task(loop.run(), name="template capacity"))

    @kopf.on.cleanup(registry=registry)
    async def stop_template_capacity(**_: Any) -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return loop
