"""MAAS credentials for a MaasCluster, who may use which, and the mapping of MAAS failures to retryable
outcomes.

The identity Secret (``spec.identityRef``, same namespace) holds ``MAAS_ENDPOINT``, ``MAAS_API_KEY`` and
optionally ``MAAS_CA_CERT`` (PEM; ``MAAS_CA_BUNDLE``, ``ca.crt`` and ``ca-cert`` are legacy names),
``MAAS_INSECURE_SKIP_TLS_VERIFY`` and ``MAAS_ALLOW_PLAINTEXT_HTTP``; the Go provider's keys
``endpoint``/``api-key`` are accepted. Without identityRef the operator's default credentials apply, but only
in the namespaces the operator's admin allowed (:class:`~capmaas.reconcilers.ports.NamespaceAllowList`).
Messages name the Secret and the key that is wrong, never the value.

Transport rules, per identity: TLS verification is on unless that identity opts out; an ``http://`` endpoint
(whose every request carries the OAuth secret in the clear) is refused unless that identity opts in, except
to a loopback IP address (the request never leaves the host). See docs/security.md.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from capmaas.api import conditions as C
from capmaas.api.v1beta1 import IdentityRef, MaasClusterSpec
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX
from capmaas.reconcilers.keys import IDENTITY_REF as IDENTITY_REF_ANNOTATION
from capmaas.reconcilers.ports import (
    Body,
    KubePort,
    MaasConnector,
    MaasCredentials,
    MaasPort,
    NamespaceAllowList,
)
from capmaas.reconcilers.scope import wire_name

IDENTITY_REF = wire_name(MaasClusterSpec, "identity_ref")
ENDPOINT_KEYS = ("MAAS_ENDPOINT", "endpoint")
API_KEY_KEYS = ("MAAS_API_KEY", "api-key")
#: ``MAAS_CA_CERT`` is the name; the others are read too (``MAAS_CA_BUNDLE``: the chart's earlier name).
CA_KEYS = ("MAAS_CA_CERT", "MAAS_CA_BUNDLE", "ca.crt", "ca-cert")
INSECURE_KEYS = ("MAAS_INSECURE_SKIP_TLS_VERIFY",)
PLAINTEXT_KEYS = ("MAAS_ALLOW_PLAINTEXT_HTTP",)

#: How the operator's admin sets what the messages below point at (config field, env, chart value).
NAMESPACES_SETTING = (
    "maas.default_identity_namespaces / maas.default_identity_namespace_selector (env "
    "CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES, CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR; chart "
    "credentials.allowedNamespaces)"
)
PLAINTEXT_SETTING = "maas.allow_plaintext_http (env CAPMAAS_MAAS__ALLOW_PLAINTEXT_HTTP)"
INSECURE_SETTING = "maas.insecure_skip_tls_verify (env CAPMAAS_MAAS__INSECURE_SKIP_TLS_VERIFY)"

#: Retry delay (s) for a credentials problem: a person has to fix the Secret, so do not hammer anything.
CREDENTIALS_RETRY = 15.0
UNREACHABLE_RETRY = 10.0
#: A machine that hosts VM hosts someone else must remove (or whose VMs are still being deleted).
VM_HOST_RETRY = 30.0
TRUE = ("1", "true", "yes")


def _first(data: Mapping[str, bytes], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in data:
            try:
                value = data[k].decode().strip()
            except UnicodeDecodeError:
                return None
            return value or None
    return None


# --- label selectors -------------------------------------------------------------------------------------
_KEY = r"(?:[a-z0-9A-Z.-]{1,253}/)?[a-zA-Z0-9](?:[-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?"
_VALUE = r"(?:[a-zA-Z0-9](?:[-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?)?"
_REQUIREMENT = re.compile(
    rf"\s*(?:(?P<not>!)\s*(?P<nkey>{_KEY})"
    rf"|(?P<key>{_KEY})\s*(?:(?P<op>==|!=|=)\s*(?P<value>{_VALUE})"
    rf"|\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?)\s*(?:,|$)"
)


@dataclass(frozen=True)
class LabelRequirement:
    """One term of a label selector: ``op`` is ``in``, ``notin``, ``exists`` or ``!exists``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # notin (also true when the label is absent)


