"""Operator tests: ``capmaas run`` as a subprocess against the real apiserver, the simulator on loopback.

The test plays Cluster API core: it creates Clusters/Machines with owner references and bootstrap Secrets,
and marks the Cluster's infrastructure provisioned once the MaasCluster is ready.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kube_reader import UNRESOLVED, apply_objects, reader
from zygote import ZYGOTE, Child

from capmaas_dev import demo
from capmaas_dev.devcluster import ControlPlane
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings, serve

ROOT = Path(__file__).resolve().parents[2]
CAPMAAS = str(Path(sys.executable).parent / "capmaas")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def crds(kube: ControlPlane, kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    names = (f"crd/{name}.infrastructure.cluster.x-k8s.io" for name in ("maasmachines", "maasclusters"))
    kubectl("wait", "--for=condition=Established", *names)  # one kubectl for both


@dataclass
class Operator:
    """A running ``capmaas run`` process; restartable.

    ``leader_elect`` False (one process per test): ``--no-leader-elect``, no leader election, as a single
    process needs none. True: no such flag, so leader election is on (the default), set up through
    ``CAPMAAS_LEADER_ELECTION__*`` in ``env`` (see :meth:`replica`)."""

    env: dict[str, str]
    namespace: str
    log: Path
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | Child | None = None
    leader_elect: bool = False
    cluster_wide: bool = False  # no --namespace: every namespace (give it a --watch-filter in extra_args)
    #: A fresh interpreter rather than a fork of the zygote (``zygote.py``): for a test about the start of
    #: the interpreter itself, or one that finds its processes by their command line (a fork has the
    #: zygote's).
    fresh: bool = False

    def replica(self, name: str, log: Path, *, extra_args: list[str] | None = None) -> Operator:
        """Another process with this one's settings: its own ports and log, ``POD_NAME`` = ``name`` (the
        prefix of its Lease holder identity)."""
        env = dict(self.env)
        env.update(
            POD_NAME=name,
            CAPMAAS_SERVER__HEALTH_PORT=str(free_port()),
            CAPMAAS_SERVER__METRICS_PORT=str(free_port()),
        )
        args = list(self.extra_args if extra_args is None else extra_args)
        return Operator(
            env,
            self.namespace,
            log,
            args,
            leader_elect=self.leader_elect,
            cluster_wide=self.cluster_wide,
            fresh=self.fresh,
        )

    def start(self) -> None:
        """The process, forked from the zygote (``zygote.py``: the imports already done), or a fresh
        interpreter when there is none."""
        mode = [] if self.leader_elect else ["--no-leader-elect"]
        scope = [] if self.cluster_wide else ["--namespace", self.namespace]
        argv = [CAPMAAS, "run", *scope, *mode, *self.extra_args]
        self.proc = None if self.fresh else ZYGOTE.spawn(argv, self.env, self.log)
        if self.proc is None:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def tail(self, n: int = 60) -> str:
        if not self.log.exists():
            return f"(no log: {self.log.name} was never started)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


@dataclass
class Harness:
    kube: ControlPlane
    kubectl: Any
    namespace: str
    sim: Simulator
    url: str
    operator: Operator

    async def k(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.kubectl, *args, input=input, check=check)

    async def apply(self, *objs: dict[str, Any]) -> None:
        """``kubectl apply -n NAMESPACE -f -`` of ``objs`` (``kube_reader.apply_objects``: the new ones
        in-process, kubectl for the rest)."""
        await asyncio.to_thread(apply_objects, self.kubectl, self.kube.kubeconfig, list(objs), self.namespace)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """``kubectl get KIND NAME -o json``, answered in-process (``kube_reader``: no kubectl fork per
        poll); kubectl itself only for a KIND the reader cannot resolve unambiguously. None when kubectl
        would fail."""
        obj = await asyncio.to_thread(reader(self.kube.kubeconfig).get, kind, name, self.namespace)
        if obj is not UNRESOLVED:
            return obj if isinstance(obj, dict) else None
        r = await self.k("get", kind, name, "-n", self.namespace, "-o", "json", check=False)
        if r.returncode != 0:
            return None
        return dict(json.loads(r.stdout))

    async def items(self, kind: str) -> list[dict[str, Any]]:
        """The ``items`` of ``kubectl get KIND -n NAMESPACE -o json``, read in-process as :meth:`get` is;
        raises as kubectl's failure would."""
        got = await asyncio.to_thread(reader(self.kube.kubeconfig).items, kind, self.namespace)
        if isinstance(got, list):
            return got
        r = await self.k("get", kind, "-n", self.namespace, "-o", "json")
        return list(json.loads(r.stdout)["items"])

    async def uid(self, kind: str, name: str) -> str:
        obj = await self.get(kind, name)
        assert obj is not None, (kind, name)
        return str(obj["metadata"]["uid"])

    async def wait(
        self, what: str, check: Callable[[], Awaitable[bool]], within: float = 60.0, interval: float = 0.3
    ) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await check():
                return
            await asyncio.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}\n--- operator log ---\n{self.operator.tail()}")

    async def cluster(
        self,
        name: str = "c1",
        *,
        maascluster: dict[str, Any] | None = None,
        provision: bool = True,
        within: float = 60.0,
    ) -> str:
        """Cluster + MaasCluster (owned by it). Returns the Cluster UID."""
        await self.apply(demo.cluster(name, self.namespace))
        uid = await self.uid("clusters.cluster.x-k8s.io", name)
        mc = maascluster or demo.maascluster(name, self.namespace)
        mc["metadata"]["ownerReferences"] = [demo.owner("Cluster", name, uid)]
        await self.apply(mc)
        if provision:
            await self.wait(
                "MaasCluster ready", lambda: self.field("maasclusters", name, "status", "ready"), within
            )
            status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
            await self.patch_status("clusters.cluster.x-k8s.io", name, status)
        return uid

    async def patch_status(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        """``kubectl patch KIND NAME --subresource=status --type=merge -p PATCH``, in-process; kubectl itself
        when that is refused (so that a failure raises kubectl's error)."""
        api = reader(self.kube.kubeconfig)
        path = await asyncio.to_thread(api.path, kind, self.namespace, name)
        if path is not None:
            merge = "application/merge-patch+json"
            status = await asyncio.to_thread(api.send, "PATCH", f"{path}/status", patch, merge)
            if status == 200:
                return
        await self.k(
            "patch", kind, name, "-n", self.namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch),
        )  # fmt: skip

    async def machine(
        self, name: str, *, cp: bool, cluster: str = "c1", bootstrap: bool = True, **kw: Any
    ) -> None:
        objs: list[dict[str, Any]] = []
        if bootstrap:
            objs.append(demo.bootstrap_secret(f"{name}-bootstrap", self.namespace, cluster))
        objs.append(
            demo.machine(
                name,
                self.namespace,
                cluster,
                control_plane=cp,
                bootstrap=f"{name}-bootstrap" if bootstrap else None,
            )
        )
        await self.apply(*objs)
        muid = await self.uid("machines.cluster.x-k8s.io", name)
        await self.apply(
            demo.maasmachine(name, self.namespace, cluster, control_plane=cp, machine_uid=muid, **kw)
        )

    async def field(self, plural: str, name: str, *path: str) -> Any:
        obj = await self.get(plural, name)
        for p in path:
            if not isinstance(obj, dict):
                return None
            obj = obj.get(p)
        return obj

    async def condition(self, plural: str, name: str, type_: str) -> dict[str, Any] | None:
        for c in await self.field(plural, name, "status", "conditions") or ():
            if c.get("type") == type_:
                return dict(c)
        return None


