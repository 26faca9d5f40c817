"""Client construction: base URL spellings, TLS settings, the public surface and the redacting repr."""

from __future__ import annotations

import logging
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from maas_fakes import API_KEY, KEY_PARTS, FakeMaas, ok

import capmaas.maas
from capmaas.maas import InvalidBaseUrlError, MaasClient, normalize_base_url

ROOT = "http://127.0.0.1:5240/MAAS/api/2.0/"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5240/MAAS",
        "http://127.0.0.1:5240/MAAS/",
        "http://127.0.0.1:5240/MAAS/api/2.0",
        "http://127.0.0.1:5240/MAAS/api/2.0/",
        " http://127.0.0.1:5240/MAAS/api/2.0// ",
    ],
)
async def test_base_url_spellings_reach_the_same_api_root(url: str) -> None:
    fake = FakeMaas()
    fake.route("GET", "version/", None, ok({"version": "3.7.3"}))
    assert normalize_base_url(url) == ROOT
    async with MaasClient(url, api_key=API_KEY, transport=httpx.MockTransport(fake)) as maas:
        await maas.version()
    assert str(fake.last.url) == ROOT + "version/"


def test_other_prefixes_are_kept() -> None:
    assert normalize_base_url("https://maas.example") == "https://maas.example/api/2.0/"
    assert normalize_base_url("https://proxy.example/maas-a/") == "https://proxy.example/maas-a/api/2.0/"


@pytest.mark.parametrize(
    "url", ["127.0.0.1:5240/MAAS", "ftp://h/MAAS", "http:///MAAS", "http://h/MAAS?x=1", "http://h/MAAS#f"]
)
def test_bad_base_urls(url: str) -> None:
    with pytest.raises(InvalidBaseUrlError):
        normalize_base_url(url)


def test_public_surface_is_pinned() -> None:
    assert sorted(capmaas.maas.__all__) == capmaas.maas.__all__
    for name in capmaas.maas.__all__:
        assert getattr(capmaas.maas, name) is not None
    assert {"MaasClient", "MaasError", "Machine", "AllocateConstraints", "NoMachineAvailableError"} <= set(
        capmaas.maas.__all__
    )


async def test_repr_never_shows_the_key() -> None:
    async with MaasClient("http://127.0.0.1:5240/MAAS", api_key=API_KEY) as maas:
        shown = repr(maas) + str(maas) + repr(maas._http._credentials) + repr(maas._client.auth)
    assert "127.0.0.1" in shown
    for part in KEY_PARTS:
        assert part not in shown


def _ca_pem() -> str:
    """A self-signed CA certificate made with the cryptography package (a project dependency)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "capmaas test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _ca_subjects(maas: MaasClient) -> list[str]:
    pool = maas._client._transport._pool  # type: ignore[attr-defined]
    context: ssl.SSLContext = pool._ssl_context
    return [str(c.get("subject")) for c in context.get_ca_certs()]


async def test_tls_ca_data_and_bundle_path_are_trusted(tmp_path: Path) -> None:
    pem = _ca_pem()
    async with MaasClient("https://maas.example/MAAS", api_key=API_KEY, ca_data=pem) as maas:
        assert any("capmaas test CA" in s for s in _ca_subjects(maas))
    bundle = tmp_path / "ca.pem"
    bundle.write_text(pem)
    async with MaasClient("https://maas.example/MAAS", api_key=API_KEY, verify=str(bundle)) as maas:
        assert any("capmaas test CA" in s for s in _ca_subjects(maas))
    context = ssl.create_default_context()
    async with MaasClient("https://maas.example/MAAS", api_key=API_KEY, verify=context, ca_data=pem) as maas:
        assert any("capmaas test CA" in s for s in _ca_subjects(maas))


@pytest.mark.parametrize(("insecure", "verify"), [(True, True), (False, False)])
async def test_insecure_switch_disables_verification_and_warns(
    insecure: bool, verify: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="capmaas.maas")
    async with MaasClient(
        "https://maas.example/MAAS", api_key=API_KEY, insecure=insecure, verify=verify
    ) as maas:
        pool = maas._client._transport._pool  # type: ignore[attr-defined]
        assert pool._ssl_context.verify_mode == ssl.CERT_NONE
    assert "DISABLED" in caplog.text


async def test_verification_is_on_by_default(caplog: pytest.LogCaptureFixture) -> None:
    async with MaasClient("https://maas.example/MAAS", api_key=API_KEY) as maas:
        pool = maas._client._transport._pool  # type: ignore[attr-defined]
        assert pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert "DISABLED" not in caplog.text


def test_importing_the_client_pulls_in_no_kubernetes_or_simulator() -> None:
    code = (
        "import sys, capmaas.maas; print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in {'kopf', 'kubernetes'} or m.startswith('capmaas_dev.simulator')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
