"""``make bench-sim``: requests/s of the simulator for list/get/allocate at 1,000 and 5,000 machines.

In-process over ``httpx.ASGITransport`` (no sockets, so the figures are the simulator's own cost plus httpx's
request building). A benchmark prints numbers; it never asserts on them.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx

from capmaas_dev.simulator.core import Simulator
from capmaas_dev.simulator.inventory import Inventory

API_KEY = "benchconsumer00000:benchtoken00000000:benchsecret00000000000000000000"
_nonce = itertools.count()


def oauth_header(api_key: str = API_KEY) -> dict[str, str]:
    consumer, token, secret = api_key.split(":")
    return {
        "Authorization": (
            f'OAuth realm="OAuth", oauth_nonce="{next(_nonce)}", oauth_timestamp="{int(time.time())}", '
            f'oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="{consumer}", '
            f'oauth_token="{token}", oauth_signature="%26{secret}"'
        )
    }


async def measure(n: int, call: Callable[[int], Awaitable[httpx.Response]]) -> tuple[float, float]:
    """(requests per second, median milliseconds) over ``n`` sequential calls."""
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        response = await call(i)
        latencies.append(time.perf_counter() - t0)
        if response.status_code != 200:
            raise RuntimeError(f"unexpected {response.status_code}: {response.text[:200]}")
    elapsed = time.perf_counter() - start
    return n / elapsed, statistics.median(latencies) * 1000


async def bench(machines: int, rounds: int) -> dict[str, tuple[float, float]]:
    sim = Simulator(Inventory.generate(machines=machines, zones=3, vmhosts=0, seed=1), api_key=API_KEY)
    transport = httpx.ASGITransport(app=sim.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://maas/MAAS/api/2.0/") as client:
        ids = list(sim.state.machines)
        await client.get("machines/", headers=oauth_header())  # warm the per-machine JSON cache
        results = {}
        results["list (status=ready, zone=az1, cpu_count=16)"] = await measure(
            rounds,
            lambda i: client.get(
                "machines/",
                params={"status": "ready", "zone": "az1", "cpu_count": "16"},
                headers=oauth_header(),
            ),
        )
        results["list (agent_name=...)"] = await measure(
            rounds, lambda i: client.get("machines/", params={"agent_name": f"a{i}"}, headers=oauth_header())
        )
        results["get"] = await measure(
            rounds, lambda i: client.get(f"machines/{ids[i % len(ids)]}/", headers=oauth_header())
        )
        results["allocate (cpu_count=4, mem=8192, zone=az2)"] = await measure(
            min(rounds, machines // 10),
            lambda i: client.post(
                "machines/",
                params={"op": "allocate"},
                data={"cpu_count": "4", "mem": "8192", "zone": "az2", "agent_name": f"bench-{i}"},
                headers=oauth_header(),
            ),
        )
        results["full list (no filter)"] = await measure(
            max(3, rounds // 50), lambda i: client.get("machines/", headers=oauth_header())
        )
    problems = sim.check_invariants()
    if problems:
        raise RuntimeError(f"invariants violated: {problems}")
    return results


def main(sizes: tuple[int, ...] = (1000, 5000), rounds: int = 300) -> int:
    print("capmaas MAAS simulator benchmark (in-process ASGI, sequential requests)")
    for machines in sizes:
        results = asyncio.run(bench(machines, rounds=rounds))
        print(f"\n{machines} machines")
        for name, (rps, median_ms) in results.items():
            print(f"  {name:<46} {rps:8.0f} req/s   median {median_ms:6.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
