"""MaasCluster reconciliation: credentials check, failure domains, the control-plane endpoint, ready.

Endpoint: ``spec.controlPlaneEndpoint.host`` given by the user, or the ``spectrocloud.com/custom-dns-
provided`` annotation → used as is, no DNS. Otherwise capmaas owns a MAAS DNS resource
``<cluster>-<suffix>.<dnsDomain>`` (suffix derived from the MaasCluster UID, so a crash between create and
the spec write finds the same name again). Its A records follow the running control-plane MaasMachines
(their status, from the watch cache: no MAAS read per pass) but are never emptied while control-plane
machines exist: a control plane that is briefly down keeps its last addresses (the Go provider wiped them
and clusters lost their API). The record is deleted with the cluster, once no MaasMachine of the cluster is
left.

``status.ready`` and ``status.initialization.provisioned`` are set once the endpoint is known and never reset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from capmaas.api import conditions as C
from capmaas.api.v1beta1 import (
    APIEndpoint,
    ClusterNetworkStatus,
    FailureDomain,
    MaasClusterSpec,
    MaasClusterStatus,
)
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.credentials import connect_with_credentials, maas_failure, transport_security
from capmaas.reconcilers.errors import ReconcileError
from capmaas.reconcilers.keys import (
    CLUSTER_FINALIZER,
    CONTROL_PLANE_LABEL,
    CUSTOM_DNS_ANNOTATION,
    DELETE_FOR_MOVE_ANNOTATION,
    MANAGED_BY_ANNOTATION,
)
from capmaas.reconcilers.ports import (
    MAASCLUSTER,
    Body,
    DnsRecord,
    KubePort,
    MaasConnector,
    MaasCredentials,
    MaasPort,
)
from capmaas.reconcilers.scope import ConditionStatus, ObjectScope, Requeue, is_paused, owner_ref

DEFAULT_API_PORT = 6443
RUNNING_STATES = frozenset({"Deployed", "Deploying"})
#: Seconds between looks (at the watch cache, no API call) of a deleting MaasCluster for its MaasMachines.
DELETE_RECHECK_SECONDS = 5.0


class ClusterScope(ObjectScope):
    """The MaasCluster plus its owner Cluster (from the cache)."""

    spec_type = MaasClusterSpec
    status_type = MaasClusterStatus

    cluster: Body | None = None
    #: Why the MaasCluster is not ready yet, as (reason, message); Ready says it until it is ready.
    blocked: tuple[str, str] | None = None

    @property
    def cluster_name(self) -> str:
        ref = owner_ref(self.body, "Cluster")
        return str(ref.get("name")) if ref else self.name

    @property
    def want(self) -> MaasClusterSpec:
        """The spec, typed."""
        spec = self._typed_spec()
        assert isinstance(spec, MaasClusterSpec)
        return spec

    def block(self, reason: str, message: str) -> None:
        """Not ready yet, for this reason (ignored once ready: readiness is never taken back)."""
        self.blocked = (reason, message)

    def summary(self) -> tuple[bool | ConditionStatus, str, str] | None:
        """A deletion's step; else ready (``status.ready``, never reset), or why not."""
        if self.deletion is not None:
            return (False, *self.deletion)
        if self.ready:
            return None if self.deleting else (True, C.READY_REASON, "")
        return None if self.blocked is None else (False, *self.blocked)


def dns_name(cluster_name: str, uid: str, domain: str) -> str:
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:6]
    return f"{cluster_name}-{suffix}.{domain}".lower()


def is_managed_name(host: str, cluster_name: str, domain: str) -> bool:
    """Whether ``host`` has the shape of a name capmaas generated (it survives clusterctl move in spec)."""
    return bool(domain) and host.startswith(f"{cluster_name}-") and host.endswith(f".{domain}")


def control_plane_ips(kube: KubePort, namespace: str, cluster_name: str) -> tuple[int, frozenset[str]]:
    """(number of control-plane MaasMachines, IPs of those running) — from the watch cache."""
    count, ips = 0, set()
    for mm in kube.list_maasmachines(namespace, cluster_name):
        meta = mm.get("metadata") or {}
        if CONTROL_PLANE_LABEL not in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
            continue
        count += 1
        status = mm.get("status") or {}
        if status.get("machineState") in RUNNING_STATES and status.get("machinePowered"):
            addrs = [a for a in status.get("addresses") or () if a.get("type") == "ExternalIP"]
            addrs = addrs or [a for a in status.get("addresses") or () if a.get("type") == "InternalIP"]
            if addrs:
                ips.add(str(addrs[0]["address"]))
    return count, frozenset(ips)


