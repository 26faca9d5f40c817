"""Resources kopf missed: discovery re-read, with a bounded backoff, while a handler's resource is unresolved.

kopf learns which resources exist from the apiserver's discovery (``/apis/GROUP/VERSION``): once at start,
then once per watch event of a CustomResourceDefinition, for that CRD's group (kopf's
``observation.process_discovered_resource_event``). The apiserver adds a new CRD's resource to discovery
asynchronously, after the CRD is Established, so the CRD's last watch event can come before discovery lists
it. kopf's re-scan then finds nothing new and nothing makes it look again: the resource stays unresolved, its
watcher never starts, and its handlers never run, with no error (only kopf's "Unresolved resources" warning,
which it logs for an absent CRD too). It happens whenever CRDs are installed after the operator started
(Cluster API's IPAM CRDs after capmaas, an upgrade that adds a kind).

:class:`LateResources` follows kopf's revisions of its resources (its first scan, each CRD event's re-scan;
kopf's ``Insights.revised``): after each, while a selector of the registry's handlers is still unresolved, it
re-scans the groups of those selectors after 1, 2, 4, 8, 16 and then 30 s (:data:`DELAYS`), and stops as soon
as they are all resolved or the delays are spent (the next revision starts them again: a CRD that never
comes costs one burst of discovery reads per CRD change in the cluster, not a poll for ever). What a re-scan
resolves is handed to kopf as its own CRD-event path does (``revise_resources``, the backbone, a notified
revision), so kopf's orchestrator starts the watchers; each resource resolved so is logged once at INFO.

kopf's per-event re-scans also race each other: every CRD event is processed by a worker of its own, and
each worker reads discovery and then revises kopf's resources with what it read, so a read that started
earlier but ended later (a group's CRDs applied together) revises with the older answer, and drops a resource
a newer answer had added. kopf then stops that resource's watcher; if the watcher had not finished its first
listing, the readiness toggle it holds for kopf's indices is never dropped (kopf's orchestration drops only
the peering toggles of stopped watchers), and kopf's handlers wait for indices that are never ready (kopf
runs no other handler of an object before every index is ready): every handler of a kind watched from then
on, and of any object kopf starts a worker for meanwhile. The operator silently stops reconciling (the CRDs
resolved again by a later event change nothing). :func:`install_in_kopf` serialises kopf's
re-scans per group (a re-scan starts after the previous one of its group revised; one re-scan answers every
event that came while it waited), and :class:`LateResources` re-scans under the same lock.

kopf is pinned: tests/unit/operator/test_discovery.py fails if the private names used here change.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
from kopf._cogs.clients import scanning
from kopf._cogs.structs import references
from kopf._core.reactor import observation

__all__ = ["DELAYS", "LateResources", "install_in_kopf", "register"]

log = logging.getLogger(__name__)

#: Seconds before each re-scan of a burst (1 s doubling to 30 s; about three minutes in all).
DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0, 30.0)

#: A resource's identity across scans: (group, version, plural).
_Name = tuple[str, str, str]


def _name(resource: references.Resource) -> _Name:
    return resource.group, resource.version, resource.plural


@dataclass
class _Group:
    """One API group's re-scans on one event loop: the lock they take turns on, and how many were asked
    for and answered (a re-scan answers every request made before it started)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    asked: int = 0
    answered: int = 0


_GROUPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, defaultdict[str | None, _Group]] = (
    weakref.WeakKeyDictionary()
)


def _group(group: str | None) -> _Group:
    loop = asyncio.get_running_loop()
    return _GROUPS.setdefault(loop, defaultdict(_Group))[group]


