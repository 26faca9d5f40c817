"""Shared pytest fixtures: a real local Kubernetes control plane for tests marked ``k8s``.

Nothing here starts a process unless a test asks for one of these fixtures, so unit tests stay fast. When the
binaries are missing the k8s tests *fail* (not skip) with a message naming ``make controlplane``: a green run
that silently tested nothing against Kubernetes would be a lie, and CI builds the binaries first.

- ``kube`` (session): etcd + kube-apiserver (+ kube-controller-manager when built, for GC and namespace
  deletion) with the Cluster API core CRDs applied. ``.kubeconfig``, ``.server``, ``.env()``.
- ``workload_kube`` (session, started on first use): a second, independent control plane (no CAPI CRDs, no
  controller-manager) standing in for a workload cluster.
- ``namespace`` (function): a fresh namespace in ``kube``, deleted after the test.
- ``kubectl`` (session): ``kubectl(*args, check=True, input=None, kubeconfig=None)`` runs the venv's kubectl
  against ``kube`` (or the given kubeconfig) and returns the CompletedProcess; a failure raises with stderr.
  A successful ``get ... -o json`` is answered in-process with kubectl's very text (see the fixture).
- ``api`` (session): the in-process client of ``tests/operator/kube_reader.py`` for ``kube``.

With pytest-xdist (``-n 3 --dist loadgroup --no-loadscope-reorder``, what ``make test`` runs) each worker has
its own session fixtures, so its own ``kube``; ``suite_plan`` says which tests share a worker and which start
first, and prints the time of each group of tests at the end.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest
from hypothesis import HealthCheck, settings

import suite_plan

# Hypothesis's per-example deadline and its "input generation is slow" health check are timing asserts: on a
# 2-core box running three workers, an apiserver and image builds, a draw can take a second. Every property
# keeps its examples and assertions; only the clock is out (as the placement, fuzz and simulator properties
# already had it).
settings.register_profile("capmaas", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("capmaas")

if TYPE_CHECKING:  # imported lazily: collecting unit tests should not pay for ssl/urllib/yaml imports
    from kube_reader import KubeReader

    from capmaas_dev.devcluster import ControlPlane

K8S_FIXTURES = frozenset({"kube", "workload_kube", "namespace", "kubectl"})


class Kubectl(Protocol):
    def __call__(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]: ...


#: The time per test group, in the process that prints the summary (not in xdist's workers).
_TIMES: list[suite_plan.Times] = []


def pytest_configure(config: pytest.Config) -> None:
    cache_bytecode()
    absent_sniffio_fails_fast()
    # pytest-xdist registers it; without xdist (a plain run) the groups only order the tests.
    config.addinivalue_line("markers", "xdist_group(name): tests that run on one xdist worker (suite_plan)")
    # pytest-cov registers it too; here for a run without that plugin (suite_plan marks untraced tests).
    config.addinivalue_line("markers", "no_cover: coverage.py's tracer paused in this test (suite_plan)")
    if not suite_plan.is_worker(config):
        _TIMES[:] = [suite_plan.Times()]
    config.pluginmanager.register(suite_plan.GroupNames(), "capmaas-suite-plan-group-names")


def cache_bytecode() -> None:
    """Bytecode is cached (``__pycache__``, gitignored) even when the environment says
    PYTHONDONTWRITEBYTECODE (this box's and CI's do). Without it every xdist worker rewrote and compiled
    every test module again, and every Python process a test starts (the zygote, ``capmaas`` CLIs, ``capmaas
    demo``, the simulator, release steps) compiled capmaas and capmaas_dev again: CPU the whole suite shares
    (docs/benchmarks/test-durations.md, "Bytecode"). Done before collection imports a test module (pytest's
    rewriting reads the flag per module); xdist's workers and every child inherit the environment."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False


def absent_sniffio_fails_fast() -> None:
    """When sniffio is not installed (it is no dependency here), its import fails at once instead of searching
    every ``sys.path`` entry again. httpx's ``ASGITransport`` tries ``import sniffio`` (to tell trio from
    asyncio) for two events of every request, and the failing import was a measurable share of the in-process
    simulator tests' CPU (docs/benchmarks/test-durations.md, "The xdist workers' CPU"). ``None`` in
    ``sys.modules`` is Python's own "this module cannot be imported": the same ImportError, raised sooner."""
    import importlib.util

    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the xdist_group markers into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a Kubernetes fixture is a k8s test even if it forgot the marker (``-m "not k8s"``).
    Then the groups and order of ``suite_plan``, and which tests coverage.py traces (``suite_plan.TRACED``);
    under ``--cov`` the gate's packages are imported here, traced (``suite_plan.import_gated_packages``)."""
    for item in items:
        if K8S_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("k8s") is None:
            item.add_marker(pytest.mark.k8s)
    suite_plan.plan(items)
    if config.pluginmanager.hasplugin("_cov"):  # pytest-cov registers it when coverage is on
        suite_plan.import_gated_packages()


