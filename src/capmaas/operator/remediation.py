"""kopf wiring of Cluster API external remediation: MaasRemediations (:mod:`capmaas.reconcilers.remediation`).

One loop per MaasRemediation (:class:`~capmaas.operator.workers.Workers`), woken by its own watch events and
by its Machine's (same name: Cluster API names the request after the Machine; the MachineHealthCheck's
verdict arrives as a Machine condition: a route in :data:`capmaas.operator.routing.ROUTES`). The loops are
one more entry of :attr:`Runtime.loops`, so they run only while this process leads (:meth:`Runtime.lead`,
``stop``, ``cancel``), and every write they make goes through the operator's fenced Kubernetes and MAAS
clients anyway.

MaasRemediationTemplates are Cluster API's business (it reads them to create the requests); nothing here
watches them. Under a watch filter, MaasRemediations are watched with its label selector like MaasMachines:
give the template's ``spec.template.metadata.labels`` the shard's label.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import kopf

from capmaas.operator.kube import Store, object_key
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas.operator.routing import MAASREMEDIATIONS
from capmaas.operator.workers import Workers
from capmaas.reconcilers import identity
from capmaas.reconcilers.credentials import connect_ref
from capmaas.reconcilers.errors import ConflictError, TransientError
from capmaas.reconcilers.ports import MAASMACHINE, Body, EventType, KubePort, MaasConnector, MaasCredentials
from capmaas.reconcilers.remediation import RemediationMaas, RemediationReconciler
from capmaas.reconcilers.scope import MachineScope

if TYPE_CHECKING:
    from capmaas.operator.runtime import Runtime

log = logging.getLogger(__name__)

INFRA = "infrastructure.cluster.x-k8s.io"
INFRA_API = f"{INFRA}/v1beta1"
CAPI = "cluster.x-k8s.io"
MACHINE_API = f"{CAPI}/v1beta2"
PLURAL = MAASREMEDIATIONS
#: The field manager of our server-side apply of the Machine's OwnerRemediated condition.
FIELD_MANAGER = "capmaas-remediation"
APPLY = "application/apply-patch+yaml"


class RemediationAdapter:
    """:class:`~capmaas.reconcilers.remediation.RemediationKube` over the shared Store, the fenced
    :class:`KubeHttp` and :class:`~capmaas.operator.kube.KubeAdapter`."""

    def __init__(
        self,
        store: Store,
        http: KubeHttp,
        kube: KubePort,
        wake_machine: Callable[[str], None],
        *,
        in_shard: Callable[[Body], bool] = lambda body: True,
    ) -> None:
        self.store, self._http, self._kube = store, http, kube
        self._wake_machine = wake_machine
        self._in_shard = in_shard

    def get_machine(self, namespace: str, name: str) -> Body | None:
        return self.store.find("machines", namespace, name)

    async def read_maasmachine(self, namespace: str, name: str) -> Body | None:
        """The cached MaasMachine; on a miss (kopf has not delivered its listing yet) one GET. What the GET
        finds is not put in the cache: the watch delivers it, with the events that start its own loop. One
        outside this shard's watch filter is not this operator's: None, as the cache would say."""
        cached = self.store.find(MAASMACHINE, namespace, name)
        if cached is not None:
            return cached
        try:
            body = await self._http.get_object(INFRA_API, MAASMACHINE, namespace, name)
        except KubeHttpError as exc:
            if exc.status == 404:
                return None
            raise TransientError("KubernetesError", f"reading {MAASMACHINE}/{name}: {exc}") from exc
        return body if self._in_shard(body) else None

    def remediation_alive(self, namespace: str, uid: str) -> bool:
        for body in self.store.values(PLURAL):
            meta = body.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("uid") == uid:
                return not meta.get("deletionTimestamp")
        return False

    async def patch_remediation(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        try:
            new = await self._http.merge_patch(INFRA_API, PLURAL, namespace, name, body, status=status)
        except KubeHttpError as exc:
            if exc.status == 404:
                self.store.delete(PLURAL, namespace, name)
                return None
            if exc.status == 409:
                with contextlib.suppress(KubeHttpError):
                    self.store.put(PLURAL, await self._http.get_object(INFRA_API, PLURAL, namespace, name))
                raise ConflictError(f"{PLURAL}/{name} changed since it was read; retrying") from exc
            raise TransientError("KubernetesError", f"patching {PLURAL}/{name}: {exc}") from exc
        self.store.put(PLURAL, new)
        return new

    async def set_maasmachine_annotation(
        self, namespace: str, name: str, key: str, value: str | None
    ) -> None:
        """The write goes into the store, so its watch event is no news to the MaasMachine's loop: it is woken
        here (a hold removed: it deploys or follows the server again)."""
        body = {"metadata": {"annotations": {key: value}}}
        await self._kube.patch(MAASMACHINE, namespace, name, body, status=False)
        self._wake_machine(object_key(MAASMACHINE, namespace, name))

    async def owner_remediated_false(self, namespace: str, machine: str, reason: str, message: str) -> None:
        current = self.store.find("machines", namespace, machine) or {}
        condition = {
            "type": "OwnerRemediated",
            "status": "False",
            "reason": reason,
            "message": message[:10240],
            "lastTransitionTime": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "observedGeneration": int((current.get("metadata") or {}).get("generation") or 0),
        }
        body = {
            "apiVersion": MACHINE_API,
            "kind": "Machine",
            "metadata": {"name": machine, "namespace": namespace},
            "status": {"conditions": [condition]},
        }
        path = (
            f"/apis/{MACHINE_API}/namespaces/{quote(namespace)}/machines/{quote(machine)}/status"
            f"?fieldManager={FIELD_MANAGER}&force=true"
        )
        try:
            await self._http.request("PATCH", path, body=body, content_type=APPLY)
        except KubeHttpError as exc:
            if exc.status != 404:  # the Machine gone: nothing left to hand over
                raise TransientError(
                    "KubernetesError", f"setting OwnerRemediated on {machine}: {exc}"
                ) from exc

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        self._kube.emit_event(obj, type, reason, message)


def _connector(
    kube: KubePort, store: Store, connector: MaasConnector, default: MaasCredentials | None
) -> Any:
    async def connect(mm: Body) -> RemediationMaas:
        """The connection a MaasMachine's own passes use: its MaasCluster's credentials."""
        scope = MachineScope(kube, MAASMACHINE, mm)
        name = scope.cluster_name or ""
        cluster = store.find("clusters", scope.namespace, name)
        infra = ((cluster or {}).get("spec") or {}).get("infrastructureRef") or {}
        scope.maascluster = kube.get_maascluster(scope.namespace, str(infra.get("name") or name))
        port, _ = await connect_ref(kube, connector, scope.namespace, identity.machine_ref(scope), default)
        # A MaasSession: it has the power_off the MaasPort protocol does not list (only remediation uses it).
        return cast(RemediationMaas, port)

    return connect


def register(
    registry: kopf.OperatorRegistry,
    rt: Runtime,
    *,
    default_credentials: MaasCredentials | None,
    label_selector: str | None,
) -> None:
    """The MaasRemediation loops and the handlers that feed them (called once from app.py's ``register``)."""
    config = rt.config
    adapter = RemediationAdapter(rt.store, rt.kube.http, rt.kube, rt.machines.wake, in_shard=rt.kube.in_shard)
    connect = _connector(rt.kube, rt.store, rt.connections, default_credentials)
    reconciler = RemediationReconciler(adapter, connect)
    workers = Workers(
        PLURAL,
        reconciler.reconcile,
        rt.store,
        active=rt.machines.active,
        resync=config.kube.resync_interval,
        backoff_base=config.machine.retry_base_delay,
        backoff_max=config.machine.retry_max_delay,
        outcome=rt.metrics.outcome,
        lag=rt.metrics.lag,
    )
    rt.loops[PLURAL] = workers  # started, stopped and cancelled with every other controller's loops

    @kopf.on.startup(registry=registry)
    async def watch_remediations(settings: kopf.OperatorSettings, **_: Any) -> None:
        if label_selector:
            settings.watching.label_selectors[INFRA, PLURAL] = label_selector

    @kopf.on.event(INFRA, PLURAL, registry=registry)
    async def maasremediation_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        key = object_key(PLURAL, ns, name)
        if type == "DELETED":
            rt.store.delete(PLURAL, ns, name, uid=meta.get("uid"))
            workers.wake(key)  # its loop sees it gone and ends
        elif rt.store.put(PLURAL, body):
            workers.ensure(key)
        elif rt.store.get(key) is None:
            workers.wake(key)
        else:
            workers.ensure(key, wake=False)  # the echo of our own write
