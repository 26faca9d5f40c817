"""Shape conformance: simulator answers against the key/type table derived from MAAS's own API examples.

``maas_shapes.json`` (made by ``hack/maas_shapes.py`` from ``src/maasserver/api/examples/*.json`` of
canonical/maas at tag 3.7.3) lists, per resource, every key path with the JSON types MAAS's examples have and
whether every instance had the key. An answer conforms when every required key is there and each key's type
is one the examples show; ``null`` only where an example has ``null``; an integer where MAAS shows a float is
fine (one JSON number type; float-typed decoders take integers), the reverse is not. Paths whose only example
value is ``null`` say nothing about the type and accept anything. Keys MAAS's examples do not have are
allowed (newer fields). Every exception is in :data:`EXCEPTIONS`, with its reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("maas_shapes.json")

#: (resource, path glob) -> why the simulator differs from MAAS's examples there. The one place for them.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("machine", "*interface*.params"): (
        "The examples' physical interfaces show params as '' (their bond shows an object); a real MAAS "
        "3.7.3 region answers {} for a physical interface (shared/reference/maas-3.7.3-answers/"
        "machine_get.json, issue 12 item 6). The real answers win."
    ),
    ("device", "interface_set[].params"): "As ('machine', '*interface*.params'): {} in MAAS 3.7.3's answers.",
    ("machine", "*links[].subnet.vlan.secondary_rack"): (
        "null without a secondary rack controller, as the real MAAS 3.7.3 answers show (machine_get.json); "
        "the examples' region had one. interface_set[].vlan.secondary_rack is null in the examples too."
    ),
    ("ip_address", "subnet.vlan.secondary_rack"): "As ('machine', '*links[].subnet.vlan.secondary_rack').",
    ("node_device", "pci_address"): (
        "null for a USB device: models/nodedevice.py (3.7.3, l.119-138) says only PCIE devices have a "
        "pci_address (a nullable CharField); the one example is a PCIE device."
    ),
    ("ip_range", "subnet.vlan.secondary_rack"): "As ('machine', '*links[].subnet.vlan.secondary_rack').",
    ("machine", "status_message"): (
        "Node.status_message() (models/node.py) is None while the node has no status event, as for a VM "
        "composed with skip_commissioning; the examples' machines all had events."
    ),
    ("machine", "*links[].subnet"): (
        "A LINK_UP link without a subnet (the one a new bond or VLAN interface starts with, "
        "Interface.ensure_link_up) has no subnet key: the links serializer adds one only when the address "
        "row has a subnet (models/interface.py get_links). The examples' machines have no such link; the "
        "interface table already has links[].subnet optional."
    ),
    ("machine", "blockdevice_set[].filesystem.mount_point"): (
        "null for a formatted disk that is not mounted (FormatBlockDeviceForm leaves mount_point unset); "
        "the block_device table has it nullable, the machine examples only had mounted ones."
    ),
    ("dns_resource", "resource_records[]*"): (
        "MAAS's dnsresources example holds only implicit (id -1) node records, whose resource_records are "
        "rrdata dicts (DNSResourcesQuerySet); an explicit DNS resource's resource_records are DNSData "
        "objects emitted with DNSResourceRecordHandler's fields. Those are checked against "
        "'dns_resource_record' instead."
    ),
}
#: Table paths no simulator answer can exercise because the feature is not modelled (the arrays are always
#: empty, the objects never sent); reported in the figures, never silently skipped.
NOT_MODELLED: dict[str, tuple[str, ...]] = {
    "machine": (
        "volume_groups[]*",  # LVM
        "special_filesystems[]*",  # tmpfs/ramfs mounts
        "virtualblockdevice_set[]*",  # LVM logical volumes, RAID and bcache devices
        "*interface.tags[]",  # interface tags (no add_tag op)
        "interface_set[].tags[]",
    ),
    "interface": ("tags[]",),  # interface tags
    "device": ("interface_set[].tags[]",),
}
#: Resources MAAS has examples of that the simulator does not serve.
NOT_SERVED = {
    "partition": "blockdevices/{id}/partitions/ is not served; partitions appear nested in block devices",
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


def load_table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE_PATH.read_text())
    return data


@dataclass
class Report:
    resource: str
    answers: int = 0
    problems: list[str] = field(default_factory=list)
    exercised: set[str] = field(default_factory=set)
    excepted: set[str] = field(default_factory=set)


def match(path: str, glob: str) -> bool:
    """``*`` matches anything; everything else (``[]`` included) literally."""
    return re.fullmatch(re.escape(glob).replace(r"\*", ".*"), path) is not None


def excepted(resource: str, path: str) -> bool:
    return any(r == resource and match(path, glob) for r, glob in EXCEPTIONS)


def type_ok(ours: str, allowed: list[str]) -> bool:
    if allowed == ["null"]:
        return True
    return ours in allowed or (ours == "integer" and "float" in allowed)


def check(resource: str, table: dict[str, Any], answers: list[Any]) -> Report:
    """Check every answer of ``resource`` against its table."""
    spec = table[resource]
    fields: dict[str, Any] = spec["fields"]
    maps = set(spec["maps"])
    report = Report(resource, answers=len(answers))
    children: dict[str, list[str]] = {}
    for path in fields:
        parent = path.rsplit(".", 1)[0] if "." in path and not path.endswith("[]") else ""
        if not path.endswith("[]"):
            children.setdefault(parent, []).append(path)

    def walk(value: Any, path: str, where: str) -> None:
        if path:
            report.exercised.add(path)
            rule = fields.get(path)
            if rule is not None and not type_ok(json_type(value), rule["types"]):
                if excepted(resource, path):
                    report.excepted.add(path)
                else:
                    theirs = "|".join(rule["types"])
                    report.problems.append(
                        f"{where}: {path} is {json_type(value)}, MAAS's examples have {theirs}"
                    )
                return
        if isinstance(value, dict) and path not in maps:
            for child in children.get(path, []):
                key = child.rsplit(".", 1)[-1]
                if key not in value and fields[child]["required"]:
                    if excepted(resource, child):
                        report.excepted.add(child)
                    else:
                        report.problems.append(f"{where}: {child} is missing")
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key, where)
        elif isinstance(value, list):
            for item in value:
                walk(item, f"{path}[]", where)

    for n, answer in enumerate(answers):
        where = f"{resource}#{n}"
        if isinstance(answer, dict) and "resource_uri" in answer:
            where += f" ({answer['resource_uri']})"
        walk(answer, "", where)
    return report


def unexercised(resource: str, table: dict[str, Any], report: Report) -> list[str]:
    """Table paths no answer reached, beyond the not-modelled ones, the excepted ones and map contents."""
    spec = table[resource]
    maps = spec["maps"]
    out = []
    for path in spec["fields"]:
        if path in report.exercised or excepted(resource, path):
            continue
        if any(path.startswith(f"{m}.") for m in maps):
            continue
        if any(match(path, glob) for glob in NOT_MODELLED.get(resource, ())):
            continue
        out.append(path)
    return out
