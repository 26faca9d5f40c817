"""Turning per-host rejections into one sentence a person can act on.

A condition message such as "3 hosts in zone-a lack 8192 MiB free memory; 1 host in zone-b is in maintenance"
says what to fix; a list of 40 per-host lines does not. Capacity and host-state reasons are grouped per zone
(that is where capacity is added), eligibility reasons (pin, zone, pool, tags) across zones.
"""

from __future__ import annotations

from collections.abc import Iterable

from capmaas.placement._models import Rejection

_SINGULAR = {"s": "s", "is": "is", "has": "has"}
_PLURAL = {"s": "", "is": "are", "has": "have"}


def _phrase(count: int, zone: str | None, summary: str) -> str:
    noun = "host" if count == 1 else "hosts"
    where = f" in {zone}" if zone is not None else ""
    verbs = _SINGULAR if count == 1 else _PLURAL
    return f"{count} {noun}{where} {summary.format(**verbs)}"


def summarize(rejections: Iterable[Rejection]) -> str:
    """Aggregate rejections into "N hosts [in zone] <reason>" phrases joined by "; ".

    Phrases keep the order in which their filters first appear (the pipeline order), then zone and reason.
    """
    filter_order: dict[str, int] = {}
    counts: dict[tuple[int, str, str, str], int] = {}
    for r in rejections:
        order = filter_order.setdefault(r.filter, len(filter_order))
        group = (order, r.zone if r.per_zone else "", r.summary, r.filter)
        counts[group] = counts.get(group, 0) + 1
    return "; ".join(
        _phrase(count, zone or None, summary) for (_, zone, summary, _), count in sorted(counts.items())
    )


def no_fit_message(rejections: tuple[Rejection, ...], candidates: int) -> str:
    """The message of a ``NoFit``: the aggregate, or why there was nothing to filter."""
    if candidates == 0:
        return "no VM hosts to choose from"
    return f"no VM host fits: {summarize(rejections)}"
