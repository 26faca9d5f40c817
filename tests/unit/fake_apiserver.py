"""A loopback HTTP server standing in for the Kubernetes apiserver in the unit tests of the operator's own
client: each test file scripts the paths it answers as an aiohttp route table (the real apiserver runs in the
operator and k8s tests). A plain module (a name of its own, not ``conftest``) so test files import ``Serve``
by name; ``tests/unit/conftest.py`` makes the ``loopback`` fixture visible to every folder under
``tests/unit``.

aiohttp is imported when a test asks for the fixture: loading the conftest stays cheap for the unit tests that
never touch HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from aiohttp import web


class Serve(Protocol):
    async def __call__(self, routes: Iterable[web.AbstractRouteDef]) -> str: ...


@pytest.fixture
async def loopback() -> AsyncIterator[Serve]:
    """``url = await loopback(routes)`` serves ``routes`` on 127.0.0.1 (a free port) until the test's
    teardown, which stops it after the fixtures that asked for it (a client on the URL is closed first)."""
    from aiohttp import web

    runners: list[web.AppRunner] = []

    async def serve(routes: Iterable[web.AbstractRouteDef]) -> str:
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield serve
    finally:
        for runner in runners:
            await runner.cleanup()
