"""A strict reader for the workload-cluster kubeconfigs tenants hand the operator.

Why not the ``kubernetes`` package's loader: a kubeconfig is *code* to that loader. An ``exec`` user runs a
command, ``auth-provider`` runs plugins, ``tokenFile``/``client-certificate``/``certificate-authority``
read files of the operator's filesystem (and send them to a server the kubeconfig names), ``proxy-url``
reroutes the connection. The ``<cluster>-kubeconfig`` Secret lives in the tenant's namespace and anyone
with write access there controls it, so all of that would run with the operator's rights (its environment
holds the default MAAS API key). Here a kubeconfig is *data*: exactly the fields the operator needs, every
one inline, each checked; anything else is refused with an error naming the field, so the tenant can fix it.

Accepted (and nothing more): per cluster ``server`` (``https://`` only: the credentials must not travel in the
clear) and ``certificate-authority-data``; per user ``token`` or ``client-certificate-data`` +
``client-key-data``; per context ``cluster``, ``user``, ``namespace``; top level ``apiVersion``, ``kind``,
``clusters``, ``contexts``, ``users``, ``current-context``, ``preferences`` (ignored). Every entry is checked,
not only the current context's, so a kubeconfig carrying an exec plugin anywhere is refused outright. YAML
aliases are refused (an alias bomb expands exponentially while it is walked) and the input is size-bounded.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pydantic
import yaml

__all__ = ["MAX_KUBECONFIG_BYTES", "KubeconfigRejected", "WorkloadKubeconfig", "parse_kubeconfig"]

#: A CAPI kubeconfig (one CA, one client certificate and key) is a few KiB; this leaves room for CA bundles.
MAX_KUBECONFIG_BYTES = 128 * 1024

_TOP_LEVEL = frozenset(
    {"apiVersion", "kind", "clusters", "contexts", "users", "current-context", "preferences"}
)


class KubeconfigRejected(ValueError):
    """The kubeconfig is not one the operator will use; ``field`` is the path of the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"kubeconfig field {field}: {problem}")
        self.field = field
        self.problem = problem


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)


class _Cluster(_Strict):
    server: str
    certificate_authority_data: str | None = pydantic.Field(default=None, alias="certificate-authority-data")


class _User(_Strict):
    token: str | None = None
    client_certificate_data: str | None = pydantic.Field(default=None, alias="client-certificate-data")
    client_key_data: str | None = pydantic.Field(default=None, alias="client-key-data")


class _Context(_Strict):
    cluster: str
    user: str
    namespace: str | None = None


@dataclasses.dataclass(frozen=True)
class WorkloadKubeconfig:
    """What the operator takes from a kubeconfig: where the apiserver is and inline credentials.

    Secrets (token, client key) never appear in ``repr``."""

    server: str
    ca_pem: bytes | None = dataclasses.field(default=None, repr=False)
    token: str | None = dataclasses.field(default=None, repr=False)
    client_cert_pem: bytes | None = dataclasses.field(default=None, repr=False)
    client_key_pem: bytes | None = dataclasses.field(default=None, repr=False)

    def authorization(self) -> str | None:
        """The ``Authorization`` header value (bearer token), or None for client-certificate auth."""
        return f"Bearer {self.token}" if self.token else None

    def ssl_context(self) -> ssl.SSLContext:
        """Verification against the kubeconfig's CA (else the system store), with the client certificate.

        ``ssl`` loads certificate chains only from files: the PEMs go to a private temporary file that is
        removed as soon as they are loaded."""
        ctx = ssl.create_default_context()
        if self.ca_pem is not None:
            try:
                ctx.load_verify_locations(cadata=self.ca_pem.decode("ascii", errors="replace"))
            except (ssl.SSLError, ValueError) as exc:
                raise KubeconfigRejected(
                    "clusters[].cluster.certificate-authority-data", "not a PEM CA certificate"
                ) from exc
        if self.client_cert_pem is not None and self.client_key_pem is not None:
            fd, path = tempfile.mkstemp(prefix="capmaas-client-", suffix=".pem")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(self.client_cert_pem.rstrip(b"\n") + b"\n" + self.client_key_pem)
                ctx.load_cert_chain(path)
            except (ssl.SSLError, ValueError) as exc:
                raise KubeconfigRejected(
                    "users[].user.client-certificate-data",
                    "not a PEM certificate matching client-key-data",
                ) from exc
            finally:
                os.unlink(path)
        return ctx


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors/aliases (they make a small document arbitrarily large)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise KubeconfigRejected("(document)", "YAML aliases are not allowed")
        return super().compose_node(parent, index)


