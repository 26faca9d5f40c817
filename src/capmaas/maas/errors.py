"""Every way a MAAS call can fail, as one exception tree.

Callers (the reconcilers) decide between "retry later" and "give up" by exception *type*, never by message
text, so each MAAS answer that needs a different reaction has its own class. httpx's exceptions never escape:
they are wrapped here (``raise ... from exc``) so the HTTP library stays an implementation detail. So are
bare ``OSError`` exceptions (``ConnectionResetError`` ...) that a pluggable transport such as
``httpx.ASGITransport`` lets through: failing to get an HTTP answer is a :class:`TransportError`, whatever the
transport::

    MaasError
    ├── InvalidApiKeyError (also ValueError)   the key is not ``consumer:token:secret``
    ├── InvalidBaseUrlError (also ValueError)  the base URL is not http(s)://host[:port]/path
    │   └── EndpointNotAllowedError            its host is outside the operator's endpoint allow-list
    ├── InvalidCaError (also ValueError)       the CA given to verify MAAS's certificate is not PEM
    ├── TransportError                         no HTTP answer: connection refused/reset, TLS, protocol
    │   └── RequestTimeoutError                no answer in time
    ├── ResponseParseError                     an answer we could not read (bad JSON, wrong shape)
    │   └── ResponseTooLargeError              an answer larger than the client's byte cap
    └── ApiError(status, body, request)        MAAS answered with an error status
        ├── BadRequestError(field_errors)      400: validation; ``field_errors`` from MAAS's JSON dict
        ├── UnauthorizedError                  401: bad or unknown key, stale timestamp, reused nonce
        ├── ForbiddenError                     403: not admin, or not the machine's owner
        ├── NotFoundError                      404
        ├── ConflictError                      409: illegal state transition, or DB contention
        │   └── NoMachineAvailableError        409 from allocate: nothing matches the constraints
        ├── GoneError                          410: MAAS 4.0 removed VM hosts
        └── ServiceUnavailableError(retry_after)  503: over-commit, power problems, region busy

The status → class mapping lives in exactly one function, :func:`error_class`. Error bodies are capped at
:data:`MAX_BODY_CHARS` and kept on the exception's ``body`` (for logs and for callers that match MAAS's
wording), never in its message: messages reach conditions that the MaasCluster's tenant reads, and the
endpoint may not be MAAS at all (a URL the tenant chose, answering with whatever a server there says). The
message says what was asked, the status, and for a MAAS 400 the names of the fields it refused.

One exception: MAAS's answers about IP addresses (``ipaddresses/``, ``reservedips/``, ``link_subnet``, the
AUTO-address claim at deploy) are what an operator must read to fix an address clash, so a body that is
exactly one of MAAS 3.7.3's own phrasings (:data:`MAAS_IP_PHRASES`, placeholders restricted to the
characters of an address, a MAC, a CIDR or a host name) is quoted in the message (:attr:`ApiError.maas_text`).
A foreign server cannot smuggle free text through these patterns.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

__all__ = [
    "MAAS_IP_PHRASES",
    "MAX_BODY_CHARS",
    "ApiError",
    "BadRequestError",
    "ConflictError",
    "EndpointNotAllowedError",
    "ForbiddenError",
    "GoneError",
    "InvalidApiKeyError",
    "InvalidBaseUrlError",
    "InvalidCaError",
    "MaasError",
    "NoMachineAvailableError",
    "NotFoundError",
    "RequestInfo",
    "RequestTimeoutError",
    "ResponseParseError",
    "ResponseTooLargeError",
    "ServiceUnavailableError",
    "TransportError",
    "UnauthorizedError",
    "cap_body",
    "error_class",
    "maas_ip_text",
    "parse_field_errors",
]

#: What a MAAS form field name looks like; only such names from a 400 body go into a message.
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")

#: Error bodies longer than this are cut (with a marker) before they are stored, shown or logged.
MAX_BODY_CHARS = 1024

_IP = r"[0-9A-Fa-f:.]{2,45}"
_MAC = r"[0-9A-Fa-f:.-]{11,17}"
_CIDR = r"[0-9A-Fa-f:.]{2,45}/[0-9]{1,3}"
_HOST = r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}"
_SUBNET_LABEL = rf"[A-Za-z0-9_./:-]{{0,63}}:{_CIDR}\(vid=[0-9]{{1,4}}\)"  # models/subnet.py Subnet.__str__
_SPECIFIER = r"[A-Za-z0-9_./:-]{1,63}"

#: MAAS 3.7.3's texts about IP addresses (maasserver ``api/ip_addresses.py``, ``models/staticipaddress.py``,
#: ``models/subnet.py``, ``models/interface.py``, ``forms/interface_link.py``, ``forms/reservedip.py``),
#: whitespace collapsed; a body matching one in full is quoted in the exception's message.
MAAS_IP_PHRASES: tuple[str, ...] = (
    r"IP address is already in use\.",
    rf"The IP address {_IP} is already in use\.",
    rf"IP address {_IP} belongs to an existing dynamic range\. To reserve this IP address, a MAC address is "
    r"required\. \(Create a device instead\.\)",
    rf"No known subnet for IP address: {_IP}\.",
    rf"Unable to identify subnet: {_SPECIFIER}\.",
    r"Must supply either the 'subnet' or the 'ip' parameter\.",
    rf"{_IP} is within the (?:reserved|dynamic) range from {_IP} to {_IP}",
    rf"{_IP} is not within subnet CIDR: {_CIDR}",
    rf"MAC address {_MAC} already belongs to {_HOST}\. Use of the interface API is required, for an "
    r"interface that belongs to a node\.",
    rf"No more IPs available in subnet: {_CIDR}\.",
    rf"IP address {_IP} does not exist, is not the correct type of address, or does not belong to the "
    r"requesting user\. If you are sure you want to release this address, use force=true as a MAAS "
    r"administrator\.",
    rf"IP address {_IP} does not exist\.",
    r"Force-releasing an IP address requires admin privileges\.",
    r"Listing all IP addresses requires admin privileges\.",
    r"Listing another user's IP addresses requires admin privileges\.",
    r"Parameter 'ip' must contain an IP address\.",
    rf"The static IP {_IP} is already reserved for the MAC address {_MAC}\.",
    rf"The static IP {_IP} does not match the reserved IP {_IP} for the MAC address {_MAC}\.",
    rf"The MAC address {_MAC} or the static IP {_IP} are associated with a reserved IP and cannot be used\.",
    rf"This interface {_MAC} has a reserved ip {_IP} but it does not have a link to that subnet",
    rf"The reserved ip {_IP} seems to be in use by another host in the network\. The process to find an ip "
    r"for the machine is stopped\.",
    rf"IP address is not in the given subnet '{_SUBNET_LABEL}'\.",
    rf"IP address is inside a dynamic range {_IP} to {_IP}\.",
    rf"IP address is inside a dynamic range {_IP}-{_IP}\.",
    rf"The reserved IP {_IP} must be outside the dynamic range {_IP} - {_IP}\.",
    rf"{_IP} is not part of the subnet\.",
    rf"The ip {_IP} is already in use by another machine\.",
    rf"There is no subnet for {_IP}\. Create the subnet and try again\.",
    r"Reserved IP with this IP address already exists\.",
    r"Reserved IP with this MAC address and Subnet already exists\.",
    r"The ip, mac_address and the subnet of a reserved IP are immutable\. Delete the entry and recreate it\.",
    r"The (?:network|broadcast) address cannot be a reserved IP\.",
    r"This method is reserved for admin users\.",
)
_MAAS_IP_TEXT = re.compile("|".join(f"(?:{p})" for p in MAAS_IP_PHRASES))


def maas_ip_text(text: str) -> str | None:
    """``text`` with its whitespace collapsed when it is exactly one of :data:`MAAS_IP_PHRASES`, else None."""
    line = " ".join(text.split())
    if len(line) > 400 or not _MAAS_IP_TEXT.fullmatch(line):
        return None
    return line


@dataclasses.dataclass(frozen=True)
class RequestInfo:
    """What was asked, for error messages: never the headers, so never the Authorization header."""

    method: str
    url: str
    endpoint: str  # the template, e.g. "machines/{system_id}/?op=deploy"

    def __str__(self) -> str:
        return f"{self.method} {self.url}"


def cap_body(text: str, limit: int = MAX_BODY_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marking the cut so a reader knows there was more."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


class MaasError(Exception):
    """Base of every error raised by :mod:`capmaas.maas`."""


class InvalidApiKeyError(MaasError, ValueError):
    """The API key is not of the form ``consumer_key:token_key:token_secret``."""


class InvalidBaseUrlError(MaasError, ValueError):
    """The MAAS URL is not an absolute http(s) URL."""


class EndpointNotAllowedError(InvalidBaseUrlError):
    """The MAAS URL's host is not in the operator's allow-list of MAAS endpoints."""


class InvalidCaError(MaasError, ValueError):
    """The CA certificate text given to verify MAAS's certificate is not a PEM certificate."""


