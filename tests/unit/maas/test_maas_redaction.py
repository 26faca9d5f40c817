"""The API key never shows: not in reprs, error messages, or log lines, even when MAAS echoes it back."""

from __future__ import annotations

import logging

import httpx
import pytest
from maas_fakes import API_KEY, KEY_PARTS, URL, FakeMaas, text

from capmaas.maas import ApiError, MaasClient, MaasError, UnauthorizedError


def _assert_clean(shown: str) -> None:
    assert API_KEY not in shown
    for part in KEY_PARTS:
        assert part not in shown


async def test_echoed_credentials_are_scrubbed_from_errors_and_logs(
    client: MaasClient, fake: FakeMaas, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    consumer, token, secret = KEY_PARTS
    # MAAS's own 401 texts quote the token key, and a bad signature even the expected signature.
    fake.route(
        "GET",
        "users/",
        "whoami",
        text(401, f"Authorization Error: 'Invalid access token: {token}'"),
    )
    fake.route(
        "GET",
        "zones/",
        None,
        text(401, f"Authorization Error: 'Invalid signature. Expected signature base string: &{secret}'"),
    )
    fake.route("GET", "tags/", None, text(400, f'{{"key": ["{API_KEY}", "{consumer}"]}}'))
    caught: list[ApiError] = []
    for call in (client.whoami, client.zones.list, client.tags.list):
        with pytest.raises(ApiError) as info:
            await call()
        caught.append(info.value)
    assert isinstance(caught[0], UnauthorizedError)
    assert "Invalid access token: ***" in caught[0].body
    for exc in caught:
        _assert_clean(str(exc) + repr(exc) + exc.body + repr(exc.request) + str(exc.headers))
    _assert_clean(str(getattr(caught[2], "field_errors", "")))
    _assert_clean(caplog.text)
    _assert_clean(repr(client) + str(client))


async def test_transport_error_text_is_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused; headers were {request.headers['authorization']}")

    async def sleep(_: float) -> None:
        return None

    async with MaasClient(URL, api_key=API_KEY, transport=httpx.MockTransport(handler), sleep=sleep) as maas:
        with pytest.raises(MaasError) as info:
            await maas.machines.list()
    _assert_clean(str(info.value) + repr(info.value))
    _assert_clean(caplog.text)


async def test_parse_error_bodies_are_scrubbed(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "zones/", None, text(200, f"<html>{KEY_PARTS[2]}"))
    with pytest.raises(MaasError) as info:
        await client.zones.list()
    _assert_clean(str(info.value) + repr(info.value) + getattr(info.value, "body", ""))
