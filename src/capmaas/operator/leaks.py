"""The leak audit: MAAS machines still held for MaasMachines that are gone (allocation without MaasMachine).

The reconcilers give a MaasMachine's MAAS machine back before its finalizer goes, so a machine MAAS still
holds under a deleted MaasMachine's agent name means something bypassed that: a finalizer removed by hand, a
namespace force-deleted, a bug. Nothing in the watch cache shows it (the object is gone), so the audit
remembers the system ID and agent name of every MaasMachine whose deletion this process saw, with the MAAS
session that watched that machine, and asks that MAAS (never another tenant's: a system ID is only ever sent
to the endpoint it came from):

- one ``GET machines/?id=…`` per MAAS session for the system IDs remembered for it (batched); a machine MAAS
  no longer knows, or shows released or being released, is forgotten (the normal case: one request per pass
  covers every MaasMachine deleted since the last pass);
- for one still allocated or deployed, ``GET machines/?id=<sid>&agent_name=<agent>``: MAAS clears the agent
  name on release, so an answer means it is still held under the deleted MaasMachine's agent name: leaked.
  It is checked again every pass, so the count falls once someone releases it.

Not counted: a system ID a live MaasMachine records (a re-created object adopted it), and an object deleted
for ``clusterctl move`` with its Cluster paused (its machine lives on under the target cluster's object; the
annotation on an unpaused Cluster's object is ignored, as the reconcilers ignore it). Limits: the audit knows
the deletions it saw while leading, of machines a pooled session watched; after a restart, for a deletion
while no operator ran, or once the session is closed (credentials rotated), a leak is not seen here: the
orphan report (:mod:`capmaas.operator.orphans`) looks from MAAS's side for those.
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

_BATCH = 100


class Session(Protocol):
    """What the audit needs of a pooled MAAS session (:class:`capmaas.gateway.session.MaasSession`)."""

    @property
    def client(self) -> maas.MaasClient: ...

    def snapshot(self, system_id: str) -> maas.Machine | None:
        """The machine as this session's poller last saw it (None: it does not watch it)."""
        ...


@dataclass(frozen=True)
class _Gone:
    key: str
    system_id: str
    agent_name: str
    session: Session  # the one that watched the machine: the only MAAS asked about it


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

    def deleted(self, body: Mapping[str, Any], *, moved: bool | None = None) -> None:
        """A MaasMachine is gone (its DELETED event, or its last state: deletionTimestamp and no finalizer).
        Call it before the object's loop ends, while its session still watches the machine. ``moved``: it was
        deleted for ``clusterctl move`` with its Cluster paused (None: judged by the annotation alone)."""
        meta = body.get("metadata") or {}
        sid = str((body.get("spec") or {}).get("systemID") or "")
        annotations = meta.get("annotations") or {}
        if moved is None:
            moved = DELETE_FOR_MOVE_ANNOTATION in annotations
        if not sid or moved:
            return
        agent = str(annotations.get(ANNOTATION_PREFIX + AGENT_NAME) or meta.get("uid") or "")
        session = next((x for x in self._sessions() if x.snapshot(sid) is not None), None)
        if not agent or session is None:
            return  # no session watches it (a standby, or never deployed by this process): not auditable
        if len(self._gone) >= self._max:  # bounded: the oldest is forgotten first
            self._forget(next(iter(self._gone)))
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self._gone[sid] = _Gone(key, sid, agent, session)

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
        for sid in [s for s, g in self._gone.items() if not any(g.session is x for x in sessions)]:
            self._forget(sid)  # its session is closed (credentials rotated): nothing to ask any more
        for session in sessions:
            mine = [g for g in self._gone.values() if g.session is session]
            if mine:
                await self._check(session, mine)
        self.leaked = len(self._leaking)
        self._report(self.leaked)

    async def _check(self, session: Session, gone: list[_Gone]) -> None:
        seen: dict[str, maas.Machine] = {}
        try:
            for i in range(0, len(gone), _BATCH):
                batch = [g.system_id for g in gone[i : i + _BATCH]]
                for found in await session.client.machines.list(ids=batch):
                    seen[found.system_id] = found
        except maas.MaasError as exc:
            log.info("leak audit: listing machines failed: %s", exc)
            return  # unknown this pass: counted as before
        for g in gone:
            m = seen.get(g.system_id)
            if m is None or m.status.let_go or m.owner is None:
                self._forget(g.system_id)  # released, being released, or gone from MAAS (a decomposed VM)
                continue
            held = await self._held(session, g)
            if held is None:
                continue
            if not held:
                self._forget(g.system_id)  # held by someone else now
            elif g.system_id not in self._leaking:
                self._leaking.add(g.system_id)
                log.warning(
                    "MAAS machine %s is still held under the agent name of deleted MaasMachine %s "
                    "(its finalizer did not release it): release it in MAAS",
                    g.system_id,
                    g.key,
                )

    def _forget(self, sid: str) -> None:
        self._gone.pop(sid, None)
        self._leaking.discard(sid)

    async def _held(self, session: Session, gone: _Gone) -> bool | None:
        """Whether MAAS shows ``gone``'s machine held under its agent name (None: it did not answer)."""
        try:
            return bool(await session.client.machines.list(ids=[gone.system_id], agent_name=gone.agent_name))
        except maas.MaasError as exc:
            log.info("leak audit: checking %s failed: %s", gone.system_id, exc)
            return None

    async def run(self, interval: float) -> None:
        """:meth:`check` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            except Exception:  # never end the audit; the next pass tries again
                log.exception("leak audit pass failed")
