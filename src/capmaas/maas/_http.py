"""The one request path every MAAS call goes through: URL building, form encoding, retries, error mapping.

Keeping it in one place is what lets the client promise, for *every* operation: ``op`` in the query string,
bodies form-urlencoded with repeated keys for lists, only the retries MAAS asks for (``Retry-After``) or that
cannot duplicate work, one metrics callback per answer with the endpoint *template* (never a raw id, which
would explode metric cardinality), and errors that never carry the API key.

It is also where an endpoint that is not MAAS (a tenant may name any URL) is kept from hurting the process:
answers are read as a stream and refused past :class:`Limits` bytes (a 400 MiB answer must not take the
operator's memory), each attempt has an overall deadline that covers connecting, sending and the whole body (a
body trickled a byte a second resets per-read timeouts forever), and the body of an answer never goes into an
exception's message (messages reach conditions a tenant can read; the capped, redacted body stays on the
exception's ``body`` for logs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote, urlencode

import httpx
import pydantic

from capmaas import backoff as _backoff
from capmaas.maas import _auth, _compact, errors

__all__ = [
    "IN_DOUBT_MARGIN",
    "FormFields",
    "Http",
    "Limits",
    "OnInvalidItem",
    "OnResponse",
    "RetryPolicy",
    "Sleep",
    "in_doubt_window",
]

log = logging.getLogger("capmaas.maas")

FormFields = Sequence[tuple[str, str]]
#: ``(method, endpoint template, status, seconds)`` per answer; status 0 and the time spent when none came.
OnResponse = Callable[[str, str, int, float], None]
#: ``on_invalid_item(endpoint)``: one item of a list answer did not parse and was left out.
OnInvalidItem = Callable[[str], None]
Sleep = Callable[[float], Awaitable[None]]
ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)
_T = TypeVar("_T")

#: Methods whose repetition cannot duplicate work, so any transport failure may be retried.
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
#: Failures that happen before the request reached MAAS, so even a POST may be retried.
_NOT_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    ConnectionRefusedError,
)
#: What a transport may raise for "no HTTP answer". httpx's own transports wrap socket errors in
#: ``httpx.TransportError``, but a transport given to the client (``httpx.ASGITransport`` in front of the
#: simulator, a test transport) can let a bare ``OSError`` such as ``ConnectionResetError`` through; it is the
#: same failure and must reach callers as :class:`~capmaas.maas.errors.TransportError`, not as a crash.
_TRANSPORT_FAILURES: tuple[type[Exception], ...] = (httpx.HTTPError, OSError)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    ``max_retries`` extra attempts after the first; transport failures wait up to ``base_delay * 2**n``
    seconds (full jitter), capped at ``max_delay``; a ``Retry-After`` is honoured but capped at
    ``max_retry_after`` seconds, so a misbehaving server cannot park a reconciler for an hour.
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 10.0
    max_retry_after: float = 30.0
    #: The jitter's draw in [0, 1] (a test pins it).
    jitter: Callable[[], float] = random.random

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (0-based) after a transport failure (full jitter)."""
        return _backoff.full_jitter(attempt, base=self.base_delay, cap=self.max_delay, rand=self.jitter)

    def longest_call(self, deadline: float) -> float:
        """The longest one call can take, from its first attempt being sent to the client giving up: every
        attempt runs up to ``deadline`` seconds, and between them the longest wait (a capped ``Retry-After``
        or the backoff's cap). A write whose answer was lost may have been taken up by MAAS at any point of
        that span (see :func:`in_doubt_window`)."""
        longest_wait = max(self.max_retry_after, self.max_delay)
        return (self.max_retries + 1) * deadline + self.max_retries * longest_wait


#: Seconds added to :meth:`RetryPolicy.longest_call` for a request MAAS took up just before the client gave up
#: (queued in the region's worker pool, or a clock step between the processes that compare the times).
IN_DOUBT_MARGIN = 30.0


def in_doubt_window(deadline: float, retry: RetryPolicy, margin: float = IN_DOUBT_MARGIN) -> float:
    """Seconds after sending a non-idempotent write (an allocate) during which a client that lost its answer
    cannot tell "MAAS never got it" from "MAAS has not acted on it yet": a lookup that finds nothing proves
    nothing until this much time has passed since the write was first sent."""
    return retry.longest_call(deadline) + margin


