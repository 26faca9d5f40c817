"""A thin, typed-at-the-edges layer over the ``kubernetes`` client for the demo and the benchmark.

Only what playing CAPI core needs: create/get/delete/patch-status of custom objects and Secrets, a watch
thread that timestamps every event on arrival, and raw GETs (``/metrics``) with the kubeconfig's admin
client certificate. The synchronous client is fine here: the callers are scripts that wait anyway, and the
benchmark gets its parallelism from a thread pool.
"""

from __future__ import annotations

import base64
import contextlib
import queue
import ssl
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, cast

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

MERGE = "application/merge-patch+json"


@dataclass(frozen=True)
class Plural:
    """Where a custom resource lives in the API: group, version, plural."""

    group: str
    version: str
    plural: str


MAASCLUSTERS = Plural("infrastructure.cluster.x-k8s.io", "v1beta1", "maasclusters")
MAASMACHINES = Plural("infrastructure.cluster.x-k8s.io", "v1beta1", "maasmachines")
CLUSTERS = Plural("cluster.x-k8s.io", "v1beta2", "clusters")
MACHINES = Plural("cluster.x-k8s.io", "v1beta2", "machines")
MACHINEDEPLOYMENTS = Plural("cluster.x-k8s.io", "v1beta2", "machinedeployments")
MAASMACHINETEMPLATES = Plural("infrastructure.cluster.x-k8s.io", "v1beta1", "maasmachinetemplates")


@dataclass(frozen=True)
class WatchEvent:
    """One watch event with the wall-clock time it arrived here."""

    at: float
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]


