"""``make image`` on a machine that never ran it: ``hack/image.sh`` with an empty cache and an empty buildah
storage, so the base image is made from scratch by mmdebstrap, as on a fresh CI machine.

Why: the base step runs once per machine, so a bug in it hides on every machine that ran it before (issue 22:
mmdebstrap wrote a directory for a ``.tar.tmp`` name and ``make test`` failed on every new machine, while
every developer's machine passed). The build checked is the first image build of this checkout's release
(the session's ``built``, ``conftest.py``): it runs on a new machine (``new_machine``), a throwaway storage
(``CONTAINERS_STORAGE_CONF`` naming a graph root and run root of its own) and an empty ``CAPMAAS_CACHE``, so
nothing of an earlier run can stand in for the step; its second build, the release's reproducibility check,
then finds the base that the first made. A stale partial base left by an interrupted run (a directory under
the partial name, as the old bug left) must not break it either. One build serves both proofs: the test
built an image of its own before (docs/benchmarks/test-durations.md, "One build for two proofs").

Needs root, buildah and mmdebstrap (``make image`` installs them) and the Debian package mirror of the host's
apt sources. The release's build takes a few minutes (the base, most of it mmdebstrap, and two image builds).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from new_machine import SUITE
from release_support import VERSION, Built

# The base alone took 488 s at a load average of ~20 (mmdebstrap): more than the suite's 600 s default.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_image_builds_with_an_empty_cache_and_storage(built: Built) -> None:
    first = built.first_build
    if first is None:
        pytest.fail("the release was not built here (CAPMAAS_TEST_RELEASE_DIST): no first build to check")
    assert first.images_before == [], "the throwaway storage is not empty"
    made = f"making the base localhost/capmaas-base:{SUITE}"
    log = f"--- first build ---\n{first.logs[0]}\n--- second build ---\n{first.logs[1]}"
    assert made in first.logs[0], log  # made here, not found
    assert made not in first.logs[1], log  # the second build, on the same machine, found it
    # Both images are in the throwaway storage; nothing half-done is left in the cache or the output.
    assert f"localhost/capmaas-base:{SUITE}" in first.images, first.images
    assert f"localhost/capmaas:{VERSION}" in first.images, first.images
    assert not first.stale_left, "the stale partial base was not removed"
    assert first.cache == [], "leftovers in the cache"
    outputs = [f"capmaas-{VERSION}.digest", f"capmaas-{VERSION}.oci.tar", "context"]
    assert first.outputs == outputs, first.outputs
    assert first.context == ["wheels"]
    assert first.containers == [], "working containers left behind"
    # The archive is a complete OCI layout that names the image (what containerd's CRI looks it up by).
    with tarfile.open(Path(first.archive)) as tar:
        members = set(tar.getnames())
        assert {"oci-layout", "index.json"} <= members, sorted(members)[:20]
        index = tar.extractfile("index.json")
        assert index is not None
        assert f"localhost/capmaas:{VERSION}".encode() in index.read()
    assert first.digest.startswith("sha256:")
