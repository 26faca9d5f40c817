"""``make release``: the whole build once (module fixture, the image built twice for the digest check), every
artifact and the links between them checked from outside the build's own verifier, a tampered copy refused,
and an install from the release as a clusterctl user does it — offline, from a local repository laid out
from ``dist/`` — reconciling a MaasCluster and machines on the MAAS simulator.

The install runs on a throwaway control plane (no kubelet, as ``tests/e2e/test_clusterctl_repo.py``): the
installed Deployment cannot become a Pod, so its container is run as a process the way the kubelet would
start it — its args and env as installed (``fieldRef``s resolved, the credentials Secret's items written
where the volume mounts them), the Python code from the release's wheel (``PYTHONPATH`` is the ``.whl``,
imported from the zip), authenticated as the installed ServiceAccount (a token from the TokenRequest API,
so the components' RBAC is what it has). Only the ports and the bind address are changed (this shares the
loopback with other tests). CAPI core is installed by clusterctl too, but with no pods its admission
webhooks would refuse every CAPI object: they are removed and ``capmaas.demo.capi.Capi`` plays the CAPI
controllers, as in ``tests/pod``. The image's own start-up is proven by ``tests/pod`` on a real node.

Needs buildah and the base image (``make image``), helm, clusterctl and the CAPI module cache
(``make controlplane``), and the ``dev`` extra. Several minutes: two image builds.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from capmaas import __version__, clusterctl_repo
from capmaas.demo.capi import Capi, MachineSpec
from capmaas.demo.kube import MAASCLUSTERS, MAASMACHINES, Kube
from capmaas.demo.simthread import SimulatorThread
from capmaas.devcluster import MissingToolError, find_binary
from capmaas.release.build import Options, Release
from capmaas.release.verify import Names, Report, VerifyError, verify
from capmaas.simulator import Inventory, Timings

# The module fixture builds the release (two image builds): about 3 minutes on a quiet box, more under load.
pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
VERSION = __version__
NAMES = Names(VERSION)
INVENTORY = REPO / "examples" / "inventory-sample.yaml"
CAPI_PROVIDERS = "cluster-api,bootstrap-kubeadm,control-plane-kubeadm"


@dataclass
class Built:
    dist: Path
    report: Report
    reproducible: tuple[str, str] | None
    seconds: float


def _tool(name: str) -> str:
    try:
        return str(find_binary(name))
    except MissingToolError as exc:
        pytest.fail(f"the release tests need {name}: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    dist = tmp_path_factory.mktemp("release") / "dist"
    started = time.monotonic()
    release = Release(Options(VERSION, dist))
    report = release.run()
    seconds = time.monotonic() - started
    print("\n".join(report.lines()), f"\nrelease build: {seconds:.0f}s; steps {release.timings}")
    return Built(dist, report, release.reproducible, seconds)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_artifact_is_there_and_they_agree(built: Built) -> None:
    dist = built.dist
    assert sorted(p.name for p in dist.iterdir()) == sorted(NAMES.all())
    # The digest, read here from the archive's index (not through capmaas.release.oci).
    with tarfile.open(dist / NAMES.image) as tar:
        f = tar.extractfile("index.json")
        assert f is not None
        (entry,) = json.load(f)["manifests"]
    digest = entry["digest"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == f"localhost/capmaas:{VERSION}"
    # Built twice from the same wheels: the same digest (the build refuses otherwise).
    assert built.reproducible == (digest, digest)
    ref = f"localhost/capmaas:{VERSION}@{digest}"

    # SHA256SUMS holds, checked by coreutils.
    check = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=dist, capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(NAMES.all()) - 1

    # clusterctl: the components run the image by digest; the templates are the repository's.
    (deploy,) = [d for d in _docs(dist / "infrastructure-components.yaml") if d["kind"] == "Deployment"]
    assert [c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]] == [ref]
    assert deploy["metadata"]["labels"]["app.kubernetes.io/version"] == VERSION
    meta = _docs(dist / "metadata.yaml")[0]
    assert {"major": 0, "minor": int(VERSION.split(".")[1]), "contract": "v1beta2"} in meta["releaseSeries"]
    source = REPO / clusterctl_repo.OUT_DIR / clusterctl_repo.PROVIDER / clusterctl_repo.VERSION
    for name in NAMES.clusterctl:
        if name != "infrastructure-components.yaml":
            assert (dist / name).read_text() == (source / name).read_text(), name
    assert {n for n in NAMES.clusterctl if n.startswith("cluster-template")} == {
        p.name for p in source.glob("cluster-template*.yaml")
    }  # every flavor

    # The chart: versioned, the digest pinned in its values, rendered so by helm.
    helm = _tool("helm")
    chart = yaml.safe_load(_run([helm, "show", "chart", str(dist / NAMES.chart)]))
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    values = yaml.safe_load(_run([helm, "show", "values", str(dist / NAMES.chart)]))
    assert values["image"]["digest"] == digest
    rendered = _run([helm, "template", "capmaas", str(dist / NAMES.chart)])
    images = [c["image"] for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]]  # fmt: skip
    assert images == [ref]

    # SBOMs: valid CycloneDX (checked in the build), with the pinned dependencies and the base's packages.
    python = json.loads((dist / NAMES.python_sbom).read_text())
    assert python["bomFormat"] == "CycloneDX"
    py = {c["name"].lower(): c["version"] for c in python["components"]}
    assert py["capmaas"] == VERSION
    assert py["kopf"] == "1.45.2"  # pyproject's pin
    assert "pip" not in py  # the image removes it; so does the SBOM's environment
    debian = json.loads((dist / NAMES.debian_sbom).read_text())
    deb = {c["name"] for c in debian["components"]}
    assert {"python3", "base-files", "ca-certificates", "passwd", "dpkg"} <= deb
    assert built.report.python_components == len(py) > 20
    assert built.report.debian_components == len(deb) > 50
    print(f"SBOM components: python {len(py)}, debian {len(deb)}; digest {digest}")


def _run(args: list[str], **kw: Any) -> str:
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120, **kw)
    assert out.returncode == 0, f"{args[:3]}: {out.stderr}"
    return out.stdout


def test_a_tampered_release_is_refused(built: Built, tmp_path: Path) -> None:
    copy = tmp_path / "dist"
    shutil.copytree(built.dist, copy)
    verify(copy, VERSION)  # the copy passes as it is
    with (copy / "metadata.yaml").open("a") as f:
        f.write("# changed\n")
    with pytest.raises(VerifyError, match=r"SHA256SUMS: metadata\.yaml does not match"):
        verify(copy, VERSION)
    # The components pointed back at the tag, SHA256SUMS rewritten to match: the digest link still fails.
    shutil.copy2(built.dist / "metadata.yaml", copy / "metadata.yaml")
    components = copy / "infrastructure-components.yaml"
    components.write_text(components.read_text().replace(f"@{built.report.digest}", ""))
    from capmaas.release.verify import write_sums

    write_sums(copy)
    with pytest.raises(VerifyError, match=r"infrastructure-components\.yaml runs"):
        verify(copy, VERSION)


# -- install from the release -------------------------------------------------------------------------------
def _resolve_env(container: dict[str, Any], namespace: str, pod: str) -> dict[str, str]:
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        field = e["valueFrom"]["fieldRef"]["fieldPath"]  # the only valueFrom the components use
        env[e["name"]] = {"metadata.namespace": namespace, "metadata.name": pod}[field]
    return env


def _mount_secrets(
    deploy: dict[str, Any], container: dict[str, Any], kubectl: Any, namespace: str, root: Path
) -> dict[str, str]:
    """The Secret volumes as the kubelet lays them out: mount path -> a directory of the items."""
    spec = deploy["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    moved = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" not in volume:
            continue
        secret = json.loads(
            kubectl("get", "secret", "-n", namespace, volume["secret"]["secretName"], "-o", "json")
        )
        target = root / mount["name"]
        target.mkdir(parents=True)
        for item in volume["secret"]["items"]:
            (target / item["path"]).write_bytes(base64.b64decode(secret["data"][item["key"]]))
        moved[mount["mountPath"]] = str(target)
    return moved


def _serviceaccount_kubeconfig(admin: Path, token: str, dest: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": "capmaas-sa", "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = "capmaas-sa"
    dest.write_text(yaml.safe_dump(config))
    return dest


@pytest.fixture
def simulator() -> Iterator[SimulatorThread]:
    sim = SimulatorThread(Inventory.from_yaml(INVENTORY), Timings(deploy=2.0, release=0.5)).start()
    try:
        yield sim
    finally:
        sim.stop()


def test_clusterctl_init_from_the_release_reconciles_on_the_simulator(
    built: Built, simulator: SimulatorThread, tmp_path: Path
) -> None:
    from capmaas.devcluster import ControlPlane, run_kubectl
    from capmaas.devcluster.capi import apply_objects, build_capi_repository, cert_manager_api_standin
    from capmaas.devcluster.process import free_port

    clusterctl = _tool("clusterctl")
    # The local repository as a user lays out a GitHub release's assets: <provider>/<version>/<asset>.
    repo = tmp_path / "repo"
    providers = build_capi_repository(repo)
    version_dir = repo / clusterctl_repo.PROVIDER / f"v{VERSION}"
    version_dir.mkdir(parents=True)
    for name in NAMES.clusterctl:
        shutil.copy2(built.dist / name, version_dir / name)
    url = (version_dir / "infrastructure-components.yaml").as_uri()
    providers.append({"name": "maas", "type": "InfrastructureProvider", "url": url})
    config = tmp_path / "clusterctl.yaml"
    config.write_text(yaml.safe_dump({"providers": providers}))
    env = {**os.environ, "HOME": str(tmp_path), "CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "GOPROXY": "off",
           "MAAS_ENDPOINT": simulator.url, "MAAS_API_KEY": simulator.api_key}  # fmt: skip
    ns, pod = "capmaas-system", "capmaas-release-test"
    timings: dict[str, float] = {}
    operator: subprocess.Popen[bytes] | None = None
    log = tmp_path / "operator.log"
    with ControlPlane.start(controller_manager=False) as cp:

        def kubectl(*args: str) -> str:
            return run_kubectl(cp.kubeconfig, *args).stdout

        apply_objects(cp.kubeconfig, cert_manager_api_standin())
        kubectl("wait", "--for=condition=Established", "crd", "-l", "capmaas.dev/stand-in=true")
        t0 = time.monotonic()
        out = subprocess.run(
            [clusterctl, "init", "--config", str(config), "--kubeconfig", str(cp.kubeconfig),
             "--infrastructure", f"maas:v{VERSION}"],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        timings["clusterctl init"] = time.monotonic() - t0
        inventory = json.loads(kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json"))
        assert ("InfrastructureProvider", "maas", f"v{VERSION}") in {
            (p["type"], p["providerName"], p["version"]) for p in inventory["items"]
        }
        deploy = json.loads(kubectl("get", "deployment", "-n", ns, "capmaas", "-o", "json"))
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["image"] == built.report.image_ref  # installed by digest

        # No CAPI pods run here: their webhooks go, the stand-in plays CAPI (module doc).
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            kubectl("delete", kind, "-l", f"cluster.x-k8s.io/provider in ({CAPI_PROVIDERS})")

        # The installed container, as a process (module doc).
        token = kubectl("create", "token", deploy["spec"]["template"]["spec"]["serviceAccountName"], "-n", ns)
        sa_config = _serviceaccount_kubeconfig(cp.kubeconfig, token.strip(), tmp_path / "sa.kubeconfig")
        proc_env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPMAAS_", "KUBE"))}
        proc_env |= _resolve_env(container, ns, pod)
        mounts = _mount_secrets(deploy, container, kubectl, ns, tmp_path / "volumes")
        proc_env["CAPMAAS_SECRETS_DIR"] = mounts[proc_env["CAPMAAS_SECRETS_DIR"]]
        health = free_port()
        proc_env |= {
            "KUBECONFIG": str(sa_config),
            "PYTHONPATH": str(built.dist / NAMES.wheel),
            "CAPMAAS_SERVER__BIND_ADDRESS": "127.0.0.1",
            "CAPMAAS_SERVER__HEALTH_PORT": str(health),
            "CAPMAAS_SERVER__METRICS_PORT": str(free_port()),
            "CAPMAAS_POLLING__FAST_INTERVAL": "0.3",
        }
        where = _run([sys.executable, "-c", "import capmaas; print(capmaas.__file__)"], env=proc_env)
        assert NAMES.wheel in where  # the release's code, not the checkout's
        kube = Kube(cp.kubeconfig)
        try:
            with log.open("wb") as sink:
                operator = subprocess.Popen(
                    [sys.executable, "-m", "capmaas", *container["args"]],
                    env=proc_env, stdout=sink, stderr=subprocess.STDOUT,
                )  # fmt: skip
            process = operator

            def alive() -> None:
                if process.poll() is not None:
                    pytest.fail(f"the operator exited ({process.returncode}):\n{log.read_text()[-4000:]}")

            _reconcile(kube, simulator, alive, lambda: log.read_text(errors="replace"), timings)
        finally:
            kube.close()
            if operator is not None:
                operator.terminate()
                try:
                    operator.wait(30)
                except subprocess.TimeoutExpired:
                    operator.kill()
                    operator.wait()
    text = log.read_text(errors="replace")
    denied = [ln for ln in text.splitlines() if "forbidden" in ln.lower()]
    assert not denied, "the components' RBAC denied the operator:\n" + "\n".join(denied[:20])
    print(f"install from the release: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")


def _reconcile(
    kube: Kube,
    sim: SimulatorThread,
    alive: Callable[[], None],
    logs: Callable[[], str],
    timings: dict[str, float],
    *,
    plaintext: bool = False,
) -> None:
    """A MaasCluster and three machines to Ready through the installed operator, then all of it deleted and
    every MAAS machine released. ``alive`` fails the test when the operator died; ``logs`` is its log."""

    def wait(what: str, done: Callable[[], object], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout:.0f}s\n{logs()[-4000:]}")
            time.sleep(0.5)

    ns = "release-test"
    specs = [
        MachineSpec("rel-cp-0", True, tags=("control-plane",)),
        MachineSpec("rel-worker-0", False, resource_pool="workers"),
        MachineSpec("rel-worker-1", False, resource_pool="workers"),
    ]
    t0 = time.monotonic()
    kube.create_namespace(ns)
    capi = Capi(kube, ns, "sample")
    # Off loopback (the node's address), http:// needs the identity's explicit opt-in.
    capi.create_cluster(sim.url, sim.api_key, allow_plaintext_http=plaintext)
    capi.wait_infrastructure(120.0, check=alive)
    capi.create_machines(specs)

    def ready() -> list[dict[str, Any]]:
        return [
            m
            for m in kube.list(MAASMACHINES, ns)
            if (m.get("status") or {}).get("ready") and (m.get("spec") or {}).get("providerID")
        ]

    wait("3 MaasMachines Ready", lambda: len(ready()) == len(specs), 180)
    timings["MaasCluster + 3 machines Ready"] = time.monotonic() - t0
    deployed = {sid for sid, m in sim.machine_states().items() if m["status_name"] == "Deployed"}
    assert deployed == {m["spec"]["providerID"].rsplit("/", 1)[-1] for m in ready()}
    assert kube.get(MAASCLUSTERS, ns, "sample") is not None

    t1 = time.monotonic()
    names = [s.name for s in specs]
    capi.delete_machines(names)
    wait("MaasMachines gone", lambda: not kube.list(MAASMACHINES, ns), 120)
    capi.delete_rest(names)
    wait("MaasCluster gone", capi.finish_delete, 120)

    def released() -> bool:
        return not any(m["owner"] or m["status_name"] != "Ready" for m in sim.machine_states().values())

    wait("every MAAS machine released", released, 60)
    timings["deleted and released"] = time.monotonic() - t1


# -- helm install of the packaged chart on a node ------------------------------------------------------------
def test_helm_install_of_the_packaged_chart_on_a_node(built: Built) -> None:
    """The packaged ``.tgz`` as it is (its values pin the image by digest), on the one-node cluster with the
    image imported from the release's archive: the Pod runs the pinned image and reconciles a MaasCluster and
    three machines on the simulator, then deletes and releases them. ``pullPolicy=Never`` (the only value
    set besides the credentials) makes a digest the node cannot resolve fail at once instead of pulling."""
    from capmaas.devcluster import apply_capi_crds
    from capmaas.devcluster.node import NODE_IP, Node

    helm = _tool("helm")
    try:
        node = Node.start()
    except MissingToolError as exc:
        pytest.fail(f"needs the one-node cluster (make node): {exc}", pytrace=False)
    timings: dict[str, float] = {}
    sim: SimulatorThread | None = None
    kube: Kube | None = None
    ns = "capmaas-system"
    try:
        node.import_image(built.dist / NAMES.image, digests=True)
        with node.entered():
            apply_capi_crds(node.kubeconfig)
            sim = SimulatorThread(
                Inventory.from_yaml(INVENTORY), Timings(deploy=2.0, release=0.5), host=NODE_IP
            )
            sim.start()
            kube = Kube(node.kubeconfig)
            t0 = time.monotonic()
            out = subprocess.run(
                [helm, f"--kubeconfig={node.kubeconfig}", "install", "capmaas", str(built.dist / NAMES.chart),
                 "--namespace", ns, "--create-namespace", "--set", "image.pullPolicy=Never",
                 "--set", "replicaCount=1", "--wait", "--timeout=240s"],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip

            def describe() -> str:
                pods = node.kubectl("describe", "pods", "-n", ns, check=False).stdout
                return f"{out.stderr}\n{pods[-4000:]}"

            assert out.returncode == 0, describe()
            timings["helm install --wait"] = time.monotonic() - t0
            pods = json.loads(node.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
            assert [p["spec"]["containers"][0]["image"] for p in pods] == [built.report.image_ref]
            status = pods[0]["status"]["containerStatuses"][0]
            assert status["ready"], describe()
            assert status["imageID"].endswith(built.report.digest), status  # the pinned image is what runs
            name = pods[0]["metadata"]["name"]
            version = node.kubectl(
                "exec", "-n", ns, name, "--", "python", "-c", "import capmaas; print(capmaas.__version__)"
            ).stdout.strip()
            assert version == VERSION

            def pod_logs() -> str:
                return node.kubectl("logs", "-n", ns, name, check=False).stdout

            def alive() -> None:
                pod = json.loads(node.kubectl("get", "pod", "-n", ns, name, "-o", "json").stdout)
                if pod["status"]["containerStatuses"][0]["restartCount"]:
                    pytest.fail(f"the operator container restarted:\n{describe()}")

            _reconcile(kube, sim, alive, pod_logs, timings, plaintext=True)
            logs = pod_logs()
            denied = [ln for ln in logs.splitlines() if "forbidden" in ln.lower()]
            assert not denied, "\n".join(denied[:20])
    finally:
        if kube is not None:
            kube.close()
        if sim is not None:
            sim.stop()
        node.stop()
    print(f"helm install from the release: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
