"""API key parsing and OAuth 1.0a PLAINTEXT signing, as MAAS checks it."""

from __future__ import annotations

import re

import httpx
import pytest
from maas_fakes import API_KEY, KEY_PARTS, URL, FakeMaas, ok

from capmaas.maas import Credentials, InvalidApiKeyError, MaasClient, MaasError


def _oauth_params(header: str) -> dict[str, str]:
    assert header.startswith("OAuth ")
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


async def test_every_request_is_signed_plaintext_with_a_fresh_nonce(
    client: MaasClient, fake: FakeMaas
) -> None:
    fake.route("GET", "zones/", None, ok([]))
    await client.zones.list()
    await client.zones.list()
    first, second = (_oauth_params(r.headers["authorization"]) for r in fake.requests)
    consumer, token, secret = KEY_PARTS
    assert first["realm"] == "OAuth"
    assert first["oauth_signature_method"] == "PLAINTEXT"
    assert first["oauth_consumer_key"] == consumer
    assert first["oauth_token"] == token
    assert first["oauth_signature"] == f"%26{secret}"
    assert first["oauth_version"] == "1.0"
    assert first["oauth_timestamp"].isdigit()
    assert first["oauth_nonce"] != second["oauth_nonce"]


def test_parse_accepts_the_three_part_key() -> None:
    creds = Credentials.parse(f"  {API_KEY}\n")
    assert (creds.consumer_key, creds.token_key, creds.token_secret) == KEY_PARTS


@pytest.mark.parametrize("bad", ["", "abc", "a:b", "a:b:c:d", "a::c", ":b:c", "a:b:", "::"])
def test_malformed_key_names_the_expected_form(bad: str) -> None:
    with pytest.raises(InvalidApiKeyError, match="consumer_key:token_key:token_secret") as info:
        Credentials.parse(bad)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, MaasError)


def test_non_string_key_is_invalid() -> None:
    with pytest.raises(InvalidApiKeyError, match="string"):
        Credentials.parse(123)  # type: ignore[arg-type]


def test_client_rejects_malformed_key_without_showing_it() -> None:
    with pytest.raises(InvalidApiKeyError) as info:
        MaasClient(URL, api_key="SkTvsyHhzkREvvdtNk-only-one-part", transport=httpx.MockTransport(FakeMaas()))
    assert "SkTvsyHhzkREvvdtNk" not in str(info.value)


async def test_client_accepts_credentials_object(fake: FakeMaas) -> None:
    fake.route("GET", "users/", "whoami", ok({"username": "u"}))
    creds = Credentials.parse(API_KEY)
    async with MaasClient(URL, api_key=creds, transport=httpx.MockTransport(fake)) as maas:
        assert (await maas.whoami()).username == "u"
    assert _oauth_params(fake.last.headers["authorization"])["oauth_token"] == KEY_PARTS[1]


def test_redact_scrubs_every_part_and_quoted_forms() -> None:
    creds = Credentials.parse(API_KEY)
    consumer, token, secret = KEY_PARTS
    text = f"key {API_KEY}; token {token}; sig &{secret} or %26{secret}; consumer {consumer}"
    scrubbed = creds.redact(text)
    for part in KEY_PARTS:
        assert part not in scrubbed
    assert scrubbed.count("***") >= 4


def test_redact_leaves_text_alone_for_short_test_keys() -> None:
    # Scrubbing one-letter parts would mangle every message; only the whole key is looked for.
    assert Credentials.parse("a:b:c").redact("a bad cab, key a:b:c") == "a bad cab, key ***"