MIB = 1024 * 1024
#: Bytes of an error answer read (the rest is dropped): only its start is ever shown or logged.
ERROR_BODY_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much one answer may cost.

    ``max_response_bytes`` caps the body of any answer and ``max_list_bytes`` that of a call expecting a JSON
    list (:meth:`Http.models`: ``machines/`` and the other collection reads; the shared poll lists up to a
    batch of machines, a few KiB each); both are counted after decompression, while streaming, so a bigger
    answer is refused without being held in memory. ``deadline`` (seconds) bounds one attempt from connect to
    the last byte of the body; None: no overall bound (the per-phase timeouts still apply)."""

    max_response_bytes: int = 4 * MIB
    max_list_bytes: int = 64 * MIB
    deadline: float | None = 60.0


class _Raw(NamedTuple):
    """An answer as read, not yet decoded: ``Http.call(..., raw=True)``."""

    response: httpx.Response
    body: bytes
    info: errors.RequestInfo


#: Names of the encodings whose bytes pydantic's JSON parser reads as they are.
_UTF8 = frozenset({"utf-8", "utf8", "ascii", "us-ascii"})


@functools.cache
def _list_adapter(model: type[ModelT]) -> pydantic.TypeAdapter[list[ModelT]]:
    """The validator of a JSON list of ``model``, built once per model (building one costs milliseconds)."""
    return pydantic.TypeAdapter(list[model])  # type: ignore[valid-type]


def _retry_after(response: httpx.Response) -> float | None:
    return errors.parse_retry_after(response.headers.get("retry-after"))


class Http:
    """Sends MAAS API requests under ``api_root`` (``.../MAAS/api/2.0/``) and decodes the answers."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        api_root: str,
        credentials: _auth.Credentials,
        retry: RetryPolicy,
        sleep: Sleep,
        on_response: OnResponse | None,
        limits: Limits | None = None,
        on_invalid_item: OnInvalidItem | None = None,
    ) -> None:
        self._client = client
        self.api_root = api_root
        self._credentials = credentials
        self._retry = retry
        self._limits = limits if limits is not None else Limits()
        self._sleep = sleep
        self._on_response = on_response
        self._on_invalid_item = on_invalid_item

    async def call(
        self,
        method: str,
        path: str,
        *,
        op: str | None = None,
        params: Mapping[str, str | int] | None = None,
        query: FormFields = (),
        form: FormFields | None = None,
        listing: bool = False,
        raw: bool = False,
    ) -> Any:
        """Send one API call and return its decoded JSON (None for an empty body, e.g. DELETE's 204).

        ``path`` is a template relative to the API root (``machines/{system_id}/``), filled from ``params``
        with each value percent-quoted; the template (plus ``?op=``) is what errors and metrics name.
        ``listing``: the answer is a collection, read up to :attr:`Limits.max_list_bytes`. ``raw``: return
        the answer undecoded (:class:`_Raw`, for :meth:`_listing`), its decoding left to the caller.
        """
        endpoint = f"{path}?op={op}" if op else path
        url = self.api_root + path.format(**{k: quote(str(v), safe="") for k, v in (params or {}).items()})
        query_fields: list[tuple[str, str | int | float | bool | None]] = [("op", op)] if op else []
        query_fields += query
        headers = {}
        content: bytes | None = None
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            content = urlencode(list(form)).encode("ascii")

        # The URL with its query, parsed once per call (httpx's build_request given a string and params
        # parses twice: the string, then the URL again with the query merged in; an httpx.URL with no params
        # passes through as it is). Same URL: tests/unit/maas/test_maas_request_url.py.
        target = httpx.URL(url, params=query_fields) if query_fields else httpx.URL(url)

        def build() -> httpx.Request:
            # A fresh request per attempt: signing mutates it, and each attempt needs its own nonce.
            return self._client.build_request(method, target, headers=headers, content=content)

        # The first attempt's request is built once: its URL is also what errors name (building it twice
        # per call was ~5% of a profiled benchmark run: httpx parses and re-quotes the URL in Python).
        unsent = [build()]
        info = errors.RequestInfo(method, str(unsent[0].url), endpoint)

        def attempt() -> httpx.Request:
            return unsent.pop() if unsent else build()

        cap = self._limits.max_list_bytes if listing else self._limits.max_response_bytes
        response, body = await self._send(attempt, info, cap)
        if raw:
            return _Raw(response, body, info)
        return self._decode(response, body, info)

    async def model(self, model: type[ModelT], method: str, path: str, **kwargs: Any) -> ModelT:
        """:meth:`call`, validated into ``model`` (from the body's bytes, see :meth:`_one_pass`)."""
        answer: _Raw = await self.call(method, path, raw=True, **kwargs)
        fast = self._one_pass(model.model_validate_json, answer, "answer read again as JSON")
        if fast is not None:
            return _compact.compact(fast)
        return self.parse(model, self._decode(*answer), method=method, path=path)

    async def optional_model(
        self, model: type[ModelT], method: str, path: str, **kwargs: Any
    ) -> ModelT | None:
        """:meth:`model`, but an empty body (MAAS had nothing to say) is None."""
        answer: _Raw = await self.call(method, path, raw=True, **kwargs)
        fast = self._one_pass(model.model_validate_json, answer, "answer read again as JSON")
        if fast is not None:
            return _compact.compact(fast)
        data = self._decode(*answer)
        return None if data is None else self.parse(model, data, method=method, path=path)

    async def models(self, model: type[ModelT], method: str, path: str, **kwargs: Any) -> list[ModelT]:
        """:meth:`call` for a JSON list (read up to the list cap), each item validated into ``model``."""
        fast, data = await self._listing(model, method, path, **kwargs)
        if fast is not None:
            return fast
        if not isinstance(data, list):
            raise self.shape_error(method, path, "a JSON list", data)
        return [self.parse(model, item, method=method, path=path) for item in data]

    async def models_lenient(
        self, model: type[ModelT], method: str, path: str, *, key: str, **kwargs: Any
    ) -> tuple[list[ModelT], list[str]]:
        """:meth:`models`, but an item that does not parse is left out instead of failing the whole answer:
        returns the parsed items and the ``key`` field (e.g. ``system_id``) of each one left out ("" when it
        has none). Each is logged (the field problems, never the values) and counted by the hook."""
        fast, data = await self._listing(model, method, path, **kwargs)
        if fast is not None:
            return fast, []
        if not isinstance(data, list):
            raise self.shape_error(method, path, "a JSON list", data)
        parsed: list[ModelT] = []
        skipped: list[str] = []
        for item in data:
            try:
                parsed.append(self.parse(model, item, method=method, path=path))
            except errors.ResponseParseError as exc:
                ident = item.get(key) if isinstance(item, dict) else None
                skipped.append(ident if isinstance(ident, str) else "")
                log.warning("left one item out of the answer to %s %s: %s", method, path, exc)
                self._notify_invalid(path)
        return parsed, skipped

    async def _listing(
        self, model: type[ModelT], method: str, path: str, **kwargs: Any
    ) -> tuple[list[ModelT] | None, Any]:
        """A list answer as ``(models, None)`` when the whole body validates in one pass, else
        ``(None, decoded JSON)`` for the per-item path that names the bad item (or the shape).

        The one pass validates the raw bytes straight into the models (pydantic's own JSON parser): no
        decoded text and no dict per machine and per nested interface or disk, which for a 200-machine
        answer were most of the operator's peak Python memory (docs/benchmarks/per-machine.md). Any failure,
        of the JSON or of one item, falls back to the per-item path, so errors and left-out items are
        exactly what they were; a body not in UTF-8 (a ``charset`` MAAS never sends) always does."""
        answer: _Raw = await self.call(method, path, listing=True, raw=True, **kwargs)
        fast = self._one_pass(_list_adapter(model).validate_json, answer, "list answer read item by item")
        if fast is not None:
            return [_compact.compact(m) for m in fast], None
        return None, self._decode(*answer)

    @staticmethod
    def _one_pass(validate: Callable[[bytes], _T], answer: _Raw, fallback: str = "answer") -> _T | None:
        """A success's body validated straight from its bytes by pydantic's own JSON parser, or None when that
        fails (or the answer is an error, or not UTF-8): the caller then takes the old path (decode,
        ``json.loads``, validate), which alone makes the errors, so their types and messages are what they
        always were. A body the one pass accepts gives what the old path gives (the same models validate in
        the same lax mode; tests/unit/maas/test_maas_one_pass.py pins the corners). ``fallback`` is what the
        debug log says when the one pass fails. No text, and no dict of the fields a model drops, is made on
        the way (most of a machine's ~90 fields): a fraction of the CPU and of the memory of the old path
        (docs/benchmarks/README.md, issue 26). The body was read up to its cap before (``_exchange``)."""
        response, body, info = answer
        if response.is_success and (response.encoding or "utf-8").lower() in _UTF8:
            try:
                return validate(body)
            except pydantic.ValidationError:
                log.debug("MAAS %s %s: %s", info.method, info.endpoint, fallback)
        return None

    def shape_error(
        self, method: str, endpoint: str, expected: str, data: object
    ) -> errors.ResponseParseError:
        """The error for a 2xx answer whose JSON is valid but not the expected kind of value."""
        return errors.ResponseParseError(
            f"expected {expected} from {method} {endpoint}, got {type(data).__name__}",
            request=errors.RequestInfo(method, self.api_root + endpoint, endpoint),
        )

    def parse(self, model: type[ModelT], data: Any, *, method: str, path: str) -> ModelT:
        """``data`` as ``model``; a shape mismatch is :class:`ResponseParseError` naming the bad fields."""
        try:
            return _compact.compact(model.model_validate(data))
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise errors.ResponseParseError(
                f"unexpected {model.__name__} JSON from {path}: {problems}",
                request=errors.RequestInfo(method, self.api_root + path, path),
            ) from exc

    async def _send(
        self, build: Callable[[], httpx.Request], info: errors.RequestInfo, max_bytes: int
    ) -> tuple[httpx.Response, bytes]:
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(self._limits.deadline):
                    response, body = await self._exchange(build(), info, max_bytes, started)
            except _TRANSPORT_FAILURES as exc:  # builtin TimeoutError (the deadline) is an OSError
                self._notify(info, 0, started)
                failure = self._transport_error(exc, info)
                retryable = isinstance(exc, (httpx.TransportError, OSError)) and (
                    info.method in _IDEMPOTENT or isinstance(exc, _NOT_SENT)
                )
                if not retryable or attempt >= self._retry.max_retries:
                    raise failure from exc
                delay = self._retry.backoff(attempt)
                reason = f"{type(exc).__name__}: {failure}"
            else:
                self._notify(info, response.status_code, started)
                retry_after = _retry_after(response)
                if (
                    response.status_code not in (409, 503)
                    or retry_after is None
                    or attempt >= self._retry.max_retries
                ):
                    return response, body
                delay = min(retry_after, self._retry.max_retry_after)
                reason = f"{response.status_code} with Retry-After {retry_after:g}"
            attempt += 1
            log.warning(
                "MAAS %s %s: %s; retry %d/%d in %.1fs",
                info.method,
                info.endpoint,
                reason,
                attempt,
                self._retry.max_retries,
                delay,
            )
            await self._sleep(delay)

    async def _exchange(
        self, request: httpx.Request, info: errors.RequestInfo, max_bytes: int, started: float
    ) -> tuple[httpx.Response, bytes]:
        """Send ``request`` and read its body as a stream: at most ``max_bytes`` of a success (more is
        :class:`~capmaas.maas.errors.ResponseTooLargeError`), the first :data:`ERROR_BODY_BYTES` of an
        error."""
        response = await self._client.send(request, stream=True)
        try:
            limit = max_bytes if response.status_code < 300 else min(max_bytes, ERROR_BODY_BYTES)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    if response.status_code >= 300:
                        del body[limit:]  # an error's start is all anyone reads
                        break
                    self._notify(info, response.status_code, started)
                    raise errors.ResponseTooLargeError(
                        f"answer to {info} is larger than {limit} bytes; not read further", request=info
                    )
            return response, bytes(body)
        finally:
            await response.aclose()

    def _notify(self, info: errors.RequestInfo, status: int, started: float) -> None:
        """Tell the metrics hook about one answer (status 0: no answer) and how long the attempt took since
        ``started`` (its body read); a faulty hook never fails a call."""
        if self._on_response is None:
            return
        try:
            self._on_response(info.method, info.endpoint, status, time.monotonic() - started)
        except Exception:
            log.exception("on_response hook failed for %s %s", info.method, info.endpoint)

    def _notify_invalid(self, endpoint: str) -> None:
        if self._on_invalid_item is None:
            return
        try:
            self._on_invalid_item(endpoint)
        except Exception:
            log.exception("on_invalid_item hook failed for %s", endpoint)

    def _transport_error(self, exc: Exception, info: errors.RequestInfo) -> errors.MaasError:
        detail = self._credentials.redact(errors.cap_body(str(exc) or type(exc).__name__, 256))
        if isinstance(exc, TimeoutError) and not str(exc):  # the overall deadline of the attempt
            return errors.RequestTimeoutError(
                f"timed out: {info}: no complete answer within {self._limits.deadline:g}s", request=info
            )
        if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
            return errors.RequestTimeoutError(f"timed out: {info}: {detail}", request=info)
        if isinstance(exc, httpx.DecodingError):
            return errors.ResponseParseError(f"undecodable answer to {info}: {detail}", request=info)
        return errors.TransportError(
            f"no answer from MAAS: {info}: {type(exc).__name__}: {detail}", request=info
        )

    def _decode(self, response: httpx.Response, body: bytes, info: errors.RequestInfo) -> Any:
        text = body.decode(response.encoding or "utf-8", errors="replace")
        if response.status_code >= 300:
            text = self._credentials.redact(text)
            headers = {k.lower(): v for k, v in response.headers.items()}
            cls = errors.error_class(response.status_code, info.endpoint, headers)
            exc = cls(response.status_code, text, info, headers=headers)
            log.debug("MAAS %s %s -> %d %s", info.method, info.endpoint, response.status_code, exc.body)
            raise exc
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            redacted = self._credentials.redact(text)
            log.debug("MAAS %s %s: not JSON: %s", info.method, info.endpoint, errors.cap_body(redacted, 512))
            raise errors.ResponseParseError(
                f"answer to {info} is not JSON ({len(body)} bytes)", request=info, body=redacted
            ) from exc
