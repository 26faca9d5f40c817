"""What the release tests share: the releases (this checkout's, built once per session; the previous one,
built from its commit), and an install as users run it — the installed container started as a process, a
MaasCluster and machines to Ready on the MAAS simulator, the lot deleted and every MAAS machine released.

The previous release is found by its commit in ``releases.toml`` (a tracked file: a clone may come without
tags), never by a tag alone; its sources are ``git archive`` of that commit and it is built by its own
release tooling (``python -m capmaas_dev.release VERSION --no-reproducibility-check`` with that tree's code),
as it was when it was cut, its SBOMs' schema validation shared with the run's (``sbom_once``). Its ``dist/``
is kept under ``$CAPMAAS_CACHE/releases/<version>-<commit>`` (checked against its ``SHA256SUMS`` when
reused): a release is built once and then only installed, as users get it. The commit is the whole key: the
sources and the tooling that builds them are that commit's; what else the build used (the base image in
buildah, the host's Python and pip index) is what a release's build ran on, not what the release is.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sbom_once
import yaml
from new_machine import FirstBuild, NewMachine

from capmaas import __version__
from capmaas_dev.clusterctl_repo import PACKAGE_VERSION_RE
from capmaas_dev.demo.capi import Capi, MachineSpec
from capmaas_dev.demo.kube import MAASCLUSTERS, MAASMACHINES, Kube
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.devcluster import MissingToolError, find_binary
from capmaas_dev.devcluster.tools import cache_dir
from capmaas_dev.release import verify as verify_module
from capmaas_dev.release.build import Options, Release
from capmaas_dev.release.verify import Names, Report, verify
from capmaas_dev.simulator import SAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[2]
INVENTORY = SAMPLE_INVENTORY  # the simulator's sample (package data)
RELEASES = REPO / "releases.toml"
CAPI_PROVIDERS = "cluster-api,bootstrap-kubeadm,control-plane-kubeadm"
#: The release this checkout builds: the package version's release (main carries ``X.Y.Z.devN``).
_found = PACKAGE_VERSION_RE.match(__version__)
assert _found is not None, __version__
VERSION = _found["release"]
#: ``CAPMAAS_TEST_RELEASE_DIST``: a ``dist/`` of this version already built (verified, then used as it is), to
#: iterate on the install and upgrade tests without the build; the build's own checks then fail (no digest
#: comparison was made), so a full run never sets it.
REUSE_DIST = "CAPMAAS_TEST_RELEASE_DIST"


@dataclass
class Built:
    version: str
    dist: Path
    report: Report
    reproducible: tuple[str, str] | None
    seconds: float
    #: This checkout's release: what its image builds left on the new machine they ran on (``new_machine``).
    first_build: FirstBuild | None = None

    @property
    def names(self) -> Names:
        return Names(self.version)


def tool(name: str) -> str:
    try:
        return str(find_binary(name))
    except MissingToolError as exc:
        pytest.fail(f"the release tests need {name}: {exc}", pytrace=False)


def run(args: list[str], *, timeout: float = 120, **kw: Any) -> str:
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout, **kw)
    assert out.returncode == 0, f"{args[:4]}: {out.stdout[-2000:]}{out.stderr[-4000:]}"
    return out.stdout


def build_current(dist: Path) -> Built:
    """This checkout's release (``make release VERSION=X.Y.Z``, the image built twice), on a new machine: a
    buildah storage and a capmaas cache of its own beside ``dist``, empty, removed after the build
    (``new_machine``: its first image build is also ``test_image_from_scratch``'s)."""
    reuse = os.environ.get(REUSE_DIST)
    if reuse:
        report = verify(Path(reuse), VERSION)
        print(f"release {VERSION}: reusing {reuse} ({REUSE_DIST})")
        return Built(VERSION, Path(reuse), report, None, 0.0)
    started = time.monotonic()
    machine = NewMachine(dist.parent / "new-machine")
    try:
        images_before = machine.create()
        release = Release(Options(VERSION, dist, env=machine.env))
        report = release.run()
        logs = [release.image_logs[n] for n in sorted(release.image_logs)]
        first = machine.record(images_before, logs, release.work / "image-1", VERSION)
    finally:
        machine.remove()
    seconds = time.monotonic() - started
    print("\n".join(report.lines()), f"\nrelease build: {seconds:.0f}s; steps {release.timings}")
    return Built(VERSION, dist, report, release.reproducible, seconds, first)


def shared_build(root: Path) -> Built:
    """This checkout's release for every pytest-xdist worker of a run (``root`` is shared by them): the first
    to get here builds it, holding a lock the others wait on; they then verify and take its ``dist/``. A
    build that failed left no record: the next worker tries again (and fails the same way)."""
    root.mkdir(parents=True, exist_ok=True)
    record = root / "built.json"
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes or the process dies
        if record.is_file():
            meta = json.loads(record.read_text())
            dist = Path(meta["dist"])
            pair = meta["reproducible"]
            reproducible = (str(pair[0]), str(pair[1])) if pair else None
            first = FirstBuild(**meta["first_build"]) if meta["first_build"] else None
            print(f"release {VERSION}: the build of another worker, {dist}")
            return Built(VERSION, dist, verify(dist, VERSION), reproducible, float(meta["seconds"]), first)
        built = build_current(root / "dist")
        first_build = asdict(built.first_build) if built.first_build else None
        record.write_text(
            json.dumps(
                {
                    "dist": str(built.dist),
                    "reproducible": built.reproducible,
                    "seconds": built.seconds,
                    "first_build": first_build,
                }
            )
        )
        return built


def validate_each_sbom_once(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify``'s CycloneDX schema validation, run once per distinct SBOM text in a run (``root`` is shared
    by the run's pytest-xdist workers and the previous release's build; ``sbom_once`` says why)."""
    monkeypatch.setattr(
        verify_module, "_validate_cyclonedx", sbom_once.remembering(verify_module._validate_cyclonedx, root)
    )


# -- the previous release ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PastRelease:
    version: str
    commit: str


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def previous_release(current: str = VERSION) -> PastRelease:
    """The newest release in ``releases.toml`` below ``current``."""
    entries = tomllib.loads(RELEASES.read_text()).get("release", [])
    below = [e for e in entries if _key(e["version"]) < _key(current)]
    if not below:
        pytest.fail(f"{RELEASES.name} lists no release below {current}: nothing to upgrade from")
    entry = max(below, key=lambda e: _key(e["version"]))
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), f"{RELEASES.name}: {entry} (want a full commit id)"
    return PastRelease(entry["version"], entry["commit"])


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)


def check_release_commit(past: PastRelease) -> None:
    """The release's commit is in this clone's history, the tag (when the clone has it) points there, and
    the tree there is that version. Fails, naming the fix, otherwise."""
    if _git("cat-file", "-e", f"{past.commit}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        pytest.fail(
            f"release {past.version}'s commit {past.commit} ({RELEASES.name}) is not in this clone's history"
            + (" (a shallow clone: `git fetch --unshallow`)" if shallow else " (fetch the full history)")
            + ": the upgrade test builds that release from it",
            pytrace=False,
        )
    if _git("merge-base", "--is-ancestor", past.commit, "HEAD").returncode != 0:
        pytest.fail(
            f"release {past.version}'s commit {past.commit} is not an ancestor of HEAD", pytrace=False
        )
    tag = _git("rev-parse", "--verify", "--quiet", f"refs/tags/v{past.version}^{{commit}}")
    if tag.returncode == 0:
        assert tag.stdout.strip() == past.commit, (
            f"tag v{past.version} points at {tag.stdout.strip()}, {RELEASES.name} says {past.commit}"
        )
    init = _git("show", f"{past.commit}:src/capmaas/__init__.py").stdout
    assert f'__version__ = "{past.version}"' in init, f"{past.commit} is not version {past.version}"


def build_previous(past: PastRelease, scratch: Path, sbom_marks: Path) -> Built:
    """The release ``past`` as its own tooling built it (module doc), from the cache when built before;
    ``sbom_marks``: the run's ``validate_each_sbom_once`` directory."""
    check_release_commit(past)
    cached = cache_dir() / "releases" / f"{past.version}-{past.commit[:12]}"
    cached.mkdir(parents=True, exist_ok=True)
    with (cached / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker (or run) building it: wait, then take its build
        return _build_previous(past, scratch, cached, sbom_marks)


def _build_previous(past: PastRelease, scratch: Path, cached: Path, sbom_marks: Path) -> Built:
    dist = cached / "dist"
    names = Names(past.version)
    started = time.monotonic()
    if dist.is_dir():
        run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=dist)
        print(f"release {past.version}: the build of {past.commit[:12]} from {dist}")
    else:
        src = scratch / f"capmaas-{past.version}"
        src.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", past.commit],
                                 capture_output=True, check=True)  # fmt: skip
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(src, filter="tar")
        epoch = _git("log", "-1", "--format=%ct", past.commit).stdout.strip()
        # That tree's release tooling, wherever its layout put it: capmaas_dev.release under tools/src since
        # the tools left the product's package, a package of src/ before.
        bases = [p for p in (src / "tools" / "src", src / "src") if p.is_dir()]
        main = next(m for base in bases for m in sorted(base.glob("*/release/__main__.py")))
        module = f"{main.parents[1].name}.release"
        path = os.pathsep.join(map(str, bases))
        env = {**os.environ, "PYTHONPATH": path, "SOURCE_DATE_EPOCH": epoch}
        partial = cached / "dist.partial"
        shutil.rmtree(partial, ignore_errors=True)
        # ``python -m <module> ...``, its SBOM validation shared with this run's (``sbom_once``).
        out = run([sys.executable, sbom_once.__file__, str(sbom_marks), module, past.version, "--out",
                   str(partial), "--no-reproducibility-check"], cwd=src, env=env, timeout=1800)  # fmt: skip
        print(out[-1500:])
        partial.rename(dist)
        shutil.rmtree(src, ignore_errors=True)
    report = verify(dist, past.version)
    seconds = time.monotonic() - started
    print(f"release {past.version} ready in {seconds:.0f}s: {names.image} {report.digest}")
    return Built(past.version, dist, report, None, seconds)


