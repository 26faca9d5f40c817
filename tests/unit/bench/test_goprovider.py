"""The Go provider side-by-side benchmark's pure parts (capmaas_dev.bench.goprovider*): the CRDs as its
kustomization labels them, the objects in its schema, the manager's command line and environment, the build's
provenance, reading its CRDs from a source directory or a git revision, and the build script's refusal
without a source."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from capmaas_dev.bench import goprovider_manifests as G
from capmaas_dev.bench.goprovider import netns_command, newest_binary
from capmaas_dev.bench.goprovider_source import read_crd_sources

REPO = Path(__file__).resolve().parents[3]

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.infrastructure.cluster.x-k8s.io
  labels:
    keep: me
spec:
  group: infrastructure.cluster.x-k8s.io
"""
KUSTOMIZATION = """\
commonLabels:
  cluster.x-k8s.io/v1beta1: v1beta1
  cluster.x-k8s.io/v1beta2: v1beta1
resources:
- bases/a.yaml
"""


def _docs() -> dict[str, str]:
    return {
        "infrastructure.cluster.x-k8s.io_maasmachines.yaml": CRD.format(plural="maasmachines"),
        "infrastructure.cluster.x-k8s.io_maasclusters.yaml": "---\n" + CRD.format(plural="maasclusters"),
    }


def test_crds_get_the_kustomization_common_labels_on_top_of_their_own_in_file_order() -> None:
    crds = G.labelled_crds(_docs(), KUSTOMIZATION)
    assert G.crd_names(crds) == [
        "maasclusters.infrastructure.cluster.x-k8s.io",
        "maasmachines.infrastructure.cluster.x-k8s.io",
    ]
    for crd in crds:
        assert crd["metadata"]["labels"] == {
            "keep": "me",
            "cluster.x-k8s.io/v1beta1": "v1beta1",
            "cluster.x-k8s.io/v1beta2": "v1beta1",
        }


def test_crds_without_a_kustomization_keep_their_labels() -> None:
    crds = G.labelled_crds(_docs(), "")
    assert [c["metadata"]["labels"] for c in crds] == [{"keep": "me"}, {"keep": "me"}]


def test_a_bases_file_that_is_not_a_crd_or_no_crd_at_all_is_refused() -> None:
    with pytest.raises(G.GoSourceError, match="not a CRD"):
        G.labelled_crds({"x.yaml": "kind: Deployment\n"}, KUSTOMIZATION)
    with pytest.raises(G.GoSourceError, match="no CRD"):
        G.labelled_crds({"x.yaml": "---\n"}, KUSTOMIZATION)


def test_the_maascluster_is_in_the_go_schema_owned_by_its_cluster_without_an_identity() -> None:
    mc = G.maascluster("bench", "ns", cluster_uid="uid-1")
    assert mc["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1"
    assert mc["spec"] == {"dnsDomain": "maas"}
    (ref,) = mc["metadata"]["ownerReferences"]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "bench",
        "uid-1",
        True,
    )


