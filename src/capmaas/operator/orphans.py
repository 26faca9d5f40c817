"""The orphan report: what capmaas holds in MAAS that no live object names.

The leak audit (:mod:`capmaas.operator.leaks`) follows the deletions this process saw; it is blind to an
object that vanished while no operator ran, before a restart, or in another process's time. The report looks
from the other side, at MAAS, each pass, for every identity the operator has a session for:

- **machines**: held by the identity's MAAS user (``owner``, from one ``whoami`` per session), in a state in
  which someone still holds them, whose system ID no live MaasMachine records (``spec.systemID`` or the
  ``…/replacing`` annotation) and which no MaasMachine in the middle of an allocate or compose holds under its
  agent name (one ``GET machines/?id=…&agent_name=…`` for those, only when there are candidates and such
  objects). MAAS does not show a machine's agent name, so "held by capmaas" is "held by a MAAS user capmaas
  works as": give capmaas MAAS users of its own (docs/security.md), or a machine a person allocated under
  that user is reported too;
- **VM hosts**: registered on such an orphaned machine (a ``registerVMHost`` machine whose object is gone);
- **DNS records**: named the way capmaas names control-plane records (``<cluster>-<hex suffix>.<domain>``)
  whose id and name no live MaasCluster records (``…/dns-record``, ``status.network``, its endpoint host).

Not reported either: what an object this process saw leave *on purpose* held (deleted for ``clusterctl
move`` while its Cluster was paused, or relabelled out of this shard): another management cluster or shard
carries it on, under the same MAAS user (:meth:`OrphanReport.handed_on`; remembered in memory, bounded).

A finding counts only when the previous pass found it too, so an object whose system ID or record is being
written right now is never reported. Each finding is a gauge (``capmaas_orphans{kind}``) and one Warning
Event (reason :data:`ORPHAN_REASON`) on the operator's own object when first counted. Nothing is ever
released, deleted or changed: what holds a machine with no object may be a move half done, a restore on the
way or a person; an admin decides.

Limits: the report sees the objects this process watches. An operator narrowed to a namespace or a watch
filter sees only its share, so a machine of another share held by the same MAAS user is reported: give each
share a MAAS user of its own, or turn the report off there (``polling.orphan_report_interval: 0``). Sessions
are opened by reconciles: an identity no live object uses any more is not looked at.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from capmaas import maas
from capmaas.operator.kube import Store
from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX, DNS_RECORD, REPLACING

log = logging.getLogger(__name__)

Kind = Literal["machine", "vm_host", "dns_record"]
KINDS: tuple[Kind, ...] = ("machine", "vm_host", "dns_record")
#: The Warning Event's reason.
ORPHAN_REASON = "OrphanedInMaas"
#: States in which a MAAS user still holds the machine.
HELD = maas.NodeStatus.where(lambda s: s.held)
#: The shape of a name capmaas gives a control-plane record: ``<cluster>-<hex suffix>.<domain>``.
MANAGED_DNS_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?-[0-9a-f]{6,}\.[a-z0-9][a-z0-9.-]*$")
_BATCH = 100
#: System IDs and DNS records remembered as handed on (the oldest are forgotten first).
HANDED_ON_MAX = 10_000


class Session(Protocol):
    """What the report needs of a pooled MAAS session (:class:`capmaas.gateway.session.MaasSession`)."""

    @property
    def client(self) -> maas.MaasClient: ...

    @property
    def endpoint(self) -> str: ...


@dataclass(frozen=True)
class Orphan:
    kind: Kind
    endpoint: str
    id: str  # system ID, VM host id, DNS record id
    detail: str  # what an admin looks for in MAAS (hostname, VM host name, fqdn)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.endpoint, self.id)

    def message(self) -> str:
        what = {"machine": "MAAS machine", "vm_host": "MAAS VM host", "dns_record": "MAAS DNS record"}[
            self.kind
        ]
        return (
            f"{what} {self.id} ({self.detail}) at {self.endpoint}: capmaas's, and no live object names it; "
            "capmaas never releases or deletes it on its own: check it in MAAS and release it (or re-create "
            "the object that held it)"
        )


@dataclass(frozen=True)
class _Live:
    """What the live objects in the watch cache record."""

    system_ids: frozenset[str]
    in_flight_agents: frozenset[str]  # agent names of MaasMachines that record no system ID yet
    dns_ids: frozenset[str]
    dns_names: frozenset[str]


class OrphanReport:
    """:meth:`check` asks every session's MAAS; :attr:`counts` holds the latest counts by kind."""

    def __init__(
        self,
        store: Store,
        sessions: Callable[[], Sequence[Session]],
        *,
        report: Callable[[Mapping[Kind, int]], None] = lambda counts: None,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._report = report
        self._warn = warn
        self._users: dict[int, tuple[Session, str]] = {}  # id(session) -> (session, MAAS username)
        self._seen: set[tuple[str, str, str]] = set()  # found last pass (not counted yet: the grace)
        self._counted: dict[tuple[str, str, str], Orphan] = {}
        self.counts: dict[Kind, int] = dict.fromkeys(KINDS, 0)
        self._handed_on: dict[str, None] = {}  # system IDs, DNS record ids, fqdns (insertion-ordered)

    def handed_on(self, body: Mapping[str, Any]) -> None:
        """An object left on purpose (``clusterctl move`` out of here, or out of this shard): what it
        records lives on under another operator, so it is never an orphan here."""
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        rid, _, fqdn = str(annotations.get(ANNOTATION_PREFIX + DNS_RECORD) or "").partition("/")
        for value in (str((body.get("spec") or {}).get("systemID") or ""), rid, fqdn.lower()):
            if value:
                self._handed_on.pop(value, None)
                self._handed_on[value] = None
        while len(self._handed_on) > HANDED_ON_MAX:
            del self._handed_on[next(iter(self._handed_on))]

    async def check(self) -> None:
        """One pass (see the module docstring). A MAAS that does not answer keeps what it had."""
        live = self._live()
        sessions = list(self._sessions())
        found: dict[tuple[str, str, str], Orphan] = {}
        failed: set[str] = set()
        endpoints_done: set[str] = set()
        for session in sessions:
            try:
                machines = await self._machines(session, live)
                for o in machines:
                    found[o.key] = o
                if session.endpoint not in endpoints_done:
                    endpoints_done.add(session.endpoint)
                    for o in await self._dns(session, live):
                        found[o.key] = o
                held = {o.id for o in machines}
                if held:
                    for o in await self._vm_hosts(session, held):
                        found[o.key] = o
            except maas.MaasError as exc:
                log.info("orphan report: %s did not answer: %s", session.endpoint, exc)
                failed.add(session.endpoint)
        open_ids = {id(s) for s in sessions}
        self._users = {k: v for k, v in self._users.items() if k in open_ids}
        confirmed = {k: o for k, o in found.items() if k in self._seen or k in self._counted}
        for key, o in confirmed.items():
            if key not in self._counted:
                self._warn(o.message())
                log.warning("orphan report: %s", o.message())
        # A MAAS that did not answer keeps its findings (unknown is not gone).
        kept = {k: o for k, o in self._counted.items() if o.endpoint in failed}
        self._counted = {**kept, **confirmed}
        self._seen = set(found) | {k for k in self._seen if k[1] in failed}
        self.counts = {kind: sum(1 for o in self._counted.values() if o.kind == kind) for kind in KINDS}
        self._report(self.counts)

    def _live(self) -> _Live:
        sids: set[str] = set()
        agents: set[str] = set()
        for body in self._store.values("maasmachines"):
            meta = body.get("metadata") or {}
            annotations: Mapping[str, Any] = meta.get("annotations") or {}
            sid = str((body.get("spec") or {}).get("systemID") or "")
            if sid:
                sids.add(sid)
            else:
                agent = str(annotations.get(ANNOTATION_PREFIX + AGENT_NAME) or meta.get("uid") or "")
                if agent:
                    agents.add(agent)
            if replacing := str(annotations.get(ANNOTATION_PREFIX + REPLACING) or ""):
                sids.add(replacing)
        dns_ids: set[str] = set()
        dns_names: set[str] = set()
        for body in self._store.values("maasclusters"):
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            rid, _, fqdn = str(annotations.get(ANNOTATION_PREFIX + DNS_RECORD) or "").partition("/")
            dns_ids.add(rid)
            dns_names.add(fqdn.lower())
            network = (body.get("status") or {}).get("network") or {}
            dns_ids.add(str(network.get("dnsRecordID") or ""))
            dns_names.add(str(network.get("dnsName") or "").lower())
            cep = (body.get("spec") or {}).get("controlPlaneEndpoint") or {}
            dns_names.add(str(cep.get("host") or "").lower())
        gone = set(self._handed_on)
        return _Live(
            frozenset(sids | gone),
            frozenset(agents),
            frozenset(dns_ids - {""} | gone),
            frozenset(dns_names - {""} | gone),
        )

    async def _user(self, session: Session) -> str:
        known = self._users.get(id(session))
        if known is not None and known[0] is session:
            return known[1]
        user = (await session.client.whoami()).username
        self._users[id(session)] = (session, user)
        return user

    async def _machines(self, session: Session, live: _Live) -> list[Orphan]:
        user = await self._user(session)
        held = await session.client.machines.list(status=HELD)
        candidates = {m.system_id: m for m in held if m.owner == user and m.system_id not in live.system_ids}
        if candidates and live.in_flight_agents:
            for batch in _chunks(sorted(live.in_flight_agents)):
                for m in await session.client.machines.list(ids=sorted(candidates), agent_names=batch):
                    candidates.pop(m.system_id, None)  # held by an object whose allocate is in flight
                if not candidates:
                    break
        return [
            Orphan("machine", session.endpoint, sid, f"{m.hostname}, {m.status_name or m.status.name}")
            for sid, m in candidates.items()
        ]

    async def _vm_hosts(self, session: Session, orphaned: set[str]) -> list[Orphan]:
        return [
            Orphan("vm_host", session.endpoint, str(h.id), f"{h.name} on machine {h.host.system_id}")
            for h in await session.client.vm_hosts.list()
            if h.host is not None and h.host.system_id in orphaned
        ]

    async def _dns(self, session: Session, live: _Live) -> list[Orphan]:
        return [
            Orphan("dns_record", session.endpoint, str(r.id), r.fqdn)
            for r in await session.client.dns_resources.list()
            if MANAGED_DNS_NAME.match(r.fqdn.lower())
            and str(r.id) not in live.dns_ids
            and r.fqdn.lower() not in live.dns_names
        ]

    async def run(self, interval: float) -> None:
        """:meth:`check` every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            except Exception:  # never end the report; the next pass tries again
                log.exception("orphan report pass failed")


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), _BATCH):
        yield items[i : i + _BATCH]
