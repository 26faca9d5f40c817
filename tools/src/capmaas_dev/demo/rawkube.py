"""The benchmark's hot path to the apiserver without the ``kubernetes`` client: creates and one watch.

Why: the benchmark plays CAPI's MachineSet controller (a thousand creates) and watches every MaasMachine on
the same two cores as the operator it measures. Through the ``kubernetes`` client each create walks its body
(``sanitize_for_serialization``), goes through urllib3's pool and decodes the created object twice; each watch
event is decoded, encoded again and decoded again (``Watch.unmarshal_event``). CAPI's Go controller does the
same creates for a fraction of that CPU, so the harness's own overhead was taking the operator's cores. Here
a create is ``json.dumps`` and one POST on a kept-alive HTTP/1.1 connection of its thread (the answer is read
to keep the connection, not parsed), and a watch event is one ``json.loads`` of its line.

What is measured does not change: a create is still one POST per object, issued by the same thread pool, and
a watch event is still stamped with ``time.time()`` the moment its line arrives. Authentication is the
kubeconfig's client certificate, what the development cluster's admin has (:meth:`Kube.ssl_context`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from capmaas_dev.demo.kube import Kube, Plural, WatchEvent, WatchThread

#: Errors of a kept-alive connection the server closed meanwhile: the request is sent again on a new one.
_STALE = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    http.client.CannotSendRequest,
)


class RawKubeError(RuntimeError):
    """A non-2xx answer to a raw request: ``status`` and the start of the body."""

    def __init__(self, status: int, method: str, path: str, body: bytes) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status


def collection_path(p: Plural, namespace: str) -> str:
    return f"/apis/{p.group}/{p.version}/namespaces/{quote(namespace)}/{p.plural}"


class RawKube:
    """POSTs and GETs on one kept-alive connection per calling thread (a thread pool's threads each keep
    theirs) to ``server``: HTTPS with ``context``, or plain HTTP when there is none (the tests' server)."""

    def __init__(self, server: str, context: ssl.SSLContext | None, *, timeout: float = 60.0) -> None:
        url = urlsplit(server)
        if url.scheme != ("https" if context is not None else "http") or url.hostname is None:
            raise ValueError(f"{server!r}: an https URL with a TLS context, or an http URL without one")
        self.host, self.port = url.hostname, url.port
        self.context = context
        self.timeout = timeout
        self._local = threading.local()

    @classmethod
    def of(cls, kube: Kube) -> RawKube:
        """The apiserver of ``kube``, with its kubeconfig's CA and client certificate."""
        return cls(kube.server, kube.ssl_context())

    def connect(self, timeout: float | None = None) -> http.client.HTTPConnection:
        """A new connection (not the thread's kept one: for a watch, which holds its connection)."""
        seconds = self.timeout if timeout is None else timeout
        if self.context is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=seconds)
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=seconds)

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """``method path`` with a JSON ``body``; the status and the raw answer. A connection the server
        closed while it was kept is replaced once, before anything was read of an answer."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE:
                self._drop()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._drop()
                raise
            if resp.will_close:
                self._drop()
            return resp.status, data
        raise AssertionError("unreachable")

    def create(self, p: Plural, obj: dict[str, Any]) -> None:
        """POST a new object of ``p`` (its namespace from its metadata); the answer is checked, not parsed."""
        path = collection_path(p, obj["metadata"]["namespace"])
        status, data = self.request("POST", path, json.dumps(obj, separators=(",", ":")).encode())
        if status != 201:
            raise RawKubeError(status, "POST", path, data)

    def watch(self, p: Plural, namespace: str) -> RawWatcher:
        return RawWatcher(self, p, namespace).start()


class RawWatcher(WatchThread):
    """:class:`~capmaas_dev.demo.kube.WatchThread` on a raw stream: one JSON decode per event."""

    def __init__(self, raw: RawKube, p: Plural, namespace: str, *, timeout_seconds: int = 30) -> None:
        super().__init__(p, namespace)
        self.raw = raw
        self.timeout_seconds = timeout_seconds
        self._conn: http.client.HTTPConnection | None = None

    @property
    def native_id(self) -> int:
        """The watch thread's id in the OS (its CPU time is in ``/proc/self/task/<id>/stat``)."""
        tid = self._thread.native_id
        if tid is None:
            raise RuntimeError("the watch thread has not started")
        return tid

    def _list(self) -> str:
        path = collection_path(self.p, self.namespace)
        status, data = self.raw.request("GET", path)
        if status != 200:
            raise RawKubeError(status, "GET", path, data)
        listing = json.loads(data)
        now = time.time()
        for item in listing.get("items") or []:
            self.events.put(WatchEvent(now, "ADDED", item))
        return str(listing["metadata"]["resourceVersion"])

    def _stream(self, rv: str) -> str:
        """One watch request from ``rv`` until the server ends it; returns the version to go on from ("" to
        list again)."""
        query = urlencode(
            {
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(self.timeout_seconds),
            }
        )
        path = f"{collection_path(self.p, self.namespace)}?{query}"
        conn = self._conn = self.raw.connect(timeout=self.timeout_seconds + 30)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status == 410:
                return ""
            if resp.status != 200:
                raise RawKubeError(resp.status, "GET", path, resp.read())
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return rv  # the server ended the watch (timeoutSeconds): watch again from here
                rv = self._queue(time.time(), json.loads(line), rv)
                if not rv:
                    return ""  # an ERROR event, usually 410 Gone: the resourceVersion is too old; list again
            return rv
        finally:
            self._conn = None
            conn.close()

    def _gone(self, exc: Exception) -> bool:
        return isinstance(exc, RawKubeError) and exc.status == 410

    def stop(self) -> None:
        """Stop the thread: the stream's socket is shut down, so a read waiting on it returns at once."""
        super().stop()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