@functools.lru_cache(maxsize=16)
def parse_selector(text: str) -> tuple[LabelRequirement, ...]:
    """A Kubernetes label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (b,c)``,
    ``a notin (b)``, comma-separated: all must hold); ValueError naming the part that is not one."""
    out: list[LabelRequirement] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _REQUIREMENT.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"not a label selector at {text[pos:]!r} (e.g. 'tenant-tier=trusted,!blocked')")
        pos = m.end()
        if m["nkey"]:
            out.append(LabelRequirement(m["nkey"], "!exists"))
        elif m["op"]:
            op = "notin" if m["op"] == "!=" else "in"
            out.append(LabelRequirement(m["key"], op, frozenset({m["value"]})))
        elif m["setop"]:
            values = frozenset(v.strip() for v in m["values"].split(","))
            if not all(re.fullmatch(_VALUE, v) for v in values):
                raise ValueError(f"not a label value in {m['values']!r}")
            out.append(LabelRequirement(m["key"], m["setop"], values))
        else:
            out.append(LabelRequirement(m["key"], "exists"))
    return tuple(out)


# --- who may use the default credentials -----------------------------------------------------------------
async def namespace_allowed(kube: KubePort, namespace: str, allowed: NamespaceAllowList) -> bool:
    """True when ``namespace`` is named in ``allowed`` (or ``*`` is), or its labels match the selector."""
    if "*" in allowed.names or namespace in allowed.names:
        return True
    if not allowed.selector.strip():
        return False
    requirements = parse_selector(allowed.selector)  # checked at start-up: cannot fail here
    labels = await kube.namespace_labels(namespace)
    if labels is None:
        return False
    return all(r.matches(labels) for r in requirements)


async def check_default_allowed(kube: KubePort, namespace: str, default: MaasCredentials) -> None:
    """TransientError ``DefaultIdentityNotAllowed`` unless ``namespace`` may use the default credentials."""
    if await namespace_allowed(kube, namespace, default.namespaces):
        return
    raise TransientError(
        C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON,
        f"namespace {namespace} may not use the operator's default MAAS credentials: it is not allowed by "
        f"the operator's {NAMESPACES_SETTING}; give the MaasCluster a spec.identityRef (a Secret in this "
        "namespace), or ask the operator's admin to allow the namespace",
        delay=CREDENTIALS_RETRY,
    )