class ClusterReconciler:
    def __init__(
        self, kube: KubePort, connector: MaasConnector, *, default_credentials: MaasCredentials | None
    ) -> None:
        self.kube = kube
        self.connector = connector
        self.default_credentials = default_credentials
        # The DNS record as last read or written, per MaasCluster UID: a pass whose control-plane IPs did not
        # change costs no MAAS request. Soft state: lost on restart, re-read once.
        self._dns: dict[str, DnsRecord] = {}

    async def reconcile(self, body: Body) -> Requeue:
        if MANAGED_BY_ANNOTATION in (body.get("metadata", {}).get("annotations") or {}):
            return Requeue()  # externally managed (HyperShift): no finalizer, no patch, nothing at all
        scope = ClusterScope(self.kube, MAASCLUSTER, body)
        try:
            if scope.deleting:
                return await self._delete(scope)
            return await self._normal(scope)
        except ReconcileError as exc:
            scope.block(exc.reason, exc.message)
            raise
        finally:
            await scope.close()

    def _wait(self, scope: ClusterScope, reason: str, message: str) -> Requeue:
        scope.block(reason, message)
        return Requeue()

    def _load(self, scope: ClusterScope) -> bool:
        ref = owner_ref(scope.body, "Cluster")
        if ref is None:
            self._wait(scope, C.WAITING_FOR_CLUSTER_OWNER_REASON, "waiting for Cluster API to set the owner")
            return False
        scope.cluster = self.kube.get_cluster(scope.namespace, str(ref.get("name")))
        if scope.cluster is None:
            self._wait(scope, C.WAITING_FOR_CLUSTER_OWNER_REASON, f"Cluster {ref.get('name')} not found yet")
            return False
        return True

    async def _connect(self, scope: ClusterScope) -> MaasPort:
        try:
            port, creds = await connect_with_credentials(
                self.kube, self.connector, scope.body, self.default_credentials
            )
        except ReconcileError as exc:
            scope.set_condition(C.MAAS_CONNECTED_CONDITION, False, exc.reason, exc.message)
            raise
        scope.set_condition(C.MAAS_CONNECTED_CONDITION, True, C.MAAS_CONNECTED_REASON, port.endpoint)
        scope.set_condition(C.MAAS_TRANSPORT_SECURE_CONDITION, *transport_security(creds))
        return port

    async def _normal(self, scope: ClusterScope) -> Requeue:
        if not self._load(scope):
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        scope.add_finalizer(CLUSTER_FINALIZER)
        self._settings(scope)
        port = await self._connect(scope)
        await self._failure_domains(scope, port)
        endpoint = await self._endpoint(scope, port)
        if endpoint is None:
            return Requeue()
        scope.set_status(ready=True, initialization={"provisioned": True})
        return Requeue()

    def _settings(self, scope: ClusterScope) -> None:
        """SettingsApplied: False (NoMaasEquivalent) while a set ``spec.lxdConfig`` field has no MAAS
        equivalent, named as the user spelled it (the raw spec: the canonical one folds networkBridge into
        nicParent)."""
        lxd = MaasClusterSpec.model_validate(scope.spec).lxd_config
        names = lxd.not_applied() if lxd is not None else []
        if names:
            fields = ", ".join(f"spec.lxdConfig.{n}" for n in names)
            scope.set_condition(
                C.SETTINGS_APPLIED_CONDITION,
                False,
                C.NO_MAAS_EQUIVALENT_REASON,
                f"{fields}: MAAS has no equivalent setting, so capmaas does not apply it",
            )
        else:
            scope.set_condition(C.SETTINGS_APPLIED_CONDITION, True, C.ALL_SETTINGS_APPLIED_REASON, "")

    async def _failure_domains(self, scope: ClusterScope, port: MaasPort) -> None:
        names: Sequence[str] = scope.want.failure_domains or ()
        reason = C.FAILURE_DOMAINS_FROM_SPEC_REASON
        if not names:
            try:
                names = await port.zones()
            except maas_errors.MaasError as exc:
                raise maas_failure(exc, None, "listing zones") from exc
            reason = C.FAILURE_DOMAINS_FROM_MAAS_REASON
        scope.set_status(failure_domains=[FailureDomain(name=n, control_plane=True) for n in names])
        scope.set_condition(C.FAILURE_DOMAINS_DISCOVERED_CONDITION, True, reason, ", ".join(names))

    async def _endpoint(self, scope: ClusterScope, port: MaasPort) -> str | None:
        assert scope.cluster is not None
        cep = scope.want.control_plane_endpoint
        host = cep.host if cep else ""
        domain = scope.want.dns_domain or ""
        network = (scope.cluster.get("spec") or {}).get("clusterNetwork") or {}  # the CAPI Cluster's
        api_port = int((cep.port if cep else None) or network.get("apiServerPort") or DEFAULT_API_PORT)
        custom = CUSTOM_DNS_ANNOTATION in scope.annotations or (
            host and not is_managed_name(host, scope.cluster_name, domain)
        )
        if custom:
            if not host:
                self._wait(
                    scope,
                    C.CUSTOM_ENDPOINT_REASON,
                    f"{CUSTOM_DNS_ANNOTATION} is set but spec.controlPlaneEndpoint.host is empty",
                )
                return None
            scope.set_spec(control_plane_endpoint=APIEndpoint(host=host, port=api_port))
            scope.set_condition(C.DNS_READY_CONDITION, True, C.CUSTOM_ENDPOINT_REASON, host)
            return host
        fqdn = host or dns_name(scope.cluster_name, scope.uid, domain)
        count, ips = control_plane_ips(self.kube, scope.namespace, scope.cluster_name)
        try:
            record = self._dns.get(scope.uid)
            if record is None or record.fqdn != fqdn:
                record = await port.dns_find(fqdn)
            if record is None:
                record = await port.dns_create(fqdn, ips)
                scope.event("Normal", "DNSRecordCreated", f"{fqdn} -> {sorted(ips) or '(none yet)'}")
            elif ips and record.ips != ips:
                await port.dns_update(record.id, ips)
                record = DnsRecord(record.id, fqdn, ips)
                scope.event("Normal", "DNSRecordUpdated", f"{fqdn} -> {sorted(ips)}")
            elif count == 0 and record.ips:
                await port.dns_update(record.id, frozenset())  # no control plane left at all
                record = DnsRecord(record.id, fqdn, frozenset())
            self._dns[scope.uid] = record
        except maas_errors.MaasError as exc:
            self._dns.pop(scope.uid, None)
            err = maas_failure(exc, None, f"DNS record {fqdn}", reason=C.DNS_UPDATE_FAILED_REASON)
            scope.set_condition(C.DNS_READY_CONDITION, False, C.DNS_UPDATE_FAILED_REASON, err.message)
            raise err from exc
        scope.set_spec(control_plane_endpoint=APIEndpoint(host=fqdn, port=api_port))
        scope.set_status(network=ClusterNetworkStatus(dns_name=fqdn))
        if ips:
            scope.set_condition(C.DNS_READY_CONDITION, True, C.DNS_RECORD_READY_REASON, " ".join(sorted(ips)))
        else:
            scope.set_condition(
                C.DNS_READY_CONDITION,
                False,
                C.WAITING_FOR_CONTROL_PLANE_REASON,
                "no running control plane yet",
            )
        return fqdn

    async def _delete(self, scope: ClusterScope) -> Requeue:
        if CLUSTER_FINALIZER not in scope.finalizers:
            return Requeue()
        if DELETE_FOR_MOVE_ANNOTATION in scope.annotations:
            scope.remove_finalizer(CLUSTER_FINALIZER)
            return Requeue()
        self._load(scope)
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        left = self.kube.list_maasmachines(scope.namespace, scope.cluster_name)
        if left:
            scope.set_deletion(C.DELETING_REASON, f"waiting for {len(left)} MaasMachines to go")
            # Look again soon rather than only when woken: the wake-up for "a MaasMachine went away" finds the
            # MaasCluster through the Cluster, which may already be gone (deleted first, or a namespace
            # deletion), and then this MaasCluster would sit until the resync interval (minutes).
            return Requeue(DELETE_RECHECK_SECONDS)
        cep = scope.want.control_plane_endpoint
        host = cep.host if cep else ""
        domain = scope.want.dns_domain or ""
        managed = (
            host
            and CUSTOM_DNS_ANNOTATION not in scope.annotations
            and is_managed_name(host, scope.cluster_name, domain)
        )
        if managed:
            port = await self._connect(scope)
            try:
                record = await port.dns_find(host)
                if record is not None:
                    await port.dns_delete(record.id)
                    scope.event("Normal", "DNSRecordDeleted", host)
                self._dns.pop(scope.uid, None)
            except maas_errors.MaasError as exc:
                raise maas_failure(exc, None, f"deleting DNS record {host}") from exc
        scope.remove_finalizer(CLUSTER_FINALIZER)
        return Requeue()
