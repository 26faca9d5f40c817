"""Models: frozen, tolerant of new MAAS fields, strict about the ones we need; request forms."""

from __future__ import annotations

import pydantic
import pytest
from maas_fakes import machine

from capmaas.maas import AllocateConstraints, ComposeRequest, Machine, NodeStatus, PowerState


def test_machine_ignores_unknown_fields_and_is_frozen() -> None:
    m = Machine.model_validate(machine(brand_new_field={"x": 1}))
    assert not hasattr(m, "brand_new_field")
    with pytest.raises(pydantic.ValidationError):
        m.hostname = "other"  # type: ignore[misc]


def test_node_status_names_match_maas() -> None:
    assert NodeStatus(11).name == "FAILED_DEPLOYMENT"
    assert int(NodeStatus.FAILED_DISK_ERASING) == 15
    assert NodeStatus.TESTING.filter_name == "testing"
    assert len(NodeStatus) == 24  # MAAS's 23 codes and our UNKNOWN (-1) for a code newer than these
    assert [s for s in NodeStatus if s < 0] == [NodeStatus.UNKNOWN]


def test_power_state_tolerates_new_values() -> None:
    assert PowerState("on") is PowerState.ON
    assert PowerState("flickering") is PowerState.UNKNOWN


def test_request_models_refuse_unknown_constraints() -> None:
    with pytest.raises(pydantic.ValidationError):
        AllocateConstraints(not_zones=["x"])  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        ComposeRequest(cpu=2)  # type: ignore[call-arg]


def test_allocate_constraints_accept_lists() -> None:
    constraints = AllocateConstraints(tags=["a", "b"], cpu_count=2)
    assert constraints.tags == ("a", "b")
    assert constraints.to_form() == [("cpu_count", "2"), ("tags", "a"), ("tags", "b")]
