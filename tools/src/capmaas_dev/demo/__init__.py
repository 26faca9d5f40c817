"""``capmaas demo``: the whole system on this machine (control plane, MAAS simulator, operator, a cluster).

The modules here are shared by the demo and ``python -m capmaas_dev.bench``: :mod:`.stack` starts and tears
down everything (for the demo: with the real Cluster API core manager and a workload-cluster stand-in),
:mod:`.capi` plays Cluster API core for the benchmark, :mod:`.kube` talks to the apiserver and watches,
:mod:`.progress` follows the MaasMachines, :mod:`.simthread` runs the simulator, :mod:`.manifests` builds the
objects. The manifest builders are re-exported here because the operator and reconciler tests call them as
``capmaas_dev.demo.cluster(...)`` (they lived in the former ``capmaas/demo.py``).

The command's entry points import lazily, so ``from capmaas import demo`` stays cheap for those tests.
"""

from __future__ import annotations

import argparse

from capmaas_dev.demo.manifests import (
    CAPI_API,
    CLOUD_CONFIG,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
    INFRA_API,
    bootstrap_secret,
    cluster,
    identity_secret,
    maascluster,
    maasmachine,
    machine,
    owner,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from capmaas_dev.demo import cli

    cli.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from capmaas_dev.demo import cli

    return cli.run(args)


__all__ = [
    "CAPI_API",
    "CLOUD_CONFIG",
    "CLUSTER_NAME_LABEL",
    "CONTROL_PLANE_LABEL",
    "INFRA_API",
    "add_arguments",
    "bootstrap_secret",
    "cluster",
    "identity_secret",
    "maascluster",
    "maasmachine",
    "machine",
    "owner",
    "run",
]