def test_the_maasmachine_has_the_go_schemas_required_fields_its_labels_and_its_machine_owner() -> None:
    mm = G.maasmachine("m1", "ns", "bench", machine_uid="uid-m", min_cpu=4, extra_labels={"x": "y"})
    assert mm["kind"] == "MaasMachine"
    assert mm["spec"] == {"image": "ubuntu/jammy", "minCPU": 4, "minMemory": 4096}
    assert mm["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "bench", "x": "y"}
    (ref,) = mm["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Machine", "m1", "uid-m")


def test_the_manager_serves_metrics_and_health_on_loopback_without_leader_election() -> None:
    args = G.manager_args(Path("/k/config"), G.ManagerPorts(1001, 1002, 1003), machine_concurrency=2)
    assert args == [
        "--kubeconfig=/k/config",
        "--metrics-bind-addr=127.0.0.1:1001",
        "--health-addr=127.0.0.1:1002",
        "--webhook-port=1003",
        "--machine-concurrency=2",
        "--leader-elect=false",
    ]


def test_the_manager_env_has_the_simulators_maas_and_none_of_the_callers() -> None:
    base = {
        "PATH": "/bin",
        "MAAS_ENDPOINT": "http://elsewhere",
        "MAAS_API_URL": "http://elsewhere",
        "MAAS_API_TOKEN": "t",
        "KUBECONFIG": "/home/me/.kube/config",
    }
    env = G.manager_env(base, maas_endpoint="http://127.0.0.1:5/MAAS", api_key="a:b:c", tmpdir=Path("/w/tmp"))
    assert env == {
        "PATH": "/bin",
        "MAAS_ENDPOINT": "http://127.0.0.1:5/MAAS",
        "MAAS_API_KEY": "a:b:c",
        "TMPDIR": "/w/tmp",
    }
    assert G.webhook_cert_dir(Path("/w/tmp")) == Path("/w/tmp/k8s-webhook-server/serving-certs")


def test_provenance_is_read_from_beside_the_binary_and_absent_when_the_build_script_did_not_write_one(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "go-provider-abc"
    assert G.read_provenance(binary) is None
    (tmp_path / "go-provider-abc.json").write_text(
        json.dumps(
            {
                "provider_source": "/src/p@abc",
                "provider_revision": "abc",
                "client_pinned": "v0.1.7-beta1",
                "client_source": "/src/c@def",
                "client_revision": "def",
                "go": "go1.25.0",
            }
        )
    )
    prov = G.read_provenance(binary)
    assert prov is not None
    assert prov.provider_source == "/src/p@abc"
    assert prov.describe() == "provider abc, client def (replacing the pinned v0.1.7-beta1), go1.25.0"
    unreplaced = G.Provenance("/src/p", "abc", "v0.1.7-beta1", "", "", "go1.25.0")
    assert unreplaced.describe() == "provider abc, client v0.1.7-beta1 (as pinned), go1.25.0"


def _tree(root: Path) -> Path:
    (root / "config/crd/bases").mkdir(parents=True)
    (root / "go.mod").write_text("module github.com/spectrocloud/cluster-api-provider-maas\n")
    for name, text in _docs().items():
        (root / "config/crd/bases" / name).write_text(text)
    (root / "config/crd/bases/README.md").write_text("not yaml\n")
    (root / "config/crd/kustomization.yaml").write_text(KUSTOMIZATION)
    return root


def test_crd_sources_are_read_from_a_source_directory(tmp_path: Path) -> None:
    docs, kustomization = read_crd_sources(str(_tree(tmp_path / "src")))
    assert docs == _docs()
    assert kustomization == KUSTOMIZATION


def test_crd_sources_are_read_from_a_git_revision_not_the_work_tree(tmp_path: Path) -> None:
    repo = _tree(tmp_path / "repo")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    rev = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (repo / "config/crd/kustomization.yaml").write_text("changed after the commit\n")
    docs, kustomization = read_crd_sources(f"{repo}@{rev}")
    assert docs == _docs()
    assert kustomization == KUSTOMIZATION
    with pytest.raises(G.GoSourceError, match="git"):
        read_crd_sources(f"{repo}@no-such-revision")


def test_a_source_that_is_neither_a_tree_nor_a_git_revision_is_refused(tmp_path: Path) -> None:
    with pytest.raises(G.GoSourceError, match="GITDIR@REV"):
        read_crd_sources(str(tmp_path))
    (tmp_path / "go.mod").write_text("module x\n")
    with pytest.raises(G.GoSourceError, match="config/crd/bases"):
        read_crd_sources(str(tmp_path))


def test_the_network_namespace_command_brings_loopback_up_and_reruns_the_same_arguments() -> None:
    cmd = netns_command(["--machines", "5", "--log", "a b"], "/venv/python", root=True)
    assert cmd[:4] == ["unshare", "--net", "sh", "-c"]
    script = cmd[4]
    assert script.startswith("ip link set lo up && exec ")
    assert shlex.split(script.split("exec ", 1)[1]) == [
        "/venv/python",
        "-m",
        "capmaas_dev.bench.goprovider",
        "--machines",
        "5",
        "--log",
        "a b",
    ]
    assert netns_command([], "/p", root=False)[:3] == ["unshare", "--net", "--map-root-user"]


def test_the_default_binary_is_the_newest_go_provider_build(tmp_path: Path) -> None:
    assert newest_binary(tmp_path) is None
    old, new = tmp_path / "go-provider-aaa", tmp_path / "go-provider-bbb"
    for i, p in enumerate((old, new)):
        p.write_text("")
        p.chmod(0o755)
        os.utime(p, (1000 + i, 1000 + i))
    (tmp_path / "go-provider-bbb.json").write_text("{}")
    os.utime(tmp_path / "go-provider-bbb.json", (2000, 2000))
    (tmp_path / "go-provider-ccc").write_text("")  # not executable
    assert newest_binary(tmp_path) == new


def test_the_build_script_says_where_to_get_the_sources_when_none_is_given(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPMAAS_")}
    env["CAPMAAS_CACHE"] = str(tmp_path)
    proc = subprocess.run(
        ["bash", str(REPO / "hack/go-provider.sh")], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "CAPMAAS_GO_PROVIDER_SRC" in proc.stderr
    assert "GITDIR@REV" in proc.stderr
    assert "spectrocloud/maas-client-go" in proc.stderr
    bad = subprocess.run(
        ["bash", str(REPO / "hack/go-provider.sh"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "neither a source directory" in bad.stderr
    assert not (tmp_path / "bin").exists() or not any((tmp_path / "bin").iterdir())
