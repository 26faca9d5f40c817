"""What of a MAAS error answer a condition may quote (issue 10, item 5): only MAAS's own answer shapes.

A tenant's endpoint can be any HTTP service; a condition must never become a way to read its answers."""

from __future__ import annotations

import json
import logging

import pytest

from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts, lxd

WITHHELD = "MAAS answered 409 (body withheld; see the operator log)"


@pytest.mark.parametrize(
    "body",
    [
        # The real MAAS 3.7.3 answers (maas-3.7.3-answers/allocate_409_*.json).
        "No available machine matches constraints: [('cpu_count', ['64'])] (resolved to \"cpu_count=64.0\")",
        "No available machine matches constraints: [('name', ['node-02'])] (resolved to \"name=node-02\")",
        "No machine available.",
        "No machine with system ID abc123 available.",
        "Can't deploy a machine that is in the 'Deploying' state",
        "Invalid transition: Ready -> Deployed.",
    ],
)
def test_maas_own_409_phrasing_is_quoted(body: str) -> None:
    assert facts.maas_text(body) == body


@pytest.mark.parametrize(
    "body",
    [
        '{"access_token": "s3cr3t", "expires": 3600}',  # an internal token service
        "<html><body>Jenkins admin console: build secrets ...</body></html>",
        "root:x:0:0:root:/root:/bin/bash",
        '["a", "b"]',
        '{"zone": [1, 2]}',  # right keys, wrong value types
        '{"bad key!": ["x"]}',
        "{}",
        "",
        "No available machine matches constraints: " + "x" * 2000,  # the shape, but far too long
    ],
)
def test_anything_else_is_withheld_and_logged(body: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="capmaas.reconcilers.facts"):
        assert facts.maas_text(body) == WITHHELD
    assert "withheld" in caplog.text
    assert facts.maas_text(body, 400).startswith("MAAS answered 400 ")


def test_form_errors_are_quoted_field_by_field_sanitised_and_bounded() -> None:
    body = json.dumps({"zone": ["No such zone:\n'x'.\x1b[31m"], "cpu_count": "must be a number"})
    assert facts.maas_text(body, 400) == "zone: No such zone: 'x'.?[31m; cpu_count: must be a number"
    long = json.dumps({"tags": ["y" * 1000]})
    text = facts.maas_text(long, 400, limit=50)
    assert len(text) == 51
    assert text.endswith("…")


def test_control_characters_never_reach_a_condition() -> None:
    said = facts.maas_text("Can't deploy a machine that is in the 'Deployed' state\r\n")
    assert said == "Can't deploy a machine that is in the 'Deployed' state"
    assert facts.refusal_text({"distro_series": ("bad\x00\nvalue",), "not a field": ("leak",)}) == (
        "distro_series: bad? value"
    )


# LXD compose refusals (issue 10 item 5): MAAS's compose phrasings are quoted; any other answer of a tenant's
# "VM host" endpoint is withheld from LXDVMCreated and the VMComposeRefused Event.
_INFO = maas_errors.RequestInfo(
    "POST", "http://127.0.0.1:1/MAAS/api/2.0/pods/1/?op=compose", "pods/{id}/?op=compose"
)


@pytest.mark.parametrize(
    "body",
    [
        "Unable to compose KVM instance in 'lxd-az1-0'. CPU overcommit ratio is 1.0 and there are 2 "
        "available resources; 6 requested.",
        "Unable to compose machine because: Not enough storage space on storage pools: default",
    ],
)
def test_lxd_compose_refusal_quotes_maas_phrasing(body: str) -> None:
    exc = maas_errors.ServiceUnavailableError(503, body, _INFO)
    assert lxd._short(exc) == body


@pytest.mark.parametrize(
    ("cls", "status"), [(maas_errors.ServiceUnavailableError, 503), (maas_errors.BadRequestError, 400)]
)
def test_lxd_compose_refusal_withholds_anything_else(cls: type[maas_errors.ApiError], status: int) -> None:
    body = '{"access_token": "s3cr3t-from-an-internal-service"}' + " " * 10 + "x" * 500
    text = lxd._short(cls(status, body, _INFO))
    assert "s3cr3t" not in text
    assert text == f"MAAS answered {status} (body withheld; see the operator log)"
