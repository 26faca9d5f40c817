"""The strict workload-kubeconfig reader: only inline credentials and an https server; every other field is
refused with its path named (no apiserver needed: this is the parser on its own)."""

from __future__ import annotations

import base64
import ssl
from typing import Any

import pytest
import yaml

from capmaas.operator.kubeconfig import MAX_KUBECONFIG_BYTES, KubeconfigRejected, parse_kubeconfig


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig(
    *, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "abc"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
        "preferences": {},
    }


def dump(doc: dict[str, Any]) -> bytes:
    return yaml.safe_dump(doc).encode()


def test_a_token_kubeconfig_is_accepted() -> None:
    parsed = parse_kubeconfig(dump(kubeconfig()))
    assert parsed.server == "https://127.0.0.1:6443"
    assert parsed.authorization() == "Bearer abc"
    assert "abc" not in repr(parsed)


def test_client_certificate_data_is_accepted() -> None:
    user = {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")}
    parsed = parse_kubeconfig(dump(kubeconfig(user=user)))
    assert (parsed.client_cert_pem, parsed.client_key_pem) == (b"CERT", b"KEY")
    assert parsed.authorization() is None


REFUSED_USER_FIELDS = {
    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "id"]},
    "auth-provider": {"name": "oidc", "config": {}},
    "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "client-certificate": "/etc/passwd",
    "client-key": "/etc/shadow",
    "username": "admin",
    "password": "admin",
    "as": "system:admin",
    "as-groups": ["system:masters"],
    "as-uid": "0",
    "as-user-extra": {"a": ["b"]},
}


@pytest.mark.parametrize("field", sorted(REFUSED_USER_FIELDS))
def test_every_other_user_field_is_refused_by_name(field: str) -> None:
    doc = kubeconfig(user={"token": "abc", field: REFUSED_USER_FIELDS[field]})
    with pytest.raises(KubeconfigRejected) as err:
        parse_kubeconfig(dump(doc))
    assert err.value.field == f"users[0].user.{field}"
    assert field in str(err.value)


REFUSED_CLUSTER_FIELDS = {
    "certificate-authority": "/etc/ssl/private/ca.pem",
    "proxy-url": "http://127.0.0.1:3128",
    "insecure-skip-tls-verify": True,
    "tls-server-name": "other",
    "extensions": [],
}


@pytest.mark.parametrize("field", sorted(REFUSED_CLUSTER_FIELDS))
def test_every_other_cluster_field_is_refused_by_name(field: str) -> None:
    cluster = {"server": "https://127.0.0.1:6443", field: REFUSED_CLUSTER_FIELDS[field]}
    with pytest.raises(KubeconfigRejected) as err:
        parse_kubeconfig(dump(kubeconfig(cluster=cluster)))
    assert err.value.field == f"clusters[0].cluster.{field}"


def test_an_exec_user_outside_the_current_context_is_refused_too() -> None:
    doc = kubeconfig()
    doc["users"].append({"name": "other", "user": {"exec": {"command": "touch"}}})
    with pytest.raises(KubeconfigRejected) as err:
        parse_kubeconfig(dump(doc))
    assert err.value.field == "users[1].user.exec"


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("http://127.0.0.1:6443", "https"),
        ("https://", "no host"),
        ("https://u:p@127.0.0.1", "user information"),
        ("https://127.0.0.1/?a=b", "query"),
        ("https://127.0.0.1:99999", "port"),
    ],
)
def test_the_server_must_be_a_plain_https_url(server: str, problem: str) -> None:
    with pytest.raises(KubeconfigRejected) as err:
        parse_kubeconfig(dump(kubeconfig(cluster={"server": server})))
    assert err.value.field == "clusters[c].cluster.server"
    assert problem in str(err.value)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"a: &x [1]\nb: *x\n", "(document)"),
        (b"[unclosed", "(document)"),
        (b"- a list", "(document)"),
        (b"kind: Config\nproxy: x\n", "proxy"),
        (b"kind: Pod\n", "kind"),
        (b"kind: Config\n", "current-context"),
        (b"kind: Config\ncurrent-context: nope\n", "current-context"),
        (b"kind: Config\nusers: {}\n", "users"),
        (b"kind: Config\nusers: [x]\n", "users[0]"),
        (b"kind: Config\nusers: [{name: u, user: {}, extra: 1}]\n", "users[0].extra"),
        (b"kind: Config\nusers: [{user: {}}]\n", "users[0].name"),
        (b"kind: Config\nusers: [{name: u, user: 3}]\n", "users[0].user"),
        (b"kind: Config\nusers: [{name: u, user: {token: 3}}]\n", "users[0].user.token"),
    ],
)
def test_malformed_documents_are_refused_with_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(KubeconfigRejected) as err:
        parse_kubeconfig(raw)
    assert err.value.field == field


def test_dangling_context_references_are_refused() -> None:
    doc = kubeconfig()
    doc["contexts"][0]["context"]["cluster"] = "missing"
    with pytest.raises(KubeconfigRejected, match="names no cluster"):
        parse_kubeconfig(dump(doc))
    doc = kubeconfig()
    doc["contexts"][0]["context"]["user"] = "missing"
    with pytest.raises(KubeconfigRejected, match="names no user"):
        parse_kubeconfig(dump(doc))


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({}, "no inline credentials"),
        ({"token": "a", "client-certificate-data": b64("C"), "client-key-data": b64("K")}, "either token"),
        ({"client-certificate-data": b64("C")}, "client-key-data"),
        ({"client-key-data": b64("K")}, "client-certificate-data"),
        ({"client-certificate-data": "!!", "client-key-data": b64("K")}, "base64"),
        ({"token": "a\nInjected: header"}, "one line"),
    ],
)
def test_credentials_must_be_one_inline_kind(user: dict[str, Any], message: str) -> None:
    with pytest.raises(KubeconfigRejected, match=message):
        parse_kubeconfig(dump(kubeconfig(user=user)))


def test_the_input_is_size_bounded() -> None:
    doc = kubeconfig(user={"token": "x" * MAX_KUBECONFIG_BYTES})
    with pytest.raises(KubeconfigRejected, match="larger than"):
        parse_kubeconfig(dump(doc))


def test_a_garbage_ca_is_refused_when_the_tls_context_is_built() -> None:
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64("not a cert")}
    parsed = parse_kubeconfig(dump(kubeconfig(cluster=cluster)))
    with pytest.raises(KubeconfigRejected, match="certificate-authority-data"):
        parsed.ssl_context()


def test_a_garbage_client_certificate_is_refused_and_leaves_no_file(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    user = {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")}
    parsed = parse_kubeconfig(dump(kubeconfig(user=user)))
    with pytest.raises(KubeconfigRejected, match="client-certificate-data"):
        parsed.ssl_context()
    assert list(tmp_path.iterdir()) == []
    assert isinstance(parse_kubeconfig(dump(kubeconfig())).ssl_context(), ssl.SSLContext)
