"""The Kubernetes side of the reconcilers' ports: watch caches fed by kopf, writes through our own client.

Why our own client for writes and Secret reads (:mod:`capmaas.operator.kubehttp`, async, on the event loop):
kopf has no public API to patch arbitrary objects outside a handler's ``patch`` kwarg, our per-object loops
run outside handlers, and the synchronous ``kubernetes`` client on threads cost a noticeable share of the
operator's CPU at scale (figures: docs/benchmarks/README.md). The workload-cluster Node patch uses the same
async client. Why caches for reads: kopf already watches MaasMachines, MaasClusters, Machines and Clusters for
us (``on.event``), so every owner/Cluster/sibling lookup is a dict read, not a GET. (Under a watch filter
the Machine and Cluster watches carry it as a label selector; an owner without the label is read by a GET
that is kept :data:`UNWATCHED_TTL` seconds, see :meth:`KubeAdapter.read_unwatched`.) Objects are stored
only if their ``resourceVersion`` is not older than the stored one, and our own patch responses go into the
store at once, so a reconcile never acts on a version older than its own last write (which is what keeps a
second ``allocate`` from ever happening).

Secrets are not watched (there can be thousands). Identity and kubeconfig Secrets are read through a bounded
cache whose entries expire after ``secret_ttl`` (:class:`~capmaas.operator.ttlcache.TtlLru`); bootstrap
Secrets (join tokens, certificates) are read when needed and never kept. The preferred-subnets ConfigMap is
read through a cache of the same kind. Workload clients are cached the same
way and closed when they leave the cache.

Trust: a workload kubeconfig is used only when it comes from CAPI's kubeconfig Secret of the
cluster (type ``cluster.x-k8s.io/secret``, labelled ``cluster.x-k8s.io/cluster-name=<cluster>``, named
``<cluster>-kubeconfig``) and passes :func:`~capmaas.operator.kubeconfig.parse_kubeconfig`: inline
credentials only, so a tenant's kubeconfig can neither run a command in the operator nor make it read a file.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from capmaas.api import conditions as C
from capmaas.operator.events import BURST, EventRecorder, cluster_object
from capmaas.operator.kubeconfig import KubeconfigRejected, WorkloadKubeconfig, parse_kubeconfig
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError, Retries, Target
from capmaas.operator.ttlcache import TtlLru
from capmaas.reconcilers.errors import ConflictError, TransientError
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL
from capmaas.reconcilers.ports import (
    MAASMACHINE,
    Body,
    CapiPlural,
    EventType,
    NodePatch,
    NodePatchResult,
    ObjectPlural,
    Unwatched,
)
from capmaas.reconcilers.siblings import ZoneTally

log = logging.getLogger(__name__)

GROUP = "infrastructure.cluster.x-k8s.io"
VERSION = "v1beta1"
TEMPLATES = "maasmachinetemplates"
#: The type CAPI gives the Secrets it writes (kubeconfig, CA, ...): ``ClusterSecretType`` in ``util/secret``.
CAPI_SECRET_TYPE = "cluster.x-k8s.io/secret"
KUBECONFIG_SUFFIX = "-kubeconfig"
#: Secrets (identity, kubeconfig) and workload clients kept at most; the least recently used go first.
SECRET_CACHE_SIZE = 1024
WORKLOAD_CLIENT_CACHE_SIZE = 256
#: Seconds a workload client (its TLS session and parsed credentials) is kept after it was made.
WORKLOAD_CLIENT_TTL = 300.0
WORKLOAD_TIMEOUT = 10.0
#: The CAPI API version owners are read with when the watch filter keeps them out of the cache.
CAPI_API = "cluster.x-k8s.io/v1beta2"
#: Cluster API IPAM: claims and addresses as the operator caches them (store plurals) and writes them.
IPAM_API = "ipam.cluster.x-k8s.io/v1beta2"
IP_CLAIMS = "ipaddressclaims"
IP_ADDRESSES = "ipaddresses"
#: Seconds an owner read outside the watch cache (or its absence) is kept: a resync of many objects that share
#: it (a Cluster) is one GET, not one each.
UNWATCHED_TTL = 5.0


@dataclasses.dataclass(frozen=True)
class SecretOrigin:
    """Which Secret a value was read from, and what the Secret says about itself."""

    namespace: str
    name: str
    type: str
    labels: Mapping[str, str]


class SecretValue(bytes):
    """A Secret's data value that remembers its :class:`SecretOrigin`: the Node step gets only the kubeconfig
    bytes through the port, and must still know whether they came from a Secret it trusts."""

    origin: SecretOrigin

    def __new__(cls, data: bytes, origin: SecretOrigin) -> SecretValue:
        value = super().__new__(cls, data)
        value.origin = origin
        return value


def trust_problem(kubeconfig: bytes) -> str | None:
    """Why ``kubeconfig`` does not come from CAPI's kubeconfig Secret of its cluster (None: it does)."""
    origin = kubeconfig.origin if isinstance(kubeconfig, SecretValue) else None
    if origin is None:
        return "the kubeconfig was not read from a Secret"
    where = f"Secret {origin.namespace}/{origin.name}"
    if origin.type != CAPI_SECRET_TYPE:
        return f"{where}: field type is {origin.type or 'empty'!r}; only {CAPI_SECRET_TYPE!r} is trusted"
    cluster = origin.name.removesuffix(KUBECONFIG_SUFFIX)
    label = origin.labels.get(CLUSTER_NAME_LABEL)
    if not origin.name.endswith(KUBECONFIG_SUFFIX) or label != cluster:
        return f"{where}: field metadata.labels[{CLUSTER_NAME_LABEL}] must be {cluster!r}, is {label!r}"
    return None


