"""The Kubernetes side of the reconcilers' ports: watch caches fed by kopf, writes through our own client.

Why our own client for writes and Secret reads (:mod:`capmaas.operator.kubehttp`, async, on the event loop):
kopf has no public API to patch arbitrary objects outside a handler's ``patch`` kwarg, our per-object loops
run outside handlers, and the synchronous ``kubernetes`` client on threads was about a tenth of the operator's
CPU at 1,000 machines (it is still used, in a small thread pool, for workload-cluster Nodes). Why caches for
reads: kopf already watches MaasMachines, MaasClusters, Machines and Clusters for us (``on.event``), so every
owner/Cluster/sibling lookup is a dict read, not a GET. Objects are stored only if their ``resourceVersion``
is not older than the stored one, and our own patch responses go into the store at once, so a reconcile never
acts on a version older than its own last write (which is what keeps a second ``allocate`` from ever
happening).

Secrets are not watched (there can be thousands); identity and kubeconfig Secrets are read with a short TTL
cache, bootstrap Secrets are read once, right before deploy.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import kopf
import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from capmaas.api import conditions as C
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import Body, EventType, NodePatchResult, ObjectPlural
from capmaas.reconcilers.scope import CLUSTER_NAME_LABEL

log = logging.getLogger(__name__)

GROUP = "infrastructure.cluster.x-k8s.io"
VERSION = "v1beta1"
T = TypeVar("T")


def _rv(body: Body) -> int:
    try:
        return int(body.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def object_key(plural: str, namespace: str, name: str) -> str:
    return f"{plural}/{namespace}/{name}"


class Store:
    """Latest known version of each watched object, keyed ``plural/namespace/name``."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Any]] = {}
        self._by_cluster: dict[tuple[str, str], set[str]] = {}
        self._tombstones: dict[str, None] = {}  # UIDs seen deleted (insertion-ordered, bounded)

    def put(self, plural: str, body: Mapping[str, Any]) -> bool:
        """Store ``body`` unless a newer version is stored or the object was seen deleted (a patch response
        can arrive after the DELETED event); returns whether it is news: a version not stored before.

        The watch event of our own patch carries the version its response already put here, so it is not
        news, and the caller need not wake the object's loop for it (a reconcile per own write would double
        the passes per machine for nothing)."""
        meta = body.get("metadata", {})
        if meta.get("uid") in self._tombstones:
            return False
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.delete(plural, meta.get("namespace", ""), meta.get("name", ""), uid=meta.get("uid"))
            return False
        key = object_key(plural, meta.get("namespace", ""), meta.get("name", ""))
        old = self._objects.get(key)
        if old is not None and old.get("metadata", {}).get("uid") == meta.get("uid"):
            old_rv, new_rv = _rv(old), _rv(body)
            if old_rv > new_rv:
                return False
            if old_rv == new_rv and old_rv:
                return False
        if "managedFields" in meta:  # never read here; it is most of a small object's size
            meta = {k: v for k, v in meta.items() if k != "managedFields"}
            body = {**body, "metadata": meta}
        self._objects[key] = dict(body)
        if plural == "maasmachines":
            self._index(key, old, body)
        return True

    def _index(self, key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        for body, add in ((old, False), (new, True)):
            if body is None:
                continue
            meta = body.get("metadata", {})
            cluster = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
            if cluster:
                bucket = self._by_cluster.setdefault((meta.get("namespace", ""), cluster), set())
                (bucket.add if add else bucket.discard)(key)

    def delete(self, plural: str, namespace: str, name: str, uid: str | None = None) -> None:
        key = object_key(plural, namespace, name)
        old = self._objects.pop(key, None)
        for u in (uid, (old or {}).get("metadata", {}).get("uid")):
            if u:
                self._tombstones[u] = None
        while len(self._tombstones) > 10000:
            del self._tombstones[next(iter(self._tombstones))]
        if plural == "maasmachines":
            self._index(key, old, None)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._objects.get(key)

    def find(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(object_key(plural, namespace, name))

    def cluster_members(self, namespace: str, cluster: str) -> list[str]:
        return sorted(self._by_cluster.get((namespace, cluster), ()))

    def values(self, plural: str) -> list[dict[str, Any]]:
        prefix = plural + "/"
        return [v for k, v in self._objects.items() if k.startswith(prefix)]


class KubeAdapter:
    """:class:`~capmaas.reconcilers.ports.KubePort` over the :class:`Store` and the ``kubernetes`` client."""

    def __init__(self, store: Store, http: KubeHttp, *, secret_ttl: float, threads: int = 4) -> None:
        self.store = store
        self._http = http
        self._ttl = secret_ttl
        self._secrets: dict[tuple[str, str], tuple[float, Mapping[str, bytes] | None]] = {}
        self._reading: dict[tuple[str, str], asyncio.Task[Mapping[str, bytes] | None]] = {}
        self._workload: dict[str, Any] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="capmaas-kube")
        self.writes = 0

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        await self._http.aclose()

    # --- cache reads -------------------------------------------------------------------------------------
    def get_machine(self, namespace: str, name: str) -> Body | None:
        return self.store.find("machines", namespace, name)

    def get_cluster(self, namespace: str, name: str) -> Body | None:
        return self.store.find("clusters", namespace, name)

    def get_maascluster(self, namespace: str, name: str) -> Body | None:
        return self.store.find("maasclusters", namespace, name)

    def list_maasmachines(self, namespace: str, cluster_name: str) -> Sequence[Body]:
        out = []
        for key in self.store.cluster_members(namespace, cluster_name):
            body = self.store.get(key)
            if body is not None:
                out.append(body)
        return out

    # --- secrets -----------------------------------------------------------------------------------------
    async def read_secret_fresh(
        self, namespace: str, name: str, *, priority: int = 1
    ) -> Mapping[str, bytes] | None:
        data: Mapping[str, bytes] | None
        try:
            secret = await self._http.get_secret(namespace, name, priority=priority)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise TransientError(
                    C.MAAS_UNREACHABLE_REASON,
                    f"reading Secret {name}: " + (f"HTTP {exc.status}" if exc.status else str(exc)),
                ) from exc
            data = None
        else:
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        self._secrets[(namespace, name)] = (time.monotonic(), data)
        return data

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        cached = self._secrets.get((namespace, name))
        if cached is not None and time.monotonic() - cached[0] < self._ttl:
            return cached[1]
        # One read per expiry, shared by every pass that asks meanwhile, and first in the write queue: the
        # credentials Secret gates every pass of a cluster's machines, so when its cache entry expired in a
        # burst, each pass queued its own GET behind hundreds of starting machines' writes (readiness lag).
        key = (namespace, name)
        task = self._reading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self.read_secret_fresh(namespace, name, priority=-1)
            )
            self._reading[key] = task
            task.add_done_callback(lambda t: self._read_done(key, t))
        return await asyncio.shield(task)

    def _read_done(self, key: tuple[str, str], task: asyncio.Task[Mapping[str, bytes] | None]) -> None:
        self._reading.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, so a read whose every waiter left is not logged as lost

    # --- writes ------------------------------------------------------------------------------------------
    async def patch(
        self, plural: ObjectPlural, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        try:
            new = await self._http.merge_patch(
                f"{GROUP}/{VERSION}", plural, namespace, name, body, status=status, done=_completes(body)
            )
        except KubeHttpError as exc:
            if exc.status == 404:
                self.store.delete(plural, namespace, name)
                return None
            if exc.status == 409:
                raise TransientError(
                    "Conflict", f"{plural}/{name} changed meanwhile; retrying", delay=1
                ) from exc
            detail = f"HTTP {exc.status}" if exc.status else str(exc)
            raise TransientError("KubernetesError", f"patching {plural}/{name}: {detail}") from exc
        self.writes += 1
        self.store.put(plural, new)
        return new

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str
    ) -> tuple[NodePatchResult, str]:
        digest = hashlib.sha256(kubeconfig).hexdigest()
        core = self._workload.get(digest)
        if core is None:
            try:
                config = yaml.safe_load(kubeconfig)
                client = kubernetes.config.new_client_from_config_dict(config)  # type: ignore[no-untyped-call]
            except Exception as exc:  # a garbled kubeconfig must not crash the loop
                return NodePatchResult.UNREACHABLE, f"bad kubeconfig: {type(exc).__name__}"
            core = kubernetes.client.CoreV1Api(client)
            self._workload[digest] = core

        def call() -> tuple[NodePatchResult, str]:
            try:
                node = core.read_node(node_name, _request_timeout=10)
            except ApiException as exc:
                if exc.status == 404:
                    return NodePatchResult.NOT_FOUND, ""
                return NodePatchResult.UNREACHABLE, f"HTTP {exc.status}"
            current = (node.spec.provider_id if node.spec else None) or ""
            if current == provider_id:
                return NodePatchResult.ALREADY_SET, current
            if current:
                return NodePatchResult.CONFLICT, current
            core.patch_node(node_name, {"spec": {"providerID": provider_id}}, _request_timeout=10)
            return NodePatchResult.PATCHED, provider_id

        try:
            return await self._run(call)
        except Exception as exc:  # connection refused, TLS, timeouts: the workload cluster is not up yet
            return NodePatchResult.UNREACHABLE, type(exc).__name__

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        try:
            kopf.event(dict(obj), type=type, reason=reason, message=message[:1000])  # type: ignore[arg-type]
        except LookupError:  # outside kopf's context (unit use): log only
            log.info("event %s %s: %s", type, reason, message)


def _completes(body: Mapping[str, Any]) -> bool:
    """A status write that finishes an object's provisioning (``ready: true``): it goes first in the write
    queue, since CAPI waits on it and finishing in-flight work before starting more bounds the lag."""
    status = body.get("status")
    return isinstance(status, Mapping) and status.get("ready") is True
