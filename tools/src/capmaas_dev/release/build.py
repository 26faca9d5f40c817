"""``make release VERSION=X.Y.Z``: build every artifact of release X.Y.Z into ``dist/``.

The steps, each from the sources of this checkout at the time of its last commit (``SOURCE_DATE_EPOCH``, so
that archives and the image carry no build time):

1. the version: X.Y.Z must be the checkout's ``capmaas.__version__`` or the release it leads to: main carries
   the next release's development version ``X.Y.Z.devN`` between releases (PEP 440), and the release is
   built from a copy of the checkout's files (tracked by git, as they are on disk) in which ``__version__``
   is X.Y.Z (``build/release/source``): the wheel, sdist, image, chart and assets all say X.Y.Z, and the
   checkout is not touched. Anything else (another release, a version below) stops here;
2. wheel and sdist (``python -m build``; the sdist repacked byte-stable);
3. the image, as ``make image`` builds it (``hack/image.sh``: the Dockerfile on the mmdebstrap base, no
   network), from that wheel and its dependencies' wheels; built twice from the same wheels without a layer
   cache, and the two manifest digests compared (a difference stops the release: it is not reproducible);
   the OCI archive repacked byte-stable (:mod:`capmaas_dev.release.oci`) and its manifest digest written
   beside;
4. the chart: ``deploy/charts/capmaas`` with the image pinned (repository, tag X.Y.Z, digest) in its values,
   ``helm package`` with version and appVersion X.Y.Z, repacked byte-stable like the archive;
5. the clusterctl assets (:func:`capmaas_dev.clusterctl_repo.assets`), the components running the image by
   digest;
6. SBOMs: the image's Python environment with cyclonedx-bom (``cyclonedx-py environment``) over a venv
   installed from the image's own wheels, checked against the distributions the image reports; the image's
   Debian packages from its dpkg status (:mod:`capmaas_dev.release.debsbom`);
7. ``SHA256SUMS``, then :func:`capmaas_dev.release.verify.verify`, then ``dist.partial/`` becomes ``dist/``.

Scratch work goes to ``build/release/``. Needs buildah, mmdebstrap (the base, once), helm (``make
controlplane``), and the ``release`` extra of capmaas-dev. ``python -m build`` and ``pip wheel`` use the
host's package index configuration, as ``make image`` does; the image build itself reaches nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from capmaas_dev import clusterctl_repo
from capmaas_dev.devcluster import find_binary
from capmaas_dev.release import debsbom, oci
from capmaas_dev.release.verify import Names, Report, verify, write_sums

ROOT = clusterctl_repo.REPO_ROOT
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
PACKAGE_INIT = Path("src") / "capmaas" / "__init__.py"
_VERSION_LINE = re.compile(r'^__version__ = "([^"]*)"$', re.M)
# Never part of a release's sources when the checkout is not a git work tree (e.g. a `git archive`).
_NOT_SOURCES = {".git", ".venv", "build", "dist", "dist.partial", "__pycache__", ".mypy_cache", ".ruff_cache",
                ".pytest_cache"}  # fmt: skip
# Distributions a venv can have that the image's has not (the Dockerfile makes it --without-pip).
_VENV_TOOLS = {"pip", "setuptools"}


class ReleaseError(Exception):
    """A release step failed or a check did not hold; the message says which and why."""


@dataclass(frozen=True)
class Options:
    version: str
    out: Path
    root: Path = ROOT
    check_reproducible: bool = True
    #: Variables set for every command of the build over the caller's environment: the tests give it a
    #: buildah storage and a capmaas cache of its own (``CONTAINERS_STORAGE_CONF``, ``CAPMAAS_CACHE``).
    env: Mapping[str, str] = field(default_factory=dict)


def _run(
    args: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 1800
) -> str:
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    if out.returncode != 0:
        raise ReleaseError(f"{' '.join(args[:4])} ... failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def _say(message: str) -> None:
    print(f"release: {message}", flush=True)


def source_date_epoch(root: Path) -> int:
    """``SOURCE_DATE_EPOCH`` when set, else the last commit's time."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(_run(["git", "-C", str(root), "log", "-1", "--format=%ct"]).strip())


