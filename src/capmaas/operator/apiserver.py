"""Where the operator's own apiserver is and how to log in to it, without the ``kubernetes`` package.

The ``kubernetes`` package was imported only to read these settings, and it is the largest import of the
operator (about a third of its start-up, and memory it never gives back: docs/scaling.md, "Start-up and
memory"). The common cases are read here instead: the in-cluster service account (what the chart runs
with), or a kubeconfig (``KUBECONFIG``, several files merged first-wins as client-go does, else
``~/.kube/config``) whose current context's user has a token, a token file, a client certificate or a
username and password. A kubeconfig that needs more (an ``exec`` or ``auth-provider`` user, a proxy) is left
to the ``kubernetes`` package, imported only then (:func:`load` answers None).

This is the operator's own configuration, set by whoever deploys it; a *tenant's* kubeconfig is read by the
strict :mod:`capmaas.operator.kubeconfig` instead, which accepts no files and no plugins.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import yaml

from capmaas.operator.kubehttp import Target

__all__ = ["Apiserver", "ApiserverConfigError", "load"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Seconds a service-account token read from its file is used before the file is read again (the kubelet
#: rotates it; client-go re-reads it every minute too).
TOKEN_REFRESH = 60.0
#: User fields only the ``kubernetes`` package handles (plugins); cluster fields likewise.
PLUGIN_USER_FIELDS = frozenset({"exec", "auth-provider"})
PLUGIN_CLUSTER_FIELDS = frozenset({"proxy-url"})


class ApiserverConfigError(ValueError):
    """Neither a service account nor a usable kubeconfig: says which file or entry is wrong."""


@dataclasses.dataclass
class Apiserver:
    """The apiserver's address, TLS and credentials; :meth:`login` is kopf's, :meth:`target` ours."""

    server: str
    ca_path: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    token: str | None = None
    #: A token read from this file (service account, ``tokenFile``), re-read every :data:`TOKEN_REFRESH`.
    token_file: str | None = None
    certificate_path: str | None = None
    certificate_data: str | None = None
    private_key_path: str | None = None
    private_key_data: str | None = None
    username: str | None = None
    password: str | None = None
    namespace: str | None = None
    _read_at: float = dataclasses.field(default=-TOKEN_REFRESH, repr=False)

    def current_token(self) -> str | None:
        if self.token_file and time.monotonic() - self._read_at >= TOKEN_REFRESH:
            self.token = Path(self.token_file).read_text(encoding="utf-8").strip() or None
            self._read_at = time.monotonic()
        return self.token

    def login(self) -> kopf.ConnectionInfo:
        """kopf's credentials (it logs in again with this after a 401: a rotated token is read then)."""
        self._read_at = -TOKEN_REFRESH
        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=self.ca_path,
            ca_data=self.ca_data,
            insecure=self.insecure,
            token=self.current_token(),
            certificate_path=self.certificate_path,
            certificate_data=self.certificate_data,
            private_key_path=self.private_key_path,
            private_key_data=self.private_key_data,
            username=self.username,
            password=self.password,
            default_namespace=self.namespace,
        )

    def target(self) -> Target:
        """The :class:`~capmaas.operator.kubehttp.Target` of the operator's own clients."""
        info = self.login()
        tls = info.as_ssl_context() if self.server.startswith("https") else False

        def authorization() -> str | None:
            if self.username and self.password:
                return info.as_http_headers().get("Authorization")
            token = self.current_token()
            return f"Bearer {token}" if token else None

        return Target(self.server.rstrip("/"), tls, authorization)


def load(env: Mapping[str, str] | None = None, service_account: Path = SERVICE_ACCOUNT) -> Apiserver | None:
    """The in-cluster service account, else the kubeconfig; None when the kubeconfig needs the ``kubernetes``
    package (see the module docstring)."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if host and port and (service_account / "token").exists():
        namespace = service_account / "namespace"
        ca = service_account / "ca.crt"
        return Apiserver(
            server=f"https://{f'[{host}]' if ':' in host else host}:{port}",
            ca_path=str(ca) if ca.exists() else None,
            token_file=str(service_account / "token"),
            namespace=namespace.read_text(encoding="utf-8").strip() if namespace.exists() else None,
        )
    return from_kubeconfig(env)


def from_kubeconfig(env: Mapping[str, str]) -> Apiserver | None:
    """The current context of the kubeconfig files (``KUBECONFIG``, else ``~/.kube/config``)."""
    paths = [Path(p).expanduser() for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p.strip()]
    if not paths:
        paths = [Path("~/.kube/config").expanduser()]
    current: str | None = None
    inner = {"contexts": "context", "clusters": "cluster", "users": "user"}
    entries: dict[str, dict[str, tuple[Path, Mapping[str, Any]]]] = {section: {} for section in inner}
    for path in paths:
        if not path.exists():
            if len(paths) == 1:
                raise ApiserverConfigError(f"no service account and no kubeconfig at {path}")
            continue
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        current = current or doc.get("current-context")
        for section, key in inner.items():
            for item in doc.get(section) or ():
                entries[section].setdefault(str(item.get("name")), (path.parent, item.get(key) or {}))
    if not current:
        raise ApiserverConfigError(f"no current-context in {os.pathsep.join(map(str, paths))}")
    try:
        _, context = entries["contexts"][current]
        cluster_dir, cluster = entries["clusters"][str(context.get("cluster"))]
        user_dir, user = entries["users"][str(context.get("user"))]
    except KeyError as exc:
        raise ApiserverConfigError(f"kubeconfig context {current!r} names no {exc} entry") from None
    if PLUGIN_USER_FIELDS & user.keys() or PLUGIN_CLUSTER_FIELDS & cluster.keys():
        return None

    def file(base: Path, value: Any) -> str | None:
        return str(base / Path(value).expanduser()) if value else None

    return Apiserver(
        server=str(cluster.get("server") or ""),
        ca_path=file(cluster_dir, cluster.get("certificate-authority")),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=user.get("token"),
        token_file=file(user_dir, user.get("tokenFile")),
        certificate_path=file(user_dir, user.get("client-certificate")),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=file(user_dir, user.get("client-key")),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        namespace=context.get("namespace"),
    )