class TransportError(MaasError):
    """The request got no HTTP answer (connection refused or reset, TLS failure, protocol error)."""

    def __init__(self, message: str, *, request: RequestInfo) -> None:
        super().__init__(message)
        self.request = request

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, request={self.request!s})"


class RequestTimeoutError(TransportError):
    """The request timed out (connect, read, write or pool)."""


class ResponseParseError(MaasError):
    """MAAS answered 2xx, but the body is not the JSON shape we expect (bad JSON, missing field)."""

    def __init__(self, message: str, *, request: RequestInfo, body: str = "") -> None:
        super().__init__(message)
        self.request = request
        self.body = cap_body(body)


class ResponseTooLargeError(ResponseParseError):
    """The answer was larger than the client's cap (:class:`capmaas.maas.Limits`); it was not read further."""


class ApiError(MaasError):
    """MAAS answered with an error status; ``body`` is the (capped, redacted) response text, kept out of the
    message (see the module docstring)."""

    def __init__(
        self,
        status: int,
        body: str,
        request: RequestInfo,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body = cap_body(body)
        self.request = request
        self.headers = dict(headers or {})
        super().__init__(f"{status} from {request}{self._detail()}")

    @property
    def maas_text(self) -> str | None:
        """MAAS's own words when the body is one of its IP-address texts (:data:`MAAS_IP_PHRASES`), for a
        condition to show; None for any other body."""
        return maas_ip_text(self.body)

    def _detail(self) -> str:
        """What the message adds to status and request: only MAAS's own IP-address wording, if it is that."""
        text = self.maas_text
        return f": {text}" if text else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, body={self.body!r}, request={self.request!s})"


