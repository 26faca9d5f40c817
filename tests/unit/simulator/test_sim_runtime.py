"""Timings, the ticker, the Deployed hook, seeded fault injection, and serving on a real loopback socket."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import os
import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest
from simtools import ADMIN_KEY, SAMPLE, OAuth, client, sample_sim

from capmaas_dev.simulator import ConnectionDropped, Faults, Inventory, NodeStatus, Simulator, Timings, serve
from capmaas_dev.simulator.serve import add_arguments, build, main, parse_generate

serve_mod = importlib.import_module("capmaas_dev.simulator.serve")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_timings_drive_the_lifecycle_deterministically() -> None:
    clock = FakeClock()
    sim = sample_sim(timings=Timings(deploy=30, release=10, commission=5, erase=20), clock=clock)
    async with client(sim) as c:
        sid = (await c.post("machines/", params={"op": "allocate"})).json()["system_id"]
        await c.post(f"machines/{sid}/", params={"op": "deploy"})
        clock.now += 29
        assert (await c.get(f"machines/{sid}/")).json()["status_name"] == "Deploying"
        clock.now += 1
        assert (await c.get(f"machines/{sid}/")).json()["status_name"] == "Deployed"
        await c.post(f"machines/{sid}/", params={"op": "release"})
        clock.now += 9.5
        assert (await c.get(f"machines/{sid}/")).json()["status_name"] == "Releasing"
        clock.now += 0.5
        assert (await c.get(f"machines/{sid}/")).json()["status_name"] == "Ready"


def test_timing_presets() -> None:
    assert Timings.fast() == Timings()
    realistic = Timings.realistic()
    assert realistic.deploy > realistic.release > 0


async def test_background_ticker_completes_without_requests() -> None:
    sim = sample_sim(tick_interval=0.01)
    m = sim.state.by_hostname["cp-1"]
    sim.acquire(m, "admin")
    sim.start_deploy(m)
    async with sim:
        for _ in range(100):
            if m.status is NodeStatus.DEPLOYED:
                break
            await asyncio.sleep(0.01)
    assert m.status is NodeStatus.DEPLOYED
    await sim.stop()  # idempotent


async def test_on_deployed_hook_sync_and_async() -> None:
    seen: list[str] = []

    async def hook(machine: dict[str, Any]) -> None:
        seen.append(machine["hostname"])

    sim = sample_sim(on_deployed=hook)
    async with client(sim) as c:
        sid = sim.state.by_hostname["gpu-1"].system_id
        await c.post(f"machines/{sid}/", params={"op": "deploy"})
        await c.get("version/")
        await asyncio.sleep(0)
    assert seen == ["gpu-1"]
    sync_seen: list[str] = []
    sim2 = sample_sim(on_deployed=lambda m: sync_seen.append(m["status_name"]))
    m = sim2.state.by_hostname["cp-1"]
    sim2.acquire(m, "admin")
    sim2.start_deploy(m)
    assert sim2.tick() == 1
    assert sync_seen == ["Deployed"]


async def test_commissioning_and_broken_faults() -> None:
    sim = sample_sim(faults=Faults(seed=1, broken_rate=1.0))
    m = sim.state.by_hostname["cp-1"]
    sim.commission(m)
    sim.tick()
    assert m.status is NodeStatus.FAILED_COMMISSIONING
    m2 = sim.state.by_hostname["cp-2"]
    sim.acquire(m2, "admin")
    sim.start_deploy(m2)
    sim.tick()
    assert m2.status is NodeStatus.BROKEN
    assert m2.error_description == "Simulated hardware failure"
    sim.faults = Faults()
    m3 = sim.state.by_hostname["cp-3"]
    sim.commission(m3)
    sim.tick()
    assert m3.status is NodeStatus.READY
    assert sim.check_invariants() == []


def test_faults_validate_rates() -> None:
    with pytest.raises(ValueError, match="deploy_failure_rate"):
        Faults(deploy_failure_rate=2)
    with pytest.raises(ValueError, match="latency"):
        Faults(latency=-1)


async def run_with_faults(seed: int) -> list[int]:
    sim = sample_sim(faults=Faults(seed=seed, unavailable_rate=0.3))
    statuses = []
    async with client(sim) as c:
        for _ in range(30):
            r = await c.get("machines/")
            statuses.append(r.status_code)
            if r.status_code == 503:
                assert r.headers["retry-after"] == "10"
                assert r.text == "Unable to connect to any rack controller; no connections available."
        assert (await c.get("debug/", params={"op": "invariants"})).status_code == 200  # never faulted
    return statuses


async def test_unavailable_faults_are_seeded_and_deterministic() -> None:
    a, b, c = await run_with_faults(7), await run_with_faults(7), await run_with_faults(8)
    assert a == b
    assert 503 in a
    assert 200 in a
    assert a != c


async def test_deploy_failure_rate_is_deterministic() -> None:
    async def outcomes(seed: int) -> list[str]:
        sim = Simulator(
            Inventory.generate(machines=40, seed=1), faults=Faults(seed=seed, deploy_failure_rate=0.5)
        )
        for m in list(sim.state.machines.values())[:20]:
            sim.acquire(m, "admin")
            sim.start_deploy(m)
        sim.tick()
        return [m.status.label for m in list(sim.state.machines.values())[:20]]

    first = await outcomes(3)
    assert first == await outcomes(3)
    assert {"Deployed", "Failed deployment"} == set(first)


async def test_dropped_connection_and_latency() -> None:
    sim = sample_sim(faults=Faults(seed=0, drop_rate=1.0, latency=0.01))
    async with client(sim) as c:
        with pytest.raises(ConnectionDropped):
            await c.get("machines/")
    async with serve(sim) as url, httpx.AsyncClient(base_url=url + "/api/2.0/", auth=OAuth(ADMIN_KEY)) as c:
        with pytest.raises(httpx.TransportError):
            await c.get("machines/")


async def test_unexpected_handler_errors_are_500(sim: Simulator, admin: httpx.AsyncClient) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("kaput")

    sim.state.by_hostname["cp-1"].cached_json = None
    original = sim.state.domains
    sim.state.domains = {}  # a machine's domain vanished: serialisation fails
    r = await admin.get(f"machines/{sim.state.by_hostname['cp-1'].system_id}/")
    sim.state.domains = original
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("text/plain")
    assert boom


async def test_lifespan_and_non_http_scopes(sim: Simulator) -> None:
    sent: list[dict[str, Any]] = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    await sim.app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    await sim.app({"type": "websocket"}, receive, send)

    async def disconnect() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    await sim.app({"type": "http"}, disconnect, send)
    assert len(sent) == 2


# -- real sockets -----------------------------------------------------------------------------------------
async def test_serve_on_loopback(sim: Simulator) -> None:
    async with serve(sim, "127.0.0.1", 0) as url:
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/MAAS")
        async with httpx.AsyncClient(base_url=url + "/api/2.0/", auth=OAuth(ADMIN_KEY)) as c:
            assert (await c.get("version/")).json()["version"] == "3.7.3"
            r = await c.post("machines/", params={"op": "allocate"}, data={"tags": "gpu"})
            assert r.json()["hostname"] == "gpu-1"
    assert sim._task is None


async def test_serve_reports_bind_failure(sim: Simulator) -> None:
    async with serve(sim) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            async with serve(sample_sim(), "127.0.0.1", port):
                pass


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


async def test_cli_main_in_process() -> None:
    stop = asyncio.Event()
    out = io.StringIO()
    args = cli_args("--inventory", str(SAMPLE), "--port", "0", "--api-key", ADMIN_KEY, "--timings", "fast")
    task = asyncio.create_task(main(args, stop, out))
    for _ in range(200):
        if "admin API key" in out.getvalue():
            break
        await asyncio.sleep(0.01)
    text = out.getvalue()
    assert f"admin API key: {ADMIN_KEY}" in text
    assert "machines: 12" in text
    url = text.split("listening on ")[1].split()[0]
    async with httpx.AsyncClient() as c:
        assert (await c.get(url + "api/2.0/version/")).status_code == 200
    stop.set()
    assert await task == 0


def test_cli_build_variants() -> None:
    sim = build(cli_args("--generate", "machines=30,zones=2,vmhosts=2", "--seed", "3", "--maas4"))
    assert len(sim.state.machines) == 30
    assert sim.maas4
    assert sim.timings == Timings.realistic()
    assert len(build(cli_args()).state.machines) == 0
    assert parse_generate("machines=5, zones=2") == {"machines": 5, "zones": 2}
    with pytest.raises(ValueError, match="expected machines=N"):
        parse_generate("machines=lots")


def test_cli_run_reports_errors(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("machines: nope")
    assert serve_mod.run(cli_args("--inventory", str(bad))) == 2
    assert "expected a list of mappings" in capsys.readouterr().err


@pytest.mark.slow
def test_capmaas_simulate_subprocess_over_loopback() -> None:
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "capmaas",
            "simulate",
            "--inventory",
            str(SAMPLE),
            "--port",
            "0",
            "--api-key",
            ADMIN_KEY,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in first, proc.stderr.read() if proc.stderr else ""
        assert proc.stdout.readline().strip() == f"admin API key: {ADMIN_KEY}"
        url = first.split("listening on ")[1].strip()
        r = httpx.get(url + "api/2.0/version/", timeout=10)
        assert r.json()["version"] == "3.7.3"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_bench_runs_and_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from capmaas_dev.simulator import bench

    assert bench.main(sizes=(60,), rounds=6) == 0
    out = capsys.readouterr().out
    assert "60 machines" in out
    assert out.count("req/s") == 5
