"""JSON shapes of MAAS 3.7 objects (``DISPLAYED_*_FIELDS`` plus ``resource_uri``).

Machine bodies are cached as bytes per machine and dropped on every change, so a list of 5,000 machines is a
``b",".join`` rather than 5,000 ``json.dumps`` calls.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from capmaas.simulator.models import (
    BootResource,
    DnsResource,
    Domain,
    Interface,
    Machine,
    Pool,
    Subnet,
    Tag,
    VmHost,
    Zone,
)
from capmaas.simulator.state import State

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


def vlan_json(s: Subnet) -> dict[str, Any]:
    return {
        "id": 5000 + s.vid,
        "name": "untagged" if s.vid == 0 else str(s.vid),
        "vid": s.vid,
        "fabric": "fabric-0",
        "fabric_id": 0,
        "mtu": 1500,
        "primary_rack": "rack01",
        "secondary_rack": None,
        "dhcp_on": True,
        "external_dhcp": None,
        "relay_vlan": None,
        "space": s.space,
        "resource_uri": f"{API}/vlans/{5000 + s.vid}/",
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
                "owner": {"username": "admin", "resource_uri": f"{API}/users/admin/"},
                "interface_set": [],
                "subnet": subnet_json(subnet) if subnet else None,
                "resource_uri": f"{API}/ipaddresses/",
            }
        )
    return {
        "id": r.id,
        "fqdn": fqdn,
        "address_ttl": r.address_ttl,
        "ip_addresses": ips,
        "resource_records": [],
        "resource_uri": f"{API}/dnsresources/{r.id}/",
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
                "id": p.id,
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


def interface_json(state: State, m: Machine, i: Interface) -> dict[str, Any]:
    subnet = state.subnets.get(i.subnet_id) if i.subnet_id is not None else None
    links: list[dict[str, Any]] = []
    if subnet is not None:
        link: dict[str, Any] = {
            "id": i.id,
            "mode": "static" if i.ip and not i.auto else "auto",
            "subnet": subnet_json(subnet),
        }
        if i.ip:
            link["ip_address"] = i.ip
        links.append(link)
    return {
        "system_id": m.system_id,
        "id": i.id,
        "name": i.name,
        "type": "physical",
        "vlan": vlan_json(subnet) if subnet else None,
        "mac_address": i.mac_address,
        "parents": [],
        "children": [],
        "tags": [],
        "enabled": True,
        "links": links,
        "params": "",
        "discovered": [],
        "effective_mtu": 1500,
        "vendor": "Simulated",
        "product": "NIC",
        "firmware_version": "1.0",
        "link_connected": True,
        "interface_speed": 10000,
        "link_speed": 10000,
        "numa_node": 0,
        "sriov_max_vf": 0,
        "resource_uri": f"{API}/nodes/{m.system_id}/interfaces/{i.id}/",
    }


def _block_device(m: Machine, index: int) -> dict[str, Any]:
    d = m.disks[index]
    return {
        "id": d.id,
        "name": d.name,
        "size": d.size,
        "tags": list(d.tags),
        "type": "physical",
        "path": f"/dev/disk/by-dname/{d.name}",
        "model": "SimDisk",
        "serial": f"SIM{d.id:08d}",
        "system_id": m.system_id,
        "resource_uri": f"{API}/nodes/{m.system_id}/blockdevices/{d.id}/",
    }


def machine_dict(state: State, m: Machine, maas4: bool = False) -> dict[str, Any]:
    domain = state.domains[m.domain_id]
    ifaces = [interface_json(state, m, i) for i in m.interfaces]
    disks = [_block_device(m, n) for n in range(len(m.disks))]
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
        "swap_size": None,
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
        "parent": None,
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
