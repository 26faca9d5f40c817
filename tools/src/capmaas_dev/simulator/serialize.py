"""JSON shapes of MAAS 3.7 objects (``DISPLAYED_*_FIELDS`` plus ``resource_uri``).

Machine bodies are cached as bytes per machine and dropped on every change, so a list of 5,000 machines is a
``b",".join`` rather than 5,000 ``json.dumps`` calls.
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from typing import Any

from capmaas_dev.simulator.models import (
    BootResource,
    Device,
    Disk,
    DnsData,
    DnsResource,
    Domain,
    Fabric,
    Filesystem,
    Interface,
    Machine,
    Pool,
    Subnet,
    Tag,
    VmHost,
    Zone,
    vlan_id,
    vlan_name,
)
from capmaas_dev.simulator.state import State

API = "/MAAS/api/2.0"
TEST_PASSED = {"status": 2, "name": "Passed"}


def zone_json(z: Zone) -> dict[str, Any]:
    return {
        "id": z.id,
        "name": z.name,
        "description": z.description,
        "resource_uri": f"{API}/zones/{z.name}/",
    }


def pool_json(p: Pool) -> dict[str, Any]:
    return {
        "id": p.id,
        "name": p.name,
        "description": p.description,
        "resource_uri": f"{API}/resourcepool/{p.id}/",
    }


def domain_json(state: State, d: Domain, count_records: bool = True) -> dict[str, Any]:
    count = 0
    if count_records:
        count = sum(1 for r in state.dns_resources.values() if r.domain_id == d.id)
        count += sum(1 for m in state.machines.values() if m.domain_id == d.id)
    return {
        "id": d.id,
        "name": d.name,
        "ttl": d.ttl,
        "authoritative": d.authoritative,
        "resource_record_count": count,
        "is_default": d.id == state.default_domain_id,
        "resource_uri": f"{API}/domains/{d.id}/",
    }


def tag_json(t: Tag) -> dict[str, Any]:
    return {
        "name": t.name,
        "definition": t.definition,
        "comment": t.comment,
        "kernel_opts": t.kernel_opts,
        "resource_uri": f"{API}/tags/{t.name}/",
    }


FABRIC_ID, FABRIC_NAME = 0, "fabric-0"  # the default fabric; VLAN ids: ``models.vlan_id``


def vlan_json(
    s: Subnet | None, *, vid: int | None = None, space: str | None = None, fabric: Fabric | None = None
) -> dict[str, Any]:
    """The VLAN of subnet ``s``, or VLAN ``vid`` of ``fabric`` (default fabric 0; untagged when no vid)."""
    if s is not None:
        fid, fname, vid, name = s.fabric_id, s.fabric, s.vid, vlan_name(s.vid, s.vlan_name)
    else:
        vid = vid or 0
        fid, fname = (fabric.id, fabric.name) if fabric is not None else (FABRIC_ID, FABRIC_NAME)
        name = vlan_name(vid, fabric.vlans.get(vid, "") if fabric is not None else "")
    vlan = vlan_id(fid, vid)
    return {
        "id": vlan,
        "name": name,
        "vid": vid,
        "fabric": fname,
        "fabric_id": fid,
        "mtu": 1500,
        "primary_rack": "rack01",
        "secondary_rack": None,
        "dhcp_on": True,
        "external_dhcp": None,
        "relay_vlan": None,
        "space": s.space if s is not None else (space or "undefined"),
        "resource_uri": f"{API}/vlans/{vlan}/",
    }


def subnet_json(s: Subnet) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "description": s.description,
        "vlan": vlan_json(s),
        "space": s.space,
        "cidr": s.cidr,
        "gateway_ip": s.gateway_ip,
        "dns_servers": list(s.dns_servers),
        "rdns_mode": 2,
        "active_discovery": False,
        "allow_dns": True,
        "allow_proxy": True,
        "managed": True,
        "disabled_boot_architectures": [],
        "resource_uri": f"{API}/subnets/{s.id}/",
    }


def boot_resource_json(b: BootResource, detail: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": b.id,
        "type": b.type,
        "name": b.name,
        "architecture": b.architecture,
        "resource_uri": f"{API}/boot-resources/{b.id}/",
        "last_deployed": None,
        "subarches": b.subarches,
        "title": b.title,
    }
    if b.base_image:
        out["base_image"] = b.base_image
    if detail:
        out["sets"] = {
            "20250101": {
                "version": "20250101",
                "label": "stable",
                "size": 1_500_000_000,
                "complete": True,
                "files": {},
            }
        }
    return out


def dns_resource_json(state: State, r: DnsResource) -> dict[str, Any]:
    domain = state.domains[r.domain_id]
    fqdn = domain.name if r.name == "@" else f"{r.name}.{domain.name}"
    ips = []
    for ip in r.ips:
        subnet = _subnet_for(state, ip)
        ips.append(
            {
                "alloc_type": 4,
                "alloc_type_name": "User reserved",
                "created": "2025-01-01T00:00:00.000",
                "ip": ip,
                "owner": {  # only admins write DNS resources; the simulator does not record which one
                    "is_superuser": True,
                    "username": "admin",
                    "email": "admin@example.com",
                    "is_local": True,
                    "resource_uri": f"{API}/users/admin/",
                },
                "interface_set": [],
                "subnet": subnet_json(subnet) if subnet else None,
                "resource_uri": f"{API}/ipaddresses/",
            }
        )
    for _ in range(r.released_ips):  # AUTO addresses freed by a release: the row stays linked, address-less
        ips.append(
            {
                "alloc_type": 1,
                "alloc_type_name": "Auto",
                "created": "2025-01-01T00:00:00.000",
                "ip": None,
                "owner": None,
                "interface_set": [],
                "subnet": None,
                "resource_uri": f"{API}/ipaddresses/",
            }
        )
    return {
        "id": r.id,
        "fqdn": fqdn,
        "address_ttl": r.address_ttl,
        "ip_addresses": ips,
        "resource_records": [
            dns_data_json(state, d)
            for d in sorted(state.dns_data.values(), key=lambda d: (d.rrtype, d.id))
            if d.dnsresource_id == r.id
        ],
        "resource_uri": f"{API}/dnsresources/{r.id}/",
    }


def dns_resource_fqdn(state: State, r: DnsResource) -> str:
    domain = state.domains[r.domain_id]
    return domain.name if r.name == "@" else f"{r.name}.{domain.name}"


def dns_data_json(state: State, d: DnsData) -> dict[str, Any]:
    """``DNSResourceRecordHandler`` fields (``DISPLAYED_DNSDATA_FIELDS``)."""
    return {
        "id": d.id,
        "fqdn": dns_resource_fqdn(state, state.dns_resources[d.dnsresource_id]),
        "ttl": d.ttl,
        "rrtype": d.rrtype,
        "rrdata": d.rrdata,
        "resource_uri": f"{API}/dnsresourcerecords/{d.id}/",
    }


def device_json(state: State, d: Device) -> dict[str, Any]:
    """``DeviceHandler`` fields (``DISPLAYED_DEVICE_FIELDS``); ``parent`` is the parent's system_id."""
    domain = state.domains[d.domain_id]
    node = Machine(0, d.system_id, d.hostname, d.domain_id, d.zone_id, 0)
    ifaces = [interface_json(state, node, i) for i in d.interfaces]
    return {
        "system_id": d.system_id,
        "hostname": d.hostname,
        "description": d.description,
        "domain": domain_json(state, domain, count_records=False),
        "fqdn": f"{d.hostname}.{domain.name}",
        "owner": d.owner,
        "owner_data": dict(d.annotations),
        "parent": d.parent,
        "tag_names": sorted(d.tags),
        "address_ttl": None,
        "ip_addresses": [i.ip for i in d.interfaces if i.ip],
        "interface_set": ifaces,
        "zone": zone_json(state.zones[d.zone_id]),
        "node_type": 1,
        "node_type_name": "Device",
        "workload_annotations": dict(d.annotations),
        "resource_uri": f"{API}/devices/{d.system_id}/",
    }


