"""``_View.glance``: the view a caller reads and drops at once (session 40: the identity checks' reading of a
MaasMachine's references deep-copied the whole object first). It is the view ``from_body`` makes, or the same
error; only a plain dict is parsed without the copy, so the view may hold the body's own values."""

from __future__ import annotations

import types
from typing import Any

import pytest
from pydantic import ValidationError

from capmaas.api.related import CapiMachine, MaasMachineView
from capmaas.reconcilers import identity

ADDRESS = {"type": "InternalIP", "address": "10.0.0.5"}


def maasmachine() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w0",
            "namespace": "ns",
            "uid": "u",
            "annotations": {"capmaas.infrastructure.cluster.x-k8s.io/allocating": "2026-11-28T08:00:00Z"},
        },
        "spec": {"systemID": "abc", "failureDomain": "z1"},
        "status": {"addresses": [dict(ADDRESS)], "machineState": "Deployed"},
    }


def frozen(value: Any) -> Any:
    """``value`` with every dict a read-only mapping view (what kopf hands out)."""
    if isinstance(value, dict):
        return types.MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return [frozen(v) for v in value]
    return value


BODIES = [
    maasmachine(),
    {"metadata": None, "spec": None, "status": None},
    {},
    {"metadata": {"annotations": None}, "spec": {"systemID": ""}, "status": {"addresses": None}},
    frozen(maasmachine()),
    {"metadata": {"name": "w1"}, "status": {"addresses": [frozen(ADDRESS)]}},
]


@pytest.mark.parametrize("body", BODIES)
def test_a_glance_is_the_view_from_body_makes(body: Any) -> None:
    assert MaasMachineView.glance(body) == MaasMachineView.from_body(body)
    assert CapiMachine.glance(body) == CapiMachine.from_body(body)


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"annotations": {"a": 1}}},
        {"spec": {"systemID": ["x"]}},
        frozen({"status": {"machinePowered": "perhaps"}}),
    ],
)
def test_a_body_the_view_refuses_fails_the_same_way(body: Any) -> None:
    with pytest.raises(ValidationError) as glanced:
        MaasMachineView.glance(body)
    with pytest.raises(ValidationError) as parsed:
        MaasMachineView.from_body(body)
    assert glanced.value.errors() == parsed.value.errors()


def test_a_plain_dict_is_parsed_without_a_copy() -> None:
    body = maasmachine()
    assert MaasMachineView.glance(body).status.addresses[0] is body["status"]["addresses"][0]
    assert MaasMachineView.from_body(body).status.addresses[0] is not body["status"]["addresses"][0]


def test_a_mapping_view_is_parsed_from_a_plain_copy() -> None:
    body = frozen(maasmachine())
    assert type(MaasMachineView.glance(body).status.addresses[0]) is dict  # not the read-only view


def test_the_references_read_are_the_same() -> None:
    for body in BODIES:
        assert identity.machine_references(body) == identity._references(MaasMachineView.from_body(body))
    assert identity.machine_references(maasmachine()) == [
        "spec.systemID=abc",
        "capmaas.infrastructure.cluster.x-k8s.io/allocating",
    ]
