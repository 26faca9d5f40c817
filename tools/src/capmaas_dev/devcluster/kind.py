"""Thin adapter: a kind cluster instead of local processes, for people who have Docker and kind.

UNTESTED on the project's machines: they have no container engine, so this path never runs in CI. It only
shells out to ``kind create cluster`` / ``kind delete cluster`` with a kubeconfig in the dev-cluster
directory, so ``capmaas dev-cluster env`` and ``down`` work the same way for both kinds of cluster.
Everything else (binaries, PKI, ports) is kind's business.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

UNTESTED = (
    "note: the kind adapter is untested on capmaas' CI machines (no container engine there); "
    "it only runs `kind create/delete cluster`."
)


def unavailable_reason() -> str | None:
    """Why kind cannot be used here (``None`` if docker, a reachable engine and kind are all present)."""
    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found on PATH"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False, timeout=30)
    if probe.returncode != 0:
        detail = probe.stderr.strip()[:200]
        return f"docker is installed but no container engine answers (`docker info`: {detail})"
    return None


def create(name: str, kubeconfig: Path, *, image: str | None = None, timeout: float = 600.0) -> int:
    """``kind create cluster --name NAME --kubeconfig FILE [--image IMAGE] --wait 2m``; its exit code."""
    cmd = ["kind", "create", "cluster", "--name", name, "--kubeconfig", str(kubeconfig), "--wait", "2m"]
    if image:
        cmd += ["--image", image]
    return subprocess.run(cmd, check=False, timeout=timeout).returncode


def delete(name: str, kubeconfig: Path) -> int:
    """``kind delete cluster --name NAME``; its exit code."""
    cmd = ["kind", "delete", "cluster", "--name", name, "--kubeconfig", str(kubeconfig)]
    return subprocess.run(cmd, check=False, timeout=300).returncode
