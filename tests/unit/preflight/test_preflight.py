"""``capmaas preflight`` against the MAAS simulator on loopback: one passing run and each failure it reports
(bad key, malformed key, non-admin user, nothing listening, a self-signed TLS server, MAAS 4.0's 410 on
``vm-hosts/``), through the command's own entry point and output."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
import yaml

from capmaas import cli, preflight
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.devcluster.pki import make_serving_pki
from capmaas_dev.simulator import Inventory, Simulator, Timings
from capmaas_dev.simulator.inventory import generate_data

BAD_KEY = "aaaaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbbbb:cccccccccccccccccccccccccccccccc"


def inventory(vmhosts: int = 1) -> Inventory:
    return Inventory.generate(machines=4, zones=3, vmhosts=vmhosts, seed=3)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorThread]:
    s = SimulatorThread(inventory(), Timings.fast()).start()
    yield s
    s.stop()


def preflight_cli(*argv: str) -> tuple[int, str]:
    parser = cli.build_parser("preflight")
    args = parser.parse_args(["preflight", *argv])
    out = io.StringIO()
    code = preflight.run(args, out)
    return code, out.getvalue()


def rows(output: str) -> dict[str, tuple[str, str]]:
    """CHECK -> (RESULT, DETAIL) from the printed table."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^CHECK\s+RESULT\s+DETAIL$", line))
    found: dict[str, tuple[str, str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        m = re.match(r"^(\S+(?: \S+)?)\s{2,}(pass|warn|FAIL|skip)\s{2,}(.*)$", line)
        assert m, f"unparsable row {line!r} in\n{output}"
        found[m.group(1)] = (m.group(2), m.group(3))
    return found


def test_a_good_admin_key_passes_every_check(sim: SimulatorThread) -> None:
    code, out = preflight_cli("--endpoint", sim.url, "--api-key", sim.api_key)
    assert code == 0, out
    got = rows(out)
    assert list(got) == [
        "endpoint", "reachable", "TLS", "MAAS version", "API key", "admin", "zones", "resource pools",
        "VM hosts",
    ]  # fmt: skip
    assert got["MAAS version"] == ("pass", "3.7.3")
    assert got["API key"] == ("pass", "accepted: user 'admin'")
    assert got["admin"][0] == "pass"
    assert got["zones"][0] == "pass"
    # What a MaasCluster without spec.failureDomains would offer CAPI: the zones holding a machine; MAAS's
    # own (empty) zone 'default' is named as left out, as the MaasCluster's condition does.
    assert got["zones"][1] == (
        "az1, az2, az3 offered as CAPI failure domains (the zones holding a machine the key sees); "
        "left out, no machine: default"
    )
    assert got["VM hosts"] == ("pass", got["VM hosts"][1])
    assert got["VM hosts"][1].startswith("1 registered")
    # Plain http is a warning with its fix, not a failure.
    assert got["TLS"][0] == "warn"
    assert "TLS: serve MAAS over https" in out
    assert out.rstrip().endswith("OK: capmaas can use this MAAS")
    assert sim.api_key not in out  # the key is never printed


def test_a_key_maas_refuses_fails_and_skips_what_needs_it(sim: SimulatorThread) -> None:
    code, out = preflight_cli("--endpoint", sim.url, "--api-key", BAD_KEY)
    assert code == 1, out
    got = rows(out)
    assert got["reachable"][0] == "pass"
    assert got["API key"] == ("FAIL", "MAAS refused the key from --api-key (401)")
    assert got["admin"] == got["zones"] == got["VM hosts"] == ("skip", "needs a valid API key")
    assert "API key: generate a new key: `maas apikey --generate" in out
    assert BAD_KEY not in out
    assert out.rstrip().endswith("1 failed")


def test_a_malformed_key_fails_without_being_sent(sim: SimulatorThread) -> None:
    code, out = preflight_cli("--endpoint", sim.url, "--api-key", "not-a-key")
    assert code == 1, out
    got = rows(out)
    assert got["MAAS version"] == ("pass", "3.7.3")  # the anonymous checks still ran
    assert got["API key"][0] == "FAIL"
    assert "consumer_key:token_key:token_secret" in got["API key"][1]
    assert "not-a-key" not in out


def test_a_non_admin_user_fails_the_admin_check(sim: SimulatorThread) -> None:
    key = sim.call(lambda s: s.add_user("operator-bob", admin=False).api_key)
    code, out = preflight_cli("--endpoint", sim.url, "--api-key", key, "--bare-metal")
    assert code == 1, out
    got = rows(out)
    assert got["API key"] == ("pass", "accepted: user 'operator-bob'")
    assert got["admin"] == ("FAIL", "'operator-bob' is not a MAAS admin")
    assert got["VM hosts"][0] == "skip"
    assert "admin: use the API key of a MAAS admin" in out


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as s:  # a loopback port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out = preflight_cli("--endpoint", f"http://127.0.0.1:{port}/MAAS", "--api-key", BAD_KEY)
    assert code == 1, out
    got = rows(out)
    assert got["reachable"][0] == "FAIL"
    assert list(got) == ["endpoint", "reachable"]  # nothing else could be checked
    assert "reachable: check the URL, that MAAS (regiond) runs" in out


def test_zones_without_machines_are_not_offered_as_failure_domains() -> None:
    """Machines in one zone of two (plus MAAS's empty ``default``): the MaasCluster would offer CAPI that one
    zone only, so control planes cannot be spread - a warning naming the zones left out."""
    data = generate_data(machines=2, zones=1, vmhosts=0, seed=3)
    data["zones"].append({"name": "az2"})
    s = SimulatorThread(Inventory(data), Timings.fast()).start()
    try:
        code, out = preflight_cli("--endpoint", s.url, "--api-key", s.api_key, "--bare-metal")
        assert code == 0, out  # a warning, not a failure
        got = rows(out)
        assert got["zones"] == (
            "warn",
            "only az1 holds a machine; left out, no machine: az2, default: machines cannot be spread over "
            "failure domains",
        )
        assert "zones: put machines in at least two zones in MAAS" in out
    finally:
        s.stop()


def test_a_url_that_is_not_maas_fails_the_endpoint_check() -> None:
    code, out = preflight_cli("--endpoint", "maas.example:5240", "--api-key", BAD_KEY)
    assert code == 1, out
    assert rows(out)["endpoint"][0] == "FAIL"


def test_maas4_vm_hosts_410_fails_unless_bare_metal() -> None:
    s = SimulatorThread(inventory(vmhosts=0), Timings.fast())
    s.sim.maas4 = True
    s.start()
    try:
        code, out = preflight_cli("--endpoint", s.url, "--api-key", s.api_key)
        assert code == 1, out
        got = rows(out)
        assert got["MAAS version"][0] == "warn"
        assert got["MAAS version"][1].startswith("4.0.0")
        assert got["VM hosts"][0] == "FAIL"
        assert "410 Gone" in got["VM hosts"][1]
        assert "run with --bare-metal" in out
        code, out = preflight_cli("--endpoint", s.url, "--api-key", s.api_key, "--bare-metal")
        assert code == 0, out
        assert rows(out)["VM hosts"][0] == "skip"
    finally:
        s.stop()


@contextlib.contextmanager
def tls_simulator(certs: Path) -> Iterator[tuple[str, Simulator, Path]]:
    """The simulator served over https on 127.0.0.1 with a certificate from a fresh, private CA."""
    pki = make_serving_pki(certs)
    sim = Simulator(inventory(), timings=Timings.fast())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        sim.app,
        interface="asgi3",
        lifespan="off",
        log_level="warning",
        ssl_certfile=str(pki.cert),
        ssl_keyfile=str(pki.key),
    )
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.02)
        assert server.started
        yield f"https://127.0.0.1:{port}/MAAS", sim, pki.ca_cert
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_tls_self_signed_fails_and_passes_with_its_ca(tmp_path: Path) -> None:
    with tls_simulator(tmp_path / "pki") as (url, sim, ca):
        code, out = preflight_cli("--endpoint", url, "--api-key", sim.api_key)
        assert code == 1, out
        got = rows(out)
        assert got["TLS"][0] == "FAIL", out
        assert "CERTIFICATE_VERIFY_FAILED" in got["TLS"][1], out
        assert "TLS: pass the CA that signed MAAS's certificate (--ca-file" in out
        code, out = preflight_cli("--endpoint", url, "--api-key", sim.api_key, "--ca-file", str(ca))
        assert code == 0, out
        assert rows(out)["TLS"] == ("pass", "certificate verified (given CA)")
        # The same from an identity Secret manifest carrying the CA (MAAS_CA_CERT), as the operator reads it.
        secret = tmp_path / "identity.yaml"
        secret.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "maas-identity"},
                    "stringData": {
                        "MAAS_ENDPOINT": url,
                        "MAAS_API_KEY": sim.api_key,
                        "MAAS_CA_CERT": ca.read_text(),
                    },
                }
            )
        )
        code, out = preflight_cli("--identity-secret", str(secret))
        assert code == 0, out
        assert f"credentials: Secret maas-identity in {secret}" in out
        assert rows(out)["TLS"][0] == "pass"


