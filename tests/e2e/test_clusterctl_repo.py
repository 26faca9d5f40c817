"""The clusterctl provider repository (``deploy/clusterctl``): up to date with its sources, shaped as the
clusterctl contract asks, its cluster templates render into objects the apiserver and CAPI's webhooks accept,
and a real ``clusterctl init`` installs it — offline, from local repositories.

``clusterctl init`` runs against a throwaway control plane of its own (never ``kube``): it installs CAPI's
provider webhooks, whose Services have no pods here, and they would then refuse every CAPI object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from e2e_support import REPO, Kubectl

from capmaas_dev import clusterctl_repo, crdgen

if TYPE_CHECKING:
    from capmaas_dev.devcluster.capi import CapiManager

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

BASE = REPO / clusterctl_repo.OUT_DIR / clusterctl_repo.PROVIDER / clusterctl_repo.VERSION
VARIABLES = {
    "MAAS_DNS_DOMAIN": "maas",
    "MAAS_IMAGE": "ubuntu/noble",
    "KUBERNETES_VERSION": "v1.33.0",
    "CONTROL_PLANE_MACHINE_COUNT": "3",
    "WORKER_MACHINE_COUNT": "2",
    # The kube-vip flavor's (unused by the others: clusterctl substitutes only what a template names).
    "CONTROL_PLANE_VIP": "10.20.0.250",
    "KUBE_VIP_INTERFACE": "eno1",
    "KUBE_VIP_IMAGE": "mirror.example/kube-vip/kube-vip:v1.0.0",
}


def _clusterctl() -> str:
    from capmaas_dev.devcluster import MissingToolError, find_binary

    try:
        return str(find_binary("clusterctl"))
    except MissingToolError as exc:
        pytest.fail(f"needs clusterctl: {exc}", pytrace=False)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # No version check against GitHub, no Go proxy, no user config: everything local.
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
        "GOPROXY": "off",
        **extra,
    }


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_repository_is_generated_and_up_to_date() -> None:
    assert clusterctl_repo.drift() == [], "run `python -m capmaas_dev.clusterctl_repo` and commit the result"


def test_repository_follows_the_clusterctl_contract() -> None:
    meta = _docs(BASE / "metadata.yaml")[0]
    assert meta == {
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Metadata",
        # Every series from 0.1 up to this version's (0.1 and 0.2 on 0.2.0.dev0).
        "releaseSeries": [
            {"major": 0, "minor": m, "contract": "v1beta2"}
            for m in range(1, int(clusterctl_repo.VERSION.split(".")[1]) + 1)
        ],
    }
    docs = _docs(BASE / "infrastructure-components.yaml")
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == ["capmaas-system"]
    for d in docs:
        assert d["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "infrastructure-maas", d["kind"]
        if d["kind"] not in {
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",  # template immutability (cluster-scoped)
            "ValidatingAdmissionPolicyBinding",
        }:
            assert d["metadata"]["namespace"] == "capmaas-system", (d["kind"], d["metadata"]["name"])
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert sorted(c["metadata"]["name"] for c in crds) == sorted(k.crd_name for k in crdgen.KINDS)
    for crd in crds:  # the contract clusterctl's metadata names must be on the CRDs
        assert crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1beta1"
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (manager,) = deploy["spec"]["template"]["spec"]["containers"]
    assert manager["name"] == "manager"
    assert manager["args"][0] == "run"
    assert "/" in manager["image"].split(":")[0]  # canonical (domain/…), as clusterctl's image overrides need
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["stringData"] == {"MAAS_ENDPOINT": "${MAAS_ENDPOINT}", "MAAS_API_KEY": "${MAAS_API_KEY}"}
    text = (BASE / "infrastructure-components.yaml").read_text()
    assert "helm.sh/chart" not in text
    assert "checksum/credentials" not in text
    # Which namespaces may use those default credentials: a variable, none when it is not set (issue 10).
    assert 'value: "${MAAS_DEFAULT_IDENTITY_NAMESPACES:= }"' in text
    # `capmaas run --namespace` exists (the contract's MUST), so a clusterctl user can scope it.
    capmaas = Path(sys.executable).parent / "capmaas"
    helptext = subprocess.run(
        [str(capmaas), "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--namespace" in helptext


@pytest.mark.parametrize("flavor", ["", "lxd", "kube-vip"])
def test_generate_cluster_renders_objects_the_apiserver_accepts(
    flavor: str,
    capi: CapiManager,
    kubeadm_crds: None,
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    """``clusterctl generate cluster --from`` with the variables set; the result is applied as a server-side
    dry-run in the CAPI manager's namespace, so the capmaas CRDs, the kubeadm CRDs (schemas only, from the
    module cache) and CAPI's admission webhooks all judge it."""
    ns = capi.namespace
    assert ns is not None
    template = BASE / (f"cluster-template-{flavor}.yaml" if flavor else "cluster-template.yaml")
    (tmp_path / "clusterctl.yaml").write_text("{}\n")
    out = subprocess.run(
        [_clusterctl(), "generate", "cluster", "demo", "--from", str(template), "--target-namespace", ns,
         "--config", str(tmp_path / "clusterctl.yaml")],
        capture_output=True, text=True, env=_env(tmp_path, **VARIABLES), timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "${" not in out.stdout
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = [d["kind"] for d in docs]
    assert sorted(kinds) == sorted(
        ["Cluster", "MaasCluster", "KubeadmControlPlane", "MaasMachineTemplate", "MachineDeployment",
         "MaasMachineTemplate", "KubeadmConfigTemplate"]
    )  # fmt: skip
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["KubeadmControlPlane"]["spec"]["replicas"] == 3  # an integer after substitution
    assert by_kind["MachineDeployment"]["spec"]["replicas"] == 2
    templates = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] == "MaasMachineTemplate"
    }
    cp = templates["demo-control-plane"]
    assert cp["image"] == "ubuntu/noble"
    assert cp["minCPU"] == 2
    assert cp.get("provisioningMode") == ("lxd" if flavor == "lxd" else None)
    if flavor == "kube-vip":
        assert by_kind["MaasCluster"]["spec"]["controlPlaneVIP"] == {"address": "10.20.0.250"}
        spec = by_kind["KubeadmControlPlane"]["spec"]["kubeadmConfigSpec"]
        (manifest,) = spec["files"]
        assert manifest["path"] == "/etc/kubernetes/manifests/kube-vip.yaml"
        pod = yaml.safe_load(manifest["content"])
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert (env["address"], env["vip_interface"], env["vip_arp"]) == ("10.20.0.250", "eno1", "true")
        assert pod["spec"]["containers"][0]["image"] == "mirror.example/kube-vip/kube-vip:v1.0.0"
        assert "super-admin.conf" in spec["preKubeadmCommands"][0]
        assert "admin.conf" in spec["postKubeadmCommands"][0]
    else:
        assert "controlPlaneVIP" not in by_kind["MaasCluster"]["spec"]

    applied = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=out.stdout)
    result = json.loads(applied.stdout)
    returned = result["items"] if result.get("kind") == "List" else [result]
    assert sorted(d["kind"] for d in returned) == sorted(kinds)
    md = next(d for d in returned if d["kind"] == "MachineDeployment")
    # CAPI's defaulting webhook ran on the dry-run (selector and rollout strategy were not in the template).
    assert md["spec"]["selector"]["matchLabels"]["cluster.x-k8s.io/deployment-name"] == "demo-md-0"
    assert md["spec"]["rollout"]["strategy"]["type"] == "RollingUpdate"


