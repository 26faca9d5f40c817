"""Deleting a bare-metal machine that was registered as a MAAS VM host (``registerVMHost``, or its
MaasCluster's ``lxdConfig.enabled``; :func:`capmaas.reconcilers.facts.registers_vm_host`).

MAAS 3.7 refuses to release a machine that hosts VM hosts: 400 ``The following VM hosts must be removed first:
<names>`` (``Node.start_releasing`` → ``maybe_delete_pods``), unless ``force``, which deletes the VM hosts and
the machines of their VMs too. Before the release, therefore:

1. While VMs are composed on the host (other MaasMachines' LXD VMs, or anyone's), wait with a deletion
   condition naming the host and how many remain. Each is decomposed by its own deletion; never by this one.
2. Then remove the VM host registration: ``DELETE vm-hosts/{id}/`` without ``decompose`` (3.7
   ``Pod.async_delete``: the pod's VM machines, none by now, would be deleted from MAAS; the host machine
   stays Deployed, since only a ``dynamic`` machine without a BMC is deleted with its pod).
3. The release follows as usual (``BareMetal.delete``).

Which VM host is ours: MAAS registers it itself after the deploy (nothing of it is in the deploy answer, so
the MaasMachine records no id); it is the VM host whose ``host.system_id`` is this machine, and only when this
MaasMachine asked for the registration and MAAS shows the machine held under its agent name (the ownership
rule of docs/security.md). Any other VM host on the machine is left alone: the release's 400 then reads
``VMHostInUse`` (:func:`capmaas.reconcilers.credentials.maas_failure`).

Tenancy: registering is allowed only in the namespaces the admin lists
(:func:`check_registration`), and the registered host is tagged for the MaasMachine's namespace
(:func:`tag_registered`), so only that namespace's LXD machines are placed on it
(:mod:`capmaas.reconcilers.tenancy`).
"""

from __future__ import annotations

from collections.abc import Sequence

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts
from capmaas.reconcilers.credentials import VM_HOST_RETRY, maas_step
from capmaas.reconcilers.errors import ReconcileError, TerminalError
from capmaas.reconcilers.ports import MaasPort
from capmaas.reconcilers.scope import MachineScope, Requeue
from capmaas.reconcilers.tenancy import Tenancy, foreign_namespace_tags, namespace_tag

#: MAAS's VM host type that ``register_vmhost`` creates.
LXD = "lxd"
#: Seconds between looks for the VM host MAAS registers once the machine is Deployed (it comes moments later).
TAG_RETRY = 5.0


def check_registration(scope: MachineScope, tenancy: Tenancy) -> None:
    """Before a machine is acquired for a MaasMachine that would register a VM host: refused (terminal, with
    a condition) unless the admin lists its namespace. A machine already held is left alone (its host was
    registered before the rule; it stays untagged, so no tenant's VM lands on it until an admin tags it)."""
    if scope.want.system_id or not facts.registers_vm_host(scope.want, scope.maascluster):
        return
    if tenancy.may_register_vm_hosts(scope.namespace):
        return
    via = "spec.registerVMHost" if scope.want.register_vm_host else "its MaasCluster's spec.lxdConfig.enabled"
    raise TerminalError(
        C.VM_HOST_REGISTRATION_NOT_ALLOWED_REASON,
        f"{via} asks MAAS to register this machine as a VM host, and namespace {scope.namespace} may not "
        "register VM hosts (operator setting lxd.vm_host_namespaces, env CAPMAAS_LXD__VM_HOST_NAMESPACES); "
        "no machine was allocated",
    )


async def tag_registered(
    scope: MachineScope, port: MaasPort, m: maas.Machine, tagged: dict[str, str]
) -> float | None:
    """Once ``m`` (held by this MaasMachine) is Deployed as a VM host: tag the host MAAS registered on it for
    this namespace (and drop another namespace's tag: the host is ours). None when done (remembered in
    ``tagged``, UID -> system ID: one listing per process), else seconds until the next look."""
    if tagged.get(scope.uid) == m.system_id or not facts.registers_vm_host(scope.want, scope.maascluster):
        return None
    try:
        hosts = await _hosts_on(port, m.system_id)
    except ReconcileError:
        return VM_HOST_RETRY  # the machine is fine; the host is tagged on a later pass
    if not hosts:
        return TAG_RETRY  # MAAS registers the host after the deploy: look again shortly
    tag = namespace_tag(scope.namespace)
    for host in hosts:
        foreign = foreign_namespace_tags(host.tags, scope.namespace)
        if tag in host.tags and not foreign:
            continue
        try:
            await port.tag_vm_host(host.id, add=[] if tag in host.tags else [tag], remove=foreign)
        except maas_errors.MaasError as exc:
            scope.event(
                "Warning",
                "VMHostNotTagged",
                f"VM host {host.name} (id {host.id}) on {m.system_id} could not be tagged {tag} ({exc}); "
                "no LXD machine of this namespace is placed on it until it is",
            )
            return VM_HOST_RETRY
        scope.event("Normal", "VMHostTagged", f"VM host {host.name} (id {host.id}) tagged {tag}")
    tagged[scope.uid] = m.system_id
    return None


