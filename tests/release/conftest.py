"""The release of this checkout, built once per session (``make release VERSION=X.Y.Z``, the image built
twice) for the install tests (``test_release_dist``) and the upgrade tests (``test_upgrade``): both modules
are in the ``pod`` group (``tests/suite_plan.py``), so on one worker, and the build is paid once."""

from __future__ import annotations

import pytest
from release_support import Built, build_current


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_current(tmp_path_factory.mktemp("release") / "dist")
