"""A machine that never built the image, for the release build of the tests: a buildah storage and a capmaas
cache of their own, both empty, so that the release's first image build runs ``hack/image.sh`` as ``make
image`` runs on a new machine (the base made by mmdebstrap, issue 22) and its second build, the
reproducibility check, finds that base. What the first build left is recorded (:class:`FirstBuild`) for
``test_image_from_scratch`` before the storage is removed.

Why one build for both: the from-scratch test built an image of its own in such a storage and the release
then built two more in the machine's storage. The first release build in a new storage is the same proof,
so the suite builds the image once less (docs/benchmarks/test-durations.md, "One build for two proofs").
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SUITE = os.environ.get("CAPMAAS_BASE_SUITE", "bookworm")


@dataclass(frozen=True)
class FirstBuild:
    """What the release's image builds left in the new storage, cache and first output directory."""

    images_before: list[str]
    logs: list[str]
    images: list[str]
    containers: list[str]
    stale_left: bool
    cache: list[str]
    outputs: list[str]
    context: list[str]
    archive: str
    digest: str


@dataclass(frozen=True)
class NewMachine:
    root: Path

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def stale(self) -> Path:
        """What an interrupted run of the old script left: a directory under the partial base's name."""
        return self.cache / "image" / f"base-{SUITE}.partial.tar"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point ``hack/image.sh`` and buildah at this machine's storage and cache."""
        return {"CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"), "CAPMAAS_CACHE": str(self.cache)}

    def create(self) -> list[str]:
        """Lays out the empty storage and cache (with the stale partial base); returns the images the storage
        holds (none, or the test fails)."""
        for tool in ("buildah", "mmdebstrap"):
            if shutil.which(tool) is None:
                pytest.fail(f"{tool} not found: run `make image` (it installs it)", pytrace=False)
        if os.geteuid() != 0:
            pytest.fail("building the image on a new machine needs root (buildah, mmdebstrap)", pytrace=False)
        if self.root.exists():  # what an earlier, failed attempt of this run left
            self.remove()
        graph, run = self.storage / "graph", self.storage / "run"
        self.root.mkdir(parents=True)
        (self.root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{graph}"\nrunroot = "{run}"\n'
        )
        (self.stale / "etc").mkdir(parents=True)
        return self._buildah("images", "--format", "{{.Name}}:{{.Tag}}").split()

    def record(self, images_before: list[str], logs: list[str], first_out: Path, tag: str) -> FirstBuild:
        """What the builds left; ``first_out``: the first build's output directory (``CAPMAAS_IMAGE_OUT``)."""
        archive = first_out / f"capmaas-{tag}.oci.tar"
        digest = first_out / f"capmaas-{tag}.digest"
        return FirstBuild(
            images_before=images_before,
            logs=logs,
            images=self._buildah("images", "--format", "{{.Name}}:{{.Tag}}").split(),
            containers=self._buildah("containers", "--quiet").split(),
            stale_left=self.stale.exists(),
            cache=sorted(p.name for p in (self.cache / "image").iterdir()),
            outputs=sorted(p.name for p in first_out.iterdir()),
            context=sorted(p.name for p in (first_out / "context" / "build" / "image").iterdir()),
            archive=str(archive),
            digest=digest.read_text() if digest.is_file() else "",
        )

    def remove(self) -> None:
        """The containers and images first, so that buildah unmounts its layers, then the files. Never without
        this machine's storage.conf: buildah would then take the machine's own storage for it."""
        if (self.root / "storage.conf").is_file() and shutil.which("buildah") is not None:
            for args in (("rm", "--all"), ("rmi", "--all", "--force")):
                subprocess.run(
                    ["buildah", *args], env=self._env(), capture_output=True, timeout=300, check=False
                )
        umount = ["umount", "--recursive", "--lazy", str(self.storage)]
        subprocess.run(umount, capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _env(self) -> dict[str, str]:
        """The caller's environment without its storage and cache (nor any other of their variables)."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("CAPMAAS_", "CONTAINERS_"))}
        return {**kept, **self.env}

    def _buildah(self, *args: str) -> str:
        proc = subprocess.run(
            ["buildah", *args], env=self._env(), capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"buildah {' '.join(args)}: {proc.stderr}"
        return proc.stdout
