"""An httpx transport that sends over aiohttp: the MAAS client's requests at a fraction of httpcore's CPU.

Why: the operator's MAAS client is an ``httpx.AsyncClient``, and with httpx's default transport (httpcore on
anyio) its HTTP was a large share of the operator's CPU (figures: docs/benchmarks/README.md). aiohttp is
what kopf is built on, so it is installed with the operator.

httpx's transport interface is public; the client keeps its auth, retries, error mapping and metrics. What the
transport owes it: TLS as the client would have verified it (an :class:`ssl.SSLContext`, see
:func:`ssl_context`; the system's trust store is loaded only for an ``https`` request, once per process), the
per-request timeouts httpx puts in ``request.extensions["timeout"]``, failures as
the ``httpx`` exceptions the client maps (connect failures as :class:`httpx.ConnectError`, so a POST that
never left is retried and one that may have left is not), and the body as a stream: the client counts the
bytes as they arrive and stops reading past its cap (a 400 MiB answer from a tenant's endpoint is never held
whole).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx

from capmaas.maas import errors

__all__ = ["AiohttpTransport", "load_ca", "ssl_context"]


def ssl_context(*, ca_data: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """What a transport verifies MAAS's certificate against: the system store plus ``ca_data`` (PEM), or
    nothing at all with ``insecure`` (the client logs that switch when it is built with ``insecure=True``).

    One context per distinct trust configuration, shared by every transport given it (a context is only read
    once made): loading the system store costs each context native memory and CPU (docs/scaling.md,
    "Memory: session 40"). :class:`InvalidCaError` when ``ca_data`` is not a certificate."""
    return _shared_context(ca_data, insecure)


#: Distinct trust configurations kept (the default one, and an identity's own CA or insecure switch each).
SHARED_CONTEXTS = 16


@functools.lru_cache(maxsize=SHARED_CONTEXTS)
def _shared_context(ca_data: str | None, insecure: bool) -> ssl.SSLContext:
    if insecure:  # verifies nothing, so it needs no trust store: the stdlib's unverified context (PEP 476)
        return ssl._create_unverified_context()
    context = ssl.create_default_context()
    if ca_data:
        load_ca(context, ca_data)
    return context


def load_ca(context: ssl.SSLContext, ca_data: str) -> None:
    """Add PEM ``ca_data`` to ``context``'s trust; :class:`InvalidCaError` when it is not a certificate."""
    try:
        context.load_verify_locations(cadata=ca_data)
    except (ssl.SSLError, ValueError) as exc:
        raise errors.InvalidCaError(
            f"the CA certificate is not a PEM certificate ({type(exc).__name__})"
        ) from exc


class _Body(httpx.AsyncByteStream):
    """An aiohttp response body as httpx reads it: chunk by chunk, read failures mapped like the request's."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_chunked(64 * 1024):
                yield chunk
        except (TimeoutError, aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=self._request) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # read to the end: the connection goes back to the pool
        else:
            self._response.close()  # abandoned mid-body (cap, deadline): the connection is dropped


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One pooled aiohttp session (made on first use, inside the running event loop), TLS as ``ssl_context``
    says; without one, the system's trust store (:func:`ssl_context`), loaded at the first ``https`` request:
    a transport to an ``http://`` MAAS never loads it."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, connections: int = 32) -> None:
        self._verify = ssl_context
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                auto_decompress=False,  # httpx decodes Content-Encoding itself
                trust_env=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
        return self._session

    def _tls(self, url: httpx.URL) -> ssl.SSLContext | bool:
        """The context an ``https`` request verifies with; ``True`` (aiohttp's "default", unused) for
        ``http``."""
        if url.scheme != "https":
            return True
        if self._verify is None:
            self._verify = ssl_context()
        return self._verify

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        body = await request.aread()
        try:
            response = await self._client().request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                ssl=self._tls(request.url),
            )
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
            return httpx.Response(
                response.status, headers=headers, stream=_Body(response, request), request=request
            )
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except (TimeoutError, aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except aiohttp.ClientConnectorError as exc:  # incl. certificate and TLS handshake failures
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise httpx.RemoteProtocolError(str(exc) or "server disconnected", request=request) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
