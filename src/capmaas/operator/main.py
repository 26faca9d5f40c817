"""``capmaas run``: start the operator. Flags override the ``CAPMAAS_*`` environment (see capmaas.config)."""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import contextlib
import importlib.util
import logging
import os
import ssl
import sys
from collections.abc import Iterator

from capmaas.config import OperatorConfig, load_config

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", help="watch only this namespace (default: all namespaces)")
    parser.add_argument(
        "--watch-filter",
        metavar="LABEL=VALUE",
        help="reconcile only MaasClusters/MaasMachines carrying this label (CAPI's --watch-filter)",
    )
    le = parser.add_argument_group("leader election (a coordination.k8s.io/v1 Lease; on by default)")
    le.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only the Lease holder reconciles; --no-leader-elect is safe with exactly one process only",
    )
    le.add_argument(
        "--leader-elect-lease-name", metavar="NAME", help="Lease name (default: derived from scope)"
    )
    le.add_argument("--leader-elect-namespace", metavar="NS", help="Lease namespace (default: the pod's)")
    le.add_argument("--leader-elect-lease-duration", type=float, metavar="SECONDS")
    le.add_argument("--leader-elect-renew-deadline", type=float, metavar="SECONDS")
    le.add_argument("--leader-elect-retry-period", type=float, metavar="SECONDS")
    old = parser.add_argument_group("deprecated kopf peering options (aliases of leader election)")
    old.add_argument("--standalone", action="store_true", default=None, help="alias of --no-leader-elect")
    old.add_argument(
        "--peering", metavar="NAME", help="alias of --leader-elect --leader-elect-lease-name NAME"
    )
    old.add_argument("--priority", type=int, help="ignored: a Lease has no priorities (a warning is logged)")
    parser.add_argument("--secrets-dir", help="directory of secret files (e.g. maas__api_key)")
    parser.add_argument(
        "--default-identity-namespaces",
        metavar="NS[,NS...]",
        help="namespaces that may use the default MAAS credentials ('*': all; default: none)",
    )
    parser.add_argument(
        "--default-identity-namespace-selector",
        metavar="SELECTOR",
        help="label selector of further namespaces that may use the default MAAS credentials",
    )


