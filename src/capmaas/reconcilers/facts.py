"""Pure facts about a MaasMachine and its relatives: user-data format, image, addresses, CAPI fields.

No I/O here; the lifecycle and both provisioners call these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pydantic

from capmaas import maas
from capmaas.api.v1beta1 import PROVISIONING_MODE_LXD, MaasClusterSpec, MaasMachineSpec
from capmaas.reconcilers.ports import Body

__all__ = [
    "addresses",
    "bootstrap_secret",
    "deploy_inputs",
    "describe",
    "detect_format",
    "distro_series",
    "infra_provisioned",
    "maas_text",
    "powered",
    "refusal_text",
    "registers_vm_host",
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


def describe(c: maas.AllocateConstraints) -> str:
    parts = [f"{k}={v}" for k, v in c.model_dump(exclude_defaults=True).items() if v not in (None, (), [])]
    return ", ".join(parts) or "(no constraints)"


def infra_provisioned(cluster: Body) -> bool:
    status = cluster.get("status") or {}
    init = status.get("initialization") or {}
    return bool(init.get("infrastructureProvisioned") or status.get("infrastructureReady"))


def bootstrap_secret(machine: Body) -> str | None:
    spec: Mapping[str, Any] = machine.get("spec") or {}
    name = (spec.get("bootstrap") or {}).get("dataSecretName")
    return str(name) if name else None


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


def deploy_inputs(spec: MaasMachineSpec, machine: Body | None) -> str:
    """A digest of what a deploy request sends that MAAS may refuse: image, kernel, deploy mode, the
    bootstrap Secret's name. A change of any of them is a new request worth a machine."""
    parts = [
        spec.image or "",
        spec.hwe_kernel or "",
        str(bool(spec.deploy_in_memory)),
        str(bool(spec.register_vm_host)),
        (bootstrap_secret(machine) if machine is not None else None) or "",
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def refusal_text(field_errors: Mapping[str, tuple[str, ...]], limit: int = 300) -> str:
    """MAAS's 400 form errors as ``field: message; ...``, cut to ``limit`` characters (a condition's text)."""
    text = "; ".join(f"{k}: {' '.join(v)}" for k, v in field_errors.items())
    return text if len(text) <= limit else f"{text[:limit]}…"


def maas_text(body: str, limit: int = 300) -> str:
    """MAAS's own words from an error body (e.g. how it resolved allocate constraints), one line, cut to
    ``limit`` characters for a condition or Event."""
    text = " ".join(body.split())
    return text if len(text) <= limit else f"{text[:limit]}…"
