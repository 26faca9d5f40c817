"""Helpers of the hostile-tenant suite: tenant identities, the chart's admission policy and RBAC, and loopback
servers that record what they receive or misbehave on purpose."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest
import yaml
from kube_reader import KubeReader, apply_manifests, apply_objects, reader

from capmaas_dev.devcluster import ControlPlane, find_binary

CHART = Path(__file__).resolve().parents[2] / "deploy" / "charts" / "capmaas"
#: libyaml's safe loader where PyYAML has it: the rendered chart is read for every test that installs its
#: policy, and the pure-Python parser was a large share of this group's in-process CPU
#: (docs/benchmarks/test-durations.md, "The xdist workers' CPU").
YAML_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Tenant:
    """A namespaced user: ``kubectl --as=<user>`` with full rights on its namespace's CAPI/capmaas objects and
    Secrets, and nothing anywhere else.

    With ``kubeconfig`` (the admin's), :meth:`read` polls in-process, impersonating the user as ``--as``
    does, instead of forking kubectl for every look (see ``tests/operator/kube_reader.py``)."""

    user: str
    namespace: str
    kubectl: Any
    kubeconfig: Path | None = None

    def k(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl(f"--as={self.user}", "-n", self.namespace, *args, input=input, check=check)

    async def ak(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.k, *args, input=input, check=check)

    async def apply(self, *objs: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl --as=USER -n NAMESPACE apply -f -``; with ``kubeconfig``, each object not there yet is
        created in-process as that kubectl would (``kube_reader.apply_objects``, as the user), kubectl does
        the rest (an update, a refusal: its exit status and stderr)."""
        if self.kubeconfig is None:
            return await self.ak("apply", "-f", "-", input=yaml.safe_dump_all(list(objs)), check=check)
        return await asyncio.to_thread(
            apply_objects,
            self.kubectl,
            self.kubeconfig,
            list(objs),
            self.namespace,
            user=self.user,
            check=check,
        )

    async def read(self, plural: str, name: str) -> dict[str, Any] | None:
        """``kubectl --as=USER get PLURAL NAME -o json`` as the tenant; None when kubectl would fail."""
        if self.kubeconfig is not None:
            got = await asyncio.to_thread(
                reader(self.kubeconfig).get, plural, name, self.namespace, user=self.user
            )
            if isinstance(got, dict) or got is None:
                return got
        r = await self.ak("get", plural, name, "-o", "json", check=False)
        return dict(json.loads(r.stdout)) if r.returncode == 0 else None


def grant_tenant(kubectl: Any, user: str, namespace: str, kubeconfig: Path | None = None) -> Tenant:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tenant", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["*"]},
            {"apiGroups": ["cluster.x-k8s.io"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["infrastructure.cluster.x-k8s.io"], "resources": ["*"], "verbs": ["*"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"tenant-{user}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    apply_manifests(kubectl, [role, binding])
    return Tenant(user, namespace, kubectl, kubeconfig)


@pytest.fixture
def tenant(kube: ControlPlane, kubectl: Any, namespace: str) -> Tenant:
    """The attacker: user ``mallory``, tenant of the test's namespace (the operator's namespace)."""
    return grant_tenant(kubectl, "mallory", namespace, kube.kubeconfig)


@pytest.fixture
def policy(kubectl: Any, namespace: str) -> Iterator[Installed]:
    """The chart's admission policy and RBAC, installed for the test and removed after it."""
    installed = install_policy_and_rbac(kubectl, namespace)
    try:
        yield installed
    finally:
        uninstall(kubectl, installed)


@pytest.fixture
def attacker(kube: ControlPlane, kubectl: Any, api: KubeReader) -> Iterator[Tenant]:
    """The attacker ``mallory`` in a namespace of its own (the victims live in the harness namespace).

    Its namespace is made and removed in-process (``kubectl create namespace``, then ``kubectl patch
    maasclusters --all`` to drop their finalizers and ``kubectl delete namespace --wait=false``, failures
    ignored as they were): each was a kubectl fork; kubectl only when the create is refused, for its error."""
    name = f"attacker-{secrets.token_hex(3)}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if api.send("POST", "/api/v1/namespaces", namespace) != 201:
        kubectl("create", "namespace", name)
    try:
        yield grant_tenant(kubectl, "mallory", name, kube.kubeconfig)
    finally:
        api.drop_finalizers("maasclusters", name)
        api.send("DELETE", f"/api/v1/namespaces/{name}", {"propagationPolicy": "Background"})  # kubectl's


def helm_template(*args: str, namespace: str, release: str = "sec") -> list[dict[str, Any]]:
    """``helm template`` of the chart (the cached helm binary); the rendered objects."""
    home = Path(os.environ.get("TMPDIR", "/tmp")) / "capmaas-security-helm"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    out = subprocess.run(
        [str(find_binary("helm")), "template", release, str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return [d for d in yaml.load_all(out.stdout, Loader=YAML_LOADER) if d]


POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}


@dataclass
class Installed:
    """The chart's admission policy and RBAC, applied for one test (removed afterwards: they are
    cluster-scoped and the apiserver is shared by the session)."""

    objects: list[dict[str, Any]]
    service_account: str


def install_policy_and_rbac(kubectl: Any, namespace: str, *extra: str) -> Installed:
    docs = [d for d in helm_template(*extra, namespace=namespace) if d["kind"] in POLICY_KINDS | RBAC_KINDS]
    assert {d["kind"] for d in docs} >= POLICY_KINDS
    apply_manifests(kubectl, docs)
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    return Installed(docs, f"system:serviceaccount:{namespace}:{sa['metadata']['name']}")


def uninstall(kubectl: Any, installed: Installed) -> None:
    """Every object deleted, failures ignored (``kubectl delete -f - --ignore-not-found --wait=false``):
    in-process when ``kubectl`` is the session fixture (``KubeReader.delete_object``), one kubectl for the
    objects it does not delete (a kubectl per object was a dozen forks, ~0.1 s of CPU each, per test)."""
    kubeconfig = getattr(kubectl, "kubeconfig", None)
    api = reader(kubeconfig) if kubeconfig is not None else None
    left = [obj for obj in installed.objects if api is None or not api.delete_object(obj)]
    if left:
        docs = yaml.safe_dump_all(left)
        kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", input=docs, check=False)


def wait_policy_active(check: Callable[[], bool], within: float = 30.0) -> None:
    """Admission policies take effect asynchronously (the apiserver compiles them from its watch cache)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError("the admission policy did not take effect")


# --- loopback servers ---------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """A TCP listener on loopback that records every byte it receives and answers 503 (no valid HTTP
    exchange needed: what matters is what was *sent* to it)."""

    host: str = "127.0.0.1"
    port: int = 0
    received: bytearray = field(default_factory=bytearray)
    connections: int = 0
    tls: ssl.SSLContext | None = None  # serve https (a handshake the client refuses never reaches _handle)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            data = await asyncio.wait_for(reader.read(65536), 5)
            self.received += data
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Recorder]:
        server = await asyncio.start_server(self._handle, self.host, self.port, ssl=self.tls)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self


class _Listener:
    """A loopback server of the tests: ``running()`` listens (on a free port when ``port`` is 0) and serves
    ``_handle``; ``url`` is where the operator is pointed."""

    host: str
    port: int

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/MAAS"


@dataclass
class Hostile(_Listener):
    """A loopback HTTP server that answers every request with ``body_size`` bytes, either as fast as it can or
    ``trickle`` seconds per byte; records per connection how many body bytes went out and how long it stayed
    open (until the client hung up)."""

    body_size: int
    trickle: float = 0.0
    host: str = "127.0.0.1"
    port: int = 0
    sent: list[int] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        sent = 0
        hung_up: asyncio.Task[bytes] | None = None
        try:
            await reader.readuntil(b"\r\n\r\n")
            hung_up = asyncio.create_task(reader.read())  # b"" (or an error) once the client hangs up
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {self.body_size}\r\n\r\n"
            )
            writer.write(head.encode())
            chunk = b" " * (1 if self.trickle else 256 * 1024)
            while sent < self.body_size and not hung_up.done():
                piece = chunk[: self.body_size - sent]
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
                if self.trickle:
                    await asyncio.wait([hung_up], timeout=self.trickle)
            if sent >= self.body_size:
                await asyncio.wait([hung_up], timeout=5)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.sent.append(sent)
            self.durations.append(time.monotonic() - started)
            if hung_up is not None:
                hung_up.cancel()
            writer.close()


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def kubeconfig_yaml(server: str, user: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "w", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "w", "context": {"cluster": "w", "user": "u"}}],
            "current-context": "w",
        }
    )


def capi_kubeconfig_secret(namespace: str, cluster: str, kubeconfig: str) -> dict[str, Any]:
    """The ``<cluster>-kubeconfig`` Secret, CAPI-shaped (type and label), as a tenant can write it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {
            "name": f"{cluster}-kubeconfig",
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "stringData": {"value": kubeconfig},
    }


def json_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(proc.stdout))


@dataclass
class Tarpit(_Listener):
    """A loopback listener that accepts connections, reads the request and never answers (until the client
    hangs up): a tenant's endpoint parking the operator's requests. Counts the connections it got."""

    host: str = "127.0.0.1"
    port: int = 0
    connections: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)  # set by the first connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.connected.set()
        try:
            while await reader.read(65536):
                pass  # keep reading (and never answer) until the client gives up
        except ConnectionError:
            pass
        finally:
            writer.close()
