"""The pieces of ``make release`` that need no image build: the Debian SBOM generator, the OCI archive
reader, the values pinning, the byte-stable chart repack, the clusterctl release series, the versions (a
development version released as X.Y.Z from a staged copy) and the conditions page's "what to do" source.

The whole build, its artifacts and an install from them: ``tests/release/test_release_dist.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from capmaas import __version__
from capmaas_dev import clusterctl_repo
from capmaas_dev.release import debsbom, docref, oci
from capmaas_dev.release.build import (
    ReleaseError,
    check_version,
    package_version,
    pin_values,
    repack_tgz,
    source_files,
    stage,
)
from capmaas_dev.release.verify import _validate_cyclonedx

REPO = Path(__file__).resolve().parents[2]

STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u9
Depends: libgcc-s1
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: removed-thing
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: libgcc-s1
Status: install ok installed
Architecture: amd64
Source: gcc-12
Version: 12.2.0-14
Provides: libgcc1 (= 1:12.2.0-14)
Depends: gcc-12-base (= 12.2.0-14), libc6 (>= 2.35)
Description: GCC support library

Package: perl-base
Status: install ok installed
Architecture: amd64
Source: perl
Version: 1:5.36.0-7+deb12u1
Pre-Depends: libc6 (>= 2.35), libcrypt1 | libxcrypt1
Depends: dpkg (>= 1.17.17), libgcc1
Description: minimal Perl system
"""


def _doc() -> dict[str, object]:
    packages = debsbom.parse_status(STATUS)
    subject = debsbom.Subject("localhost/capmaas", "0.1.0", "sha256:" + "ab" * 32)
    return debsbom.sbom(packages, subject=subject, distro="debian-12", timestamp=1795744081)


def test_only_installed_packages_are_components_with_deb_purls() -> None:
    packages = debsbom.parse_status(STATUS)
    assert [p.name for p in packages] == ["libc6", "libgcc-s1", "perl-base"]  # not the removed one
    libc = packages[0]
    assert libc.source == "glibc"
    assert libc.description == "GNU C Library: Shared libraries"  # the synopsis, not the continuation
    perl = packages[2]
    # The epoch's ':' and the '+' are percent-encoded, as the purl spec asks of a version.
    assert (
        perl.purl("debian-12")
        == "pkg:deb/debian/perl-base@1%3A5.36.0-7%2Bdeb12u1?arch=amd64&distro=debian-12"
    )


def test_dependencies_resolve_to_installed_packages_through_virtual_names() -> None:
    doc = _doc()
    deps = {d["ref"].split("@")[0].rsplit("/", 1)[1]: d["dependsOn"] for d in doc["dependencies"][1:]}  # type: ignore[index]
    names = {k: sorted(r.split("@")[0].rsplit("/", 1)[1] for r in v) for k, v in deps.items()}
    # perl-base: libc6 directly, libgcc1 through libgcc-s1's Provides; libcrypt1, dpkg not installed: dropped.
    assert names == {"libc6": ["libgcc-s1"], "libgcc-s1": ["libc6"], "perl-base": ["libc6", "libgcc-s1"]}


