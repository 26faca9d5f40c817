"""Every authentication answer MAAS gives, as raw HTTP."""

from __future__ import annotations

import time

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, client, oauth_header

from capmaas_dev.simulator import Simulator


async def test_valid_plaintext_signature_authenticates(anon: httpx.AsyncClient) -> None:
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": oauth_header(ADMIN_KEY)})
    assert r.status_code == 200
    assert r.json()["username"] == "admin"
    assert r.json()["is_superuser"] is True


async def test_no_credentials_on_resource_without_anonymous_handler_is_401_forbidden(
    anon: httpx.AsyncClient,
) -> None:
    r = await anon.get("users/", params={"op": "whoami"})
    assert (r.status_code, r.text) == (401, "Forbidden")
    assert r.headers["www-authenticate"] == 'OAuth realm="OAuth"'


@pytest.mark.parametrize(("method", "op"), [("GET", None), ("POST", "allocate")])
async def test_no_credentials_on_machines_collection_is_unrecognised_signature(
    anon: httpx.AsyncClient, method: str, op: str | None
) -> None:
    r = await anon.request(method, "machines/", params={"op": op} if op else None)
    assert (r.status_code, r.text) == (400, f"Unrecognised signature: method={method} op={op}")


async def test_anonymous_is_registered_is_served(anon: httpx.AsyncClient) -> None:
    r = await anon.get("machines/", params={"op": "is_registered", "mac_address": "52:54:00:00:00:01"})
    assert (r.status_code, r.json()) == (200, True)
    r = await anon.get("machines/", params={"op": "is_registered", "mac_address": "00:00:00:00:00:99"})
    assert r.json() is False
    r = await anon.get("machines/", params={"op": "is_registered"})
    assert r.status_code == 400


async def test_unknown_consumer_key(anon: httpx.AsyncClient) -> None:
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": oauth_header("x:y:z")})
    assert (r.status_code, r.text) == (401, "Authorization Error: Invalid API key.")


async def test_unknown_token(anon: httpx.AsyncClient) -> None:
    key = ADMIN_KEY.split(":")[0] + ":nosuchtoken:secret"
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": oauth_header(key)})
    assert (r.status_code, r.text) == (401, "Authorization Error: 'Invalid access token: nosuchtoken'")


async def test_stale_timestamp_rejected_future_accepted(anon: httpx.AsyncClient) -> None:
    stale = int(time.time()) - 301
    r = await anon.get(
        "users/", params={"op": "whoami"}, headers={"Authorization": oauth_header(ADMIN_KEY, timestamp=stale)}
    )
    assert r.status_code == 401
    assert r.text.startswith(f"Authorization Error: 'Expired timestamp: given {stale} and now ")
    assert r.text.endswith("has a greater difference than threshold 300'")
    future = int(time.time()) + 3600
    r = await anon.get(
        "users/",
        params={"op": "whoami"},
        headers={"Authorization": oauth_header(ADMIN_KEY, timestamp=future)},
    )
    assert r.status_code == 200


async def test_non_integer_timestamp_is_500_in_37_and_400_in_40(anon: httpx.AsyncClient) -> None:
    """3.7: piston's ``_check_timestamp`` calls ``int()``; the ValueError is a 500 with its text. MAAS 4
    (master's ``RequestValidityReport``) answers 400 naming the parameter."""
    header = oauth_header(ADMIN_KEY, oauth_timestamp="soon")
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    assert (r.status_code, r.text) == (500, "invalid literal for int() with base 10: 'soon'")
    sim4 = Simulator(api_key=ADMIN_KEY, maas4=True)
    async with client(sim4, None) as c:
        r = await c.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    assert r.status_code == 400
    assert "oauth_timestamp has an unexpected type" in r.text


async def test_reused_nonce_rejected(anon: httpx.AsyncClient) -> None:
    header = oauth_header(ADMIN_KEY, nonce="once")
    assert (
        await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    ).status_code == 200
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    assert (r.status_code, r.text) == (401, "Authorization Error: 'Nonce already used: once'")


