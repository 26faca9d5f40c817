"""capmaas.operator.discovery: which selectors are unresolved, how a discovery answer is handed to kopf, the
bursts of re-scans, and what of kopf's internals it relies on. The apiserver's side (a CRD discovery lists
after kopf's last look) runs against a real apiserver in tests/operator/test_ippool_operator.py."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Collection
from typing import cast

import kopf
import pytest
from kopf._cogs.clients import scanning
from kopf._cogs.structs import references
from kopf._core.reactor import observation, running

from capmaas.operator import discovery

GROUP = "ipam.cluster.x-k8s.io"


def resource(plural: str, kind: str, *, group: str = GROUP, version: str = "v1beta2") -> references.Resource:
    return references.Resource(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        singular=kind.lower(),
        namespaced=True,
        preferred=True,
        verbs=frozenset({"list", "watch", "patch", "get", "create", "delete", "update"}),
    )


ADDRESSES = resource("ipaddresses", "IPAddress")
CLAIMS = resource("ipaddressclaims", "IPAddressClaim")
POOLS = resource("maasippools", "MaasIPPool", group="infrastructure.cluster.x-k8s.io", version="v1beta1")


def registry() -> kopf.OperatorRegistry:
    """The IPAM shape of capmaas's registry: an index and an event handler per CAPI IPAM kind, and an event
    handler on capmaas's own pools."""
    reg = kopf.OperatorRegistry()
    for plural in ("ipaddresses", "ipaddressclaims"):

        @kopf.index(group=GROUP, version="v1beta2", plural=plural, registry=reg, id=f"index-{plural}")
        async def index(**_: object) -> None:
            return None

        @kopf.on.event(group=GROUP, version="v1beta2", plural=plural, registry=reg, id=f"event-{plural}")
        async def event(**_: object) -> None:
            return None

    @kopf.on.event(group=POOLS.group, version="v1beta1", plural="maasippools", registry=reg)
    async def pools(**_: object) -> None:
        return None

    return reg


async def served(
    late: discovery.LateResources, reg: kopf.OperatorRegistry, found: Collection[references.Resource]
) -> None:
    """kopf's own revision from discovery's answer ``found`` (as its first scan)."""
    async with late.insights.revised:
        observation.revise_resources(resources=found, insights=late.insights, registry=reg, group=None)


def test_kopf_has_what_late_resources_relies_on() -> None:
    """The private names :mod:`capmaas.operator.discovery` uses, with the parameters it passes: a kopf upgrade
    that changes them fails here, not silently in production."""
    assert set(inspect.signature(scanning.scan_resources).parameters) == {"settings", "logger", "groups"}
    assert set(inspect.signature(observation.revise_resources).parameters) == {
        "group",
        "insights",
        "registry",
        "resources",
    }
    fields = {f.name for f in dataclasses.fields(references.Insights)}
    assert {"webhook_resources", "indexed_resources", "watched_resources", "backbone", "revised"} <= fields
    assert {"ready_resources"} <= fields
    assert "fill" in dir(references.Backbone)
    reg = kopf.OperatorRegistry()
    for name in ("_webhooks", "_indexing", "_watching", "_spawning", "_changing"):
        assert isinstance(getattr(reg, name).get_all_selectors(), frozenset)
    assert "insights" in inspect.signature(kopf.operator).parameters
    assert "insights" in inspect.signature(running.spawn_tasks).parameters
    original = observation.process_discovered_resource_event
    original = getattr(original, "_capmaas_original", original)
    assert {"raw_event", "settings", "registry", "insights"} <= set(inspect.signature(original).parameters)
    # kopf's observer looks the function up when it starts (so install_in_kopf must come first), by name.
    assert "functools.partial(process_discovered_resource_event," in inspect.getsource(
        observation.resource_observer
    )
    # The race itself: kopf re-reads a group's discovery once per CRD event, and the observer's first scan
    # happens once. Should kopf retry by itself one day, this module may go.
    source = inspect.getsource(original)
    assert source.count("scan_resources(") == 1
    assert "while" not in source
    assert "sleep" not in source


