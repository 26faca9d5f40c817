"""HMAC-SHA1 OAuth signatures, verified the way MAAS's django-piston3 builds the signature base string.

Two independent signers drive the simulator: oauthlib (RFC 5849, as Python clients sign) and a hand-written
one shaped like the Go clients (parameters as a map, first value each, the body left out of PUT).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import quote, urlencode

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, BASE, HmacOAuth, client, hmac_client, multipart

from capmaas_dev.simulator import Simulator
from capmaas_dev.simulator.auth import SignedRequest, split_header

CONSUMER, TOKEN, SECRET = ADMIN_KEY.split(":")


def _q(value: str) -> str:
    return quote(value, safe="~")


def go_style_header(
    method: str, url: str, params: dict[str, str], *, secret: str = SECRET, nonce: str = ""
) -> str:
    """Sign like a Go MAAS client: oauth fields plus ``params`` (one value each), sorted, HMAC-SHA1."""
    fields = {
        "oauth_nonce": nonce or f"go{time.monotonic_ns()}",
        "oauth_consumer_key": CONSUMER,
        "oauth_signature_method": "HMAC-SHA1",
        "oauth_timestamp": str(int(time.time())),
        "oauth_token": TOKEN,
        "oauth_version": "1.0",
    }
    pairs = sorted((_q(k), _q(v)) for k, v in {**fields, **params}.items())
    normalized = "&".join(f"{k}={v}" for k, v in pairs)
    base = "&".join((method.upper(), _q(url.split("?", maxsplit=1)[0]), _q(normalized)))
    digest = hmac.new(f"&{_q(secret)}".encode(), base.encode(), hashlib.sha1).digest()
    fields["oauth_signature"] = base64.b64encode(digest).decode()
    return "OAuth " + ", ".join(f'{k}="{_q(v)}"' for k, v in fields.items())


@pytest.fixture
async def hmac_admin(sim: Simulator) -> httpx.AsyncClient:
    async with hmac_client(sim) as c:
        yield c


async def test_hmac_sha1_get_with_query_is_accepted(hmac_admin: httpx.AsyncClient) -> None:
    r = await hmac_admin.get("users/", params={"op": "whoami"})
    assert (r.status_code, r.json()["username"]) == (200, "admin")
    r = await hmac_admin.get("machines/", params={"hostname": "cp-1", "zone": "az1"})
    assert (r.status_code, [m["hostname"] for m in r.json()]) == (200, ["cp-1"])


async def test_hmac_sha1_urlencoded_post_body_is_signed(hmac_admin: httpx.AsyncClient) -> None:
    r = await hmac_admin.post(
        "machines/", params={"op": "allocate"}, data={"cpu_count": "1", "agent_name": "hmac test"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["status_name"] == "Allocated"


async def test_hmac_sha1_multipart_body_is_not_signed(hmac_admin: httpx.AsyncClient) -> None:
    body, ctype = multipart([("cpu_count", "1")])
    r = await hmac_admin.post(
        "machines/", params={"op": "allocate"}, content=body, headers={"Content-Type": ctype}
    )
    assert r.status_code == 200, r.text


async def test_hmac_sha1_tampered_body_is_refused_with_pistons_base_string(sim: Simulator) -> None:
    """The body is signed: changing a value after signing breaks the signature, and MAAS's 401 names the
    base string it expected (built here by hand from the request as sent)."""
    signer = HmacOAuth(ADMIN_KEY)

    class Tamper(httpx.Auth):
        requires_request_body = True

        def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
            signed = next(signer.auth_flow(request))
            header = signed.headers["Authorization"]
            tampered = httpx.Request(
                request.method,
                request.url,
                content=b"cpu_count=2",
                headers={**request.headers, "Authorization": header, "Content-Length": "11"},
            )
            yield tampered

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=sim.app), base_url=BASE, auth=Tamper()
    ) as c:
        r = await c.post("machines/", params={"op": "allocate"}, data={"cpu_count": "1"})
    assert r.status_code == 401
    fields = split_header(r.request.headers["Authorization"])
    params = {k: v for k, v in fields.items() if k != "oauth_signature"}
    params.update({"cpu_count": "2", "op": "allocate"})
    normalized = "&".join(f"{k}={v}" for k, v in sorted((_q(k), _q(v)) for k, v in params.items()))
    base = f"POST&{_q('http://maas.test/MAAS/api/2.0/machines/')}&{_q(normalized)}"
    assert r.text == f"Authorization Error: 'Invalid signature. Expected signature base string: {base}'"
    assert r.headers["www-authenticate"] == 'OAuth realm="OAuth"'


async def test_hmac_sha1_wrong_secret_and_wrong_url_are_refused(sim: Simulator) -> None:
    wrong = ADMIN_KEY.rsplit(":", 1)[0] + ":" + "x" * 32
    async with hmac_client(sim, wrong) as c:
        r = await c.get("users/", params={"op": "whoami"})
    assert r.status_code == 401
    assert r.text.startswith("Authorization Error: 'Invalid signature. Expected signature base string: GET&")
    async with client(sim, None) as c:
        header = go_style_header("GET", "http://maas.test/MAAS/api/2.0/zones/", {"op": "whoami"})
        r = await c.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    assert r.status_code == 401


async def test_hmac_sha1_reused_nonce_is_refused(sim: Simulator) -> None:
    url = BASE + "users/?op=whoami"
    header = go_style_header("GET", url, {"op": "whoami"}, nonce="fixed-nonce")
    async with client(sim, None) as c:
        assert (await c.get(url, headers={"Authorization": header})).status_code == 200
        r = await c.get(url, headers={"Authorization": header})
    assert (r.status_code, r.text) == (401, "Authorization Error: 'Nonce already used: fixed-nonce'")


async def test_go_style_client_post_and_put(sim: Simulator) -> None:
    """A Go client signs POST form values and leaves the PUT body out, which is what piston expects."""
    async with client(sim, None) as c:
        url = BASE + "machines/?op=allocate"
        form = {"cpu_count": "1", "comment": "a b&c"}
        header = go_style_header("POST", url, {"op": "allocate", **form})
        r = await c.post(
            url,
            content=urlencode(form),
            headers={"Authorization": header, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 200, r.text
        sid = r.json()["system_id"]
        url = f"{BASE}machines/{sid}/"
        header = go_style_header("PUT", url, {})
        r = await c.put(
            url,
            content="description=from+go",
            headers={"Authorization": header, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert (r.status_code, r.json()["description"]) == (200, "from go")


async def test_default_port_is_not_part_of_the_signed_url(sim: Simulator) -> None:
    """oauthlib and piston both drop the scheme's default port from the URL they sign."""
    async with hmac_client(sim) as c:
        r = await c.get("http://maas.test:80/MAAS/api/2.0/users/", params={"op": "whoami"})
    assert r.status_code == 200, r.text


