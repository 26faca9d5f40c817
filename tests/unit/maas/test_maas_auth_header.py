"""The ``Authorization`` header :class:`MaasAuth` makes from its signed-once template is, byte for byte,
the one oauthlib's ``Client.sign`` makes for the same nonce and timestamp (oauthlib defines the header)."""

from __future__ import annotations

import re

import httpx
import pytest
from maas_fakes import API_KEY, MACHINE, URL, FakeMaas, ok
from oauthlib import oauth1

from capmaas.maas import Credentials, MaasClient
from capmaas.maas._auth import _NONCE_MARK, _TIMESTAMP_MARK, MaasAuth

_KEYS = [
    API_KEY,
    "a:b:c",
    # Parts OAuth escaping changes: spaces, quotes, '&', '%', '=', ',', non-ASCII.
    'c k:t"k&=:s e%c,r~é',
    # A part containing a marker: no template, every request signed by oauthlib in full.
    f"consumer:{_NONCE_MARK}:secret",
    f"consumer:token:{_TIMESTAMP_MARK}",
]


def _oauthlib_header(
    creds: Credentials, nonce: str, timestamp: str, url: str = URL, method: str = "POST"
) -> str:
    """What the client sent before the template: a new oauthlib Client per request, signing its URL."""
    client = oauth1.Client(
        creds.consumer_key,
        client_secret="",
        resource_owner_key=creds.token_key,
        resource_owner_secret=creds.token_secret,
        signature_method=oauth1.SIGNATURE_PLAINTEXT,
        realm="OAuth",
        nonce=nonce,
        timestamp=timestamp,
    )
    _, headers, _ = client.sign(url, http_method=method)
    header: str = headers["Authorization"]
    return header


@pytest.mark.parametrize("api_key", _KEYS)
@pytest.mark.parametrize(
    ("nonce", "timestamp"),
    [("12345678901234567891764300000", "1764300000"), ("0", "0"), ("n o&n%ce", "t=s")],
)
def test_header_is_oauthlibs_for_the_same_nonce_and_timestamp(
    api_key: str, nonce: str, timestamp: str
) -> None:
    creds = Credentials.parse(api_key)
    expected = _oauthlib_header(creds, nonce, timestamp, URL + "/api/2.0/machines/?op=allocate")
    assert MaasAuth(creds).header(nonce, timestamp) == expected


def test_a_key_part_holding_a_marker_is_signed_in_full() -> None:
    assert MaasAuth(Credentials.parse(f"c:{_NONCE_MARK}:s"))._template is None
    assert MaasAuth(Credentials.parse(API_KEY))._template is not None


def test_each_header_has_a_fresh_nonce_and_the_current_timestamp() -> None:
    auth = MaasAuth(Credentials.parse(API_KEY))
    first, second = auth.header(), auth.header()
    nonces = [re.search(r'oauth_nonce="(\d+)"', h) for h in (first, second)]
    assert nonces[0] is not None
    assert nonces[1] is not None
    assert nonces[0].group(1) != nonces[1].group(1)
    assert re.search(r'oauth_timestamp="\d+"', first)


def test_the_template_never_prints_the_secret() -> None:
    auth = MaasAuth(Credentials.parse(API_KEY))
    secret = API_KEY.split(":")[2]
    assert secret not in repr(auth)
    assert secret not in repr(auth._template)
    assert secret not in repr(vars(auth))


async def test_the_sent_header_is_oauthlibs_for_its_nonce_timestamp_url_and_method(fake: FakeMaas) -> None:
    fake.route("GET", "zones/", None, ok([]))
    fake.route("POST", "machines/", "allocate", ok(MACHINE))
    creds = Credentials.parse(API_KEY)
    async with MaasClient(URL, api_key=creds, transport=httpx.MockTransport(fake)) as maas:
        await maas.zones.list()
        await maas.machines.allocate()
    assert len(fake.requests) == 2
    for request in fake.requests:
        sent = request.headers["authorization"]
        params = dict(re.findall(r'(\w+)="([^"]*)"', sent))
        expected = _oauthlib_header(
            creds, params["oauth_nonce"], params["oauth_timestamp"], str(request.url), request.method
        )
        assert sent == expected
