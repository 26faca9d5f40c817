"""The Helm chart: lints, renders what the issue asks for, rejects bad values through its schema, and
installs, upgrades and uninstalls against the real apiserver (no kubelet runs the Pod here; the objects are
what we check)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from capmaas.config import load_config
from capmaas_dev.devcluster import HELM_VERSION, ControlPlane, MissingToolError, find_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "capmaas"
CREDS = ["--set", "credentials.endpoint=http://127.0.0.1:5240/MAAS", "--set", "credentials.apiKey=a:b:c"]

Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Run the cached helm with its config/cache/data homes in a temp dir (never the user's)."""
    try:
        binary = find_binary("helm")
    except MissingToolError as exc:
        pytest.fail(str(exc), pytrace=False)
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(
        *args: str, check: bool = True, kube: ControlPlane | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**env, "KUBECONFIG": str(kube.kubeconfig)} if kube else env
        proc = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=full_env, timeout=180, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    return run


def render(helm: Helm, *args: str) -> list[dict[str, Any]]:
    out = helm("template", "rel", str(CHART), "--namespace", "capmaas-system", *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def rules_of(docs: list[dict[str, Any]], name_suffix: str) -> list[dict[str, Any]]:
    role = next(
        d
        for d in docs
        if d["kind"] in {"ClusterRole", "Role"} and d["metadata"]["name"].endswith(name_suffix)
    )
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def verbs_for(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}


# -- offline: lint, template, schema ----------------------------------------------------------------------


def test_helm_is_the_pinned_version(helm: Helm) -> None:
    assert helm("version", "--template", "{{.Version}}").stdout == HELM_VERSION


@pytest.mark.parametrize(
    "values",
    [
        [],
        CREDS,
        [
            "--set",
            "operator.namespace=team-a",
            "--set",
            "replicaCount=1",
            "--set",
            "leaderElection.enabled=false",
        ],
        ["--set", "shards[0].name=a", "--set", "shards[0].watchFilter=cluster.x-k8s.io/watch-filter=a"],
    ],
)
def test_lint_strict(helm: Helm, values: list[str]) -> None:
    out = helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in out.stdout


def test_chart_crds_are_the_generated_ones() -> None:
    """The chart ships the same CRDs as crds/ (both written by `capmaas crds --chart-dir`)."""
    top = {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "crds/ is empty: run `make generate`"
    assert chart == top


def test_deployment_shape(helm: Helm) -> None:
    docs = render(helm, "--set", "operator.namespace=team-a", "--set", "operator.watchFilter=env=prod")
    (dep,) = by_kind(docs, "Deployment")
    spec = dep["spec"]
    # Issue 11: a leader and a standby by default, rolled (the new pod waits as a standby for the Lease).
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": spec["selector"]["matchLabels"]}}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    (container,) = pod["containers"]
    assert container["name"] == "manager"
    assert container["args"] == ["run", "--namespace=team-a", "--watch-filter=env=prod"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert container["resources"]["requests"]["cpu"] == "100m"
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["serviceAccountName"] == "rel-capmaas"
    (svc,) = by_kind(docs, "Service")
    assert svc["spec"]["ports"][0]["port"] == 9090
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert [d["metadata"]["name"] for d in by_kind(docs, "ServiceAccount")] == ["rel-capmaas"]


def test_rbac_is_least_privilege_cluster_wide(helm: Helm) -> None:
    docs = render(helm)
    rules = rules_of(docs, "-manager")
    all_rules = [r for d in docs if d["kind"] in {"ClusterRole", "Role"} for r in d["rules"]]
    assert not [r for r in all_rules if "*" in r["verbs"] or "*" in r["resources"] or "*" in r["apiGroups"]]
    # Issue 10 item 7: what the code calls, nothing more (Secrets read by name; merge patches, never update).
    assert verbs_for(rules, "", "secrets") == {"get"}
    assert verbs_for(rules, "", "configmaps") == {"get"}  # maas-preferred-subnet, by name (issue 15)
    assert verbs_for(rules, "", "events") == {"create", "patch"}
    assert verbs_for(rules, "cluster.x-k8s.io", "clusters") == {"get", "list", "watch"}
    assert verbs_for(rules, "cluster.x-k8s.io", "machines") == {"get", "list", "watch"}
    for kind in ("maasclusters", "maasmachines"):
        assert verbs_for(rules, "infrastructure.cluster.x-k8s.io", kind) == {"get", "list", "watch", "patch"}
        assert verbs_for(rules, "infrastructure.cluster.x-k8s.io", f"{kind}/status") == {"patch"}
    # MaasMachineTemplates: watched to publish status.capacity (autoscaler scale-from-zero), never created or
    # deleted; MaasClusterTemplates: nothing.
    assert verbs_for(rules, "infrastructure.cluster.x-k8s.io", "maasmachinetemplates") == {
        "get",
        "list",
        "watch",
        "patch",
    }
    assert verbs_for(rules, "infrastructure.cluster.x-k8s.io", "maasmachinetemplates/status") == {"patch"}
    assert not verbs_for(rules, "infrastructure.cluster.x-k8s.io", "maasclustertemplates")
    assert not verbs_for(rules, "infrastructure.cluster.x-k8s.io", "maasmachines") & {"create", "delete"}
    # The IPAM provider: MaasIPPools watched and their status patched, never created or deleted; the CAPI
    # IPAM objects written (claims by the MaasMachine side, IPAddresses by the pool's controller).
    infra = "infrastructure.cluster.x-k8s.io"
    assert verbs_for(rules, infra, "maasippools") == {"get", "list", "watch", "patch"}
    assert verbs_for(rules, infra, "maasippools/status") == {"patch"}
    assert verbs_for(rules, infra, "maasippools/finalizers") == {"update"}  # blockOwnerDeletion
    every = {"get", "list", "watch", "create", "update", "patch", "delete"}
    for resource in ("ipaddressclaims", "ipaddressclaims/status", "ipaddresses"):
        assert verbs_for(rules, "ipam.cluster.x-k8s.io", resource) == every, resource
    assert verbs_for(rules, "ipam.cluster.x-k8s.io", "ipaddressclaims/finalizers") == {"update"}
    cluster = rules_of(docs, "-cluster")
    assert verbs_for(cluster, "apiextensions.k8s.io", "customresourcedefinitions") == {"list", "watch"}
    # list/watch: kopf's namespace discovery; get: the default credentials' namespace selector (issue 10).
    assert verbs_for(cluster, "", "namespaces") == {"get", "list", "watch"}
    # peering disabled by default: no kopf peering rights at all
    assert not [r for r in all_rules if "kopf.dev" in r["apiGroups"] or "zalando.org" in r["apiGroups"]]
    binding = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == "rel-capmaas-manager"
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-capmaas", "namespace": "capmaas-system"}
    ]


def test_default_credentials_allow_list_and_transport_values(helm: Helm) -> None:
    """Issue 10: which namespaces may use the default credentials, and their plaintext opt-in, reach the
    operator's environment; a namespaced operator may read only its own Namespace (for the selector)."""

    def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
        (dep,) = by_kind(docs, "Deployment")
        return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}

    plain = env_of(render(helm, *CREDS))
    assert "CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES" not in plain  # deny by default
    assert "CAPMAAS_MAAS__ALLOW_PLAINTEXT_HTTP" not in plain
    docs = render(
        helm,
        *CREDS,
        "--set", "credentials.allowedNamespaces.names={team-a,team-b}",
        "--set-string", "credentials.allowedNamespaces.selector=tier=trusted",
        "--set", "credentials.allowPlaintextHTTP=true",
        "--set", "operator.namespace=team-a",
    )  # fmt: skip
    env = env_of(docs)
    assert env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES"] == "team-a,team-b"
    assert env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR"] == "tier=trusted"
    assert env["CAPMAAS_MAAS__ALLOW_PLAINTEXT_HTTP"] == "true"
    ns_rules = [r for r in rules_of(docs, "-cluster") if "namespaces" in r["resources"]]
    assert ns_rules == [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["team-a"], "verbs": ["get"]}
    ]
    # The CA's key name is MAAS_CA_CERT (the identity Secrets' name); MAAS_CA_BUNDLE stays usable.
    (secret,) = by_kind(
        render(helm, *CREDS, "--set", "credentials.caBundle=-----BEGIN CERTIFICATE-----x"), "Secret"
    )
    assert "MAAS_CA_CERT" in secret["stringData"]


