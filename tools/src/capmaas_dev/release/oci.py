"""The OCI image archive of a release: its manifest digest, and a byte-stable copy of it.

The digest that names the image is the manifest's (what ``index.json`` points at, what a registry and
containerd's CRI resolve ``repo@sha256:...`` to), not the archive file's hash. ``buildah push oci-archive:``
writes the same blobs for the same image but stamps the tar entries with the time of the push, so the
archive is repacked here with every entry at ``SOURCE_DATE_EPOCH``, owned by root, in a fixed order: then the
archive's own hash (``SHA256SUMS``) is reproducible too.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path


class ArchiveError(Exception):
    """The archive is not a single-image OCI layout, or a blob does not hash to its name."""


@dataclass(frozen=True)
class Manifest:
    digest: str  # sha256:...
    ref_name: str  # org.opencontainers.image.ref.name of the index entry


def manifest(archive: Path) -> Manifest:
    """The one manifest of an OCI archive, checked: its blob hashes to the digest the index names."""
    with tarfile.open(archive) as tar:
        index = json.loads(_read(tar, "index.json"))
        entries = index.get("manifests") or []
        if len(entries) != 1:
            raise ArchiveError(f"{archive}: {len(entries)} manifests in index.json, want 1")
        digest = entries[0]["digest"]
        algorithm, _, value = digest.partition(":")
        if algorithm != "sha256":
            raise ArchiveError(f"{archive}: manifest digest {digest} is not sha256")
        blob = _read(tar, f"blobs/sha256/{value}")
        if hashlib.sha256(blob).hexdigest() != value:
            raise ArchiveError(f"{archive}: the manifest blob does not hash to {digest}")
        name = entries[0].get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        return Manifest(digest=digest, ref_name=name)


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise ArchiveError(f"{name} missing from the archive")
    return member.read()


def repack(src: Path, dst: Path, *, mtime: int) -> None:
    """Copy ``src`` to ``dst`` with normalised tar headers (entries sorted, mtime fixed, root-owned)."""
    with tarfile.open(src) as tin:
        members = sorted(tin.getmembers(), key=lambda m: m.name)
        with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tout:
            for m in members:
                info = tarfile.TarInfo(m.name)
                info.type, info.size, info.mode = m.type, m.size, m.mode
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
                data = tin.extractfile(m) if m.isfile() else None
                tout.addfile(info, data)
