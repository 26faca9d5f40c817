"""Upgrade from the previous release to this checkout's, as users do it, with machines running.

The previous release (``releases.toml``: its commit, built by its own tooling — ``release_support``) is
installed, a MaasCluster and three machines go Ready on the MAAS simulator, and the install is upgraded to
this checkout's release (built once per session, shared with ``test_release_dist``):

- with Helm on the one-node cluster (the operator a real Pod, from the release's image archive): the new
  chart's CRDs applied first (Helm never upgrades a chart's ``crds/``), then ``helm upgrade
  --reset-then-reuse-values`` (``--reuse-values`` alone would keep the old chart's pinned image digest);
- with ``clusterctl upgrade apply`` from a local repository holding both versions, on a throwaway control
  plane where the installed Deployment is run as a process the way the kubelet would start it (as in
  ``test_release_dist``; its RBAC is the installed ServiceAccount's).

Both then check the same things: the MAAS side was not touched (no allocate, deploy or release from the
moment the upgrade began until a fourth machine is added through the new operator, which allocates and
deploys exactly one; the three machines keep their system ids, owner and state), every object kept its
identity, spec and status (all fields the old release wrote, conditions by type, status and reason), the
CRDs are the new release's and still store ``v1beta1`` only (``status.storedVersions``: both releases serve
and store v1beta1, so no conversion or storage migration is involved), the stored objects read back through
the new CRDs unchanged before the new operator runs, and the new operator then deletes everything and
releases every MAAS machine — the old machines included, which proves it understands what the old one
stored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from release_support import (
    CAPI_PROVIDERS,
    Built,
    PastRelease,
    Workload,
    build_previous,
    check_release_commit,
    previous_release,
    run,
    simulator,
    tool,
)

from capmaas_dev import clusterctl_repo, crdgen
from capmaas_dev.demo.capi import MachineSpec
from capmaas_dev.demo.kube import MAASCLUSTERS, MAASMACHINES, Kube
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.devcluster import MissingToolError

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(2400)]

#: MAAS operations that would mean a machine was taken, redeployed or given back.
MAAS_WRITES = ("allocate", "deploy", "release")
#: The kinds of 0.1.0, the previous release.
CRDS = ("maasclusters", "maasmachines", "maasclustertemplates", "maasmachinetemplates")
NEW_MACHINE = MachineSpec("rel-worker-2", False, resource_pool="workers")


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory, sbom_marks: Path) -> Built:
    """Session-scoped like ``built``, and shared the same way (the first worker to need it builds it): the
    ``image`` group's worker builds it right after this checkout's release, before the ``pod`` group's Helm
    upgrade asks for it (``tests/suite_plan.py``)."""
    return build_previous(previous_release(), tmp_path_factory.mktemp("previous"), sbom_marks)


def test_a_release_commit_missing_from_the_clone_fails_with_what_to_do() -> None:
    """The previous release is found by commit; a clone without it fails (never skips) and says why."""
    past = previous_release()
    check_release_commit(past)  # this clone has it (and the tag, when present, agrees)
    with pytest.raises(pytest.fail.Exception, match=r"is not in this clone's history"):
        check_release_commit(PastRelease(past.version, "f" * 40))


# -- what an upgrade must keep -------------------------------------------------------------------------------
def _snapshot(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    objs = {f"MaasCluster/{o['metadata']['name']}": o for o in kube.list(MAASCLUSTERS, ns)}
    objs |= {f"MaasMachine/{o['metadata']['name']}": o for o in kube.list(MAASMACHINES, ns)}
    return objs


def _lost(old: Any, new: Any, path: str, *, strict: bool = False) -> list[str]:
    """What of ``old`` is not in ``new``: every field with its value (fields only in ``new`` are fine);
    conditions by type, status and reason, unless ``strict`` (then list items field by field too)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: {new!r} is not an object"]
        return [
            p for k, v in old.items() for p in _lost(v, new.get(k, _MISSING), f"{path}.{k}", strict=strict)
        ]
    if strict and isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        return [
            p
            for i, (o, n) in enumerate(zip(old, new, strict=True))
            for p in _lost(o, n, f"{path}[{i}]", strict=True)
        ]
    if path.endswith(".conditions") and isinstance(old, list):
        have = {c.get("type"): (c.get("status"), c.get("reason")) for c in new or []}
        return [
            f"{path}[{c.get('type')}]: {(c.get('status'), c.get('reason'))} -> {have.get(c.get('type'))}"
            for c in old
            if have.get(c.get("type")) != (c.get("status"), c.get("reason"))
        ]
    return [] if old == new else [f"{path}: {old!r} -> {'(gone)' if new is _MISSING else repr(new)}"]


