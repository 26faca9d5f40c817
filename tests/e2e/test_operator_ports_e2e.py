"""``e2e_support.start_operator``: an operator whose health or metrics port was taken before it could bind it
is started again on fresh ports, and a port another operator serves is not mistaken for its own.

``free_port`` claims its ports across our processes, but a program that is not ours can still bind one
between the hand-out and the operator's bind. Here the taken port is handed out on
purpose (``ports=``): the first two starts must fail on their binds and the third must serve. The port is
held by a server that answers ``/healthz`` with 200, as another worker's operator would.
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from e2e_support import listens, start_operator

from capmaas_dev.demo.stack import OperatorProcess
from capmaas_dev.devcluster.process import free_port

if TYPE_CHECKING:
    from capmaas_dev.devcluster import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]


class _Healthy(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200, as another operator's ``/healthz`` does."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port held (listening, answering ``/healthz``) by someone else for the whole test."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, name="port squatter", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_an_operator_that_lost_a_port_starts_again_on_fresh_ones(
    taken: int, kube: ControlPlane, capmaas_crds: None, namespace: str, tmp_path: Path
) -> None:
    """Start 1 gets the taken port as its health port (kopf's health server fails), start 2 as its metrics
    port (the metrics server fails, before kopf starts), start 3 gets two free ports and serves."""
    handed = [taken, free_port(), free_port(), taken] + [free_port() for _ in range(8)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPMAAS_")}
    env.update(KUBECONFIG=str(kube.kubeconfig), CAPMAAS_SERVER__BIND_ADDRESS="127.0.0.1")
    env.update(CAPMAAS_LOGGING__FORMAT="text")
    operator = OperatorProcess(env, namespace, tmp_path / "operator.log")
    try:
        health = start_operator(operator, ports=lambda: handed.pop(0))
        assert len(handed) == 6, "not exactly three starts"
        assert taken not in (health, int(env["CAPMAAS_SERVER__METRICS_PORT"]))
        assert health == int(env["CAPMAAS_SERVER__HEALTH_PORT"])
        assert operator.exited() is None
        assert listens(operator.pid, health), "the health port is not the operator's own"
        assert not listens(operator.pid, taken)
        log = operator.log.read_text()
        # The two failed binds, as each server words it (both contain e2e_support.PORT_TAKEN).
        assert f"('127.0.0.1', {taken}): address already in use" in log, "start 1 (kopf's health server)"
        assert "[Errno 98] Address already in use" in log, "start 2 (the metrics server)"
    finally:
        operator.stop()
