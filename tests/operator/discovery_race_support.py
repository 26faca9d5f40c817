"""kopf's discovery races with Cluster API's CRDs installed after the operator started, counted (not a test:
each round is a race, so it is run by hand, and its figures go to the commit that changes the outcome).

    PYTHONPATH=src:tools/src .venv/bin/python tests/operator/discovery_race_support.py ROUNDS [fixed]

Each round starts a fresh apiserver and runs kopf in this process with capmaas's shape of handlers on the
CAPI and IPAM kinds (an index and an event handler each), its CRD watch on as in production; once kopf has
read discovery, the CAPI CRDs are applied (all at once, as clusterctl does), then an IPAddressClaim. A round
reports whether kopf resolved ``ipaddresses``, whether any of kopf's revisions dropped a resource an earlier
one had added (a stale answer: see :mod:`capmaas.operator.discovery`), which of kopf's index-readiness toggles
stayed off, and whether the claim's event handler ran within 30 s. ``fixed`` runs kopf as ``capmaas run``
does (:func:`capmaas.operator.discovery.register`).

kopf's ``revise_resources`` and ``spawn_missing_watchers`` are wrapped to observe them (nothing else is).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import kopf
from kopf._cogs.structs import references
from kopf._core.reactor import observation, orchestration

from capmaas.operator import apiserver, discovery
from capmaas_dev.devcluster import ControlPlane, apply_capi_crds, run_kubectl

GROUPS = ("cluster.x-k8s.io", "ipam.cluster.x-k8s.io")
KINDS = (
    ("cluster.x-k8s.io", None, ("clusters", "machines", "machinedeployments")),
    ("ipam.cluster.x-k8s.io", "v1beta2", ("ipaddresses", "ipaddressclaims")),
)
CLAIM = {
    "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
    "kind": "IPAddressClaim",
    "metadata": {"name": "c", "namespace": "default"},
    "spec": {"poolRef": {"apiGroup": "x.io", "kind": "P", "name": "p"}},
}

drops: list[tuple[str | None, list[str]]] = []
ensembles: list[orchestration.Ensemble] = []
_revise = observation.revise_resources
_spawn = orchestration.spawn_missing_watchers


def _ours(insights: references.Insights) -> set[references.Resource]:
    return {r for r in insights.watched_resources if r.group in GROUPS}


def revise_resources(**kwargs: Any) -> None:
    before = _ours(kwargs["insights"])
    _revise(**kwargs)
    dropped = before - _ours(kwargs["insights"])
    if dropped:
        drops.append((kwargs["group"], sorted(map(repr, dropped))))


async def spawn_missing_watchers(**kwargs: Any) -> None:
    ensembles.append(kwargs["ensemble"])
    await _spawn(**kwargs)


def registry(api: apiserver.Apiserver, claimed: asyncio.Event) -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)
    def log_in(**_: Any) -> kopf.ConnectionInfo:
        return api.login()

    for group, version, plurals in KINDS:
        for plural in plurals:

            @kopf.index(group=group, version=version, plural=plural, registry=reg, id=f"index-{plural}")
            async def index(**_: Any) -> None:
                return None

            @kopf.on.event(group=group, version=version, plural=plural, registry=reg, id=f"event-{plural}")
            async def event(resource: references.Resource, **_: Any) -> None:
                if resource.plural == "ipaddressclaims":
                    claimed.set()

    return reg


async def round_(number: int, insights_for: Callable[[kopf.OperatorRegistry], references.Insights]) -> str:
    drops.clear()
    ensembles.clear()
    cp = await asyncio.to_thread(ControlPlane.start, controller_manager=False)
    try:
        api = apiserver.load({"KUBECONFIG": str(cp.kubeconfig)})
        assert api is not None
        claimed = asyncio.Event()
        reg = registry(api, claimed)
        insights = insights_for(reg)
        stop = asyncio.Event()
        kopf_task = asyncio.create_task(
            kopf.operator(registry=reg, insights=insights, standalone=True, clusterwide=True, stop_flag=stop)
        )
        await insights.ready_resources.wait()
        await asyncio.to_thread(apply_capi_crds, cp.kubeconfig)
        await asyncio.to_thread(run_kubectl, cp.kubeconfig, "apply", "-f", "-", input=json.dumps(CLAIM))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(claimed.wait(), 30)
        off = sorted({str(t.name) for e in ensembles[-1:] for t in e.operator_indexed if t.is_off()})
        resolved = {r.plural for r in _ours(insights)}
        stop.set()
        await asyncio.wait_for(kopf_task, 60)
        return (
            f"round {number}: ipaddresses resolved={'ipaddresses' in resolved} "
            f"claim handler ran={claimed.is_set()} index toggles off={off} drops={drops}"
        )
    finally:
        await asyncio.to_thread(cp.stop)


async def main(rounds: int, fixed: bool) -> None:
    observation.revise_resources = revise_resources
    orchestration.spawn_missing_watchers = spawn_missing_watchers
    insights_for = discovery.register if fixed else (lambda _: references.Insights())
    for number in range(rounds):
        print(await round_(number, insights_for), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger(discovery.__name__).setLevel(logging.INFO)
    asyncio.run(main(int(sys.argv[1]), fixed=sys.argv[2:] == ["fixed"]))