# -- the installed container as a process --------------------------------------------------------------------
def resolve_env(container: dict[str, Any], namespace: str, pod: str) -> dict[str, str]:
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        fieldpath = e["valueFrom"]["fieldRef"]["fieldPath"]  # the only valueFrom the components use
        env[e["name"]] = {"metadata.namespace": namespace, "metadata.name": pod}[fieldpath]
    return env


def mount_secrets(
    deploy: dict[str, Any], container: dict[str, Any], kubectl: Callable[..., str], namespace: str, root: Path
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


def serviceaccount_kubeconfig(admin: Path, token: str, dest: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": "capmaas-sa", "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = "capmaas-sa"
    dest.write_text(yaml.safe_dump(config))
    return dest


@dataclass
class InstalledProcess:
    """The Deployment a clusterctl install made, run the way the kubelet would start its container (see
    ``test_release_dist``'s module doc): args and env as installed, the Secret volumes written out, the code
    from ``wheel`` (imported from the zip), authenticated as the installed ServiceAccount."""

    proc: subprocess.Popen[bytes]
    log: Path
    deployment: dict[str, Any]

    @classmethod
    def start(
        cls, kubectl: Callable[..., str], admin: Path, wheel: Path, scratch: Path, *, namespace: str, pod: str
    ) -> InstalledProcess:
        from capmaas_dev.devcluster.process import free_port

        scratch.mkdir(parents=True)
        deploy = json.loads(kubectl("get", "deployment", "-n", namespace, "capmaas", "-o", "json"))
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        sa = deploy["spec"]["template"]["spec"]["serviceAccountName"]
        token = kubectl("create", "token", sa, "-n", namespace)
        sa_config = serviceaccount_kubeconfig(admin, token.strip(), scratch / "sa.kubeconfig")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPMAAS_", "KUBE"))}
        env |= resolve_env(container, namespace, pod)
        mounts = mount_secrets(deploy, container, kubectl, namespace, scratch / "volumes")
        env["CAPMAAS_SECRETS_DIR"] = mounts[env["CAPMAAS_SECRETS_DIR"]]
        env |= {
            "KUBECONFIG": str(sa_config),
            "PYTHONPATH": str(wheel),
            "CAPMAAS_SERVER__BIND_ADDRESS": "127.0.0.1",
            "CAPMAAS_SERVER__HEALTH_PORT": str(free_port()),
            "CAPMAAS_SERVER__METRICS_PORT": str(free_port()),
            "CAPMAAS_POLLING__FAST_INTERVAL": "0.3",
        }
        where = run([sys.executable, "-c", "import capmaas; print(capmaas.__file__)"], env=env)
        assert wheel.name in where  # the release's code, not the checkout's
        log = scratch / "operator.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "capmaas", *container["args"]],
                env=env, stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return cls(proc, log, deploy)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the operator exited ({self.proc.returncode}):\n{self.text()[-4000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def denied(self) -> list[str]:
        """Log lines where the ServiceAccount's RBAC refused the operator."""
        return [ln for ln in self.text().splitlines() if "forbidden" in ln.lower()]


@contextmanager
def simulator(host: str = "127.0.0.1") -> Iterator[SimulatorThread]:
    from capmaas_dev.simulator import Inventory, Timings

    sim = SimulatorThread(Inventory.from_yaml(INVENTORY), Timings(deploy=2.0, release=0.5), host=host).start()
    try:
        yield sim
    finally:
        sim.stop()


# -- a cluster on the simulator ------------------------------------------------------------------------------
SPECS = (
    MachineSpec("rel-cp-0", True, tags=("control-plane",)),
    MachineSpec("rel-worker-0", False, resource_pool="workers"),
    MachineSpec("rel-worker-1", False, resource_pool="workers"),
)


@dataclass
class Workload:
    """A MaasCluster and its machines driven through an installed operator, CAPI played by
    :class:`capmaas_dev.demo.capi.Capi`. ``alive`` fails the test when the operator died; ``logs`` is its
    log."""

    kube: Kube
    sim: SimulatorThread
    alive: Callable[[], None]
    logs: Callable[[], str]
    namespace: str = "release-test"
    timings: dict[str, float] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    capi: Capi | None = None

    def wait(self, what: str, done: Callable[[], object], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout:.0f}s\n{self.logs()[-4000:]}")
            time.sleep(0.5)

    def ready(self) -> list[dict[str, Any]]:
        return [
            m
            for m in self.kube.list(MAASMACHINES, self.namespace)
            if (m.get("status") or {}).get("ready") and (m.get("spec") or {}).get("providerID")
        ]

    def create(self, *, plaintext: bool = False, specs: tuple[MachineSpec, ...] = SPECS) -> None:
        """The MaasCluster, then ``specs`` to Ready; the deployed MAAS machines are exactly theirs."""
        t0 = time.monotonic()
        self.kube.create_namespace(self.namespace)
        self.capi = Capi(self.kube, self.namespace, "sample")
        # Off loopback (the node's address), http:// needs the identity's explicit opt-in.
        self.capi.create_cluster(self.sim.url, self.sim.api_key, allow_plaintext_http=plaintext)
        self.capi.wait_infrastructure(120.0, check=self.alive)
        self.add(*specs)
        self.timings[f"MaasCluster + {len(specs)} machines Ready"] = time.monotonic() - t0
        assert self.kube.get(MAASCLUSTERS, self.namespace, "sample") is not None

    def add(self, *specs: MachineSpec) -> None:
        assert self.capi is not None
        self.capi.create_machines(specs)
        self.names += [s.name for s in specs]
        n = len(self.names)
        self.wait(f"{n} MaasMachines Ready", lambda: len(self.ready()) == n, 180)
        deployed = {sid for sid, m in self.sim.machine_states().items() if m["status_name"] == "Deployed"}
        assert deployed == {m["spec"]["providerID"].rsplit("/", 1)[-1] for m in self.ready()}

    def delete(self) -> None:
        """Every machine, then the cluster, deleted; every MAAS machine released."""
        assert self.capi is not None
        capi = self.capi
        t1 = time.monotonic()
        capi.delete_machines(self.names)
        self.wait("MaasMachines gone", lambda: not self.kube.list(MAASMACHINES, self.namespace), 120)
        capi.delete_rest(self.names)
        self.wait("MaasCluster gone", capi.finish_delete, 120)

        def released() -> bool:
            return not any(
                m["owner"] or m["status_name"] != "Ready" for m in self.sim.machine_states().values()
            )

        self.wait("every MAAS machine released", released, 60)
        self.timings["deleted and released"] = time.monotonic() - t1
