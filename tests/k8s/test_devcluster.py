"""The local control plane itself: it is a real apiserver at the pinned version, runs twice side by side,
carries the Cluster API CRDs, and leaves no process or file behind however its owner ends."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from capmaas_dev.devcluster import (
    CAPI_VERSION,
    ETCD_VERSION,
    K8S_VERSION,
    ControlPlane,
    MissingToolError,
    find_binary,
    run_kubectl,
)
from capmaas_dev.devcluster.controlplane import (
    EXTRA_ARGS_ENV,
    ONE_P_COMPONENTS,
    PROFILING_ENV,
    UNCACHED_RESOURCES,
    _apiserver_args,
)
from capmaas_dev.devcluster.pki import Pki
from capmaas_dev.devcluster.process import GO_GC_ENV, ONE_P_ENV, go_env, pid_alive

REPO = Path(__file__).resolve().parents[2]


def _wait_dead(pids: list[int], timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a work directory), to catch any straggler."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


# -- no control plane needed ------------------------------------------------------------------------------


def test_missing_binaries_fail_naming_make_controlplane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPMAAS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(MissingToolError, match=r"make controlplane") as err:
        ControlPlane.start()
    assert f"etcd {ETCD_VERSION}" in str(err.value)
    assert not list(tmp_path.glob("capmaas-cp-*"))


def test_apiserver_profiles_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILING_ENV, raising=False)
    pki = Pki.at(tmp_path)
    assert "--profiling=false" in _apiserver_args(pki, "http://127.0.0.1:1", 2)
    monkeypatch.setenv(PROFILING_ENV, "1")
    assert "--profiling=true" in _apiserver_args(pki, "http://127.0.0.1:1", 2)


def test_only_a_standin_apiserver_leaves_unused_resources_uncached_and_extra_flags_come_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EXTRA_ARGS_ENV, "--watch-cache-sizes=secrets#0 --v=2")
    pki = Pki.at(tmp_path)
    standin = _apiserver_args(pki, "http://127.0.0.1:1", 2)
    uncached = next(a for a in standin if a.startswith("--watch-cache-sizes=")).split("=", 1)[1].split(",")
    assert uncached == [f"{resource}#0" for resource in UNCACHED_RESOURCES]
    assert standin[-2:] == ["--watch-cache-sizes=secrets#0", "--v=2"]
    with_node = _apiserver_args(pki, "http://127.0.0.1:1", 443, node_ip="10.0.0.2")
    assert [a for a in with_node if a.startswith("--watch-cache-sizes=")] == ["--watch-cache-sizes=secrets#0"]
    assert with_node[-2:] == ["--watch-cache-sizes=secrets#0", "--v=2"]


def test_go_collector_pacing_is_filled_in_and_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GO_GC_ENV:
        monkeypatch.delenv(name, raising=False)
    assert {k: go_env()[k] for k in GO_GC_ENV} == dict(GO_GC_ENV)
    monkeypatch.setenv("GOGC", "150")
    assert go_env()["GOGC"] == "150"
    assert go_env()["GOMEMLIMIT"] == GO_GC_ENV["GOMEMLIMIT"]
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    assert "GOMAXPROCS" not in go_env()
    assert go_env(one_p=True)["GOMAXPROCS"] == ONE_P_ENV["GOMAXPROCS"]
    monkeypatch.setenv("GOMAXPROCS", "2")
    assert go_env(one_p=True)["GOMAXPROCS"] == "2"


def test_build_script_reads_the_python_versions_and_go_mods_agree() -> None:
    """One source of truth: the script's sed must find every version; the wrapper go.mods pin the same."""
    script = (REPO / "hack/build-tools.sh").read_text()
    assert "versions.py" in script
    assert not re.search(r"^(K8S|ETCD|HELM|CAPI)_VERSION=v", script, re.M), "versions hard-coded in script"
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'source <(sed -n "/^version_of()/,/^}}/p" {REPO}/hack/build-tools.sh); '
            f"versions_py={REPO}/tools/src/capmaas_dev/devcluster/versions.py; "
            "version_of K8S_VERSION; version_of ETCD_VERSION; version_of CAPI_VERSION",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [K8S_VERSION, ETCD_VERSION, CAPI_VERSION]
    assert f"require k8s.io/kubernetes {K8S_VERSION}\n" in (REPO / "hack/k8s/go.mod").read_text()
    assert f"require go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n" in (REPO / "hack/etcd/go.mod").read_text()


# -- the session control plane -----------------------------------------------------------------------------


