"""MaasCluster reconciliation: credentials check, failure domains, the control-plane endpoint, ready.

Endpoint: ``spec.controlPlaneEndpoint.host`` given by the user, or the ``spectrocloud.com/custom-dns-
provided`` annotation → used as is, no DNS. Otherwise capmaas owns a MAAS DNS resource
``<cluster>-<suffix>.<dnsDomain>`` (suffix derived from the MaasCluster UID, so a crash between create and
the spec write finds the same name again). Its A records follow the running control-plane MaasMachines
(the shared poller's view of the machine each one holds, else its status: no MAAS read per pass) but are
never emptied while control-plane machines exist: a control plane that is briefly down keeps its last
addresses (the Go provider wiped them and clusters lost their API). Nor is it emptied the moment the watch
cache shows no control-plane MaasMachine: an operator just started, or the target of a ``clusterctl move``,
may hold the MaasCluster and its Cluster before their MaasMachines' events (one watch per kind, no order
between them), and would wipe a live cluster's endpoint. The record is emptied only after the cache has shown
none for :data:`CONTROL_PLANE_GONE_SECONDS` (a pass is requeued for then). For the same reason a write that
removes some addresses first asks the apiserver whether the cache is behind (more control-plane MaasMachines
listed there than cached: the write waits for their events). The record is deleted with the cluster, once no
MaasMachine of the cluster is left (an empty cache is checked against the apiserver too).

Ownership: a record is ours only if we created it. Its MAAS id and name are kept in the
``…/dns-record`` annotation (written by the operator only: the admission policy; kept by clusterctl move,
which restores no status) and shown in ``status.network``. No other record is ever written or deleted: a
record of the endpoint's name that is not ours is a ``DNSRecordConflict``.

Names: capmaas creates only the record named for this MaasCluster (:func:`dns_name`, a suffix of
64 bits of the UID's hash, so no UID another tenant can get names the same record). A host of the managed
shape (``<cluster>-….<dnsDomain>``) that is not exactly that name is refused (``DNSNameNotOwn``), and with
the admin's per-namespace domain list (``dns.namespace_domains``) so is another domain
(``DNSDomainNotAllowed``). Nothing is adopted by name by default: only the record this MaasCluster marked
``…/dns-record-pending`` before creating it (a crash between create and the id write), or, with the one-time
migration setting ``dns.adopt_records_by_name``, the record named for its UID by this or the 24-bit scheme
of earlier releases (:func:`legacy_dns_name`).

Which address of a machine goes into the record: :mod:`capmaas.api.preferred_subnets` (the spec, else the Go
provider's ConfigMap ``maas-preferred-subnet`` in the namespace).

``status.ready`` and ``status.initialization.provisioned`` are set once the endpoint is known and never reset.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api import preferred_subnets as ps
from capmaas.api.related import CapiCluster, MaasMachineView
from capmaas.api.v1beta1 import (
    APIEndpoint,
    ClusterNetworkStatus,
    FailureDomain,
    MaasClusterSpec,
    MaasClusterStatus,
    MachineAddress,
)
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts, identity
from capmaas.reconcilers.credentials import (
    connect_ref,
    effective_ref,
    maas_failure,
    maas_step,
    transport_security,
)
from capmaas.reconcilers.errors import ReconcileError, TransientError
from capmaas.reconcilers.handoff import Handoff
from capmaas.reconcilers.keys import (
    CLUSTER_FINALIZER,
    CONTROL_PLANE_LABEL,
    CUSTOM_DNS_ANNOTATION,
    DNS_PENDING,
    DNS_RECORD,
    MANAGED_BY_ANNOTATION,
    VIP,
)
from capmaas.reconcilers.owners import Owners, recheck
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
from capmaas.reconcilers.tenancy import Tenancy

DEFAULT_API_PORT = 6443
RUNNING_STATES = frozenset({"Deployed", "Deploying"})
#: Seconds between looks (at the watch cache, no API call) of a deleting MaasCluster for its MaasMachines.
DELETE_RECHECK_SECONDS = 5.0
#: How long the watch cache must show no control-plane MaasMachine of a cluster before its DNS record, which
#: still lists addresses, is emptied: longer than any lag between the watches of two kinds.
CONTROL_PLANE_GONE_SECONDS = 30.0


class ClusterScope(ObjectScope):
    """The MaasCluster plus its owner Cluster (from the cache)."""

    spec_type = MaasClusterSpec
    status_type = MaasClusterStatus

    cluster: CapiCluster | None = None
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


#: Hex digits of the name's suffix: 64 bits, so finding a UID whose name is another cluster's takes ~2^64
#: MaasClusters (the 24 bits of earlier releases took ~2^24 creates to collide with a victim's record).
SUFFIX_HEX = 16
#: The suffix of earlier releases' names (:func:`legacy_dns_name`).
LEGACY_SUFFIX_HEX = 6
#: A DNS label's longest length: the cluster-name part is cut so that name + ``-`` + suffix fits.
MAX_LABEL = 63


def _label_base(cluster_name: str) -> str:
    return cluster_name.lower()[: MAX_LABEL - SUFFIX_HEX - 1].rstrip("-") or "cluster"


def dns_name(cluster_name: str, uid: str, domain: str) -> str:
    """The record name of a MaasCluster: ``<cluster>-<16 hex of sha256(uid)>.<domain>`` (the same on every
    pass, so a crash between create and the annotation write finds the same name)."""
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:SUFFIX_HEX]
    return f"{_label_base(cluster_name)}-{suffix}.{domain}".lower()


def legacy_dns_name(cluster_name: str, uid: str, domain: str) -> str:
    """The name earlier releases gave (24-bit suffix): adopted only with ``dns.adopt_records_by_name``."""
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:LEGACY_SUFFIX_HEX]
    return f"{cluster_name}-{suffix}.{domain}".lower()


def is_managed_name(host: str, cluster_name: str, domain: str) -> bool:
    """Whether ``host`` has the shape of a name capmaas generates: such an endpoint is served by a MAAS DNS
    record (ours, or refused), any other host is the user's own endpoint. The shape says nothing about
    whose record it is: that is :class:`OwnedRecord`'s job."""
    if not domain or not host.endswith(f".{domain}"):
        return False
    return host.startswith(f"{cluster_name}-") or host.startswith(f"{_label_base(cluster_name)}-")


