"""Kubernetes answers parsed for keeping (capmaas.operator.jsonbodies): the same values as ``json.loads`` but
without ``managedFields``, through the operator's own client and through kopf's watch streams."""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from kopf._cogs.clients import api as kopf_api
from loopback_server import serve

from capmaas.operator import jsonbodies
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError

#: kopf's own ``api.get`` (the tests that install put it back when they end).
KOPF_GET = kopf_api.get
assert KOPF_GET is not jsonbodies._kopf_get

MANAGED = [
    {
        "manager": "capmaas",
        "operation": "Update",
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, 'v:"maasmachine"': {}}}},
    }
]


def body(name: str = "m1", *, managed: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": "u-" + name, "resourceVersion": "7"}
    if managed:
        meta["managedFields"] = copy.deepcopy(MANAGED)
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "MaasMachine",
        "metadata": meta,
        "spec": {
            "minCPU": 2,
            "big": 123456789012345678901234567890,
            "ratio": 0.1,
            "none": None,
            "tags": ["a", "é", "😀"],
            # Only the object's own metadata loses the field: a template's is data.
            "template": {"metadata": {"managedFields": ["kept"]}},
        },
        "status": {"ready": True, "conditions": [], "empty": {}},
    }


def without_managed(value: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(value)
    out["metadata"].pop("managedFields", None)
    return out


def test_an_object_parses_as_json_loads_does_without_its_managed_fields() -> None:
    text = json.dumps(body())
    assert jsonbodies.loads(text) == without_managed(json.loads(text))
    assert jsonbodies.loads(text.encode()) == without_managed(json.loads(text))
    assert jsonbodies.loads(json.dumps(body(managed=False))) == body(managed=False)


def test_a_watch_event_and_a_list_lose_the_managed_fields_of_their_objects() -> None:
    event = {"type": "MODIFIED", "object": body()}
    assert jsonbodies.loads(json.dumps(event)) == {"type": "MODIFIED", "object": without_managed(body())}
    listing = {"kind": "List", "metadata": {"resourceVersion": "9"}, "items": [body("a"), body("b")]}
    parsed = jsonbodies.loads(json.dumps(listing))
    assert parsed["items"] == [without_managed(body("a")), without_managed(body("b"))]
    assert parsed["metadata"] == {"resourceVersion": "9"}


@pytest.mark.parametrize("text", ["[1, 2]", '"s"', "3", "null", '{"metadata": "odd", "items": {}}'])
def test_other_documents_are_values_as_json_loads_gives_them(text: str) -> None:
    assert jsonbodies.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", "not json", '{"a": 1} trailing'])
def test_what_is_not_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract: the messages differ
        json.loads(text)
    with pytest.raises(ValueError):  # noqa: PT011
        jsonbodies.loads(text)


def test_kopf_decodes_watch_lines_and_listings_as_install_in_kopf_expects() -> None:
    """What :func:`~capmaas.operator.jsonbodies.install_in_kopf` relies on: an upgrade of kopf that decodes
    otherwise fails here, not silently."""
    assert kopf_api.json is json or isinstance(kopf_api.json, jsonbodies._JsonForKopf)
    assert "json.loads(line" in inspect.getsource(kopf_api.stream)
    get = KOPF_GET
    assert "response = await request(" in inspect.getsource(get)
    assert "method='get'" in inspect.getsource(get)
    assert inspect.getsource(get).rstrip().endswith("return await response.json()")
    params = inspect.signature(get).parameters
    assert next(iter(params)) == "url"
    assert {p.kind for name, p in params.items() if name != "url"} == {inspect.Parameter.KEYWORD_ONLY}
    assert set(params) <= set(inspect.signature(kopf_api.request).parameters)


class _Response:
    def __init__(self, text: str) -> None:
        self.text = text

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def json(self, *, loads: Any = json.loads) -> Any:
        return loads(self.text)


async def test_installed_kopf_lists_through_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kopf_api, "json", json)
    monkeypatch.setattr(kopf_api, "get", KOPF_GET)
    asked: list[dict[str, Any]] = []

    async def request(**kwargs: Any) -> _Response:
        asked.append(kwargs)
        return _Response(json.dumps({"kind": "List", "items": [body()]}))

    monkeypatch.setattr(kopf_api, "request", request)
    assert jsonbodies.install_in_kopf()
    got = await kopf_api.get("/apis/x", settings="S", logger="L", timeout=None)
    assert got == {"kind": "List", "items": [without_managed(body())]}
    assert asked == [{"method": "get", "url": "/apis/x", "settings": "S", "logger": "L", "timeout": None}]


def test_installed_kopf_decodes_through_loads_and_keeps_the_rest_of_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kopf_api, "json", json)  # whatever an earlier test installed: restored after
    monkeypatch.setattr(kopf_api, "get", KOPF_GET)
    assert jsonbodies.install_in_kopf()
    assert jsonbodies.install_in_kopf()  # twice: still installed, not wrapped again
    assert kopf_api.json.loads is jsonbodies._watch_line  # loads, then the watch events' filter if any
    assert kopf_api.json.dumps is json.dumps
    assert kopf_api.json.JSONDecodeError is json.JSONDecodeError
    line = json.dumps({"type": "ADDED", "object": body()}).encode()
    assert kopf_api.json.loads(line.decode("utf-8"))["object"] == without_managed(body())


def test_a_kopf_that_decodes_otherwise_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    other = object()
    monkeypatch.setattr(kopf_api, "json", other)
    monkeypatch.setattr(kopf_api, "get", KOPF_GET)
    assert not jsonbodies.install_in_kopf()
    assert kopf_api.json is other
    assert kopf_api.get is KOPF_GET


@pytest.fixture
async def apiserver() -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.Response:
        if request.path.endswith("/broken"):
            return web.Response(text="{not json", content_type="application/json")
        return web.json_response(body())

    async with serve(handle) as url:
        yield url


async def test_the_operators_client_returns_objects_without_managed_fields(apiserver: str) -> None:
    http = KubeHttp(kubernetes.client.Configuration(host=apiserver))
    try:
        got = await http.get_object("infrastructure.cluster.x-k8s.io/v1beta1", "maasmachines", "ns", "m1")
        assert got == without_managed(body())
        with pytest.raises(KubeHttpError, match="not JSON"):
            await http.get_object("infrastructure.cluster.x-k8s.io/v1beta1", "maasmachines", "ns", "broken")
    finally:
        await http.aclose()