@pytest.hookimpl(tryfirst=True)  # before pytest-cov's own, which starts the worker's coverage
def pytest_sessionstart(session: pytest.Session) -> None:
    stop_the_early_coverage_of_a_worker(session.config)


def stop_the_early_coverage_of_a_worker(config: pytest.Config) -> None:
    """In an xdist worker, stop the coverage pytest-cov 7.1 started at the worker's start-up, before it starts
    the worker's own at session start. It starts one when it reads ``--cov`` (as for xdist's controller: a
    worker gets the controller's arguments) and a second when it finds it is a worker, and never stops the
    first: coverage.py stacks the two, and pausing the top one for a ``no_cover`` test resumes the one below,
    so every test of a worker ran traced (``suite_plan``'s untraced tests at about twice their CPU:
    docs/benchmarks/test-durations.md, "The xdist workers' CPU"). The first's data is never saved in a worker
    (only the worker's own goes to the controller), so stopping it loses nothing; the gated packages' imports
    at collection are recorded by the worker's own, started before collection."""
    early = getattr(config.pluginmanager.get_plugin("_cov"), "cov_controller", None)
    if suite_plan.is_worker(config) and early is not None:
        early.cov.stop()  # a no-op when it is not running


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every report reaches this hook in the process that prints the summary (xdist's controller included)."""
    for times in _TIMES:
        times.add(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for times in _TIMES:
        if not times.rows:
            return
        terminalreporter.section("time per test group")
        for line in times.table():
            terminalreporter.write_line(line)
        path = suite_plan.output_path()
        if path is not None:
            times.write(path)


def _start(*, controller_manager: bool | None, capi_crds: bool) -> ControlPlane:
    """Start a control plane, or fail the requesting test with the reason (never skip: see module doc)."""
    from capmaas_dev.devcluster import ControlPlane, MissingToolError, StartError, apply_capi_crds

    problem = None
    try:
        cp = ControlPlane.start(controller_manager=controller_manager)
    except MissingToolError as exc:
        problem = f"k8s test needs the local control plane: {exc}"
    except StartError as exc:
        problem = f"the local control plane did not start: {exc}"
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    if capi_crds:
        try:
            apply_capi_crds(cp.kubeconfig)
        except MissingToolError as exc:
            problem = f"k8s test needs the Cluster API CRDs: {exc}"
        except BaseException:
            cp.stop()
            raise
        if problem is not None:
            cp.stop()
            pytest.fail(problem, pytrace=False)
    return cp


@pytest.fixture(scope="session")
def kube() -> Iterator[ControlPlane]:
    cp = _start(controller_manager=None, capi_crds=True)
    with cp:
        yield cp


@pytest.fixture(scope="session")
def workload_kube() -> Iterator[ControlPlane]:
    cp = _start(controller_manager=False, capi_crds=False)
    with cp:
        yield cp


@pytest.fixture(scope="session")
def kubectl(kube: ControlPlane) -> Kubectl:
    """kubectl against ``kube`` (or ``kubeconfig``).

    ``get KIND [NAME] [-n NS] [-l SELECTOR] -o json`` (or ``KIND/NAME``) is read in-process (``kube_reader``,
    one keep-alive connection) and answered with the text kubectl prints, byte for byte (compared in
    ``tests/operator/test_kube_reader.py``): such reads are most of the tests' ``get``s, many of them polls,
    and a kubectl fork costs ~0.1 s of CPU (docs/benchmarks/test-durations.md, "kubectl forks"). kubectl
    answers anything else, and any read the reader does not answer with the object (a missing object, a
    refusal, a kind it cannot resolve), so that a failure's exit status and stderr are always kubectl's.
    ``run.fork`` always forks; ``run.in_process`` is the answer without a fork (None when ``run`` forks): for
    the tests that compare the two."""
    from capmaas_dev.devcluster import kubectl_path, run_kubectl

    def fork(
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(kubeconfig or kube.kubeconfig, *args, check=check, input=input, timeout=timeout)

    def run(
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        if input is None:
            config = Path(kubeconfig or kube.kubeconfig)
            text = in_process(*args, kubeconfig=config)
            if text is not None:
                return subprocess.CompletedProcess(
                    [str(kubectl_path()), f"--kubeconfig={config}", *args], 0, text, ""
                )
        return fork(*args, check=check, input=input, kubeconfig=kubeconfig, timeout=timeout)

    def in_process(*args: str, kubeconfig: str | Path | None = None) -> str | None:
        return _json_get(Path(kubeconfig or kube.kubeconfig), args)

    run.fork = fork  # type: ignore[attr-defined]
    run.in_process = in_process  # type: ignore[attr-defined]  # its stdout without a fork, None: it forks

    # Whom it talks to, for helpers that read in-process instead of forking it (tests/e2e/e2e_support.get).
    run.kubeconfig = kube.kubeconfig  # type: ignore[attr-defined]
    return run


def _json_get(kubeconfig: Path, args: tuple[str, ...]) -> str | None:
    """kubectl's stdout for ``args`` when they are ``get KIND [NAME] [-n NS] [-l SELECTOR] -o json`` (or
    ``KIND/NAME``) and the reader reads the object (or the list) as kubectl would; None when kubectl is to run
    (other arguments, another kind of kubeconfig, a missing object or any failure, a kind that does not
    resolve)."""
    if not args or args[0] != "get":
        return None
    flags = {"-n": "n", "--namespace": "n", "-l": "l", "--selector": "l", "-o": "o", "--output": "o"}
    words: list[str] = []
    given: dict[str, str] = {}
    rest = iter(args[1:])
    for arg in rest:
        flag, eq, value = arg.partition("=")
        if flag in flags:
            given[flags[flag]] = value if eq else next(rest, "")
        elif arg.startswith("-") or "," in arg:
            return None
        else:
            words.append(arg)
    if len(words) == 1 and words[0].count("/") == 1:
        words = words[0].split("/")
    if given.get("o") != "json" or not 1 <= len(words) <= 2 or (len(words) == 2 and "l" in given):
        return None
    try:
        api = _reader(kubeconfig)
    except (KeyError, IndexError, TypeError, ValueError, OSError):  # not a kubeconfig like the dev cluster's
        return None
    from kube_reader import ReadError, kubectl_json

    namespace = given.get("n") or api.default_namespace
    if namespace is None:
        return None
    try:
        found = api.read(words[0], namespace, words[1] if len(words) == 2 else "", given.get("l", ""))
    except ReadError:
        return None
    return kubectl_json(found) if isinstance(found, dict) else None


@pytest.fixture(scope="session")
def api(kube: ControlPlane) -> KubeReader:
    """The in-process client of ``tests/operator/kube_reader.py`` for ``kube`` (``kubectl get`` without a
    fork, and the fixtures' own plain writes), one per kubeconfig for the pytest process."""
    return _reader(kube.kubeconfig)


@pytest.fixture
def namespace(api: KubeReader, kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A namespace named after the test (DNS-1123, unique), left in place afterwards.

    Why not deleted: the namespace controller deletes a namespace by listing and deleting every resource type
    in it (~60 requests, with discovery), which made a tenth of the CPU of an operator test module (13 tests:
    61.2 s of CPU with the deletions, 55.1 s without, docs/benchmarks/test-durations.md). Every worker's
    control plane is its own and ends with the session, so what a test leaves is seen only by the tests after
    it on that worker, in namespaces of their own: the operators the tests start watch their own namespace or
    carry a watch filter of their own, and the few reads across namespaces look for Events only their own test
    causes (``tests/security/test_orphaning.py``)."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "t"
    name = f"{stem}-{secrets.token_hex(3)}"
    # In-process (kube_reader: a kubectl fork costs ~0.1 s of CPU, and every k8s test makes one); kubectl only
    # when the create is refused, so that its error is the one raised.
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if api.send("POST", "/api/v1/namespaces", namespace) != 201:
        kubectl("create", "namespace", name)
    return name


def _reader(kubeconfig: Path) -> KubeReader:
    """The in-process client of ``tests/operator/kube_reader.py`` for ``kubeconfig`` (one per kubeconfig)."""
    operator_tests = str(Path(__file__).resolve().parent / "operator")
    if operator_tests not in sys.path:
        sys.path.append(operator_tests)
    from kube_reader import reader

    return reader(kubeconfig)