async def test_unresolved_are_the_selectors_kopf_serves_nothing_for() -> None:
    reg = registry()
    late = discovery.LateResources(reg, references.Insights(), kopf.OperatorSettings())
    assert {(s.group, s.plural) for s in late.unresolved()} == {
        (GROUP, "ipaddresses"),
        (GROUP, "ipaddressclaims"),
        (POOLS.group, "maasippools"),
    }
    await served(late, reg, {POOLS, CLAIMS})
    assert {s.plural for s in late.unresolved()} == {"ipaddresses"}  # as the CI failure's operator log
    await served(late, reg, {POOLS, CLAIMS, ADDRESSES})
    assert late.unresolved() == frozenset()


async def test_an_answer_that_resolves_a_kind_is_handed_to_kopf_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reg = registry()
    insights = references.Insights()
    late = discovery.LateResources(reg, insights, kopf.OperatorSettings())
    await served(late, reg, {POOLS, CLAIMS})
    caplog.set_level(logging.INFO, logger=discovery.__name__)

    async def notified() -> None:
        async with insights.revised:
            await insights.revised.wait()

    waiter = asyncio.create_task(notified())
    await asyncio.sleep(0)
    added = await late.resolve({CLAIMS, ADDRESSES}, {GROUP})
    assert added == {ADDRESSES}
    assert insights.watched_resources == {POOLS, CLAIMS, ADDRESSES}
    assert insights.indexed_resources == {CLAIMS, ADDRESSES}
    await asyncio.wait_for(waiter, 5)  # kopf's orchestrator is woken the same way (its watchers start)
    ours = [r for r in caplog.records if r.name == discovery.__name__]
    assert [(r.levelno, r.getMessage().split(" by ")[0]) for r in ours] == [
        (logging.INFO, f"Resolved ipaddresses.v1beta2.{GROUP}")
    ]
    assert await late.resolve({CLAIMS, ADDRESSES}, {GROUP}) == frozenset()  # again: nothing new, no log
    assert len([r for r in caplog.records if r.name == discovery.__name__]) == 1


async def test_an_answer_that_resolves_nothing_leaves_kopf_alone() -> None:
    reg = registry()
    insights = references.Insights()
    late = discovery.LateResources(reg, insights, kopf.OperatorSettings())
    await served(late, reg, {POOLS, CLAIMS})
    assert await late.resolve({CLAIMS}, {GROUP}) == frozenset()
    assert insights.watched_resources == {POOLS, CLAIMS}


async def test_an_answer_older_than_kopfs_view_of_the_group_is_not_applied() -> None:
    """A re-scan read before kopf revised the group from a newer answer: applying it would drop a kind kopf
    serves (its watcher would stop). It is skipped; the next re-scan reads again."""
    reg = registry()
    insights = references.Insights()
    late = discovery.LateResources(reg, insights, kopf.OperatorSettings())
    await served(late, reg, {POOLS, CLAIMS})
    stale = {ADDRESSES}  # lacks the claims kopf serves
    assert await late.resolve(stale, {GROUP}) == frozenset()
    assert insights.watched_resources == {POOLS, CLAIMS}


class Counted(discovery.LateResources):
    """Re-scans counted instead of read; discovery lists ``addresses_after`` re-scans' worth later."""

    def __init__(self, reg: kopf.OperatorRegistry, *, addresses_after: int | None, delays: tuple[float, ...]):
        super().__init__(reg, references.Insights(), kopf.OperatorSettings(), delays=delays)
        self.reg = reg
        self.addresses_after = addresses_after
        self.scans = 0

    async def rescan(self) -> frozenset[references.Resource]:
        self.scans += 1
        if self.addresses_after is not None and self.scans >= self.addresses_after:
            return await self.resolve({CLAIMS, ADDRESSES}, {GROUP})
        return frozenset()


async def kopf_revises(late: Counted, found: Collection[references.Resource]) -> None:
    async with late.insights.revised:
        observation.revise_resources(resources=found, insights=late.insights, registry=late.reg, group=None)
        late.insights.revised.notify_all()


async def settle(late: Counted, scans: int) -> None:
    for _ in range(2000):
        if late.scans >= scans:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.1)  # and no more than that


async def test_a_burst_stops_once_resolved() -> None:
    late = Counted(registry(), addresses_after=3, delays=(0.01,) * 10)
    task = asyncio.create_task(late.run())
    try:
        await kopf_revises(late, {POOLS, CLAIMS})
        late.insights.ready_resources.set()
        await settle(late, 3)
        assert late.scans == 3
        assert late.unresolved() == frozenset()
        await kopf_revises(late, {POOLS, CLAIMS, ADDRESSES})  # a later revision: nothing to re-scan
        await asyncio.sleep(0.1)
        assert late.scans == 3
    finally:
        task.cancel()