async def test_wrong_signature_and_method_and_version(anon: httpx.AsyncClient) -> None:
    r = await anon.get(
        "users/",
        params={"op": "whoami"},
        headers={"Authorization": oauth_header(ADMIN_KEY, oauth_signature="%26bad")},
    )
    assert r.status_code == 401
    assert r.text.startswith("Authorization Error: 'Invalid signature. Expected signature base string: &")
    r = await anon.get(
        "users/",
        params={"op": "whoami"},
        headers={"Authorization": oauth_header(ADMIN_KEY, oauth_signature_method="RSA-SHA1")},
    )
    assert r.text == (
        "Authorization Error: 'Signature method RSA-SHA1 not supported try one of the following: "
        "PLAINTEXT, HMAC-SHA1'"
    )
    r = await anon.get(
        "users/",
        params={"op": "whoami"},
        headers={"Authorization": oauth_header(ADMIN_KEY, oauth_version="2.0")},
    )
    assert r.status_code == 401


async def test_credentials_in_query_string_are_accepted(anon: httpx.AsyncClient) -> None:
    c, t, s = ADMIN_KEY.split(":")
    params = {
        "op": "whoami",
        "oauth_consumer_key": c,
        "oauth_token": t,
        "oauth_signature": f"&{s}",
        "oauth_signature_method": "PLAINTEXT",
        "oauth_timestamp": str(int(time.time())),
        "oauth_nonce": "query-nonce",
    }
    r = await anon.get("users/", params=params)
    assert r.status_code == 200


async def test_header_missing_a_field_counts_as_no_credentials(anon: httpx.AsyncClient) -> None:
    header = oauth_header(ADMIN_KEY).replace("oauth_nonce", "oauth_nonsense")
    r = await anon.get("users/", params={"op": "whoami"}, headers={"Authorization": header})
    assert (r.status_code, r.text) == (401, "Forbidden")


async def test_non_admin_user_and_admin_only_operations(sim: Simulator, alice: httpx.AsyncClient) -> None:
    r = await alice.get("users/", params={"op": "whoami"})
    assert r.json() == {
        "username": "alice",
        "email": "alice@example.com",
        "is_local": True,
        "is_superuser": False,
        "resource_uri": "/MAAS/api/2.0/users/alice/",
    }
    assert (await alice.post("tags/", data={"name": "x"})).status_code == 403
    assert (
        await alice.post("dnsresources/", data={"fqdn": "a.maas", "ip_addresses": "10.0.0.1"})
    ).status_code == 403
    r = await alice.post("zones/", data={"name": "z"})
    assert (r.status_code, r.text) == (403, "This method is reserved for admin users.")
    r = await alice.get("debug/", params={"op": "counters"})
    assert (r.status_code, r.text) == (403, "User is not allowed access to this API.")


async def test_add_user_and_login_view(sim: Simulator, anon: httpx.AsyncClient) -> None:
    bob = sim.add_user("bob", password="pw")
    async with client(sim, bob.api_key) as c:
        assert (await c.get("users/", params={"op": "whoami"})).json()["username"] == "bob"
    r = await anon.post(
        "http://maas.test/MAAS/accounts/authenticate/", data={"username": "bob", "password": "pw"}
    )
    assert r.status_code == 200
    assert f"{r.json()['consumer_key']}:{r.json()['token_key']}:{r.json()['token_secret']}" == bob.api_key
    r = await anon.post(
        "http://maas.test/MAAS/accounts/authenticate/", data={"username": "bob", "password": "nope"}
    )
    assert (r.status_code, r.text) == (403, "")
    r = await anon.post(
        "http://maas.test/MAAS/accounts/authenticate/",
        content=b"--x",
        headers={"content-type": "multipart/form-data"},
    )
    assert r.status_code == 403
    assert (await anon.get("http://maas.test/MAAS/accounts/authenticate/")).status_code == 405
    with pytest.raises(ValueError, match="already exists"):
        sim.add_user("bob")
    with pytest.raises(ValueError, match="token key already in use"):
        sim.add_user("carol", api_key=bob.api_key)
    with pytest.raises(ValueError, match="consumer_key:token_key:token_secret"):
        sim.add_user("dave", api_key="not-a-key")


async def test_nonces_are_pruned_after_the_window() -> None:
    now = [1_000_000.0]
    from capmaas_dev.simulator.auth import Authenticator

    auth = Authenticator(clock=lambda: now[0])
    user = auth.add_user("u", api_key=ALICE_KEY)
    params = {
        "oauth_consumer_key": user.consumer_key,
        "oauth_token": user.token_key,
        "oauth_signature": "&" + user.token_secret,
        "oauth_signature_method": "PLAINTEXT",
        "oauth_timestamp": str(int(now[0])),
        "oauth_nonce": "n",
    }
    auth.authenticate(params)
    now[0] += 1000
    params["oauth_timestamp"] = str(int(now[0]))
    assert auth.authenticate(params) is user  # the old nonce was forgotten with its window
