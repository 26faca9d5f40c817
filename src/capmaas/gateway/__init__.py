"""The MAAS gateway: one pooled client and one shared machine poller per (endpoint, identity), the
adapter behind the reconcilers' :class:`~capmaas.reconcilers.ports.MaasPort`. The operator wires it up;
the reconcilers never import it.

Why a shared poller: the Go provider GETs each machine on every requeue, so MAAS load grows with machines x
requeues. Here every MaasMachine *registers* its system ID with the poller of its endpoint, and one
``machines.list(ids=...)`` call per interval (chunked by ``batch_size``) refreshes all of them.
How it polls: :mod:`~capmaas.gateway.poller`.

Writes (allocate, deploy, release, power on) go straight to MAAS and their responses are folded into the
snapshot, so a reconcile right after a write sees the new state without another read.

Budget per machine lifecycle on the happy path: allocate + deploy + release = 3 requests, plus its share of
the list calls (one call per interval for *all* machines in flight).

Sessions are keyed by (endpoint, sha256 of key+CA+insecure); a rotated identity Secret produces a new key,
hence a new session, and the session it replaced for that source is closed. The API key never leaves
:class:`~capmaas.reconcilers.ports.MaasCredentials` (not in repr, logs or messages).

Modules: :mod:`~capmaas.gateway.poller` (the shared poll), :mod:`~capmaas.gateway.release_lookup` (the
deletions' shared ownership lookups), :mod:`~capmaas.gateway.session` (the port over one client and poller),
:mod:`~capmaas.gateway.connections` (the pool).
"""

from capmaas.gateway.connections import ClientFactory, MaasConnections, credentials_key
from capmaas.gateway.poller import MachinePoller
from capmaas.gateway.session import MaasSession

__all__ = [
    "ClientFactory",
    "MaasConnections",
    "MaasSession",
    "MachinePoller",
    "credentials_key",
]
