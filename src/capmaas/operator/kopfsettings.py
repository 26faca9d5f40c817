"""kopf's settings for capmaas: where its bookkeeping lands, what it watches, its timeouts.

kopf's own finalizer and progress/diff-base storage are not used (no change handlers, daemons or timers), but
the progress storage is still pointed at our annotation prefix so nothing ever lands under
``kopf.zalando.org``, and the diff-base storage is :class:`NoDiffBase`: kopf builds a deep-copied "essence"
of every watched body for change detection even when no handler could use it (its cost:
docs/benchmarks/README.md). kopf's finalizer name is deliberately *not* one of ours: kopf removes its
finalizer from objects that have no handler requiring it, which would strip
``maasmachine.infrastructure.cluster.x-k8s.io`` (see workers.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf

from capmaas.config import OperatorConfig
from capmaas.operator.kube import parse_watch_filter
from capmaas.operator.routing import CAPI, CLUSTERS, INFRA, MAASCLUSTERS, MAASMACHINES, MACHINES
from capmaas.reconcilers.keys import ANNOTATION_PREFIX

KOPF_FINALIZER = ANNOTATION_PREFIX + "kopf-unused"


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's change-detection base, switched off: we register no change handlers (see the module docstring),
    so there is nothing to diff against, and nothing is ever stored on the objects."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def label_selector(watch_filter: str | None) -> str | None:
    """The watch filter as a Kubernetes label selector (``key=value`` or ``key``); None → no filter."""
    parsed = parse_watch_filter(watch_filter)
    if parsed is None:
        return None
    key, value = parsed
    return key if value is None else f"{key}={value}"


def register(
    registry: kopf.OperatorRegistry,
    config: OperatorConfig,
    *,
    login: Callable[[], kopf.ConnectionInfo] | None = None,
) -> None:
    """The startup handler that applies the settings, and the login handler (``login``: the operator's own,
    :mod:`capmaas.operator.apiserver`; None: through the ``kubernetes`` package)."""
    selector = label_selector(config.kube.watch_filter)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = KOPF_FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX[:-1])
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.posting.level = logging.getLevelNamesMapping()[config.logging.events_level]
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        # A LIST, then a watch (kopf's default, pinned): the watch events of our kinds become BOOKMARKs before
        # kopf sees them (capmaas.operator.early), and with initial streaming a BOOKMARK ends kopf's listing.
        settings.watching.initial_streaming = False
        settings.networking.request_timeout = 60
        settings.queueing.worker_limit = None
        if selector:
            # Objects outside the filter are not even sent (a label selector on the watch): each shard caches
            # only its own. A MaasMachine whose owner lacks the label still gets it, by a GET
            # (capmaas.reconcilers.owners). An object relabelled out of the shard comes as DELETED
            # (capmaas.operator.handlers: handed off).
            for group, plural in (
                (CAPI, MACHINES),
                (CAPI, CLUSTERS),
                (INFRA, MAASMACHINES),
                (INFRA, MAASCLUSTERS),
            ):
                settings.watching.label_selectors[group, plural] = selector

    @kopf.on.login(registry=registry)
    def log_in(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account, else the kubeconfig (``KUBECONFIG``)."""
        if login is not None:
            return login()
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info
