"""A throwaway PKI for one dev control plane: CA, apiserver serving cert, admin client cert, SA key pair.

Everything is generated fresh per instance (EC P-256 keys: fast to make, accepted by every component), lives
in the instance's work directory and is deleted with it. The admin cert has ``O=system:masters`` so RBAC lets
it do anything, as envtest's does. The CA is valid for a day: long enough for any test run, short enough
that a leaked kubeconfig from a crashed run is useless soon after.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate

VALIDITY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files written by :func:`make_pki`."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public: Path
    sa_private: Path

    @classmethod
    def at(cls, directory: Path) -> Pki:
        """The file layout :func:`make_pki` writes in ``directory``."""
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "apiserver.crt",
            serving_key=directory / "apiserver.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            sa_public=directory / "sa.pub",
            sa_private=directory / "sa.key",
        )


def _key() -> EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: EllipticCurvePrivateKey) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: Certificate) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _cert(
    subject_cn: str,
    key: EllipticCurvePrivateKey,
    issuer_key: EllipticCurvePrivateKey,
    issuer: Certificate | None,
    *,
    org: str | None = None,
    ca: bool = False,
    server: bool = False,
    client: bool = False,
) -> Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    subject = x509.Name(attrs)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    # The in-cluster names, so a kubeconfig pointing at "kubernetes.default" also verifies.
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                ]
            ),
            critical=False,
        )
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """Generate the PKI into ``directory`` (created 0700) and return the file paths."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki = Pki.at(directory)
    ca_key = _key()
    ca = _cert("capmaas-dev-ca", ca_key, ca_key, None, ca=True)
    _write_cert(pki.ca_cert, ca)
    _write_key(pki.ca_key, ca_key)

    serving_key = _key()
    _write_cert(pki.serving_cert, _cert("kube-apiserver", serving_key, ca_key, ca, server=True))
    _write_key(pki.serving_key, serving_key)

    admin_key = _key()
    admin = _cert("capmaas-admin", admin_key, ca_key, ca, org="system:masters", client=True)
    _write_cert(pki.admin_cert, admin)
    _write_key(pki.admin_key, admin_key)

    from cryptography.hazmat.primitives import serialization

    sa_key = _key()
    _write_key(pki.sa_private, sa_key)
    pki.sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


@dataclass(frozen=True)
class ServingPki:
    """A CA and a serving cert/key for 127.0.0.1 (written by :func:`make_serving_pki`)."""

    ca_cert: Path
    cert: Path
    key: Path


def make_serving_pki(directory: Path, *, cert_name: str = "tls.crt", key_name: str = "tls.key") -> ServingPki:
    """A fresh CA plus a serving certificate for 127.0.0.1/localhost signed by it, in ``directory``.

    For loopback webhook servers (the Cluster API manager in the e2e harness): the apiserver verifies them
    with the CA put into the webhook configuration's ``caBundle``. A separate CA from the apiserver's keeps a
    webhook key from being able to impersonate the apiserver. File names default to controller-runtime's.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = ServingPki(ca_cert=directory / "ca.crt", cert=directory / cert_name, key=directory / key_name)
    ca_key = _key()
    ca = _cert("capmaas-webhook-ca", ca_key, ca_key, None, ca=True)
    _write_cert(out.ca_cert, ca)
    key = _key()
    _write_cert(out.cert, _cert("capmaas-webhook", key, ca_key, ca, server=True))
    _write_key(out.key, key)
    return out


def issue_cert(
    pki: Pki,
    directory: Path,
    name: str,
    common_name: str,
    *,
    org: str | None = None,
    server_ips: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> tuple[Path, Path]:
    """A certificate signed by the control plane's CA, written as ``directory/name.crt`` and ``name.key``.

    For the node (:mod:`capmaas_dev.devcluster.node`): the kubelet's client certificate
    (``CN=system:node:<n>``, ``O=system:nodes``, what the Node authorizer expects) and its serving certificate
    for the node's address, which the apiserver verifies for ``kubectl logs``/``exec``. Returns ``(cert,
    key)``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key} is not the EC key make_pki writes")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key = _key()
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    now = dt.datetime.now(dt.UTC)
    server = bool(server_ips or server_names)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path
