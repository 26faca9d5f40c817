"""Derive tests/conformance/maas_shapes.json from MAAS's own example API answers.

MAAS keeps example answers of its API 2.0 in ``src/maasserver/api/examples/*.json``. This reads them from a
``canonical/maas`` git checkout at a tag and writes, per resource, every key path (nested objects as
``a.b``, list elements as ``a[]``) with the JSON types seen there and whether every instance had the key.
The table holds facts (names and types), not the examples themselves.

    python hack/maas_shapes.py /path/to/maas.git 3.7.3 > tests/conformance/maas_shapes.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from typing import Any

#: resource -> [(examples file, key in it)]; a list answer contributes each element.
SOURCES: dict[str, list[tuple[str, str]]] = {
    "machine": [
        ("machines.json", k)
        for k in (
            "machines-update",
            "machines-deploy",
            "machines-release",
            "machines-commission",
            "machines-set-storage",
            "machines-mount-special",
            "machines-unmount-special",
            "machines-clear-gateways",
            "machines-restore-networking",
            "machines-restore-storage",
            "machines-restore-default",
            "machines-mark-broken",
            "machines-mark-fixed",
            "machines-rescue-mode",
            "machines-exit-rescue-mode",
            "machines-lock",
            "machines-unlock",
            "machines-create",
            "machines-allocate",
        )
    ],
    "interface": [
        ("nodes.json", k)
        for k in (
            "interfaces-read",
            "interfaces-create-physical",
            "interfaces-create-bond",
            "interfaces-create-bridge",
            "interfaces-read-by-id",
            "interfaces-update",
            "interfaces-link-subnet",
            "interfaces-unlink-subnet",
            "interfaces-disconnect",
            "interfaces-set-def-gateway",
            "interfaces-add-tag",
            "interfaces-remove-tag",
        )
    ],
    "block_device": [
        ("nodes.json", k)
        for k in (
            "block-devs-read",
            "block-devs-create",
            "block-devs-read-by-id",
            "block-devs-update",
            "block-devs-add-tag",
            "block-devs-remove-tag",
            "block-devs-format",
            "block-devs-unformat",
            "block-devs-mount",
            "block-devs-unmount",
        )
    ],
    "partition": [
        ("nodes.json", k)
        for k in (
            "partitions-read",
            "partitions-read-by-id",
            "partitions-format",
            "partitions-unformat",
            "partitions-mount",
            "partitions-unmount",
            "partitions-add-tag",
            "partitions-rem-tag",
            "partitions-create",
        )
    ],
    "power_state": [("nodes.json", "query-power-state")],
    "node_device": [("nodes.json", "node-devices-read-by-id")],
    "vm_host": [
        ("vm-hosts.json", k)
        for k in ("read-vmhosts", "add-tag", "remove-tag", "create", "refresh-vmhost", "update-vmhost")
    ],
    "vm_host_compose": [("vm-hosts.json", "compose")],
    "tag": [("tags.json", k) for k in ("get-tags", "get-tag-by-name", "add-tag", "update-tag")],
    "tag_update_nodes": [("tags.json", "update-nodes-tag")],
    "tag_rebuild": [("tags.json", "rebuild-tag")],
    "user": [("users.json", k) for k in ("create", "read", "whoami", "list")],
    "version": [("version.json", "version")],
    "boot_resource": [("boot-resources.json", "boot-res-read")],
    "boot_resource_detail": [("boot-resources.json", k) for k in ("boot-res-read-by-id", "boot-res-create")],
    "subnet": [
        ("subnets.json", k) for k in ("subnets-read", "subnets-create", "subnets-read-by-id", "subnets-update")
    ],
    "domain": [
        ("domains.json", k)
        for k in ("domains-read", "domains-create", "domains-read-by-id", "domains-update", "domains-set-default")
    ],
    "dns_resource": [
        ("dnsresources.json", k)
        for k in ("dnsresources-read", "dnsresources-create", "dnsresources-read-by-id", "dnsresources-update")
    ],
    "dns_resource_record": [
        ("dnsresourcerecords.json", k)
        for k in (
            "dnsresourcerecords-read",
            "dnsresourcerecords-create",
            "dnsresourcerecords-read-by-id",
            "dnsresourcerecords-update",
        )
    ],
    "fabric": [
        ("fabrics.json", k) for k in ("fabrics-read", "fabrics-create", "fabrics-read-by-id", "fabrics-update")
    ],
    "vlan": [("fabrics.json", k) for k in ("vlan-list", "vlan-create", "vlan-read", "vlan-update")],
    "space": [("spaces.json", k) for k in ("read-spaces", "create", "read-a-space", "update-a-space")],
    "device": [
        ("devices.json", k)
        for k in ("devices-update", "devices-restore-network-conf", "devices-restore-default-conf", "devices-create")
    ],
    "ip_address": [("ipaddresses.json", k) for k in ("ipaddresses-reserve", "ipaddresses-read")],
    "ip_range": [
        ("ipranges.json", k)
        for k in ("ipranges-read", "ipranges-create", "ipranges-read-by-id", "ipranges-update")
    ],
    "account_token": [("account.json", "account-list-tokens")],
    "account_new_token": [("account.json", "account-create-token")],
}
#: Objects whose keys are data (annotation names, image versions, file names, storage labels), not schema:
#: the table records their type and stops there.
MAPS: dict[str, set[str]] = {
    "machine": {"owner_data", "workload_annotations", "constraints_by_type"},
    "device": {"owner_data", "workload_annotations"},
    "boot_resource_detail": {"sets"},
}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def walk(value: Any, path: str, maps: set[str], out: dict[str, Any]) -> None:
    """Record ``path``'s type; for an object, how many instances there were and which keys each had."""
    out["types"][path].add(json_type(value))
    if isinstance(value, dict) and path not in maps:
        out["instances"][path] += 1
        for key, child in value.items():
            child_path = f"{path}.{key}" if path else key
            out["present"][child_path] += 1
            walk(child, child_path, maps, out)
    elif isinstance(value, list):
        for item in value:
            walk(item, f"{path}[]", maps, out)


def parent_of(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


def derive(read: Any) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for resource, sources in SOURCES.items():
        acc: dict[str, Any] = {
            "types": defaultdict(set),
            "instances": defaultdict(int),
            "present": defaultdict(int),
        }
        used = []
        for filename, key in sources:
            example = read(filename)[key]
            items = example if isinstance(example, list) else [example]
            for item in items:
                walk(item, "", MAPS.get(resource, set()), acc)
            used.append(f"{filename}:{key}")
        fields = {}
        for path, types in sorted(acc["types"].items()):
            if not path:
                continue
            parent = parent_of(path)
            required = acc["present"].get(path, 0) == acc["instances"].get(parent, 0) if not path.endswith("[]") else True
            fields[path] = {"types": sorted(types), "required": required}
        table[resource] = {"examples": used, "maps": sorted(MAPS.get(resource, ())), "fields": fields}
    return table


def main(argv: list[str]) -> int:
    repo, tag = argv[1], argv[2]
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=True
    ).stdout.strip()

    def read(filename: str) -> Any:
        text = subprocess.run(
            ["git", "-C", repo, "show", f"{commit}:src/maasserver/api/examples/{filename}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(text)

    out = {
        "_source": {
            "repository": "canonical/maas",
            "tag": tag,
            "commit": commit,
            "files": "src/maasserver/api/examples/*.json",
            "derived_by": "hack/maas_shapes.py",
        },
        **derive(read),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