async def test_a_kind_that_never_comes_costs_one_bounded_burst_per_kopf_revision() -> None:
    late = Counted(registry(), addresses_after=None, delays=(0.01,) * 4)
    task = asyncio.create_task(late.run())
    try:
        await kopf_revises(late, {POOLS, CLAIMS})
        late.insights.ready_resources.set()
        await settle(late, 4)
        assert late.scans == 4  # the burst is over: no polling for ever
        await kopf_revises(late, {POOLS, CLAIMS})  # a CRD event's re-scan by kopf: one more burst
        await settle(late, 8)
        assert late.scans == 8
    finally:
        task.cancel()


async def test_nothing_is_re_scanned_while_everything_is_resolved() -> None:
    late = Counted(registry(), addresses_after=None, delays=(0.01,) * 4)
    task = asyncio.create_task(late.run())
    try:
        await kopf_revises(late, {POOLS, CLAIMS, ADDRESSES})
        late.insights.ready_resources.set()
        await kopf_revises(late, {POOLS, CLAIMS, ADDRESSES})
        await asyncio.sleep(0.2)
        assert late.scans == 0
    finally:
        task.cancel()


async def test_register_runs_the_re_scans_from_kopfs_startup_to_its_cleanup() -> None:
    reg = kopf.OperatorRegistry()
    insights = discovery.register(reg)
    assert isinstance(insights, references.Insights)
    handlers = {(str(h.activity), h.id.rsplit(".", 1)[-1]) for h in reg._activities.get_all_handlers()}
    assert handlers == {("startup", "follow_late_resources"), ("cleanup", "stop_following_late_resources")}


def crd_event(group: str, type: str | None = "ADDED") -> dict[str, object]:
    return {"type": type, "object": {"spec": {"group": group}}}


async def test_kopfs_re_scans_take_turns_per_group_and_one_answers_those_that_waited() -> None:
    """Three CRD events of a group at once (a group's CRDs applied together): kopf would read discovery three
    times at once and revise with whichever answer came last, possibly the oldest. Serialised, the first
    re-scans, the next starts after it and answers both waiting events; another group is not held."""
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    calls: list[str] = []
    release = asyncio.Event()

    async def kopfs(*, raw_event: dict[str, object], **_: object) -> None:
        group = str(raw_event["object"]["spec"]["group"])  # type: ignore[index]
        calls.append(group)
        running[group] = running.get(group, 0) + 1
        most[group] = max(most.get(group, 0), running[group])
        if group == GROUP:
            await release.wait()
        running[group] -= 1

    tasks = [asyncio.create_task(discovery._serialised(kopfs, raw_event=crd_event(GROUP))) for _ in range(3)]
    await asyncio.sleep(0.05)
    other = asyncio.create_task(discovery._serialised(kopfs, raw_event=crd_event("cluster.x-k8s.io")))
    await asyncio.wait_for(other, 5)  # not held behind the IPAM group
    assert calls == [GROUP, "cluster.x-k8s.io"]
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert calls == [GROUP, "cluster.x-k8s.io", GROUP]  # the third event was answered by the second re-scan
    assert most[GROUP] == 1


async def test_the_initial_listing_is_passed_to_kopf_as_it_is() -> None:
    seen: list[object] = []

    async def kopfs(*, raw_event: dict[str, object], **_: object) -> None:
        seen.append(raw_event["type"])

    await discovery._serialised(kopfs, raw_event=crd_event(GROUP, None))
    assert seen == [None]


def test_install_in_kopf_wraps_kopfs_re_scan_once(monkeypatch: pytest.MonkeyPatch) -> None:
    original = observation.process_discovered_resource_event
    original = getattr(original, "_capmaas_original", original)
    monkeypatch.setattr(observation, "process_discovered_resource_event", original)
    assert discovery.install_in_kopf()
    installed = observation.process_discovered_resource_event
    assert installed is not original
    assert installed._capmaas_original is original  # type: ignore[attr-defined]
    assert discovery.install_in_kopf()  # twice: still installed, not wrapped again
    assert observation.process_discovered_resource_event is installed


def test_a_kopf_whose_re_scan_differs_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    async def other(*, raw_event: object) -> None:
        return None

    monkeypatch.setattr(observation, "process_discovered_resource_event", other)
    assert not discovery.install_in_kopf()
    assert cast(object, observation.process_discovered_resource_event) is other
