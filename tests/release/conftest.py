"""The release of this checkout, built once per run (``make release VERSION=X.Y.Z``, the image built twice)
for the install tests (``test_release_dist``, in the ``pod`` group) and the upgrade tests (``test_upgrade``:
its Helm test in ``pod``, the others in ``upgrade``; ``tests/suite_plan.py``). On pytest-xdist workers the
first worker to need it builds it and the others take that build (``release_support.shared_build``): the
groups run on two workers while the build is paid once."""

from __future__ import annotations

import os

import pytest
from release_support import Built, build_current, shared_build


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return shared_build(tmp_path_factory.getbasetemp().parent / "release-build")
    return build_current(tmp_path_factory.mktemp("release") / "dist")