async def _first_with_vms(
    port: MaasPort, hosts: Sequence[maas.VmHost]
) -> tuple[maas.VmHost, Sequence[maas.Machine]] | None:
    """The first of ``hosts`` MAAS shows a VM on, with its VMs; None when every one is empty."""
    for host in hosts:
        with maas_step(f"listing the VMs on VM host {host.name}"):
            vms = await port.vms_on(host.name)
        if vms:
            return host, vms
    return None


def _names(vms: Sequence[maas.Machine]) -> str:
    return ", ".join(sorted(v.hostname for v in vms)[:5])


async def vms_hosted(scope: MachineScope, port: MaasPort, sid: str) -> Requeue | None:
    """Before a forced release of ``sid`` (MAAS then removes the VM hosts on it, whoever registered them):
    None when no VM host on it (of any type: MAAS removes them all) carries a VM, else the end of this pass
    (``VMHostInUse``, named)."""
    busy = await _first_with_vms(port, await _hosts_on(port, sid, any_type=True))
    if busy is None:
        return None
    host, vms = busy
    scope.set_deletion(
        C.VM_HOST_IN_USE_REASON,
        f"{sid} is VM host {host.name} (id {host.id}) with {len(vms)} VM(s) ({_names(vms)}); "
        "releaseOptions.force would have MAAS remove it with them: waiting for them to be deleted",
    )
    return Requeue(VM_HOST_RETRY)


async def clear_for_release(
    scope: MachineScope, port: MaasPort, m: maas.Machine, agent_name: str
) -> Requeue | None:
    """Before releasing ``m``: remove the VM host this MaasMachine registered on it once no VM is left on it.
    None when the release may go ahead (no VM host of ours, or removed now), else the end of this pass."""
    sid = m.system_id
    if not facts.registers_vm_host(scope.want, scope.maascluster):
        return None  # no request: a VM host someone else put there makes the release say VMHostInUse
    hosts = await _hosts_on(port, sid)
    if not hosts:
        return None
    with maas_step(f"checking who holds {sid}"):
        held = await port.find_by_agent(agent_name)
    if sid not in {h.system_id for h in held}:
        return None  # not ours: BareMetal.delete forgets it and sends nothing
    if (busy := await _first_with_vms(port, hosts)) is not None:
        host, vms = busy
        scope.set_deletion(
            C.VM_HOST_IN_USE_REASON,
            f"{sid} is VM host {host.name} (id {host.id}); waiting for its {len(vms)} VM(s) to be "
            f"deleted by their own MaasMachines or owners ({_names(vms)}) before removing it and releasing",
        )
        return Requeue(VM_HOST_RETRY)
    for host in hosts:
        with maas_step(f"removing VM host {host.name}", reason=C.VM_HOST_IN_USE_REASON):
            await port.delete_vm_host(host.id)
        scope.event(
            "Normal", "VMHostRemoved", f"removed VM host {host.name} (id {host.id}) registered on {sid}"
        )
    return None


async def _hosts_on(port: MaasPort, sid: str, *, any_type: bool = False) -> Sequence[maas.VmHost]:
    """The LXD VM hosts (``any_type``: of every type) MAAS shows running on machine ``sid`` (none on a MAAS
    without VM hosts)."""
    with maas_step(f"listing the VM hosts on {sid}"):
        try:
            hosts = await port.list_vm_hosts()
        except maas_errors.GoneError:
            return ()  # MAAS 4.0: no VM hosts, nothing refuses the release
    return [
        h for h in hosts if (any_type or h.type == LXD) and h.host is not None and h.host.system_id == sid
    ]
