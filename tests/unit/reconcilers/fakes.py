"""A small in-memory stand-in for *our own* Kubernetes port (not for Kubernetes itself).

Used only where the apiserver is beside the point: the reconcilers' domain rules against the real simulator.
Patches are applied as JSON merge patches with a resourceVersion bump, like the apiserver does; a patch that
names a ``metadata.resourceVersion`` other than the stored one is refused as the apiserver refuses it (409,
which our port turns into :class:`~capmaas.reconcilers.errors.ConflictError`, as
:class:`~capmaas.operator.kube.KubeAdapter` does), and applied writes are checked like the apiserver's
``fieldValidation=Strict``: a field the MaasMachine/MaasCluster models do not have (a
mistyped key), or a value of the wrong type, fails the write (the apiserver would prune the one silently by
default and refuse the other).
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from capmaas.api.v1beta1 import MaasCluster, MaasMachine
from capmaas.reconcilers.errors import ConflictError
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL
from capmaas.reconcilers.ports import (
    Body,
    CapiPlural,
    EventType,
    NamespaceAllowList,
    NodePatch,
    NodePatchResult,
    ObjectPlural,
    Unwatched,
)
from capmaas.reconcilers.siblings import ZoneTally

MODELS: dict[str, type[pydantic.BaseModel]] = {"maasmachines": MaasMachine, "maasclusters": MaasCluster}


class StrictFieldError(Exception):
    """What the apiserver answers a ``fieldValidation=Strict`` write with an unknown field (HTTP 400/422)."""


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The pydantic model inside ``X | None``, ``list[X]``, ``Annotated[X, ...]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def unknown_fields(model: type[pydantic.BaseModel], data: Any, path: str) -> list[str]:
    """Keys in ``data`` (recursively) that ``model`` has no field for, by wire name."""
    if isinstance(data, list):
        return [u for i, item in enumerate(data) for u in unknown_fields(model, item, f"{path}[{i}]")]
    if not isinstance(data, Mapping):
        return []
    fields = {f.alias or name: f for name, f in model.model_fields.items()}
    out: list[str] = []
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            out.append(f"{path}.{key}")
            continue
        sub = _model_in(field.annotation)
        if sub is not None and value is not None:
            out += unknown_fields(sub, value, f"{path}.{key}")
    return out


def check_strict(plural: str, patch: Mapping[str, Any], merged: Mapping[str, Any]) -> None:
    model = MODELS.get(plural)
    if model is None:
        return
    fields = model.model_fields
    unknown: list[str] = []
    for part in ("spec", "status"):
        sub = _model_in(fields[part].annotation)
        assert sub is not None
        unknown += unknown_fields(sub, patch.get(part) or {}, part)
        try:
            sub.model_validate(merged.get(part) or {})
        except pydantic.ValidationError as exc:
            if part == "status" or "spec" in patch:
                raise StrictFieldError(f"{plural}: invalid {part} after the patch: {exc}") from exc
    if unknown:
        raise StrictFieldError(f'{plural}: strict decoding error: unknown field "{", ".join(unknown)}"')


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


#: The namespace the unit tests' objects live in, allowed to use the default credentials.
ALLOWED = NamespaceAllowList(frozenset({"ns"}))


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}  # name -> labels
        self.nodes: dict[str, str] = {}  # node name -> providerID ("" = unset)
        self.node_labels: dict[str, dict[str, str]] = {}  # node name -> its labels
        self.events: list[tuple[str, str, str, str]] = []
        self.writes = 0
        self.conflicts = 0  # patches refused by their resourceVersion precondition (409)
        # Owners a watch filter keeps out of the cache, by (plural, namespace, name), and the reads of them.
        self.unwatched: dict[tuple[str, str, str], Unwatched] = {}
        self.unwatched_reads = 0
        # MaasMachines the watch cache has not listed yet (start-up), by name; and the LISTs sent.
        self.unlisted: set[str] = set()
        self.lists = 0
        self._rv = 1

    # helpers for tests
    def add(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", "ns")
        meta.setdefault("uid", f"uid-{plural}-{meta['name']}")
        meta.setdefault("generation", 1)
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        self.objects[(plural, meta["namespace"], meta["name"])] = body
        return body

    def get(self, plural: str, name: str, namespace: str = "ns") -> dict[str, Any]:
        return self.objects[(plural, namespace, name)]

    def reasons(self) -> list[str]:
        return [e[2] for e in self.events]

    # KubePort
    def get_machine(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("machines", namespace, name))

    def get_cluster(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("clusters", namespace, name))

    def get_maascluster(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("maasclusters", namespace, name))

    def get_template(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("maasmachinetemplates", namespace, name))

    async def read_unwatched(self, plural: CapiPlural, namespace: str, name: str) -> Unwatched | None:
        self.unwatched_reads += 1
        return self.unwatched.get((plural, namespace, name))

    def maasmachines_naming(self, system_id: str) -> Sequence[Body]:
        return [
            b
            for (p, _, _), b in self.objects.items()
            if p == "maasmachines" and (b.get("spec") or {}).get("systemID") == system_id
        ]

    def list_maasmachines(self, namespace: str, cluster_name: str) -> Sequence[Body]:
        return [
            b
            for b in self._maasmachines(namespace, cluster_name)
            if b["metadata"]["name"] not in self.unlisted
        ]

    async def live_maasmachines(
        self, namespace: str, cluster_name: str, *, control_plane: bool = False, limit: int | None = None
    ) -> Sequence[Body]:
        self.lists += 1
        found = [
            b
            for b in self._maasmachines(namespace, cluster_name)
            if not control_plane or CONTROL_PLANE_LABEL in (b["metadata"].get("labels") or {})
        ]
        return found[:limit] if limit else found

    def _maasmachines(self, namespace: str, cluster_name: str) -> list[Body]:
        return [
            b
            for (p, ns, _), b in self.objects.items()
            if p == "maasmachines"
            and ns == namespace
            and (b["metadata"].get("labels") or {}).get(CLUSTER_NAME_LABEL) == cluster_name
        ]

    def zone_tally(self, namespace: str, cluster_name: str) -> ZoneTally:
        # From the listing at each call (the real cache keeps it up to date): a test that makes the listing
        # stale makes this stale too.
        return ZoneTally.of(self.list_maasmachines(namespace, cluster_name))

    async def get_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.secrets.get((namespace, name))

    async def read_secret_fresh(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self.secrets.get((namespace, name))

    async def get_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.configmaps.get((namespace, name))

    async def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    async def patch(
        self, plural: ObjectPlural, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            return None
        # The apiserver's precondition: a resourceVersion in the patch must be the stored one (a null one, as
        # in any merge patch, means "not given"); the main resource and the status subresource alike.
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise ConflictError(
                f"Operation cannot be fulfilled on {plural} {name!r}: the object has been modified; "
                "please apply your changes to the latest version and try again"
            )
        self.writes += 1
        patch = copy.deepcopy(dict(body))
        if status:
            patch = {"status": patch["status"]}
        else:
            patch.pop("status", None)
            patch.get("metadata", {}).pop("resourceVersion", None)
        merged = merge(copy.deepcopy(obj), patch)
        check_strict(plural, patch, merged)
        obj.clear()
        obj.update(merged)
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            del self.objects[(plural, namespace, name)]
        return copy.deepcopy(obj)

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str, labels: Mapping[str, str]
    ) -> NodePatch:
        if node_name not in self.nodes:
            return NodePatch(NodePatchResult.NOT_FOUND, "")
        current = self.nodes[node_name]
        if current and current != provider_id:
            return NodePatch(NodePatchResult.CONFLICT, current)
        have = self.node_labels.setdefault(node_name, {})
        kept = {k: have[k] for k, v in labels.items() if k in have and have[k] != v}
        missing = {k: v for k, v in labels.items() if k not in have}
        if current == provider_id and not missing:
            return NodePatch(NodePatchResult.ALREADY_SET, current, kept)
        have.update(missing)
        self.nodes[node_name] = provider_id
        return NodePatch(NodePatchResult.PATCHED, provider_id, kept)

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], type, reason, message))

    # Cluster API IPAM: claims and addresses as plain stored objects (the test plays the IPAM provider, or
    # none: the MaasMachine side works with any provider's answer)
    def get_ip_claim(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("ipaddressclaims", namespace, name))

    def get_ip_address(self, namespace: str, name: str) -> Body | None:
        return self.objects.get(("ipaddresses", namespace, name))

    async def create_ip_claim(self, namespace: str, body: Mapping[str, Any]) -> Body | None:
        name = body["metadata"]["name"]
        if ("ipaddressclaims", namespace, name) in self.objects:
            return None
        self.writes += 1
        return self.add("ipaddressclaims", copy.deepcopy(dict(body)))

    async def delete_ip_claim(self, namespace: str, name: str) -> None:
        if self.objects.pop(("ipaddressclaims", namespace, name), None) is not None:
            self.writes += 1
