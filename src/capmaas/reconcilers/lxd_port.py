"""The MAAS operations the LXD path needs beyond bare metal: VM-host listing, compose, lookup, decompose.

``VmHostPort`` is mixed into :class:`~capmaas.reconcilers.ports.MaasPort` and ``VmHostSession`` into
:class:`~capmaas.reconcilers.maasgw.MaasSession`, so the LXD code lives here and the shared port and session
each carry a one-line hook. Like the rest of the session, every answer that describes a machine is folded
into the shared poller's snapshot, so the reconcile that follows needs no GET of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from capmaas import maas
from capmaas.maas import errors as maas_errors

if TYPE_CHECKING:
    from capmaas.reconcilers.maasgw import MachinePoller


class VmHostPort(Protocol):
    """VM hosts (pods) and composed machines of one MAAS endpoint and identity."""

    async def list_vm_hosts(self) -> Sequence[maas.VmHost]:
        """``GET vm-hosts/``: every host with its total/used figures (410 on MAAS 4.0)."""
        ...

    async def host_machines(self, system_ids: Sequence[str]) -> dict[str, maas.Machine]:
        """The machines behind VM hosts: from the poller's snapshot where it has them, else one list call."""
        ...

    async def compose(self, host_id: int, request: maas.ComposeRequest) -> maas.ComposedMachine:
        """``POST vm-hosts/{id}/?op=compose``; the new machine is fetched into the snapshot by the poller."""
        ...

    async def find_by_hostname(self, hostname: str) -> Sequence[maas.Machine]:
        """Machines with exactly this hostname (the crash-recovery lookup of a composed VM)."""
        ...

    async def delete_machine(self, system_id: str) -> bool:
        """``DELETE machines/{id}/`` (a composed VM is decomposed); False when MAAS no longer knows it."""
        ...


class VmHostSession:
    """Implementation of :class:`VmHostPort` for :class:`~capmaas.reconcilers.maasgw.MaasSession`."""

    client: maas.MaasClient
    poller: MachinePoller

    async def list_vm_hosts(self) -> Sequence[maas.VmHost]:
        return await self.client.vm_hosts.list()

    async def host_machines(self, system_ids: Sequence[str]) -> dict[str, maas.Machine]:
        found: dict[str, maas.Machine] = {}
        missing: list[str] = []
        for sid in dict.fromkeys(system_ids):
            m = self.poller.snapshot(sid)
            if m is not None:
                found[sid] = m
            else:
                missing.append(sid)
        if missing:
            for m in await self.client.machines.list(ids=missing):
                found[m.system_id] = m
        return found

    async def compose(self, host_id: int, request: maas.ComposeRequest) -> maas.ComposedMachine:
        return await self.client.vm_hosts.compose(host_id, request)

    async def find_by_hostname(self, hostname: str) -> Sequence[maas.Machine]:
        machines = [
            m for m in await self.client.machines.list(hostnames=[hostname]) if m.hostname == hostname
        ]
        for m in machines:
            self.poller.put(m)
        return machines

    async def delete_machine(self, system_id: str) -> bool:
        try:
            await self.client.machines.delete(system_id)
        except maas_errors.NotFoundError:
            return False
        finally:
            # Drop the stale snapshot; a watcher that re-registers gets the machine polled (and, once MAAS has
            # finished decomposing, reported gone).
            self.poller.unwatch(system_id)
        return True
