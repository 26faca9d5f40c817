"""Child-process plumbing for the dev control plane: free ports, process groups, teardown on any exit.

Why each piece exists:
- every component runs in its own session/process group, so stopping it also stops anything it forked, and a
  Ctrl-C in the terminal is not delivered to it behind our back (we stop it in order instead);
- in-process (test) instances get ``PR_SET_PDEATHSIG=SIGKILL``, so even a ``kill -9`` of pytest cannot leave
  an apiserver running; detached (``capmaas dev-cluster up``) instances do not, by design;
- an ``atexit`` hook and SIGTERM/SIGHUP handlers stop whatever is still registered when the interpreter leaves
  normally, on an uncaught exception, or on a polite kill.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1
_lock = threading.Lock()
_handed_out: set[int] = set()
_cleanups: dict[int, Callable[[], None]] = {}
_hooks: list[bool] = []  # non-empty once the atexit/signal hooks are installed

#: The Go runtime's garbage collector for the dev cluster's Go processes (etcd, the Kubernetes components,
#: the CAPI manager). With Go's default (GOGC=100) a test's apiserver spends a large share of its CPU
#: collecting garbage (docs/benchmarks/test-durations.md, "apiserver CPU"); letting the heap grow to five
#: times its live size before a collection runs a quarter as many collections. GOMEMLIMIT is the soft cap that
#: makes the collector run sooner if a heap ever gets near it, so no process grows without bound. Only the
#: collector's pacing changes, not what the programs do; a value already in the environment wins.
GO_GC_ENV: Mapping[str, str] = {"GOGC": "400", "GOMEMLIMIT": "2GiB"}

#: One Go scheduler thread (P) for the dev cluster's helpers that never need two cores at once: etcd (one
#: member, no fsync, small requests) and kube-controller-manager (a client). With a P per core an idle Go
#: process keeps waking a second thread to look for work; one P cuts etcd's CPU by a quarter under a request
#: load and its idle CPU by a fifth (docs/benchmarks/test-durations.md, "Idle control planes"). Not for the
#: apiserver: there a second P pays for itself under load. A value already in the environment wins.
ONE_P_ENV: Mapping[str, str] = {"GOMAXPROCS": "1"}


def free_port() -> int:
    """A loopback TCP port nobody listens on now and no live process of ours has handed out.

    ``bind(0)``-then-close is not enough on a machine that runs several test processes at once: the port it
    returns comes from the kernel's ephemeral range, the same range every outgoing connection and every other
    ``bind(0)`` takes ports from, so between the hand-out and its user's bind another process may take it (CI
    saw an operator exit with "address already in use"). So the port comes from below the ephemeral range
    (:func:`port_range`), where the kernel never picks, and is claimed across processes with a one-byte record
    lock at offset ``port`` of one shared lock file (:data:`PORT_CLAIMS`): the lock is held for the life of
    the process that claimed it and dropped by the kernel when that process ends, however it ends. A bind test
    skips ports someone (of ours or not) listens on.
    """
    with _lock:
        claims = _claims_fd()
        ports = port_range()
        start = (os.getpid() * 7919) % len(ports)  # each process starts its walk elsewhere
        for i in range(len(ports)):
            port = ports[(start + i) % len(ports)]
            if port in _handed_out:
                continue
            try:
                fcntl.lockf(claims, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError:  # a live process of ours holds it
                continue
            _handed_out.add(port)  # held from here on, used or not: our own record locks never conflict
            if _bindable(port):
                return port
    raise RuntimeError(f"no free loopback port in {port_range()}")


#: The lock file of :func:`free_port`'s claims, one per user (record locks do not cross users' files).
PORT_CLAIMS = Path(tempfile.gettempdir()) / f"capmaas-ports-{os.getuid()}.lock"
_claims: list[int] = []  # the one descriptor of PORT_CLAIMS: closing any other would drop every claim


def _claims_fd() -> int:
    if not _claims:
        _claims.append(os.open(PORT_CLAIMS, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    return _claims[0]


def port_range() -> range:
    """The ports :func:`free_port` hands out: the 16,384 below the kernel's ephemeral range
    (``net.ipv4.ip_local_port_range``), never under 1024."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    low = max(low, 2048)
    return range(max(1024, low - 16384), low)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def go_env(*, one_p: bool = False) -> dict[str, str]:
    """``os.environ`` with :data:`GO_GC_ENV` (and, with ``one_p``, :data:`ONE_P_ENV`) filled in where the
    environment does not set it."""
    return {**GO_GC_ENV, **(ONE_P_ENV if one_p else {}), **os.environ}


def spawn(
    args: Sequence[str], log: Path, *, detach: bool, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new session with stdout+stderr to ``log`` and stdin from /dev/null; ``env`` None
    means this process's environment.

    PDEATHSIG fires when the *thread* that forked exits, so it is set only for children of the main thread.
    """
    die_with_parent = not detach and threading.current_thread() is threading.main_thread()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else dict(env),
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509
        )


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an unreaped zombie has finished all the same)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    # The state letter follows the ")" that closes the command name.
    return stat.rsplit(")", 1)[-1].split()[0] not in {"Z", "X"}


def pid_cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` ([] when it is gone), used to refuse to kill a recycled pid."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def stop_group(pid: int, *, popen: subprocess.Popen[bytes] | None = None, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``, wait up to ``grace`` seconds, then SIGKILL it.

    ``popen`` (when this process started it) is waited on so no zombie remains.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if popen is not None:
                popen.poll()  # reaps the leader, so it does not linger as a zombie
            leader_done = popen.returncode is not None if popen is not None else not pid_alive(pid)
            if leader_done and not _group_alive(pid):
                return
            time.sleep(0.05)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    # killpg(…, 0) succeeds for zombies too; look for any live member.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
                if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
                    return True
    return False


def register_cleanup(key: int, cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` at interpreter exit or on SIGTERM/SIGHUP, unless unregistered first."""
    with _lock:
        _cleanups[key] = cleanup
        if _hooks:
            return
        _hooks.append(True)
    atexit.register(run_cleanups)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _on_signal)


def unregister_cleanup(key: int) -> None:
    with _lock:
        _cleanups.pop(key, None)


def run_cleanups() -> None:
    """Run every registered cleanup once (newest first); errors are swallowed so the rest still run."""
    while True:
        with _lock:
            if not _cleanups:
                return
            key = next(reversed(_cleanups))
            cleanup = _cleanups.pop(key)
        with contextlib.suppress(Exception):
            cleanup()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Stop the control planes, then die of the same signal as we would have without the handler."""
    run_cleanups()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
