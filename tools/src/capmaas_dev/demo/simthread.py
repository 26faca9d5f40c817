"""The MAAS simulator on a loopback socket, run by its own event loop in a background thread.

Why a thread and not the caller's loop: the demo and the benchmark drive Kubernetes with the synchronous
``kubernetes`` client and kubectl, and block while they wait; the simulator must keep answering the operator
and ticking its deploy timers meanwhile. Why not a subprocess: the benchmark needs the moment each machine
reached Deployed (the ``on_deployed`` hook) on the same clock as its own watch, and exact counters.

Everything that reads simulator state goes through :meth:`SimulatorThread.call`, which runs the function on
the simulator's loop, so the caller never iterates a dict the simulator is changing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings, serve

T = TypeVar("T")


class SimulatorThread:
    """Start with :meth:`start`; ``url`` and ``api_key`` are valid once it listens; :meth:`stop` is
    idempotent."""

    def __init__(
        self,
        inventory: Inventory,
        timings: Timings,
        *,
        faults: Faults | None = None,
        api_key: str = "capmaasdemo0000000:capmaasdemotoken00:capmaasdemosecret000000000000000",
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.deployed_at: dict[str, float] = {}  # system_id -> wall time it last reached Deployed
        self.sim = Simulator(
            inventory, timings=timings, faults=faults or Faults(), api_key=api_key, on_deployed=self._deployed
        )
        self.port = port
        self.host = host  # another address only inside a network namespace the caller made (tests/pod)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="maas-simulator", daemon=True)

    @property
    def api_key(self) -> str:
        return self.sim.api_key

    def _deployed(self, machine: dict[str, Any]) -> None:
        self.deployed_at[str(machine["system_id"])] = time.time()

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(self.sim, host=self.host, port=self.port) as url:
            self.url = url
            self._ready.set()
            await self._stop.wait()

    def start(self, timeout: float = 30.0) -> SimulatorThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the MAAS simulator did not start listening in time")
        if self._error is not None:
            raise RuntimeError(f"the MAAS simulator failed to start: {self._error}") from self._error
        return self

    @property
    def native_id(self) -> int:
        """The simulator thread's id in the OS (its CPU time is in ``/proc/self/task/<id>/stat``)."""
        tid = self._thread.native_id
        if tid is None:
            raise RuntimeError("the MAAS simulator thread has not started")
        return tid

    def call(self, fn: Callable[[Simulator], T], timeout: float = 30.0) -> T:
        """Run ``fn(sim)`` on the simulator's loop and return its result."""
        if self._loop is None or not self._thread.is_alive():
            raise RuntimeError("the MAAS simulator is not running")

        async def _run() -> T:
            return fn(self.sim)

        fut: Future[T] = asyncio.run_coroutine_threadsafe(_run(), self._loop)
        return fut.result(timeout)

    def counters(self) -> dict[tuple[str, str, str | None], int]:
        return self.call(lambda sim: dict(sim.counters))

    def reset_counters(self) -> None:
        self.call(lambda sim: sim.reset_counters())

    def machine_states(self) -> dict[str, dict[str, Any]]:
        """system_id -> ``{status_name, owner, agent_name, hostname, zone, ip_addresses}`` of each machine."""

        def snap(sim: Simulator) -> dict[str, dict[str, Any]]:
            out = {}
            for sid, m in sim.state.machines.items():
                out[sid] = {
                    "status_name": m.status.label,
                    "owner": m.owner,
                    "agent_name": m.agent_name,
                    "hostname": m.hostname,
                    "zone": sim.state.zones[m.zone_id].name,
                    "ip_addresses": [i.ip for i in m.interfaces if i.ip],
                }
            return out

        return self.call(snap)

    def invariants(self) -> list[str]:
        return self.call(lambda sim: sim.check_invariants())

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
            self._thread.join(timeout=10)