def package_version(root: Path) -> str:
    """``__version__`` as ``src/capmaas/__init__.py`` of ``root`` says it (the tree built, not the code
    running)."""
    found = _VERSION_LINE.search((root / PACKAGE_INIT).read_text())
    if found is None:
        raise ReleaseError(f'no __version__ = "..." line in {root / PACKAGE_INIT}')
    return found[1]


def check_version(release: str, package: str) -> None:
    """``release`` (X.Y.Z) may be built from a tree at ``package``: X.Y.Z itself or its ``X.Y.Z.devN``."""
    if not VERSION_RE.match(release):
        raise ReleaseError(f"VERSION={release!r} is not X.Y.Z")
    found = clusterctl_repo.PACKAGE_VERSION_RE.match(package)
    if found is None or found["release"] != release:
        raise ReleaseError(
            f"VERSION={release} but the package is {package}: main carries the next release's development "
            f"version (X.Y.Z.devN); set __version__ in src/capmaas/__init__.py (the one place) to "
            f"{release}.dev0, add its CHANGELOG.md section, then release"
        )


def source_files(root: Path) -> list[Path]:
    """The files a release is built from, relative to ``root``: git's tracked files (their contents on disk),
    or, outside a git work tree, every file but build outputs and caches."""
    inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                            text=True, check=False)  # fmt: skip
    if inside.returncode == 0 and Path(inside.stdout.strip()).resolve() == root.resolve():
        listed = _run(["git", "-C", str(root), "ls-files", "-z", "--cached"]).split("\0")
        return [Path(p) for p in listed if p and (root / p).is_file()]  # a deleted, unstaged file: gone
    return [
        p.relative_to(root)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not _NOT_SOURCES & set(p.relative_to(root).parts)
    ]


def stage(root: Path, dest: Path, version: str) -> None:
    """``dest``: a copy of the release's sources with ``__version__`` set to ``version``."""
    for rel in source_files(root):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest / rel, follow_symlinks=False)
    init = dest / PACKAGE_INIT
    text, n = _VERSION_LINE.subn(f'__version__ = "{version}"', init.read_text())
    if n != 1:
        raise ReleaseError(f"{init}: expected one __version__ line, found {n}")
    init.write_text(text)


def pin_values(values: str, repository: str, tag: str, digest: str) -> str:
    """The chart's ``values.yaml`` text with ``image.repository/tag/digest`` set (comments kept)."""
    lines = values.splitlines(keepends=True)
    start = lines.index("image:\n")
    want = {"repository": repository, "tag": tag, "digest": digest}
    done = set()
    for i in range(start + 1, len(lines)):
        if lines[i].strip() and not lines[i].startswith(" "):
            break  # the end of the image block
        key = lines[i].strip().split(":", 1)[0]
        if key in want and lines[i].startswith(f"  {key}:"):
            lines[i] = f"  {key}: {json.dumps(want[key])}\n"
            done.add(key)
    if done != set(want):
        raise ReleaseError(f"values.yaml: image.{sorted(set(want) - done)} not found to pin")
    return "".join(lines)


