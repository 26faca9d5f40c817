"""Playing Cluster API core's part: the objects CAPI's controllers would create, in the order they would.

``make demo`` and the e2e tests run the real CAPI core manager; the benchmark (whose thousand Machines would
measure CAPI rather than capmaas) has :class:`Capi` do its share for one cluster:
- the Cluster (``cluster.x-k8s.io/v1beta2``) whose ``infrastructureRef`` names the MaasCluster, the
  MaasCluster owned by it, and the identity Secret it references (``MAAS_ENDPOINT``, ``MAAS_API_KEY``);
- once the MaasCluster reports ready, the Cluster's ``status.initialization.infrastructureProvisioned``
  (CAPI's cluster controller copies it from the infrastructure object);
- per machine: the Machine (labels, ``spec.bootstrap.dataSecretName``), the bootstrap-data Secret the
  bootstrap provider would write (cloud-config, owned by the Machine), and the MaasMachine it owns;
- deletion in CAPI's order: the infrastructure machines first (the Machine controller deletes its
  ``infrastructureRef`` and waits for it: our finalizer, MAAS releases), then the Machines and their bootstrap
  Secrets, then the MaasCluster (its DNS record goes), then the Cluster. This is done explicitly rather than
  left to the garbage collector, which only notices CRDs created after it started on its next discovery
  resync (up to 30 s later).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from capmaas_dev.demo import manifests as M
from capmaas_dev.demo.kube import CLUSTERS, MAASCLUSTERS, MAASMACHINES, MACHINES, Kube

T = TypeVar("T")


class CapiError(RuntimeError):
    """A step of CAPI's part did not happen in time."""


@dataclass(frozen=True)
class MachineSpec:
    """One machine of the sample cluster and the MaasMachine constraints it asks for."""

    name: str
    control_plane: bool
    min_cpu: int = 2
    min_memory: int = 4096
    tags: tuple[str, ...] = ()
    resource_pool: str | None = None
    lxd_disk_gb: int | None = None  # set: an LXD VM with this root disk instead of a bare-metal machine
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        return "control-plane" if self.control_plane else "worker"


