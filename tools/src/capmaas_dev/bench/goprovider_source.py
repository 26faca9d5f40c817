"""Reading the Go provider's CRDs from its source when the benchmark runs: a directory holding its tree, or
``GITDIR@REV`` (a git repository, bare or not, and a revision), the two forms ``hack/go-provider.sh`` takes.
Nothing is copied into this repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from capmaas_dev.bench.goprovider_manifests import CRD_BASES, CRD_DIR, GoSourceError

KUSTOMIZATION = f"{CRD_DIR}/kustomization.yaml"


def read_crd_sources(source: str) -> tuple[dict[str, str], str]:
    """``(config/crd/bases file name -> text, config/crd/kustomization.yaml text)`` from ``source``."""
    tree = Path(source)
    if tree.is_dir() and (tree / "go.mod").is_file():
        return _from_directory(tree)
    if "@" in source:
        gitdir, _, rev = source.rpartition("@")
        return _from_git(Path(gitdir), rev)
    raise GoSourceError(
        f"{source} is neither the provider's source directory (with go.mod) nor GITDIR@REV; pass --source"
    )


def _from_directory(tree: Path) -> tuple[dict[str, str], str]:
    bases = tree / CRD_BASES
    if not bases.is_dir():
        raise GoSourceError(f"{tree} has no {CRD_BASES}: not the provider's tree?")
    docs = {p.name: p.read_text() for p in sorted(bases.glob("*.yaml"))}
    kustomization = tree / KUSTOMIZATION
    return docs, kustomization.read_text() if kustomization.is_file() else ""


def _git(gitdir: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(gitdir), *args], capture_output=True, text=True, check=False, timeout=60
    )
    if proc.returncode != 0:
        raise GoSourceError(f"git -C {gitdir} {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _from_git(gitdir: Path, rev: str) -> tuple[dict[str, str], str]:
    names = [
        n for n in _git(gitdir, "ls-tree", "--name-only", f"{rev}:{CRD_BASES}").split() if n.endswith(".yaml")
    ]
    if not names:
        raise GoSourceError(f"{gitdir}@{rev} has no {CRD_BASES}/*.yaml")
    docs = {n: _git(gitdir, "show", f"{rev}:{CRD_BASES}/{n}") for n in names}
    listing = _git(gitdir, "ls-tree", "--name-only", f"{rev}:{CRD_DIR}").split()
    kustomization = _git(gitdir, "show", f"{rev}:{KUSTOMIZATION}") if "kustomization.yaml" in listing else ""
    return docs, kustomization
