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
from oauthlib import oauth1

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
    """Signs each request with an OAuth 1.0a PLAINTEXT ``Authorization`` header, as libmaas does."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def __repr__(self) -> str:
        return "MaasAuth(<redacted>)"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # A new oauthlib Client per request: nonce and timestamp are generated in sign().
        client = oauth1.Client(
            self._credentials.consumer_key,
            client_secret="",
            resource_owner_key=self._credentials.token_key,
            resource_owner_secret=self._credentials.token_secret,
            signature_method=oauth1.SIGNATURE_PLAINTEXT,
            realm="OAuth",
        )
        # PLAINTEXT signs neither URL, method nor body; sign the bare URL so oauthlib never inspects the body.
        _, headers, _ = client.sign(str(request.url), http_method=request.method)
        request.headers["Authorization"] = headers["Authorization"]
        yield request
