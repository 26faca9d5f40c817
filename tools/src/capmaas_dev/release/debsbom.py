"""A CycloneDX 1.6 SBOM of the Debian packages installed in an image, from its ``/var/lib/dpkg/status``.

Why our own: the maintained generators that read dpkg databases (syft, trivy) are Go programs found neither
on PyPI nor in Debian, and this project builds no Go. dpkg's status file is the authority on what is
installed, and its format (RFC 822 stanzas) is simple: one component per package whose ``Status`` is
``install ok installed``, named and versioned as dpkg knows it, with a ``pkg:deb`` package URL (the purl
spec's type for Debian), its architecture and distribution, the source package when it differs, and the
``Depends``/``Pre-Depends`` between installed packages (an alternative or a virtual package resolves to the
installed package that satisfies it). Licences are left out: Debian's copyright files are not
machine-readable for every package, and a guessed licence is worse than none.

The output is stable for the same input: components sorted by name, the timestamp is ``SOURCE_DATE_EPOCH``
and the serial number a UUID derived from the content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

INSTALLED = "install ok installed"
SPEC_VERSION = "1.6"
TOOL = "capmaas_dev.release.debsbom"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    source: str = ""
    maintainer: str = ""
    description: str = ""
    depends: tuple[str, ...] = ()  # each an alternative list "a (>= 1) | b"
    provides: tuple[str, ...] = ()

    def purl(self, distro: str) -> str:
        """``pkg:deb/debian/<name>@<version>?arch=<arch>&distro=<distro>``, percent-encoded."""
        return (
            f"pkg:deb/debian/{quote(self.name, safe='')}@{quote(self.version, safe='')}"
            f"?arch={quote(self.architecture, safe='')}&distro={quote(distro, safe='')}"
        )


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    """RFC 822 stanzas: ``Field: value`` lines, continuations start with a space, blank lines separate."""
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif line[0] in " \t" and last:
            fields[last] += "\n" + line[1:]
        else:
            key, _, value = line.partition(":")
            last = key.strip()
            fields[last] = value.strip()
    if fields:
        yield fields


def _names(relations: str) -> tuple[str, ...]:
    return tuple(r.strip() for r in relations.split(",") if r.strip())


def parse_status(text: str) -> list[Package]:
    """The installed packages of a dpkg status file, sorted by name."""
    packages = []
    for f in _stanzas(text):
        if f.get("Status") != INSTALLED:
            continue
        source = f.get("Source", "").split(" ")[0]
        packages.append(
            Package(
                name=f["Package"],
                version=f["Version"],
                architecture=f.get("Architecture", "all"),
                source=source if source != f["Package"] else "",
                maintainer=f.get("Maintainer", ""),
                description=f.get("Description", "").split("\n")[0],
                depends=_names(f.get("Pre-Depends", "")) + _names(f.get("Depends", "")),
                provides=tuple(p.split(" ")[0] for p in _names(f.get("Provides", ""))),
            )
        )
    return sorted(packages, key=lambda p: (p.name, p.architecture))


def _resolve(alternatives: str, by_name: dict[str, Package], providers: dict[str, Package]) -> Package | None:
    for alt in alternatives.split("|"):
        name = alt.strip().split(" ")[0].split(":")[0]  # drop "(>= 1)" and ":any"
        found = by_name.get(name) or providers.get(name)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class Subject:
    """The image the packages are in (the SBOM's ``metadata.component``)."""

    name: str  # repository, e.g. localhost/capmaas
    version: str
    digest: str = ""  # the image manifest's sha256:..., when known
    properties: dict[str, str] = field(default_factory=dict)


def sbom(packages: list[Package], *, subject: Subject, distro: str, timestamp: int) -> dict[str, Any]:
    """The CycloneDX document (a dict; :func:`dumps` gives its canonical JSON)."""
    by_name = {p.name: p for p in packages}
    providers: dict[str, Package] = {}
    for p in packages:
        for virtual in p.provides:
            providers.setdefault(virtual, p)
    components = []
    dependencies = []
    for p in packages:
        ref = p.purl(distro)
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": ref,
            "name": p.name,
            "version": p.version,
            "purl": ref,
        }
        if p.maintainer:
            component["publisher"] = p.maintainer
        if p.description:
            component["description"] = p.description
        if p.source:
            component["properties"] = [{"name": "dpkg:source", "value": p.source}]
        components.append(component)
        deps = {d.purl(distro) for alt in p.depends if (d := _resolve(alt, by_name, providers)) and d != p}
        dependencies.append({"ref": ref, "dependsOn": sorted(deps)})
    image: dict[str, Any] = {
        "type": "container",
        "bom-ref": f"image:{subject.name}:{subject.version}",
        "name": subject.name,
        "version": subject.version,
    }
    if subject.digest:
        algorithm, _, value = subject.digest.partition(":")
        image["hashes"] = [{"alg": algorithm.upper().replace("SHA", "SHA-"), "content": value}]
    if subject.properties:
        image["properties"] = [{"name": k, "value": v} for k, v in sorted(subject.properties.items())]
    doc: dict[str, Any] = {
        "$schema": f"http://cyclonedx.org/schema/bom-{SPEC_VERSION}.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": TOOL}]},
            "component": image,
            "properties": [{"name": "dpkg:status", "value": "/var/lib/dpkg/status"}],
        },
        "components": components,
        "dependencies": [
            {"ref": image["bom-ref"], "dependsOn": [c["bom-ref"] for c in components]},
            *dependencies,
        ],
    }
    # A content-derived serial number: the same packages give the same document.
    doc["serialNumber"] = f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, dumps(doc))}"
    return doc


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def distro_of(os_release: str) -> str:
    """``debian-12`` from an ``/etc/os-release``'s ``ID`` and ``VERSION_ID``."""
    values = {}
    for line in os_release.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return f"{values.get('ID', 'debian')}-{values.get('VERSION_ID', 'unknown')}"