def test_clusterctl_init_installs_the_provider_offline(tmp_path: Path) -> None:
    """A real ``clusterctl init --infrastructure maas`` on a throwaway control plane, from local repositories:
    CAPI core and the kubeadm providers built from the Go module cache (``kubectl kustomize``, as CAPI's
    release does), capmaas from ``deploy/clusterctl``. cert-manager is replaced by a CRD-only stand-in (no
    network to fetch it), enough for clusterctl's "is cert-manager there" probe. Nothing runs the installed
    Deployments (no kubelet): this proves the repository installs, not that the pods start."""
    import shutil

    from capmaas_dev.devcluster import ControlPlane, run_kubectl
    from capmaas_dev.devcluster.capi import apply_objects, build_capi_repository, cert_manager_api_standin

    repo = tmp_path / "repo"
    providers = build_capi_repository(repo)
    shutil.copytree(BASE.parent, repo / "infrastructure-maas")
    providers.append(
        {
            "name": "maas",
            "type": "InfrastructureProvider",
            "url": (
                repo / "infrastructure-maas" / clusterctl_repo.VERSION / "infrastructure-components.yaml"
            ).as_uri(),
        }
    )
    config = tmp_path / "clusterctl.yaml"
    config.write_text(yaml.safe_dump({"providers": providers}))
    env = _env(tmp_path, MAAS_ENDPOINT="http://127.0.0.1:5240/MAAS", MAAS_API_KEY="k1:k2:k3")
    started = time.monotonic()
    with ControlPlane.start(controller_manager=False) as cp:
        apply_objects(cp.kubeconfig, cert_manager_api_standin())
        run_kubectl(
            cp.kubeconfig, "wait", "--for=condition=Established", "crd", "-l", "capmaas.dev/stand-in=true"
        )
        out = subprocess.run(
            [_clusterctl(), "init", "--config", str(config), "--kubeconfig", str(cp.kubeconfig),
             "--infrastructure", "maas"],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert (
            f'Installing provider="infrastructure-maas" version="{clusterctl_repo.VERSION}" '
            'targetNamespace="capmaas-system"' in out.stderr + out.stdout
        )

        inventory = json.loads(
            run_kubectl(
                cp.kubeconfig, "get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json"
            ).stdout
        )
        installed = {(p["type"], p["providerName"], p["version"]) for p in inventory["items"]}
        assert installed == {
            ("CoreProvider", "cluster-api", "v1.13.6"),
            ("BootstrapProvider", "kubeadm", "v1.13.6"),
            ("ControlPlaneProvider", "kubeadm", "v1.13.6"),
            ("InfrastructureProvider", "maas", clusterctl_repo.VERSION),
        }
        secret = json.loads(
            run_kubectl(
                cp.kubeconfig,
                "get",
                "secret",
                "-n",
                "capmaas-system",
                "capmaas-maas-credentials",
                "-o",
                "json",
            ).stdout
        )
        import base64

        assert (
            base64.b64decode(secret["data"]["MAAS_API_KEY"]).decode() == "k1:k2:k3"
        )  # variables substituted
        deploy = json.loads(
            run_kubectl(
                cp.kubeconfig, "get", "deployment", "-n", "capmaas-system", "capmaas", "-o", "json"
            ).stdout
        )
        assert deploy["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "infrastructure-maas"
        run_kubectl(cp.kubeconfig, "get", "crd", "maasmachines.infrastructure.cluster.x-k8s.io")

        # The installed repository also serves its templates: `generate cluster --infrastructure maas`.
        gen = subprocess.run(
            [_clusterctl(), "generate", "cluster", "demo", "--infrastructure", "maas", "--flavor", "lxd",
             "--config", str(config), "--kubeconfig", str(cp.kubeconfig), "--target-namespace", "default"],
            capture_output=True, text=True, env={**env, **VARIABLES}, timeout=60, check=False,
        )  # fmt: skip
        assert gen.returncode == 0, gen.stderr
        assert "provisioningMode: lxd" in gen.stdout
    print(f"clusterctl init (control plane, 4 providers) in {time.monotonic() - started:.1f}s")