@dataclass(frozen=True)
class OwnedRecord:
    """The DNS resource this MaasCluster created: its MAAS id and name (the ``dns-record`` annotation)."""

    id: int
    fqdn: str

    def annotation(self) -> str:
        return f"{self.id}/{self.fqdn}"

    @classmethod
    def parse(cls, value: str | None) -> OwnedRecord | None:
        """The annotation's value; None when absent or not ``<id>/<fqdn>`` (never ours then)."""
        rid, sep, fqdn = (value or "").partition("/")
        if not sep or not rid.isdigit() or not fqdn:
            return None
        return cls(int(rid), fqdn)


@dataclass(frozen=True)
class ControlPlane:
    """What the DNS record should say about the control-plane MaasMachines."""

    count: int  # control-plane MaasMachines not being deleted
    ips: frozenset[str]  # the chosen address of each running one
    outside: tuple[str, ...] = ()  # running ones with addresses, none inside the preferred subnets
    #: Running ones whose interfaces are not known yet (an interface selector needs the poller's view): the
    #: record keeps what it lists for them rather than dropping an address that may be theirs.
    unknown: tuple[str, ...] = ()


Snapshot = Callable[[str], maas.Machine | None]


def _no_snapshot(system_id: str) -> maas.Machine | None:
    return None


def _addresses(raw: object) -> list[MachineAddress]:
    out = []
    for a in raw if isinstance(raw, list) else ():
        if isinstance(a, dict) and a.get("type") and a.get("address"):
            out.append(MachineAddress(type=a["type"], address=str(a["address"])))
    return out


