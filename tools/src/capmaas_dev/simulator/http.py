"""Request/response values and the errors handlers raise, rendered the way MAAS renders them.

Handlers are plain synchronous functions: they receive a :class:`Request`, return a :class:`Response` (or
JSON-able data) and raise :class:`HttpError` for MAAS's error answers. Being synchronous is deliberate: an
asyncio server cannot interleave two handlers, so "pick a machine, mark it allocated" is atomic, lock-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.forms import FormData

if TYPE_CHECKING:
    from capmaas_dev.simulator.auth import User

JSON_TYPE = "application/json"
JSON_UTF8 = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass(slots=True)
class Request:
    """One API request after routing and authentication."""

    method: str
    path: str
    query: FormData
    form: FormData
    headers: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)
    user: User | None = None
    op: str | None = None

    @property
    def data(self) -> FormData:
        """What piston calls ``request.data``: the query for GET/DELETE, the body for POST/PUT."""
        return self.form if self.method in ("POST", "PUT") else self.query

    @property
    def is_admin(self) -> bool:
        return self.user is not None and self.user.is_superuser


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = JSON_TYPE
    headers: dict[str, str] = field(default_factory=dict)


def json_response(data: Any, status: int = 200, content_type: str = JSON_TYPE) -> Response:
    return Response(status, json.dumps(data).encode(), content_type)


def raw_json_response(body: bytes, status: int = 200) -> Response:
    """For bodies assembled from cached per-object JSON fragments (machine lists)."""
    return Response(status, body, JSON_TYPE)


class HttpError(Exception):
    """An error answer: status, body and headers exactly as MAAS would send them."""

    def __init__(
        self,
        status: int,
        body: str | dict[str, list[str]] | list[str] = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.headers = dict(headers or {})
        if isinstance(body, str):
            self.body = body.encode()
            self.content_type = TEXT_TYPE
        else:
            self.body = json.dumps(body).encode()
            self.content_type = JSON_TYPE
        super().__init__(f"{status}: {self.body[:200]!r}")

    def response(self) -> Response:
        return Response(self.status, self.body, self.content_type, dict(self.headers))


def bad_request(body: str | dict[str, list[str]]) -> HttpError:
    """400: text for single messages, JSON ``{field: [msgs]}`` for form errors (MAAS ExceptionMiddleware)."""
    return HttpError(400, body)


def field_error(name: str, message: str) -> HttpError:
    return HttpError(400, {name: [message]})


def forbidden(message: str = "") -> HttpError:
    """403; MAAS often sends it with an empty body (``PermissionDenied()`` in ``get_node_or_404``)."""
    return HttpError(403, message)


ADMIN_ONLY = "This method is reserved for admin users."


def admin_only() -> HttpError:
    return HttpError(403, ADMIN_ONLY)


def not_found(model: str) -> HttpError:
    return HttpError(404, f"No {model} matches the given query.")


def not_found_text(message: str) -> HttpError:
    """404 with MAAS's own text: ``StaticIPAddressUnavailable`` (an address in use) answers 404."""
    return HttpError(404, message)


def conflict(message: str) -> HttpError:
    """409 without Retry-After: a retrying client (gomaasapi) must not loop on a state violation."""
    return HttpError(409, message)


def unavailable(message: str, retry_after: int | None = None) -> HttpError:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return HttpError(503, message, headers)
