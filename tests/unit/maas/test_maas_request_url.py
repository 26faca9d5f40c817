"""The request URL the client builds from an ``httpx.URL`` parsed once with its query is the one httpx's
``build_request`` makes from the URL string and the query as ``params`` (how the client built it before)."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas, ok

from capmaas.maas import MaasClient

_ROOT = "http://127.0.0.1:5240/MAAS/api/2.0/"
_QueryFields = list[tuple[str, str | int | float | bool | None]]

_CASES: list[tuple[str, _QueryFields]] = [
    (_ROOT + "machines/", []),
    (_ROOT + "machines/", [("op", "allocate")]),
    (_ROOT + f"machines/{quote('abc 1/é', safe='')}/", [("op", "deploy")]),
    (
        _ROOT + "machines/",
        [("hostname", "a"), ("id", "x y"), ("hostname", "b&c=d"), ("agent_name", "é+%/?#"), ("n", 3)],
    ),
    (_ROOT + "machines/", [("flag", True), ("none", None), ("f", 1.5), ("empty", "")]),
    ("https://maas.example:5443/prefix%20x/MAAS/api/2.0/zones/", [("op", "x"), ("op", "y")]),
    ("http://[::1]:5240/MAAS/api/2.0/tags/", [("op", "list")]),
]


@pytest.mark.parametrize(("url", "query"), _CASES)
async def test_parsed_once_is_what_build_request_makes_from_the_string_and_params(
    url: str, query: _QueryFields
) -> None:
    async with httpx.AsyncClient(headers={"Accept": "application/json", "User-Agent": "capmaas"}) as client:
        before = client.build_request("POST", url, params=query)
        target = httpx.URL(url, params=query) if query else httpx.URL(url)
        after = client.build_request("POST", target)
    assert str(after.url) == str(before.url)
    assert after.url.raw_path == before.url.raw_path
    parts = ("scheme", "raw_host", "port", "raw_path", "query", "fragment")
    assert [getattr(after.url, p) for p in parts] == [getattr(before.url, p) for p in parts]
    assert after.headers.multi_items() == before.headers.multi_items()


async def test_the_wire_url_carries_op_and_the_query_in_order(fake: FakeMaas) -> None:
    fake.route("GET", "machines/", "list", ok([]))
    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(fake)) as maas:
        await maas._http.call("GET", "machines/", op="list", query=[("hostname", "a b"), ("id", "é")])
    assert fake.last.url.raw_path == b"/MAAS/api/2.0/machines/?op=list&hostname=a+b&id=%C3%A9"
