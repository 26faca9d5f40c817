"""The `capmaas` command line: one sub-command per job, each owned by the module that does the job.

    capmaas run          the operator (kopf)                       -> capmaas.operator.main
    capmaas crds         write / check the generated CRD YAML      -> capmaas_dev.crdgen
    capmaas simulate     serve the MAAS simulator                  -> capmaas_dev.simulator.serve
    capmaas dev-cluster  local kube-apiserver + etcd (up/down/env) -> capmaas_dev.devcluster.cli
    capmaas demo         the whole system on the embedded default  -> capmaas_dev.demo
    capmaas preflight    check a MAAS and its credentials          -> capmaas.preflight

Each owner module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only for
the sub-command being run, so `capmaas crds` never imports kopf and configuration is never built at
import time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("capmaas.operator.main", "run the operator against the current kubeconfig"),
    "crds": ("capmaas_dev.crdgen", "write (or --check) the CRD YAML generated from the pydantic models"),
    "simulate": ("capmaas_dev.simulator.serve", "serve a MAAS 3.7 API simulator from an inventory"),
    "dev-cluster": ("capmaas_dev.devcluster.cli", "start/stop a local kube-apiserver + etcd"),
    "demo": ("capmaas_dev.demo", "run the whole system locally and provision a sample cluster"),
    "preflight": ("capmaas.preflight", "check that capmaas can use a MAAS and its credentials"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the module of ``command`` (the one being run) is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog="capmaas", description="capmaas: Cluster API provider for MAAS")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = args_list[0] if args_list and args_list[0] in COMMANDS else None
    args = build_parser(command).parse_args(args_list)
    result: int = importlib.import_module(args._module).run(args)
    return result