# --- transport -------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)  # a pure function of the endpoint, asked at every pass of every machine
def _loopback(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name is never trusted to be loopback: it could resolve anywhere


def _plaintext(endpoint: str) -> bool:
    return endpoint.strip().lower().startswith("http://")


def _opt_in(creds: MaasCredentials, key: str, setting: str) -> str:
    return setting if creds.source == "operator default" else f"{key} in {creds.source}"


def check_transport(creds: MaasCredentials) -> None:
    """TransientError ``PlaintextEndpointRefused`` for an ``http://`` endpoint outside loopback without the
    identity's opt-in: every request would carry the key's secret in the clear."""
    if not _plaintext(creds.endpoint) or creds.allow_plaintext or _loopback(creds.endpoint):
        return
    opt_in = f"{PLAINTEXT_KEYS[0]}=true"
    raise TransientError(
        C.PLAINTEXT_ENDPOINT_REFUSED_REASON,
        f"{creds.source}: the MAAS endpoint is http://, so every request would carry the API key's secret "
        f"in the clear; use https://, or opt in with {_opt_in(creds, opt_in, PLAINTEXT_SETTING)}",
        delay=CREDENTIALS_RETRY,
    )


def transport_security(creds: MaasCredentials) -> tuple[bool, str, str]:
    """The ``MaasTransportSecure`` condition of credentials that passed :func:`check_transport`."""
    if _plaintext(creds.endpoint):
        if _loopback(creds.endpoint):
            return (
                True,
                C.LOOPBACK_HTTP_REASON,
                "http:// to a loopback address: the key never leaves the host",
            )
        return (
            False,
            C.PLAINTEXT_HTTP_REASON,
            "the MAAS endpoint is http://: the API key's secret travels in the clear (opted in by "
            f"{_opt_in(creds, PLAINTEXT_KEYS[0], PLAINTEXT_SETTING)})",
        )
    if creds.insecure:
        return (
            False,
            C.TLS_VERIFICATION_DISABLED_REASON,
            "MAAS's TLS certificate is not verified (switched off by "
            f"{_opt_in(creds, INSECURE_KEYS[0], INSECURE_SETTING)})",
        )
    return True, C.TLS_VERIFIED_REASON, "https with MAAS's certificate verified"


# --- which credentials ------------------------------------------------------------------------------------
#: The credentials ref of the operator's default credentials (``…/identity-ref``).
DEFAULT_REF = "default"
SECRET_REF_PREFIX = "Secret/"


def spec_ref(maascluster: Body) -> str:
    """The credentials ``spec.identityRef`` asks for: ``Secret/<name>``, or ``default`` without one."""
    raw = (maascluster.get("spec") or {}).get(IDENTITY_REF)
    if not raw:
        return DEFAULT_REF
    return SECRET_REF_PREFIX + IdentityRef.model_validate(raw).name


def effective_ref(maascluster: Body) -> str:
    """The credentials a MaasCluster's objects use: the ones it is bound to (``…/identity-ref``, written by
    the operator, changed only once no reference is held under it: :mod:`capmaas.reconcilers.identity`), else
    ``spec.identityRef``'s."""
    annotations = maascluster.get("metadata", {}).get("annotations") or {}
    bound = annotations.get(ANNOTATION_PREFIX + IDENTITY_REF_ANNOTATION)
    if bound == DEFAULT_REF or (bound or "").startswith(SECRET_REF_PREFIX):
        return str(bound)
    return spec_ref(maascluster)


def describe_ref(ref: str) -> str:
    return "the operator's default credentials" if ref == DEFAULT_REF else f"identity {ref}"


# --- resolving -------------------------------------------------------------------------------------------
async def resolve_credentials(
    kube: KubePort, maascluster: Body, default: MaasCredentials | None
) -> MaasCredentials:
    """The credentials a MaasCluster's machines use (:func:`effective_ref`); TransientError (with a clear
    reason) when unusable or not allowed."""
    ns = maascluster.get("metadata", {}).get("namespace", "")
    return await resolve_ref(kube, ns, effective_ref(maascluster), default)


async def resolve_ref(kube: KubePort, ns: str, ref: str, default: MaasCredentials | None) -> MaasCredentials:
    """The credentials ``ref`` (``default`` or ``Secret/<name>`` in namespace ``ns``) names."""
    if not ref.startswith(SECRET_REF_PREFIX):
        return await resolve_default(kube, ns, default)
    name = ref.removeprefix(SECRET_REF_PREFIX)
    source = f"Secret {ns}/{name}"
    data = await kube.get_secret(ns, name)
    if data is None:
        raise TransientError(
            C.IDENTITY_SECRET_NOT_FOUND_REASON, f"identity {source} does not exist", delay=CREDENTIALS_RETRY
        )
    endpoint = _first(data, ENDPOINT_KEYS)
    api_key = _first(data, API_KEY_KEYS)
    missing = [k[0] for k, v in ((ENDPOINT_KEYS, endpoint), (API_KEY_KEYS, api_key)) if not v]
    if missing or endpoint is None or api_key is None:
        raise TransientError(
            C.INVALID_CREDENTIALS_REASON,
            f"identity {source} lacks {' and '.join(missing)} (or it is not UTF-8 text)",
            delay=CREDENTIALS_RETRY,
        )
    creds = MaasCredentials(
        endpoint=endpoint,
        api_key=api_key,
        ca_data=_first(data, CA_KEYS),
        insecure=(_first(data, INSECURE_KEYS) or "").lower() in TRUE,
        source=source,
        allow_plaintext=(_first(data, PLAINTEXT_KEYS) or "").lower() in TRUE,
    )
    check_transport(creds)
    return creds


async def resolve_default(kube: KubePort, namespace: str, default: MaasCredentials | None) -> MaasCredentials:
    """The operator's default credentials for an object in ``namespace``, if it may use them."""
    if default is None:
        raise TransientError(
            C.INVALID_CREDENTIALS_REASON,
            "no spec.identityRef and the operator has no default MAAS credentials",
            delay=CREDENTIALS_RETRY,
        )
    await check_default_allowed(kube, namespace, default)
    check_transport(default)
    return default


def maas_failure(
    exc: maas_errors.MaasError,
    credentials: MaasCredentials | None,
    doing: str,
    *,
    reason: str = C.MAAS_UNREACHABLE_REASON,
) -> TransientError:
    """A MAAS error as a retryable outcome with a reason a person can act on (never including the key).

    ``reason`` is used for MAAS answers that are neither auth nor availability problems (a 400/404/409).
    """
    where = f"{credentials.endpoint} ({credentials.source})" if credentials else "MAAS"
    if isinstance(exc, maas_errors.InvalidCaError):
        return TransientError(
            C.INVALID_CREDENTIALS_REASON,
            f"{doing}: {where}: the CA certificate ({CA_KEYS[0]}, or the operator's maas.ca_file) is not "
            "a PEM certificate",
            delay=CREDENTIALS_RETRY,
        )
    if isinstance(exc, maas_errors.InvalidApiKeyError | maas_errors.InvalidBaseUrlError):
        return TransientError(
            C.INVALID_CREDENTIALS_REASON, f"{doing}: {where}: {exc}", delay=CREDENTIALS_RETRY
        )
    if isinstance(exc, maas_errors.ForbiddenError):
        # The key is fine (MAAS knows the user) but the user may not do this: telling it apart from a bad key
        # points at the fix (LXD VM hosts, composing and DNS records are admin-only in MAAS).
        return TransientError(
            C.INVALID_CREDENTIALS_REASON,
            f"{doing}: MAAS at {where} refused it to the API key's user (HTTP 403): not an admin (VM hosts, "
            "composing and DNS records need one) or not the machine's owner",
            delay=CREDENTIALS_RETRY,
        )
    if isinstance(exc, maas_errors.UnauthorizedError):
        return TransientError(
            C.INVALID_CREDENTIALS_REASON,
            f"{doing}: MAAS at {where} rejected the API key (HTTP {exc.status})",
            delay=CREDENTIALS_RETRY,
        )
    hosts = exc.hosted_vm_hosts if isinstance(exc, maas_errors.BadRequestError) else None
    if hosts is not None:
        return TransientError(
            C.VM_HOST_IN_USE_REASON,
            f"{doing}: MAAS refuses while the machine hosts VM host(s) {', '.join(hosts) or '(unnamed)'}: "
            "remove them in MAAS first (the operator removes only a VM host this MaasMachine registered, "
            "once no VM is left on it)",
            delay=VM_HOST_RETRY,
        )
    if isinstance(exc, maas_errors.TransportError):
        return TransientError(
            C.MAAS_UNREACHABLE_REASON,
            f"{doing}: cannot reach MAAS at {where}: {exc}",
            delay=UNREACHABLE_RETRY,
        )
    if isinstance(exc, maas_errors.ServiceUnavailableError):
        return TransientError(
            C.MAAS_UNREACHABLE_REASON,
            f"{doing}: MAAS at {where} is unavailable (503)",
            delay=exc.retry_after or UNREACHABLE_RETRY,
        )
    return TransientError(
        C.MAAS_UNREACHABLE_REASON, f"{doing}: MAAS at {where}: {exc}", delay=UNREACHABLE_RETRY
    )


class MaasStep:
    """One MAAS step (:func:`maas_step`): any MAAS error raised in its block leaves as :func:`maas_failure`'s
    retryable outcome. ``__exit__`` returns None: it never swallows an exception (type checkers see that)."""

    def __init__(self, doing: str, credentials: MaasCredentials | None, reason: str) -> None:
        self.doing, self.credentials, self.reason = doing, credentials, reason

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, maas_errors.MaasError):
            raise maas_failure(exc, self.credentials, self.doing, reason=self.reason) from exc


