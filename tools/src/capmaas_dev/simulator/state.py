"""The inventory as live state: records, the indexes that keep 5,000-machine requests fast, the timer queue.

Indexes (status, agent_name, hostname, READY-by-cost) are kept right on every mutation by the methods here;
handlers never assign ``machine.status`` directly, which is what lets ``check_invariants`` trust them.
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
from collections.abc import Iterable

from capmaas_dev.simulator.http import HttpError, conflict, not_found_text, unavailable
from capmaas_dev.simulator.models import (
    ALLOCATED_STATES,
    FORMAT_FSTYPES,
    TRANSITIONS,
    VLAN_ID_BASE,
    BootResource,
    Device,
    Disk,
    DnsData,
    DnsResource,
    Domain,
    Fabric,
    FabricVid,
    Filesystem,
    Interface,
    IpRange,
    Machine,
    NodeStatus,
    Pool,
    ReservedIp,
    Subnet,
    Tag,
    UserReservedIp,
    VmHost,
    Zone,
)


class State:
    def __init__(self) -> None:
        self.zones: dict[int, Zone] = {}
        self.pools: dict[int, Pool] = {}
        self.tags: dict[str, Tag] = {}
        self.domains: dict[int, Domain] = {}
        self.default_domain_id = 0
        self.subnets: dict[int, Subnet] = {}
        self.boot_resources: dict[int, BootResource] = {}
        self.dns_resources: dict[int, DnsResource] = {}
        self.dns_data: dict[int, DnsData] = {}
        self.devices: dict[str, Device] = {}
        self.vm_hosts: dict[int, VmHost] = {}
        self.machines: dict[str, Machine] = {}  # insertion order is id order
        self.by_status: dict[NodeStatus, dict[str, Machine]] = {s: {} for s in NodeStatus}
        self.by_agent: dict[str, dict[str, Machine]] = {}
        self.by_hostname: dict[str, Machine] = {}
        self.ready: list[tuple[float, int, str]] = []  # READY machines by (cost, id)
        self.timers: list[tuple[float, int, str, int, str]] = []  # (due, seq, system_id, epoch, action)
        self._seq = 0
        self.next_ids: dict[str, int] = {}
        #: Every address MAAS has a StaticIPAddress row for: machines' (and devices') addresses and the
        #: USER_RESERVED ones of ``ipaddresses/``. None of them is handed out again.
        self.used_ips: set[str] = set()
        self.ip_ranges: dict[int, IpRange] = {}
        self.user_reserved: dict[str, UserReservedIp] = {}  # by address
        self.reserved_ips: dict[int, ReservedIp] = {}  # ``reservedips/`` entries by id
        #: Fabrics by id; fabric 0 (``fabric-0``) always exists (:meth:`fabric`).
        self.fabrics: dict[int, Fabric] = {}

    def new_id(self, kind: str, start: int = 1) -> int:
        value = self.next_ids.get(kind, start)
        self.next_ids[kind] = value + 1
        return value

    # -- lookups -----------------------------------------------------------------------------------------
    def zone_by_name(self, name: str) -> Zone | None:
        return next((z for z in self.zones.values() if z.name == name), None)

    def pool_by_name(self, name: str) -> Pool | None:
        return next((p for p in self.pools.values() if p.name == name), None)

    def domain_by_name(self, name: str) -> Domain | None:
        return next((d for d in self.domains.values() if d.name == name), None)

    @property
    def default_zone(self) -> Zone:
        zone = self.zone_by_name("default")
        return zone if zone is not None else next(iter(self.zones.values()))

    # -- fabrics and VLANs ----------------------------------------------------------------------------------
    def fabric(self, fabric_id: int) -> Fabric:
        """Fabric ``fabric_id``; fabric 0 exists even in a state built without an inventory."""
        found = self.fabrics.get(fabric_id)
        if found is None:
            found = self.fabrics[fabric_id] = Fabric(fabric_id, f"fabric-{fabric_id}")
        return found

    def all_fabrics(self) -> list[Fabric]:
        self.fabric(0)
        return [self.fabrics[k] for k in sorted(self.fabrics)]

    def vlans_of(self, fabric_id: int) -> dict[int, Subnet | None]:
        """vid -> the first subnet on it (its space names the VLAN's) for the fabric's VLANs: those the
        inventory declared, those its subnets are on, and the untagged one always."""
        out: dict[int, Subnet | None] = {0: None}
        out.update(dict.fromkeys(self.fabric(fabric_id).vlans))
        for _, s in sorted(self.subnets.items()):
            if s.fabric_id == fabric_id and out.get(s.vid) is None:
                out[s.vid] = s
        return dict(sorted(out.items()))

    def vlan_by_id(self, key: str) -> FabricVid | None:
        """The VLAN whose id (``models.vlan_id``) is ``key``, None when there is none."""
        if not key.strip().isdigit() or int(key) < VLAN_ID_BASE:
            return None
        fabric_id, vid = divmod(int(key), VLAN_ID_BASE)
        fabric_id -= 1
        if fabric_id not in self.fabrics and fabric_id != 0:
            return None
        return (fabric_id, vid) if vid in self.vlans_of(fabric_id) else None

    def iface_vlan(self, i: Interface) -> FabricVid:
        """The VLAN an interface is on: its explicit one, else its subnet's, else fabric 0's untagged."""
        if i.vlan is not None:
            return i.vlan
        subnet = self.subnets.get(i.subnet_id) if i.subnet_id is not None else None
        return (subnet.fabric_id, subnet.vid) if subnet is not None else (0, 0)

    # -- filesystems (M models/node.py _create_acquired_filesystems/_clear_acquired_filesystems) ------------
    @staticmethod
    def effective_fs(m: Machine, d: Disk) -> Filesystem | None:
        """``get_effective_filesystem``: the acquired filesystem while the machine is allocated, the other
        one otherwise."""
        return d.acquired_fs if m.status in ALLOCATED_STATES else d.fs

    @staticmethod
    def create_acquired_filesystems(m: Machine) -> None:
        """At allocation MAAS copies every format-type filesystem as ``acquired``; changes made while
        allocated touch the copies only."""
        for d in m.disks:
            fs = d.fs
            d.acquired_fs = None
            if fs is not None and fs.fstype in FORMAT_FSTYPES:
                d.acquired_fs = Filesystem(fs.fstype, fs.uuid, fs.label, fs.mount_point, fs.mount_options)
        m.cached_json = None

    @staticmethod
    def clear_acquired_filesystems(m: Machine) -> None:
        """At release the acquired filesystems are deleted: what was formatted or mounted while allocated is
        gone, what was there before allocation shows again."""
        for d in m.disks:
            d.acquired_fs = None
        m.cached_json = None

    def hosts_of(self, system_id: str) -> list[VmHost]:
        return [h for h in self.vm_hosts.values() if h.host_system_id == system_id]

    # -- machine mutation (keeps the indexes right) -------------------------------------------------------
    def add_machine(self, m: Machine) -> None:
        self.machines[m.system_id] = m
        self.by_status[m.status][m.system_id] = m
        self.by_hostname[m.hostname] = m
        if m.agent_name:
            self.by_agent.setdefault(m.agent_name, {})[m.system_id] = m
        if m.status is NodeStatus.READY:
            bisect.insort(self.ready, (m.cost, m.id, m.system_id))
        self.used_ips.update(i.ip for i in m.interfaces if i.ip)

    def remove_machine(self, m: Machine) -> None:
        self._unready(m)
        self.set_agent(m, "")
        del self.machines[m.system_id]
        del self.by_status[m.status][m.system_id]
        self.by_hostname.pop(m.hostname, None)
        self.used_ips.difference_update(i.ip for i in m.interfaces if i.ip)
        m.epoch += 1

    def _unready(self, m: Machine) -> None:
        if m.status is NodeStatus.READY:
            key = (m.cost, m.id, m.system_id)
            idx = bisect.bisect_left(self.ready, key)
            if idx < len(self.ready) and self.ready[idx] == key:
                del self.ready[idx]

    # -- addresses ------------------------------------------------------------------------------------------
    def range_for(self, subnet: Subnet, ip: str, kind: str | None = None) -> IpRange | None:
        """The ``kind`` (``dynamic``/``reserved``, None: either) IP range of ``subnet`` holding ``ip``."""
        address = ipaddress.ip_address(ip)
        for r in self.ip_ranges.values():
            if r.subnet_id != subnet.id or (kind is not None and r.type != kind):
                continue
            start, end = ipaddress.ip_address(r.start_ip), ipaddress.ip_address(r.end_ip)
            if start.version == address.version and start <= address <= end:  # type: ignore[operator]
                return r
        return None

    def subnet_for_ip(self, ip: str) -> Subnet | None:
        """``Subnet.objects.get_best_subnet_for_ip``: the most specific subnet holding ``ip``."""
        address = ipaddress.ip_address(ip)
        best: tuple[int, Subnet] | None = None
        for s in self.subnets.values():
            network = ipaddress.ip_network(s.cidr, strict=False)
            inside = address.version == network.version and address in network
            if inside and (best is None or network.prefixlen > best[0]):
                best = (network.prefixlen, s)
        return best[1] if best else None

    def free_ip(self, subnet: Subnet, exclude: Iterable[str] = ()) -> str | None:
        """A free address of ``subnet`` for an AUTO claim or an auto-picked STATIC link or reservation
        (``get_ipranges_for_ip_allocation``): never the gateway, a DNS server, an address with a row
        (``used_ips``), one in ``exclude``, or one inside a dynamic or reserved range. MAAS takes the first
        address of the *smallest* free block; the simulator takes the lowest free address."""
        network = ipaddress.ip_network(subnet.cidr, strict=False)
        taken = set(exclude) | {a for a in (subnet.gateway_ip, *subnet.dns_servers) if a}
        ranges = sorted(
            (int(ipaddress.ip_address(r.start_ip)), int(ipaddress.ip_address(r.end_ip)))
            for r in self.ip_ranges.values()
            if r.subnet_id == subnet.id
        )
        first, last = int(network.network_address), int(network.broadcast_address)
        if network.num_addresses > 2:
            first, last = first + 1, last - 1 if network.version == 4 else last
        value = first
        while value <= last:
            inside = next(((a, b) for a, b in ranges if a <= value <= b), None)
            if inside is not None:
                value = inside[1] + 1
                continue
            text = str(ipaddress.ip_address(value))
            if text not in self.used_ips and text not in taken:
                return text
            value += 1
        return None

    def reserved_ip_for_mac(self, mac: str) -> ReservedIp | None:
        return next((r for r in self.reserved_ips.values() if r.mac_address == mac.lower()), None)

    def plan_auto_ips(self, m: Machine) -> list[tuple[Interface, str]]:
        """``Node.claim_auto_ips``: the address each AUTO link without one gets, or MAAS's error.

        A NIC whose MAC has a ``reservedips/`` entry gets exactly that address on the entry's subnet (reserved
        ranges allowed); with AUTO links only on other subnets the claim fails. Other NICs never get an
        address reserved in ``reservedips/`` on their subnet (M ``Interface.claim_auto_ips``).
        """
        plan: list[tuple[Interface, str]] = []
        exclude: set[str] = set()
        for i in m.interfaces:
            if not (i.auto and not i.ip and i.subnet_id in self.subnets):
                continue
            subnet = self.subnets[i.subnet_id]
            pinned = self.reserved_ip_for_mac(i.mac_address)
            if pinned is None:
                reserved = {r.ip for r in self.reserved_ips.values() if r.subnet_id == subnet.id}
                ip = self.free_ip(subnet, exclude | reserved)
                if ip is None:
                    raise unavailable(f"No more IPs available in subnet: {subnet.cidr}.")
            elif pinned.ip in exclude:
                raise HttpError(
                    404,
                    f"The reserved ip {pinned.ip} seems to be in use by another host in the network. The "
                    "process to find an ip for the machine is stopped.",
                )
            elif pinned.subnet_id != subnet.id:
                raise HttpError(
                    404,
                    f"This interface {i.mac_address} has a reserved ip {pinned.ip} but it does not have a "
                    "link to that subnet",
                )
            else:
                ip = pinned.ip
                if ip in self.used_ips:
                    raise not_found_text(f"The IP address {ip} is already in use.")
                dynamic = self.range_for(subnet, ip, "dynamic")
                if dynamic is not None:
                    raise not_found_text(
                        f"{ip} is within the dynamic range from {dynamic.start_ip} to {dynamic.end_ip}"
                    )
            plan.append((i, ip))
            exclude.add(ip)
        return plan

    def claim_auto_ips(self, m: Machine) -> None:
        """``claim_auto_ips`` at deploy: every AUTO link without an address gets one (:meth:`plan_auto_ips`),
        all or none; MAAS's error (404/503) is raised when one cannot."""
        for i, ip in self.plan_auto_ips(m):
            i.ip = ip
            self.used_ips.add(ip)
        m.cached_json = None

    def release_auto_ips(self, m: Machine) -> None:
        """``release_interface_config``: AUTO addresses go back to the subnet; a DNS resource that listed one
        keeps the (now address-less) entry."""
        freed = set()
        for i in m.interfaces:
            if i.auto and i.ip:
                self.used_ips.discard(i.ip)
                freed.add(i.ip)
                i.ip = None
        if not freed:
            return
        m.cached_json = None
        for record in self.dns_resources.values():
            kept = [ip for ip in record.ips if ip not in freed]
            record.released_ips += len(record.ips) - len(kept)
            record.ips = kept

    def has_network_link(self, m: Machine) -> bool:
        """``Node.on_network``: some interface is linked to a subnet (deploy needs it)."""
        return any(i.subnet_id in self.subnets and i.mode != "link_up" for i in m.interfaces)

    def set_status(self, m: Machine, new: NodeStatus, *, check: bool = True) -> None:
        """Move ``m`` to ``new``; an illegal edge is MAAS's 409 ``Invalid transition: Old -> New.``"""
        old = m.status
        if check and new is not old and new not in TRANSITIONS[old]:
            raise conflict(f"Invalid transition: {old.label} -> {new.label}.")
        self._unready(m)
        del self.by_status[old][m.system_id]
        if new is not old:
            m.previous_status = old
        m.status = new
        m.epoch += 1
        self.by_status[new][m.system_id] = m
        if new is NodeStatus.READY:
            bisect.insort(self.ready, (m.cost, m.id, m.system_id))
        m.cached_json = None

    def set_agent(self, m: Machine, agent_name: str) -> None:
        if m.agent_name:
            bucket = self.by_agent.get(m.agent_name)
            if bucket is not None:
                bucket.pop(m.system_id, None)
                if not bucket:
                    del self.by_agent[m.agent_name]
        m.agent_name = agent_name
        if agent_name:
            self.by_agent.setdefault(agent_name, {})[m.system_id] = m
        m.cached_json = None

    def rename(self, m: Machine, hostname: str) -> None:
        self.by_hostname.pop(m.hostname, None)
        m.hostname = hostname
        self.by_hostname[hostname] = m
        m.cached_json = None

    def resize(self, m: Machine, cpu_count: int | None = None, memory: int | None = None) -> None:
        """Change cpu/memory while keeping the READY-by-cost index sorted."""
        self._unready(m)
        if cpu_count is not None:
            m.cpu_count = cpu_count
        if memory is not None:
            m.memory = memory
        if m.status is NodeStatus.READY:
            bisect.insort(self.ready, (m.cost, m.id, m.system_id))
        m.cached_json = None

    def invalidate_all(self) -> None:
        """Nested zone/pool/domain JSON changed: every cached machine body is stale."""
        for m in self.machines.values():
            m.cached_json = None

    def ready_by_cost(self) -> Iterable[Machine]:
        machines = self.machines
        for _, _, sid in self.ready:
            yield machines[sid]

    # -- timers -------------------------------------------------------------------------------------------
    def schedule(self, m: Machine, due: float, action: str) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (due, self._seq, m.system_id, m.epoch, action))

    def pop_due(self, now: float) -> list[tuple[Machine, str]]:
        """Timers due at ``now`` whose machine still exists and has not changed status since scheduling."""
        out: list[tuple[Machine, str]] = []
        while self.timers and self.timers[0][0] <= now:
            _, _, sid, epoch, action = heapq.heappop(self.timers)
            m = self.machines.get(sid)
            if m is not None and m.epoch == epoch:
                out.append((m, action))
        return out
