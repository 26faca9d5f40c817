"""A scripted fake MAAS for unit tests: routes keyed by (method, path, op); anything else fails the test.

Tests that need a *behaving* MAAS use the simulator (tests/integration); these fakes pin the wire format:
exactly which method, path, query and form fields the client sends, and how it reads each kind of answer.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx

API = "/MAAS/api/2.0/"
URL = "http://127.0.0.1:5240/MAAS"
# 18:18:32 like a real MAAS key, so each part is distinctive enough to look for in output.
API_KEY = "SkTvsyHhzkREvvdtNk:Ywn5FvXVupVPvNUhrN:cm3Q2f5naXYPYsrPDPfQy9Q9cUFaEgbM"
KEY_PARTS = tuple(API_KEY.split(":"))

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]

MACHINE: dict[str, Any] = {
    "system_id": "abc123",
    "hostname": "node-1",
    "fqdn": "node-1.maas",
    "status": 4,
    "status_name": "Ready",
    "status_message": None,
    "power_state": "off",
    "power_type": "ipmi",
    "zone": {"id": 1, "name": "default", "description": "", "resource_uri": "/MAAS/api/2.0/zones/default/"},
    "pool": {"id": 0, "name": "default", "description": "Default pool", "resource_uri": "/x/"},
    "tag_names": ["gpu", "ssd"],
    "ip_addresses": ["10.0.0.5"],
    "interface_set": [
        {
            "id": 7,
            "name": "eth0",
            "type": "physical",
            "mac_address": "52:54:00:00:00:01",
            "enabled": True,
            "tags": [],
            "vlan": {"id": 5001, "name": "untagged", "vid": 0, "fabric": "fabric-0", "fabric_id": 0},
            "links": [
                {
                    "id": 3,
                    "mode": "auto",
                    "ip_address": "10.0.0.5",
                    "subnet": {"id": 1, "name": "10.0.0.0/24", "cidr": "10.0.0.0/24", "vlan": None},
                }
            ],
            "numa_node": 0,
        }
    ],
    "owner": None,
    "owner_data": {},
    "workload_annotations": {},
    "cpu_count": 4,
    "memory": 8192,
    "storage": 256060.5,
    "architecture": "amd64/generic",
    "osystem": "",
    "distro_series": "",
    "error_description": "",
    "pod": None,
    "virtualmachine_id": None,
    "hardware_info": {"system_vendor": "Unknown"},
    "resource_uri": "/MAAS/api/2.0/machines/abc123/",
}

VM_HOST: dict[str, Any] = {
    "id": 3,
    "name": "kvm-1",
    "type": "lxd",
    "tags": ["pod"],
    "architectures": ["amd64/generic"],
    "capabilities": ["composable", "over_commit", "storage_pools"],
    "total": {"cores": 32, "memory": 65536, "local_storage": 1000000000000},
    "used": {"cores": 4, "memory": 8192, "local_storage": 20000000000},
    "available": {"cores": 28, "memory": 57344, "local_storage": 980000000000},
    "zone": {"id": 1, "name": "default"},
    "pool": {"id": 0, "name": "default"},
    "cpu_over_commit_ratio": 2.0,
    "memory_over_commit_ratio": 1.5,
    "storage_pools": [
        {
            "id": "p1",
            "name": "default",
            "type": "zfs",
            "path": "/var/lib/lxd",
            "total": 1000000000000,
            "used": 20000000000,
            "available": 980000000000,
            "default": True,
        }
    ],
    "host": {"system_id": "host01", "__incomplete__": True},
    "default_macvlan_mode": None,
    "version": "5.21",
}


def machine(**changes: Any) -> dict[str, Any]:
    """The sample machine JSON with some fields changed."""
    data = copy.deepcopy(MACHINE)
    data.update(changes)
    return data


def ok(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=data, headers=headers)


def text(status: int, body: str = "", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, text=body, headers=headers)


def form_of(request: httpx.Request) -> list[tuple[str, str]]:
    """The urlencoded body as ordered (key, value) pairs, repeated keys kept."""
    return parse_qsl(
        request.content.decode("ascii"), keep_blank_values=True, strict_parsing=bool(request.content)
    )


def query_of(request: httpx.Request) -> list[tuple[str, str]]:
    return list(request.url.params.multi_items())


@dataclass
class FakeMaas:
    """Route table + request log; a reply list answers successive calls (for retry tests)."""

    routes: dict[tuple[str, str, str | None], list[Reply]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def route(self, method: str, path: str, op: str | None, *replies: Reply) -> None:
        self.routes[(method, API + path, op)] = list(replies)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = (request.method, request.url.raw_path.decode().split("?")[0], request.url.params.get("op"))
        replies = self.routes.get(key)
        if not replies:
            raise AssertionError(f"unexpected request {key} (routes: {sorted(map(str, self.routes))})")
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        return reply(request) if callable(reply) else reply

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


def dumps(data: Any) -> str:
    return json.dumps(data)