def _subnet_for(state: State, ip: str) -> Subnet | None:
    addr = ipaddress.ip_address(ip)
    for s in state.subnets.values():
        if addr in ipaddress.ip_network(s.cidr, strict=False):
            return s
    return None


def vm_host_json(state: State, h: VmHost, family: str = "vm-hosts") -> dict[str, Any]:
    used_cores, used_mem, used_storage = h.used()
    total_storage = sum(p.total for p in h.storage_pools)
    used_total = sum(used_storage.values())
    return {
        "id": h.id,
        "name": h.name,
        "tags": list(h.tags),
        "type": h.type,
        "architectures": list(h.architectures),
        "capabilities": ["composable", "dynamic_local_storage", "over_commit", "storage_pools"],
        "total": {"cores": h.cores, "memory": h.memory, "local_storage": total_storage},
        "used": {"cores": used_cores, "memory": used_mem, "local_storage": used_total},
        "available": {
            "cores": h.cores - used_cores,
            "memory": h.memory - used_mem,
            "local_storage": total_storage - used_total,
        },
        "zone": zone_json(state.zones[h.zone_id]),
        "cpu_over_commit_ratio": float(h.cpu_over_commit_ratio),
        "memory_over_commit_ratio": float(h.memory_over_commit_ratio),
        "storage_pools": [
            {
                "id": str(p.id),  # MAAS's PodStoragePool.pool_id is a string
                "name": p.name,
                "type": p.type,
                "path": p.path,
                "total": p.total,
                "used": used_storage.get(p.id, 0),
                "available": p.total - used_storage.get(p.id, 0),
                "default": p.default,
            }
            for p in h.storage_pools
        ],
        "pool": pool_json(state.pools[h.pool_id]),
        "host": {"system_id": h.host_system_id, "__incomplete__": True},
        "default_macvlan_mode": h.default_macvlan_mode,
        "version": h.version,
        "resource_uri": f"{API}/{family}/{h.id}/",
    }


