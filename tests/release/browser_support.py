"""Debian's headless Chromium driven over the Chrome DevTools Protocol, to check that pages of the built site
render as a reader's browser renders them (their JavaScript run: Material's search is a web worker over
``search/search_index.json``, nothing of it is in the HTML files).

No WebDriver, no extra package: Chromium is started with ``--remote-debugging-port=0`` on 127.0.0.1 (it
writes the port it chose to ``DevToolsActivePort`` in its fresh profile), and the page is driven with
``Page.navigate`` and read with ``Runtime.evaluate`` over the page's websocket (aiohttp, a dependency
already). Exceptions the page's scripts throw are collected (``Runtime.exceptionThrown``). The site is served
by a ``http.server`` on 127.0.0.1 in a thread; Chromium's background traffic is switched off by its flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",  # root in CI, no user namespaces for the sandbox
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("Debian's chromium is not installed (`make browser-packages`, as root)", pytrace=False)
    return found


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """``site`` over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class Page:
    """One browser tab over CDP."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.exceptions: list[str] = []
        self._next = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=60)
            if msg.get("method") == "Runtime.exceptionThrown":
                details = msg["params"]["exceptionDetails"]
                self.exceptions.append(str(details.get("exception", {}).get("description") or details))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg["result"])

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def open(self, url: str) -> None:
        """Navigate and wait for the load event's end (``document.readyState == "complete"``)."""
        await self.call("Page.navigate", url=url)
        await self.until("document.readyState === 'complete' && location.href === " + json.dumps(url), 30)

    async def until(self, expression: str, within: float) -> Any:
        """Evaluate ``expression`` until it is truthy; its value. Fails with the last value after ``within``
        seconds."""
        deadline = time.monotonic() + within
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"not within {within:.0f}s: {expression} (last: {value!r})", pytrace=False)
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Page]:
    """A headless Chromium with a fresh profile and one page; killed and its profile removed on exit."""
    profile = Path(tempfile.mkdtemp(prefix="capmaas-chromium-"))
    proc = await asyncio.create_subprocess_exec(
        chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if proc.returncode is not None:
                pytest.fail(f"chromium exited ({proc.returncode}) before it listened", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail("chromium did not open its DevTools port within 60s", pytrace=False)
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            (target,) = [t for t in targets if t["type"] == "page"]
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Runtime.enable")
                yield page
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
