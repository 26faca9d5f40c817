"""Every check of a built ``dist/``: what ``make release`` runs last and what the release tests assert.

A release is only as good as the links between its parts, so those are what is checked: the image archive's
manifest digest is the one the clusterctl components run and the packaged chart pins; ``SHA256SUMS`` covers
every file and each hash holds; both SBOMs are valid CycloneDX (validated against the 1.6 JSON schema by
cyclonedx-python-lib, the ``release`` extra of capmaas-dev) with packages in them; the versions agree
everywhere.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from capmaas_dev import clusterctl_repo
from capmaas_dev.release import oci

SUMS = "SHA256SUMS"


class VerifyError(Exception):
    """The release directory is incomplete or inconsistent (every problem found is in the message)."""


@dataclass(frozen=True)
class Names:
    """The file names of release ``version`` (one place, for the build and the checks)."""

    version: str

    @property
    def wheel(self) -> str:
        return f"capmaas-{self.version}-py3-none-any.whl"

    @property
    def sdist(self) -> str:
        return f"capmaas-{self.version}.tar.gz"

    @property
    def image(self) -> str:
        return f"capmaas-image-{self.version}.oci.tar"

    @property
    def digest(self) -> str:
        return f"capmaas-image-{self.version}.digest"

    @property
    def chart(self) -> str:
        return f"capmaas-{self.version}.tgz"

    @property
    def python_sbom(self) -> str:
        return f"capmaas-image-{self.version}.python.cdx.json"

    @property
    def debian_sbom(self) -> str:
        return f"capmaas-image-{self.version}.debian.cdx.json"

    @property
    def clusterctl(self) -> tuple[str, ...]:
        return (
            "metadata.yaml",
            "infrastructure-components.yaml",
            "cluster-template.yaml",
            "cluster-template-lxd.yaml",
            "cluster-template-kube-vip.yaml",
            "cluster-template-topology.yaml",
            f"clusterclass-{clusterctl_repo.CLUSTER_CLASS}.yaml",
        )

    def all(self) -> tuple[str, ...]:
        return (
            self.wheel,
            self.sdist,
            self.image,
            self.digest,
            self.chart,
            *self.clusterctl,
            self.python_sbom,
            self.debian_sbom,
            SUMS,
        )


@dataclass
class Report:
    version: str
    image_ref: str = ""
    digest: str = ""
    sizes: dict[str, int] = field(default_factory=dict)
    python_components: int = 0
    debian_components: int = 0

    def lines(self) -> list[str]:
        out = [f"release {self.version}: image {self.image_ref}"]
        out += [f"  {size:>12,}  {name}" for name, size in sorted(self.sizes.items())]
        out.append(f"  SBOM components: python {self.python_components}, debian {self.debian_components}")
        return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sums(dist: Path) -> None:
    """``SHA256SUMS`` over every other file (``sha256sum -c SHA256SUMS`` checks it)."""
    files = sorted(p for p in dist.iterdir() if p.is_file() and p.name != SUMS)
    (dist / SUMS).write_text("".join(f"{sha256(p)}  {p.name}\n" for p in files))


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _validate_cyclonedx(text: str) -> str | None:
    """None when ``text`` is valid CycloneDX 1.6 JSON, else the validator's complaint."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error)


