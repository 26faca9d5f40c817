"""Pure facts about a MaasMachine and its relatives: user-data format, image, addresses, CAPI fields.

No I/O here (a MAAS answer withheld from a condition is logged); the lifecycle and both provisioners
call these.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pydantic

from capmaas import maas
from capmaas.api.related import CapiMachine
from capmaas.api.v1beta1 import PROVISIONING_MODE_LXD, MaasClusterSpec, MaasMachineSpec
from capmaas.api.v1beta1.selection import ROOT_LABEL
from capmaas.reconcilers.keys import (
    MACHINE_TYPE_LABEL,
    POOL_LABEL,
    REGION_LABEL,
    VM_HOST_LABEL,
    ZONE_LABEL,
)
from capmaas.reconcilers.ports import Body

log = logging.getLogger(__name__)

__all__ = [
    "addresses",
    "deploy_inputs",
    "describe",
    "detect_format",
    "distro_series",
    "maas_text",
    "node_labels",
    "powered",
    "refusal_text",
    "region_of",
    "registers_vm_host",
    "selection",
]


def detect_format(data: Mapping[str, bytes]) -> str:
    """``cloud-config`` or ``ignition``: the Secret's ``format`` key, else sniffed (HyperShift sends none)."""
    fmt = data.get("format")
    if fmt:
        return fmt.decode(errors="replace").strip()
    value = data.get("value", b"").lstrip()
    if value.startswith(b"{"):
        try:
            doc = json.loads(value)
        except ValueError:
            return "cloud-config"
        if isinstance(doc, dict) and "ignition" in doc:
            return "ignition"
    return "cloud-config"


def distro_series(image: str | None) -> str | None:
    """``ubuntu/jammy`` is passed as is (MAAS resolves ``os/series``); a bare name is a custom image."""
    if not image:
        return None
    return image if "/" in image else f"custom/{image}"


def powered(m: maas.Machine) -> bool | None:
    """``status.machinePowered``: True/False when MAAS reports on/off; None when it does not know
    (``unknown``: a ``manual`` machine, whose power MAAS never queries; ``error``: the query failed)."""
    if m.power_state == maas.PowerState.ON:
        return True
    if m.power_state == maas.PowerState.OFF:
        return False
    return None


def addresses(m: maas.Machine) -> list[dict[str, str]]:
    """InternalDNS = the future Node name (CSR approval needs it), Hostname, each IP as Internal/External."""
    out = [{"type": "Hostname", "address": m.hostname}, {"type": "InternalDNS", "address": m.hostname}]
    for ip in m.ip_addresses:
        out.append({"type": "InternalIP", "address": ip})
    for ip in m.ip_addresses:
        out.append({"type": "ExternalIP", "address": ip})
    return out


_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def node_labels(m: maas.Machine, region: str | None) -> dict[str, str]:
    """The labels a workload Node of machine ``m`` gets with its providerID: zone and region (what the
    scheduler's topology spreading and CAPI's failure domains mean on bare metal), the MAAS pool, bare metal
    or LXD VM, and a VM's VM host. A value that is not a valid label value (MAAS allows names Kubernetes
    does not) is left out rather than mangled."""
    vm = m.pod is not None
    want = {
        ZONE_LABEL: m.zone.name,
        REGION_LABEL: region or "",
        POOL_LABEL: m.pool.name if m.pool is not None else "",
        MACHINE_TYPE_LABEL: "lxd" if vm else "baremetal",
        VM_HOST_LABEL: m.pod.name if m.pod is not None else "",
    }
    return {k: v for k, v in want.items() if _LABEL_VALUE.match(v)}


def region_of(maascluster: Body | None, endpoint: str) -> str | None:
    """The MaasCluster's ``spec.region``, else the MAAS endpoint's host name (one MAAS region is one
    Kubernetes region)."""
    if maascluster is not None:
        try:
            region = MaasClusterSpec.model_validate(maascluster.get("spec") or {}).region
        except pydantic.ValidationError:
            region = None  # the cluster reconciler reports a spec it cannot read
        if region:
            return region
    return urlsplit(endpoint).hostname


def selection(spec: MaasMachineSpec) -> dict[str, Any]:
    """The MAAS allocate constraints a bare-metal spec's hardware fields mean (``AllocateConstraints``
    keywords), in MAAS 3.7's syntax (``node_constraint_filter_forms.py``): ``storage`` puts the root disk
    first
    (``root:<minDiskSize>[(tags)]``, ``nodes_by_storage`` takes the first entry as the disk holding ``/``) and
    is sent only when something asks for disks; ``devices`` is the one filter MAAS reads."""
    out: dict[str, Any] = {}
    if spec.architecture:
        out["arch"] = spec.architecture
    if spec.not_tags:
        out["not_tags"] = tuple(spec.not_tags)
    if spec.devices:
        out["devices"] = spec.devices[0].to_constraint()
    if spec.interfaces:
        out["interfaces"] = ";".join(i.to_constraint() for i in spec.interfaces)
    if spec.min_disk_size or spec.root_disk_tags or spec.extra_disks:
        root = f"{ROOT_LABEL}:{spec.min_disk_size or 0}"
        if spec.root_disk_tags:
            root += f"({','.join(spec.root_disk_tags)})"
        extra = [
            f"{d.label}:{d.size_gb}" + (f"({','.join(d.tags)})" if d.tags else "")
            for d in spec.extra_disks or ()
        ]
        out["storage"] = ",".join([root, *extra])
    return out


