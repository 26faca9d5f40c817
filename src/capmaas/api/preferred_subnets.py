"""Preferred subnets: which of a control-plane machine's addresses goes into the API server's DNS record.

A machine with several NICs reports several addresses, and the first one is often the PXE network nobody
should reach the API server on. ``MaasCluster.spec.preferredSubnets`` (CIDRs) says which networks to use; for
manifests from the Go provider, its ConfigMap ``maas-preferred-subnet`` (key ``preferredSubnets``,
comma-separated CIDRs) in the cluster's namespace says the same. The spec wins over the ConfigMap.

Pure functions, no I/O: the cluster reconciler reads the ConfigMap and the machines' ``status.addresses`` and
calls :func:`resolve` then :func:`pick_address`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from capmaas.api.v1beta1.common import MachineAddress

__all__ = [
    "CONFIGMAP_KEY",
    "CONFIGMAP_NAME",
    "InvalidPreferredSubnets",
    "Network",
    "PreferredSubnets",
    "parse_cidrs",
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
    """The ConfigMap's value holds entries that are not CIDRs (the message names them)."""


@dataclass(frozen=True)
class PreferredSubnets:
    """The subnets in force and where they came from (for the condition message)."""

    networks: tuple[Network, ...]
    source: Source

    def describe(self) -> str:
        where = {
            "spec": "spec.preferredSubnets",
            "configmap": f"ConfigMap {CONFIGMAP_NAME}",
            "none": "no preferred subnets",
        }[self.source]
        nets = ", ".join(str(n) for n in self.networks)
        return f"{where} ({nets})" if nets else where


def parse_cidrs(entries: Iterable[str]) -> tuple[Network, ...]:
    """Parse CIDRs (host bits allowed, as Go's ``net.ParseCIDR``); blank entries are skipped.

    Raises ``InvalidPreferredSubnets`` naming every entry that is not a CIDR.
    """
    networks: list[Network] = []
    bad: list[str] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        if "/" not in entry:
            bad.append(entry)
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            bad.append(entry)
    if bad:
        raise InvalidPreferredSubnets(f"not a CIDR such as 10.0.0.0/24: {', '.join(repr(b) for b in bad)}")
    return tuple(networks)


def resolve(spec_subnets: Sequence[str] | None, configmap_data: Mapping[str, str] | None) -> PreferredSubnets:
    """The preferred subnets: ``spec.preferredSubnets`` if set, else the ConfigMap's, else none.

    ``configmap_data`` is the ConfigMap ``maas-preferred-subnet``'s ``data`` (None when there is none). A
    ConfigMap with junk raises ``InvalidPreferredSubnets`` only when the spec does not override it.
    """
    if spec_subnets:
        return PreferredSubnets(parse_cidrs(spec_subnets), "spec")
    text = (configmap_data or {}).get(CONFIGMAP_KEY, "")
    networks = parse_cidrs(text.split(","))
    if networks:
        return PreferredSubnets(networks, "configmap")
    return PreferredSubnets((), "none")


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None


def pick_address(addresses: Sequence[MachineAddress], preferred: PreferredSubnets) -> str | None:
    """The address of a machine to publish in the API server's DNS record, or None.

    Without preferred subnets: the first ExternalIP, else the first InternalIP. With them: the first
    preferred subnet (in the order given) holding one of the machine's ExternalIP, then InternalIP addresses
    wins; a machine with no address inside any preferred subnet gives None (it is left out of the record).
    """
    ordered = [a for t in _ADDRESS_TYPES for a in addresses if a.type == t]
    if not preferred.networks:
        return ordered[0].address if ordered else None
    ips = [(a.address, _ip(a.address)) for a in ordered]
    for network in preferred.networks:
        for text, ip in ips:
            if ip is not None and ip.version == network.version and ip in network:
                return text
    return None