def test_tenancy_values_reach_the_operator_settings(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    """VM-host registration and DNS domains per namespace are chart values; the environment they render is
    what the operator's settings read (parsed here by the real settings loader)."""

    def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
        (dep,) = by_kind(docs, "Deployment")
        return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}

    plain = env_of(render(helm))
    assert not {"CAPMAAS_LXD__VM_HOST_NAMESPACES", "CAPMAAS_DNS__NAMESPACE_DOMAINS"} & set(plain)
    docs = render(
        helm,
        "--set", "tenancy.vmHostNamespaces={team-a,team-b}",
        "--set-json", 'tenancy.dnsDomains={"team-a": ["a.maas"], "*": ["maas"]}',
        "--set", "tenancy.adoptDnsRecordsByName=true",
    )  # fmt: skip
    env = env_of(docs)
    for key, value in env.items():
        if key.startswith(("CAPMAAS_LXD__", "CAPMAAS_DNS__")):
            monkeypatch.setenv(key, value)
    config = load_config()
    assert config.lxd.vm_host_namespaces == ["team-a", "team-b"]
    assert config.dns.namespace_domains == {"team-a": ["a.maas"], "*": ["maas"]}
    assert config.dns.adopt_records_by_name is True
    bad = helm("template", "x", str(CHART), "--set", "tenancy.vmHostNamespaces={Team_A}", check=False)
    assert bad.returncode != 0
    assert "vmHostNamespaces" in bad.stderr