@dataclasses.dataclass
class _Workload:
    """A parsed workload kubeconfig and its client (or why it was refused)."""

    client: KubeHttp | None
    rejected: str | None = None


def parse_watch_filter(watch_filter: str | None) -> tuple[str, str | None] | None:
    """``key=value`` → ``(key, value)``; ``key`` → ``(key, None)`` (the label present); None → no filter."""
    if not watch_filter:
        return None
    key, sep, value = watch_filter.partition("=")
    return key.strip(), value.strip() if sep else None


def carries_label(body: Body, label: tuple[str, str | None]) -> bool:
    """Whether ``body`` matches a parsed watch filter."""
    key, value = label
    labels = (body.get("metadata") or {}).get("labels") or {}
    return key in labels and (value is None or labels[key] == value)


def _rv(body: Body) -> int:
    try:
        return int(body.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def object_key(plural: str, namespace: str, name: str) -> str:
    return f"{plural}/{namespace}/{name}"


def without_managed_fields(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` without ``managedFields``: capmaas never reads them, and they are most of a small object's
    size (what the cache would hold, what a parse would deep-copy)."""
    if "managedFields" not in meta:
        return meta
    return {k: v for k, v in meta.items() if k != "managedFields"}


def kube_failure(doing: str, exc: KubeHttpError) -> TransientError:
    """A Kubernetes API error as a retryable outcome that says what was being done."""
    detail = f"HTTP {exc.status}: {exc}" if exc.status else str(exc)
    return TransientError("KubernetesError", f"{doing}: {detail}")


async def create_cached(
    http: KubeHttp, store: Store, api: str, plural: str, namespace: str, *, body: Mapping[str, Any]
) -> Body | None:
    """Create ``body`` and cache the answer; None when the object exists already (409)."""
    try:
        new = await http.create_object(api, plural, namespace, body)
    except KubeHttpError as exc:
        if exc.status == 409:
            return None
        name = (body.get("metadata") or {}).get("name")
        raise kube_failure(f"creating {plural}/{name}", exc) from exc
    store.put(plural, new)
    return new


async def delete_if_present(http: KubeHttp, api: str, plural: str, namespace: str, name: str) -> bool:
    """Delete the object; False when it was gone already (404)."""
    try:
        await http.delete_object(api, plural, namespace, name)
    except KubeHttpError as exc:
        if exc.status == 404:
            return False
        raise kube_failure(f"deleting {plural}/{name}", exc) from exc
    return True


async def patch_refused(
    exc: KubeHttpError,
    store: Store,
    plural: str,
    namespace: str,
    name: str,
    *,
    reread: Callable[[Any, str, str], Awaitable[object]],
) -> None:
    """A merge patch the apiserver refused. 404: the object is gone (dropped from the cache; the caller
    answers None). 409: someone wrote it since it was read: read again (``reread``) and
    :class:`~capmaas.reconcilers.errors.ConflictError`. Anything else: a retryable outcome."""
    if exc.status == 404:
        store.delete(plural, namespace, name)
        return
    if exc.status == 409:
        await reread(plural, namespace, name)
        raise ConflictError(f"{plural}/{name} changed since it was read; retrying") from exc
    raise kube_failure(f"patching {plural}/{name}", exc) from exc


class Store:
    """Latest known version of each watched object, keyed ``plural/namespace/name``."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Any]] = {}
        self._by_cluster: dict[tuple[str, str], set[str]] = {}
        self._zones: dict[tuple[str, str], ZoneTally] = {}  # the same members, as the zone spread counts them
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
        if "managedFields" in meta:
            body = {**body, "metadata": without_managed_fields(meta)}
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
                where = (meta.get("namespace", ""), cluster)
                bucket = self._by_cluster.setdefault(where, set())
                tally = self._zones.get(where)
                if tally is None:
                    tally = self._zones[where] = ZoneTally()
                if add:
                    bucket.add(key)
                    tally.put(key, body)
                else:
                    bucket.discard(key)
                    tally.drop(key)

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

    def forget(self, plural: str, namespace: str, name: str) -> None:
        """Drop an object, unlike :meth:`delete` leaving no tombstone: stored again if it comes back (a CAPI
        object that lost the watch filter's label and got it again)."""
        key = object_key(plural, namespace, name)
        old = self._objects.pop(key, None)
        if plural == "maasmachines":
            self._index(key, old, None)

    def counts(self) -> dict[str, int]:
        """Objects stored, by plural."""
        out: dict[str, int] = {}
        for key in self._objects:
            plural = key.split("/", 1)[0]
            out[plural] = out.get(plural, 0) + 1
        return out

    def get(self, key: str) -> dict[str, Any] | None:
        return self._objects.get(key)

    def find(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(object_key(plural, namespace, name))

    def cluster_members(self, namespace: str, cluster: str) -> list[str]:
        return sorted(self._by_cluster.get((namespace, cluster), ()))

    def zone_tally(self, namespace: str, cluster: str) -> ZoneTally:
        """The cluster's MaasMachines as the zone spread counts them (an empty tally for none)."""
        return self._zones.get((namespace, cluster)) or ZoneTally()

    def values(self, plural: str) -> list[dict[str, Any]]:
        prefix = plural + "/"
        return [v for k, v in self._objects.items() if k.startswith(prefix)]


class KubeAdapter:
    """:class:`~capmaas.reconcilers.ports.KubePort` over the :class:`Store` and :class:`KubeHttp`."""

    def __init__(
        self,
        store: Store,
        http: KubeHttp,
        *,
        secret_ttl: float,
        secret_cache_size: int = SECRET_CACHE_SIZE,
        workload_cache_size: int = WORKLOAD_CLIENT_CACHE_SIZE,
        workload_ttl: float = WORKLOAD_CLIENT_TTL,
        watch_filter: str | None = None,
        events_level: int = logging.INFO,
        events_burst: int = BURST,
    ) -> None:
        self.store = store
        self._http = http
        #: The watch filter as (label key, value or None for "present"); None: every object is watched.
        self._filter = parse_watch_filter(watch_filter)
        self._unwatched: TtlLru[tuple[str, str, str], tuple[Unwatched | None]] = TtlLru(
            secret_cache_size, UNWATCHED_TTL
        )
        self._reading_unwatched: dict[tuple[str, str, str], asyncio.Task[Unwatched | None]] = {}
        # Values are 1-tuples so that "the Secret does not exist" is cached too (None inside).
        self._secrets: TtlLru[tuple[str, str], tuple[Mapping[str, bytes] | None]] = TtlLru(
            secret_cache_size, secret_ttl
        )
        self._reading: dict[tuple[str, str], asyncio.Task[Mapping[str, bytes] | None]] = {}
        # ConfigMaps (the preferred-subnets one, read by MaasCluster passes without spec.preferredSubnets): as
        # short-lived as Secrets, so an edit shows within the TTL; "none there" is cached too.
        self._configmaps: TtlLru[tuple[str, str], tuple[Mapping[str, str] | None]] = TtlLru(
            secret_cache_size, secret_ttl
        )
        self._namespaces: TtlLru[str, tuple[Mapping[str, str] | None]] = TtlLru(secret_cache_size, secret_ttl)
        self._workload: TtlLru[str, _Workload] = TtlLru(
            workload_cache_size, workload_ttl, on_evict=self._close_workload
        )
        self._closing: set[asyncio.Task[None]] = set()
        self.writes = 0
        self.events = EventRecorder(
            http, level=events_level, burst=events_burst, group=functools.partial(cluster_object, store.find)
        )

    @property
    def http(self) -> KubeHttp:
        """The (fenced) client, for wiring modules with writes of their own (operator/remediation.py)."""
        return self._http

    async def aclose(self) -> None:
        self._workload.clear()
        self._secrets.clear()
        self._configmaps.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        await self.events.drain()
        await self._http.aclose()

    def _close_workload(self, workload: _Workload) -> None:
        if workload.client is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(workload.client.aclose())
        except RuntimeError:  # no loop (unit use): nothing was ever opened on one
            return
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # --- cache reads -------------------------------------------------------------------------------------
    def get_machine(self, namespace: str, name: str) -> Body | None:
        return self.store.find("machines", namespace, name)

    def get_cluster(self, namespace: str, name: str) -> Body | None:
        return self.store.find("clusters", namespace, name)

    def get_maascluster(self, namespace: str, name: str) -> Body | None:
        return self.store.find("maasclusters", namespace, name)

    def get_template(self, namespace: str, name: str) -> Body | None:
        return self.store.find(TEMPLATES, namespace, name)  # node reuse (issue 24)

    def in_shard(self, body: Body) -> bool:
        """Whether ``body`` (a MaasMachine or MaasCluster) is this shard's: no watch filter, or it matches."""
        return self._filter is None or carries_label(body, self._filter)

    async def handed_off(self, plural: ObjectPlural, body: Body) -> bool:
        """Whether the DELETED watch event of ``body`` means it left this shard, not that it was deleted.

        Under a watch filter the apiserver sends DELETED also when an object stops matching the label
        selector (its label removed or set to another shard's value), with the state it had *before*, so the
        event alone cannot tell: the object is read back. Still there with the same UID: it moved to
        another shard (or out of every shard), which now owns it. A 404 or another UID: a real deletion.
        When the read fails, the body decides (an object still carrying the label was deleted)."""
        if self._filter is None:
            return False
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return False  # the last state of a real deletion (no read needed: the usual case)
        try:
            current = await self._http.get_object(
                f"{GROUP}/{VERSION}", plural, str(meta.get("namespace", "")), str(meta.get("name", ""))
            )
        except KubeHttpError as exc:
            if exc.status == 404:
                return False
            return not carries_label(body, self._filter)
        return bool((current.get("metadata") or {}).get("uid") == meta.get("uid"))

    async def read_unwatched(self, plural: CapiPlural, namespace: str, name: str) -> Unwatched | None:
        if self._filter is None:
            return None
        key = (plural, namespace, name)
        cached = self._unwatched.get(key)
        if cached is not None:
            return cached[0]
        task = self._reading_unwatched.get(key)  # one GET shared by every pass asking meanwhile
        if task is None:
            task = asyncio.get_running_loop().create_task(self._read_unwatched(key))
            self._reading_unwatched[key] = task
            task.add_done_callback(lambda t: self._unwatched_done(key, t))
        return await asyncio.shield(task)

    async def _read_unwatched(self, key: tuple[str, str, str]) -> Unwatched | None:
        plural, namespace, name = key
        assert self._filter is not None
        try:
            body = await self._http.get_object(CAPI_API, plural, namespace, name, priority=-1)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise TransientError(
                    "KubernetesError",
                    f"reading {plural}/{name}: " + (f"HTTP {exc.status}" if exc.status else str(exc)),
                ) from exc
            found = None
        else:
            label_key, value = self._filter
            label = label_key if value is None else f"{label_key}={value}"
            found = None if carries_label(body, self._filter) else Unwatched(body, label)
        self._unwatched.expire()
        self._unwatched.put(key, (found,))
        return found

    def _unwatched_done(self, key: tuple[str, str, str], task: asyncio.Task[Unwatched | None]) -> None:
        self._reading_unwatched.pop(key, None)
        if not task.cancelled():
            task.exception()

    def maasmachines_naming(self, system_id: str) -> Sequence[Body]:
        # A scan of the cache: only an adoption asks (issue 24), never a pass of every machine.
        found = self.store.values(MAASMACHINE)
        return [b for b in found if (b.get("spec") or {}).get("systemID") == system_id]

    def list_maasmachines(self, namespace: str, cluster_name: str) -> Sequence[Body]:
        out = []
        for key in self.store.cluster_members(namespace, cluster_name):
            body = self.store.get(key)
            if body is not None:
                out.append(body)
        return out

    def zone_tally(self, namespace: str, cluster_name: str) -> ZoneTally:
        return self.store.zone_tally(namespace, cluster_name)

    async def live_maasmachines(
        self, namespace: str, cluster_name: str, *, control_plane: bool = False, limit: int | None = None
    ) -> Sequence[Body]:
        selector = f"{CLUSTER_NAME_LABEL}={cluster_name}"
        if control_plane:
            selector += f",{CONTROL_PLANE_LABEL}"
        if self._filter is not None:  # those the watch filter keeps out are not this operator's
            key, value = self._filter
            selector += "," + (key if value is None else f"{key}={value}")
        try:
            return await self._http.list_objects(
                f"{GROUP}/{VERSION}", "maasmachines", namespace, label_selector=selector, limit=limit
            )
        except KubeHttpError as exc:
            raise TransientError(
                "KubernetesError",
                f"listing the MaasMachines of {cluster_name}: "
                + (f"HTTP {exc.status}" if exc.status else str(exc)),
            ) from exc

    # --- Cluster API IPAM (the MaasMachine side) ----------------------------------------------------------
    def get_ip_claim(self, namespace: str, name: str) -> Body | None:
        return self.store.find(IP_CLAIMS, namespace, name)

    def get_ip_address(self, namespace: str, name: str) -> Body | None:
        return self.store.find(IP_ADDRESSES, namespace, name)

    async def create_ip_claim(self, namespace: str, body: Mapping[str, Any]) -> Body | None:
        new = await create_cached(self._http, self.store, IPAM_API, IP_CLAIMS, namespace, body=body)
        if new is not None:
            self.writes += 1
        return new

    async def delete_ip_claim(self, namespace: str, name: str) -> None:
        if await delete_if_present(self._http, IPAM_API, IP_CLAIMS, namespace, name):
            self.writes += 1

    # --- secrets -----------------------------------------------------------------------------------------
    async def read_secret_fresh(
        self, namespace: str, name: str, *, priority: int = 1
    ) -> Mapping[str, bytes] | None:
        """The Secret's data read now, and not kept (bootstrap data: join tokens and keys stay in memory only
        as long as the caller holds them)."""
        try:
            secret = await self._http.get_secret(namespace, name, priority=priority)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise TransientError(
                    C.MAAS_UNREACHABLE_REASON,
                    f"reading Secret {name}: " + (f"HTTP {exc.status}" if exc.status else str(exc)),
                ) from exc
            return None
        meta = secret.get("metadata") or {}
        labels = meta.get("labels") or {}
        origin = SecretOrigin(namespace, name, str(secret.get("type") or ""), dict(labels))
        return {k: SecretValue(base64.b64decode(v), origin) for k, v in (secret.get("data") or {}).items()}

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        key = (namespace, name)
        cached = self._secrets.get(key)
        if cached is not None:
            return cached[0]
        # One read per expiry, shared by every pass that asks meanwhile, and first in the write queue: the
        # credentials Secret gates every pass of a cluster's machines, so when its cache entry expired in a
        # burst, each pass queued its own GET behind hundreds of starting machines' writes (readiness lag).
        task = self._reading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._read_shared(key))
            self._reading[key] = task
            task.add_done_callback(lambda t: self._read_done(key, t))
        return await asyncio.shield(task)

    async def _read_shared(self, key: tuple[str, str]) -> Mapping[str, bytes] | None:
        data = await self.read_secret_fresh(*key, priority=-1)
        self._secrets.expire()  # what nobody asked for within the TTL leaves memory now, not when pushed out
        self._secrets.put(key, (data,))
        return data

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        key = (namespace, name)
        cached = self._configmaps.get(key)
        if cached is not None:
            return cached[0]
        try:
            cm = await self._http.get_configmap(namespace, name, priority=-1)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise TransientError(
                    C.MAAS_UNREACHABLE_REASON,
                    f"reading ConfigMap {name}: " + (f"HTTP {exc.status}" if exc.status else str(exc)),
                ) from exc
            data: Mapping[str, str] | None = None
        else:
            data = {str(k): str(v) for k, v in (cm.get("data") or {}).items()}
        self._configmaps.expire()
        self._configmaps.put(key, (data,))
        return data

    def _read_done(self, key: tuple[str, str], task: asyncio.Task[Mapping[str, bytes] | None]) -> None:
        self._reading.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, so a read whose every waiter left is not logged as lost

    async def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """A Namespace's labels, cached like Secrets (the default-credentials allow-list's selector)."""
        cached = self._namespaces.get(name)
        if cached is not None:
            return cached[0]
        try:
            ns = await self._http.request("GET", f"/api/v1/namespaces/{quote(name, safe='')}", priority=-1)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise TransientError(
                    C.MAAS_UNREACHABLE_REASON,
                    f"reading Namespace {name} (for the default credentials' namespace selector): "
                    + (f"HTTP {exc.status}" if exc.status else str(exc)),
                ) from exc
            labels: Mapping[str, str] | None = None
        else:
            labels = dict((ns.get("metadata") or {}).get("labels") or {})
        self._namespaces.expire()
        self._namespaces.put(name, (labels,))
        return labels

    # --- writes ------------------------------------------------------------------------------------------
    async def patch(
        self, plural: ObjectPlural, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        try:
            new = await self._http.merge_patch(
                f"{GROUP}/{VERSION}", plural, namespace, name, body, status=status, done=_completes(body)
            )
        except KubeHttpError as exc:
            await patch_refused(exc, self.store, plural, namespace, name, reread=self._reread)
            return None
        self.writes += 1
        if self.in_shard(new):  # not an object this shard has handed off meanwhile (its label changed)
            self.store.put(plural, new)
        return new

    async def patch_template_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> Body | None:
        """Merge-patch a MaasMachineTemplate's status (its capacity: capmaas.operator.templates); None when
        the template is gone. The answer goes into the store, so the next comparison starts from it."""
        try:
            new = await self._http.merge_patch(
                f"{GROUP}/{VERSION}", TEMPLATES, namespace, name, {"status": status}, status=True
            )
        except KubeHttpError as exc:
            if exc.status == 404:
                self.store.delete(TEMPLATES, namespace, name)
                return None
            detail = f"HTTP {exc.status}" if exc.status else str(exc)
            raise TransientError("KubernetesError", f"patching {TEMPLATES}/{name}: {detail}") from exc
        self.writes += 1
        self.store.put(TEMPLATES, new)
        return new

    async def _reread(self, plural: ObjectPlural, namespace: str, name: str) -> None:
        """After a 409: the current object into the store, so the next pass starts from it (the watch event
        that brings it may be seconds behind in a burst, and every pass until then would get 409 again)."""
        try:
            current = await self._http.get_object(f"{GROUP}/{VERSION}", plural, namespace, name)
        except KubeHttpError as exc:
            if exc.status == 404:
                self.store.delete(plural, namespace, name)
            return  # otherwise the watch brings it
        if self.in_shard(current):
            self.store.put(plural, current)

    def _workload_for(self, kubeconfig: bytes) -> _Workload:
        problem = trust_problem(kubeconfig)
        if problem is not None:
            return _Workload(None, problem)
        digest = hashlib.sha256(kubeconfig).hexdigest()
        workload = self._workload.get(digest)
        if workload is None:
            try:
                parsed = parse_kubeconfig(bytes(kubeconfig))
                workload = _Workload(_workload_client(parsed))
            except KubeconfigRejected as exc:
                origin = kubeconfig.origin if isinstance(kubeconfig, SecretValue) else None
                where = f"Secret {origin.namespace}/{origin.name}: " if origin else ""
                workload = _Workload(None, f"{where}{exc}")
            self._workload.put(digest, workload)
        return workload

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str, labels: Mapping[str, str]
    ) -> NodePatch:
        workload = self._workload_for(kubeconfig)
        if workload.client is None:
            return NodePatch(NodePatchResult.REJECTED, workload.rejected or "kubeconfig rejected")
        client = workload.client
        try:
            node = await client.get_node(node_name)
        except KubeHttpError as exc:
            if exc.status == 404:
                return NodePatch(NodePatchResult.NOT_FOUND, "")
            return NodePatch(NodePatchResult.UNREACHABLE, f"HTTP {exc.status}" if exc.status else "no answer")
        current = str((node.get("spec") or {}).get("providerID") or "")
        if current and current != provider_id:
            return NodePatch(NodePatchResult.CONFLICT, current)
        meta = node.get("metadata") or {}
        have = meta.get("labels") or {}
        missing = {k: v for k, v in labels.items() if k not in have}
        kept = {k: str(have[k]) for k, v in labels.items() if k in have and have[k] != v}
        if current == provider_id and not missing:
            return NodePatch(NodePatchResult.ALREADY_SET, current, kept)
        # The resourceVersion makes it a compare-and-set: a providerID or label written meanwhile is never
        # replaced.
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
        if missing:
            patch["metadata"]["labels"] = missing
        if not current:
            patch["spec"] = {"providerID": provider_id}
        try:
            await client.patch_node(node_name, patch)
        except KubeHttpError as exc:
            return NodePatch(NodePatchResult.UNREACHABLE, f"HTTP {exc.status}" if exc.status else "no answer")
        return NodePatch(NodePatchResult.PATCHED, provider_id, kept)

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        self.events.post(obj, type, reason, message)


def _completes(body: Mapping[str, Any]) -> bool:
    """A status write that finishes an object's provisioning (``ready: true``): it goes first in the write
    queue, since CAPI waits on it and finishing in-flight work before starting more bounds the lag."""
    status = body.get("status")
    return isinstance(status, Mapping) and status.get("ready") is True


def _workload_client(kubeconfig: WorkloadKubeconfig) -> KubeHttp:
    """A small client for one workload apiserver: two connections, short timeouts, two quick retries."""
    token = kubeconfig.authorization()
    target = Target(kubeconfig.server, kubeconfig.ssl_context(), lambda: token)
    return KubeHttp(target, connections=2, timeout=WORKLOAD_TIMEOUT, retries=Retries((0.5, 1.0), 5.0))