def test_the_debian_sbom_is_valid_cyclonedx_and_stable() -> None:
    text = debsbom.dumps(_doc())
    assert _validate_cyclonedx(text) is None
    assert text == debsbom.dumps(_doc())  # same input, same bytes (serial number from the content)
    doc = json.loads(text)
    assert doc["metadata"]["timestamp"] == "2026-11-27T01:48:01Z"
    assert doc["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    assert len(doc["components"]) == 3


def test_an_invalid_document_is_refused_by_the_validator() -> None:
    doc = _doc()
    doc["components"][0]["type"] = "not-a-type"  # type: ignore[index]
    assert _validate_cyclonedx(debsbom.dumps(doc)) is not None


def test_distro_from_os_release() -> None:
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n'
    assert debsbom.distro_of(text) == "debian-12"


def _archive(tmp_path: Path, manifest: bytes, digest: str | None = None) -> Path:
    digest = digest or "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = {
        "schemaVersion": 2,
        "manifests": [{"digest": digest, "annotations": {"org.opencontainers.image.ref.name": "x/y:1"}}],
    }
    path = tmp_path / "image.oci.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("index.json", json.dumps(index).encode()),
            (f"blobs/sha256/{digest.split(':')[1]}", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 12345
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_archive_digest_is_the_manifests_and_is_checked(tmp_path: Path) -> None:
    path = _archive(tmp_path, b'{"manifest": 1}')
    got = oci.manifest(path)
    assert got.digest == "sha256:" + hashlib.sha256(b'{"manifest": 1}').hexdigest()
    assert got.ref_name == "x/y:1"
    # A blob that does not hash to its name is refused.
    bad = _archive(tmp_path, b'{"manifest": 1}', digest="sha256:" + "0" * 64)
    with pytest.raises(oci.ArchiveError, match="does not hash"):
        oci.manifest(bad)


def test_repacks_are_byte_stable(tmp_path: Path) -> None:
    src = _archive(tmp_path, b"{}")
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    oci.repack(src, a, mtime=1)
    oci.repack(src, b, mtime=1)
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        assert {m.mtime for m in tar.getmembers()} == {1}
    c, d = tmp_path / "c.tgz", tmp_path / "d.tgz"
    repack_tgz(a, c, mtime=7)
    repack_tgz(a, d, mtime=7)
    assert c.read_bytes() == d.read_bytes()
    assert c.read_bytes()[4:8] == (7).to_bytes(4, "little")  # gzip's own mtime field


def test_pin_values_sets_the_image_and_keeps_the_rest() -> None:
    text = (REPO / "deploy" / "charts" / "capmaas" / "values.yaml").read_text()
    digest = "sha256:" + "c" * 64
    pinned = pin_values(text, "localhost/capmaas", "0.1.0", digest)
    values = yaml.safe_load(pinned)
    assert values["image"] == {
        "repository": "localhost/capmaas",
        "tag": "0.1.0",
        "digest": digest,
        "pullPolicy": "IfNotPresent",
    }
    original = yaml.safe_load(text)
    del original["image"], values["image"]
    assert values == original
    assert pinned.count("\n#") == text.count("\n#")  # comments kept
    with pytest.raises(ReleaseError, match="not found"):
        pin_values("image:\n  repository: x\n", "r", "t", digest)


def test_metadata_lists_every_release_series_up_to_the_version() -> None:
    def series(version: str) -> list[tuple[int, int]]:
        doc = yaml.safe_load(clusterctl_repo.metadata(version).split("\n", 1)[1])
        return [(s["major"], s["minor"]) for s in doc["releaseSeries"]]

    assert series("v0.1.0") == [(0, 1)]
    assert series("v0.2.0") == [(0, 1), (0, 2)]


def test_the_image_reference_pins_the_digest_when_given() -> None:
    assert clusterctl_repo.Image("r", "1.2.3").reference == "r:1.2.3"
    assert clusterctl_repo.Image("r", "1.2.3", "sha256:x").reference == "r:1.2.3@sha256:x"


def test_semver_of_the_package_versions() -> None:
    assert clusterctl_repo.semver("0.1.0") == "0.1.0"
    assert clusterctl_repo.semver("0.2.0.dev0") == "0.2.0-dev.0"
    assert clusterctl_repo.semver("1.10.3.dev12") == "1.10.3-dev.12"
    for bad in ("0.2", "0.2.0rc1", "0.2.0-dev.0", "v0.2.0"):
        with pytest.raises(ValueError, match="neither"):
            clusterctl_repo.semver(bad)
    # This checkout: its clusterctl version, its series up to its own.
    assert f"v{clusterctl_repo.semver(__version__)}" == clusterctl_repo.VERSION
    doc = yaml.safe_load(clusterctl_repo.metadata().split("\n", 1)[1])
    minor = int(__version__.split(".")[1])
    assert [s["minor"] for s in doc["releaseSeries"]] == list(range(1, minor + 1))


def test_a_release_is_built_only_from_its_own_version_or_its_development_version() -> None:
    check_version("0.2.0", "0.2.0")
    check_version("0.2.0", "0.2.0.dev0")
    check_version("0.2.0", "0.2.0.dev3")
    for release, package in (("0.1.0", "0.2.0.dev0"), ("0.3.0", "0.2.0.dev0"), ("0.2.0", "0.2.1")):
        with pytest.raises(ReleaseError, match=f"VERSION={release} but the package is {package}"):
            check_version(release, package)
    with pytest.raises(ReleaseError, match=r"is not X\.Y\.Z"):
        check_version("0.2.0.dev0", "0.2.0.dev0")
    assert package_version(REPO) == __version__


def test_the_staged_sources_are_the_tracked_files_with_the_release_version(tmp_path: Path) -> None:
    files = {str(p) for p in source_files(REPO)}
    assert {"pyproject.toml", "Dockerfile", "hack/image.sh", "src/capmaas/__init__.py"} <= files
    assert not any(f.startswith(("build/", "dist/", ".venv")) for f in files)
    # Outside a git work tree (a `git archive` of a release): every file but build outputs and caches.
    tree = tmp_path / "tree"
    (tree / "src" / "capmaas").mkdir(parents=True)
    (tree / "src" / "capmaas" / "__init__.py").write_text('"""x"""\n\n__version__ = "0.3.0.dev1"\n')
    (tree / "build" / "release").mkdir(parents=True)
    (tree / "build" / "release" / "old.whl").write_text("x")
    (tree / "pyproject.toml").write_text("")
    assert sorted(map(str, source_files(tree))) == ["pyproject.toml", "src/capmaas/__init__.py"]
    stage(tree, tmp_path / "staged", "0.3.0")
    assert package_version(tmp_path / "staged") == "0.3.0"
    assert package_version(tree) == "0.3.0.dev1"  # the checkout is not touched


def _advice_root(tmp_path: Path, drop: str = "", add: str = "") -> Path:
    data = yaml.safe_load((REPO / docref.WHAT_TO_DO).read_text())
    data.pop(drop, None)
    if add:
        data[add] = "Something."
    (tmp_path / docref.PAGES).mkdir(parents=True)
    (tmp_path / docref.WHAT_TO_DO).write_text(yaml.safe_dump(data))
    return tmp_path


def test_every_reason_has_what_to_do_and_the_check_fails_without(tmp_path: Path) -> None:
    advice = docref.load_advice(REPO)
    assert "NoMachineAvailable" in advice
    assert all(advice.values())
    with pytest.raises(docref.AdviceError, match=r"NoMachineAvailable: no entry"):
        docref.load_advice(_advice_root(tmp_path / "a", drop="NoMachineAvailable"))
    with pytest.raises(docref.AdviceError, match=r"NoSuchReason: in .* but no \*_REASON has it"):
        docref.load_advice(_advice_root(tmp_path / "b", add="NoSuchReason"))
    # docref --check (make docs) fails on it, naming the reason.
    assert docref.main(["--check", "--root", str(_advice_root(tmp_path / "c", drop="RetriesExhausted"))]) == 1