def repack_tgz(src: Path, dst: Path, *, mtime: int) -> None:
    """A gzip'd tar with fixed headers and gzip mtime (``helm package`` stamps the time of packaging)."""
    buf = io.BytesIO()
    with tarfile.open(src) as tin, tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tout:
        for m in sorted(tin.getmembers(), key=lambda m: m.name):
            info = tarfile.TarInfo(m.name)
            info.type, info.size, info.mode = m.type, m.size, m.mode
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            tout.addfile(info, tin.extractfile(m) if m.isfile() else None)
    with dst.open("wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=mtime) as gz:
        gz.write(buf.getvalue())


class Release:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.names = Names(opts.version)
        self.work = opts.root / "build" / "release"
        self.source = self.work / "source"  # the staged sources every step builds from (step 1)
        self.partial = opts.out.with_name(opts.out.name + ".partial")
        self.epoch = source_date_epoch(opts.root)
        # No PYTHONPATH: the SBOM's venv must see only its own packages (a checkout's src/ on the path would
        # add its stale metadata to the environment being described).
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env.update(opts.env)
        self.env["SOURCE_DATE_EPOCH"] = str(self.epoch)
        self.bin = Path(sys.executable).parent
        self.helm = str(find_binary("helm"))
        self.image_name = f"{clusterctl_repo.IMAGE_REPOSITORY}:{opts.version}"
        self.timings: dict[str, float] = {}
        self.reproducible: tuple[str, str] | None = None
        #: What each image build printed (``hack/image.sh``'s output), by build number.
        self.image_logs: dict[int, str] = {}

    def _step(self, what: str, started: float) -> None:
        self.timings[what] = time.monotonic() - started
        _say(f"{what} in {self.timings[what]:.0f}s")

    def run(self) -> Report:
        v = self.opts.version
        package = package_version(self.opts.root)
        check_version(v, package)
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.rmtree(self.partial, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.partial.mkdir(parents=True)
        stage(self.opts.root, self.source, v)
        _say(f"{v} from {self.opts.root} (package {package}) at SOURCE_DATE_EPOCH={self.epoch}")
        self.python_packages()
        wheels = self.image_wheels()
        digest = self.image(wheels)
        self.chart(digest)
        self.clusterctl(digest)
        self.python_sbom(wheels)
        self.image_sboms(digest)
        write_sums(self.partial)
        report = verify(self.partial, v, helm=self.helm)
        shutil.rmtree(self.opts.out, ignore_errors=True)
        self.partial.rename(self.opts.out)
        return report

    # -- 2. wheel and sdist ---------------------------------------------------------------------------------
    def python_packages(self) -> None:
        t0 = time.monotonic()
        out = self.work / "python"
        _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(self.source)],
             env=self.env)  # fmt: skip
        for name in (self.names.wheel, self.names.sdist):
            if not (out / name).is_file():
                raise ReleaseError(
                    f"python -m build wrote {sorted(p.name for p in out.iterdir())}, not {name}"
                )
        shutil.copy2(
            out / self.names.wheel, self.partial / self.names.wheel
        )  # SOURCE_DATE_EPOCH: fixed zip times
        # The sdist's tar carries each file's mtime (PKG-INFO: the time of the build): repacked.
        repack_tgz(out / self.names.sdist, self.partial / self.names.sdist, mtime=self.epoch)
        self._step("wheel and sdist", t0)

    # -- 3. the image ---------------------------------------------------------------------------------------
    def image_wheels(self) -> Path:
        """The released wheel and its dependencies' wheels: what the image installs, and the SBOM's venv."""
        t0 = time.monotonic()
        wheels = self.work / "wheels"
        _run([str(self.bin / "pip"), "wheel", "--quiet", "--disable-pip-version-check", "--wheel-dir",
              str(wheels), str(self.partial / self.names.wheel)], env=self.env)  # fmt: skip
        self._step(f"{len(list(wheels.glob('*.whl')))} wheels for the image", t0)
        return wheels

    def _build_image(self, n: int, wheels: Path) -> Path:
        t0 = time.monotonic()
        out = self.work / f"image-{n}"
        context_wheels = out / "context" / "build" / "image" / "wheels"
        shutil.copytree(wheels, context_wheels)
        env = {**self.env, "CAPMAAS_IMAGE_OUT": str(out), "PIP": str(self.bin / "pip")}
        image_sh = str(self.source / "hack" / "image.sh")
        self.image_logs[n] = _run(["bash", image_sh, "--tag", self.opts.version, "--reuse-wheels"], env=env)
        self._step(f"image build {n}", t0)
        return out / f"capmaas-{self.opts.version}.oci.tar"

    def image(self, wheels: Path) -> str:
        first = self._build_image(1, wheels)
        digest = oci.manifest(first).digest
        if self.opts.check_reproducible:
            second = oci.manifest(self._build_image(2, wheels)).digest
            self.reproducible = (digest, second)
            if second != digest:
                raise ReleaseError(
                    f"the image is not reproducible: two builds from the same wheels gave {digest} and "
                    f"{second} (compare the layers: build/release/image-1 and image-2)"
                )
            _say(f"image digest reproducible: both builds {digest}")
        oci.repack(first, self.partial / self.names.image, mtime=self.epoch)
        (self.partial / self.names.digest).write_text(digest + "\n")
        return digest

    # -- 4. the chart ---------------------------------------------------------------------------------------
    def chart(self, digest: str) -> None:
        t0 = time.monotonic()
        src = self.source / "deploy" / "charts" / "capmaas"
        chart = self.work / "chart" / "capmaas"
        shutil.copytree(src, chart)
        values = chart / "values.yaml"
        values.write_text(
            pin_values(values.read_text(), clusterctl_repo.IMAGE_REPOSITORY, self.opts.version, digest)
        )
        packaged = self.work / "chart-package"
        v = self.opts.version
        _run([self.helm, "package", str(chart), "--version", v, "--app-version", v, "-d", str(packaged)])
        repack_tgz(packaged / self.names.chart, self.partial / self.names.chart, mtime=self.epoch)
        self._step("chart packaged", t0)

    # -- 5. clusterctl --------------------------------------------------------------------------------------
    def clusterctl(self, digest: str) -> None:
        image = clusterctl_repo.Image(clusterctl_repo.IMAGE_REPOSITORY, self.opts.version, digest)
        assets = clusterctl_repo.assets(self.source, image, version=f"v{self.opts.version}")
        for name, text in assets.items():
            (self.partial / name).write_text(text)

    # -- 6. SBOMs -------------------------------------------------------------------------------------------
    def python_sbom(self, wheels: Path) -> None:
        """cyclonedx-py over a venv with exactly the image's distributions (same wheels, same resolution).

        ``--no-validate``: :func:`~capmaas_dev.release.verify.verify` validates the written SBOM against the
        CycloneDX 1.6 schema at the end of the build (an invalid one stops the release there), with the
        same library; cyclonedx-py's own validation of it first cost about 12 s of CPU a build, nearly all
        of the step (docs/benchmarks/test-durations.md)."""
        t0 = time.monotonic()
        venv = self.work / "sbom-venv"
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        _run([str(self.bin / "pip"), "--python", str(venv / "bin" / "python"), "install", "--quiet",
              "--disable-pip-version-check", "--no-compile", "--no-index", "--find-links", str(wheels),
              f"capmaas=={self.opts.version}"])  # fmt: skip
        _run([str(self.bin / "cyclonedx-py"), "environment", str(venv), "--sv", "1.6", "--no-validate",
              "--output-reproducible", "-o", str(self.partial / self.names.python_sbom)],
             env=self.env)  # fmt: skip
        self._step("Python SBOM", t0)

    def image_sboms(self, digest: str) -> None:
        """The Debian SBOM from the image's dpkg status, and the Python SBOM checked against the image."""
        t0 = time.monotonic()
        ctr = _run(["buildah", "from", "--pull-never", self.image_name], env=self.env).strip()
        try:

            def cat(*args: str) -> str:
                return _run(["buildah", "run", "--network=none", ctr, "--", *args], env=self.env)

            status = cat("cat", "/var/lib/dpkg/status")
            os_release = cat("cat", "/etc/os-release")
            listing = cat("python", "-c", _LIST_DISTRIBUTIONS)
        finally:
            subprocess.run(["buildah", "rm", ctr], capture_output=True, env=self.env, check=False)
        in_image = {(n.lower(), ver) for n, ver in json.loads(listing)}
        bom = json.loads((self.partial / self.names.python_sbom).read_text())
        in_sbom = {(c["name"].lower(), c["version"]) for c in bom["components"]}
        if in_sbom - {(n, ver) for n, ver in in_sbom if n in _VENV_TOOLS} != in_image:
            raise ReleaseError(
                f"the Python SBOM is not the image's environment: only in the SBOM "
                f"{sorted(in_sbom - in_image)}, only in the image {sorted(in_image - in_sbom)}"
            )
        packages = debsbom.parse_status(status)
        subject = debsbom.Subject(clusterctl_repo.IMAGE_REPOSITORY, self.opts.version, digest)
        doc = debsbom.sbom(
            packages, subject=subject, distro=debsbom.distro_of(os_release), timestamp=self.epoch
        )
        (self.partial / self.names.debian_sbom).write_text(debsbom.dumps(doc))
        self._step(f"Debian SBOM ({len(packages)} packages), Python SBOM checked", t0)


# Run by the image's Python: its distributions, as (name, version) pairs.
_LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions()})))"
)
