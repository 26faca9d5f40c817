"""Request-body parsing as Django/piston does it for MAAS: urlencoded and multipart, repeated keys, base64
parts.

libmaas and the MAAS CLI send *every* multipart part with ``Content-Transfer-Encoding: base64``; a server
that forgets to decode them sees base64 garbage for every parameter: the interop trap this parser exists for.
They also send a multipart body when there are no parameters at all: one empty part without headers. Like
Django's ``MultiPartParser`` (which MAAS parses with), parts without a ``Content-Disposition`` name are
skipped.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from urllib.parse import parse_qsl


class FormError(ValueError):
    """A body that cannot be parsed (answered with 400)."""


class FormData:
    """An ordered multi-dict (Django's QueryDict, reduced to what handlers need)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = list(items)

    def get(self, key: str, default: str | None = None) -> str | None:
        """The last value for ``key`` (Django semantics)."""
        for k, v in reversed(self._items):
            if k == key:
                return v
        return default

    def getlist(self, key: str) -> list[str]:
        return [v for k, v in self._items if k == key]

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self._items)

    def keys(self) -> list[str]:
        """Distinct keys in order of first appearance."""
        return list(dict.fromkeys(k for k, _ in self._items))

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def grouped(self, exclude: Iterable[str] = ()) -> list[tuple[str, list[str]]]:
        """``[(key, [values])]`` in request order: what MAAS prints in allocate's no-match message."""
        skip = set(exclude)
        return [(k, self.getlist(k)) for k in self.keys() if k not in skip]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FormData({self._items!r})"


def parse_query(query: str) -> FormData:
    return FormData(parse_qsl(query, keep_blank_values=True))


def parse_body(content_type: str, body: bytes) -> FormData:
    """Parse a POST/PUT body by content type; anything that is not a form is ignored (MAAS reads no JSON)."""
    if not body:
        return FormData()
    ctype, params = _split_header(content_type)
    if ctype == "application/x-www-form-urlencoded":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormError("Invalid form body: not UTF-8.") from exc
        return parse_query(text)
    if ctype == "multipart/form-data":
        boundary = params.get("boundary")
        if not boundary:
            raise FormError("Invalid boundary in multipart: None")
        return _parse_multipart(body, boundary.encode("latin-1"))
    return FormData()


def _split_header(value: str) -> tuple[str, dict[str, str]]:
    main, *rest = value.split(";")
    params: dict[str, str] = {}
    for item in rest:
        key, sep, val = item.strip().partition("=")
        if sep:
            params[key.strip().lower()] = val.strip().strip('"')
    return main.strip().lower(), params


def _parse_multipart(body: bytes, boundary: bytes) -> FormData:
    delimiter = b"--" + boundary
    chunks = body.split(delimiter)
    if len(chunks) < 2 or not chunks[-1].startswith(b"--"):
        raise FormError("Invalid multipart body: missing closing boundary.")
    items: list[tuple[str, str]] = []
    for chunk in chunks[1:-1]:
        part = chunk.removeprefix(b"\r\n").removesuffix(b"\r\n")
        head, sep, content = part.partition(b"\r\n\r\n")
        if not sep and part.startswith(b"\r\n"):  # no headers at all: the blank line comes first
            head, sep, content = b"", b"\r\n", part[2:]
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", errors="replace").split("\r\n"):
            key, colon, val = line.partition(":")
            if colon:
                headers[key.strip().lower()] = val.strip()
        _, disp = _split_header(headers.get("content-disposition", ""))
        name = disp.get("name")
        if name is None:  # Django's MultiPartParser skips a part without Content-Disposition or name
            continue
        if headers.get("content-transfer-encoding", "").lower() == "base64":
            try:
                content = base64.b64decode(b"".join(content.split()), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise FormError(f"Invalid base64 in multipart part {name!r}.") from exc
        items.append((name, content.decode("utf-8", errors="replace")))
    return FormData(items)


TRUE_VALUES = frozenset({"true", "yes", "on", "1", "y", "t"})
FALSE_VALUES = frozenset({"false", "no", "off", "0", "n", "f", ""})


def parse_bool(form: FormData, key: str, default: bool = False) -> bool:
    """formencode ``StringBool``; a bad value is MAAS's ``Invalid <key>: ...`` 400 (raised as FormError)."""
    value = form.get(key)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in TRUE_VALUES:
        return True
    if lowered in FALSE_VALUES:
        return False
    raise FormError(f"Invalid {key}: Value should be 'true' or 'false'")
