"""MAAS API keys and OAuth 1.0a PLAINTEXT signing, as an :class:`httpx.Auth`.

MAAS authenticates every API call with an OAuth 1.0a header signed PLAINTEXT (the consumer secret is always
empty, so the signature is ``&<token_secret>``). Signing happens in :meth:`MaasAuth.auth_flow`, once per
attempt: MAAS rejects a reused nonce, so a retried request must carry a fresh one.

The key is a secret. :class:`Credentials` never shows its parts in ``repr``/``str``, and
:meth:`Credentials.redact` scrubs them from any text (MAAS echoes the token key, and on a bad signature even
the expected signature, in its 401 bodies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from urllib.parse import quote

import httpx
from oauthlib import common as oauth_common
from oauthlib import oauth1
from oauthlib.oauth1.rfc5849 import utils as oauth_utils

from capmaas.maas import errors

__all__ = ["Credentials", "MaasAuth"]

_EXPECTED_FORM = "consumer_key:token_key:token_secret"
_MIN_REDACT_LEN = 6  # shorter parts (test keys like "a:b:c") would scrub ordinary letters from messages


@dataclasses.dataclass(frozen=True, repr=False)
class Credentials:
    """The three parts of a MAAS API key. Build it with :meth:`parse`; it never prints its parts."""

    consumer_key: str
    token_key: str
    token_secret: str

    @classmethod
    def parse(cls, api_key: str) -> Credentials:
        """Split ``consumer_key:token_key:token_secret``; anything else is :class:`InvalidApiKeyError`.

        The message names the expected form and how many parts were found, never the key itself.
        """
        if not isinstance(api_key, str):
            raise errors.InvalidApiKeyError(
                f"MAAS API key must be a string of the form {_EXPECTED_FORM}, got {type(api_key).__name__}"
            )
        parts = api_key.strip().split(":")
        if len(parts) != 3 or not all(parts):
            raise errors.InvalidApiKeyError(
                f"MAAS API key must have the form {_EXPECTED_FORM} (three non-empty parts joined by ':'); "
                f"got {len(parts)} part(s){' with an empty part' if len(parts) == 3 else ''}"
            )
        return cls(*parts)

    def __repr__(self) -> str:
        return "Credentials(<redacted>)"

    __str__ = __repr__

    def redact(self, text: str) -> str:
        """``text`` with the key and each of its parts (long enough to be distinctive) replaced by ``***``."""
        secrets = {f"{self.consumer_key}:{self.token_key}:{self.token_secret}"}
        for part in (self.token_secret, self.token_key, self.consumer_key):
            if len(part) >= _MIN_REDACT_LEN:
                secrets.add(part)
                secrets.add(quote(part, safe=""))
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


class MaasAuth(httpx.Auth):
    """Signs each request with an OAuth 1.0a PLAINTEXT ``Authorization`` header, as libmaas does.

    PLAINTEXT signs neither URL, method nor body, so the header is the same for every request but for its
    nonce and timestamp. oauthlib makes it once, at construction, with markers in their place; each request
    gets a copy with a fresh nonce and timestamp (oauthlib's own generators and escaping) put in: the bytes
    oauthlib's ``Client.sign`` would send, without its per-request parsing and escaping of every parameter.
    """

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._template = _template(credentials)

    def __repr__(self) -> str:
        return "MaasAuth(<redacted>)"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self.header()
        yield request

    def header(self, nonce: str | None = None, timestamp: str | None = None) -> str:
        """The ``Authorization`` value for one request: a fresh nonce and timestamp unless given (a test
        compares with oauthlib's own ``Client.sign`` for the same pair)."""
        nonce = oauth_common.generate_nonce() if nonce is None else nonce
        timestamp = oauth_common.generate_timestamp() if timestamp is None else timestamp
        template = self._template
        if template is None:
            return _sign(self._credentials, nonce, timestamp)
        return (
            f"{template.before}{oauth_utils.escape(nonce)}"
            f"{template.between}{oauth_utils.escape(timestamp)}{template.after}"
        )


@dataclasses.dataclass(frozen=True, repr=False)
class _Template:
    """The signed header around its nonce and its timestamp; it holds the token secret, so never prints it."""

    before: str
    between: str
    after: str

    def __repr__(self) -> str:
        return "_Template(<redacted>)"


#: Stand-ins for the nonce and timestamp in the signed-once header: characters that OAuth escaping leaves as
#: they are, so each appears in the header exactly as here (unless a key part contains one: then no template).
_NONCE_MARK = "capmaasNONCEmark"
_TIMESTAMP_MARK = "capmaasTIMESTAMPmark"


def _sign(credentials: Credentials, nonce: str, timestamp: str) -> str:
    """oauthlib's ``Authorization`` header for one request with this nonce and timestamp."""
    client = oauth1.Client(
        credentials.consumer_key,
        client_secret="",
        resource_owner_key=credentials.token_key,
        resource_owner_secret=credentials.token_secret,
        signature_method=oauth1.SIGNATURE_PLAINTEXT,
        realm="OAuth",
        nonce=nonce,
        timestamp=timestamp,
    )
    # PLAINTEXT signs neither URL, method nor body; sign a bare URL so oauthlib never inspects a body.
    _, headers, _ = client.sign(_ANY_URL, http_method="GET")
    header: str = headers["Authorization"]
    return header


_ANY_URL = "http://maas.invalid/MAAS/api/2.0/"


def _template(credentials: Credentials) -> _Template | None:
    """The signed header split around the nonce and the timestamp, or None when a marker is not found
    exactly once, in order (a key part containing one): then every request is signed by oauthlib in full."""
    header = _sign(credentials, _NONCE_MARK, _TIMESTAMP_MARK)
    if header.count(_NONCE_MARK) != 1 or header.count(_TIMESTAMP_MARK) != 1:
        return None
    before, rest = header.split(_NONCE_MARK)
    if _TIMESTAMP_MARK not in rest:  # not oauthlib's order (nonce, then timestamp)
        return None
    between, after = rest.split(_TIMESTAMP_MARK)
    return _Template(before, between, after)
