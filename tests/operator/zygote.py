"""``capmaas run`` processes forked from one that has already imported the operator (a "zygote").

Why: an operator test starts ``capmaas run`` once or more (the chaos tests 14 times), and every start of a
fresh interpreter paid the imports of kopf, pydantic, the kubernetes client and the reconcilers first: about
1.7 s of CPU each (measured in docs/benchmarks/test-durations.md) on a 2-core box the whole suite shares. A
fork of a process that has done those imports pays none of it. The operator is still a process of its own:
its own pid, environment, arguments, log file (stdout and stderr), signals (SIGTERM, SIGKILL) and exit code,
from ``capmaas.cli.main`` as the console script runs it; only the imports before ``main`` are shared.

The zygote is one per pytest process, started on first use, single-threaded (a fork of a process with other
threads could inherit a lock held by one of them: it refuses to serve if an import started a thread). It
reaps its children and tells each client its child's exit status, so :class:`Child` answers ``poll``,
``wait``, ``returncode`` as ``subprocess.Popen`` does. ``CAPMAAS_TEST_ZYGOTE=0`` starts every operator as a
fresh interpreter instead (``Operator.start`` falls back to that too when the zygote cannot start).

Run as ``python zygote.py SOCKET``: the server. One request per connection, one JSON line
(``argv``, ``env``, ``log``, ``cwd``); the answer is ``pid N`` then, when the child has exited, ``exit CODE``
(negative: killed by that signal, as ``Popen.returncode``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

#: Modules ``capmaas run`` imports before and while it starts; imported once, in the zygote.
PRELOAD = (
    "capmaas.cli",
    "capmaas.operator.main",
    "capmaas.operator.app",
    "capmaas.operator.metrics",
    "capmaas.reconcilers.credentials",
)
#: Environment variables the preloaded modules read at import time (found by reading every module-level
#: ``os.environ``/``os.getenv`` of the modules PRELOAD imports). A child whose environment differs from the
#: zygote's in one of these is refused (the client then starts a fresh interpreter) ...
IMPORT_TIME_ENV = (
    "AIOHTTP_NO_EXTENSIONS",
    "AIOHTTP_NOSENDFILE",
    "FROZENLIST_NO_EXTENSIONS",
    "MULTIDICT_NO_EXTENSIONS",
    "PROPCACHE_NO_EXTENSIONS",
    "YARL_NO_EXTENSIONS",
)


def _reread_import_time_env() -> None:
    """... except ``KUBECONFIG``, which every test sets its own way: the kubernetes client keeps it in a
    module global at import (``KUBE_CONFIG_DEFAULT_LOCATION``); the child evaluates it again, as its import
    would have."""
    import kubernetes.config
    import kubernetes.config.kube_config

    location = os.environ.get("KUBECONFIG", "~/.kube/config")  # kube_config.py's own expression
    kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = location
    kubernetes.config.KUBE_CONFIG_DEFAULT_LOCATION = location


class Child:
    """A forked ``capmaas run``: the part of ``subprocess.Popen`` the harness uses."""

    def __init__(self, conn: socket.socket, pid: int, parent: int) -> None:
        self.parent = parent  # the zygote's pid (a child's command line is the zygote's, not capmaas run's)
        self._conn = conn
        self._buf = b""
        self._lock = threading.Lock()  # wait() in a thread beside poll() in the loop, as Popen allows
        self.pid = pid
        self.returncode: int | None = None

    def _read(self, timeout: float | None) -> None:
        if not self._lock.acquire(blocking=timeout != 0):
            return  # another thread is waiting for the status: as Popen.poll, say "still running"
        try:
            self._read_locked(timeout)
        finally:
            self._lock.release()

    def _read_locked(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return
            data = self._conn.recv(4096)
            if not data:  # the zygote died: the child's status is lost; say so rather than hang
                self._buf += b"exit 255\n"
                break
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        word, _, value = line.decode().partition(" ")
        assert word == "exit", line
        self.returncode = int(value)
        self._conn.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(["capmaas", "run"], timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The client side: starts the server once, forks children through it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._socket = ""
        self._broken = os.environ.get("CAPMAAS_TEST_ZYGOTE", "1") == "0"

    def _ensure(self) -> bool:
        if self._broken:
            return False
        if self._proc is not None and self._proc.poll() is None:
            return True
        tmp = tempfile.mkdtemp(prefix="capmaas-zygote-")
        self._socket = str(Path(tmp) / "sock")
        self._proc = subprocess.Popen(
            [sys.executable, __file__, self._socket], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while not Path(self._socket).exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._broken = True  # e.g. an import started a thread: fresh interpreters from now on
                return False
            time.sleep(0.02)
        return True

    def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> Child | None:
        """``argv`` (``capmaas run ...``) forked from the zygote, or None when there is no zygote."""
        with self._lock:
            if not self._ensure():
                return None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._socket)
        request = {"argv": argv, "env": env, "log": str(log), "cwd": os.getcwd()}
        conn.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            data = conn.recv(4096)
            if not data:
                raise RuntimeError("the zygote closed the connection before forking")
            buf += data
        line, _, rest = buf.partition(b"\n")
        word, _, value = line.decode().partition(" ")
        if word == "refused:":
            conn.close()
            return None
        if word != "pid":
            raise RuntimeError(f"the zygote could not fork: {line.decode()}")
        assert self._proc is not None
        child = Child(conn, int(value), self._proc.pid)
        child._buf = rest
        return child

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)
        if self._socket:
            with contextlib.suppress(OSError):
                os.unlink(self._socket)
                os.rmdir(Path(self._socket).parent)


ZYGOTE = Zygote()
atexit.register(ZYGOTE.close)


# --- the server ------------------------------------------------------------------------------------------


def _child(request: dict[str, Any], close: list[int]) -> None:
    """In the forked child: become ``capmaas run`` with the request's arguments, environment and log."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _reread_import_time_env()
        sys.argv = list(request["argv"])
        from capmaas.cli import main

        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        sys.exit(f"zygote: an import started a thread ({threading.enumerate()}); not forking")
    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the client waits for this name: the server is ready
    clients: dict[int, socket.socket] = {}  # child pid -> its client's connection
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        while clients:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = clients.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()
        if listener in ready:
            conn, _ = listener.accept()
            with conn.makefile("rb") as f:
                line = f.readline()
            request = json.loads(line)
            differs = [k for k in IMPORT_TIME_ENV if request["env"].get(k) != os.environ.get(k)]
            if differs:
                with contextlib.suppress(OSError):
                    conn.sendall(f"refused: {differs} differ from the zygote's, read at import\n".encode())
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                others = [c.fileno() for c in clients.values()]
                _child(request, [listener.fileno(), wake_r, wake_w, conn.fileno(), *others])
            clients[pid] = conn
            conn.sendall(f"pid {pid}\n".encode())


if __name__ == "__main__":
    serve(sys.argv[1])
