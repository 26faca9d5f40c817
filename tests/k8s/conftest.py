"""Fixtures shared by the tests against a real kube-apiserver (``api``, the in-process reader, is the root
conftest's)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capmaas_dev import crdgen

CRDS = Path(__file__).resolve().parents[2] / "crds"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def crds(kube: Any, kubectl: Kubectl) -> list[str]:
    """Install crds/ the way a user would (kubectl apply -f crds/) and wait until every CRD is Established;
    the CRDs' names. Module-scoped, as each module installed them before: a module that removes or changes
    a CRD leaves the next module a fresh apply."""
    kubectl("apply", "-f", str(CRDS))
    names = [kind.crd_name for kind in crdgen.KINDS]
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    return names
