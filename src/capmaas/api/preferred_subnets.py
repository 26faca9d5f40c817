"""Preferred subnets: which of a control-plane machine's addresses goes into the API server's DNS record.

A machine with several NICs reports several addresses, and the first one is often the PXE network nobody
should reach the API server on. ``MaasCluster.spec.preferredSubnets`` says which to use, in order: a CIDR, or
a MAAS interface by name (``interface:eno2``) or by one of its MAAS tags (``tag:api``: the same network may be
``eno2`` on one server and ``enp65s0`` on another). For manifests from the Go provider, its ConfigMap
``maas-preferred-subnet`` (key ``preferredSubnets``, comma-separated) in the cluster's namespace says the
same. The spec wins over the ConfigMap.

Pure functions, no I/O: the cluster reconciler reads the ConfigMap and the machines' ``status.addresses`` and
calls :func:`resolve` then :func:`pick_address`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from capmaas.api.v1beta1.common import MachineAddress

__all__ = [
    "CONFIGMAP_KEY",
    "CONFIGMAP_NAME",
    "InterfaceAddresses",
    "InterfaceSelector",
    "InvalidPreferredSubnets",
    "Network",
    "PreferredSubnets",
    "Selector",
    "parse_entries",
    "pick_address",
    "resolve",
]

#: The Go provider's ConfigMap (in the cluster's namespace) and its key.
CONFIGMAP_NAME: Final = "maas-preferred-subnet"
CONFIGMAP_KEY: Final = "preferredSubnets"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Source = Literal["spec", "configmap", "none"]

#: Address types tried, in this order, within each preferred subnet (as the DNS record did before).
_ADDRESS_TYPES: Final = ("ExternalIP", "InternalIP")


class InvalidPreferredSubnets(ValueError):
    """The ConfigMap's value holds entries that are neither CIDRs nor interface selectors (the message
    names them)."""


#: ``interface:<name>`` / ``tag:<MAAS interface tag>``: what a selector of an interface looks like.
_INTERFACE = re.compile(r"^(interface|tag):([A-Za-z0-9][A-Za-z0-9._:-]{0,62})$")


@dataclass(frozen=True)
class InterfaceSelector:
    """A machine's interface by its MAAS name, or by a MAAS tag on it."""

    kind: Literal["interface", "tag"]
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"

    def matches(self, iface: InterfaceAddresses) -> bool:
        return iface.name == self.value if self.kind == "interface" else self.value in iface.tags


Selector = Network | InterfaceSelector


@dataclass(frozen=True)
class InterfaceAddresses:
    """One interface of a machine as MAAS shows it: its name, its tags and the addresses linked to it."""

    name: str
    tags: tuple[str, ...]
    ips: tuple[str, ...]


@dataclass(frozen=True)
class PreferredSubnets:
    """The selectors in force, in order, and where they came from (for the condition message)."""

    selectors: tuple[Selector, ...]
    source: Source

    @property
    def networks(self) -> tuple[Network, ...]:
        return tuple(s for s in self.selectors if not isinstance(s, InterfaceSelector))

    @property
    def needs_interfaces(self) -> bool:
        """Whether picking an address needs the machine's interfaces (not only its addresses)."""
        return any(isinstance(s, InterfaceSelector) for s in self.selectors)

    def describe(self) -> str:
        where = {
            "spec": "spec.preferredSubnets",
            "configmap": f"ConfigMap {CONFIGMAP_NAME}",
            "none": "no preferred subnets",
        }[self.source]
        shown = ", ".join(str(n) for n in self.selectors)
        return f"{where} ({shown})" if shown else where


def parse_entries(entries: Iterable[str]) -> tuple[Selector, ...]:
    """Parse CIDRs (host bits allowed, as Go's ``net.ParseCIDR``) and ``interface:``/``tag:`` selectors;
    blank entries are skipped.

    Raises ``InvalidPreferredSubnets`` naming every entry that is neither.
    """
    selectors: list[Selector] = []
    bad: list[str] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        if m := _INTERFACE.match(entry):
            selectors.append(InterfaceSelector("interface" if m[1] == "interface" else "tag", m[2]))
            continue
        if "/" not in entry:
            bad.append(entry)
            continue
        try:
            selectors.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            bad.append(entry)
    if bad:
        raise InvalidPreferredSubnets(
            "not a CIDR such as 10.0.0.0/24, nor interface:<name> or tag:<interface tag>: "
            + ", ".join(repr(b) for b in bad)
        )
    return tuple(selectors)


def resolve(spec_subnets: Sequence[str] | None, configmap_data: Mapping[str, str] | None) -> PreferredSubnets:
    """The preferred subnets: ``spec.preferredSubnets`` if set, else the ConfigMap's, else none.

    ``configmap_data`` is the ConfigMap ``maas-preferred-subnet``'s ``data`` (None when there is none). A
    ConfigMap with junk raises ``InvalidPreferredSubnets`` only when the spec does not override it.
    """
    if spec_subnets:
        return PreferredSubnets(parse_entries(spec_subnets), "spec")
    text = (configmap_data or {}).get(CONFIGMAP_KEY, "")
    selectors = parse_entries(text.split(","))
    if selectors:
        return PreferredSubnets(selectors, "configmap")
    return PreferredSubnets((), "none")


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None


def pick_address(
    addresses: Sequence[MachineAddress],
    preferred: PreferredSubnets,
    interfaces: Sequence[InterfaceAddresses] | None = None,
) -> str | None:
    """The address of a machine to publish in the API server's DNS record, or None.

    Without preferred subnets: the first ExternalIP, else the first InternalIP. With them, the first selector
    (in the order given) that finds one wins: a CIDR holding one of the machine's ExternalIP, then
    InternalIP addresses; an interface (by name or tag) with an address of the machine linked to it. A
    machine nothing finds gives None (it is left out of the record); so does an interface selector when the
    machine's interfaces are not known (``interfaces`` None: the caller tells that case apart).
    """
    ordered = [a for t in _ADDRESS_TYPES for a in addresses if a.type == t]
    if not preferred.selectors:
        return ordered[0].address if ordered else None
    ips = [(a.address, _ip(a.address)) for a in ordered]
    for selector in preferred.selectors:
        if isinstance(selector, InterfaceSelector):
            known = {a.address for a in ordered}
            for iface in interfaces or ():
                if selector.matches(iface):
                    found = next((ip for ip in iface.ips if ip in known), None)
                    if found is not None:
                        return found
            continue
        for text, ip in ips:
            if ip is not None and ip.version == selector.version and ip in selector:
                return text
    return None
