"""MaasMachineTemplate ``status.capacity`` / ``status.nodeInfo`` for the cluster autoscaler's scale-from-zero.

CAPI's contract for infrastructure machine templates: a template that publishes ``status.capacity`` (and
``status.nodeInfo``) lets the cluster autoscaler build a MachineDeployment's node group from zero replicas.
The values follow from the template's spec alone (``capmaas.api.v1beta1.capacity_for``), so one thin event
handler writes them whenever a template is seen without them; no MAAS call is needed.

Only the leader writes (``active()``, given by the operator's wiring); the write goes through kopf's patch
of the event (the status subresource), and an unchanged status is never written again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from capmaas.api.v1beta1 import GROUP, MaasMachineTemplate, capacity_for

log = logging.getLogger(__name__)

PLURAL = "maasmachinetemplates"


def _always() -> bool:
    return True


def status_patch(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status merge patch that brings ``body`` up to date, or None when it is (or cannot be computed).

    Keys that the desired capacity no longer has are set to None, so a merge patch removes them.
    """
    try:
        template = MaasMachineTemplate.from_body(body)
    except ValidationError as exc:
        meta = body.get("metadata", {})
        log.warning(
            "MaasMachineTemplate %s/%s: cannot derive its capacity: %s",
            meta.get("namespace"), meta.get("name"), exc.errors()[0].get("msg", exc),
        )  # fmt: skip
        return None
    want = capacity_for(template.spec.template.spec).to_k8s()
    have = body.get("status") or {}
    if have.get("capacity") == want["capacity"] and have.get("nodeInfo") == want["nodeInfo"]:
        return None
    capacity: dict[str, Any] = dict.fromkeys(have.get("capacity") or {})
    capacity.update(want["capacity"])
    return {"capacity": capacity, "nodeInfo": want["nodeInfo"]}


def register(registry: kopf.OperatorRegistry, active: Callable[[], bool] = _always) -> None:
    """Attach the template handler; it writes only while ``active()`` (this process holds the Lease)."""

    @kopf.on.event(GROUP, PLURAL, registry=registry)
    async def maasmachinetemplate_event(
        type: str | None, body: kopf.Body, patch: kopf.Patch, **_: Any
    ) -> None:
        if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp") or not active():
            return
        update = status_patch(body)
        if update is not None:
            patch.status.update(update)
