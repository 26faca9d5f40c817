"""Serving the simulator on a real socket: :func:`serve` for tests, ``capmaas simulate`` for people.

capmaas simulate --inventory sample --port 5240 --api-key a:b:c
capmaas simulate --generate machines=5000,zones=3,vmhosts=30 --timings realistic --seed 7
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import uvicorn

from capmaas_dev.simulator.faults import Faults, Timings
from capmaas_dev.simulator.inventory import INVENTORIES, Inventory, InventoryError

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator


@contextlib.asynccontextmanager
async def serve(sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``sim`` with uvicorn on ``host:port`` (0 = a free port); yields ``http://host:port/MAAS``.

    The simulator's ticker runs while serving (it is stopped afterwards only if this started it).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))  # bound here, so a busy port is an OSError rather than uvicorn's sys.exit
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(
        sim.app,
        interface="asgi3",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # caller owns signals
    started_ticker = sim._task is None
    await sim.start()
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # uvicorn exposes only a flag, no event
            if task.done():
                task.result()
                raise OSError(f"the simulator's server stopped before it started on {host}:{port}")
            await asyncio.sleep(0.01)
        bound = sock.getsockname()[1]
        yield f"http://{host}:{bound}/MAAS"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if started_ticker:
            await sim.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--inventory",
        metavar="FILE",
        help="inventory YAML, or a shipped one: sample (3 zones, 12 machines), lxd (VM hosts)",
    )
    source.add_argument(
        "--generate",
        metavar="SPEC",
        help="generate an inventory, e.g. machines=5000,zones=3,vmhosts=30",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5240, help="port (0 picks a free one; default 5240)")
    parser.add_argument("--api-key", metavar="C:T:S", help="the admin API key (default: a random one)")
    parser.add_argument("--timings", choices=["fast", "realistic"], default="realistic")
    parser.add_argument("--seed", type=int, default=0, help="seed for generated inventories and faults")
    parser.add_argument(
        "--maas4", action="store_true", help="behave like MAAS 4.0 (VM hosts answer 410 Gone)"
    )
    parser.add_argument("--deploy-failure-rate", type=float, default=0.0)
    parser.add_argument("--broken-rate", type=float, default=0.0)
    parser.add_argument("--unavailable-rate", type=float, default=0.0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every API request")
    parser.add_argument("--drop-rate", type=float, default=0.0, help="answers cut before MAAS acts")
    parser.add_argument(
        "--late-commit-rate", type=float, default=0.0, help="writes taken up only after --late-commit-delay"
    )
    parser.add_argument("--late-commit-delay", type=float, default=2.0, metavar="SECONDS")
    parser.add_argument(
        "--drop-after-commit-rate", type=float, default=0.0, help="writes acted on, then the answer cut"
    )
    parser.add_argument(
        "--write-fault-ops",
        default="",
        metavar="OPS",
        help="limit the write faults to these ops (comma list)",
    )


def inventory_file(name: str) -> Path:
    """``--inventory``: a YAML file, or the name of an inventory shipped with the simulator (``sample``,
    ``lxd``: package data, so they are there outside a checkout too)."""
    shipped = INVENTORIES / f"{name}.yaml"
    return shipped if "/" not in name and not Path(name).exists() and shipped.is_file() else Path(name)


def parse_generate(spec: str) -> dict[str, int]:
    """``machines=5000,zones=3,vmhosts=30`` -> keyword arguments for :meth:`Inventory.generate`."""
    out: dict[str, int] = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ("machines", "zones", "vmhosts") or not value.strip().isdigit():
            raise InventoryError(f"--generate: expected machines=N,zones=N,vmhosts=N, got {item!r}")
        out[key] = int(value)
    return out


def build(args: argparse.Namespace) -> Simulator:
    from capmaas_dev.simulator.core import Simulator

    if args.generate:
        inventory = Inventory.generate(seed=args.seed, **parse_generate(args.generate))
    elif args.inventory:
        inventory = Inventory.from_yaml(inventory_file(args.inventory))
    else:
        inventory = Inventory()
    faults = Faults(
        seed=args.seed,
        deploy_failure_rate=args.deploy_failure_rate,
        broken_rate=args.broken_rate,
        unavailable_rate=args.unavailable_rate,
        latency=args.latency,
        drop_rate=args.drop_rate,
        late_commit_rate=args.late_commit_rate,
        late_commit_delay=args.late_commit_delay,
        drop_after_commit_rate=args.drop_after_commit_rate,
        write_fault_ops=frozenset(op for op in args.write_fault_ops.split(",") if op),
    )
    timings = Timings.realistic() if args.timings == "realistic" else Timings.fast()
    return Simulator(
        inventory, timings=timings, faults=faults, api_key=args.api_key, maas4=args.maas4, seed=args.seed
    )


async def main(args: argparse.Namespace, stop: asyncio.Event | None = None, out: TextIO = sys.stdout) -> int:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when run from the CLI)."""
    sim = build(args)
    stop = stop or asyncio.Event()
    async with serve(sim, args.host, args.port) as url:
        print(f"MAAS simulator (API 2.0) listening on {url}/", file=out)
        print(f"admin API key: {sim.api_key}", file=out)
        state = sim.state
        print(
            f"machines: {len(state.machines)}, VM hosts: {len(state.vm_hosts)}, zones: {len(state.zones)}",
            file=out,
        )
        out.flush()
        await stop.wait()
    return 0


def run(args: argparse.Namespace) -> int:
    async def _main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await main(args, stop)

    try:
        return asyncio.run(_main())
    except (InventoryError, ValueError, OSError) as exc:
        print(f"capmaas simulate: {exc}", file=sys.stderr)
        return 2
