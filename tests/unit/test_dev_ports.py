"""``capmaas_dev.devcluster.process.free_port`` across processes: the test processes of one run (xdist
workers, the suite's parallel groups) hand out ports to operators, apiservers and etcds at once, and a port
handed to two of them, or taken by the kernel for someone's outgoing connection before its user binds it, is
an "address already in use" exit in CI. These run real processes; nothing is mocked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from capmaas_dev.devcluster import process

#: Claims each helper process makes: enough that two kernel-chosen sets of this size would very likely
#: overlap somewhere in the ~28,000-port ephemeral range.
CLAIMS = 400

CLAIMER = """
import sys
from capmaas_dev.devcluster.process import free_port
print(" ".join(str(free_port()) for _ in range({n})), flush=True)
sys.stdin.readline()  # hold the claims until told to go
"""


def claimer(n: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen(
        [sys.executable, "-c", CLAIMER.format(n=n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_come_from_below_the_kernels_ephemeral_range() -> None:
    ports = [process.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < ephemeral_low() for p in ports), sorted(ports)
    assert all(p in process.port_range() for p in ports)


def test_live_processes_never_get_the_same_port() -> None:
    procs = [claimer(CLAIMS), claimer(CLAIMS)]
    try:
        mine = {process.free_port() for _ in range(CLAIMS)}
        theirs = [{int(p) for p in proc.stdout.readline().split()} for proc in procs if proc.stdout]
        assert [len(s) for s in theirs] == [CLAIMS, CLAIMS]
        assert theirs[0].isdisjoint(theirs[1]), sorted(theirs[0] & theirs[1])
        assert mine.isdisjoint(theirs[0] | theirs[1]), sorted(mine & (theirs[0] | theirs[1]))
    finally:
        for proc in procs:
            proc.communicate("\n", timeout=30)


PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
free = []
for port in map(int, sys.argv[2:]):
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        free.append(port)
    except OSError:
        pass
print(" ".join(map(str, free)))
"""


def lockable(ports: list[int]) -> list[int]:
    """The ``ports`` a fresh process can claim. A separate process: this one's own record locks never
    conflict with its attempts, and closing a second descriptor of the lock file here would drop this
    process's claims."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(process.PORT_CLAIMS), *map(str, ports)],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return [int(p) for p in out.stdout.split()]


def test_a_claim_ends_with_the_process_that_made_it() -> None:
    proc = claimer(5)
    assert proc.stdout
    ports = [int(p) for p in proc.stdout.readline().split()]
    assert len(ports) == 5
    assert lockable(ports) == [], "ports a live process claimed could be claimed again"
    proc.communicate("\n", timeout=30)
    assert lockable(ports) == ports, "a dead process's claims stayed held"


def test_a_port_someone_listens_on_is_skipped() -> None:
    """A listener of a program that is not ours (no claim) in the range: the bind test skips its port."""
    taken = []
    try:
        for port in process.port_range()[::8]:  # dense: any walk of 300 ports crosses many
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen()
            taken.append(s)
        held = {s.getsockname()[1] for s in taken}
        handed = {process.free_port() for _ in range(300)}
        assert len(held) > 1000
        assert any(min(handed) < p < max(handed) for p in held)
        assert handed.isdisjoint(held)
    finally:
        for s in taken:
            s.close()