def link_mode(i: Interface) -> str | None:
    """The link's mode: explicit (``dhcp``/``link_up``), else STATIC with a fixed address, else AUTO."""
    if i.mode:
        return i.mode
    if i.subnet_id is None:
        return None
    return "static" if i.ip and not i.auto else "auto"


def interface_json(state: State, m: Machine, i: Interface) -> dict[str, Any]:
    """``InterfaceHandler`` fields (``DISPLAYED_INTERFACE_FIELDS``); ``params`` is an object, as MAAS 3.7.3
    sends it (``{}`` when empty)."""
    subnet = state.subnets.get(i.subnet_id) if i.subnet_id is not None else None
    links: list[dict[str, Any]] = []
    mode = link_mode(i)
    if mode is not None:
        link: dict[str, Any] = {"id": i.id, "mode": mode}
        if subnet is not None:
            link["subnet"] = subnet_json(subnet)
        if i.ip:
            link["ip_address"] = i.ip
        links.append(link)
    physical = i.type == "physical"
    if i.vlan is None:
        vlan = vlan_json(subnet)
    else:  # a bond's or VLAN interface's own VLAN (its space: the first subnet's on it)
        fabric_id, vid = i.vlan
        on_vlan = state.vlans_of(fabric_id).get(vid)
        fabric = state.fabric(fabric_id)
        vlan = vlan_json(on_vlan) if on_vlan is not None else vlan_json(None, vid=vid, fabric=fabric)
    mtu = i.params.get("mtu")
    return {
        "system_id": m.system_id,
        "id": i.id,
        "name": i.name,
        "type": i.type,
        "vlan": vlan,
        "mac_address": i.mac_address,
        "parents": list(i.parents),
        "children": [c.name for c in m.interfaces if i.name in c.parents],
        "tags": list(i.tags),
        "enabled": True,
        "links": links,
        "params": dict(i.params),
        "discovered": None,
        "effective_mtu": mtu if isinstance(mtu, int) else 1500,
        "vendor": "Simulated" if physical else None,
        "product": "NIC" if physical else None,
        "firmware_version": "1.0" if physical else None,
        "link_connected": True,
        "interface_speed": i.link_speed if physical else 0,
        "link_speed": i.link_speed if physical else 0,
        "numa_node": 0 if physical else None,
        "sriov_max_vf": 0,
        "resource_uri": f"{API}/nodes/{m.system_id}/interfaces/{i.id}/",
    }


MIB = 1024 * 1024
ESP_SIZE = 512 * MIB
TABLE_OVERHEAD = 5 * MIB  # what MAAS's GPT layout leaves out of the partitions (alignment, tables)
BLOCK_SIZE = 512


def _uuid(*parts: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(map(str, parts))))


def filesystem_json(fs: Filesystem | None) -> dict[str, Any] | None:
    """``BlockDeviceHandler.filesystem`` (M ``api/blockdevices.py:209-223``)."""
    if fs is None:
        return None
    return {
        "fstype": fs.fstype,
        "label": fs.label,
        "uuid": fs.uuid,
        "mount_point": fs.mount_point,
        "mount_options": fs.mount_options,
    }


def used_for(fs: Filesystem) -> str:
    """``used_for`` of a formatted device (M ``utils/storage.py:48-92``)."""
    if fs.mounted:
        return f"{fs.fstype} formatted filesystem mounted at {fs.mount_point}"
    return f"Unmounted {fs.fstype} formatted filesystem"


