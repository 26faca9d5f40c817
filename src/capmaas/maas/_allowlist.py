"""Which MAAS endpoints a client may be pointed at: an operator-wide allow-list of hosts and networks.

Why: the endpoint of a MaasCluster comes from its tenant (an identity Secret), and the operator then sends
requests there from inside the management cluster, with its own network position: a request forgery vector
(cloud metadata services, the apiserver, other tenants' services). The allow-list bounds where those requests
may go. Empty means any host (the default, for single-tenant installations).

Entries are matched against the URL's host as written, without resolving it: a name could resolve to an
allowed address when checked and to another when connected, so

- an IP address or CIDR (``10.0.0.5``, ``10.20.0.0/16``, ``fd00::/64``) matches endpoints whose host is an IP
  literal inside it;
- a host name matches itself (case-insensitively), and ``*.example.net`` matches every name below
  ``example.net`` (not ``example.net`` itself).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from capmaas.maas import errors

__all__ = ["EndpointAllowList"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EndpointAllowList:
    """Parsed allow-list entries; :meth:`check` refuses a URL whose host none of them matches."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.entries = tuple(e.strip() for e in entries if e.strip())
        self._networks: list[_Network] = []
        self._names: set[str] = set()
        self._suffixes: list[str] = []
        for entry in self.entries:
            if entry.startswith("*."):
                suffix = entry[1:].lower().rstrip(".")
                if len(suffix) < 2 or "*" in suffix:
                    raise ValueError(f"endpoint allow-list entry {entry!r}: a wildcard is '*.domain'")
                self._suffixes.append(suffix)
                continue
            try:
                self._networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if "/" in entry or ":" in entry or "*" in entry or " " in entry:
                    raise ValueError(
                        f"endpoint allow-list entry {entry!r} is neither an IP, a CIDR nor a host name"
                    ) from None
                self._names.add(entry.lower().rstrip("."))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def allows(self, host: str) -> bool:
        """Whether ``host`` (a URL's host: a name or an IP literal) may be connected to."""
        if not self.entries:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            name = host.lower().rstrip(".")
            return name in self._names or any(name.endswith(s) for s in self._suffixes)
        return any(address in network for network in self._networks)

    def check(self, url: str) -> None:
        """Raise :class:`~capmaas.maas.errors.EndpointNotAllowedError` unless ``url``'s host is allowed."""
        host = urlsplit(url.strip()).hostname or ""
        if not self.allows(host):
            raise errors.EndpointNotAllowedError(
                f"MAAS endpoint host {host!r} is not in the operator's allow-list of MAAS endpoints "
                "(setting maas.allowed_endpoints); ask the operator's administrator to add it"
            )