class Capi:
    """CAPI core for one cluster named ``cluster`` in ``namespace``."""

    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube, self.namespace, self.cluster = kube, namespace, cluster
        self.cluster_uid = ""

    @property
    def identity(self) -> str:
        return f"{self.cluster}-maas-identity"

    def create_cluster(
        self, maas_endpoint: str, maas_api_key: str, *, allow_plaintext_http: bool = False
    ) -> None:
        ns = self.namespace
        secret = M.identity_secret(
            self.identity, ns, maas_endpoint, maas_api_key, allow_plaintext_http=allow_plaintext_http
        )
        self.kube.create_secret(secret)
        created = self.kube.create(CLUSTERS, M.cluster(self.cluster, ns))
        self.cluster_uid = created["metadata"]["uid"]
        self.kube.create(
            MAASCLUSTERS,
            M.maascluster(self.cluster, ns, identity=self.identity, cluster_uid=self.cluster_uid),
        )

    def wait_infrastructure(
        self, timeout: float, *, check: Callable[[], None] = lambda: None, interval: float = 0.25
    ) -> dict[str, Any]:
        """Wait for ``MaasCluster.status.ready`` and ``spec.controlPlaneEndpoint``, then mark the Cluster's
        infrastructure provisioned (CAPI copies the endpoint from there, so it wants both).

        ``check`` runs every pass (the caller raises there if the operator died). Returns the MaasCluster.
        """
        deadline = time.monotonic() + timeout
        while True:
            check()
            mc = self.kube.get(MAASCLUSTERS, self.namespace, self.cluster)
            # The operator writes status before spec in a pass: ready can show a moment before the endpoint.
            endpoint = ((mc or {}).get("spec") or {}).get("controlPlaneEndpoint") or {}
            if mc is not None and (mc.get("status") or {}).get("ready") and endpoint.get("host"):
                break
            if time.monotonic() > deadline:
                why = condition_message(mc, "Ready") if mc else "not found"
                raise CapiError(f"MaasCluster {self.cluster} not ready after {timeout:.0f}s: {why}")
            time.sleep(interval)
        self.kube.patch_status(
            CLUSTERS,
            self.namespace,
            self.cluster,
            {"status": {"initialization": {"infrastructureProvisioned": True}}},
        )
        return mc

    def create_machine(self, spec: MachineSpec) -> None:
        """Machine, then its bootstrap Secret (owned by it), then the MaasMachine (owned by it)."""
        self.create_maasmachine(spec, self.create_owner(spec))

    def create_owner(self, spec: MachineSpec) -> str:
        """The Machine and its bootstrap Secret; returns the Machine's UID (the MaasMachine's owner)."""
        ns, secret = self.namespace, f"{spec.name}-bootstrap"
        machine = M.machine(
            spec.name,
            ns,
            self.cluster,
            control_plane=spec.control_plane,
            bootstrap=secret,
            cluster_uid=self.cluster_uid or None,
        )
        machine["metadata"]["labels"].update(spec.extra_labels)
        uid = str(self.kube.create(MACHINES, machine)["metadata"]["uid"])
        self.kube.create_secret(
            M.bootstrap_secret(
                secret, ns, self.cluster, M.cloud_config(spec.name), machine_owner=(spec.name, uid)
            )
        )
        return uid

    def create_maasmachine(self, spec: MachineSpec, machine_uid: str) -> None:
        self.kube.create(MAASMACHINES, self.maasmachine(spec, machine_uid))

    def maasmachine(self, spec: MachineSpec, machine_uid: str) -> dict[str, Any]:
        mm = M.maasmachine(
            spec.name,
            self.namespace,
            self.cluster,
            control_plane=spec.control_plane,
            machine_uid=machine_uid,
            min_cpu=spec.min_cpu,
            min_memory=spec.min_memory,
            tags=list(spec.tags) or None,
            resource_pool=spec.resource_pool,
            lxd_config=None if spec.lxd_disk_gb is None else {"storage": {"size": spec.lxd_disk_gb}},
        )
        mm["metadata"]["labels"].update(spec.extra_labels)
        return mm

    def create_machines(self, specs: Iterable[MachineSpec], *, threads: int = 1) -> None:
        parallel(self.create_machine, specs, threads)

    def delete_machines(self, names: Iterable[str]) -> None:
        """What the Machine controller does first on delete: delete the infrastructure machine."""
        for name in names:
            self.kube.delete(MAASMACHINES, self.namespace, name)

    def delete_rest(self, names: Iterable[str]) -> None:
        """Once the MaasMachines are gone: Machines, bootstrap Secrets, the MaasCluster, the Cluster, the
        identity Secret (the MaasCluster's finalizer still needs it while the DNS record is removed)."""
        for name in names:
            self.kube.delete(MACHINES, self.namespace, name)
            self.kube.delete_secret(self.namespace, f"{name}-bootstrap")
        self.kube.delete(MAASCLUSTERS, self.namespace, self.cluster)

    def finish_delete(self) -> bool:
        """Delete the Cluster and the identity once the MaasCluster is gone; True when all is gone."""
        if self.kube.get(MAASCLUSTERS, self.namespace, self.cluster) is not None:
            return False
        self.kube.delete(CLUSTERS, self.namespace, self.cluster)
        self.kube.delete_secret(self.namespace, self.identity)
        return self.kube.get(CLUSTERS, self.namespace, self.cluster) is None


def parallel(fn: Callable[[T], object], items: Iterable[T], threads: int) -> None:
    """``fn`` over ``items`` on ``threads`` threads (in order when 1); the first exception is raised."""
    items = list(items)
    if threads <= 1:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="capi") as pool:
        for fut in [pool.submit(fn, item) for item in items]:
            fut.result()


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


def condition_message(obj: dict[str, Any] | None, type_: str) -> str:
    c = condition(obj, type_)
    if c is None:
        return f"no {type_} condition yet"
    return f"{type_}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}".strip()
