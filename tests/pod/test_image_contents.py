"""The operator image holds the product only: no development tool (simulator, dev cluster, demo, bench, CRD
and release generators) is in any of its layers.

Why: the tools are a distribution of their own (``capmaas-dev``, ``tools/``) so that what runs in the Pod is
what the image holds; before, the Dockerfile installed one wheel with all of them (issue 27). Read from the
OCI archive ``make image`` writes (``build/image/capmaas-dev.oci.tar``), layer by layer, with nothing but
tarfile and json: no container engine, no helper of the code under test.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / "build" / "image" / "capmaas-dev.oci.tar"
SITE = r"opt/venv/lib/python3\.\d+/site-packages/"
#: Paths of the tools, in the product's package where they were, or their own package and distribution.
TOOLING = re.compile(
    SITE + r"(capmaas/(simulator|devcluster|demo|bench|release)/"
    r"|capmaas/(clusterctl_repo|api/crdgen|placement/bench)\.py"
    r"|capmaas/(__pycache__/clusterctl_repo|api/__pycache__/crdgen|placement/__pycache__/bench)\."
    r"|capmaas_dev/|capmaas_dev-[^/]*\.dist-info/)"
)


def layer_files(archive: Path) -> set[str]:
    """Every file name in the image's layers (the first manifest of the archive's index)."""
    with tarfile.open(archive) as oci:

        def blob(digest: str) -> bytes:
            f = oci.extractfile("blobs/" + digest.replace(":", "/"))
            assert f is not None, digest
            return f.read()

        index = json.loads(oci.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        names: set[str] = set()
        for layer in manifest["layers"]:
            f = oci.extractfile("blobs/" + layer["digest"].replace(":", "/"))
            assert f is not None, layer["digest"]
            with tarfile.open(fileobj=f, mode="r|*") as tar:  # gzip or plain, streamed
                names.update(m.name.removeprefix("./") for m in tar)
        return names


def test_the_operator_image_holds_no_development_tooling() -> None:
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE} not found: run `make image`", pytrace=False)
    names = layer_files(ARCHIVE)
    product = [n for n in names if re.fullmatch(SITE + r"capmaas/operator/main\.py", n)]
    assert product, "the operator's own code is not in the image: the archive was not read right"
    tooling = sorted(n for n in names if TOOLING.match(n))
    assert tooling == [], f"{len(tooling)} files of the development tools in the image, e.g. {tooling[:5]}"
