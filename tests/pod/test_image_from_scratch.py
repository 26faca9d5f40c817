"""``make image`` on a machine that never ran it: ``hack/image.sh`` with an empty cache and an empty buildah
storage, so the base image is made from scratch by mmdebstrap, as on a fresh CI machine.

Why: the base step runs once per machine, so a bug in it hides on every machine that ran it before (issue 22:
mmdebstrap wrote a directory for a ``.tar.tmp`` name and ``make test`` failed on every new machine, while
every developer's machine passed). Here the storage is a throwaway one (``CONTAINERS_STORAGE_CONF`` naming a
graph root and run root under the test's temporary directory) and ``CAPMAAS_CACHE`` and the output directory
are empty, so nothing of an earlier run can stand in for the step. A stale partial base left by an
interrupted run (a directory under the partial name, as the old bug left) must not break it either.

Needs root, buildah and mmdebstrap (``make image`` installs them) and the Debian package mirror of the host's
apt sources. Takes about three minutes (most of it mmdebstrap).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The base alone took 488 s at a load average of ~20 (mmdebstrap): more than the suite's 600 s default.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
SUITE = os.environ.get("CAPMAAS_BASE_SUITE", "bookworm")


@pytest.fixture
def empty_storage(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment for a run of ``hack/image.sh`` that sees no image and no cache of any earlier run."""
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: run `make image` (it installs it)", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("building the image from scratch needs root (buildah storage, mmdebstrap)", pytrace=False)
    storage = tmp_path / "storage"
    conf = tmp_path / "storage.conf"
    conf.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{storage / "graph"}"\nrunroot = "{storage / "run"}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPMAAS_", "CONTAINERS_"))}
    env.update(
        CONTAINERS_STORAGE_CONF=str(conf),
        CAPMAAS_CACHE=str(tmp_path / "cache"),
        CAPMAAS_IMAGE_OUT=str(tmp_path / "out"),
        PIP=str(REPO / ".venv" / "bin" / "pip"),
    )
    try:
        yield env
    finally:
        # Remove the containers and images first so that buildah unmounts its layers, then the files.
        for args in (("rm", "--all"), ("rmi", "--all", "--force")):
            subprocess.run(["buildah", *args], env=env, capture_output=True, timeout=300, check=False)
        subprocess.run(["umount", "--recursive", "--lazy", str(storage)], capture_output=True, check=False)
        shutil.rmtree(storage, ignore_errors=True)


def buildah(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        ["buildah", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"buildah {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_image_builds_with_an_empty_cache_and_storage(empty_storage: dict[str, str], tmp_path: Path) -> None:
    env = empty_storage
    assert buildah(env, "images", "--quiet").strip() == "", "the throwaway storage is not empty"
    # What an interrupted run of the old script left: a directory under the partial base's name.
    stale = tmp_path / "cache" / "image" / f"base-{SUITE}.partial.tar"
    (stale / "etc").mkdir(parents=True)
    out = tmp_path / "out"
    if (REPO / "build" / "image" / "wheels").is_dir():  # the wheels are not what is under test: reuse them
        shutil.copytree(REPO / "build" / "image" / "wheels", out / "context" / "build" / "image" / "wheels")
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "image.sh"), "--tag", "scratch", "--reuse-wheels"],
        env=env, capture_output=True, text=True, timeout=1200, check=False, cwd=REPO,
    )  # fmt: skip
    log = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert proc.returncode == 0, log
    assert f"making the base localhost/capmaas-base:{SUITE}" in proc.stdout, log  # made here, not found
    # Both images are in the throwaway storage; nothing half-done is left in the cache or the output.
    names = buildah(env, "images", "--format", "{{.Name}}:{{.Tag}}").split()
    assert f"localhost/capmaas-base:{SUITE}" in names, names
    assert "localhost/capmaas:scratch" in names, names
    assert not stale.exists(), "the stale partial base was not removed"
    assert sorted(p.name for p in (tmp_path / "cache" / "image").iterdir()) == [], "leftovers in the cache"
    outputs = sorted(p.name for p in out.iterdir())
    assert outputs == ["capmaas-scratch.digest", "capmaas-scratch.oci.tar", "context"], outputs
    assert [p.name for p in (out / "context" / "build" / "image").iterdir()] == ["wheels"]
    assert buildah(env, "containers", "--quiet").strip() == "", "working containers left behind"
    # The archive is a complete OCI layout that names the image (what containerd's CRI looks it up by).
    with tarfile.open(out / "capmaas-scratch.oci.tar") as tar:
        members = set(tar.getnames())
        assert {"oci-layout", "index.json"} <= members, sorted(members)[:20]
        index = tar.extractfile("index.json")
        assert index is not None
        assert b"localhost/capmaas:scratch" in index.read()
    assert (out / "capmaas-scratch.digest").read_text().startswith("sha256:")