_MISSING = object()


def _kept(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    for key, old in before.items():
        new = after.get(key)
        if new is None:
            problems.append(f"{key}: gone")
            continue
        if new["metadata"]["uid"] != old["metadata"]["uid"]:
            problems.append(f"{key}: recreated")
        problems += _lost(old.get("spec", {}), new.get("spec", {}), f"{key} spec")
        problems += _lost(old.get("status", {}), new.get("status", {}), f"{key} status")
    return problems


def _writes(sim: SimulatorThread) -> Counter[str]:
    out: Counter[str] = Counter()
    for (_method, _template, op), n in sim.counters().items():
        if op in MAAS_WRITES:
            out[op] += n
    return out


def _check_crds(kubectl: Callable[..., str], new_crds: list[dict[str, Any]]) -> None:
    """The cluster's CRDs are the new release's, serving and storing v1beta1 only."""
    want = {c["metadata"]["name"]: c for c in new_crds}
    plurals = {n.split(".", 1)[0] for n in want}
    # Every kind of the previous release is still there; a minor release may add kinds (0.2.0: MaasIPPool).
    assert set(CRDS) <= plurals, set(CRDS) - plurals
    assert plurals == {k.crd_name.split(".", 1)[0] for k in crdgen.KINDS}
    for name, crd in want.items():
        have = json.loads(kubectl("get", "crd", name, "-o", "json"))
        assert have["status"]["storedVersions"] == ["v1beta1"], name
        assert [(v["name"], v["served"], v["storage"]) for v in have["spec"]["versions"]] == [
            ("v1beta1", True, True)
        ], name
        assert have["spec"]["versions"][0]["schema"] == crd["spec"]["versions"][0]["schema"], (
            f"{name}: the cluster's schema is not the new release's"
        )


class Upgrade:
    """One upgrade's before/after bookkeeping around a :class:`Workload`."""

    def __init__(self, work: Workload) -> None:
        self.work = work
        self.objects = _snapshot(work.kube, work.namespace)
        self.maas = work.sim.machine_states()
        self.deployed = {sid for sid, m in self.maas.items() if m["status_name"] == "Deployed"}
        assert len(self.deployed) == 3
        assert len(self.objects) == 4
        work.sim.reset_counters()  # from here until the new operator adds a machine: no MAAS writes

    def readable(self) -> None:
        """Read through the new CRDs before any new code runs: every field the old release stored is there
        with its value (nothing pruned, nothing changed). Fields the new CRDs add with a default may appear
        (the apiserver defaults on read): a minor release may add fields (docs/releasing.md)."""
        after = _snapshot(self.work.kube, self.work.namespace)
        assert set(after) == set(self.objects)
        lost = [
            problem
            for key, old in self.objects.items()
            for part in ("spec", "status")
            for problem in _lost(old.get(part, {}), after[key].get(part, {}), f"{key} {part}", strict=True)
        ]
        assert not lost, "read through the new CRDs, stored objects lost or changed:\n" + "\n".join(lost)

    def check(self) -> None:
        """With the new operator running: a new machine, then everything the upgrade must have kept."""
        work = self.work
        assert not _writes(work.sim), f"MAAS written during the upgrade: {_writes(work.sim)}"
        work.add(NEW_MACHINE)
        assert _writes(work.sim) == Counter(allocate=1, deploy=1), _writes(work.sim)
        maas = work.sim.machine_states()
        for sid in self.deployed:
            assert maas[sid] == self.maas[sid], f"MAAS machine {sid}: {self.maas[sid]} -> {maas[sid]}"
        problems = _kept(self.objects, _snapshot(work.kube, work.namespace))
        assert not problems, "the upgrade lost or changed:\n" + "\n".join(problems)
        work.delete()  # by the new operator, the old machines included
        assert _writes(work.sim)["release"] == 4


# -- helm upgrade on the one-node cluster --------------------------------------------------------------------
def test_helm_upgrade_from_the_previous_release_keeps_every_machine(
    previous: Built, built: Built, tmp_path: Path
) -> None:
    from capmaas_dev.devcluster import apply_capi_crds
    from capmaas_dev.devcluster.node import NODE_IP, Node

    helm = tool("helm")
    scratch = tmp_path
    try:
        node = Node.start()
    except MissingToolError as exc:
        pytest.fail(f"needs the one-node cluster (make node): {exc}", pytrace=False)
    ns = "capmaas-system"
    kube: Kube | None = None
    timings: dict[str, float] = {}
    try:
        for release in (previous, built):
            node.import_image(release.dist / release.names.image, digests=True)
        with node.entered(), simulator(NODE_IP) as sim:
            apply_capi_crds(node.kubeconfig)
            kube = Kube(node.kubeconfig)

            def kubectl(*args: str, input: str | None = None) -> str:
                return node.kubectl(*args, input=input).stdout

            def helm_run(verb: str, release: Built, *extra: str) -> None:
                t0 = time.monotonic()
                out = subprocess.run(
                    [helm, f"--kubeconfig={node.kubeconfig}", verb, "capmaas",
                     str(release.dist / release.names.chart), "--namespace", ns, *extra,
                     "--set", "image.pullPolicy=Never", "--set", "replicaCount=1", "--wait",
                     "--timeout=240s"],
                    capture_output=True, text=True, timeout=300, check=False,
                )  # fmt: skip
                pods = node.kubectl("describe", "pods", "-n", ns, check=False).stdout
                assert out.returncode == 0, f"helm {verb}: {out.stderr}\n{pods[-4000:]}"
                timings[f"helm {verb} {release.version}"] = time.monotonic() - t0

            def pod_of(release: Built) -> str:
                """The one operator Pod, once it alone runs ``release``'s image (the old one gone)."""
                deadline = time.monotonic() + 180
                while True:
                    pods = json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
                    statuses = [(p.get("status", {}).get("containerStatuses") or [{}])[0] for p in pods]
                    if len(pods) == 1 and statuses[0].get("ready"):
                        assert statuses[0]["imageID"].endswith(release.report.digest), statuses[0]
                        name = str(pods[0]["metadata"]["name"])
                        version = kubectl("exec", "-n", ns, name, "--", "python", "-c",
                                          "import capmaas; print(capmaas.__version__)")  # fmt: skip
                        assert version.strip() == release.version
                        return name
                    assert time.monotonic() < deadline, (
                        f"operator pods: {[p['metadata']['name'] for p in pods]}"
                    )
                    time.sleep(1)

            current: dict[str, str] = {}

            def alive() -> None:
                pod = json.loads(kubectl("get", "pod", "-n", ns, current["pod"], "-o", "json"))
                if pod["status"]["containerStatuses"][0]["restartCount"]:
                    pytest.fail(f"the operator container restarted:\n{pod_logs()[-4000:]}")

            def pod_logs() -> str:
                return node.kubectl("logs", "-n", ns, current["pod"], check=False).stdout

            helm_run("install", previous, "--create-namespace")
            current["pod"] = pod_of(previous)
            work = Workload(kube, sim, alive, pod_logs, timings=timings)
            work.create(plaintext=True)
            upgrade = Upgrade(work)

            # The upgrade as docs/releasing.md says: the chart's crds/ applied (a file each: `helm show crds`
            # prints them without `---` between, so one `kubectl apply -f -` of it would take one CRD), then
            # the chart.
            t0 = time.monotonic()
            crds = scratch / "crds"
            with tarfile.open(built.dist / built.names.chart) as tgz:
                for member in tgz.getmembers():
                    if member.name.startswith("capmaas/crds/") and member.isfile():
                        source = tgz.extractfile(member)
                        assert source is not None
                        (crds / Path(member.name).name).parent.mkdir(exist_ok=True)
                        (crds / Path(member.name).name).write_bytes(source.read())
            kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
            _check_crds(kubectl, [yaml.safe_load(p.read_text()) for p in sorted(crds.glob("*.yaml"))])
            upgrade.readable()
            helm_run("upgrade", built, "--reset-then-reuse-values")
            current["pod"] = pod_of(built)
            timings["upgrade (CRDs, helm upgrade, new pod alone)"] = time.monotonic() - t0
            history = json.loads(run([helm, f"--kubeconfig={node.kubeconfig}", "history", "capmaas", "-n", ns,
                                      "-o", "json"]))  # fmt: skip
            assert [(h["revision"], h["app_version"]) for h in history] == [
                (1, previous.version),
                (2, built.version),
            ]
            upgrade.check()
            denied = [ln for ln in pod_logs().splitlines() if "forbidden" in ln.lower()]
            assert not denied, "\n".join(denied[:20])
    finally:
        if kube is not None:
            kube.close()
        node.stop()
    figures = json.dumps({k: round(v, 1) for k, v in timings.items()})
    print(f"helm upgrade {previous.version} -> {built.version}: {figures}")


# -- clusterctl upgrade apply -------------------------------------------------------------------------------
def test_clusterctl_upgrade_apply_from_the_previous_release_keeps_every_machine(
    previous: Built, built: Built, tmp_path: Path
) -> None:
    from release_support import InstalledProcess

    from capmaas_dev.devcluster import ControlPlane, run_kubectl
    from capmaas_dev.devcluster.capi import apply_objects, build_capi_repository, cert_manager_api_standin

    clusterctl = tool("clusterctl")
    # One local repository with both releases' assets, laid out as GitHub releases are: <provider>/<tag>/.
    repo = tmp_path / "repo"
    providers = build_capi_repository(repo)
    for release in (previous, built):
        version_dir = repo / clusterctl_repo.PROVIDER / f"v{release.version}"
        version_dir.mkdir(parents=True)
        for name in release.names.clusterctl:
            shutil.copy2(release.dist / name, version_dir / name)
    url = (repo / clusterctl_repo.PROVIDER / f"v{built.version}" / "infrastructure-components.yaml").as_uri()
    providers.append({"name": "maas", "type": "InfrastructureProvider", "url": url})
    config = tmp_path / "clusterctl.yaml"
    config.write_text(yaml.safe_dump({"providers": providers}))
    ns, pod = clusterctl_repo.NAMESPACE, "capmaas-upgrade-test"
    timings: dict[str, float] = {}

    with simulator() as sim, ControlPlane.start(controller_manager=False) as cp:
        env = {**os.environ, "HOME": str(tmp_path), "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
               "GOPROXY": "off", "MAAS_ENDPOINT": sim.url, "MAAS_API_KEY": sim.api_key}  # fmt: skip

        def kubectl(*args: str) -> str:
            return run_kubectl(cp.kubeconfig, *args).stdout

        def cc(*args: str) -> str:
            t0 = time.monotonic()
            out = run([clusterctl, *args, "--config", str(config), "--kubeconfig", str(cp.kubeconfig)],
                      env=env, timeout=300)  # fmt: skip
            timings[f"clusterctl {args[0]} {args[1] if args[0] == 'upgrade' else ''}".strip()] = (
                time.monotonic() - t0
            )
            return out

        def installed() -> tuple[str, str]:
            deploy = json.loads(kubectl("get", "deployment", "-n", ns, "capmaas", "-o", "json"))
            (container,) = deploy["spec"]["template"]["spec"]["containers"]
            inventory = json.loads(
                kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
            )
            (maas,) = [p for p in inventory["items"] if p["providerName"] == "maas"]
            return maas["version"], container["image"]

        apply_objects(cp.kubeconfig, cert_manager_api_standin())
        kubectl("wait", "--for=condition=Established", "crd", "-l", "capmaas.dev/stand-in=true")
        cc("init", "--infrastructure", f"maas:v{previous.version}")
        assert installed() == (f"v{previous.version}", previous.report.image_ref)
        # No CAPI pods run here: their webhooks go, the stand-in plays CAPI (test_release_dist's module doc).
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            kubectl("delete", kind, "-l", f"cluster.x-k8s.io/provider in ({CAPI_PROVIDERS})")

        kube = Kube(cp.kubeconfig)
        operator: InstalledProcess | None = None
        try:
            operator = InstalledProcess.start(
                kubectl, cp.kubeconfig, previous.dist / previous.names.wheel, tmp_path / "old", namespace=ns,
                pod=pod,
            )  # fmt: skip
            running = operator

            def alive() -> None:
                running.alive()  # the operator running now (the old one, then the new one)

            def logs() -> str:
                return running.text()

            work = Workload(kube, sim, alive, logs, timings=timings)
            work.create()
            upgrade = Upgrade(work)
            assert not operator.denied(), operator.denied()[:20]

            # What the kubelet does when clusterctl replaces the Deployment: the old container stops.
            t0 = time.monotonic()
            operator.stop()
            plan = cc("upgrade", "plan")
            assert f"v{built.version}" in plan, plan
            cc("upgrade", "apply", "--infrastructure", f"{ns}/maas:v{built.version}")
            assert installed() == (f"v{built.version}", built.report.image_ref)
            components = (
                repo / clusterctl_repo.PROVIDER / f"v{built.version}" / "infrastructure-components.yaml"
            )
            docs = [d for d in yaml.safe_load_all(components.read_text()) if d]
            new_crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
            _check_crds(kubectl, new_crds)
            upgrade.readable()
            operator = InstalledProcess.start(
                kubectl,
                cp.kubeconfig,
                built.dist / built.names.wheel,
                tmp_path / "new",
                namespace=ns,
                pod=pod,
            )
            running = operator
            timings["upgrade (plan, apply, new operator started)"] = time.monotonic() - t0
            upgrade.check()
            assert not operator.denied(), operator.denied()[:20]
        finally:
            kube.close()
            if operator is not None:
                operator.stop()
    print(f"clusterctl upgrade {previous.version} -> {built.version}: "
          f"{json.dumps({k: round(v, 1) for k, v in timings.items()})}")  # fmt: skip
