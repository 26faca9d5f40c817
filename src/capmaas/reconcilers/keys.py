"""Every annotation, label and finalizer name the reconcilers share, and the providerID scheme: one definition
each, in a module that imports nothing (constants left in an orchestrator are the usual cause of import
cycles).

Condition types and reasons are part of the API and live in :mod:`capmaas.api.conditions`.

Annotations of our own are written under :data:`ANNOTATION_PREFIX`; the short names below are what
``ObjectScope.annotation``/``set_annotation`` take.
"""

from __future__ import annotations

# --- finalizers ------------------------------------------------------------------------------------------
MACHINE_FINALIZER = "maasmachine.infrastructure.cluster.x-k8s.io"
CLUSTER_FINALIZER = "maascluster.infrastructure.cluster.x-k8s.io"

# --- Cluster API's own names -----------------------------------------------------------------------------
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
MANAGED_BY_ANNOTATION = "cluster.x-k8s.io/managed-by"
DELETE_FOR_MOVE_ANNOTATION = "clusterctl.cluster.x-k8s.io/delete-for-move"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
#: The Go provider's: the control-plane endpoint is given, capmaas manages no DNS record for it.
CUSTOM_DNS_ANNOTATION = "spectrocloud.com/custom-dns-provided"

# --- labels on workload Nodes (set with the providerID; never over a value someone else set) ---------------
ZONE_LABEL = "topology.kubernetes.io/zone"  # the MAAS zone
REGION_LABEL = "topology.kubernetes.io/region"  # MaasCluster spec.region, else the MAAS endpoint's host
POOL_LABEL = "capmaas.infrastructure.cluster.x-k8s.io/pool"  # the MAAS resource pool
MACHINE_TYPE_LABEL = "capmaas.infrastructure.cluster.x-k8s.io/machine-type"  # baremetal or lxd
VM_HOST_LABEL = "capmaas.infrastructure.cluster.x-k8s.io/vm-host"  # an LXD VM's MAAS VM host

