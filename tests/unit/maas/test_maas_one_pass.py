"""A single answer (allocate, deploy, release, get, ...) is validated from its bytes in one pass (issue 26),
and whatever that pass refuses takes the old path (decode, ``json.loads``, validate), so callers get the
same models and the same errors, messages included, as before. Each body below is answered to the client
as it is and to a client whose one pass is switched off (the old path alone): the outcomes must be
identical."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, dumps, machine, ok

from capmaas.maas import MaasClient, MaasError, Machine, _http
from capmaas.maas.errors import ResponseParseError

MACHINE = dumps(machine())


def _with(**changes: Any) -> bytes:
    return dumps(machine(**changes)).encode()


def _deep(depth: int) -> bytes:
    """A machine whose interface ``params`` nest ``depth`` lists: deeper than pydantic's JSON parser goes
    (200), not than ``json.loads``."""
    nested = json.loads("[" * depth + "]" * depth)
    return _with(interface_set=[{"id": 1, "name": "eth0", "params": {"x": nested}}])


#: (name, status, body, content-type)
BODIES: list[tuple[str, int, bytes, str]] = [
    ("valid", 200, MACHINE.encode(), "application/json"),
    # The one pass refuses these, json.loads reads them: the old path must still give the machine.
    ("lone surrogate escape", 200, MACHINE.replace("node-1", "node-\\udc80").encode(), "application/json"),
    ("invalid UTF-8 byte", 200, MACHINE.replace("node-1", "node-\xff").encode("latin-1"), "application/json"),
    ("nesting past 200", 200, _deep(250), "application/json"),
    # Both read these: the same values.
    ("NaN and Infinity", 200, MACHINE.replace("256060.5", "NaN").encode(), "application/json"),
    (
        "duplicate key, the last wins",
        200,
        MACHINE[:-1].encode() + b', "hostname": "second"}',
        "application/json",
    ),
    ("a huge integer", 200, _with(cpu_count=10**30), "application/json"),
    ("lax numbers as strings", 200, _with(status="4", memory="8192", cpu_count=4.0), "application/json"),
    ("unknown power state", 200, _with(power_state="weird"), "application/json"),
    ("latin-1 declared", 200, _with(hostname="m\u00e9"), "application/json; charset=iso-8859-1"),
    # Neither reads these: the same error, message included.
    ("empty", 200, b"", "application/json"),
    ("whitespace", 200, b" \n\t", "application/json"),
    ("null", 200, b"null", "application/json"),
    ("a list", 200, b"[]", "application/json"),
    ("byte order mark", 200, b"\xef\xbb\xbf" + MACHINE.encode(), "application/json"),
    ("no-break space first", 200, "\u00a0".encode() + MACHINE.encode(), "application/json"),
    ("trailing garbage", 200, MACHINE.encode() + b" x", "application/json"),
    ("truncated", 200, MACHINE.encode()[:-1], "application/json"),
    ("nesting past json.loads", 200, b"[" * 10_000, "application/json"),
    ("status with a fraction", 200, _with(status=4.5), "application/json"),
    ("status NaN", 200, MACHINE.replace('"status": 4', '"status": NaN').encode(), "application/json"),
    ("hostname missing", 200, dumps({k: v for k, v in machine().items() if k != "hostname"}).encode(), "a/b"),
    ("hostname a number", 200, _with(hostname=5), "application/json"),
    ("tags not strings", 200, _with(tag_names=[1, 2]), "application/json"),
    ("a 500", 500, MACHINE.encode(), "application/json"),
    ("a 404 in HTML", 404, b"<html>no</html>", "text/html"),
]

Operation = Callable[[MaasClient], Awaitable[Any]]
OPERATIONS: list[tuple[str, str, str | None, Operation]] = [
    ("get", "GET", None, lambda c: c.machines.get("abc123")),
    ("deploy", "POST", "deploy", lambda c: c.machines.deploy("abc123")),
    ("power_off (empty is None)", "POST", "power_off", lambda c: c.machines.power_off("abc123")),
]


async def _outcome(operation: Operation, reply: httpx.Response, *, one_pass: bool) -> tuple[str, Any]:
    fake = FakeMaas()
    fake.route("GET", "machines/abc123/", None, reply)
    fake.route("POST", "machines/abc123/", "deploy", reply)
    fake.route("POST", "machines/abc123/", "power_off", reply)
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake), max_retries=0) as client:
        if not one_pass:
            client._http._one_pass = lambda *_args: None  # type: ignore[method-assign]
        try:
            result = await operation(client)
        except MaasError as exc:
            return type(exc).__name__, str(exc)
    return "ok", result if result is None else repr(result)  # repr: NaN != NaN, but reads the same


@pytest.mark.parametrize(("name", "status", "body", "content_type"), BODIES, ids=[b[0] for b in BODIES])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[o[0] for o in OPERATIONS])
async def test_the_one_pass_gives_what_the_old_path_gives(
    name: str, status: int, body: bytes, content_type: str, operation: tuple[str, str, str | None, Operation]
) -> None:
    reply = httpx.Response(status, content=body, headers={"content-type": content_type})
    new = await _outcome(operation[3], reply, one_pass=True)
    old = await _outcome(operation[3], reply, one_pass=False)
    assert new == old
    if name == "valid" or name.startswith(("lone", "invalid UTF-8", "nesting past 200", "NaN", "duplicate")):
        assert new[0] == "ok"
        assert new[1] is not None
    if name == "duplicate key, the last wins":
        assert "hostname='second'" in new[1]


async def test_a_malformed_answer_is_the_clients_own_error_not_pydantics(fake: FakeMaas) -> None:
    fake.route("POST", "machines/", "allocate", httpx.Response(200, content=MACHINE.encode()[:-5]))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        with pytest.raises(ResponseParseError, match=r"is not JSON \(\d+ bytes\)") as info:
            await client.machines.allocate()
    assert isinstance(info.value.__cause__, json.JSONDecodeError)  # the old path's cause, not pydantic's
    assert "node-1" not in str(info.value)  # no body in the message


async def test_a_valid_answer_is_read_from_its_bytes_without_json_loads(
    fake: FakeMaas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the change is for: no decoded text and no dicts of the ~90 machine fields the models drop."""
    loads: list[str] = []
    real = json.loads

    def counting(text: str | bytes, **kwargs: Any) -> Any:
        loads.append("x")
        return real(text, **kwargs)

    monkeypatch.setattr(_http.json, "loads", counting)
    fake.route("POST", "machines/", "allocate", ok(machine(status=6)))
    fake.route("POST", "machines/abc123/", "deploy", ok(machine(status=9)))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        allocated = await client.machines.allocate()
        deployed = await client.machines.deploy("abc123")
        assert loads == []
        fake.route("POST", "machines/", "allocate", httpx.Response(200, content=b"{"))
        with pytest.raises(ResponseParseError):
            await client.machines.allocate()
    assert loads == ["x"]  # a malformed answer takes the old path, which names the error
    assert isinstance(allocated, Machine)
    assert (allocated.status.value, deployed.status.value) == (6, 9)


async def test_an_oversized_single_answer_is_refused_before_any_parsing(fake: FakeMaas) -> None:
    big = machine(description="x" * (5 * 1024 * 1024))  # past the 4 MiB cap of a single answer
    fake.route("GET", "machines/abc123/", None, ok(big))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as client:
        with pytest.raises(MaasError, match="larger than"):
            await client.machines.get("abc123")