async def _serialised(original: Callable[..., Awaitable[None]], **kwargs: Any) -> None:
    """kopf's ``process_discovered_resource_event`` (``original``), one at a time per API group; skipped when
    a re-scan of the group started after this event came (its answer is as new as this one's would be)."""
    raw_event = kwargs["raw_event"]
    if raw_event["type"] is None:
        await original(**kwargs)  # the initial listing: kopf ignores it
        return
    state = _group(raw_event["object"]["spec"]["group"])
    state.asked += 1
    ticket = state.asked
    async with state.lock:
        if state.answered >= ticket:
            return
        state.answered = state.asked
        await original(**kwargs)


_KOPF_PARAMS = {"raw_event", "settings", "registry", "insights"}


def install_in_kopf() -> bool:
    """Serialise kopf's per-CRD-event discovery re-scans per API group (module docstring); False when kopf's
    function is not as expected (nothing is changed then). Must run before ``kopf.operator`` starts."""
    current = getattr(observation, "process_discovered_resource_event", None)
    if current is None:
        return False
    if getattr(current, "_capmaas_original", None) is not None:
        return True
    params = inspect.signature(current).parameters
    if not set(params) >= _KOPF_PARAMS or not inspect.iscoroutinefunction(current):
        return False

    @functools.wraps(current)
    async def process_discovered_resource_event(**kwargs: Any) -> None:
        await _serialised(current, **kwargs)

    process_discovered_resource_event._capmaas_original = current  # type: ignore[attr-defined]
    observation.process_discovered_resource_event = process_discovered_resource_event
    return True


