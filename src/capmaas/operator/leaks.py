"""The leak audit: MAAS machines still held for MaasMachines that are gone (allocation without MaasMachine).

The reconcilers give a MaasMachine's MAAS machine back before its finalizer goes, so a machine MAAS still
holds under a deleted MaasMachine's agent name means something bypassed that: a finalizer removed by hand, a
namespace force-deleted, a bug. Nothing in the watch cache shows it (the object is gone), so the audit
remembers the system ID and agent name of every MaasMachine whose deletion this process saw, and asks MAAS:

- one ``GET machines/?id=…`` per MAAS session for all remembered system IDs (batched); a machine MAAS no
  longer knows, or shows released or being released, is forgotten (the normal case: one request per pass
  covers every MaasMachine deleted since the last pass);
- for one still allocated or deployed, ``GET machines/?id=<sid>&agent_name=<agent>``: MAAS clears the agent
  name on release, so an answer means it is still held under the deleted MaasMachine's agent name: leaked.
  It is checked again every pass, so the count falls once someone releases it.

Not counted: a system ID a live MaasMachine records (a re-created object adopted it), and an object deleted
for ``clusterctl move`` (its machine lives on under the target cluster's object). Limits: the audit knows the
deletions it saw; after a restart, or for a deletion while no operator ran, a leak is not seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from capmaas import maas
from capmaas.operator.kube import Store
from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX, DELETE_FOR_MOVE_ANNOTATION

log = logging.getLogger(__name__)

#: States in which the machine is no longer (or soon no longer) held by anyone.
_LET_GO = frozenset(
    {
        maas.NodeStatus.NEW,
        maas.NodeStatus.READY,
        maas.NodeStatus.RELEASING,
        maas.NodeStatus.DISK_ERASING,
    }
)
_BATCH = 100


class Session(Protocol):
    """What the audit needs of a pooled MAAS session (:class:`capmaas.gateway.session.MaasSession`)."""

    @property
    def client(self) -> maas.MaasClient: ...


@dataclass(frozen=True)
class _Gone:
    key: str
    system_id: str
    agent_name: str


class LeakAudit:
    """Remembers deleted MaasMachines (:meth:`deleted`); :meth:`check` asks MAAS; :attr:`leaked` counts."""

    def __init__(
        self,
        store: Store,
        sessions: Callable[[], Sequence[Session]],
        *,
        report: Callable[[int], None] = lambda leaked: None,
        max_remembered: int = 10_000,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._report = report
        self._max = max_remembered
        self._gone: dict[str, _Gone] = {}  # system ID -> what held it
        self._leaking: set[str] = set()  # system IDs found still held under their agent name
        self.leaked = 0

    def deleted(self, body: Mapping[str, Any]) -> None:
        """A MaasMachine's DELETED event (its last state)."""
        meta = body.get("metadata") or {}
        sid = str((body.get("spec") or {}).get("systemID") or "")
        annotations = meta.get("annotations") or {}
        if not sid or DELETE_FOR_MOVE_ANNOTATION in annotations:
            return
        agent = str(annotations.get(ANNOTATION_PREFIX + AGENT_NAME) or meta.get("uid") or "")
        if not agent:
            return
        if len(self._gone) >= self._max:  # bounded: the oldest is forgotten first
            self._forget(next(iter(self._gone)))
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self._gone[sid] = _Gone(key, sid, agent)

    @property
    def remembered(self) -> int:
        return len(self._gone)

    async def check(self) -> None:
        """One audit pass (see the module docstring); MAAS errors keep what could not be checked."""
        recorded = {
            str((b.get("spec") or {}).get("systemID") or "") for b in self._store.values("maasmachines")
        }
        for sid in [s for s in self._gone if s in recorded]:
            self._forget(sid)
        sessions = list(self._sessions())
        if not self._gone or not sessions:
            self.leaked = len(self._leaking)
            self._report(self.leaked)
            return
        seen: dict[str, maas.Machine] = {}
        answered = True
        for session in sessions:
            sids = list(self._gone)
            for i in range(0, len(sids), _BATCH):
                try:
                    for found in await session.client.machines.list(ids=sids[i : i + _BATCH]):
                        seen.setdefault(found.system_id, found)
                except maas.MaasError as exc:
                    answered = False
                    log.info("leak audit: listing machines failed: %s", exc)
        for sid, gone in list(self._gone.items()):
            m = seen.get(sid)
            if m is None:
                if answered:
                    self._forget(sid)  # MAAS no longer knows it (a decomposed VM, a deleted machine)
                continue
            if m.status in _LET_GO or m.owner is None:
                self._forget(sid)
                continue
            held = await self._held(sessions, gone)
            if held is None:
                continue  # unknown this pass: counted as before
            if not held:
                self._forget(sid)  # held by someone else now
            elif sid not in self._leaking:
                self._leaking.add(sid)
                log.warning(
                    "MAAS machine %s is still held under the agent name of deleted MaasMachine %s "
                    "(its finalizer did not release it): release it in MAAS",
                    sid,
                    gone.key,
                )
        self.leaked = len(self._leaking)
        self._report(self.leaked)

    def _forget(self, sid: str) -> None:
        self._gone.pop(sid, None)
        self._leaking.discard(sid)

    async def _held(self, sessions: Sequence[Session], gone: _Gone) -> bool | None:
        """Whether MAAS shows ``gone``'s machine held under its agent name (None: it did not answer)."""
        for session in sessions:
            try:
                if await session.client.machines.list(ids=[gone.system_id], agent_name=gone.agent_name):
                    return True
            except maas.MaasError as exc:
                log.info("leak audit: checking %s failed: %s", gone.system_id, exc)
                return None
        return False

    async def run(self, interval: float) -> None:
        """:meth:`check` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            except Exception:  # never end the audit; the next pass tries again
                log.exception("leak audit pass failed")