def _dict(value: object) -> dict[str, Any]:
    """The custom-objects API returns the decoded JSON, typed as ``object``."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object from the apiserver, got {type(value).__name__}")
    return cast(dict[str, Any], value)


class Kube:
    """Clients for one kubeconfig. Thread-safe (urllib3 pools); ``pool`` bounds concurrent connections."""

    def __init__(self, kubeconfig: Path, *, pool: int = 16) -> None:
        self.kubeconfig = kubeconfig
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=config
        )
        config.connection_pool_maxsize = pool
        self.api = kubernetes.client.ApiClient(config)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self._ssl: ssl.SSLContext | None = None
        self.server = str(config.host)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.api.close()  # type: ignore[no-untyped-call]

    # -- objects ---------------------------------------------------------------------------------------
    def create(self, p: Plural, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"]["namespace"]
        return _dict(self.custom.create_namespaced_custom_object(p.group, p.version, ns, p.plural, obj))

    def get(self, p: Plural, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            out = _dict(
                self.custom.get_namespaced_custom_object(p.group, p.version, namespace, p.plural, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return out

    def list(self, p: Plural, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
        out = _dict(
            self.custom.list_namespaced_custom_object(
                p.group, p.version, namespace, p.plural, label_selector=label_selector
            )
        )
        return list(out.get("items") or [])

    def patch_status(self, p: Plural, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            p.group, p.version, namespace, p.plural, name, patch, _content_type=MERGE
        )

    def delete(self, p: Plural, namespace: str, name: str, *, propagation: str = "Background") -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                p.group, p.version, namespace, p.plural, name, propagation_policy=propagation
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_all(self, p: Plural, namespace: str, label_selector: str = "") -> None:
        """One DELETECOLLECTION call (the benchmark's way of deleting N objects without N requests)."""
        self.custom.delete_collection_namespaced_custom_object(
            p.group, p.version, namespace, p.plural, label_selector=label_selector
        )

    def create_namespace(self, name: str) -> None:
        body: Any = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.core.create_namespace(body)

    def create_secret(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a Secret from a plain manifest (the client serialises dicts as they are)."""
        body: Any = obj
        out = self.core.create_namespaced_secret(obj["metadata"]["namespace"], body)
        return _dict(self.api.sanitize_for_serialization(out))  # type: ignore[no-untyped-call]

    def delete_secret(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- raw GET with the admin certificate (apiserver /metrics) ----------------------------------------
    def raw_get(self, path: str, timeout: float = 30.0) -> str:
        with urllib.request.urlopen(self.server + path, timeout=timeout, context=self.ssl_context()) as resp:
            return str(resp.read().decode())

    def ssl_context(self) -> ssl.SSLContext:
        """An SSL context from the kubeconfig's inline CA and client certificate (the dev cluster's admin)."""
        if self._ssl is None:
            cfg = yaml.safe_load(self.kubeconfig.read_text())
            cluster = cfg["clusters"][0]["cluster"]
            user = cfg["users"][0]["user"]
            ctx = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
            with tempfile.TemporaryDirectory(prefix="capmaas-kube-") as tmp:
                cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
                key.write_bytes(base64.b64decode(user["client-key-data"]))
                ctx.load_cert_chain(str(cert), str(key))
            self._ssl = ctx
        return self._ssl

    # -- watching --------------------------------------------------------------------------------------
    def watch(self, p: Plural, namespace: str) -> Watcher:
        return Watcher(self, p, namespace).start()


class WatchThread:
    """A background thread that lists then watches ``p`` in ``namespace`` and queues :class:`WatchEvent`s.

    Objects present at start arrive as ADDED; an expired resourceVersion (410) re-lists. Events are stamped
    with ``time.time()`` on arrival, which is what the benchmark compares with the simulator's clock. A
    subclass says how to list (:meth:`_list`), how to watch from a version (:meth:`_stream`), which error
    means the version is gone (:meth:`_gone`), and how to stop its stream (:meth:`stop`).
    """

    def __init__(self, p: Plural, namespace: str) -> None:
        self.p, self.namespace = p, namespace
        self.events: queue.Queue[WatchEvent] = queue.Queue()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"watch-{p.plural}", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def _list(self) -> str:
        """Queue every object as ADDED; returns the listing's resourceVersion."""
        raise NotImplementedError

    def _stream(self, rv: str) -> str:
        """One watch from ``rv`` until the server ends it or :meth:`stop`; returns the version to go on from
        ("" to list again)."""
        raise NotImplementedError

    def _gone(self, exc: Exception) -> bool:
        """``exc`` says the version watched from is too old (410): list again."""
        raise NotImplementedError

    def _queue(self, at: float, ev: dict[str, Any], rv: str) -> str:
        """Queue a watch event received at ``at``; returns the version to go on from ("" after an ERROR,
        usually 410 Gone: list again)."""
        type_, obj = ev.get("type"), ev.get("object") or {}
        if type_ == "ERROR":
            return ""
        if type_ in ("ADDED", "MODIFIED", "DELETED"):
            self.events.put(WatchEvent(at, type_, obj))
        return str((obj.get("metadata") or {}).get("resourceVersion") or rv)

    def _main(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                rv = self._stream(rv)
            except Exception as exc:  # connection reset while the apiserver stops, etc.
                if self._gone(exc):
                    rv = ""
                    continue
                if self._stop.is_set():
                    return
                self.error = exc
                time.sleep(0.5)

    def drain(self, timeout: float) -> list[WatchEvent]:
        """Events received so far, waiting up to ``timeout`` seconds for the first one."""
        out: list[WatchEvent] = []
        try:
            out.append(self.events.get(timeout=timeout))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._stop.set()


class Watcher(WatchThread):
    """:class:`WatchThread` through the ``kubernetes`` client."""

    def __init__(self, kube: Kube, p: Plural, namespace: str) -> None:
        super().__init__(p, namespace)
        self.kube = kube
        self._watch: Any = None

    def _list(self) -> str:
        p = self.p
        listing = _dict(
            self.kube.custom.list_namespaced_custom_object(p.group, p.version, self.namespace, p.plural)
        )
        now = time.time()
        for item in listing.get("items") or []:
            self.events.put(WatchEvent(now, "ADDED", item))
        return str(listing["metadata"]["resourceVersion"])

    def _stream(self, rv: str) -> str:
        p = self.p
        self._watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        for ev in self._watch.stream(
            self.kube.custom.list_namespaced_custom_object,
            p.group,
            p.version,
            self.namespace,
            p.plural,
            resource_version=rv,
            timeout_seconds=30,
            allow_watch_bookmarks=True,
        ):
            if self._stop.is_set():
                return rv
            rv = self._queue(time.time(), ev, rv)
        return rv

    def _gone(self, exc: Exception) -> bool:
        return isinstance(exc, ApiException) and exc.status == 410

    def stop(self) -> None:
        super().stop()
        if self._watch is not None:
            with contextlib.suppress(Exception):
                self._watch.stop()