def test_identity_secret_file_with_go_provider_keys(sim: SimulatorThread, tmp_path: Path) -> None:
    import base64

    secret = tmp_path / "s.yaml"
    data = {"endpoint": sim.url, "api-key": BAD_KEY}
    secret.write_text(
        yaml.safe_dump(
            {"kind": "Secret", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        )
    )
    code, out = preflight_cli("--identity-secret", str(secret))
    assert code == 1, out
    assert rows(out)["API key"][0] == "FAIL"
    empty = tmp_path / "empty.yaml"
    empty.write_text(yaml.safe_dump({"kind": "Secret", "metadata": {"name": "x"}, "stringData": {}}))
    code, out = preflight_cli("--identity-secret", str(empty))
    assert code == 2
    assert "lacks MAAS_ENDPOINT and MAAS_API_KEY" in out


def test_arguments_are_checked() -> None:
    code, out = preflight_cli("--endpoint", "http://127.0.0.1:1/MAAS")
    assert code == 2
    assert "give --endpoint and --api-key" in out
    args = argparse.Namespace(
        identity_secret="no-such-thing", endpoint=None, api_key=None, ca_file=None,
        insecure_skip_tls_verify=False, kubeconfig=None, bare_metal=False, timeout=1.0,
    )  # fmt: skip
    out_io = io.StringIO()
    assert preflight.run(args, out_io) == 2
    assert "neither a file nor namespace/name" in out_io.getvalue()