def _filesystem(m: Machine, d: Disk, fstype: str, mount_point: str, label: str) -> dict[str, Any]:
    return {
        "fstype": fstype,
        "label": label,
        "uuid": _uuid(m.system_id, d.id, mount_point),
        "mount_point": mount_point,
        "mount_options": None,
    }


def partitions_json(m: Machine, d: Disk) -> list[dict[str, Any]]:
    """MAAS's default (flat, UEFI) layout on the boot disk of a commissioned machine: an ESP mounted at
    /boot/efi and the rest ext4 at /; other disks carry no partition table."""
    if not m.commissioned or not m.disks or m.disks[0] is not d or d.size <= ESP_SIZE + TABLE_OVERHEAD:
        return []
    if m.storage_layout == "blank":
        return []
    root = (d.size - ESP_SIZE - TABLE_OVERHEAD) // (4 * MIB) * (4 * MIB)
    out = []
    for n, (size, fstype, mount, label) in enumerate(
        ((ESP_SIZE, "fat32", "/boot/efi", "efi"), (root, "ext4", "/", "root")), start=1
    ):
        pid = d.id * 10 + n
        out.append(
            {
                "uuid": _uuid(m.system_id, d.id, "part", n),
                "size": size,
                "bootable": n == 1,
                "tags": [],
                "system_id": m.system_id,
                "device_id": d.id,
                "type": "partition",
                "filesystem": _filesystem(m, d, fstype, mount, label),
                "id": pid,
                "path": f"/dev/disk/by-dname/{d.name}-part{n}",
                "used_for": f"{fstype} formatted filesystem mounted at {mount}",
                "resource_uri": f"{API}/nodes/{m.system_id}/blockdevices/{d.id}/partition/{pid}",
            }
        )
    return out


def block_device_json(m: Machine, d: Disk) -> dict[str, Any]:
    """``BlockDeviceHandler`` fields (``DISPLAYED_BLOCKDEVICE_FIELDS``) of a physical disk. A formatted
    disk (its effective filesystem: ``State.effective_fs``) is used whole (M ``models/blockdevice.py``
    ``get_used_size``/``get_available_size``)."""
    parts = partitions_json(m, d)
    used = sum(p["size"] for p in parts) + TABLE_OVERHEAD if parts else 0
    fs = State.effective_fs(m, d)
    if fs is not None:
        return {
            **_block_device(m, d, (d.size, 0), used_for(fs), table=None, parts=[]),
            "filesystem": filesystem_json(fs),
        }
    return _block_device(
        m,
        d,
        (used, d.size - used if not parts else 0),
        f"GPT partitioned with {len(parts)} partitions" if parts else "Unused",
        table="GPT" if parts else None,
        parts=parts,
    )


def _block_device(
    m: Machine,
    d: Disk,
    sizes: tuple[int, int],
    purpose: str,
    *,
    table: str | None,
    parts: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": d.id,
        "name": d.name,
        "uuid": None,  # only virtual block devices have one
        "size": d.size,
        "block_size": BLOCK_SIZE,
        "tags": list(d.tags),
        "type": "physical",
        "path": f"/dev/disk/by-dname/{d.name}",
        "model": "SimDisk",
        "serial": f"SIM{d.id:08d}",
        "id_path": f"/dev/disk/by-id/wwn-0x{d.id:016x}",
        "available_size": sizes[1],
        "used_size": sizes[0],
        "used_for": purpose,
        "filesystem": None,
        "partition_table_type": table,
        "partitions": parts,
        "firmware_version": "1.0",
        "storage_pool": str(d.pool_id) if d.pool_id is not None else None,
        "numa_node": 0,
        "system_id": m.system_id,
        "resource_uri": f"{API}/nodes/{m.system_id}/blockdevices/{d.id}/",
    }


