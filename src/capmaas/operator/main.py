"""``capmaas run``: start the operator. Flags override the ``CAPMAAS_*`` environment (see capmaas.config)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import logging
import sys

from capmaas.config import load_config

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", help="watch only this namespace (default: all namespaces)")
    parser.add_argument(
        "--watch-filter",
        metavar="LABEL=VALUE",
        help="reconcile only MaasClusters/MaasMachines carrying this label (CAPI's --watch-filter)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--standalone", action="store_true", default=None, help="no peering (the default)")
    group.add_argument("--peering", metavar="NAME", help="use kopf peering object NAME (hot standby)")
    parser.add_argument("--priority", type=int, help="peering priority of this replica")
    parser.add_argument("--secrets-dir", help="directory of secret files (e.g. maas__api_key)")


def _no_sniffio_lookups() -> None:
    """httpcore runs ``import sniffio`` on every request; when sniffio is not installed, every one of those
    failed imports walks ``sys.path`` (its cost: docs/benchmarks/README.md). A ``None`` entry in
    ``sys.modules`` makes the import fail at once, which httpcore takes as "asyncio" as before."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def run(args: argparse.Namespace) -> int:
    from capmaas.operator.app import run_operator
    from capmaas.operator.metrics import setup_logging

    config = load_config(getattr(args, "secrets_dir", None))
    if args.namespace:
        config.kube.namespace = args.namespace
    if args.watch_filter:
        config.kube.watch_filter = args.watch_filter
    if args.peering:
        config.peering.standalone = False
        config.peering.name = args.peering
    elif args.standalone:
        config.peering.standalone = True
    if args.priority is not None:
        config.peering.priority = args.priority
    setup_logging(config.logging.format, config.logging.level)
    _no_sniffio_lookups()
    if config.maas.insecure_skip_tls_verify:
        log.warning("TLS verification of MAAS is disabled (CAPMAAS_MAAS__INSECURE_SKIP_TLS_VERIFY)")
    log.info(
        "starting capmaas operator",
        extra={"namespace": config.kube.namespace or "*", "watch_filter": config.kube.watch_filter},
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_operator(config))
    return 0
