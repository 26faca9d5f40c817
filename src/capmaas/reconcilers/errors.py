"""The two non-success outcomes of a reconcile: one exception tree for the reconcilers' boundary.

A reconcile either succeeds (possibly asking to be run again after a delay, see ``Requeue`` in
:mod:`capmaas.reconcilers.scope`), or ends in one of these:

- :class:`TransientError` — something outside our control is not ready or failed in a way that may heal
  (MAAS unreachable, no machine available, a Secret not there yet). Retried after ``delay`` seconds.
- :class:`TerminalError` — retrying will not help (the deploy attempts are exhausted, a constraint can never
  match). The object keeps a condition explaining why; only a change to the object re-triggers it.

Both carry a condition ``reason`` (a constant from :mod:`capmaas.api.conditions`) so the operator can record
the outcome without parsing messages. The operator maps them to its runtime in exactly one place.
"""

from __future__ import annotations


class ReconcileError(Exception):
    """Base: ``reason`` is a condition reason constant, ``message`` is for people (never holds secrets)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class TransientError(ReconcileError):
    """Retry later. ``delay`` is the suggested wait in seconds; None lets the caller's backoff decide."""

    def __init__(self, reason: str, message: str, *, delay: float | None = None) -> None:
        super().__init__(reason, message)
        self.delay = delay

    def __repr__(self) -> str:
        return f"TransientError(reason={self.reason!r}, message={self.message!r}, delay={self.delay!r})"


class ConflictError(TransientError):
    """A write whose ``resourceVersion`` precondition failed (HTTP 409): the object changed since this pass
    read it, so the pass stops before acting on a stale copy (the next one starts from the current object)."""

    def __init__(self, message: str, *, delay: float | None = 1.0) -> None:
        super().__init__("Conflict", message, delay=delay)


class TerminalError(ReconcileError):
    """Do not retry: a person has to change something (the condition says what)."""

    def __repr__(self) -> str:
        return f"TerminalError(reason={self.reason!r}, message={self.message!r})"