@pytest.fixture
def sim() -> Simulator:
    return Simulator(
        Inventory.generate(machines=12, zones=3, seed=7),
        timings=Timings(deploy=1.0, release=0.3),
        faults=Faults(),
    )


@pytest.fixture
def operator_env(kube: ControlPlane, namespace: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(kube.env())
    # The test's namespace may use the default MAAS credentials (the simulator): the allow-list an admin must
    # give; without it every MaasCluster without an identityRef is refused (DefaultIdentityNotAllowed).
    env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES"] = namespace
    env.update(
        CAPMAAS_POLLING__FAST_INTERVAL="0.2",
        CAPMAAS_POLLING__IDLE_INTERVAL="2",
        CAPMAAS_SERVER__BIND_ADDRESS="127.0.0.1",
        CAPMAAS_SERVER__HEALTH_PORT=str(free_port()),
        CAPMAAS_SERVER__METRICS_PORT=str(free_port()),
        CAPMAAS_LOGGING__FORMAT="text",
        CAPMAAS_LOGGING__LEVEL="INFO",
        CAPMAAS_MACHINE__RETRY_BASE_DELAY="0.5",
        CAPMAAS_MACHINE__RETRY_MAX_DELAY="3",
        CAPMAAS_KUBE__SECRET_CACHE_TTL="1",
        CAPMAAS_KUBE__FIELD_VALIDATION="Strict",  # a wrong key in any write fails the test
    )
    return env


@pytest.fixture
async def harness(
    kube: ControlPlane,
    kubectl: Any,
    crds: None,
    namespace: str,
    sim: Simulator,
    operator_env: dict[str, str],
    tmp_path: Path,
) -> AsyncIterator[Harness]:
    async with serve(sim, host="127.0.0.1", port=0) as url:
        operator_env.update(CAPMAAS_MAAS__ENDPOINT=url, CAPMAAS_MAAS__API_KEY=sim.api_key)
        op = Operator(operator_env, namespace, tmp_path / "operator.log")
        h = Harness(kube, kubectl, namespace, sim, url, op)
        try:
            yield h
        finally:
            op.stop()


async def workload_node(workload: ControlPlane, name: str, *path: str) -> Any:
    """``kubectl get node NAME -o json`` on the workload cluster (then ``path`` into it), read in-process: the
    waits for the operator's Node patch poll it every 0.3 s, up to a node retry period (30 s by default), and
    a kubectl fork per poll was CPU the whole suite shares. A failed read raises, as kubectl's would."""
    obj = await asyncio.to_thread(reader(workload.kubeconfig).get, "nodes", name, "")
    if not isinstance(obj, dict):
        raise AssertionError(f"kubectl get node {name} would fail: {obj!r}")
    got: Any = obj
    for key in path:
        got = got.get(key) if isinstance(got, dict) else None
    return got