def machine_dict(state: State, m: Machine, maas4: bool = False) -> dict[str, Any]:
    domain = state.domains[m.domain_id]
    ifaces = [interface_json(state, m, i) for i in m.interfaces]
    disks = [block_device_json(m, d) for d in m.disks]
    host = state.vm_hosts.get(m.pod_id) if m.pod_id is not None else None
    first_subnet = state.subnets.get(m.interfaces[0].subnet_id or -1) if m.interfaces else None
    gateway = first_subnet.gateway_ip if first_subnet else None
    out: dict[str, Any] = {
        "system_id": m.system_id,
        "hostname": m.hostname,
        "description": m.description,
        "hardware_uuid": m.hardware_uuid,
        "domain": domain_json(state, domain, count_records=False),
        "fqdn": f"{m.hostname}.{domain.name}",
        "owner": m.owner,
        "owner_data": dict(m.annotations),
        "locked": m.locked,
        "cache_sets": [],
        "bcaches": [],
        "bios_boot_method": "uefi",
        "boot_interface": ifaces[0] if ifaces else None,
        "architecture": m.architecture,
        "min_hwe_kernel": "",
        "hwe_kernel": m.hwe_kernel,
        "cpu_count": m.cpu_count,
        "cpu_speed": m.cpu_speed,
        "memory": m.memory,
        "swap_size": m.swap_size,
        "storage": m.storage_mb,
        "status": int(m.status),
        "osystem": m.osystem,
        "distro_series": m.distro_series,
        "ephemeral_deploy": m.ephemeral_deploy,
        "error_description": m.error_description,
        "netboot": m.status not in (6, 9),
        "power_type": m.power_type,
        "power_state": m.power_state,
        "tag_names": sorted(m.tags),
        "address_ttl": None,
        "ip_addresses": [i.ip for i in m.interfaces if i.ip],
        "interface_set": ifaces,
        "zone": zone_json(state.zones[m.zone_id]),
        "pool": pool_json(state.pools[m.pool_id]),
        "pod": {"id": host.id, "name": host.name, "resource_uri": f"{API}/pods/{host.id}/"} if host else None,
        "disable_ipv4": False,
        "boot_disk": disks[0] if disks else None,
        "blockdevice_set": disks,
        "physicalblockdevice_set": disks,
        "virtualblockdevice_set": [],
        "volume_groups": [],
        "raids": [],
        "status_action": m.status_action,
        "status_message": m.status_message,
        "status_name": m.status.label,
        "node_type": 0,
        "node_type_name": "Machine",
        "special_filesystems": [],
        "parent": (
            {
                "system_id": host.host_system_id,
                "resource_uri": f"{API}/machines/{host.host_system_id}/",
                "__incomplete__": True,
            }
            if host is not None and host.host_system_id
            else None
        ),
        "default_gateways": {
            "ipv4": {"gateway_ip": gateway, "link_id": None},
            "ipv6": {"gateway_ip": None, "link_id": None},
        },
        "current_commissioning_result_id": m.id,
        "current_testing_result_id": m.id,
        "current_installation_result_id": None,
        "commissioning_status": 2,
        "commissioning_status_name": "Passed",
        "testing_status": 2,
        "testing_status_name": "Passed",
        "hardware_info": {
            "system_vendor": "Simulated",
            "system_product": "SimServer",
            "system_family": "Unknown",
            "system_version": "Unknown",
            "system_sku": "Unknown",
            "system_serial": m.system_id.upper(),
            "cpu_model": "Unknown",
            "mainboard_vendor": "Unknown",
            "mainboard_product": "Unknown",
            "mainboard_serial": "Unknown",
            "mainboard_version": "Unknown",
            "mainboard_firmware_vendor": "Unknown",
            "mainboard_firmware_date": "Unknown",
            "mainboard_firmware_version": "Unknown",
            "chassis_vendor": "Unknown",
            "chassis_type": "Unknown",
            "chassis_serial": "Unknown",
            "chassis_version": "Unknown",
        },
        "virtualmachine_id": m.virtualmachine_id,
        "numanode_set": [
            {"index": 0, "cores": list(range(m.cpu_count)), "memory": m.memory, "hugepages_set": []}
        ],
        "workload_annotations": dict(m.annotations),
        "last_sync": None,
        "sync_interval": None,
        "next_sync": None,
        "enable_hw_sync": m.enable_hw_sync,
        "enable_kernel_crash_dump": False,
        "is_dpu": False,
        "resource_uri": f"{API}/machines/{m.system_id}/",
    }
    for name in ("cpu", "memory", "network", "storage", "other", "interface"):
        out[f"{name}_test_status"] = 2
        out[f"{name}_test_status_name"] = "Passed"
    if maas4:
        del out["pod"], out["virtualmachine_id"]
    return out


def machine_bytes(state: State, m: Machine, maas4: bool = False) -> bytes:
    """The machine's JSON body, from the per-machine cache when it is still valid."""
    cached = m.cached_json
    if cached is None:
        cached = json.dumps(machine_dict(state, m, maas4)).encode()
        m.cached_json = cached
    return cached


def machines_bytes(state: State, machines: list[Machine], maas4: bool = False) -> bytes:
    return b"[" + b",".join(machine_bytes(state, m, maas4) for m in machines) + b"]"
