"""The shared poller keeps its hot machines as sets changed with each registration and snapshot change
(session 40: its loop walked every watched machine after every kick). What it decides from them must be what
the walk decided: after random registrations, writes folded in, poll answers (a machine changed, gone, or
unreadable) and unregistrations, ``spacing()``, the round's IDs and the loop's interval are checked against
the walks written out as they were."""

from __future__ import annotations

import random
import types
from collections.abc import Sequence

import pytest

from capmaas import maas
from capmaas.gateway import poller as poller_module
from capmaas.gateway.poller import RELEASE_SLOWDOWN, MachinePoller

FAST, IDLE, HOT_MAX = 1.0, 30.0, 2.5
S = maas.NodeStatus
STATES = (S.ALLOCATED, S.DEPLOYING, S.DEPLOYED, S.RELEASING, S.DISK_ERASING, S.READY, S.COMMISSIONING)
ZONE = maas.Zone(id=1, name="z1")


def machine(sid: str, status: maas.NodeStatus) -> maas.Machine:
    return maas.Machine(system_id=sid, hostname=sid, status=status, zone=ZONE)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Maas:
    """The list call of a fake MAAS: each listed machine answers as ``states`` says (missing: gone)."""

    def __init__(self) -> None:
        self.states: dict[str, maas.NodeStatus] = {}
        self.unreadable: set[str] = set()
        self.machines = self

    async def list_lenient(self, ids: Sequence[str]) -> tuple[list[maas.Machine], list[str]]:
        found = [machine(s, self.states[s]) for s in ids if s in self.states and s not in self.unreadable]
        return found, [s for s in ids if s in self.unreadable]


# --- the walks the poller made before (written out as they were) ------------------------------------------
def walked_hot(p: MachinePoller, sid: str) -> bool:
    m = p.snapshot(sid)
    return m is None or m.status.transitional


def walked_spacing(p: MachinePoller) -> float:
    if len(p._fresh) >= poller_module.FRESH_BATCH:
        return FAST
    for sid in p._watched:
        m = p.snapshot(sid)
        if m is None or (m.status.transitional and not m.status.releasing):
            return HOT_MAX
    return min(IDLE, FAST * RELEASE_SLOWDOWN)


def walked_round(p: MachinePoller, now: float) -> list[str]:
    hot = [sid for sid in p._watched if walked_hot(p, sid)]
    ages = {sid: p._age(sid, now) for sid in p._watched if not walked_hot(p, sid)}
    if ages and max(ages.values()) >= IDLE:
        return hot + [sid for sid, age in ages.items() if age >= IDLE / 2]
    if not hot:
        return []
    room = -len(hot) % p._batch
    soon = IDLE - 2 * walked_spacing(p)
    due = sorted((sid for sid, age in ages.items() if age >= soon), key=ages.__getitem__, reverse=True)
    return hot + due[:room]


def walked_watch_interval(p: MachinePoller) -> float:
    if p.last_error is not None:
        return min(IDLE, max(FAST, 5.0))
    if any(walked_hot(p, sid) for sid in p._watched):
        return walked_spacing(p)
    return max(FAST, IDLE - p._oldest_age())


@pytest.mark.parametrize("seed", range(6))
async def test_hot_sets_decide_what_the_walks_decided(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    clock = Clock()
    monkeypatch.setattr(poller_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    fake = Maas()
    p = MachinePoller(fake, fast=FAST, idle=IDLE, batch_size=7, wake=lambda key: None, hot_max=HOT_MAX)  # type: ignore[arg-type]
    sids = [f"m{i}" for i in range(40)]
    hot_seen = waiting_seen = 0
    for step in range(600):
        op = rng.random()
        sid = rng.choice(sids)
        if op < 0.25:
            p.watch(sid, f"key{rng.randrange(8)}")
        elif op < 0.32:
            p.unwatch(sid)
        elif op < 0.35:
            p.forget_key(f"key{rng.randrange(8)}")
        elif op < 0.6:
            fake.states[sid] = rng.choice(STATES)
            p.put(machine(sid, fake.states[sid]))  # a write's answer (the machine may not be watched)
        elif op < 0.8:
            for other in rng.sample(sids, 10):  # MAAS moves on by itself, or the machine is gone
                if rng.random() < 0.15:
                    fake.states.pop(other, None)
                else:
                    fake.states[other] = rng.choice(STATES)
            fake.unreadable = set(rng.sample(sids, 2))
            await p.poll_once(full=rng.random() < 0.5)
        else:
            clock.now += rng.choice((0.5, 3.0, 16.0, 31.0))
        assert p.spacing() == walked_spacing(p), step
        assert p._round() == walked_round(p, clock.now), step
        assert p._watch_interval() == walked_watch_interval(p), step
        hot_seen += any(walked_hot(p, s) for s in p._watched)
        waiting_seen += walked_spacing(p) == HOT_MAX
    assert hot_seen  # the cases that use the sets came up
    assert waiting_seen