def describe(c: maas.AllocateConstraints) -> str:
    parts = [f"{k}={v}" for k, v in c.model_dump(exclude_defaults=True).items() if v not in (None, (), [])]
    return ", ".join(parts) or "(no constraints)"


def registers_vm_host(spec: MaasMachineSpec, maascluster: Body | None) -> bool:
    """Whether the deploy asks MAAS to register the machine as an LXD VM host (``register_vmhost``): its own
    ``registerVMHost``, or, for a bare-metal machine, its MaasCluster's ``lxdConfig.enabled`` (the Go
    provider's HCP mode, where every bare-metal machine of the cluster becomes a VM host)."""
    if spec.register_vm_host:
        return True
    if spec.provisioning_mode == PROVISIONING_MODE_LXD or maascluster is None:
        return False
    try:
        lxd = MaasClusterSpec.model_validate(maascluster.get("spec") or {}).lxd_config
    except pydantic.ValidationError:
        return False  # the cluster reconciler reports a spec it cannot read
    return bool(lxd is not None and lxd.enabled)


def deploy_inputs(spec: MaasMachineSpec, machine: CapiMachine | None) -> str:
    """A digest of what a deploy request sends that MAAS may refuse: image, kernel, deploy mode, the
    bootstrap Secret's name. A change of any of them is a new request worth a machine."""
    parts = [
        spec.image or "",
        spec.hwe_kernel or "",
        str(bool(spec.deploy_in_memory)),
        str(bool(spec.register_vm_host)),
        (machine.bootstrap_secret if machine is not None else None) or "",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


#: MAAS's own 409 phrasings (maas-api.md): only a body of one of these shapes is quoted in a condition.
_MAAS_409 = re.compile(
    r"No available machine matches constraints: .{0,600}"
    r"|No machine available\."
    r"|No machine with system ID [\w-]{1,40} available\."
    r"|Can't deploy a machine that is in the '[\w -]{1,40}' state\.?"
    r"|Can't start node: it hasn't been allocated\."
    r"|Can't allocate a machine belonging to another user\."
    r"|Invalid transition: [\w -]{1,40} -> [\w -]{1,40}\."
    r"|Cannot abort in current state: .{1,200}"
    r"|Machine\(s\) cannot be released in their current state: .{1,600}"
    r"|Unable to compose KVM instance in '[^']{1,100}'\. .{1,600}"
    r"|Unable to compose machine because: .{1,600}"
    r"|Not enough storage space on storage pools: .{1,600}"
)
#: What a MAAS form field name looks like (the keys of its 400 JSON).
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\u024f]")


def _clean(text: str) -> str:
    """One line of printable text: control characters (and anything that could pass for markup in an
    exotic script) replaced, whitespace runs collapsed."""
    return _UNPRINTABLE.sub("?", " ".join(text.split()))


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"


def _form_errors(body: str) -> dict[str, list[str]] | None:
    """MAAS's 400 answer shape, ``{"field": ["message", ...], ...}``, or None for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data:
        return None
    out: dict[str, list[str]] = {}
    for key, value in data.items():
        messages = [value] if isinstance(value, str) else value
        if not _FIELD.fullmatch(key) or not isinstance(messages, list) or not messages:
            return None
        if not all(isinstance(m, str) for m in messages):
            return None
        out[key] = messages
    return out


def refusal_text(field_errors: Mapping[str, tuple[str, ...]], limit: int = 300) -> str:
    """MAAS's 400 form errors as ``field: message; ...``, one sanitised line cut to ``limit`` characters
    (a condition's text); field names not of MAAS's form-field shape are left out."""
    text = "; ".join(f"{k}: {_clean(' '.join(v))}" for k, v in field_errors.items() if _FIELD.fullmatch(k))
    return _bounded(text, limit)


def maas_text(body: str, status: int = 409, limit: int = 300) -> str:
    """What a condition or Event may quote of a MAAS error answer (e.g. how MAAS resolved allocate
    constraints): only a body of MAAS's own answer shape (its form-error JSON, or one of its known 409
    phrasings), as one sanitised line cut to ``limit`` characters.

    Anything else is withheld: a tenant's endpoint may be any HTTP service (a server-side request forgery
    vector), and its answer must not be readable through a condition. The withheld body goes to the
    operator's log, cut short.
    """
    fields = _form_errors(body)
    if fields is not None:
        return refusal_text({k: tuple(v) for k, v in fields.items()}, limit)
    text = " ".join(body.split())
    if len(text) <= 1000 and _MAAS_409.fullmatch(text):
        return _bounded(_clean(text), limit)
    log.info("MAAS answered %s; body withheld from conditions: %r", status, body[:500])
    return f"MAAS answered {status} (body withheld; see the operator log)"
