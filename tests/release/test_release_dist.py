"""``make release``: the whole build once (the session's ``built``, ``conftest.py``, shared with the upgrade
tests; the image built twice for the digest check), every artifact and the links between them checked from
outside the build's own verifier, a tampered copy refused, and an install from the release as a clusterctl
user does it — offline, from a local repository laid out from ``dist/`` — reconciling a MaasCluster and
machines on the MAAS simulator.

The install runs on a throwaway control plane (no kubelet, as ``tests/e2e/test_clusterctl_repo.py``): the
installed Deployment cannot become a Pod, so its container is run as a process the way the kubelet would
start it — its args and env as installed (``fieldRef``s resolved, the credentials Secret's items written
where the volume mounts them), the Python code from the release's wheel (``PYTHONPATH`` is the ``.whl``,
imported from the zip), authenticated as the installed ServiceAccount (a token from the TokenRequest API,
so the components' RBAC is what it has). Only the ports and the bind address are changed (this shares the
loopback with other tests). CAPI core is installed by clusterctl too, but with no pods its admission
webhooks would refuse every CAPI object: they are removed and ``capmaas_dev.demo.capi.Capi`` plays the CAPI
controllers, as in ``tests/pod``. The image's own start-up is proven by ``tests/pod`` on a real node.

Needs root, buildah and mmdebstrap (``make image`` installs them; the build runs on a new machine, its base
made there: ``new_machine``), helm, clusterctl and the CAPI module cache (``make controlplane``), and the
``release`` extra of capmaas-dev. Several minutes: the base and two image builds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from release_support import (
    CAPI_PROVIDERS,
    REPO,
    VERSION,
    Built,
    InstalledProcess,
    Workload,
    run,
    simulator,
    tool,
)

from capmaas_dev import clusterctl_repo
from capmaas_dev.demo.kube import Kube
from capmaas_dev.devcluster import MissingToolError
from capmaas_dev.release.verify import Names, VerifyError, verify

# The session's release build (conftest): two image builds, about 3 minutes on a quiet box, more under load.
pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(2400)]

NAMES = Names(VERSION)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_artifact_is_there_and_they_agree(built: Built) -> None:
    dist = built.dist
    assert sorted(p.name for p in dist.iterdir()) == sorted(NAMES.all())
    # The digest, read here from the archive's index (not through capmaas_dev.release.oci).
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
    helm = tool("helm")
    chart = yaml.safe_load(run([helm, "show", "chart", str(dist / NAMES.chart)]))
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    values = yaml.safe_load(run([helm, "show", "values", str(dist / NAMES.chart)]))
    assert values["image"]["digest"] == digest
    rendered = run([helm, "template", "capmaas", str(dist / NAMES.chart)])
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
    from capmaas_dev.release.verify import write_sums

    write_sums(copy)
    with pytest.raises(VerifyError, match=r"infrastructure-components\.yaml runs"):
        verify(copy, VERSION)


# -- install from the release -------------------------------------------------------------------------------
def test_clusterctl_init_from_the_release_reconciles_on_the_simulator(built: Built, tmp_path: Path) -> None:
    from capmaas_dev.devcluster import ControlPlane, run_kubectl
    from capmaas_dev.devcluster.capi import apply_objects, build_capi_repository, cert_manager_api_standin

    clusterctl = tool("clusterctl")
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
    ns, pod = "capmaas-system", "capmaas-release-test"
    timings: dict[str, float] = {}
    operator: InstalledProcess | None = None
    with simulator() as sim, ControlPlane.start(controller_manager=False) as cp:
        env = {**os.environ, "HOME": str(tmp_path), "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
               "GOPROXY": "off", "MAAS_ENDPOINT": sim.url, "MAAS_API_KEY": sim.api_key}  # fmt: skip

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
        kube = Kube(cp.kubeconfig)
        try:
            operator = InstalledProcess.start(
                kubectl, cp.kubeconfig, built.dist / NAMES.wheel, tmp_path / "operator", namespace=ns, pod=pod
            )
            running = operator
            work = Workload(kube, sim, running.alive, running.text, timings=timings)
            work.create()
            work.delete()
        finally:
            kube.close()
            if operator is not None:
                operator.stop()
    denied = operator.denied()
    assert not denied, "the components' RBAC denied the operator:\n" + "\n".join(denied[:20])
    print(f"install from the release: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")


# -- helm install of the packaged chart on a node ------------------------------------------------------------
def test_helm_install_of_the_packaged_chart_on_a_node(built: Built) -> None:
    """The packaged ``.tgz`` as it is (its values pin the image by digest), on the one-node cluster with the
    image imported from the release's archive: the Pod runs the pinned image and reconciles a MaasCluster and
    three machines on the simulator, then deletes and releases them. ``pullPolicy=Never`` (the only value
    set besides the credentials) makes a digest the node cannot resolve fail at once instead of pulling."""
    from capmaas_dev.devcluster import apply_capi_crds
    from capmaas_dev.devcluster.node import NODE_IP, Node

    helm = tool("helm")
    try:
        node = Node.start()
    except MissingToolError as exc:
        pytest.fail(f"needs the one-node cluster (make node): {exc}", pytrace=False)
    timings: dict[str, float] = {}
    kube: Kube | None = None
    ns = "capmaas-system"
    try:
        node.import_image(built.dist / NAMES.image, digests=True)
        with node.entered(), simulator(NODE_IP) as sim:
            apply_capi_crds(node.kubeconfig)
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

            work = Workload(kube, sim, alive, pod_logs, timings=timings)
            work.create(plaintext=True)
            work.delete()
            logs = pod_logs()
            denied = [ln for ln in logs.splitlines() if "forbidden" in ln.lower()]
            assert not denied, "\n".join(denied[:20])
    finally:
        if kube is not None:
            kube.close()
        node.stop()
    print(f"helm install from the release: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
