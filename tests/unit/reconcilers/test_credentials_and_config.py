"""Credentials resolution (identity Secret → MAAS connection) and the operator config loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ALLOWED, FakeKube
from reconciler_env import Env

from capmaas.api import conditions as C
from capmaas.config import load_config
from capmaas.reconcilers.credentials import connect, resolve_credentials
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import MaasCredentials
from capmaas_dev import demo


def mc(identity: str | None = "creds") -> dict[str, object]:
    return demo.maascluster("c1", "ns", identity=identity)


async def test_missing_identity_secret_is_a_clear_transient_error() -> None:
    with pytest.raises(TransientError) as info:
        await resolve_credentials(FakeKube(), mc(), None)
    assert info.value.reason == C.IDENTITY_SECRET_NOT_FOUND_REASON
    assert "ns/creds" in info.value.message


async def test_secret_without_the_key_names_the_missing_key() -> None:
    kube = FakeKube()
    kube.secrets[("ns", "creds")] = {"MAAS_ENDPOINT": b"http://maas/MAAS"}
    with pytest.raises(TransientError) as info:
        await resolve_credentials(kube, mc(), None)
    assert info.value.reason == C.INVALID_CREDENTIALS_REASON
    assert "MAAS_API_KEY" in info.value.message


async def test_legacy_keys_and_ca_are_read() -> None:
    kube = FakeKube()
    kube.secrets[("ns", "creds")] = {
        "endpoint": b"http://maas/MAAS",
        "api-key": b"a:b:c",
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",
        "MAAS_CA_CERT": b"PEM",
    }
    creds = await resolve_credentials(kube, mc(), None)
    assert (creds.endpoint, creds.api_key, creds.ca_data) == ("http://maas/MAAS", "a:b:c", "PEM")
    assert "a:b:c" not in repr(creds)


async def test_no_identity_and_no_default_is_reported() -> None:
    with pytest.raises(TransientError) as info:
        await resolve_credentials(FakeKube(), mc(identity=None), None)
    assert info.value.reason == C.INVALID_CREDENTIALS_REASON


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("not-a-key", C.INVALID_CREDENTIALS_REASON),  # garbled: not consumer:token:secret
        ("aaa:bbb:ccc", C.INVALID_CREDENTIALS_REASON),  # well-formed, unknown to MAAS (401)
    ],
)
async def test_bad_keys_become_invalid_credentials_without_the_key_in_the_message(
    env: Env, key: str, reason: str
) -> None:
    env.kube.secrets[("ns", "creds")] = {
        "MAAS_ENDPOINT": b"http://maas.test/MAAS",
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",  # the in-process simulator: no network
        "MAAS_API_KEY": key.encode(),
    }
    with pytest.raises(TransientError) as info:
        await connect(env.kube, env.connections, mc(), None)
    assert info.value.reason == reason
    assert key not in info.value.message
    assert env.connections.sessions() == []  # a failed identity is not pooled


async def test_unreachable_maas_is_maas_unreachable() -> None:
    from capmaas import maas
    from capmaas.gateway import MaasConnections

    conns = MaasConnections(
        client_factory=lambda c: maas.MaasClient(c.endpoint, api_key=c.api_key, max_retries=0, timeout=2),
        fast=1,
        idle=1,
        batch_size=10,
        wake=lambda key: None,
    )
    default = MaasCredentials(endpoint="http://127.0.0.1:9/MAAS", api_key="a:b:c", namespaces=ALLOWED)
    with pytest.raises(TransientError) as info:
        await connect(FakeKube(), conns, mc(identity=None), default)
    assert info.value.reason == C.MAAS_UNREACHABLE_REASON
    await conns.aclose()


async def test_rotated_key_opens_a_new_session_and_closes_the_old(env: Env) -> None:
    other = env.sim.add_user("tenant", admin=True)
    env.kube.secrets[("ns", "creds")] = {
        "MAAS_ENDPOINT": b"http://maas.test/MAAS",
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",  # the in-process simulator: no network
        "MAAS_API_KEY": env.sim.api_key.encode(),
    }
    first = await connect(env.kube, env.connections, mc(), None)
    assert await connect(env.kube, env.connections, mc(), None) is first  # pooled
    env.kube.secrets[("ns", "creds")]["MAAS_API_KEY"] = other.api_key.encode()
    second = await connect(env.kube, env.connections, mc(), None)
    assert second is not first
    assert env.connections.sessions() == [second]


def test_config_from_env_and_secret_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "maas__api_key").write_text("x:y:z")
    monkeypatch.setenv("CAPMAAS_POLLING__FAST_INTERVAL", "0.5")
    monkeypatch.setenv("CAPMAAS_KUBE__NAMESPACE", "capmaas-system")
    config = load_config(str(tmp_path))
    assert config.polling.fast_interval == 0.5
    assert config.kube.namespace == "capmaas-system"
    assert config.maas.api_key is not None
    assert config.maas.api_key.get_secret_value() == "x:y:z"
    assert "x:y:z" not in repr(config)


def test_config_defaults_without_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in __import__("os").environ if n.startswith("CAPMAAS_")]:
        monkeypatch.delenv(name)
    config = load_config("/nonexistent")
    assert config.maas.api_key is None
    assert config.machine.max_deploy_attempts == 3
    assert config.server.health_port == 8080
    assert config.server.metrics_port == 9090


async def test_tls_failure_is_reported_as_unreachable_with_the_endpoint(env: Env) -> None:
    from capmaas import maas
    from capmaas.gateway import MaasConnections
    from capmaas_dev.simulator import serve

    conns = MaasConnections(
        client_factory=lambda c: maas.MaasClient(c.endpoint, api_key=c.api_key, max_retries=0, timeout=5),
        fast=1,
        idle=1,
        batch_size=10,
        wake=lambda key: None,
    )
    async with serve(env.sim, host="127.0.0.1", port=0) as url:
        https = url.replace("http://", "https://")  # the server speaks plain HTTP: the handshake fails
        default = MaasCredentials(endpoint=https, api_key=env.sim.api_key, namespaces=ALLOWED)
        with pytest.raises(TransientError) as info:
            await connect(FakeKube(), conns, mc(identity=None), default)
    assert info.value.reason == C.MAAS_UNREACHABLE_REASON
    assert https in info.value.message
    assert env.sim.api_key not in info.value.message
    await conns.aclose()