def control_plane(
    kube: KubePort,
    namespace: str,
    cluster_name: str,
    preferred: ps.PreferredSubnets | None = None,
    snapshot: Snapshot = _no_snapshot,
) -> ControlPlane:
    """The control-plane MaasMachines (watch cache) and the address of each running one.

    A MaasMachine counts with the machine it holds now (``spec.systemID``): none held, no address. Its state
    and addresses come from the shared poller's snapshot of that machine when there is one (MAAS's AUTO IP
    shows there as soon as MAAS assigns it; a released machine's IP is gone from it), else from the
    MaasMachine's status. Running = Deploying or Deployed and not reported powered off (``unknown`` is not
    off: MAAS never queries a manual-power machine)."""
    preferred = preferred or ps.PreferredSubnets((), "none")
    count, ips, outside, unknown = 0, set(), [], []
    for mm in MaasMachineView.all(kube.list_maasmachines(namespace, cluster_name)):
        if CONTROL_PLANE_LABEL not in mm.metadata.labels or mm.metadata.deletion_timestamp:
            continue
        count += 1
        sid = mm.spec.system_id
        if not sid:
            continue
        m = snapshot(sid)
        interfaces: list[ps.InterfaceAddresses] | None = None
        if m is not None:
            running = m.status.running and m.power_state != maas.PowerState.OFF
            addresses = _addresses(facts.addresses(m))
            interfaces = [
                ps.InterfaceAddresses(i.name, i.tags, tuple(a.ip_address for a in i.links if a.ip_address))
                for i in m.interface_set
            ]
        else:
            status = mm.status
            running = status.machine_state in RUNNING_STATES and status.machine_powered is not False
            addresses = _addresses(status.addresses)
        if not running:
            continue
        ip = ps.pick_address(addresses, preferred, interfaces)
        if ip is not None:
            ips.add(ip)
        elif interfaces is None and preferred.needs_interfaces:
            unknown.append(mm.metadata.name)  # no MAAS view of its interfaces yet (status only)
        elif any(a.type in ("InternalIP", "ExternalIP") for a in addresses):
            outside.append(mm.metadata.name)
    return ControlPlane(count, frozenset(ips), tuple(sorted(outside)), tuple(sorted(unknown)))


