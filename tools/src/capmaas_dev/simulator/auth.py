"""OAuth 1.0a verification (PLAINTEXT and HMAC-SHA1) with MAAS's (piston3's) answers, in piston's order.

Order: consumer -> token -> timestamp -> nonce -> signature (piston ``OAuthServer.verify_request``), so a
request with a reused nonce *and* a bad signature is reported as a reused nonce, exactly as MAAS would.

HMAC-SHA1 signs what piston's ``initialize_server_request``/``OAuthRequest.from_request`` collect: for a POST
the urlencoded body (Django's ``request.POST``; a multipart body is not signed) and the query, then the
``Authorization`` header's fields (``realm`` skipped), then the query string's non-blank values (first value
of a repeated key) on top. The base string is ``METHOD&escape(scheme://host/path)&escape(sorted params)``
(``get_normalized_http_url``: default ports dropped, no query), the key ``escape(consumer secret) + "&" +
escape(token secret)`` with MAAS's empty consumer secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from capmaas_dev.simulator.forms import FormData
from capmaas_dev.simulator.http import HttpError

REQUIRED = (
    "oauth_consumer_key",
    "oauth_token",
    "oauth_signature",
    "oauth_signature_method",
    "oauth_timestamp",
    "oauth_nonce",
)
TIMESTAMP_THRESHOLD = 300
_WWW_AUTH = {"WWW-Authenticate": 'OAuth realm="OAuth"'}
_KEY_ALPHABET = string.ascii_letters + string.digits
SIGNATURE_METHODS = ("PLAINTEXT", "HMAC-SHA1")  # piston registers these two, in this order


def escape(value: str) -> str:
    """piston ``oauth.escape``: percent-encode everything but RFC 3986's unreserved characters."""
    return quote(value, safe="~")


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """A request as piston's ``OAuthRequest`` sees it: method, absolute URL and the merged parameters."""

    method: str
    url: str
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        method: str,
        url: str,
        headers: dict[str, str],
        query_string: str,
        body_form: FormData | None = None,
    ) -> SignedRequest:
        """``initialize_server_request``: ``body_form`` is the urlencoded POST body (None otherwise)."""
        params: dict[str, str] = {}
        if method == "POST":
            if body_form is not None:
                params.update(dict(body_form.items()))  # QueryDict.items(): the last value of each key
            params.update(parse_qsl(query_string, keep_blank_values=True))  # request.GET, merged after POST
        params.update(split_header(headers.get("authorization", "")))
        first: dict[str, str] = {}
        for key, value in parse_qsl(query_string, keep_blank_values=False):  # cgi.parse_qs(...)[k][0]
            first.setdefault(key, value)
        params.update(first)
        return cls(method, url, params)

    def normalized_url(self) -> str:
        """``get_normalized_http_url``: scheme://host/path, the scheme's default port dropped."""
        parts = urlsplit(self.url)
        netloc = parts.netloc
        if parts.scheme == "http" and netloc.endswith(":80"):
            netloc = netloc[:-3]
        elif parts.scheme == "https" and netloc.endswith(":443"):
            netloc = netloc[:-4]
        return f"{parts.scheme}://{netloc}{parts.path}"

    def normalized_parameters(self) -> str:
        """``get_normalized_parameters``: every parameter but the signature, escaped, sorted, joined."""
        pairs = sorted((escape(k), escape(v)) for k, v in self.params.items() if k != "oauth_signature")
        return "&".join(f"{k}={v}" for k, v in pairs)

    def base_string(self) -> str:
        return "&".join(
            escape(part)
            for part in (self.method.upper(), self.normalized_url(), self.normalized_parameters())
        )


def split_header(header: str) -> dict[str, str]:
    """``OAuthRequest._split_header``: ``OAuth k="v", ...``; parts naming ``realm`` skipped, values
    unquoted."""
    if header[:6] != "OAuth ":
        return {}
    params: dict[str, str] = {}
    for part in header[6:].split(","):
        if "realm" in part:
            continue
        key, _, value = part.strip().partition("=")
        params[key] = unquote(value.strip('"'))
    return params


