"""A stand-in HTTP server on a loopback port for the unit tests of the operator's own Kubernetes client: the
tests script its answers (the real apiserver runs in the operator and k8s tests)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serve(handler: Handler, method: str = "*") -> AsyncIterator[str]:
    """Serve every path with ``handler`` on 127.0.0.1 (a free port); yields the base URL."""
    app = web.Application()
    app.router.add_route(method, "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
