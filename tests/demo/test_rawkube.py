"""The benchmark's raw apiserver client (creates on kept-alive connections, a raw watch) against a loopback
HTTP server that plays the apiserver's part, and the Tracker's running counts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from capmaas_dev.demo.kube import MAASMACHINES, WatchEvent
from capmaas_dev.demo.progress import Tracker
from capmaas_dev.demo.rawkube import RawKube, RawKubeError, RawWatcher

PATH = "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/ns/maasmachines"


class Api:
    """What the fake apiserver saw and what it answers."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any], int]] = []  # path, body, client port
        self.status = 201
        self.close_after_answer = False  # drop the kept-alive connection silently after each answer
        self.listing: dict[str, Any] = {"metadata": {"resourceVersion": "10"}, "items": []}
        self.lists = 0
        self.watches: list[str] = []  # the resourceVersion of each watch request
        self.streams: list[list[dict[str, Any]]] = []  # the lines of each watch, in turn
        self.hold = threading.Event()  # a watch with no lines left waits for this, then ends


def serve(api: Api) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if api.close_after_answer:
                self.close_connection = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            api.posts.append((self.path, body, self.client_address[1]))
            self._answer(api.status, json.dumps({"kind": "Status", "code": api.status}).encode())

        def do_GET(self) -> None:
            if "watch=1" not in self.path:
                api.lists += 1
                self._answer(200, json.dumps(api.listing).encode())
                return
            rv = self.path.split("resourceVersion=")[1].split("&")[0]
            api.watches.append(rv)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            lines = api.streams.pop(0) if api.streams else []
            for line in lines:
                data = json.dumps(line).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            if not lines:
                api.hold.wait(10)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        api.hold.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def api() -> Api:
    return Api()


@pytest.fixture
def url(api: Api) -> Iterator[str]:
    yield from serve(api)


def obj(name: str, rv: str, *, ready: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "status": {"ready": ready},
    }


def test_creates_post_the_body_once_each_on_one_kept_connection(api: Api, url: str) -> None:
    raw = RawKube(url, None)
    for i in range(5):
        raw.create(MAASMACHINES, obj(f"m{i}", ""))
    assert [p for p, _, _ in api.posts] == [PATH] * 5
    assert [b["metadata"]["name"] for _, b, _ in api.posts] == [f"m{i}" for i in range(5)]
    assert len({port for _, _, port in api.posts}) == 1  # one connection for the thread


def test_each_thread_keeps_its_own_connection(api: Api, url: str) -> None:
    raw = RawKube(url, None)
    threads = [
        threading.Thread(
            target=lambda t=t: [raw.create(MAASMACHINES, obj(f"t{t}-{i}", "")) for i in range(3)]
        )
        for t in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ports: dict[str, set[int]] = {}
    for _, body, port in api.posts:
        ports.setdefault(body["metadata"]["name"].split("-")[0], set()).add(port)
    assert len(api.posts) == 9
    assert all(len(p) == 1 for p in ports.values())
    assert len(set.union(*ports.values())) == 3


def test_a_connection_the_server_dropped_is_replaced(api: Api, url: str) -> None:
    api.close_after_answer = True
    raw = RawKube(url, None)
    for i in range(3):
        raw.create(MAASMACHINES, obj(f"m{i}", ""))
    assert len(api.posts) == 3  # each sent once, each on a new connection
    assert len({port for _, _, port in api.posts}) == 3


def test_a_refused_create_raises_with_its_status(api: Api, url: str) -> None:
    api.status = 409
    with pytest.raises(RawKubeError) as exc:
        RawKube(url, None).create(MAASMACHINES, obj("m0", ""))
    assert exc.value.status == 409
    assert len(api.posts) == 1


def test_an_https_url_needs_a_tls_context() -> None:
    with pytest.raises(ValueError, match="an https URL with a TLS context"):
        RawKube("https://127.0.0.1:6443", None)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_watch_lists_then_streams_stamped_events(api: Api, url: str) -> None:
    api.listing["items"] = [obj("a", "9")]
    api.streams = [
        [
            {"type": "MODIFIED", "object": obj("a", "11", ready=True)},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            {"type": "ADDED", "object": obj("b", "13")},
            {"type": "DELETED", "object": obj("a", "14")},
        ]
    ]
    before = time.time()
    watcher = RawWatcher(RawKube(url, None), MAASMACHINES, "ns").start()
    events: list[WatchEvent] = []
    try:
        wait_for(lambda: len(events.__iadd__(watcher.drain(0.05))) >= 4)
        wait_for(lambda: len(api.watches) >= 2)  # the first watch ended: watched again from its last version
    finally:
        watcher.stop()
    assert [(e.type, e.obj["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    assert all(e.at >= before for e in events)
    assert api.watches[:2] == ["10", "14"]
    assert api.lists == 1
    assert watcher.error is None


def test_an_expired_version_lists_again(api: Api, url: str) -> None:
    api.streams = [[{"type": "ERROR", "object": {"kind": "Status", "code": 410}}]]
    watcher = RawWatcher(RawKube(url, None), MAASMACHINES, "ns").start()
    try:
        wait_for(lambda: api.lists >= 2)
    finally:
        watcher.stop()
    assert api.watches[0] == "10"


def test_stop_ends_a_watch_waiting_for_lines(api: Api, url: str) -> None:
    watcher = RawWatcher(RawKube(url, None), MAASMACHINES, "ns").start()
    wait_for(lambda: len(api.watches) >= 1)
    watcher.stop()
    watcher._thread.join(5)
    assert not watcher._thread.is_alive()


def test_the_tracker_counts_rows_seen_ready_and_deleted_once() -> None:
    tracker = Tracker()
    tracker.apply(
        [
            WatchEvent(1.0, "ADDED", obj("a", "1")),
            WatchEvent(2.0, "MODIFIED", obj("a", "2", ready=True)),
            WatchEvent(3.0, "MODIFIED", obj("a", "3", ready=True)),
            WatchEvent(4.0, "MODIFIED", obj("b", "4", ready=True)),
        ]
    )
    assert tracker.readied == 2 == tracker.count(["a", "b"], ready=True)
    tracker.apply([WatchEvent(5.0, "DELETED", obj("a", "5")), WatchEvent(6.0, "DELETED", obj("a", "6"))])
    assert tracker.deleted == 1 == tracker.count(["a", "b"], deleted=True)
    assert tracker.rows["a"].deleted_at == 6.0  # the last DELETED seen, as before