def maas_step(
    doing: str, credentials: MaasCredentials | None = None, *, reason: str = C.MAAS_UNREACHABLE_REASON
) -> MaasStep:
    """``with maas_step("allocating"): ...``: the block's MAAS errors as retryable outcomes that say what was
    being done. Errors a step handles itself (a 404 that means "gone") are caught inside the block."""
    return MaasStep(doing, credentials, reason)


async def connect(
    kube: KubePort, connector: MaasConnector, maascluster: Body, default: MaasCredentials | None
) -> MaasPort:
    """Resolve credentials and get the pooled connection, every failure as a TransientError."""
    port, _ = await connect_with_credentials(kube, connector, maascluster, default)
    return port


async def connect_with_credentials(
    kube: KubePort, connector: MaasConnector, maascluster: Body, default: MaasCredentials | None
) -> tuple[MaasPort, MaasCredentials]:
    """:func:`connect`, also returning the credentials used (for :func:`transport_security`)."""
    creds = await resolve_credentials(kube, maascluster, default)
    return await _open(connector, creds), creds


async def connect_ref(
    kube: KubePort, connector: MaasConnector, namespace: str, ref: str, default: MaasCredentials | None
) -> tuple[MaasPort, MaasCredentials]:
    """The connection of the credentials ``ref`` names (:func:`resolve_ref`), with those credentials."""
    creds = await resolve_ref(kube, namespace, ref, default)
    return await _open(connector, creds), creds


async def connect_default(
    kube: KubePort, connector: MaasConnector, namespace: str, default: MaasCredentials
) -> MaasPort:
    """The default credentials' connection for an object in ``namespace`` with no MaasCluster left (a
    deletion), if the namespace may use them."""
    return await _open(connector, await resolve_default(kube, namespace, default))


async def _open(connector: MaasConnector, creds: MaasCredentials) -> MaasPort:
    with maas_step("connecting", creds):
        return await connector.connect(creds)
