"""The release of this checkout, built once per run (``make release VERSION=X.Y.Z``, the image built twice)
for the install tests (``test_release_dist``, in the ``pod`` group) and the upgrade tests (``test_upgrade``:
its Helm test in ``pod``, its clusterctl test in ``image``; ``tests/suite_plan.py``). On pytest-xdist workers
the first worker to need it builds it and the others take that build (``release_support.shared_build``):
the groups run on two workers while the build is paid once. Each SBOM's schema validation runs once per run
(``release_support.validate_each_sbom_once``), the previous release's build included (``sbom_once``).
The build runs on a new machine, an empty buildah storage and cache of its own (``new_machine``): its first
image build is ``test_image_from_scratch``'s subject too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from release_support import Built, build_current, shared_build, validate_each_sbom_once


def _run_root(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory every pytest-xdist worker of this run shares (or this session's own, without xdist)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent / name
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def sbom_marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the run marks the SBOM texts that passed validation (``sbom_once``)."""
    return _run_root(tmp_path_factory, "valid-sboms")


@pytest.fixture(scope="session", autouse=True)
def _sboms_validated_once(sbom_marks: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        validate_each_sbom_once(sbom_marks, patch)
        yield


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return shared_build(_run_root(tmp_path_factory, "release-build"))
    return build_current(tmp_path_factory.mktemp("release") / "dist")