def verify(dist: Path, version: str, *, helm: str | None = None) -> Report:
    """Check ``dist`` as described in the module doc; raise :class:`VerifyError` listing every problem.

    ``helm``: the helm binary, to render the packaged chart (its image must be the pinned one); without it
    only the chart's files are read."""
    names = Names(version)
    report = Report(version)
    problems: list[str] = []
    missing = [n for n in names.all() if not (dist / n).is_file()]
    stray = sorted({p.name for p in dist.iterdir()} - set(names.all()))
    if missing or stray:
        raise VerifyError(f"{dist}: missing {missing}, not expected {stray}")
    report.sizes = {n: (dist / n).stat().st_size for n in names.all()}

    # SHA256SUMS: every other file, each hash right.
    listed: dict[str, str] = {}
    for line in (dist / SUMS).read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    if set(listed) != set(names.all()) - {SUMS}:
        problems.append(f"{SUMS} lists {sorted(listed)}")
    problems += [f"{SUMS}: {n} does not match" for n, d in listed.items() if sha256(dist / n) != d]

    # The image: its manifest digest is the release's.
    try:
        image = oci.manifest(dist / names.image)
    except oci.ArchiveError as exc:
        raise VerifyError(str(exc)) from exc
    report.digest = image.digest
    want_name = f"{clusterctl_repo.IMAGE_REPOSITORY}:{version}"
    if image.ref_name != want_name:
        problems.append(f"the archive names {image.ref_name!r}, want {want_name!r}")
    if (dist / names.digest).read_text().strip() != image.digest:
        problems.append(f"{names.digest} is not the archive's manifest digest {image.digest}")
    ref = clusterctl_repo.Image(clusterctl_repo.IMAGE_REPOSITORY, version, image.digest).reference
    report.image_ref = ref

    # clusterctl: the components run that image; metadata lists this release's series.
    docs = _docs((dist / "infrastructure-components.yaml").read_text())
    images = [
        c["image"]
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    if not images or set(images) != {ref}:
        problems.append(f"infrastructure-components.yaml runs {images}, want {ref}")
    major, minor, _ = version.split(".", 2)
    series = _docs((dist / "metadata.yaml").read_text())[0]["releaseSeries"]
    if {"major": int(major), "minor": int(minor), "contract": clusterctl_repo.CONTRACT} not in series:
        problems.append(f"metadata.yaml has no series {major}.{minor}: {series}")
    for name in names.clusterctl:
        if not _docs((dist / name).read_text()):
            problems.append(f"{name} is empty")

    # The chart: versioned, the image pinned by digest (and rendered so, when helm is at hand).
    with tarfile.open(dist / names.chart) as tar:
        chart = yaml.safe_load(_member(tar, "capmaas/Chart.yaml"))
        values = yaml.safe_load(_member(tar, "capmaas/values.yaml"))
    if (chart["version"], str(chart["appVersion"])) != (version, version):
        problems.append(f"chart version/appVersion {chart['version']}/{chart['appVersion']}, want {version}")
    pinned = values["image"]
    if (pinned["repository"], pinned["tag"], pinned["digest"]) != (
        clusterctl_repo.IMAGE_REPOSITORY,
        version,
        image.digest,
    ):
        problems.append(f"the chart's values.image is {pinned}, want the release image {ref}")
    if helm is not None:
        out = subprocess.run(
            [helm, "template", "capmaas", str(dist / names.chart)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        rendered = [
            c["image"]
            for d in _docs(out.stdout)
            if d.get("kind") == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]
        ]
        if out.returncode != 0 or set(rendered) != {ref}:
            problems.append(f"helm template of the chart: {rendered or out.stderr.strip()}, want {ref}")

    # The wheel is this version.
    with zipfile.ZipFile(dist / names.wheel) as whl:
        meta = whl.read(f"capmaas-{version}.dist-info/METADATA").decode()
    if f"\nVersion: {version}\n" not in meta:
        problems.append(f"{names.wheel}: METADATA is not version {version}")

    # SBOMs: valid CycloneDX with packages; the Python one has capmaas itself, the Debian one names the image.
    for name in (names.python_sbom, names.debian_sbom):
        text = (dist / name).read_text()
        error = _validate_cyclonedx(text)
        if error is not None:
            problems.append(f"{name}: not valid CycloneDX 1.6: {error}")
            continue
        components = json.loads(text).get("components", [])
        if not components:
            problems.append(f"{name}: no components")
        if name == names.python_sbom:
            report.python_components = len(components)
            if not any((c["name"], c.get("version")) == ("capmaas", version) for c in components):
                problems.append(f"{name}: capmaas {version} is not among its components")
        else:
            report.debian_components = len(components)
            subject = json.loads(text)["metadata"]["component"]
            if subject.get("hashes") != [{"alg": "SHA-256", "content": image.digest.split(":", 1)[1]}]:
                problems.append(f"{name}: its image is not {image.digest}")
    if problems:
        raise VerifyError(f"{dist}: " + "; ".join(problems))
    return report


def _member(tar: tarfile.TarFile, name: str) -> str:
    f = tar.extractfile(name)
    if f is None:
        raise VerifyError(f"{name} missing from the chart")
    return io.TextIOWrapper(f, encoding="utf-8").read()
