"""Which VM hosts and DNS names a namespace may use: pure rules, no I/O.

Why: a shared management cluster's operator holds one MAAS key (an admin's, for LXD and DNS) for many tenant
namespaces. MAAS itself cannot tell them apart, so what belongs to whom is written into MAAS by the operator:

- **VM hosts** carry a MAAS tag (``vm-hosts/{id}/?op=add_tag``). A host registered by a MaasMachine
  (``registerVMHost``, or its MaasCluster's ``lxdConfig.enabled``) is tagged ``capmaas-ns-<namespace>``; an
  admin marks a host for every namespace with ``capmaas-shared``. LXD placement and ``lxdConfig.vmHost`` pins
  of a namespace consider only hosts with its tag or the shared one. Tag names stay inside MAAS's tag
  charset (``^[a-zA-Z0-9_-]+$``, docs/shared reference §5): a Kubernetes namespace name (DNS-1123 label:
  ``[a-z0-9-]``, at most 63 characters) is one already, so the mapping is one-to-one and cannot collide with
  the shared tag (``capmaas-ns-`` + a non-empty name is never ``capmaas-shared``).
- **VM host registration** is allowed only in the namespaces an admin lists (``lxd.vm_host_namespaces``).
- **DNS domains**: when the admin gives a list per namespace (``dns.namespace_domains``), a MaasCluster may
  have capmaas create its record only in a domain listed for its namespace (or for ``*``).
- **Adoption by name** of an existing DNS record (MaasClusters from before the ``…/dns-record`` annotation)
  happens only with ``dns.adopt_records_by_name`` (a one-time migration setting), never by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: The tag an admin puts on a VM host that every namespace may place VMs on (hosts it registered by hand).
SHARED_VM_HOST_TAG = "capmaas-shared"
#: Prefix of the tag that gives a VM host to one namespace: ``capmaas-ns-<namespace>``.
NAMESPACE_TAG_PREFIX = "capmaas-ns-"
#: The wildcard of the admin's lists: every namespace.
ANY_NAMESPACE = "*"


def namespace_tag(namespace: str) -> str:
    """The MAAS tag of the VM hosts that belong to ``namespace``."""
    return NAMESPACE_TAG_PREFIX + namespace


def host_usable(tags: Iterable[str], namespace: str) -> bool:
    """Whether a VM host with these MAAS tags may receive VMs of MaasMachines in ``namespace``: tagged for
    it, or shared. An untagged host (registered by hand, or before this rule) is nobody's."""
    have = set(tags)
    return SHARED_VM_HOST_TAG in have or namespace_tag(namespace) in have


def foreign_namespace_tags(tags: Iterable[str], namespace: str) -> list[str]:
    """The namespace tags of a host that name another namespace (to drop when the host is ours)."""
    own = namespace_tag(namespace)
    return sorted(t for t in tags if t.startswith(NAMESPACE_TAG_PREFIX) and t != own)


@dataclass(frozen=True)
class Tenancy:
    """The admin's tenancy settings (:class:`capmaas.config.LxdSection`, :class:`capmaas.config.DnsSection`).

    ``vm_host_namespaces``: namespaces whose MaasMachines may register VM hosts (``*``: all); empty: none.
    ``dns_domains``: per namespace (``*``: all), the DNS domains capmaas may create records in; empty mapping:
    any domain for any namespace. ``adopt_dns_by_name``: the one-time migration setting."""

    vm_host_namespaces: frozenset[str] = frozenset()
    dns_domains: Mapping[str, frozenset[str]] = field(default_factory=dict)
    adopt_dns_by_name: bool = False

    def may_register_vm_hosts(self, namespace: str) -> bool:
        return ANY_NAMESPACE in self.vm_host_namespaces or namespace in self.vm_host_namespaces

    def dns_domains_of(self, namespace: str) -> frozenset[str] | None:
        """The domains ``namespace`` may use, lower-case; None when the admin set no list (any domain)."""
        if not self.dns_domains:
            return None
        allowed = set(self.dns_domains.get(namespace, ())) | set(self.dns_domains.get(ANY_NAMESPACE, ()))
        return frozenset(d.lower().rstrip(".") for d in allowed)

    def dns_domain_allowed(self, namespace: str, domain: str) -> bool:
        allowed = self.dns_domains_of(namespace)
        return allowed is None or domain.lower().rstrip(".") in allowed
