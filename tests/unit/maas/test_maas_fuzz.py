"""Whatever bytes come back, the client raises only its own errors (never KeyError, TypeError, ...)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from maas_fakes import API_KEY, MACHINE, URL, VM_HOST

from capmaas.maas import MaasClient, MaasError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def _mutations() -> st.SearchStrategy[bytes]:
    valid = [json.dumps(MACHINE), json.dumps([MACHINE]), json.dumps(VM_HOST), json.dumps({"state": "on"})]
    truncated = st.builds(lambda doc, cut: doc.encode()[:cut], st.sampled_from(valid), st.integers(0, 2000))
    mangled = st.builds(
        lambda doc, key, value: (
            json.dumps({**json.loads(doc), key: value}).encode() if doc.startswith("{") else doc.encode()
        ),
        st.sampled_from(valid),
        st.sampled_from(
            ["status", "zone", "system_id", "interface_set", "total", "hostname", "state", "pod"]
        ),
        json_values,
    )
    return st.one_of(
        st.binary(max_size=300), truncated, mangled, json_values.map(lambda v: json.dumps(v).encode())
    )


OPERATIONS: list[tuple[str, Any]] = [
    ("machines.get", lambda c: c.machines.get("abc123")),
    ("machines.list", lambda c: c.machines.list()),
    ("machines.allocate", lambda c: c.machines.allocate()),
    ("machines.power_off", lambda c: c.machines.power_off("abc123")),
    ("machines.query_power_state", lambda c: c.machines.query_power_state("abc123")),
    ("machines.release_many", lambda c: c.machines.release_many(["a"])),
    ("vm_hosts.get", lambda c: c.vm_hosts.get(3)),
    ("vm_hosts.compose", lambda c: c.vm_hosts.compose(3)),
    ("tags.update_nodes", lambda c: c.tags.update_nodes("t", add=["a"])),
    ("version", lambda c: c.version()),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=_mutations(),
    status=st.sampled_from([200, 200, 200, 204, 400, 401, 403, 404, 409, 410, 500, 503]),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "text/html; charset=utf-8", "application/gzip"]
    ),
    retry_after=st.sampled_from([None, "1", "x", "-3"]),
    operation=st.sampled_from(OPERATIONS),
)
async def test_garbage_answers_raise_only_maas_errors(
    body: bytes, status: int, content_type: str, retry_after: str | None, operation: tuple[str, Any]
) -> None:
    headers = {"content-type": content_type}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    if content_type == "application/gzip":
        headers["content-encoding"] = "gzip"  # claims gzip, is not: httpx's DecodingError must be wrapped

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    async def sleep(_: float) -> None:
        return None

    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(handler), sleep=sleep) as maas:
        with contextlib.suppress(MaasError):
            await operation[1](maas)