@pytest.mark.k8s
def test_version_is_the_pinned_release(kubectl) -> None:
    version = json.loads(kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == K8S_VERSION
    assert version["minor"] == K8S_VERSION.split(".")[1]


@pytest.mark.k8s
def test_capi_core_crds_are_established_and_usable(kubectl, namespace: str) -> None:
    crd = json.loads(kubectl("get", "crd", "machines.cluster.x-k8s.io", "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert any(v["name"] == "v1beta2" and v["storage"] for v in crd["spec"]["versions"])
    for name in ("clusters", "machinesets", "machinedeployments"):
        kubectl("get", "crd", f"{name}.cluster.x-k8s.io")
    cluster = textwrap.dedent(
        f"""
        apiVersion: cluster.x-k8s.io/v1beta2
        kind: Cluster
        metadata: {{name: c1, namespace: {namespace}}}
        spec:
          clusterNetwork: {{pods: {{cidrBlocks: [192.168.0.0/16]}}}}
        """
    )
    kubectl("apply", "-f", "-", input=cluster)
    got = json.loads(kubectl("get", "clusters.cluster.x-k8s.io", "c1", "-n", namespace, "-o", "json").stdout)
    assert got["metadata"]["name"] == "c1"
    assert CAPI_VERSION.startswith("v1.13.")


@pytest.mark.k8s
def test_namespace_fixture_gives_a_fresh_active_namespace(kubectl, namespace: str) -> None:
    phase = kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Active"
    assert kubectl("get", "configmaps", "-n", namespace, "-o", "name").stdout.strip() in {
        "",
        "configmap/kube-root-ca.crt",
    }


@pytest.mark.k8s
def test_controller_manager_collects_garbage_and_deletes_namespaces(kube, kubectl) -> None:
    find_binary("kube-controller-manager")  # the fixture runs it when built; `make controlplane` builds it
    assert any(c.name == "kube-controller-manager" for c in kube.components)
    ns = f"gc-{os.getpid()}"
    kubectl("create", "namespace", ns)
    kubectl("create", "configmap", "owner", "-n", ns)
    uid = kubectl("get", "configmap", "owner", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout
    child = textwrap.dedent(
        f"""
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: child
          namespace: {ns}
          ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]
        """
    )
    kubectl("apply", "-f", "-", input=child)
    kubectl("delete", "configmap", "owner", "-n", ns)
    kubectl("wait", "--for=delete", "configmap/child", "-n", ns, "--timeout=60s")
    kubectl("delete", "namespace", ns, "--timeout=90s")
    assert kubectl("get", "namespace", ns, check=False).returncode != 0


@pytest.mark.k8s
def test_control_plane_processes_run_with_the_go_collector_pacing(kube) -> None:
    """etcd, the apiserver and the controller-manager get GO_GC_ENV (or the test run's own values); etcd and
    the controller-manager run on one Go scheduler thread, the apiserver on its default."""
    expected = {k: os.environ.get(k, v) for k, v in GO_GC_ENV.items()}
    assert {c.name for c in kube.components} >= ONE_P_COMPONENTS
    for comp in kube.components:
        raw = Path(f"/proc/{comp.pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        assert {k: env.get(k) for k in GO_GC_ENV} == expected, comp.name
        one_p = (
            {k: os.environ.get(k, v) for k, v in ONE_P_ENV.items()} if comp.name in ONE_P_COMPONENTS else {}
        )
        assert {k: env[k] for k in ONE_P_ENV if k in env} == one_p, comp.name


@pytest.mark.k8s
def test_unused_builtin_resources_are_served_without_a_watch_cache(kubectl, namespace: str) -> None:
    """The stand-in apiserver keeps watch caches only for what is used (UNCACHED_RESOURCES are read from
    etcd), and still serves every resource: a PodTemplate can be created, listed and watched."""
    metrics = kubectl("get", "--raw", "/metrics").stdout
    cached = set(
        re.findall(
            r'^apiserver_watch_cache_initializations_total\{group="([^"]*)",resource="([^"]+)"', metrics, re.M
        )
    )
    cached_names = {f"{resource}.{group}" if group else resource for group, resource in cached}
    assert {"configmaps", "secrets", "namespaces", "leases.coordination.k8s.io"} <= cached_names
    assert cached_names.isdisjoint(UNCACHED_RESOURCES), cached_names & set(UNCACHED_RESOURCES)
    path = f"/api/v1/namespaces/{namespace}/podtemplates"
    before = json.loads(kubectl("get", "--raw", path).stdout)["metadata"]["resourceVersion"]
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t1", "namespace": namespace},
        "template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}},
    }
    kubectl("create", "-f", "-", input=json.dumps(template))
    assert kubectl("get", "podtemplates", "-n", namespace, "-o", "name").stdout.split() == ["podtemplate/t1"]
    # A watch from before the create replays it (from etcd's history) and ends after its timeout.
    events = kubectl("get", "--raw", f"{path}?watch=1&resourceVersion={before}&timeoutSeconds=2").stdout
    added = [json.loads(line) for line in events.splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in added] == [("ADDED", "t1")]


@pytest.mark.k8s
def test_two_control_planes_at_once_are_independent(kube, workload_kube, kubectl) -> None:
    assert kube.server != workload_kube.server
    assert set(kube.pids()).isdisjoint(workload_kube.pids())
    name = f"only-in-workload-{os.getpid()}"
    kubectl("create", "namespace", name, kubeconfig=workload_kube.kubeconfig)
    try:
        assert kubectl("get", "namespace", name, check=False).returncode != 0
        assert kubectl("get", "namespace", name, kubeconfig=workload_kube.kubeconfig).returncode == 0
        # The workload cluster carries no CAPI CRDs: it stands in for a plain workload cluster.
        missing = kubectl(
            "get", "crd", "machines.cluster.x-k8s.io", kubeconfig=workload_kube.kubeconfig, check=False
        )
        assert missing.returncode != 0
    finally:
        kubectl("delete", "namespace", name, "--wait=false", kubeconfig=workload_kube.kubeconfig, check=False)


# -- lifecycle of extra instances --------------------------------------------------------------------------


@pytest.mark.k8s
def test_start_stop_leaves_no_process_or_file() -> None:
    started = time.monotonic()
    with ControlPlane.start(controller_manager=True) as cp:
        elapsed = time.monotonic() - started
        pids, workdir = cp.pids(), cp.workdir
        assert len(pids) == 3
        assert cp.kubectl("get", "--raw", "/readyz").stdout == "ok"
        assert cp.env()["KUBECONFIG"] == str(cp.kubeconfig)
    print(f"control plane (etcd + apiserver + controller-manager) ready in {elapsed:.1f}s")
    assert _wait_dead(pids, timeout=1) == []
    assert not workdir.exists()
    assert _procs_mentioning(str(workdir)) == []
    cp.stop()  # idempotent


@pytest.mark.k8s
def test_a_failing_test_body_still_tears_down() -> None:
    seen: dict[str, object] = {}

    def body() -> None:
        with ControlPlane.start(controller_manager=False) as cp:
            seen.update(pids=cp.pids(), workdir=cp.workdir)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        body()
    assert _wait_dead(seen["pids"], timeout=1) == []  # type: ignore[arg-type]
    assert not Path(str(seen["workdir"])).exists()


_CHILD = textwrap.dedent(
    """
    import json, time
    from capmaas_dev.devcluster import ControlPlane
    cp = ControlPlane.start(controller_manager=False)
    print(json.dumps({"pids": cp.pids(), "workdir": str(cp.workdir)}), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.k8s
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_owner_killed_by_a_signal_takes_the_control_plane_with_it(sig: signal.Signals) -> None:
    """SIGTERM runs the cleanup (files too); even SIGKILL, which runs nothing, kills the children through
    PR_SET_PDEATHSIG."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        pids, workdir = info["pids"], Path(info["workdir"])
        assert all(pid_alive(p) for p in pids)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == -sig
        assert _wait_dead(pids) == []
        assert _procs_mentioning(str(workdir)) == []
        if sig == signal.SIGTERM:
            assert not workdir.exists()
    finally:
        proc.kill()
        proc.wait()
        if "workdir" in locals():
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.k8s
def test_cli_up_env_down_round_trip(tmp_path: Path) -> None:
    directory = tmp_path / "dc"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "capmaas", "dev-cluster", *args, "--dir", str(directory)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    up = cli("up", "--no-capi-crds")
    assert up.returncode == 0, up.stderr
    export = f"export KUBECONFIG={directory / 'kubeconfig'}"
    assert up.stdout.strip() == export
    try:
        assert cli("env").stdout.strip() == export
        state = json.loads((directory / "state.json").read_text())
        pids = [c["pid"] for c in state["components"]]
        assert all(pid_alive(p) for p in pids)  # detached: still running after `up` returned
        again = cli("up")
        assert again.returncode == 0
        assert "already running" in again.stderr
        status = cli("status")
        assert status.returncode == 0
        assert status.stdout.startswith("running")
        ns = run_kubectl(directory / "kubeconfig", "get", "namespace", "default", "-o", "name").stdout
        assert ns.strip() == "namespace/default"
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert _wait_dead(pids, timeout=1) == []
    assert sorted(p.name for p in directory.iterdir()) == []
    assert cli("env").returncode == 1
    assert cli("status").returncode == 1