def _entries(doc: Mapping[str, Any], section: str, inner: str, model: type[_Strict]) -> dict[str, Any]:
    """``clusters``/``users``/``contexts`` as ``{name: validated model}``; every entry is checked."""
    raw = doc.get(section)
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise KubeconfigRejected(section, "must be a list")
    out: dict[str, Any] = {}
    for i, entry in enumerate(raw):
        where = f"{section}[{i}]"
        if not isinstance(entry, dict):
            raise KubeconfigRejected(where, "must be a mapping")
        extra = sorted(set(entry) - {"name", inner})
        if extra:
            raise KubeconfigRejected(f"{where}.{extra[0]}", "is not allowed")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise KubeconfigRejected(f"{where}.name", "must be a non-empty string")
        body = entry.get(inner)
        if not isinstance(body, dict):
            raise KubeconfigRejected(f"{where}.{inner}", "must be a mapping")
        try:
            out[name] = model.model_validate(body)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            problem = "is not allowed" if first["type"] == "extra_forbidden" else first["msg"]
            raise KubeconfigRejected(f"{where}.{inner}.{loc}", problem) from exc
    return out


def _b64(value: str, field: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise KubeconfigRejected(field, "is not base64") from exc


def _check_server(server: str, field: str) -> str:
    parts = urlsplit(server.strip())
    if parts.scheme != "https":
        raise KubeconfigRejected(field, "must be an https:// URL (credentials never travel in the clear)")
    if not parts.hostname:
        raise KubeconfigRejected(field, "has no host")
    if parts.username is not None or parts.password is not None:
        raise KubeconfigRejected(field, "must not carry user information")
    if parts.query or parts.fragment:
        raise KubeconfigRejected(field, "must not have a query or fragment")
    try:
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError as exc:
        raise KubeconfigRejected(field, "has an invalid port") from exc
    return server.strip().rstrip("/")


def parse_kubeconfig(raw: bytes, *, max_bytes: int = MAX_KUBECONFIG_BYTES) -> WorkloadKubeconfig:
    """The current context's server and inline credentials; :class:`KubeconfigRejected` for anything else."""
    if len(raw) > max_bytes:
        raise KubeconfigRejected("(document)", f"larger than {max_bytes} bytes")
    try:
        doc = yaml.load(raw, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise KubeconfigRejected("(document)", f"not YAML ({type(exc).__name__})") from exc
    if not isinstance(doc, dict):
        raise KubeconfigRejected("(document)", "must be a mapping")
    extra = sorted(str(k) for k in set(doc) - _TOP_LEVEL)
    if extra:
        raise KubeconfigRejected(extra[0], "is not allowed")
    if doc.get("kind", "Config") != "Config":
        raise KubeconfigRejected("kind", "must be Config")
    clusters: dict[str, _Cluster] = _entries(doc, "clusters", "cluster", _Cluster)
    users: dict[str, _User] = _entries(doc, "users", "user", _User)
    contexts: dict[str, _Context] = _entries(doc, "contexts", "context", _Context)
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigRejected("current-context", "must name a context")
    context = contexts.get(current)
    if context is None:
        raise KubeconfigRejected("current-context", f"names no context of the kubeconfig ({current!r})")
    cluster = clusters.get(context.cluster)
    if cluster is None:
        raise KubeconfigRejected(f"contexts[{current}].context.cluster", "names no cluster of the kubeconfig")
    user = users.get(context.user)
    if user is None:
        raise KubeconfigRejected(f"contexts[{current}].context.user", "names no user of the kubeconfig")
    cpath, upath = f"clusters[{context.cluster}].cluster", f"users[{context.user}].user"
    server = _check_server(cluster.server, f"{cpath}.server")
    ca = cluster.certificate_authority_data
    ca_pem = _b64(ca, f"{cpath}.certificate-authority-data") if ca else None
    has_cert = user.client_certificate_data is not None or user.client_key_data is not None
    if user.token and has_cert:
        raise KubeconfigRejected(upath, "give either token or client-certificate-data/client-key-data")
    if has_cert:
        if not user.client_certificate_data or not user.client_key_data:
            missing = "client-key-data" if user.client_certificate_data else "client-certificate-data"
            raise KubeconfigRejected(f"{upath}.{missing}", "is missing (needed with the other one)")
        return WorkloadKubeconfig(
            server=server,
            ca_pem=ca_pem,
            client_cert_pem=_b64(user.client_certificate_data, f"{upath}.client-certificate-data"),
            client_key_pem=_b64(user.client_key_data, f"{upath}.client-key-data"),
        )
    if not user.token:
        raise KubeconfigRejected(upath, "has no inline credentials (token or client-certificate-data)")
    if any(c in user.token for c in "\r\n"):
        raise KubeconfigRejected(f"{upath}.token", "must be one line")
    return WorkloadKubeconfig(server=server, ca_pem=ca_pem, token=user.token.strip())