def test_capi_aggregation_role(helm: Helm) -> None:
    docs = render(helm)
    agg = [
        d
        for d in by_kind(docs, "ClusterRole")
        if d["metadata"]["labels"].get("cluster.x-k8s.io/aggregate-to-manager")
    ]
    assert len(agg) == 1
    assert agg[0]["metadata"]["labels"]["cluster.x-k8s.io/aggregate-to-manager"] == "true"
    verbs = verbs_for(agg[0]["rules"], "infrastructure.cluster.x-k8s.io", "maasmachines")
    assert {"create", "delete", "get", "list", "watch", "patch", "update"} <= verbs


def test_leader_election_lease_rights_only_in_the_release_namespace(helm: Helm) -> None:
    """Issue 11: the Lease, in the release namespace, by name (create cannot be limited to a name); no kopf
    peering rights in any mode (peering is gone: ``--peering`` is an alias of leader election)."""
    for extra in ([], ["--set", "operator.namespace=team-a"]):
        docs = render(helm, *extra)
        (role,) = [d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("-leader-election")]
        assert role["metadata"]["namespace"] == "capmaas-system"
        assert role["rules"] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["rel-capmaas-leader"],
                "verbs": ["get", "update"],
            },
        ]
        (rb,) = [
            d for d in by_kind(docs, "RoleBinding") if d["metadata"]["name"].endswith("-leader-election")
        ]
        assert rb["metadata"]["namespace"] == "capmaas-system"
        assert rb["roleRef"]["name"] == role["metadata"]["name"]
        all_rules = [r for d in docs if d["kind"] in {"ClusterRole", "Role"} for r in d["rules"]]
        assert [r for r in all_rules if "coordination.k8s.io" in r["apiGroups"]] == role["rules"]
        assert not [r for r in all_rules if "kopf.dev" in r["apiGroups"] or "zalando.org" in r["apiGroups"]]
        (dep,) = by_kind(docs, "Deployment")
        env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["CAPMAAS_LEADER_ELECTION__ENABLED"]["value"] == "true"
        assert env["CAPMAAS_LEADER_ELECTION__LEASE_NAME"]["value"] == "rel-capmaas-leader"
        assert env["CAPMAAS_LEADER_ELECTION__NAMESPACE"]["value"] == "capmaas-system"
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert float(env["CAPMAAS_LEADER_ELECTION__RENEW_DEADLINE"]["value"]) < float(
            env["CAPMAAS_LEADER_ELECTION__LEASE_DURATION"]["value"]
        )
        assert not [e for e in env if "PEERING" in e]


