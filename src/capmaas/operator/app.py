"""The composition root: ``capmaas run`` builds the runtime, registers the handlers and runs kopf beside the
leader election.

What each part is, and where:

- :mod:`~capmaas.operator.runtime`: the caches, clients, reconcilers and per-object loops, built from the
  config (:func:`~capmaas.operator.runtime.build_runtime`);
- :mod:`~capmaas.operator.fencing`: the clients' leader fence (no write unless this process holds the Lease);
- :mod:`~capmaas.operator.kopfsettings`: kopf's settings and login;
- :mod:`~capmaas.operator.handlers`: the watch handlers, which wake what :mod:`~capmaas.operator.routing`'s
  table names;
- :mod:`~capmaas.operator.templates`, :mod:`~capmaas.operator.ipam`: the other controllers' handlers;
- :mod:`~capmaas.operator.discovery`: the resources kopf's discovery missed (a CRD installed after the
  operator started), re-read until resolved.

Handlers are registered on a fresh ``kopf.OperatorRegistry`` built from the config (namespace and watch
filter are known only then), never at import time: another controller joins by one more call in
:func:`register`.
"""

from __future__ import annotations

import asyncio
import contextlib

import kopf

from capmaas.config import OperatorConfig
from capmaas.operator import apiserver, discovery, handlers, kopfsettings
from capmaas.operator.fencing import FencedKubeHttp, always
from capmaas.operator.ipam import register as register_ipam
from capmaas.operator.kubehttp import KubeHttp, load_configuration
from capmaas.operator.leader import (
    LeaseSettings,
    LeaseThread,
    default_identity,
    default_lease_name,
    default_namespace,
)
from capmaas.operator.remediation import register as register_remediation
from capmaas.operator.runtime import Runtime, build_runtime, default_credentials
from capmaas.operator.templates import register as register_templates

__all__ = ["LeadershipLost", "default_credentials", "register", "run_operator"]

KUBE_CONNECTIONS = 16  # Kubernetes writes and Secret reads in flight (status/spec patches, bootstrap data)


class LeadershipLost(Exception):
    """The Lease was not renewed in time: every loop has been stopped; the process must exit."""


def register(registry: kopf.OperatorRegistry, rt: Runtime, *, api: apiserver.Apiserver | None = None) -> None:
    """Attach every controller's handlers to ``registry`` (kopf logs in as ``api`` says; without one, through
    the ``kubernetes`` package)."""
    kopfsettings.register(registry, rt.config, login=api.login if api is not None else None)
    handlers.register(registry, rt)
    # MaasMachineTemplate status (capacity counted in MAAS) and the MachineDeployment Warnings.
    register_templates(registry, rt, default_credentials(rt.config), lambda: rt.machines.active)
    selector = kopfsettings.label_selector(rt.config.kube.watch_filter)
    if rt.ipam is not None:
        register_ipam(registry, rt.ipam, wake_machine=rt.machines.wake, label_selector=selector)
    register_remediation(
        registry, rt, default_credentials=default_credentials(rt.config), label_selector=selector
    )


def lease_settings(config: OperatorConfig) -> LeaseSettings:
    le = config.leader_election
    return LeaseSettings(
        namespace=le.namespace or default_namespace(config.kube.namespace),
        name=le.lease_name or default_lease_name(config.kube.namespace, config.kube.watch_filter),
        identity=le.identity or default_identity(),
        lease_duration=le.lease_duration,
        renew_deadline=le.renew_deadline,
        retry_period=le.retry_period,
    )


async def run_operator(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """Run until stopped (SIGINT/SIGTERM, or ``stop_flag``); raise :class:`LeadershipLost` if the Lease is
    lost (every loop has stopped by then).

    With leader election, kopf runs from the start in every process (the standbys' watch caches stay warm),
    but the per-object loops start only once the Lease is held, and every MAAS and Kubernetes write is fenced
    by it (see :mod:`capmaas.operator.leader`)."""
    api = apiserver.load()
    kube_cfg = api.target() if api is not None else load_configuration()
    elector: LeaseThread | None = None
    if config.leader_election.enabled:
        # On a thread of its own: renewals never wait behind reconciles on this loop (see leader.py).
        elector = LeaseThread(lambda: KubeHttp(kube_cfg, connections=2, timeout=5.0), lease_settings(config))
    fence = elector.is_leader if elector else always
    http = FencedKubeHttp(
        kube_cfg, fence=fence, connections=KUBE_CONNECTIONS, field_validation=config.kube.field_validation
    )
    rt = build_runtime(config, http, fence=fence, active=elector is None)
    if elector is not None:
        rt.release = elector.release
    registry = kopf.OperatorRegistry()
    register(registry, rt, api=api)
    # kopf can miss a CRD installed after it started (its discovery read came too early): re-read.
    insights = discovery.register(registry)
    rt.metrics.serve(config.server.metrics_bind_address, config.server.metrics_port)
    liveness = (
        f"http://{config.server.bind_address}:{config.server.health_port}/healthz"
        if config.server.health_port
        else None
    )
    namespaces = [config.kube.namespace] if config.kube.namespace else []
    operator = kopf.operator(
        registry=registry,
        insights=insights,
        standalone=True,  # kopf's peering is not a lock: the Lease is
        liveness_endpoint=liveness,
        clusterwide=not namespaces,
        namespaces=namespaces,
        # Only a flag someone sets: kopf waits on it in a task of its own that it does not cancel on a signal,
        # and then waits five seconds for that "hung" task at every stop.
        stop_flag=stop_flag,
    )
    if elector is None:
        await operator
        return
    kopf_task = asyncio.create_task(operator, name="kopf")
    lease_task = asyncio.create_task(elector.run(rt.lead), name="leader election")
    try:
        await asyncio.wait({kopf_task, lease_task}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        lease_task.cancel()
        kopf_task.cancel()
        raise
    if not kopf_task.done():
        # Lost (or an unexpected error in the election, which ends the process the same way): every
        # request is fenced already; the loops are cancelled and the caller ends the process at once. Nothing
        # here waits for kopf: its shutdown can take a minute on a loaded machine, and writes nothing.
        rt.cancel()
        if not lease_task.cancelled() and (error := lease_task.exception()) is not None:
            raise LeadershipLost(f"leader election failed: {error!r}") from error
        raise LeadershipLost(f"lost the Lease {elector.settings.namespace}/{elector.settings.name}")
    # kopf stopped (a signal or the caller): its cleanup stopped every loop and gave the Lease up.
    lease_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await lease_task
    await elector.release()
    await elector.aclose()
    await kopf_task
