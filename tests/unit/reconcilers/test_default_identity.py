"""Who may use the operator's default MAAS credentials, and how each identity reaches MAAS (issue 10, items 3
and 7): an explicit namespace allow-list (deny by default), per-identity TLS and plaintext opt-ins shown as a
condition, and a garbage CA as a clear InvalidCredentials instead of an unexpected error."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import pytest
from fakes import FakeKube
from reconciler_env import Env
from test_credentials_and_config import mc

from capmaas.api import conditions as C
from capmaas.gateway import MaasConnections
from capmaas.maas import MaasClient
from capmaas.reconcilers.credentials import (
    LabelRequirement,
    connect,
    parse_selector,
    resolve_credentials,
    transport_security,
)
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import MaasCredentials, NamespaceAllowList
from capmaas_dev import demo

KEY = "a:b:c"


def default(**kw: Any) -> MaasCredentials:
    return MaasCredentials(endpoint="https://maas.example/MAAS", api_key=KEY, source="operator default", **kw)


# --- the allow-list --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", ()),
        ("a=b", (LabelRequirement("a", "in", frozenset({"b"})),)),
        (
            "a==b, c!=d",
            (LabelRequirement("a", "in", frozenset({"b"})), LabelRequirement("c", "notin", frozenset({"d"}))),
        ),
        ("example.com/tier", (LabelRequirement("example.com/tier", "exists"),)),
        ("!blocked", (LabelRequirement("blocked", "!exists"),)),
        (
            "team in (a, b),env notin (prod)",
            (
                LabelRequirement("team", "in", frozenset({"a", "b"})),
                LabelRequirement("env", "notin", frozenset({"prod"})),
            ),
        ),
    ],
)
def test_label_selectors_parse_like_kubernetes(text: str, want: tuple[LabelRequirement, ...]) -> None:
    assert parse_selector(text) == want


@pytest.mark.parametrize("text", ["a=b=c", "=b", "a in b", "a in (b c)", "a,,b", "a b"])
def test_a_bad_selector_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="label"):
        parse_selector(text)


@pytest.mark.parametrize(
    ("labels", "selector", "allowed"),
    [
        ({"tier": "trusted"}, "tier=trusted", True),
        ({"tier": "other"}, "tier=trusted", False),
        ({}, "tier", False),
        ({"tier": "x"}, "tier,!blocked", True),
        ({"tier": "x", "blocked": ""}, "tier,!blocked", False),
        ({"team": "b"}, "team in (a,b)", True),
        ({"team": "c"}, "team notin (c)", False),
        ({}, "team notin (c)", True),
        (None, "team notin (c)", False),  # no such namespace: never allowed
    ],
)
async def test_a_namespace_selector_decides_by_the_namespace_labels(
    labels: dict[str, str] | None, selector: str, allowed: bool
) -> None:
    kube = FakeKube()
    if labels is not None:
        kube.namespaces["ns"] = labels
    creds = default(namespaces=NamespaceAllowList(selector=selector))
    if allowed:
        assert await resolve_credentials(kube, mc(identity=None), creds) is creds
    else:
        with pytest.raises(TransientError) as info:
            await resolve_credentials(kube, mc(identity=None), creds)
        assert info.value.reason == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON


async def test_default_credentials_are_refused_without_an_allow_list() -> None:
    """Before: any namespace used them (the operator's key, a MAAS admin's for LXD and DNS)."""
    with pytest.raises(TransientError) as info:
        await resolve_credentials(FakeKube(), mc(identity=None), default())
    assert info.value.reason == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON
    assert "namespace ns may not use the operator's default MAAS credentials" in info.value.message
    assert "CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES" in info.value.message
    assert KEY not in info.value.message


@pytest.mark.parametrize("names", [{"ns"}, {"*"}, {"other", "ns"}])
async def test_named_namespaces_may_use_them(names: set[str]) -> None:
    creds = default(namespaces=NamespaceAllowList(frozenset(names)))
    assert await resolve_credentials(FakeKube(), mc(identity=None), creds) is creds


async def test_an_identity_secret_needs_no_allow_list() -> None:
    kube = FakeKube()
    kube.secrets[("ns", "creds")] = {"MAAS_ENDPOINT": b"https://tenant/MAAS", "MAAS_API_KEY": b"x:y:z"}
    creds = await resolve_credentials(kube, mc(), default())
    assert creds.source == "Secret ns/creds"


async def test_a_refused_namespace_shows_on_the_maascluster_and_its_machines(env: Env) -> None:
    refused = dataclasses.replace(env.creds, namespaces=NamespaceAllowList(frozenset({"someone-else"})))
    env.clusters.default_credentials = refused
    env.machines.default_credentials = refused
    with contextlib.suppress(TransientError):
        await env.cluster()
    body = env.kube.get("maasclusters", "c1")
    (connected,) = [c for c in body["status"]["conditions"] if c["type"] == C.MAAS_CONNECTED_CONDITION]
    assert connected["status"] == "False"
    assert connected["reason"] == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON
    assert "namespace ns" in connected["message"]
    env.kube.get("clusters", "c1")["status"] = {"initialization": {"infrastructureProvisioned": True}}
    env.machine("m0")
    with contextlib.suppress(TransientError):
        await env.step("m0")
    m = env.kube.get("maasmachines", "m0")
    (ready,) = [c for c in m["status"]["conditions"] if c["type"] == C.READY_CONDITION]
    assert ready["reason"] == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON
    assert env.requests() == 0  # nothing was sent to MAAS with the operator's key


# --- transport -------------------------------------------------------------------------------------------
def secret(endpoint: str, **extra: bytes) -> FakeKube:
    kube = FakeKube()
    kube.secrets[("ns", "creds")] = {"MAAS_ENDPOINT": endpoint.encode(), "MAAS_API_KEY": b"x:y:z", **extra}
    return kube


async def test_http_off_loopback_is_refused_without_the_identity_opt_in() -> None:
    """Before: accepted, and every request carried the OAuth PLAINTEXT signature (the secret) in the clear."""
    with pytest.raises(TransientError) as info:
        await resolve_credentials(secret("http://maas.example:5240/MAAS"), mc(), None)
    assert info.value.reason == C.PLAINTEXT_ENDPOINT_REFUSED_REASON
    assert "MAAS_ALLOW_PLAINTEXT_HTTP=true in Secret ns/creds" in info.value.message
    with pytest.raises(TransientError) as info:
        await resolve_credentials(
            FakeKube(),
            mc(identity=None),
            dataclasses.replace(
                default(),
                endpoint="http://maas.example/MAAS",
                namespaces=NamespaceAllowList(frozenset({"ns"})),
            ),
        )
    assert "CAPMAAS_MAAS__ALLOW_PLAINTEXT_HTTP" in info.value.message


@pytest.mark.parametrize(
    ("endpoint", "extra", "status", "reason"),
    [
        ("https://maas.example/MAAS", {}, True, C.TLS_VERIFIED_REASON),
        (
            "https://maas.example/MAAS",
            {"MAAS_INSECURE_SKIP_TLS_VERIFY": b"true"},
            False,
            C.TLS_VERIFICATION_DISABLED_REASON,
        ),
        ("http://127.0.0.1:5240/MAAS", {}, True, C.LOOPBACK_HTTP_REASON),
        ("http://[::1]:5240/MAAS", {}, True, C.LOOPBACK_HTTP_REASON),
        ("http://maas.example/MAAS", {"MAAS_ALLOW_PLAINTEXT_HTTP": b"yes"}, False, C.PLAINTEXT_HTTP_REASON),
    ],
)
async def test_each_identity_transport_is_shown(
    endpoint: str, extra: dict[str, bytes], status: bool, reason: str
) -> None:
    creds = await resolve_credentials(secret(endpoint, **extra), mc(), None)
    got = transport_security(creds)
    assert got[:2] == (status, reason)
    if not status:
        assert "Secret ns/creds" in got[2]


def test_the_default_credentials_name_the_operator_setting() -> None:
    _, reason, message = transport_security(default(insecure=True))
    assert reason == C.TLS_VERIFICATION_DISABLED_REASON
    assert "CAPMAAS_MAAS__INSECURE_SKIP_TLS_VERIFY" in message


async def test_the_legacy_ca_key_is_read() -> None:
    creds = await resolve_credentials(secret("https://m/MAAS", MAAS_CA_BUNDLE=b"PEM"), mc(), None)
    assert creds.ca_data == "PEM"
    both = await resolve_credentials(
        secret("https://m/MAAS", MAAS_CA_BUNDLE=b"old", MAAS_CA_CERT=b"new"), mc(), None
    )
    assert both.ca_data == "new"


async def test_a_garbage_ca_is_invalid_credentials_naming_the_key() -> None:
    """Before: ssl.SSLError escaped the connect as an unexpected error (a traceback every pass)."""
    kube = secret("https://127.0.0.1:1/MAAS", MAAS_CA_CERT=b"-----BEGIN CERTIFICATE-----\nnot base64\n")

    def factory(c: MaasCredentials) -> MaasClient:
        return MaasClient(c.endpoint, api_key=c.api_key, ca_data=c.ca_data, insecure=c.insecure)

    conns = MaasConnections(client_factory=factory, fast=1, idle=1, batch_size=10, wake=lambda key: None)
    with pytest.raises(TransientError) as info:
        await connect(kube, conns, mc(), None)
    await conns.aclose()
    assert info.value.reason == C.INVALID_CREDENTIALS_REASON
    assert "MAAS_CA_CERT" in info.value.message
    assert "not a PEM certificate" in info.value.message


def test_demo_identity_secret_opt_in() -> None:
    assert (
        "MAAS_ALLOW_PLAINTEXT_HTTP" not in demo.identity_secret("i", "ns", "http://x/MAAS", KEY)["stringData"]
    )
    s = demo.identity_secret("i", "ns", "http://x/MAAS", KEY, allow_plaintext_http=True)
    assert s["stringData"]["MAAS_ALLOW_PLAINTEXT_HTTP"] == "true"


# --- configuration ---------------------------------------------------------------------------------------
def test_allow_list_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from capmaas.config import load_config
    from capmaas.operator.app import default_credentials

    monkeypatch.setenv("CAPMAAS_MAAS__ENDPOINT", "https://maas.example/MAAS")
    monkeypatch.setenv("CAPMAAS_MAAS__API_KEY", KEY)
    monkeypatch.setenv("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES", " team-a, team-b ,")
    monkeypatch.setenv("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR", "tier in (gold,silver)")
    monkeypatch.setenv("CAPMAAS_MAAS__ALLOW_PLAINTEXT_HTTP", "true")
    creds = default_credentials(load_config("/nonexistent"))
    assert creds is not None
    assert creds.namespaces == NamespaceAllowList(frozenset({"team-a", "team-b"}), "tier in (gold,silver)")
    assert creds.allow_plaintext
    monkeypatch.setenv("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES", " ")  # clusterctl's unset value
    monkeypatch.delenv("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR")
    creds = default_credentials(load_config("/nonexistent"))
    assert creds is not None
    assert creds.namespaces == NamespaceAllowList()


def test_allow_list_flags_and_a_bad_selector_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from capmaas.cli import main

    monkeypatch.setenv("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR", "tier in gold")
    assert main(["run"]) == 2
    assert "not a label selector at 'tier in gold'" in capsys.readouterr().err
    assert main(["run", "--default-identity-namespace-selector", "tier in"]) == 2