def test_shards_render_a_deployment_pdb_and_lease_each(helm: Helm) -> None:
    args = []
    for i, name in enumerate("ab"):
        args += [
            "--set",
            f"shards[{i}].name={name}",
            "--set",
            f"shards[{i}].watchFilter=cluster.x-k8s.io/watch-filter={name}",
        ]
    docs = render(helm, *args)
    deps = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    assert sorted(deps) == ["rel-capmaas-a", "rel-capmaas-b"]
    selectors = []
    for name, dep in deps.items():
        shard = name[-1]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["run", f"--watch-filter=cluster.x-k8s.io/watch-filter={shard}"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CAPMAAS_LEADER_ELECTION__LEASE_NAME"] == f"rel-capmaas-{shard}-leader"
        selectors.append(dep["spec"]["selector"]["matchLabels"])
        assert selectors[-1]["capmaas.cluster.x-k8s.io/shard"] == shard
    assert selectors[0] != selectors[1]  # no Deployment adopts the other shard's pods
    assert sorted(p["metadata"]["name"] for p in by_kind(docs, "PodDisruptionBudget")) == sorted(deps)
    (role,) = [d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("-leader-election")]
    assert role["rules"][1]["resourceNames"] == ["rel-capmaas-a-leader", "rel-capmaas-b-leader"]


def test_one_replica_without_leader_election_is_recreated_and_has_no_pdb(helm: Helm) -> None:
    docs = render(helm, "--set", "replicaCount=1", "--set", "leaderElection.enabled=false")
    (dep,) = by_kind(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert by_kind(docs, "PodDisruptionBudget") == []
    assert not [d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("-leader-election")]


def test_credentials_from_values_render_a_secret_mounted_as_files(helm: Helm) -> None:
    docs = render(helm, *CREDS, "--set", "credentials.caBundle=-----BEGIN CERTIFICATE-----x")
    (secret,) = by_kind(docs, "Secret")
    assert secret["stringData"]["MAAS_ENDPOINT"] == "http://127.0.0.1:5240/MAAS"
    assert secret["stringData"]["MAAS_API_KEY"] == "a:b:c"
    (dep,) = by_kind(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["CAPMAAS_SECRETS_DIR"] == "/etc/capmaas/secrets"
    assert env["CAPMAAS_MAAS__CA_FILE"] == "/etc/capmaas/maas-ca/ca.crt"
    assert not any("MAAS_API_KEY" in json.dumps(e) for e in pod["containers"][0]["env"])  # not in env
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["maas-credentials"]["secret"]["secretName"] == secret["metadata"]["name"]
    paths = {i["key"]: i["path"] for i in vols["maas-credentials"]["secret"]["items"]}
    assert paths == {"MAAS_ENDPOINT": "maas__endpoint", "MAAS_API_KEY": "maas__api_key"}
    assert "checksum/credentials" in dep["spec"]["template"]["metadata"]["annotations"]


def test_credentials_from_an_existing_secret(helm: Helm) -> None:
    docs = render(helm, "--set", "credentials.existingSecret=maas-admin")
    assert by_kind(docs, "Secret") == []
    (dep,) = by_kind(docs, "Deployment")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["maas-credentials"]["secret"]["secretName"] == "maas-admin"
    assert "maas-ca" not in vols


def test_no_credentials_means_no_secret_and_no_mount(helm: Helm) -> None:
    docs = render(helm)
    assert by_kind(docs, "Secret") == []
    (dep,) = by_kind(docs, "Deployment")
    assert {v["name"] for v in dep["spec"]["template"]["spec"]["volumes"]} == {"tmp"}


BAD_VALUES = [
    (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
    (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["--set", "credentials.apiKey=not-a-key"], "/credentials/apiKey"),
    (["--set", "credentials.endpoint=maas:5240"], "/credentials/endpoint"),
    (["--set", "metrics.port=70000"], "/metrics/port"),
    (["--set", "operator.namespace=Not_A_Namespace"], "/operator/namespace"),
    (["--set", "operator.logging.level=LOUD"], "/operator/logging/level"),
    (["--set", "resources.limits.memory=lots"], "/resources/limits/memory"),
    (
        ["--set", "credentials.apiKey=a:b:c"],
        "credentials.endpoint and credentials.apiKey must be given together",
    ),
    ([*CREDS, "--set", "credentials.existingSecret=s"], "either credentials.existingSecret or"),
    (["--set", "peering.enabled=true"], "additional properties 'peering' not allowed"),
    (["--set", "leaderElection.enabled=false"], "/leaderElection/enabled"),  # with the default 2 replicas
    (["--set", "leaderElection.renewDeadline=20"], "retryPeriod < renewDeadline < leaseDuration"),
    (["--set", "shards[0].name=Bad_Name", "--set", "shards[0].watchFilter=a=b"], "/shards/0/name"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[m[:30] for _, m in BAD_VALUES])
def test_bad_values_are_rejected_with_a_clear_message(helm: Helm, values: list[str], message: str) -> None:
    proc = helm("template", "rel", str(CHART), *values, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


# -- against the real apiserver ---------------------------------------------------------------------------


def _exists(kubectl: Any, *args: str) -> bool:
    return bool(kubectl("get", *args, check=False).returncode == 0)


@pytest.mark.k8s
def test_install_upgrade_uninstall(helm: Helm, kube: ControlPlane, kubectl: Any, namespace: str) -> None:
    release = f"cm{namespace[-6:]}"
    full = f"{release}-capmaas"
    helm("install", release, str(CHART), "-n", namespace, *CREDS, kube=kube)
    try:
        for obj in (
            f"deployment/{full}",
            f"serviceaccount/{full}",
            f"service/{full}-metrics",
            f"secret/{full}-maas-credentials",
        ):
            assert _exists(kubectl, "-n", namespace, obj), obj
        for obj in (
            f"clusterrole/{full}-manager",
            f"clusterrole/{full}-cluster",
            f"clusterrole/{full}-capi-aggregate",
        ):
            assert _exists(kubectl, obj), obj
        assert _exists(kubectl, f"clusterrolebinding/{full}-manager")
        for crd in (p for p in (CHART / "crds").glob("*.yaml")):
            name = yaml.safe_load(crd.read_text())["metadata"]["name"]
            kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        # The ServiceAccount really has the rights the operator needs, and not more (RBAC is enforced).
        sa = f"system:serviceaccount:{namespace}:{full}"
        can = lambda *a: kubectl("auth", "can-i", *a, f"--as={sa}", check=False).stdout.strip()  # noqa: E731
        assert can("watch", "maasmachines.infrastructure.cluster.x-k8s.io", "-A") == "yes"
        assert can("patch", "maasmachines.infrastructure.cluster.x-k8s.io/status", "-n", namespace) == "yes"
        assert can("list", "machines.cluster.x-k8s.io", "-A") == "yes"
        assert can("get", "secrets", "-n", namespace) == "yes"
        assert can("create", "events", "-n", namespace) == "yes"
        assert can("delete", "secrets", "-n", namespace) == "no"
        assert can("list", "secrets", "-n", namespace) == "no"
        assert can("watch", "secrets", "-A") == "no"
        assert can("get", "configmaps/maas-preferred-subnet", "-n", namespace) == "yes"
        assert can("list", "configmaps", "-n", namespace) == "no"
        assert can("update", "configmaps", "-n", namespace) == "no"
        # Namespaces: read (the default credentials' namespace selector; kopf's discovery), never written.
        assert can("get", f"namespaces/{namespace}") == "yes"
        assert can("update", f"namespaces/{namespace}") == "no"
        assert can("patch", f"namespaces/{namespace}") == "no"
        assert can("update", "maasmachines.infrastructure.cluster.x-k8s.io", "-n", namespace) == "no"
        assert can("patch", "maasmachines.infrastructure.cluster.x-k8s.io", "-n", namespace) == "yes"
        assert can("watch", "maasmachinetemplates.infrastructure.cluster.x-k8s.io", "-A") == "yes"
        assert can("delete", "maasmachinetemplates.infrastructure.cluster.x-k8s.io", "-n", namespace) == "no"
        assert can("get", "maasclustertemplates.infrastructure.cluster.x-k8s.io", "-n", namespace) == "no"
        assert can("patch", "machines.cluster.x-k8s.io", "-n", namespace) == "no"
        assert can("create", "maasmachines.infrastructure.cluster.x-k8s.io", "-n", namespace) == "no"
        lease = f"leases.coordination.k8s.io/{full}-leader"
        assert can("update", lease, "-n", namespace) == "yes"
        assert can("update", "leases.coordination.k8s.io/another", "-n", namespace) == "no"
        assert can("update", lease, "-n", "default") == "no"

        helm(
            "upgrade",
            release,
            str(CHART),
            "-n",
            namespace,
            *CREDS,
            "--set",
            "operator.watchFilter=team=a",
            kube=kube,
        )
        args = json.loads(
            kubectl(
                "get",
                "-n",
                namespace,
                f"deployment/{full}",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].args}",
            ).stdout
        )
        assert args == ["run", "--watch-filter=team=a"]
        status = json.loads(helm("status", release, "-n", namespace, "-o", "json", kube=kube).stdout)
        assert status["version"] == 2
        assert status["info"]["status"] == "deployed"

        bad = helm(
            "upgrade", release, str(CHART), "-n", namespace, "--set", "metrics.port=0", check=False, kube=kube
        )
        assert bad.returncode != 0
        assert "/metrics/port" in bad.stderr
    finally:
        helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", kube=kube)
    assert not _exists(kubectl, "-n", namespace, f"deployment/{full}")
    assert not _exists(kubectl, "-n", namespace, f"secret/{full}-maas-credentials")
    assert not _exists(kubectl, f"clusterrole/{full}-manager")
    assert not _exists(kubectl, f"clusterrolebinding/{full}-cluster")
    # Helm never deletes CRDs from crds/ (that would delete every user's objects); they stay.
    assert _exists(kubectl, "crd/maasmachines.infrastructure.cluster.x-k8s.io")


@pytest.mark.k8s
def test_install_with_bad_values_creates_nothing(
    helm: Helm, kube: ControlPlane, kubectl: Any, namespace: str
) -> None:
    proc = helm(
        "install",
        "badrel",
        str(CHART),
        "-n",
        namespace,
        "--set",
        "image.pullPolicy=Sometimes",
        check=False,
        kube=kube,
    )
    assert proc.returncode != 0
    assert "/image/pullPolicy" in proc.stderr
    assert kubectl("get", "deployments", "-n", namespace, "-o", "name").stdout.strip() == ""
    assert helm("list", "-n", namespace, "-q", kube=kube).stdout.strip() == ""


# -- the image the chart runs -----------------------------------------------------------------------------


def test_dockerfile_matches_the_chart(helm: Helm) -> None:
    """The static half (tests/pod builds and runs the image): the user, entrypoint and ports the chart relies
    on, the base pinned by digest, and that the only thing COPY'd (the host-built wheels) is sent."""
    lines = [ln.strip() for ln in (REPO / "Dockerfile").read_text().splitlines()]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert froms == [
        "FROM ${PYTHON_IMAGE}@${PYTHON_DIGEST} AS builder",
        "FROM ${PYTHON_IMAGE}@${PYTHON_DIGEST}",
    ]
    final = lines[lines.index(froms[-1]) :]
    assert "USER 65532:65532" in final
    assert 'ENTRYPOINT ["capmaas"]' in final
    assert 'CMD ["run"]' in final
    assert "EXPOSE 8080 9090" in final
    assert "COPY --from=builder /opt/venv /opt/venv" in final

    (dep,) = by_kind(render(helm), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["runAsGroup"] == 65532
    assert pod["containers"][0]["args"][0] == "run"

    allowed = {
        ln[1:].rstrip("/") for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.startswith("!")
    }
    assert "*" in (REPO / ".dockerignore").read_text().splitlines()
    copied = [
        src for ln in lines if ln.startswith("COPY ") and "--from" not in ln for src in ln.split()[1:-1]
    ]
    assert copied == ["build/image/wheels/"]  # written by `pip wheel` in hack/image.sh (make image)
    assert "--no-index" in next(ln for ln in lines if "pip install" in ln)
    for src in copied:
        assert src.rstrip("/") in allowed, f"{src} is excluded from the build context by .dockerignore"
