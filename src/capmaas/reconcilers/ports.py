"""The ports the reconcilers do I/O through: ``typing.Protocol``s, implemented by the operator
(Kubernetes) and by :mod:`capmaas.gateway` (MAAS), replaced by small fakes in unit tests.

Why ports: the reconcilers hold the domain rules (when to allocate, when to give up, what the status says) and
must be testable without kopf or an apiserver. Reads that the operator serves from its watch caches (owner
Machine, Cluster, sibling MaasMachines) are synchronous here on purpose: they never cost an API call, so the
reconcilers may read them freely on every pass. The one exception is :meth:`KubePort.read_unwatched`: an
owner the operator's watch filter keeps out of those caches, read from the apiserver on a cache miss.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlsplit

from capmaas import maas
from capmaas.api.v1beta1 import MaasMachineSpec

if TYPE_CHECKING:
    from capmaas.reconcilers.siblings import ZoneTally

#: A Kubernetes object as the apiserver returns it (apiVersion, kind, metadata, spec, status).
Body = Mapping[str, Any]

ObjectPlural = Literal["maasmachines", "maasclusters"]
MAASMACHINE: ObjectPlural = "maasmachines"
MAASCLUSTER: ObjectPlural = "maasclusters"
EventType = Literal["Normal", "Warning"]
CapiPlural = Literal["machines", "clusters"]


@dataclass(frozen=True)
class Unwatched:
    """A CAPI Machine or Cluster read from the apiserver because it lacks the label of the operator's watch
    filter, so the watch cache never holds it: ``label`` is what it should carry (``key=value``, ``key``)."""

    body: Body
    label: str


class NodePatchResult(enum.Enum):
    """What happened when we tried to put our providerID on a workload Node."""

    PATCHED = "patched"  # the Node had no providerID; it now has ours
    ALREADY_SET = "already-set"  # it already had exactly ours
    CONFLICT = "conflict"  # it has a different one; left alone
    NOT_FOUND = "not-found"  # no such Node (yet)
    UNREACHABLE = "unreachable"  # the workload apiserver did not answer
    REJECTED = "rejected"  # the kubeconfig is not trusted or not accepted; the text names the field


@dataclass(frozen=True, slots=True)
class NodePatch:
    """The outcome of :meth:`KubePort.set_node_provider_id`: what happened to the providerID, the Node's
    current providerID (or a short error text), and the labels the Node already had with another value
    (left as they were: a person or another controller set them)."""

    result: NodePatchResult
    current: str
    kept_labels: Mapping[str, str] = field(default_factory=dict)


class KubePort(Protocol):
    """Kubernetes reads (mostly from caches) and writes the reconcilers need."""

    def get_machine(self, namespace: str, name: str) -> Body | None:
        """The CAPI Machine from the watch cache."""
        ...

    def get_cluster(self, namespace: str, name: str) -> Body | None:
        """The CAPI Cluster from the watch cache."""
        ...

    def get_maascluster(self, namespace: str, name: str) -> Body | None:
        """A MaasCluster from the watch cache."""
        ...

    def get_template(self, namespace: str, name: str) -> Body | None:
        """A MaasMachineTemplate from the watch cache (node reuse reads its ``spec.nodeReuse``)."""
        ...

    async def read_unwatched(self, plural: CapiPlural, namespace: str, name: str) -> Unwatched | None:
        """After a cache miss of ``get_machine``/``get_cluster``: the object read from the apiserver if the
        operator's watch filter keeps it out of the cache. None without a watch filter, when the object does
        not exist, or when it carries the label (the watch brings it). May be served from a short-lived
        cache."""
        ...

    def maasmachines_naming(self, system_id: str) -> Sequence[Body]:
        """Every cached MaasMachine, in any namespace, whose ``spec.systemID`` is ``system_id`` (adoption's
        check that no other object holds the machine)."""
        ...

    def list_maasmachines(self, namespace: str, cluster_name: str) -> Sequence[Body]:
        """MaasMachines labelled ``cluster.x-k8s.io/cluster-name=<cluster_name>``, from the watch cache."""
        ...

    async def live_maasmachines(
        self, namespace: str, cluster_name: str, *, control_plane: bool = False, limit: int | None = None
    ) -> Sequence[Body]:
        """The MaasMachines labelled with ``cluster_name`` (and the control-plane label, if asked; the first
        ``limit``, if given) the apiserver lists now: a LIST, not the cache. For the decisions the cache's
        absence of an object would make wrongly: at start-up (or on a ``clusterctl move`` target) kopf may run
        a MaasCluster's handler before the MaasMachines' own watch filled the cache."""
        ...

    def zone_tally(self, namespace: str, cluster_name: str) -> ZoneTally:
        """What the zone spread counts of the same MaasMachines (:meth:`list_maasmachines`): kept up to date
        by the watch cache, so reading it does not walk the cluster. Read only, and at once (it changes)."""
        ...

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A Secret's decoded data (None when it does not exist). May be served from a short-lived cache."""
        ...

    async def read_secret_fresh(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A Secret's decoded data read now (bootstrap data: read once, at deploy time)."""
        ...

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """A ConfigMap's ``data`` (None when it does not exist). May be served from a short-lived cache."""
        ...

    async def patch(
        self, plural: ObjectPlural, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        """Merge-patch our object (``status=True``: the status subresource). Returns the new object, None if
        it is gone."""
        ...

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str, labels: Mapping[str, str]
    ) -> NodePatch:
        """Set ``spec.providerID`` of Node ``node_name`` in the workload cluster and add the ``labels`` it
        does not have, in one patch, never overwriting another providerID or a label set to another value. A
        Node with another providerID is not ours: nothing is written to it."""
        ...

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        """Post a Kubernetes Event on ``obj`` (fire and forget)."""
        ...

    async def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """A Namespace's labels (None when it does not exist). May be served from a short-lived cache."""
        ...

    # --- Cluster API IPAM (ipam.cluster.x-k8s.io/v1beta2), for the MaasMachine side of the contract ---------
    def get_ip_claim(self, namespace: str, name: str) -> Body | None:
        """An ``IPAddressClaim`` from the watch cache (every claim, whichever IPAM provider fulfils it)."""
        ...

    def get_ip_address(self, namespace: str, name: str) -> Body | None:
        """An ``IPAddress`` from the watch cache."""
        ...

    async def create_ip_claim(self, namespace: str, body: Mapping[str, Any]) -> Body | None:
        """Create an ``IPAddressClaim``; None when one of that name exists already (the caller reads the
        cache: it may be another object's)."""
        ...

    async def delete_ip_claim(self, namespace: str, name: str) -> None:
        """Delete an ``IPAddressClaim`` (its IPAM provider frees the address); gone already is fine."""
        ...


@dataclass(frozen=True)
class NamespaceAllowList:
    """The namespaces that may use the operator's default MAAS credentials (CAPV/CAPA's
    ``allowedNamespaces``): those named in ``names`` (``*``: every namespace) and those whose labels match
    ``selector`` (a Kubernetes label selector, e.g. ``tenant-tier=trusted``). Empty: no namespace."""

    names: frozenset[str] = frozenset()
    selector: str = ""


@dataclass(frozen=True)
class MaasCredentials:
    """Where and how to reach MAAS. ``api_key`` never appears in repr/str (it is never logged).

    ``insecure`` (no TLS verification) and ``allow_plaintext`` (an ``http://`` endpoint, whose requests carry
    the OAuth secret in the clear) are each identity's own opt-ins. ``namespaces`` is consulted for the
    operator's default credentials only (an identity Secret is namespace-local already)."""

    endpoint: str
    api_key: str = field(repr=False)
    ca_data: str | None = field(default=None, repr=False)
    insecure: bool = False
    source: str = "default"  # "Secret ns/name" or "default": for messages
    allow_plaintext: bool = False
    namespaces: NamespaceAllowList = field(default_factory=NamespaceAllowList, repr=False, compare=False)


def identity_fingerprint(endpoint: str, username: str) -> str:
    """Which MAAS identity a connection is: the endpoint (scheme and host folded to lower case, no trailing
    slash) and the MAAS user its key belongs to (``users/?op=whoami``), hashed. The same for a rotated key of
    the same user; different for another MAAS or another user of it (what a reference must not cross)."""
    u = urlsplit(endpoint.strip())
    where = f"{u.scheme.lower()}://{u.netloc.lower()}{u.path.rstrip('/')}"
    return hashlib.sha256(f"{where}\0{username}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BondRequest:
    """What ``create_bond`` is sent: the name, the parents' MAAS interface ids and the bond parameters."""

    name: str
    parents: tuple[int, ...]
    mode: str | None = None
    lacp_rate: str | None = None
    xmit_hash_policy: str | None = None
    mtu: int | None = None


@dataclass(frozen=True)
class DnsRecord:
    """A MAAS DNS resource, reduced to what the cluster reconciler needs."""

    id: int
    fqdn: str
    ips: frozenset[str]


class VmHostPort(Protocol):
    """VM hosts (pods) and composed machines of one MAAS endpoint and identity (the LXD provisioner's part of
    :class:`MaasPort`). Every answer that describes a machine is folded into the shared poller's snapshot, so
    the reconcile that follows needs no GET of its own."""

    async def list_vm_hosts(self) -> Sequence[maas.VmHost]:
        """``GET vm-hosts/``: every host with its total/used figures (410 on MAAS 4.0)."""
        ...

    async def host_machines(self, system_ids: Sequence[str]) -> dict[str, maas.Machine]:
        """The machines behind VM hosts: from the poller's snapshot where it has them, else one list call."""
        ...

    async def compose(self, host_id: int, request: maas.ComposeRequest) -> maas.ComposedMachine:
        """``POST vm-hosts/{id}/?op=compose``; the new machine is fetched into the snapshot by the poller."""
        ...

    async def find_by_hostname(self, hostname: str) -> Sequence[maas.Machine]:
        """Machines with exactly this hostname (the crash-recovery lookup of a composed VM)."""
        ...

    async def delete_machine(self, system_id: str) -> bool:
        """``DELETE machines/{id}/`` (a composed VM is decomposed); False when MAAS no longer knows it."""
        ...

    async def vms_on(self, host_name: str) -> Sequence[maas.Machine]:
        """The machines composed on the VM host ``host_name`` (``GET machines/?pod=``), whoever holds them."""
        ...

    async def delete_vm_host(self, host_id: int) -> bool:
        """``DELETE vm-hosts/{id}/`` without decompose; False when MAAS no longer knows it."""
        ...

    async def tag_vm_host(self, host_id: int, *, add: Sequence[str], remove: Sequence[str] = ()) -> None:
        """``op=add_tag`` / ``op=remove_tag`` on ``vm-hosts/{id}/``, one tag per call (admin)."""
        ...


class MaasPort(VmHostPort, Protocol):
    """One MAAS endpoint and identity: pooled client plus the shared machine poller (+ ``VmHostPort``)."""

    @property
    def endpoint(self) -> str: ...

    @property
    def identity(self) -> str:
        """:func:`identity_fingerprint` of this connection (from the ``whoami`` of its first connect)."""
        ...

    def watch(self, system_id: str, key: str) -> None:
        """Include ``system_id`` in the shared poll; changes wake the object identified by ``key``."""
        ...

    def unwatch(self, system_id: str) -> None: ...

    def snapshot(self, system_id: str) -> maas.Machine | None:
        """The latest state of a watched machine (poll or last write response); None if not known yet."""
        ...

    def is_gone(self, system_id: str) -> bool:
        """True when a poll that asked for ``system_id`` did not return it (deleted, or not visible)."""
        ...

    async def find_by_agent(self, agent_name: str) -> Sequence[maas.Machine]:
        """Machines currently allocated with ``agent_name`` (the crash-recovery lookup)."""
        ...

    async def find_for_release(self, agent_name: str, system_id: str) -> Sequence[maas.Machine]:
        """The machines held under ``agent_name``, as the deletion about to release ``system_id`` needs them
        (is it held there; what else to release): lookups of deletions under way together share list calls,
        and the answer is :meth:`find_by_agent`'s, or only ``system_id``'s machine when the shared answer
        proves no other machine is held under ``agent_name``."""
        ...

    async def allocate(
        self, constraints: maas.AllocateConstraints, *, agent_name: str, comment: str
    ) -> maas.Machine: ...

    def explain_empty(self, spec: MaasMachineSpec, zone: str | None) -> str | None:
        """After a 409 from allocate: which of ``spec``'s constraints (``zone``: the one asked) left no Ready
        machine, from the shared inventory's last listing (no MAAS request); None when it cannot tell."""
        ...

    async def deploy(self, system_id: str, request: maas.DeployRequest) -> maas.Machine: ...

    async def release(
        self,
        system_id: str,
        *,
        erase: bool,
        secure_erase: bool,
        quick_erase: bool,
        comment: str,
        scripts: Sequence[str] = (),
        force: bool = False,
    ) -> maas.Machine | None: ...

    async def mark_broken(self, system_id: str, *, comment: str) -> None: ...

    async def set_workload_annotations(self, system_id: str, annotations: Mapping[str, str]) -> maas.Machine:
        """``op=set_workload_annotations`` (the owner only; an empty value deletes the key), the answer
        folded into the poller's snapshot (:mod:`~capmaas.reconcilers.adoption`)."""
        ...

    async def power_on(self, system_id: str, *, comment: str) -> None: ...

    async def zones(self) -> Sequence[str]:
        """Zone names (cached per connection for a while: they change rarely)."""
        ...

    async def zones_in_use(self) -> Sequence[str]:
        """Names of the zones holding at least one machine this identity can see (MAAS shows a user the
        machines nobody else holds, and its own); cached like :meth:`zones`."""
        ...

    async def dns_find(self, fqdn: str) -> DnsRecord | None: ...

    async def dns_create(self, fqdn: str, ips: frozenset[str]) -> DnsRecord: ...

    async def dns_update(self, record_id: int, ips: frozenset[str]) -> None: ...

    async def dns_delete(self, record_id: int) -> None: ...

    async def vip_reserve(self, fqdn: str, *, address: str | None, subnet: str | None) -> str:
        """Reserve an address in MAAS's IPAM with ``fqdn`` as its hostname (MAAS then makes, or extends, the
        DNS resource ``fqdn`` listing it): ``address``, or a free one MAAS picks in ``subnet``. Returns the
        address."""
        ...

    async def vip_release(self, address: str) -> None:
        """Release this identity's reservation of ``address`` if MAAS still has it (deleting the DNS
        resource that was its only user already did)."""
        ...

    # --- static addresses (IPAM) ----------------------------------------------------------------------------
    async def subnets(self) -> Sequence[maas.Subnet]:
        """``GET subnets/`` (every subnet this identity can see)."""
        ...

    async def ip_ranges(self) -> Sequence[maas.IpRange]:
        """``GET ipranges/`` (dynamic and reserved ranges of every subnet)."""
        ...

    async def reserved_ips(self) -> Sequence[maas.ReservedIp]:
        """``GET reservedips/``: every address pinned to a MAC (any user may read them)."""
        ...

    async def pin_ip(self, ip: str, mac_address: str, *, comment: str) -> maas.ReservedIp:
        """``POST reservedips/`` (admin): pin ``ip`` to ``mac_address``; its AUTO link gets it at deploy."""
        ...

    async def unpin_ip(self, reserved_id: int) -> None:
        """``DELETE reservedips/{id}/`` (admin); an entry already gone is not an error."""
        ...

    # --- network and storage layout (before deploy, undone before release) -------------------------------
    async def read_machine(self, system_id: str) -> maas.Machine:
        """``GET machines/{id}/`` now (interfaces and block devices as MAAS has them this moment), folded
        into the poller's snapshot."""
        ...

    async def fabrics(self) -> Sequence[maas.Fabric]:
        """``GET fabrics/`` with their VLANs (a VLAN interface needs MAAS's VLAN id, not the tag)."""
        ...

    async def create_bond(self, system_id: str, bond: BondRequest) -> maas.Interface:
        """``op=create_bond`` (admin); MAAS clears the parents' links."""
        ...

    async def create_vlan(self, system_id: str, *, parent: int, vlan: int, mtu: int | None) -> maas.Interface:
        """``op=create_vlan`` (admin): ``vlan`` is MAAS's VLAN object id."""
        ...

    async def delete_interface(self, system_id: str, interface_id: int) -> None:
        """``DELETE nodes/{id}/interfaces/{iface}/`` (admin); gone already is not an error."""
        ...

    async def link_subnet(
        self, system_id: str, interface_id: int, *, mode: str, subnet: str, ip_address: str | None = None
    ) -> maas.Interface:
        """``op=link_subnet`` (admin) in ``mode`` (auto, dhcp, static, link_up) to ``subnet`` (a CIDR)."""
        ...

    async def format_disk(self, system_id: str, device_id: int, *, fstype: str) -> maas.BlockDevice:
        """``op=format`` on a block device (the owner may while Allocated)."""
        ...

    async def mount_disk(
        self, system_id: str, device_id: int, *, mount_point: str, mount_options: str | None
    ) -> maas.BlockDevice:
        """``op=mount`` on a formatted block device."""
        ...


class MaasConnector(Protocol):
    """Turns credentials into a (pooled) :class:`MaasPort`."""

    async def connect(self, credentials: MaasCredentials) -> MaasPort:
        """The pooled connection for these credentials; raises ``maas.MaasError`` for unusable ones."""
        ...


class Recorder(Protocol):
    """Metrics the reconcilers report (the operator backs this with Prometheus)."""

    def allocation_duration(self, seconds: float) -> None: ...

    def deploy_duration(self, seconds: float) -> None: ...

    def machine_phase(self, key: str, phase: str | None) -> None:
        """The current phase of MaasMachine ``key`` (None: forget it)."""
        ...

    def machine_adopted(self) -> None:
        """A MaasMachine adopted the machine an earlier allocate (whose answer was lost) left under its agent
        name."""
        ...

    def extra_machine_released(self) -> None:
        """A second machine found under a MaasMachine's agent name was released."""
        ...


class NullRecorder:
    """A :class:`Recorder` that records nothing (tests, tools)."""

    def allocation_duration(self, seconds: float) -> None:
        return None

    def deploy_duration(self, seconds: float) -> None:
        return None

    def machine_phase(self, key: str, phase: str | None) -> None:
        return None

    def machine_adopted(self) -> None:
        return None

    def extra_machine_released(self) -> None:
        return None
