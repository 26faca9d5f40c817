"""MAAS credentials for a MaasCluster, and the mapping of MAAS failures to retryable outcomes.

The identity Secret (``spec.identityRef``, same namespace) holds ``MAAS_ENDPOINT``, ``MAAS_API_KEY`` and
optionally ``MAAS_CA_CERT``; the Go provider's keys ``endpoint``/``api-key`` are accepted. Without identityRef
the operator's default credentials apply. Messages name the Secret and the key that is wrong, never the value.
"""

from __future__ import annotations

from collections.abc import Mapping

from capmaas.api import conditions as C
from capmaas.api.v1beta1 import IdentityRef, MaasClusterSpec
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import Body, KubePort, MaasConnector, MaasCredentials, MaasPort
from capmaas.reconcilers.scope import wire_name

IDENTITY_REF = wire_name(MaasClusterSpec, "identity_ref")
ENDPOINT_KEYS = ("MAAS_ENDPOINT", "endpoint")
API_KEY_KEYS = ("MAAS_API_KEY", "api-key")
CA_KEYS = ("MAAS_CA_CERT", "ca.crt", "ca-cert")
INSECURE_KEYS = ("MAAS_INSECURE_SKIP_TLS_VERIFY",)

#: Retry delay (s) for a credentials problem: a person has to fix the Secret, so do not hammer anything.
CREDENTIALS_RETRY = 15.0
UNREACHABLE_RETRY = 10.0


def _first(data: Mapping[str, bytes], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in data:
            try:
                value = data[k].decode().strip()
            except UnicodeDecodeError:
                return None
            return value or None
    return None


async def resolve_credentials(
    kube: KubePort, maascluster: Body, default: MaasCredentials | None
) -> MaasCredentials:
    """The credentials a MaasCluster's machines use; TransientError (with a clear reason) when unusable."""
    ns = maascluster.get("metadata", {}).get("namespace", "")
    raw = (maascluster.get("spec") or {}).get(IDENTITY_REF)
    if not raw:
        if default is None:
            raise TransientError(
                C.INVALID_CREDENTIALS_REASON,
                "no spec.identityRef and the operator has no default MAAS credentials",
                delay=CREDENTIALS_RETRY,
            )
        return default
    name = IdentityRef.model_validate(raw).name
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
    insecure = (_first(data, INSECURE_KEYS) or "").lower() in ("1", "true", "yes")
    return MaasCredentials(
        endpoint=endpoint, api_key=api_key, ca_data=_first(data, CA_KEYS), insecure=insecure, source=source
    )


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


async def connect(
    kube: KubePort, connector: MaasConnector, maascluster: Body, default: MaasCredentials | None
) -> MaasPort:
    """Resolve credentials and get the pooled connection, every failure as a TransientError."""
    creds = await resolve_credentials(kube, maascluster, default)
    try:
        return await connector.connect(creds)
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, creds, "connecting") from exc