# --- our annotations (short names, under ANNOTATION_PREFIX) ----------------------------------------------
ANNOTATION_PREFIX = "capmaas.infrastructure.cluster.x-k8s.io/"
#: Written before a bare-metal ``allocate``: a pass that finds it without a system ID looks the UID up first.
ALLOCATING = "allocating"
#: When the deploy was requested (epoch seconds): the deploy timeout counts from it.
DEPLOY_STARTED = "deploy-started"
#: Consecutive allocation failures (no machine available): the allocation backoff's count.
FAILURES = "failures"
#: After an allocation failure: ``<epoch seconds>@<metadata.generation>``, when the next allocate may be sent.
#: A pass woken earlier (a CAPI Machine update, the MaasCluster) sends nothing to MAAS until then, unless the
#: spec changed since (another generation).
ALLOCATE_AFTER = "allocate-after"
#: Where the machine's zone came from, written at the first allocation: ``user`` (the MaasMachine as created
#: or ``Machine.spec.failureDomain``: kept on every replacement), ``operator`` (the spread rule chose it) or
#: ``maas`` (no zone was asked): both of these may change on a replacement, although ``spec.failureDomain``
#: (and, by CAPI's copy, the Machine's) then holds the zone we got.
ZONE_SOURCE = "zone-source"
ZONE_FROM_USER = "user"
ZONE_FROM_OPERATOR = "operator"
ZONE_FROM_MAAS = "maas"
#: The MAAS ``agent_name`` the machine is held under: the UID at allocation. A ``clusterctl move`` recreates
#: the MaasMachine with a new UID but keeps its annotations, so this is how the target still knows it is ours.
AGENT_NAME = "agent-name"
#: MAAS refused our deploy request (image, kernel, user data): a digest of the deploy inputs it refused. No
#: machine is allocated while they are unchanged (:meth:`capmaas.reconcilers.lifecycle.Lifecycle.refused`).
DEPLOY_REFUSED = "deploy-refused"
#: The system ID being given back (see :mod:`capmaas.reconcilers.baremetal`).
REPLACING = "replacing"
#: The UID of the MaasRemediation holding the server (power cycle, redeploy): the MaasMachine sends nothing
#: to MAAS meanwhile (:mod:`capmaas.reconcilers.remediation`).
REMEDIATION = "remediation"
#: The system ID of the Deployed machine this MaasMachine adopts (``spec.adopt``), written before capmaas puts
#: its marker on the machine's MAAS workload annotations and kept while it holds the machine: the durable
#: record that ownership checks of this object go by the marker, not by the agent name
#: (:mod:`capmaas.reconcilers.adoption`).
ADOPTED = "adopted"
#: Node reuse (:mod:`capmaas.reconcilers.reuse`). On a MaasCluster: the servers released without erase for
#: its MachineDeployments/control planes, as a JSON list (owner, system ID, MAAS identity, time), bounded.
REUSABLE = "reusable-machines"
#: On a MaasMachine being deleted: the owner (``MachineDeployment/<name>``) its server is released for.
REUSE_FOR = "reuse-for"
#: On a new MaasMachine: the recorded server it asked MAAS for was taken or gone; no more waiting for one.
REUSE_TRIED = "reuse-tried"
#: The addresses pinned (or about to be) to the held server's NICs with MAAS ``reservedips/``, as
#: ``ip@mac`` joined by commas; written before the pins are sent, so a crash leaves them known; cleared with
#: the release (:mod:`capmaas.reconcilers.addresses`).
PINNED = "pinned-ips"
#: Consecutive servers given back because their addresses or layout were refused before deploy: the backoff's
#: count (``ALLOCATE_AFTER`` holds the time), cleared once a server took everything.
PREPARE_REFUSALS = "prepare-refusals"
#: The bonds and VLAN interfaces capmaas made on the held server and the links their NICs had, as JSON;
#: written before each create and cleared with the release (:mod:`capmaas.reconcilers.layout`).
LAYOUT_MADE = "layout-made"
#: Written before an LXD compose (the VM host's id): a pass that finds it without a system ID looks the VM up.
COMPOSING = "composing"
#: When the delete of an LXD VM was last requested (epoch seconds).
DECOMPOSING = "decomposing"
#: The id of the VM host an LXD machine was placed on.
HOST_ID_ANNOTATION = "lxd-host-id"
#: On a MaasCluster: ``<MAAS id>/<fqdn>`` of the DNS resource capmaas created for it (also shown in
#: ``status.network``). clusterctl move restores no status but keeps annotations: this is how the moved
#: MaasCluster (new UID) knows its record. The admission policy keeps tenants from writing it.
DNS_RECORD = "dns-record"
#: On a MaasCluster, written before the DNS record is created: the fqdn asked for. A pass that finds it
#: without ``dns-record`` (a crash between the create and the id write) adopts the record of that name.
DNS_PENDING = "dns-record-pending"
#: On a MaasCluster with ``spec.controlPlaneVIP``: the address capmaas reserved in MAAS (reserved with the
#: DNS record's name as its hostname, so the record - ``dns-record`` - is the proof it is this cluster's).
VIP = "vip"
#: The MAAS identity the object's references came from (:mod:`capmaas.reconcilers.identity`): a fingerprint of
#: the endpoint and the MAAS user ``users/?op=whoami`` named, written in the same patch as any reference
#: (:data:`BOUND_ANNOTATIONS`, ``spec.systemID``/``spec.providerID``). A reference is acted on only while the
#: current credentials have this fingerprint.
IDENTITY = "identity"
#: Which credentials that identity was reached with: ``Secret/<name>`` (an identity Secret of the namespace)
#: or ``default`` (the operator's). On a MaasCluster: the identity its machines use, changed only once no
#: reference is held under it; on a MaasMachine: what a deletion uses once its MaasCluster is gone.
IDENTITY_REF = "identity-ref"
#: The annotations that name something in one MAAS (ids, names, marks of a request in doubt): bound to
#: :data:`IDENTITY`.
BOUND_ANNOTATIONS = frozenset(
    {
        ALLOCATING,
        AGENT_NAME,
        ADOPTED,
        REPLACING,
        COMPOSING,
        DECOMPOSING,
        HOST_ID_ANNOTATION,
        DNS_RECORD,
        DNS_PENDING,
        VIP,
    }
)
#: The annotations that close a crash window: a write that sets or clears one carries the resourceVersion the
#: pass read (:meth:`capmaas.reconcilers.scope.ObjectScope.flush`), so a writer acting on a stale copy of the
#: object (a replica that lost the Lease, a cache behind the apiserver) gets 409 instead of going on.
GUARDED_ANNOTATIONS = frozenset(
    {
        ALLOCATING,
        AGENT_NAME,
        ADOPTED,
        REPLACING,
        DEPLOY_STARTED,
        DEPLOY_REFUSED,
        COMPOSING,
        DECOMPOSING,
        HOST_ID_ANNOTATION,
    }
)

# --- providerIDs -----------------------------------------------------------------------------------------
BARE_METAL_SCHEME = "maas"
LXD_SCHEME = "maas-lxd"


def provider_id(scheme: str, zone: str, system_id: str) -> str:
    """``<scheme>://<zone>/<system ID>``: ``maas://`` for a bare-metal machine, ``maas-lxd://`` for a VM."""
    return f"{scheme}://{zone}/{system_id}"