class LateResources:
    """Re-scans discovery for the registry's unresolved resources after each kopf revision (module docstring).

    ``insights`` must be the one kopf runs with (``kopf.operator(insights=...)``), ``settings`` kopf's."""

    def __init__(
        self,
        registry: kopf.OperatorRegistry,
        insights: references.Insights,
        settings: kopf.OperatorSettings,
        *,
        delays: Sequence[float] = DELAYS,
    ) -> None:
        self.registry = registry
        self.insights = insights
        self.settings = settings
        self.delays = tuple(delays)
        self._revised = asyncio.Event()

    def _purposes(self) -> list[tuple[frozenset[references.Selector], set[references.Resource]]]:
        """Each kind of handler's selectors, with the resources kopf resolved for them (as kopf's
        ``revise_resources`` groups them)."""
        reg = self.registry
        watched = (
            reg._indexing.get_all_selectors()
            | reg._watching.get_all_selectors()
            | reg._spawning.get_all_selectors()
            | reg._changing.get_all_selectors()
        )
        return [
            (reg._webhooks.get_all_selectors(), self.insights.webhook_resources),
            (reg._indexing.get_all_selectors(), self.insights.indexed_resources),
            (watched, self.insights.watched_resources),
        ]

    def unresolved(self) -> frozenset[references.Selector]:
        """The selectors of the registry's handlers that select none of the resources kopf serves."""
        return frozenset(
            selector
            for selectors, resources in self._purposes()
            for selector in selectors
            if not selector.select(resources)
        )

    def _known(self) -> set[references.Resource]:
        return (
            self.insights.webhook_resources
            | self.insights.indexed_resources
            | self.insights.watched_resources
        )

    async def rescan(self) -> frozenset[references.Resource]:
        """Read the discovery of each unresolved selector's group once (taking turns with kopf's re-scans of
        the group), and :meth:`resolve` from it. Answers the resources kopf serves now and did not before."""
        added: frozenset[references.Resource] = frozenset()
        groups = {selector.group for selector in self.unresolved()}
        for group in [None] if None in groups else sorted(g for g in groups if g is not None):
            # Not counted as an answer to kopf's waiting re-scans: this one revises only what it adds.
            async with _group(group).lock:
                found = await scanning.scan_resources(
                    groups=None if group is None else {group}, settings=self.settings, logger=log
                )
                added |= await self.resolve(found, [group])
        return added

    async def resolve(
        self, found: Collection[references.Resource], groups: Collection[str | None]
    ) -> frozenset[references.Resource]:
        """If ``found`` (discovery's answer for ``groups``) resolves any unresolved selector, revise kopf's
        insights from it as kopf's CRD-event path does, and answer what kopf serves now and did not before."""
        if not any(selector.select(found) for selector in self.unresolved()):
            return frozenset()  # nothing new: kopf is not asked to revise (and warn) again
        found_names = {_name(resource) for resource in found}
        async with self.insights.revised:
            before = self._known()
            revised = False
            # One revision per group, as kopf's CRD-event path does (None: every group, as its first scan).
            for group in [None] if None in groups else sorted(g for g in groups if g is not None):
                # A group kopf has since revised from a newer answer (it serves something this answer lacks)
                # is left as kopf has it: the next re-scan reads again.
                if not {_name(r) for r in before if group is None or r.group == group} <= found_names:
                    continue
                observation.revise_resources(
                    resources=found, insights=self.insights, registry=self.registry, group=group
                )
                revised = True
            if not revised:
                return frozenset()
            await self.insights.backbone.fill(resources=found)
            added = frozenset(self._known() - before)
            if added:  # else kopf disabled what it found (ambiguous, not watchable): nothing to start
                self.insights.revised.notify_all()
        for resource in sorted(added, key=_name):
            log.info(
                "Resolved %s by a discovery re-scan: kopf's last look at discovery missed it (the apiserver "
                "lists a new CRD's resource shortly after the CRD itself); its handlers run from now on",
                resource,
            )
        return added

    async def _follow_revisions(self) -> None:
        """Set :attr:`_revised` at kopf's revisions (several in a row may come as one: each is a complete
        view, and the burst reads the insights as they are then)."""
        async with self.insights.revised:
            while True:
                await self.insights.revised.wait()
                self._revised.set()

    async def _bursts(self) -> None:
        await self.insights.ready_resources.wait()  # kopf's first scan (a revision this may have missed)
        self._revised.set()
        while True:
            await self._revised.wait()
            await self._burst()

    async def _burst(self) -> None:
        """Re-scan after each of :attr:`delays` while anything is unresolved; from the first delay again after
        any revision meanwhile: kopf's (it has just read discovery itself) or a re-scan's that resolved a kind
        (another of its group may be listed next). Both are finite: a re-scan revises only when it adds a
        resource."""
        self._revised.clear()
        attempt = 0
        while attempt < len(self.delays) and self.unresolved():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._revised.wait(), self.delays[attempt])
            if self._revised.is_set():
                self._revised.clear()
                attempt = 0
                continue
            try:
                await self.rescan()
            except Exception:  # kopf's API errors, a dropped connection: the next re-scan is due anyway
                log.warning("discovery re-scan failed", exc_info=True)
            attempt += 1
        if attempt == len(self.delays):
            log.debug(
                "still unresolved after %d discovery re-scans, until kopf's next revision: %s",
                attempt,
                ", ".join(sorted(str(s) for s in self.unresolved())),
            )

    async def run(self) -> None:
        """Follow kopf's revisions and re-scan after each (until cancelled)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow_revisions(), name="kopf revisions")
            group.create_task(self._bursts(), name="discovery re-scans")


def register(registry: kopf.OperatorRegistry, *, delays: Sequence[float] = DELAYS) -> references.Insights:
    """Run :class:`LateResources` for ``registry`` from kopf's startup to its cleanup, and serialise kopf's
    re-scans (:func:`install_in_kopf`). Answers the insights that ``kopf.operator`` must be given
    (``insights=``)."""
    if not install_in_kopf():
        log.warning("kopf's discovery re-scans are not as expected: they are left as they are (unserialised)")
    insights = references.Insights()
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def follow_late_resources(settings: kopf.OperatorSettings, **_: Any) -> None:
        late = LateResources(registry, insights, settings, delays=delays)
        tasks.append(asyncio.create_task(late.run(), name="late resources"))

    @kopf.on.cleanup(registry=registry)
    async def stop_following_late_resources(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        tasks.clear()

    return insights
