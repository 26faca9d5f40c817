"""One MAAS session: the pooled client and the shared poller of one (endpoint, identity), as the
:class:`~capmaas.reconcilers.ports.MaasPort` the reconcilers use."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Mapping, Sequence

from capmaas import maas
from capmaas.api.v1beta1 import MaasMachineSpec
from capmaas.gateway import matching
from capmaas.gateway.poller import MachinePoller
from capmaas.gateway.release_lookup import ReleaseLookups
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.baremetal import LXD_POWER_TYPE
from capmaas.reconcilers.ports import BondRequest, DnsRecord, MaasCredentials


class MaasSession:
    """A :class:`~capmaas.reconcilers.ports.MaasPort`: pooled client + shared poller for one identity.

    Writes (allocate, deploy, release, power on) go straight to MAAS and their responses are folded into the
    poller's snapshot, so a reconcile right after a write sees the new state without another read."""

    ZONES_TTL = 300.0

    def __init__(
        self,
        credentials: MaasCredentials,
        client: maas.MaasClient,
        poller: MachinePoller,
        *,
        max_concurrent_writes: int = 16,
        identity: str = "",
    ) -> None:
        self.credentials = credentials
        #: The identity fingerprint (endpoint + MAAS user) of this session's key.
        self.identity = identity
        self.client = client
        self.poller = poller
        # Writes queue here rather than in the HTTP connection pool: a burst of a thousand new machines must
        # not time out waiting for a connection (and must leave connections free for the shared poll).
        self._writes = asyncio.Semaphore(max(1, max_concurrent_writes))
        self._zones: tuple[float, tuple[str, ...]] | None = None
        self._zones_in_use: tuple[float, tuple[str, ...]] | None = None
        self.last_used = time.monotonic()
        self.release_lookups = ReleaseLookups(self.find_by_agent, self._find_by_agents)

    @property
    def endpoint(self) -> str:
        return self.credentials.endpoint

    def watch(self, system_id: str, key: str) -> None:
        self.poller.watch(system_id, key)

    def unwatch(self, system_id: str) -> None:
        self.poller.unwatch(system_id)

    def snapshot(self, system_id: str) -> maas.Machine | None:
        return self.poller.snapshot(system_id)

    def is_gone(self, system_id: str) -> bool:
        return self.poller.is_gone(system_id)

    async def find_by_agent(self, agent_name: str) -> Sequence[maas.Machine]:
        async with self._writes:
            machines = await self.client.machines.list(agent_name=agent_name)
        for m in machines:
            self.poller.put(m)
        return machines

    async def _find_by_agents(self, agent_names: Sequence[str]) -> Sequence[maas.Machine]:
        async with self._writes:
            machines = await self.client.machines.list(agent_names=agent_names)
        for m in machines:
            self.poller.put(m)
        return machines

    async def find_for_release(self, agent_name: str, system_id: str) -> Sequence[maas.Machine]:
        return await self.release_lookups.find(agent_name, system_id)

    async def allocate(
        self, constraints: maas.AllocateConstraints, *, agent_name: str, comment: str
    ) -> maas.Machine:
        async with self._writes:
            m = await self.client.machines.allocate(constraints, agent_name=agent_name, comment=comment)
        self.poller.put(m)
        return m

    async def deploy(self, system_id: str, request: maas.DeployRequest) -> maas.Machine:
        async with self._writes:
            m = await self.client.machines.deploy_with(system_id, request)
        self.poller.put(m)
        return m

    async def release(
        self,
        system_id: str,
        *,
        erase: bool,
        secure_erase: bool,
        quick_erase: bool,
        comment: str,
        scripts: Sequence[str] = (),
        force: bool = False,
    ) -> maas.Machine | None:
        try:
            async with self._writes:
                m = await self.client.machines.release(
                    system_id,
                    erase=erase,
                    secure_erase=secure_erase,
                    quick_erase=quick_erase,
                    comment=comment,
                    scripts=scripts,
                    force=force,
                )
        except maas_errors.NotFoundError:
            self.poller.mark_gone(system_id)
            return None
        self.poller.put(m)
        return m

    async def mark_broken(self, system_id: str, *, comment: str) -> None:
        async with self._writes:
            await self.client.machines.mark_broken(system_id, comment=comment)
        self.poller.kick()

    async def set_workload_annotations(self, system_id: str, annotations: Mapping[str, str]) -> maas.Machine:
        async with self._writes:
            m = await self.client.machines.set_workload_annotations(system_id, annotations)
        self.poller.put(m)
        return m

    async def power_on(self, system_id: str, *, comment: str) -> None:
        async with self._writes:
            await self.client.machines.power_on(system_id, comment=comment)
        self.poller.kick()

    async def power_off(self, system_id: str, *, comment: str) -> maas.Machine | None:
        """None when MAAS sent no power action (``manual`` power: it answers JSON ``null``)."""
        async with self._writes:
            m = await self.client.machines.power_off(system_id, comment=comment)
        if m is None:
            self.poller.kick()
        else:
            self.poller.put(m)
        return m

    async def zones(self) -> Sequence[str]:
        now = time.monotonic()
        if self._zones is not None and now - self._zones[0] < self.ZONES_TTL:
            return self._zones[1]
        names = tuple(sorted(z.name for z in await self.client.zones.list()))
        self._zones = (now, names)
        return names

    async def zones_in_use(self) -> Sequence[str]:
        # One listing of every visible machine per ZONES_TTL: MAAS's zone API has no machine counts.
        now = time.monotonic()
        if self._zones_in_use is not None and now - self._zones_in_use[0] < self.ZONES_TTL:
            return self._zones_in_use[1]
        names = tuple(sorted(await self.client.machines.zone_names()))
        self._zones_in_use = (now, names)
        return names

    async def dns_find(self, fqdn: str) -> DnsRecord | None:
        for r in await self.client.dns_resources.list(fqdn=fqdn):
            if r.fqdn == fqdn:
                return _record(r)
        return None

    async def dns_create(self, fqdn: str, ips: frozenset[str]) -> DnsRecord:
        return _record(await self.client.dns_resources.create(fqdn, sorted(ips)))

    async def dns_update(self, record_id: int, ips: frozenset[str]) -> None:
        await self.client.dns_resources.update(record_id, sorted(ips))

    async def dns_delete(self, record_id: int) -> None:
        with contextlib.suppress(maas_errors.NotFoundError):
            await self.client.dns_resources.delete(record_id)

    async def vip_reserve(self, fqdn: str, *, address: str | None, subnet: str | None) -> str:
        reserved = await self.client.ip_addresses.reserve(ip=address, subnet=subnet, hostname=fqdn)
        return reserved.ip

    async def vip_release(self, address: str) -> None:
        if await self.client.ip_addresses.list(ip=address):  # the caller's own reservations only
            await self.client.ip_addresses.release(address)

    def explain_empty(self, spec: MaasMachineSpec, zone: str | None) -> str | None:
        """Which constraint emptied the pool, from the inventory's last Ready listing (no MAAS request; None
        while nothing is listed: the inventory lists only while a template counts on it)."""
        inv = self.poller.inventory
        if inv.ready is None or inv.listed_at is None:
            return None
        sel = matching.Selection.of(spec)
        if zone:
            sel = dataclasses.replace(sel, zone=zone)
        ready = [m for m in inv.ready.values() if m.power_type != LXD_POWER_TYPE]
        holders = None
        if sel.device is not None:
            holders = inv.device_filters.get(sel.device.to_constraint())
        found = matching.emptied_by(sel, ready, holders)
        if found is None:
            return None
        what, before = found
        age = int(time.monotonic() - inv.listed_at)
        return (
            f"of the {len(ready)} Ready machines MAAS listed {age}s ago, {before} matched every constraint "
            f"before {what}, none that one"
        )

    # --- static addresses (IPAM) ------------------------------------------------------------------------
    async def subnets(self) -> Sequence[maas.Subnet]:
        return await self.client.subnets.list()

    async def ip_ranges(self) -> Sequence[maas.IpRange]:
        return await self.client.ip_ranges.list()

    async def reserved_ips(self) -> Sequence[maas.ReservedIp]:
        return await self.client.reserved_ips.list()

    async def pin_ip(self, ip: str, mac_address: str, *, comment: str) -> maas.ReservedIp:
        async with self._writes:
            return await self.client.reserved_ips.create(ip=ip, mac_address=mac_address, comment=comment)

    async def unpin_ip(self, reserved_id: int) -> None:
        async with self._writes:
            with contextlib.suppress(maas.NotFoundError):
                await self.client.reserved_ips.delete(reserved_id)

    # --- network and storage layout -----------------------------------------------------------------------
    async def read_machine(self, system_id: str) -> maas.Machine:
        m = await self.client.machines.get(system_id)
        self.poller.put(m)
        return m

    async def fabrics(self) -> Sequence[maas.Fabric]:
        return await self.client.fabrics.list()

    async def create_bond(self, system_id: str, bond: BondRequest) -> maas.Interface:
        async with self._writes:
            return await self.client.interfaces.create_bond(
                system_id,
                name=bond.name,
                parents=bond.parents,
                bond_mode=bond.mode,
                bond_lacp_rate=bond.lacp_rate,
                bond_xmit_hash_policy=bond.xmit_hash_policy,
                mtu=bond.mtu,
            )

    async def create_vlan(self, system_id: str, *, parent: int, vlan: int, mtu: int | None) -> maas.Interface:
        async with self._writes:
            return await self.client.interfaces.create_vlan(system_id, parent=parent, vlan=vlan, mtu=mtu)

    async def delete_interface(self, system_id: str, interface_id: int) -> None:
        async with self._writes:
            with contextlib.suppress(maas.NotFoundError):
                await self.client.interfaces.delete(system_id, interface_id)

    async def link_subnet(
        self, system_id: str, interface_id: int, *, mode: str, subnet: str, ip_address: str | None = None
    ) -> maas.Interface:
        async with self._writes:
            return await self.client.interfaces.link_subnet(
                system_id, interface_id, mode=mode, subnet=f"cidr:{subnet}", ip_address=ip_address
            )

    async def format_disk(self, system_id: str, device_id: int, *, fstype: str) -> maas.BlockDevice:
        async with self._writes:
            return await self.client.block_devices.format(system_id, device_id, fstype=fstype)

    async def mount_disk(
        self, system_id: str, device_id: int, *, mount_point: str, mount_options: str | None
    ) -> maas.BlockDevice:
        async with self._writes:
            return await self.client.block_devices.mount(
                system_id, device_id, mount_point=mount_point, mount_options=mount_options
            )

    # --- VM hosts (the LXD provisioner's part of the port) ----------------------------------------------
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

    async def vms_on(self, host_name: str) -> Sequence[maas.Machine]:
        machines = await self.client.machines.list(pods=[host_name])
        return [m for m in machines if m.pod is not None and m.pod.name == host_name]

    async def delete_vm_host(self, host_id: int) -> bool:
        try:
            async with self._writes:
                await self.client.vm_hosts.delete(host_id)
        except maas_errors.NotFoundError:
            return False
        return True

    async def tag_vm_host(self, host_id: int, *, add: Sequence[str], remove: Sequence[str] = ()) -> None:
        async with self._writes:
            for tag in add:
                await self.client.vm_hosts.add_tag(host_id, tag)
            for tag in remove:
                await self.client.vm_hosts.remove_tag(host_id, tag)

    async def aclose(self) -> None:
        await self.poller.stop()
        await self.release_lookups.aclose()
        await self.client.aclose()


def _record(r: maas.DnsResource) -> DnsRecord:
    return DnsRecord(id=r.id, fqdn=r.fqdn, ips=frozenset(a.ip for a in r.ip_addresses if a.ip))