class BadRequestError(ApiError):
    """400. ``field_errors`` maps field → messages when MAAS sent its JSON dict, else it is empty."""

    def __init__(
        self,
        status: int,
        body: str,
        request: RequestInfo,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.field_errors = parse_field_errors(body)
        super().__init__(status, body, request, headers=headers)

    @property
    def maas_text(self) -> str | None:
        """For a form-error answer, the refused fields' messages that are MAAS IP-address texts, as
        ``field: message; ...``; otherwise as :attr:`ApiError.maas_text`."""
        if not self.field_errors:
            return super().maas_text
        quoted = [
            f"{name}: {text}"
            for name, messages in self.field_errors.items()
            if _FIELD_NAME.fullmatch(name)
            for text in (maas_ip_text(m) for m in messages[:3])
            if text
        ]
        return "; ".join(quoted[:3]) or None

    def _detail(self) -> str:
        names = [n for n in self.field_errors if _FIELD_NAME.fullmatch(n)][:5]
        text = self.maas_text
        if names:
            return f": MAAS refused field(s) {', '.join(names)}" + (f" ({text})" if text else "")
        return f": {text}" if text else ""

    @property
    def hosted_vm_hosts(self) -> tuple[str, ...] | None:
        """The VM host names of MAAS's refusal to release or delete a machine that hosts VM hosts (3.7
        ``Node.maybe_delete_pods``: text ``The following VM hosts must be removed first: a, b``), names that
        are not plain host names left out; None for any other 400."""
        if self.field_errors or not self.body.startswith(_HOSTS_VM_HOSTS):
            return None
        names = (n.strip() for n in self.body[len(_HOSTS_VM_HOSTS) :].split(","))
        return tuple(n for n in names if _HOST_NAME.fullmatch(n))[:5]


_HOSTS_VM_HOSTS = "The following VM hosts must be removed first:"
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class UnauthorizedError(ApiError):
    """401: the key is unknown, deleted or mis-signed (also MAAS's ``Forbidden`` for no credentials)."""


class ForbiddenError(ApiError):
    """403: authenticated, but not allowed (not admin, or not the owner); the body is often empty."""


class NotFoundError(ApiError):
    """404: no such machine, VM host, zone, ... (``No Machine matches the given query.``)."""


class ConflictError(ApiError):
    """409: the request conflicts with the object's state (e.g. ``Can't deploy a machine that is in ...``)."""

    @property
    def retry_after(self) -> float | None:
        """Seconds MAAS asked us to wait (DB serialization failures), or None for a state conflict."""
        return parse_retry_after(self.headers.get("retry-after"))


class NoMachineAvailableError(ConflictError):
    """409 from ``machines/?op=allocate``: no READY machine matches the constraints."""


class GoneError(ApiError):
    """410: the endpoint was removed (MAAS 4.0 removed VM hosts)."""


class ServiceUnavailableError(ApiError):
    """503: MAAS cannot do it now (over-commit, power or RPC problem); ``retry_after`` in seconds or None."""

    @property
    def retry_after(self) -> float | None:
        """Seconds from the ``Retry-After`` header, or None when MAAS sent none (a lasting condition)."""
        return parse_retry_after(self.headers.get("retry-after"))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; MAAS sends integers. None when absent or unparseable."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if math.isnan(seconds) or seconds < 0:  # not a usable delay
        return None
    return seconds


def parse_field_errors(body: str) -> dict[str, tuple[str, ...]]:
    """MAAS's 400 JSON ``{"field": ["msg", ...]}`` as a dict; {} for text bodies or any other shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    result: dict[str, tuple[str, ...]] = {}
    for field, messages in data.items():
        if isinstance(messages, list):
            result[str(field)] = tuple(str(m) for m in messages)
        else:
            result[str(field)] = (str(messages),)
    return result


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    503: ServiceUnavailableError,
}


def error_class(status: int, endpoint: str, headers: dict[str, str]) -> type[ApiError]:
    """The one place that maps an error answer to its class.

    A 409 from allocate *without* ``Retry-After`` is MAAS's ``NodesNotAvailable`` (no machine matches); with
    ``Retry-After`` it is a DB serialization failure, i.e. an ordinary retryable conflict.
    """
    if status == 409 and endpoint.endswith("?op=allocate") and "retry-after" not in headers:
        return NoMachineAvailableError
    return _BY_STATUS.get(status, ApiError)
