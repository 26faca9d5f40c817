"""A mistyped key fails a test: typed writes refuse unknown field names, and the fake port checks every patch
like the apiserver's ``fieldValidation=Strict`` (the operator tests run the real apiserver that way)."""

from __future__ import annotations

import pytest
from fakes import FakeKube, StrictFieldError

from capmaas.reconcilers.ports import MAASMACHINE
from capmaas.reconcilers.scope import MachineScope
from capmaas_dev import demo


def scope() -> tuple[FakeKube, MachineScope]:
    kube = FakeKube()
    body = kube.add("maasmachines", demo.maasmachine("m1", "ns", "c1", control_plane=False, machine_uid="u"))
    return kube, MachineScope(kube, MAASMACHINE, body)


def test_typed_writes_refuse_a_field_the_model_does_not_have() -> None:
    _, s = scope()
    with pytest.raises(ValueError, match="machine_stat"):
        s.set_status(machine_stat="Deployed")
    with pytest.raises(ValueError, match="systemID"):
        s.set_spec(systemID="abc")  # wire names are not field names


async def test_typed_writes_go_out_under_their_wire_names() -> None:
    kube, s = scope()
    s.set_spec(system_id="abc", provider_id="maas://az1/abc")
    s.set_status(machine_state="Deployed", attempts=1)
    await s.close()
    stored = kube.get("maasmachines", "m1")
    assert stored["spec"]["systemID"] == "abc"
    assert stored["spec"]["providerID"] == "maas://az1/abc"
    assert stored["status"]["machineState"] == "Deployed"
    assert s.want.system_id == "abc"


async def test_a_raw_unknown_status_key_fails_the_write() -> None:
    _, s = scope()
    s.status["machineStat"] = "Deployed"
    with pytest.raises(StrictFieldError, match="machineStat"):
        await s.close()


async def test_a_raw_value_of_the_wrong_type_fails_the_write() -> None:
    _, s = scope()
    s.status["attempts"] = "many"
    with pytest.raises(StrictFieldError, match="attempts"):
        await s.close()


def test_ready_is_only_ever_the_summary() -> None:
    _, s = scope()
    with pytest.raises(ValueError, match="summary"):
        s.set_condition("Ready", True, "Ready")