def hmac_sha1(base: str, token_secret: str, consumer_secret: str = "") -> str:
    key = f"{escape(consumer_secret)}&{escape(token_secret)}"
    digest = hmac.new(key.encode(), base.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


@dataclass(slots=True)
class User:
    username: str
    consumer_key: str
    token_key: str
    token_secret: str
    is_superuser: bool = False
    email: str = ""
    password: str | None = None

    @property
    def api_key(self) -> str:
        return f"{self.consumer_key}:{self.token_key}:{self.token_secret}"

    def to_json(self) -> dict[str, object]:
        return {
            "username": self.username,
            "email": self.email,
            "is_local": True,
            "is_superuser": self.is_superuser,
            "resource_uri": f"/MAAS/api/2.0/users/{self.username}/",
        }


@dataclass(slots=True)
class Token:
    """An OAuth token: ``consumer_key:key:secret`` is the API key MAAS shows for it."""

    consumer_key: str
    key: str
    secret: str
    name: str
    username: str

    @property
    def api_key(self) -> str:
        return f"{self.consumer_key}:{self.key}:{self.secret}"


def new_api_key() -> str:
    """A fresh key shaped like MAAS's (18:18:32)."""

    def part(n: int) -> str:
        return "".join(secrets.choice(_KEY_ALPHABET) for _ in range(n))

    return f"{part(18)}:{part(18)}:{part(32)}"


def split_api_key(api_key: str) -> tuple[str, str, str]:
    parts = api_key.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError("API key must have the form 'consumer_key:token_key:token_secret'")
    return parts[0], parts[1], parts[2]


def _unauthorized(message: str) -> HttpError:
    return HttpError(401, f"Authorization Error: {message}", _WWW_AUTH)


def challenge() -> HttpError:
    """What MAAS answers to a request without credentials on a resource with no anonymous handler."""
    return HttpError(401, "Forbidden", _WWW_AUTH)


class Authenticator:
    """The users, their tokens and the nonces seen so far."""

    def __init__(self, clock: Callable[[], float] = time.time, *, maas4: bool = False) -> None:
        self.clock = clock
        #: MAAS 4 (master) checks the auth parameters' types first; 3.7's piston3 calls ``int()`` on the
        #: timestamp in ``_check_timestamp`` and the ValueError reaches ExceptionMiddleware (500).
        self.maas4 = maas4
        self.users: dict[str, User] = {}
        self._by_token: dict[str, User] = {}
        self.tokens: dict[str, Token] = {}  # token key -> its consumer, secret and name
        self._consumers: set[str] = set()
        self._nonces: dict[tuple[str, str, str], float] = {}
        self._last_prune = 0.0

    def add_user(
        self,
        username: str,
        *,
        admin: bool = False,
        api_key: str | None = None,
        email: str = "",
        password: str | None = None,
    ) -> User:
        if username in self.users:
            raise ValueError(f"user {username!r} already exists")
        consumer, token, secret = split_api_key(api_key or new_api_key())
        if token in self._by_token:
            raise ValueError("token key already in use")
        user = User(username, consumer, token, secret, admin, email or f"{username}@example.com", password)
        self.users[username] = user
        self._by_token[token] = user
        self.tokens[token] = Token(consumer, token, secret, "MAAS consumer", username)
        self._consumers.add(consumer)
        return user

    @staticmethod
    def oauth_params(headers: dict[str, str], query: FormData, form: FormData) -> dict[str, str] | None:
        """The ``oauth_*`` parameters, or None when the request carries no (complete) credentials."""
        header = headers.get("authorization", "")
        if all(name in header for name in REQUIRED):
            text = header.strip()
            if text[:5].lower() == "oauth":
                text = text[5:]
            params: dict[str, str] = {}
            for item in text.split(","):
                key, sep, value = item.strip().partition("=")
                if sep:
                    params[key.strip()] = unquote(value.strip().strip('"'))
            if all(name in params for name in REQUIRED):
                return params
        for source in (query, form):
            if all(name in source for name in REQUIRED):
                return {name: source.get(name) or "" for name in (*REQUIRED, "oauth_version")}
        return None

    def authenticate(self, params: dict[str, str], signed: SignedRequest | None = None) -> User:
        """Verify like piston's ``OAuthServer.verify_request``; ``signed`` is needed for HMAC-SHA1."""
        if signed is not None:
            params = {**params, **signed.params}
        consumer = params["oauth_consumer_key"]
        token = params["oauth_token"]
        if consumer not in self._consumers:
            raise _unauthorized("Invalid API key.")
        user = self._by_token.get(token)
        entry = self.tokens.get(token)
        if user is None or entry is None or entry.consumer_key != consumer:
            raise _unauthorized(repr(f"Invalid access token: {token}"))
        version = params.get("oauth_version")
        if version and version != "1.0":
            raise _unauthorized(repr(f"OAuth version {version} not supported."))
        try:
            timestamp = int(params["oauth_timestamp"])
        except ValueError as exc:
            if not self.maas4:
                raise HttpError(500, str(exc)) from None
            raise HttpError(
                400,
                repr(
                    "Bad Request: the following problems were found among the auth params: "
                    "oauth_timestamp has an unexpected type"
                ),
            ) from None
        now = int(self.clock())
        if now - timestamp > TIMESTAMP_THRESHOLD:
            raise _unauthorized(
                repr(
                    f"Expired timestamp: given {timestamp} and now {now} has a greater difference "
                    f"than threshold {TIMESTAMP_THRESHOLD}"
                )
            )
        self._prune(now)
        nonce_key = (consumer, token, params["oauth_nonce"])
        if nonce_key in self._nonces:
            raise _unauthorized(repr(f"Nonce already used: {params['oauth_nonce']}"))
        self._nonces[nonce_key] = now
        method = params["oauth_signature_method"]
        if method not in SIGNATURE_METHODS:
            raise _unauthorized(
                repr(
                    f"Signature method {method} not supported try one of the following: "
                    + ", ".join(SIGNATURE_METHODS)
                )
            )
        if method == "PLAINTEXT":
            expected = "&" + escape(entry.secret)
            if params["oauth_signature"] not in (expected, "&" + entry.secret):
                raise _unauthorized(repr(f"Invalid signature. Expected signature base string: {expected}"))
            return user
        base = signed.base_string() if signed is not None else ""
        given = params["oauth_signature"].encode()
        if not hmac.compare_digest(given, hmac_sha1(base, entry.secret).encode()):
            raise _unauthorized(repr(f"Invalid signature. Expected signature base string: {base}"))
        return user

    def create_token(self, user: User, name: str | None) -> Token:
        """``create_authorisation_token``: a new consumer and token for ``user``."""
        consumer, token, secret = split_api_key(new_api_key())
        entry = Token(consumer, token, secret, name or "MAAS consumer", user.username)
        self.tokens[token] = entry
        self._by_token[token] = user
        self._consumers.add(consumer)
        return entry

    def user_tokens(self, user: User) -> list[Token]:
        return [t for t in self.tokens.values() if t.username == user.username]

    def delete_token(self, user: User, token_key: str) -> bool:
        entry = self.tokens.get(token_key)
        if entry is None or entry.username != user.username:
            return False
        del self.tokens[token_key]
        del self._by_token[token_key]
        if not any(t.consumer_key == entry.consumer_key for t in self.tokens.values()):
            self._consumers.discard(entry.consumer_key)
        return True

    def _prune(self, now: float) -> None:
        """Forget nonces older than the timestamp window (MAAS's nonces_cleanup job)."""
        if now - self._last_prune < TIMESTAMP_THRESHOLD:
            return
        self._last_prune = now
        horizon = now - 2 * TIMESTAMP_THRESHOLD
        self._nonces = {k: t for k, t in self._nonces.items() if t >= horizon}