async def test_rfc_signed_put_body_is_refused_as_piston_refuses_it(sim: Simulator) -> None:
    """piston signs a POST's form only: an RFC 5849 client that also signs a PUT's urlencoded body gets 401
    from MAAS (why Go clients leave PUT parameters out)."""
    sid = sim.state.by_hostname["cp-1"].system_id
    async with hmac_client(sim, piston=False) as c:
        r = await c.put(f"machines/{sid}/", data={"description": "x"})
    assert r.status_code == 401
    assert "Expected signature base string: PUT&" in r.text


async def test_blank_query_values_are_not_in_pistons_base_string(sim: Simulator) -> None:
    """``cgi.parse_qs(keep_blank_values=False)``: a GET's blank query value is not signed by piston."""
    async with client(sim, None) as c:
        url = BASE + "machines/?hostname="
        assert (
            await c.get(url, headers={"Authorization": go_style_header("GET", url, {})})
        ).status_code == 200
        r = await c.get(url, headers={"Authorization": go_style_header("GET", url, {"hostname": ""})})
        assert r.status_code == 401


async def test_plaintext_keeps_working_next_to_hmac(sim: Simulator) -> None:
    async with client(sim, ALICE_KEY) as c:
        assert (await c.get("users/", params={"op": "whoami"})).json()["username"] == "alice"


def test_signed_request_normalisation() -> None:
    signed = SignedRequest.build(
        "post",
        "https://Region:443/MAAS/api/2.0/machines/?op=allocate",
        {"authorization": 'OAuth realm="OAuth", oauth_nonce="a%20b", oauth_signature="sig"'},
        "op=allocate&x=&x=2&y=1&y=2",
        None,
    )
    assert signed.normalized_url() == "https://Region/MAAS/api/2.0/machines/"
    # POST: request.GET (last value, blanks kept) then header, then the query string's first non-blank values
    assert signed.params == {
        "op": "allocate",
        "x": "2",
        "y": "1",
        "oauth_nonce": "a b",
        "oauth_signature": "sig",
    }
    assert signed.normalized_parameters() == "oauth_nonce=a%20b&op=allocate&x=2&y=1"
    assert signed.base_string().startswith("POST&https%3A%2F%2FRegion%2FMAAS%2Fapi%2F2.0%2Fmachines%2F&")
    assert SignedRequest("GET", "http://h:80/p").normalized_url() == "http://h/p"
    assert SignedRequest("GET", "http://h:8080/p").normalized_url() == "http://h:8080/p"
    assert split_header("Basic abc") == {}


async def test_unsupported_signature_method_lists_pistons_methods(anon: httpx.AsyncClient) -> None:
    from simtools import oauth_header

    r = await anon.get(
        "users/",
        params={"op": "whoami"},
        headers={"Authorization": oauth_header(ADMIN_KEY, oauth_signature_method="RSA-SHA1")},
    )
    assert r.text == (
        "Authorization Error: 'Signature method RSA-SHA1 not supported try one of the following: "
        "PLAINTEXT, HMAC-SHA1'"
    )


async def test_repeated_query_keys_sign_their_first_value_only(sim: Simulator) -> None:
    """``cgi.parse_qs(...)[key][0]``: piston signs a repeated query key's first value, so an RFC 5849 client
    (which signs every value) is refused and a client signing the first value (as Go clients do) passes."""
    params = {"hostname": ["cp-1", "cp-2"]}
    async with hmac_client(sim, piston=False) as c:
        r = await c.get("machines/", params=params)
    assert r.status_code == 401
    async with hmac_client(sim) as c:
        r = await c.get("machines/", params=params)
    assert sorted(m["hostname"] for m in r.json()) == ["cp-1", "cp-2"]
