"""Fabrics, VLANs and spaces (M ``api/fabrics.py``, ``api/vlans.py``, ``api/spaces.py``), read-only.

They are derived from the subnets: one fabric (``fabric-0``, id 0) carrying a VLAN per distinct ``vid`` (the
untagged VLAN always), and a space per distinct subnet ``space`` name. VLANs and subnets without a space
belong to MAAS's placeholder space ``undefined`` (id -1), listed only when it has VLANs (``SpacesQuerySet``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capmaas.simulator.http import Request, not_found
from capmaas.simulator.models import Subnet
from capmaas.simulator.router import Resource, resource
from capmaas.simulator.serialize import API, FABRIC_ID, FABRIC_NAME, VLAN_ID_BASE, subnet_json, vlan_json
from capmaas.simulator.state import State

if TYPE_CHECKING:
    from capmaas.simulator.core import Simulator

RESOURCES: list[Resource] = []
fabrics_res = resource(RESOURCES, "FabricsHandler", "fabrics/")
fabric_res = resource(RESOURCES, "FabricHandler", "fabrics/{id}/")
vlans_res = resource(RESOURCES, "VlansHandler", "fabrics/{fabric_id}/vlans/")
vlan_res = resource(RESOURCES, "VlanHandler", "fabrics/{fabric_id}/vlans/{vid}/")
vlan_id_res = resource(RESOURCES, "VlanHandler", "vlans/{vlan_id}/", described=False)
spaces_res = resource(RESOURCES, "SpacesHandler", "spaces/")
space_res = resource(RESOURCES, "SpaceHandler", "spaces/{id}/")
UNDEFINED = "undefined"
UNDEFINED_DESCRIPTION = (
    "Backward compatibility object to ensure objects not associated with a space can be found."
)


def vlans(state: State) -> dict[int, Subnet | None]:
    """vid -> a subnet on it (its space names the VLAN's), the untagged VLAN always present."""
    out: dict[int, Subnet | None] = {0: None}
    for _, s in sorted(state.subnets.items()):
        if out.get(s.vid) is None:
            out[s.vid] = s
    return dict(sorted(out.items()))


def _vlan(vid: int, subnet: Subnet | None) -> dict[str, Any]:
    return vlan_json(subnet, vid=vid)


def fabric_json(state: State) -> dict[str, Any]:
    return {
        "id": FABRIC_ID,
        "name": FABRIC_NAME,
        "class_type": None,
        "vlans": [_vlan(vid, s) for vid, s in vlans(state).items()],
        "resource_uri": f"{API}/fabrics/{FABRIC_ID}/",
    }


def _fabric(req: Request) -> None:
    key = req.params.get("id", req.params.get("fabric_id", ""))
    if key not in (str(FABRIC_ID), FABRIC_NAME):
        raise not_found("Fabric")


@fabrics_res.op("GET")
def list_fabrics(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List fabrics."""
    return [fabric_json(sim.state)]


@fabric_res.op("GET")
def read_fabric(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a fabric (by id or name)."""
    _fabric(req)
    return fabric_json(sim.state)


@vlans_res.op("GET")
def list_vlans(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List a fabric's VLANs."""
    _fabric(req)
    return [_vlan(vid, s) for vid, s in vlans(sim.state).items()]


@vlan_res.op("GET")
def read_vlan(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a fabric's VLAN by its vid."""
    _fabric(req)
    known = vlans(sim.state)
    vid = req.params["vid"]
    if not vid.isdigit() or int(vid) not in known:
        raise not_found("VLAN")
    return _vlan(int(vid), known[int(vid)])


@vlan_id_res.op("GET")
def read_vlan_by_id(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a VLAN by its id."""
    known = vlans(sim.state)
    key = req.params["vlan_id"]
    vid = int(key) - VLAN_ID_BASE if key.isdigit() else -1
    if vid not in known:
        raise not_found("VLAN")
    return _vlan(vid, known[vid])


def _space_names(state: State) -> list[str]:
    return sorted({s.space for s in state.subnets.values() if s.space != UNDEFINED})


def space_json(state: State, name: str) -> dict[str, Any]:
    names = _space_names(state)
    sid = -1 if name == UNDEFINED else names.index(name) + 1
    subnets = [s for _, s in sorted(state.subnets.items()) if s.space == name]
    vlan_list = [_vlan(vid, s) for vid, s in vlans(state).items() if (s.space if s else UNDEFINED) == name]
    return {
        "id": sid,
        "name": name,
        "description": UNDEFINED_DESCRIPTION if name == UNDEFINED else "",
        "vlans": vlan_list,
        "subnets": [subnet_json(s) for s in subnets],
        "resource_uri": f"{API}/spaces/{UNDEFINED if sid == -1 else sid}/",
    }


@spaces_res.op("GET")
def list_spaces(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List spaces; ``undefined`` last, when some VLAN has no space."""
    state = sim.state
    out = [space_json(state, n) for n in _space_names(state)]
    if any((s.space if s else UNDEFINED) == UNDEFINED for s in vlans(state).values()):
        out.append(space_json(state, UNDEFINED))
    return out


@space_res.op("GET")
def read_space(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a space by id or name (``-1``/``undefined`` is the placeholder space)."""
    names = _space_names(sim.state)
    key = req.params["id"]
    if key in ("-1", UNDEFINED):
        return space_json(sim.state, UNDEFINED)
    if key.isdigit() and 1 <= int(key) <= len(names):
        return space_json(sim.state, names[int(key) - 1])
    if key in names:
        return space_json(sim.state, key)
    raise not_found("Space")
