"""Fixed addresses of a bare-metal MaasMachine (``spec.addresses``): the infrastructure-provider side of
Cluster API's IPAM contract, and the MAAS side that makes the server get each address.

**Claims.** For each entry with a ``poolRef`` the MaasMachine gets one ``IPAddressClaim`` named
``<MaasMachine>-<interface>``, controller-owned by the MaasMachine (``blockOwnerDeletion``: the apiserver's
garbage collector deletes it after the MaasMachine, and ``clusterctl move`` carries it along), with
``spec.clusterName`` and the cluster-name label. Any IPAM provider may fulfil it (capmaas's ``MaasIPPool``
among them): the address is read from the ``IPAddress`` that the claim's ``status.addressRef`` names. Nothing
is allocated in MAAS until every address is known. A claim of that name that is not ours (another owner) is
never used. The claims are deleted once the server is released (the addresses go back to their pools); a
server given back for another keeps them: the next one gets the same addresses.

**MAAS.** MAAS 3.7.3 offers three ways to give a machine an address; only one leaves MAAS clean
(docs/operating.md "Networking"): a ``reservedips/`` entry pins the address to the interface's MAC, and the
interface's AUTO link on that subnet gets exactly it at deploy. A STATIC link would survive release (it can
be undone only while the server is still Allocated, racing other allocators after a release), and a
``ipaddresses/?op=reserve`` address can never be linked STATIC at all. So, after allocation and before
deploy, each address is pinned to its interface's MAC; before the server is released the pins are deleted.
Which pins are ours is written down (``…/pinned-ips``) *before* they are sent, so a crash in between leaves
them known; a pin is only ever deleted when its MAC belongs to the server this MaasMachine holds (the
annotation is a field anyone with write access could set).

A server that cannot take an address (no such interface, no AUTO link on the address's subnet) or an address
MAAS refuses (in use, outside the subnet, inside a dynamic range: MAAS's own words) gives the server back,
released and not marked broken, with ``IPAddressRefused``; the claims are kept, and the next server is tried
after the allocation backoff.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import API_VERSION, InterfaceAddress
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, PINNED
from capmaas.reconcilers.ports import Body, KubePort, MaasPort
from capmaas.reconcilers.scope import MachineScope

IPAM_API = "ipam.cluster.x-k8s.io/v1beta2"
#: Kubernetes object names are at most 253 characters; a longer claim name is cut and given a hash suffix.
_MAX_NAME = 253


@dataclass(frozen=True)
class Wanted:
    """One address the server must have on one of its interfaces."""

    interface: str
    ip: str


def claim_name(machine: str, entry: InterfaceAddress) -> str:
    """``<MaasMachine>-<interface>`` (the contract: derived from the InfraMachine's name), within 253."""
    name = f"{machine}-{entry.claim_suffix}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _MAX_NAME - 11].rstrip('-.')}-{digest}"


def claim_body(scope: MachineScope, entry: InterfaceAddress, name: str) -> dict[str, Any]:
    """The ``IPAddressClaim`` of one ``spec.addresses`` entry."""
    assert entry.pool_ref is not None
    cluster = scope.cluster_name or ""
    return {
        "apiVersion": IPAM_API,
        "kind": "IPAddressClaim",
        "metadata": {
            "name": name,
            "namespace": scope.namespace,
            "labels": {CLUSTER_NAME_LABEL: cluster},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "MaasMachine",
                    "name": scope.name,
                    "uid": scope.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"clusterName": cluster, "poolRef": entry.pool_ref.to_k8s()},
    }


def _ours(claim: Body, uid: str) -> bool:
    refs = (claim.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def _ready_message(claim: Body) -> str:
    """What the claim's IPAM provider says while it has no address (its ``Ready`` condition), if anything."""
    for c in (claim.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready" and c.get("status") != "True":
            said = " ".join(str(c.get("message") or "").split())[:300]
            return f"{c.get('reason') or 'not ready'}: {said}" if said else str(c.get("reason") or "")
    return ""


async def wanted(scope: MachineScope, kube: KubePort) -> list[Wanted] | str:
    """The addresses ``spec.addresses`` asks for, the claims created where missing; or, while some address
    is not known yet, why (the condition message)."""
    out: list[Wanted] = []
    waiting: list[str] = []
    for entry in scope.want.addresses or ():
        if entry.ip_address:
            out.append(Wanted(entry.interface, entry.ip_address))
            continue
        name = claim_name(scope.name, entry)
        claim = kube.get_ip_claim(scope.namespace, name)
        if claim is None:
            await kube.create_ip_claim(scope.namespace, claim_body(scope, entry, name))
            waiting.append(f"IPAddressClaim {name}: waiting for its IPAM provider")
            continue
        if not _ours(claim, scope.uid):
            waiting.append(f"IPAddressClaim {name} exists and is not this MaasMachine's; it is not used")
            continue
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            waiting.append(f"IPAddressClaim {name} is being deleted; waiting to claim again")
            continue
        ref = ((claim.get("status") or {}).get("addressRef") or {}).get("name")
        address = kube.get_ip_address(scope.namespace, str(ref)) if ref else None
        ip = ((address or {}).get("spec") or {}).get("address")
        claimed = (((address or {}).get("spec") or {}).get("claimRef") or {}).get("name")
        if not ip or claimed != name:
            said = _ready_message(claim)
            waiting.append(f"IPAddressClaim {name} (pool {entry.pool_ref.name if entry.pool_ref else ''}): "
                           + (said or "no address yet"))  # fmt: skip
            continue
        out.append(Wanted(entry.interface, str(ip)))
    if waiting:
        return "; ".join(waiting)
    return out


def _in_subnet(ip: str, link: maas.InterfaceLink) -> bool:
    cidr = link.subnet.cidr if link.subnet is not None else None
    if not cidr:
        return False
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def _nic(m: maas.Machine, name: str) -> maas.Interface | None:
    return next((i for i in m.interface_set if i.name == name), None)


def unfit(m: maas.Machine, want: Sequence[Wanted]) -> str | None:
    """Why server ``m`` cannot take these addresses as MAAS gives them (AUTO link on the address's subnet),
    or None."""
    for w in want:
        nic = _nic(m, w.interface)
        if nic is None or not nic.mac_address:
            return f"MAAS machine {m.system_id} has no interface {w.interface} (for {w.ip})"
        if not any(link.mode.lower() == "auto" and _in_subnet(w.ip, link) for link in nic.links):
            return (
                f"interface {w.interface} of MAAS machine {m.system_id} has no AUTO link on a subnet "
                f"holding {w.ip} (MAAS gives a pinned address only through one)"
            )
    return None


def _marks(value: str | None) -> set[tuple[str, str]]:
    out = set()
    for item in (value or "").split(","):
        ip, _, mac = item.strip().partition("@")
        if ip and mac:
            out.add((ip, mac.lower()))
    return out


def _refusal(exc: maas_errors.MaasError) -> str:
    if isinstance(exc, maas_errors.BadRequestError) and exc.field_errors:
        return exc.maas_text or facts.refusal_text(exc.field_errors)
    if isinstance(exc, maas_errors.ApiError):
        return exc.maas_text or f"HTTP {exc.status}"
    return str(exc)


async def pin(scope: MachineScope, port: MaasPort, m: maas.Machine, want: Sequence[Wanted]) -> str | None:
    """Pin each address to its interface's MAC (``reservedips/``) before deploy; the refusal (MAAS's words)
    when the server or MAAS will not take one, else None. Idempotent: a pin already there for that MAC is
    kept, so a pass after a crash sends nothing twice."""
    if not want:
        return None
    if (why := unfit(m, want)) is not None:
        return why
    pairs = [(w.ip, str((_nic(m, w.interface) or maas.Interface(id=0, name="")).mac_address).lower())
             for w in want]  # fmt: skip
    marks = ",".join(f"{ip}@{mac}" for ip, mac in pairs)
    if scope.annotation(PINNED) != marks:
        scope.set_annotation(PINNED, marks)  # before the writes: a crash leaves them known
        await scope.flush()
    with maas_step("reading MAAS reserved IPs"):
        existing = {r.ip: r for r in await port.reserved_ips()}
    for ip, mac in pairs:
        have = existing.get(ip)
        if have is not None and have.mac_address.lower() == mac:
            continue
        with maas_step(f"reserving {ip} in MAAS"):
            try:
                await port.pin_ip(ip, mac, comment=f"capmaas {scope.key}")
            except (maas_errors.BadRequestError, maas_errors.ConflictError, maas_errors.NotFoundError) as exc:
                return f"MAAS refused to reserve {ip} for {mac} of {m.system_id}: {_refusal(exc)}"
    return None


async def unpin(scope: MachineScope, port: MaasPort, m: maas.Machine | None) -> None:
    """Delete the pins of ``…/pinned-ips`` whose MAC is on server ``m`` (the one held, proven ours) before it
    is released; the annotation is cleared with the caller's next write."""
    marks = _marks(scope.annotation(PINNED))
    if not marks:
        return
    if m is not None:
        macs = {str(i.mac_address).lower() for i in m.interface_set if i.mac_address}
        with maas_step("reading MAAS reserved IPs"):
            pins = await port.reserved_ips()
        for r in pins:
            mac = r.mac_address.lower()
            if (r.ip, mac) in marks and mac in macs:
                with maas_step(f"deleting the MAAS reserved IP {r.ip}"):
                    await port.unpin_ip(r.id)
    scope.set_annotation(PINNED, None)


async def drop_claims(scope: MachineScope, kube: KubePort) -> None:
    """Delete this MaasMachine's claims (its server is released): the addresses go back to their pools."""
    for entry in scope.want.addresses or ():
        if entry.pool_ref is None:
            continue
        name = claim_name(scope.name, entry)
        claim = kube.get_ip_claim(scope.namespace, name)
        if claim is not None and _ours(claim, scope.uid):
            await kube.delete_ip_claim(scope.namespace, name)


def refused_condition(scope: MachineScope, message: str) -> None:
    """``IPAddressRefused`` on MachineProvisioned (the summary Ready says it too)."""
    scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.IP_ADDRESS_REFUSED_REASON, message)


def describe(want: Sequence[Wanted]) -> Mapping[str, str]:
    """Interface -> address, for messages."""
    return {w.interface: w.ip for w in want}