def _no_sniffio_lookups() -> None:
    """httpcore runs ``import sniffio`` on every request; when sniffio is not installed, every one of those
    failed imports walks ``sys.path`` (its cost: docs/benchmarks/README.md). A ``None`` entry in
    ``sys.modules`` makes the import fail at once, which httpcore takes as "asyncio" as before."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


#: Modules that libraries the operator imports pull in only if installed, and that the operator never uses:
#: ``kubernetes`` (kopf imports it to recognise that client's model objects; about a third of the start-up
#: and 10 MB) and ``httpx._main`` (httpx's command line: click, rich and pygments; 4 MB). Their cost:
#: docs/scaling.md, "Start-up and memory".
UNUSED_IMPORTS = ("kubernetes", "httpx._main")


def _lean_imports() -> None:
    """Import kopf and httpx with :data:`UNUSED_IMPORTS` absent: a None entry in ``sys.modules`` makes their
    import fail at once, which both libraries take as "not installed". The entries go right after, so a
    kubeconfig only the ``kubernetes`` package can read (:mod:`capmaas.operator.apiserver`) still imports
    it.

    aiohttp (kopf's HTTP client) also builds two fallback TLS contexts at its import, each loading the
    system's trust store: a context for any session given no ``ssl=`` of its own. The operator gives every
    session its own (kopf's from its login credentials, :class:`~capmaas.operator.kubehttp.KubeHttp`'s and
    the MAAS transport's), so the fallbacks are imported without a trust store
    (:func:`_without_default_trust_store`): the verifying one still requires a verified certificate, so a
    session that ever fell back on it would refuse every server rather than trust one it should not."""
    absent = [name for name in UNUSED_IMPORTS if name not in sys.modules]
    for name in absent:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        with _without_default_trust_store():
            import httpx  # noqa: F401
            import kopf  # noqa: F401
    finally:
        for name in absent:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


@contextlib.contextmanager
def _without_default_trust_store() -> Iterator[None]:
    """While in the block, a TLS context loads no default trust store (``set_default_verify_paths``, which
    ``ssl.create_default_context`` calls too, does nothing); restored on exit. Loading it is ~50 ms of CPU
    and ~1 MB of native memory per context (docs/scaling.md, "Start-up and memory"). Only for imports: no
    other thread runs yet and no context of the operator's own is made in the block."""
    loads = ssl.SSLContext.set_default_verify_paths
    ssl.SSLContext.set_default_verify_paths = _no_trust_store  # type: ignore[method-assign]
    try:
        yield
    finally:
        ssl.SSLContext.set_default_verify_paths = loads  # type: ignore[method-assign]


def _no_trust_store(self: ssl.SSLContext) -> None:
    """Stands in for :meth:`ssl.SSLContext.set_default_verify_paths` while the fallbacks are built."""


#: Bytes of the read buffer of each TLS connection (asyncio's default: 256 KiB): one TLS record's payload.
TLS_READ_BUFFER = 16 * 1024


def _small_tls_buffers() -> None:
    """Every TLS connection asyncio makes holds a zero-filled read buffer of ``SSLProtocol.max_size`` bytes,
    all of it resident, for as long as the connection lives; the operator keeps about 26 to its apiserver
    (kopf's watch of each kind and its own requests, plus :data:`~capmaas.operator.app.KUBE_CONNECTIONS`).
    A TLS record carries at most 16 KiB, so a read of 16 KiB takes about one record; a large answer (an
    initial listing, a burst of watch events) only takes more reads, each decrypted data of a read handed on
    joined as before (docs/scaling.md, "Start-up and memory" and "Memory: session 38")."""
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


#: Bytes from which glibc's malloc serves a block with a mapping of its own (its initial threshold, kept).
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def _large_blocks_mapped() -> bool:
    """Keep glibc's mmap threshold where it starts, as ``MALLOC_MMAP_THRESHOLD_`` would: a block of 128 KiB
    or more is then always a mapping of its own, given back to the system when freed. Left alone, glibc
    raises the threshold to the size of each such block freed (up to 32 MiB), so the large answers the
    operator reads (a MAAS listing of the machines in flight, a Kubernetes listing: megabytes each) soon
    come from the heap, where what they leave free stays resident between what was allocated meanwhile (a
    share of the peak: docs/scaling.md, "Memory: session 38"). Returns whether it was set: not
    when the variable sets it already, nor on a C library without ``mallopt``."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def run(args: argparse.Namespace) -> int:
    _large_blocks_mapped()
    _lean_imports()
    _small_tls_buffers()
    from capmaas.operator import jsonbodies

    lean_bodies = jsonbodies.install_in_kopf()
    from capmaas.operator.app import LeadershipLost, run_operator
    from capmaas.operator.metrics import setup_logging
    from capmaas.reconcilers.credentials import parse_selector

    try:
        config = load_config(getattr(args, "secrets_dir", None))
        deprecated = _leader_election_args(args, config)
        if args.default_identity_namespaces is not None:
            config.maas.default_identity_namespaces = [
                n.strip() for n in args.default_identity_namespaces.split(",") if n.strip()
            ]
        if args.default_identity_namespace_selector is not None:
            config.maas.default_identity_namespace_selector = args.default_identity_namespace_selector
        parse_selector(config.maas.default_identity_namespace_selector)  # a bad one is named here
    except ValueError as exc:  # pydantic's ValidationError: a bad setting, named in the message
        print(f"capmaas run: {exc}", file=sys.stderr)
        return 2
    if args.namespace:
        config.kube.namespace = args.namespace
    if args.watch_filter:
        config.kube.watch_filter = args.watch_filter
    setup_logging(config.logging.format, config.logging.level)
    _no_sniffio_lookups()
    for line in deprecated:
        log.warning(line)
    if not lean_bodies:
        log.warning("kopf's client is not as expected: its watch events are kept with their managedFields")
    if not config.leader_election.enabled:
        log.warning("leader election is off: run exactly one capmaas process for these objects")
    if config.maas.insecure_skip_tls_verify:
        log.warning("TLS verification of MAAS is disabled (CAPMAAS_MAAS__INSECURE_SKIP_TLS_VERIFY)")
    log.info(
        "starting capmaas operator",
        extra={"namespace": config.kube.namespace or "*", "watch_filter": config.kube.watch_filter},
    )

    async def operator() -> None:
        try:
            await run_operator(config)
        except LeadershipLost as exc:
            # As controller-runtime does: end the process at once (its loops are stopped, every request is
            # fenced); the Deployment restarts it as a standby. No graceful shutdown of kopf to wait for.
            log.error("%s; exiting so that this process restarts as a standby", exc)
            logging.shutdown()
            os._exit(1)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(operator())
    return 0


def _leader_election_args(args: argparse.Namespace, config: OperatorConfig) -> list[str]:
    """Apply the leader-election flags (and the deprecated peering aliases); returns deprecation warnings."""
    le, warnings = config.leader_election, []
    if args.standalone:
        warnings.append("--standalone is deprecated: it means --no-leader-elect")
        le.enabled = False
    if args.peering:
        warnings.append(
            f"--peering is deprecated: it means --leader-elect --leader-elect-lease-name {args.peering}"
        )
        le.enabled, le.lease_name = True, args.peering
    if args.priority is not None:
        warnings.append("--priority is ignored: a Lease has no priorities (the first candidate wins)")
    if args.leader_elect is not None:
        le.enabled = args.leader_elect
    for flag, attr in (
        ("leader_elect_lease_name", "lease_name"),
        ("leader_elect_namespace", "namespace"),
        ("leader_elect_lease_duration", "lease_duration"),
        ("leader_elect_renew_deadline", "renew_deadline"),
        ("leader_elect_retry_period", "retry_period"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            setattr(le, attr, value)
    type(le).model_validate(le.model_dump())  # the timing order still holds after the flags
    return warnings