class ClusterReconciler:
    def __init__(
        self,
        kube: KubePort,
        connector: MaasConnector,
        *,
        default_credentials: MaasCredentials | None,
        tenancy: Tenancy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self._clock = clock
        # Since when the watch cache has shown no control-plane MaasMachine, per MaasCluster UID whose record
        # still lists addresses (CONTROL_PLANE_GONE_SECONDS). Soft state: a restart waits the time again.
        self._cp_gone: dict[str, float] = {}
        self.connector = connector
        self.default_credentials = default_credentials
        self.tenancy = tenancy or Tenancy()
        # The DNS record as last read or written, per MaasCluster UID: a pass whose control-plane IPs did not
        # change costs no MAAS request. Soft state: lost on restart, re-read once.
        self._dns: dict[str, tuple[str, DnsRecord]] = {}  # UID -> (identity fingerprint, record)
        self.owners = Owners(kube)
        self.handoff = Handoff()

    async def reconcile(self, body: Body) -> Requeue:
        if MANAGED_BY_ANNOTATION in (body.get("metadata", {}).get("annotations") or {}):
            return Requeue()  # externally managed (HyperShift): no finalizer, no patch, nothing at all
        scope = ClusterScope(self.kube, MAASCLUSTER, body)
        try:
            if scope.deleting:
                return recheck(scope, await self._delete(scope))
            return recheck(scope, await self._normal(scope))
        except ReconcileError as exc:
            scope.block(exc.reason, exc.message)
            raise
        finally:
            await scope.close()

    def _wait(self, scope: ClusterScope, reason: str, message: str) -> Requeue:
        scope.block(reason, message)
        return Requeue()

    async def _load(self, scope: ClusterScope) -> bool:
        ref = owner_ref(scope.body, "Cluster")
        if ref is None:
            self._wait(scope, C.WAITING_FOR_CLUSTER_OWNER_REASON, "waiting for Cluster API to set the owner")
            return False
        scope.cluster = CapiCluster.view(await self.owners.get(scope, "clusters", str(ref.get("name"))))
        if scope.cluster is None:
            self._wait(scope, C.WAITING_FOR_CLUSTER_OWNER_REASON, f"Cluster {ref.get('name')} not found yet")
            return False
        return True

    async def _connect(self, scope: ClusterScope, ref: str) -> MaasPort | None:
        """The connection of credentials ``ref``; None when the DNS record came from another identity (then
        forgotten, and nothing more is sent in this pass: :mod:`~capmaas.reconcilers.identity`)."""
        try:
            port, creds = await connect_ref(
                self.kube, self.connector, scope.namespace, ref, self.default_credentials
            )
        except ReconcileError as exc:
            scope.set_condition(C.MAAS_CONNECTED_CONDITION, False, exc.reason, exc.message)
            raise
        scope.set_condition(C.MAAS_CONNECTED_CONDITION, True, C.MAAS_CONNECTED_REASON, port.endpoint)
        scope.set_condition(C.MAAS_TRANSPORT_SECURE_CONDITION, *transport_security(creds))
        identity.connected(scope, port, ref)
        if identity.check_cluster(scope, port):
            return port
        self._dns.pop(scope.uid, None)
        return None

    async def _normal(self, scope: ClusterScope) -> Requeue:
        if not await self._load(scope):
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        scope.add_finalizer(CLUSTER_FINALIZER)
        self._settings(scope)
        port = await self._connect(scope, identity.apply_identity_ref(scope, self.kube, scope.cluster_name))
        if port is None:
            return Requeue(0.0)
        await self._failure_domains(scope, port)
        endpoint = await self._endpoint(scope, port)
        if endpoint is None:
            return Requeue()
        scope.set_status(ready=True, initialization={"provisioned": True})
        if (since := self._cp_gone.get(scope.uid)) is not None:  # look again when the record may be emptied
            return Requeue(max(0.0, since + CONTROL_PLANE_GONE_SECONDS - self._clock()))
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
        """``spec.failureDomains``, else the MAAS zones that hold a machine this identity can see. An empty
        zone (``default`` usually is) is left out: CAPI would place control-plane Machines there, and a zone
        on the Machine is kept on every allocation, so such a Machine would wait for a machine for ever."""
        names: Sequence[str] = scope.want.failure_domains or ()
        reason = C.FAILURE_DOMAINS_FROM_SPEC_REASON
        message = ", ".join(names)
        if not names:
            with maas_step("listing zones"):
                zones = await port.zones()
                used = set(await port.zones_in_use())
            reason = C.FAILURE_DOMAINS_FROM_MAAS_REASON
            names = [z for z in zones if z in used]
            empty = [z for z in zones if z not in used]
            message = ", ".join(names) or "no MAAS zone holds a machine yet"
            if empty:
                message += f" (left out, no machine: {', '.join(empty)})"
        domains = [FailureDomain(name=n, control_plane=True) for n in names]
        scope.set_status(failure_domains=domains or None)
        scope.set_condition(C.FAILURE_DOMAINS_DISCOVERED_CONDITION, True, reason, message)

    async def _endpoint(self, scope: ClusterScope, port: MaasPort) -> str | None:
        assert scope.cluster is not None
        cep = scope.want.control_plane_endpoint
        host = cep.host if cep else ""
        domain = scope.want.dns_domain or ""
        network = scope.cluster.spec.cluster_network  # the CAPI Cluster's
        api_port = int((cep.port if cep else None) or network.api_server_port or DEFAULT_API_PORT)
        custom = CUSTOM_DNS_ANNOTATION in scope.annotations or (
            host and not is_managed_name(host, scope.cluster_name, domain)
        )
        vip = scope.want.control_plane_vip
        if custom and vip is not None:
            msg = (
                "spec.controlPlaneVIP needs capmaas's DNS record to point at it, but the endpoint is your "
                f"own ({host or CUSTOM_DNS_ANNOTATION}); nothing is reserved: leave "
                "spec.controlPlaneEndpoint.host empty, or remove the VIP and serve the endpoint yourself"
            )
            scope.set_condition(C.DNS_READY_CONDITION, False, C.VIP_NEEDS_DNS_RECORD_REASON, msg)
            scope.block(C.VIP_NEEDS_DNS_RECORD_REASON, msg)
            return None
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
        own_name = dns_name(scope.cluster_name, scope.uid, domain)
        owned = OwnedRecord.parse(scope.annotation(DNS_RECORD))
        fqdn = host or (owned.fqdn if owned is not None else own_name)
        if owned is None and (refusal := self._refuse_name(scope, fqdn, own_name, domain)) is not None:
            reason, msg = refusal
            if scope.condition_reason(C.DNS_READY_CONDITION) != reason:
                scope.event("Warning", reason, msg)  # once, not every pass
            scope.set_condition(C.DNS_READY_CONDITION, False, reason, msg)
            scope.block(reason, msg)
            return None
        try:
            preferred = await self._preferred(scope)
        except ps.InvalidPreferredSubnets as exc:
            msg = f"ConfigMap {ps.CONFIGMAP_NAME} key {ps.CONFIGMAP_KEY}: {exc}; the DNS record is left as is"
            scope.set_condition(C.DNS_READY_CONDITION, False, C.INVALID_PREFERRED_SUBNETS_REASON, msg)
            scope.block(C.INVALID_PREFERRED_SUBNETS_REASON, msg)
            return None
        cp = control_plane(self.kube, scope.namespace, scope.cluster_name, preferred, port.snapshot)
        try:
            try:
                result = await self._sync(scope, port, fqdn, own_name, cp, cached=True)
            except maas_errors.NotFoundError:
                # The remembered record was deleted in MAAS meanwhile: look again (maybe someone else's now).
                self._dns.pop(scope.uid, None)
                result = await self._sync(scope, port, fqdn, own_name, cp, cached=False)
        except maas_errors.MaasError as exc:
            self._dns.pop(scope.uid, None)
            err = maas_failure(exc, None, f"DNS record {fqdn}", reason=C.DNS_UPDATE_FAILED_REASON)
            scope.set_condition(C.DNS_READY_CONDITION, False, C.DNS_UPDATE_FAILED_REASON, err.message)
            raise err from exc
        if isinstance(result, str):
            if scope.condition_reason(C.DNS_READY_CONDITION) != C.DNS_RECORD_CONFLICT_REASON:
                scope.event("Warning", C.DNS_RECORD_CONFLICT_REASON, result)  # once, not every pass
            scope.set_condition(C.DNS_READY_CONDITION, False, C.DNS_RECORD_CONFLICT_REASON, result)
            scope.block(C.DNS_RECORD_CONFLICT_REASON, result)
            return None
        record = result
        self._own(scope, record)
        scope.set_spec(control_plane_endpoint=APIEndpoint(host=fqdn, port=api_port))
        if vip is not None:
            address = scope.annotation(VIP) or ""
            scope.set_condition(C.DNS_READY_CONDITION, True, C.VIP_READY_REASON, f"{fqdn} -> {address}")
            return fqdn
        left_out = ""
        if cp.outside:
            left_out = f"; left out, no address in {preferred.describe()}: {', '.join(cp.outside)}"
        if cp.unknown:
            left_out += f"; interfaces not known yet (record kept for them): {', '.join(cp.unknown)}"
        if cp.ips:
            ready_msg = " ".join(sorted(cp.ips)) + left_out
            scope.set_condition(C.DNS_READY_CONDITION, True, C.DNS_RECORD_READY_REASON, ready_msg)
        elif cp.outside:
            scope.set_condition(
                C.DNS_READY_CONDITION,
                False,
                C.NO_ADDRESS_IN_PREFERRED_SUBNETS_REASON,
                f"no running control-plane machine has an address in {preferred.describe()}: "
                + ", ".join(cp.outside),
            )
        else:
            scope.set_condition(
                C.DNS_READY_CONDITION,
                False,
                C.WAITING_FOR_CONTROL_PLANE_REASON,
                "no running control plane yet",
            )
        return fqdn

    def _refuse_name(
        self, scope: ClusterScope, fqdn: str, own_name: str, domain: str
    ) -> tuple[str, str] | None:
        """Why capmaas must not create (or adopt) the record ``fqdn`` for this MaasCluster, which has none
        recorded yet: not exactly its own name, or a domain the admin did not list for its namespace."""
        legacy = legacy_dns_name(scope.cluster_name, scope.uid, domain)
        if fqdn != own_name and not (self.tenancy.adopt_dns_by_name and fqdn == legacy):
            earlier = ""
            if fqdn == legacy:
                earlier = (
                    "; it is the name an earlier release gave this MaasCluster: its record is adopted only "
                    "with the one-time migration setting dns.adopt_records_by_name"
                )
            return C.DNS_NAME_NOT_OWN_REASON, (
                f"spec.controlPlaneEndpoint.host {fqdn} has the shape of a name capmaas manages "
                f"({scope.cluster_name}-….{domain}) but is not this MaasCluster's own ({own_name}); capmaas "
                "creates only that record: leave the host empty, or use a host of another shape (then DNS "
                f"is yours to serve){earlier}"
            )
        if not self.tenancy.dns_domain_allowed(scope.namespace, domain):
            listed = sorted(self.tenancy.dns_domains_of(scope.namespace) or ())
            return C.DNS_DOMAIN_NOT_ALLOWED_REASON, (
                f"spec.dnsDomain {domain} is not a DNS domain namespace {scope.namespace} may use "
                f"(allowed: {', '.join(listed) or 'none'}; operator setting dns.namespace_domains, env "
                "CAPMAAS_DNS__NAMESPACE_DOMAINS)"
            )
        return None

    def _adoptable(self, scope: ClusterScope, fqdn: str, own_name: str) -> bool:
        """Whether this MaasCluster, with no record id recorded, may take the existing record ``fqdn`` by
        name: the one it marked pending before creating it (a crash before the id write), or, under the
        one-time migration setting only, the one named for its UID (by this or the earlier scheme)."""
        if fqdn == own_name and scope.annotation(DNS_PENDING) == fqdn:
            return True
        if not self.tenancy.adopt_dns_by_name:
            return False
        domain = scope.want.dns_domain or ""
        return fqdn in (own_name, legacy_dns_name(scope.cluster_name, scope.uid, domain))

    async def _sync(
        self, scope: ClusterScope, port: MaasPort, fqdn: str, own_name: str, cp: ControlPlane, *, cached: bool
    ) -> DnsRecord | str:
        """Make our record ``fqdn`` list ``cp.ips``: the record, or why it is not ours (nothing written)."""
        owned = OwnedRecord.parse(scope.annotation(DNS_RECORD))
        remembered = self._dns.get(scope.uid) if cached else None
        # Remembered through this identity only, and only for an object stamped with it.
        record = None
        if remembered is not None and remembered[0] == port.identity and identity.is_bound_to(scope, port):
            record = remembered[1]
        if record is None or record.fqdn != fqdn or owned is None or record.id != owned.id:
            record = await port.dns_find(fqdn)
        adoptable = owned is None and self._adoptable(scope, fqdn, own_name)
        conflict = self._conflict(owned, record, fqdn, adoptable)
        if conflict:
            self._dns.pop(scope.uid, None)
            return conflict
        vip = scope.want.control_plane_vip
        if record is None:
            scope.set_annotation(DNS_PENDING, fqdn)  # before the create: a crash after it can claim it
            await scope.flush()
            if vip is not None:
                record = await self._reserve_vip(scope, port, fqdn)
            else:
                record = await port.dns_create(fqdn, cp.ips)
                self._own(scope, record)
                await scope.flush()  # the id at once: a crash now must not leave a record we cannot claim
                scope.event("Normal", "DNSRecordCreated", f"{fqdn} -> {sorted(cp.ips) or '(none yet)'}")
        elif owned is None:
            self._own(scope, record)  # adopted: pending, or the migration setting (see _adoptable)
            await scope.flush()
            scope.event("Normal", "DNSRecordAdopted", f"{fqdn} (MAAS id {record.id})")
        if vip is not None:
            # The record is the VIP's: it lists the reserved address, never the machines'. A crash between the
            # reservation and the annotation write is recovered from the record (adopted above as pending).
            address = scope.annotation(VIP) or (min(record.ips) if len(record.ips) == 1 else "")
            if address and scope.annotation(VIP) != address:
                scope.set_annotation(VIP, address)
                self._own(scope, record)
            if address and record.ips != frozenset({address}):
                await port.dns_update(record.id, frozenset({address}))
                record = DnsRecord(record.id, fqdn, frozenset({address}))
                scope.event("Normal", "DNSRecordUpdated", f"{fqdn} -> {address} (the control-plane VIP)")
        elif cp.ips and record.ips != (want := cp.ips | record.ips if cp.unknown else cp.ips):
            if not (record.ips - want and await self._cache_behind(scope, cp)):
                await port.dns_update(record.id, want)
                record = DnsRecord(record.id, fqdn, want)
                scope.event("Normal", "DNSRecordUpdated", f"{fqdn} -> {sorted(want)}")
        elif cp.count == 0 and record.ips and self._control_plane_gone(scope.uid):
            await port.dns_update(record.id, frozenset())  # no control plane left at all
            record = DnsRecord(record.id, fqdn, frozenset())
            scope.event(
                "Normal",
                "DNSRecordUpdated",
                f"{fqdn} -> [] (no control-plane MaasMachine for {CONTROL_PLANE_GONE_SECONDS:.0f} s)",
            )
        if cp.count or not record.ips:
            self._cp_gone.pop(scope.uid, None)
        self._dns[scope.uid] = (port.identity, record)
        identity.adopt(scope)  # the record we recorded, found through this identity: stamp an older object
        return record

    async def _cache_behind(self, scope: ClusterScope, cp: ControlPlane) -> bool:
        """Before a write that removes addresses from the record: whether the apiserver lists more
        control-plane MaasMachines of the cluster (not being deleted) than the watch cache shows. An operator
        just started, or the target of a ``clusterctl move``, may have seen only some of them; the record then
        keeps the addresses of the others (their events wake this MaasCluster once they are cached). One LIST
        per such write, none otherwise."""
        live = await self.kube.live_maasmachines(scope.namespace, scope.cluster_name, control_plane=True)
        return sum(1 for b in live if not (b.get("metadata") or {}).get("deletionTimestamp")) > cp.count

    def _control_plane_gone(self, uid: str) -> bool:
        """Whether the watch cache has shown no control-plane MaasMachine of MaasCluster ``uid`` for
        :data:`CONTROL_PLANE_GONE_SECONDS` (counted from this call when it is the first to see none)."""
        since = self._cp_gone.setdefault(uid, self._clock())
        return self._clock() - since >= CONTROL_PLANE_GONE_SECONDS

    async def _reserve_vip(self, scope: ClusterScope, port: MaasPort, fqdn: str) -> DnsRecord:
        """Reserve ``spec.controlPlaneVIP`` in MAAS with ``fqdn`` as its hostname: MAAS makes the DNS resource
        ``fqdn`` -> the address in the same call, so that record (this MaasCluster's own name, marked
        pending before the call) is the proof the reservation is ours after a crash; an address MAAS
        refuses shows in MAAS's own words and nothing is reserved."""
        vip = scope.want.control_plane_vip
        assert vip is not None
        try:
            address = await port.vip_reserve(fqdn, address=vip.address, subnet=vip.subnet)
            record = await port.dns_find(fqdn)
        except maas_errors.ApiError as exc:
            if isinstance(exc, maas_errors.UnauthorizedError) or (
                isinstance(exc, maas_errors.ServiceUnavailableError) and "No more IPs" not in exc.body
            ):
                raise  # the key or MAAS itself, not the address: said as for any MAAS call
            asked = vip.address or f"an address in {vip.subnet}"
            said = exc.maas_text or facts.maas_text(exc.body, exc.status)
            msg = f"MAAS refused to reserve {asked} for the control-plane VIP (HTTP {exc.status}): {said}"
            scope.set_condition(C.DNS_READY_CONDITION, False, C.VIP_UNAVAILABLE_REASON, msg)
            if scope.condition_reason(C.DNS_READY_CONDITION) != C.VIP_UNAVAILABLE_REASON:
                scope.event("Warning", C.VIP_UNAVAILABLE_REASON, msg)
            raise TransientError(C.VIP_UNAVAILABLE_REASON, msg, delay=30.0) from exc
        if record is None:
            raise TransientError(
                C.DNS_UPDATE_FAILED_REASON,
                f"MAAS reserved {address} with hostname {fqdn} but shows no DNS resource of that name",
                delay=15.0,
            )
        scope.set_annotation(VIP, address)
        self._own(scope, record)
        await scope.flush()  # the id and the address at once (a crash before: the pending name finds them)
        scope.event("Normal", "VIPReserved", f"{address} reserved in MAAS; {fqdn} -> {address}")
        return record

    async def _preferred(self, scope: ClusterScope) -> ps.PreferredSubnets:
        """``spec.preferredSubnets``, else the ConfigMap's (read only when the spec has none)."""
        spec = scope.want.preferred_subnets
        if spec:
            return ps.resolve(spec, None)
        return ps.resolve(None, await self.kube.get_configmap(scope.namespace, ps.CONFIGMAP_NAME))

    @staticmethod
    def _own(scope: ClusterScope, record: DnsRecord) -> None:
        """Record ``record`` as ours: the annotation (trusted, survives a move) and status (for people)."""
        scope.set_annotation(DNS_RECORD, OwnedRecord(record.id, record.fqdn).annotation())
        scope.set_annotation(DNS_PENDING, None)
        network = ClusterNetworkStatus(
            dns_name=record.fqdn, dns_record_id=record.id, vip=scope.annotation(VIP)
        )
        scope.set_status(network=network)

    @staticmethod
    def _conflict(
        owned: OwnedRecord | None, found: DnsRecord | None, fqdn: str, adoptable: bool
    ) -> str | None:
        """Why the record named ``fqdn`` must not be touched, or None when it is ours, to adopt, or absent.

        Ours: the id we recorded. Without a recorded id, only a record :meth:`_adoptable` allows (pending
        create, or the migration setting): a name alone is no proof."""
        if owned is not None and owned.fqdn != fqdn:
            return (
                f"spec.controlPlaneEndpoint.host is {fqdn} but this MaasCluster's DNS record is {owned.fqdn} "
                f"(MAAS id {owned.id}); capmaas does not move the endpoint to another record"
            )
        if found is None:
            return None
        if owned is not None and found.id == owned.id:
            return None
        if owned is None and adoptable:
            return None
        whose = "created by someone else" if owned is None else f"not the one capmaas created (id {owned.id})"
        migrate = ""
        if owned is None:
            migrate = (
                "; a MaasCluster from a release before capmaas recorded record ids adopts its record only "
                "with the one-time migration setting dns.adopt_records_by_name"
            )
        return (
            f"the MAAS DNS record {fqdn} (id {found.id}) already exists and is {whose}; capmaas writes only "
            "records it created: choose another spec.controlPlaneEndpoint.host, or delete that record"
            + migrate
        )

    async def _delete(self, scope: ClusterScope) -> Requeue:
        if CLUSTER_FINALIZER not in scope.finalizers:
            return Requeue()
        await self._load(scope)
        if self.handoff.moving_out(scope, scope.cluster, scope.cluster_name):
            scope.remove_finalizer(CLUSTER_FINALIZER)
            return Requeue()
        paused, why = is_paused(scope.body, scope.cluster)
        scope.set_paused_condition(paused, why)
        if paused:
            return Requeue()
        left = self.kube.list_maasmachines(scope.namespace, scope.cluster_name)
        # An empty cache is checked against the apiserver (one LIST per MaasCluster deletion): the
        # MaasMachines release their servers with this MaasCluster's credentials, so it must outlive them.
        if left or await self.kube.live_maasmachines(scope.namespace, scope.cluster_name, limit=1):
            what = f"{len(left)} MaasMachines" if left else "the MaasMachines the apiserver lists"
            scope.set_deletion(C.DELETING_REASON, f"waiting for {what} to go")
            # Look again soon rather than only when woken: the wake-up for "a MaasMachine went away" finds the
            # MaasCluster through the Cluster, which may already be gone (deleted first, or a namespace
            # deletion), and then this MaasCluster would sit until the resync interval (minutes).
            return Requeue(DELETE_RECHECK_SECONDS)
        await self._delete_record(scope)
        scope.remove_finalizer(CLUSTER_FINALIZER)
        return Requeue()

    async def _delete_record(self, scope: ClusterScope) -> None:
        """Delete the DNS record this MaasCluster created, and no other."""
        owned = OwnedRecord.parse(scope.annotation(DNS_RECORD))
        cep = scope.want.control_plane_endpoint
        host = (cep.host if cep else "") or (scope.annotation(DNS_PENDING) or "")  # created, spec not yet
        domain = scope.want.dns_domain or ""
        if CUSTOM_DNS_ANNOTATION in scope.annotations:
            return
        # No id recorded: only a record _adoptable allows (pending create, or the migration setting).
        own_name = dns_name(scope.cluster_name, scope.uid, domain)
        adopt = owned is None and bool(host) and self._adoptable(scope, host, own_name)
        if owned is None and not adopt:
            return
        fqdn = owned.fqdn if owned is not None else host
        port = await self._connect(scope, effective_ref(scope.body))
        if port is None:  # the record came from another identity: forgotten, nothing sent
            return
        with maas_step(f"deleting DNS record {fqdn}"):
            record = await port.dns_find(fqdn)
            if record is not None and (adopt or (owned is not None and record.id == owned.id)):
                await port.dns_delete(record.id)
                scope.event("Normal", "DNSRecordDeleted", f"{fqdn} (MAAS id {record.id})")
                if address := scope.annotation(VIP) or (
                    min(record.ips) if scope.want.control_plane_vip and len(record.ips) == 1 else ""
                ):
                    await port.vip_release(address)  # MAAS dropped it with the record; if not, now
                    scope.event("Normal", "VIPReleased", f"{address} released in MAAS")
            elif record is not None:
                scope.event(
                    "Warning",
                    C.DNS_RECORD_CONFLICT_REASON,
                    f"{fqdn} (MAAS id {record.id}) is not the record capmaas created; left alone",
                )
            self._dns.pop(scope.uid, None)
            self._cp_gone.pop(scope.uid, None)
