"""A network namespace of the dev cluster's own: the only place its node has a non-loopback address.

The one-node cluster (:mod:`capmaas_dev.devcluster.node`) needs an address that is not loopback (kubelet
refuses one, and Pods reach the node over a bridge). That address, the Service IP the Pods use for the
apiserver, and the Pods' bridge exist only inside a namespace made here (``ip netns add``): it has no route to
anything else, so nothing the cluster does can send a packet off this machine. Processes started while a
thread is :meth:`Netns.entered` run in it; so do sockets that thread opens (namespaces are per thread in
Linux, and a new thread or child process inherits its creator's).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")


class NetnsError(RuntimeError):
    """The namespace could not be made or entered (needs root: CAP_SYS_ADMIN and CAP_NET_ADMIN)."""


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetnsError(f"setns failed: {os.strerror(err)}")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class Netns:
    """A named network namespace (``/run/netns/<name>``): :meth:`create` makes it, :meth:`delete` removes
    it."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def exists(self) -> bool:
        return self.path.exists()

    @classmethod
    def create(cls, name: str, addresses: tuple[str, ...]) -> Netns:
        """Make the namespace with ``lo`` up and ``addresses`` (CIDRs, e.g. ``192.0.2.10/32``) on ``lo``."""
        ns = cls(name)
        if ns.exists():
            raise NetnsError(
                f"network namespace {name} already exists (a stale dev cluster? `ip netns del {name}`)"
            )
        _ip("netns", "add", name)
        try:
            _ip("-n", name, "link", "set", "lo", "up")
            for cidr in addresses:
                _ip("-n", name, "addr", "add", cidr, "dev", "lo")
        except BaseException:
            ns.delete()
            raise
        return ns

    def delete(self) -> None:
        """Remove the namespace (idempotent). Interfaces in it (the Pods' bridge, veth ends) go with it."""
        if self.exists():
            with contextlib.suppress(NetnsError):
                _ip("netns", "delete", self.name)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Move the calling thread into the namespace for the ``with`` block, then back where it was."""
        with open("/proc/thread-self/ns/net", "rb") as home, open(self.path, "rb") as target:
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed to run in the namespace (for a shell: ``nsenter --net=...``, no new mount ns)."""
        return ["nsenter", f"--net={self.path}", "--", *argv]
