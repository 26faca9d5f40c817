"""Fabrics, VLANs and spaces (M ``api/fabrics.py``, ``api/vlans.py``, ``api/spaces.py``), read-only.

Fabrics come from the inventory (``fabrics:``; fabric 0, ``fabric-0``, always exists); each carries the VLANs
it declares, a VLAN per distinct ``vid`` of its subnets, and the untagged VLAN always. A VLAN's id is
``models.vlan_id`` (fabric 0: ``5000 + vid``). A space per distinct subnet ``space`` name; VLANs and subnets
without a space belong to MAAS's placeholder space ``undefined`` (id -1), listed only when it has VLANs
(``SpacesQuerySet``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import Request, not_found
from capmaas_dev.simulator.models import Fabric, Subnet
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import API, subnet_json, vlan_json
from capmaas_dev.simulator.state import State

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

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


def all_vlans(state: State) -> list[tuple[Fabric, int, Subnet | None]]:
    """Every VLAN of every fabric: (fabric, vid, a subnet on it or None)."""
    return [(f, vid, s) for f in state.all_fabrics() for vid, s in state.vlans_of(f.id).items()]


def _vlan(fabric: Fabric, vid: int, subnet: Subnet | None) -> dict[str, Any]:
    return vlan_json(subnet) if subnet is not None else vlan_json(None, vid=vid, fabric=fabric)


def fabric_json(state: State, fabric: Fabric) -> dict[str, Any]:
    """``FabricHandler`` fields (M ``api/fabrics.py``: id, name, class_type, vlans)."""
    return {
        "id": fabric.id,
        "name": fabric.name,
        "class_type": fabric.class_type,
        "vlans": [_vlan(fabric, vid, s) for vid, s in state.vlans_of(fabric.id).items()],
        "resource_uri": f"{API}/fabrics/{fabric.id}/",
    }


def _fabric(sim: Simulator, req: Request) -> Fabric:
    """A fabric by id or name (``Fabric.objects.get_fabric_or_404`` specifiers)."""
    key = req.params.get("id", req.params.get("fabric_id", ""))
    for f in sim.state.all_fabrics():
        if key in (str(f.id), f.name):
            return f
    raise not_found("Fabric")


@fabrics_res.op("GET")
def list_fabrics(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List fabrics."""
    return [fabric_json(sim.state, f) for f in sim.state.all_fabrics()]


@fabric_res.op("GET")
def read_fabric(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a fabric (by id or name)."""
    return fabric_json(sim.state, _fabric(sim, req))


@vlans_res.op("GET")
def list_vlans(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List a fabric's VLANs."""
    fabric = _fabric(sim, req)
    return [_vlan(fabric, vid, s) for vid, s in sim.state.vlans_of(fabric.id).items()]


@vlan_res.op("GET")
def read_vlan(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a fabric's VLAN by its vid."""
    fabric = _fabric(sim, req)
    known = sim.state.vlans_of(fabric.id)
    vid = req.params["vid"]
    if not vid.isdigit() or int(vid) not in known:
        raise not_found("VLAN")
    return _vlan(fabric, int(vid), known[int(vid)])


@vlan_id_res.op("GET")
def read_vlan_by_id(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a VLAN by its id."""
    found = sim.state.vlan_by_id(req.params["vlan_id"])
    if found is None:
        raise not_found("VLAN")
    fabric_id, vid = found
    return _vlan(sim.state.fabric(fabric_id), vid, sim.state.vlans_of(fabric_id)[vid])


def _space_names(state: State) -> list[str]:
    return sorted({s.space for s in state.subnets.values() if s.space != UNDEFINED})


def space_json(state: State, name: str) -> dict[str, Any]:
    names = _space_names(state)
    sid = -1 if name == UNDEFINED else names.index(name) + 1
    subnets = [s for _, s in sorted(state.subnets.items()) if s.space == name]
    vlan_list = [_vlan(f, vid, s) for f, vid, s in all_vlans(state) if (s.space if s else UNDEFINED) == name]
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
    if any((s.space if s else UNDEFINED) == UNDEFINED for _, _, s in all_vlans(state)):
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
