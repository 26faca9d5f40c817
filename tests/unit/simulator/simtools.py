"""Raw-HTTP helpers for the simulator tests: an OAuth PLAINTEXT header, an authenticated client."""

from __future__ import annotations

import itertools
import time
from collections.abc import Generator

import httpx

from capmaas_dev.simulator import LXD_INVENTORY, SAMPLE_INVENTORY, Inventory, Simulator

ADMIN_KEY = "adminconsumer00000:admintoken00000000:adminsecret000000000000000000000"
ALICE_KEY = "alice00000000000000:alicetoken00000000:alicesecret000000000000000000000"
BOB_KEY = "bob000000000000000:bobtoken0000000000:bobsecret00000000000000000000000"
SAMPLE = SAMPLE_INVENTORY
LXD = LXD_INVENTORY
BASE = "http://maas.test/MAAS/api/2.0/"
_nonces = itertools.count(1)


def oauth_header(
    api_key: str, *, nonce: str | None = None, timestamp: int | None = None, **override: str
) -> str:
    consumer, token, secret = api_key.split(":")
    fields = {
        "oauth_nonce": nonce or f"n{next(_nonces)}",
        "oauth_timestamp": str(int(time.time()) if timestamp is None else timestamp),
        "oauth_version": "1.0",
        "oauth_signature_method": "PLAINTEXT",
        "oauth_consumer_key": consumer,
        "oauth_token": token,
        "oauth_signature": f"%26{secret}",
    }
    fields.update(override)
    return 'OAuth realm="OAuth", ' + ", ".join(f'{k}="{v}"' for k, v in fields.items())


class OAuth(httpx.Auth):
    def __init__(self, api_key: str) -> None:
        self.api_key = api_key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = oauth_header(self.api_key)
        yield request


def client(sim: Simulator, api_key: str | None = ADMIN_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=sim.app),
        base_url=BASE,
        auth=OAuth(api_key) if api_key else None,
    )


def sample_sim(**kwargs: object) -> Simulator:
    return Simulator(Inventory.from_yaml(SAMPLE), api_key=ADMIN_KEY, **kwargs)  # type: ignore[arg-type]


def lxd_sim(**kwargs: object) -> Simulator:
    return Simulator(Inventory.from_yaml(LXD), api_key=ADMIN_KEY, **kwargs)  # type: ignore[arg-type]


def multipart(fields: list[tuple[str, str]], boundary: str = "XyZ") -> tuple[bytes, str]:
    """A body as libmaas/the MAAS CLI build it: every part base64 encoded."""
    import base64

    out = b""
    for name, value in fields:
        out += (
            f'--{boundary}\r\nContent-Type: text/plain; charset="utf-8"\r\nMIME-Version: 1.0\r\n'
            f'Content-Transfer-Encoding: base64\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
        ).encode()
        out += base64.b64encode(value.encode()) + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


class HmacOAuth(httpx.Auth):
    """OAuth 1.0a HMAC-SHA1 signed by oauthlib; MAAS's consumer secret is empty.

    By default it signs as RFC 5849 clients do: the method, the URL with every query value and an urlencoded
    body. With ``piston=True`` oauthlib is given the parameters MAAS's piston3 will sign (so the request is
    accepted): a PUT's body left out, a repeated query key's first value only, blank query values of a GET
    left out, a POST body's last value per key (the same choices Go MAAS clients make)."""

    requires_request_body = True

    def __init__(self, api_key: str, realm: str | None = "OAuth", *, piston: bool = False) -> None:
        from oauthlib import oauth1

        self.piston = piston
        consumer, token, secret = api_key.split(":")
        self.client = oauth1.Client(
            consumer,
            client_secret="",
            resource_owner_key=token,
            resource_owner_secret=secret,
            signature_method=oauth1.SIGNATURE_HMAC_SHA1,
            realm=realm,
        )

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from urllib.parse import parse_qsl, urlencode

        ctype = request.headers.get("content-type", "")
        form = ctype.startswith("application/x-www-form-urlencoded")
        url, body = str(request.url), request.content.decode() if form else None
        if self.piston:
            raw = request.url.query.decode()
            query: dict[str, str] = {}
            if request.method == "POST":  # request.GET joins a POST's parameters (last value, blanks kept)
                query.update(parse_qsl(raw, keep_blank_values=True))
            first: dict[str, str] = {}
            for key, value in parse_qsl(raw):  # then each key's first non-blank value
                first.setdefault(key, value)
            query.update(first)
            url = str(request.url.copy_with(query=urlencode(query).encode() or None))
            if request.method != "POST":
                form, body = False, None
            elif body is not None:
                body = urlencode(dict(parse_qsl(body, keep_blank_values=True)))
        _, headers, _ = self.client.sign(
            url,
            http_method=request.method,
            body=body if form else None,
            headers={"Content-Type": ctype} if form else None,
        )
        request.headers["Authorization"] = headers["Authorization"]
        yield request


def hmac_client(sim: Simulator, api_key: str = ADMIN_KEY, *, piston: bool = True) -> httpx.AsyncClient:
    auth = HmacOAuth(api_key, piston=piston)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=sim.app), base_url=BASE, auth=auth)


def sid(sim: Simulator, hostname: str) -> str:
    """The system ID of the inventory machine ``hostname``."""
    return sim.state.by_hostname[hostname].system_id
