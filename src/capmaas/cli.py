"""The `capmaas` command line: one sub-command per job, each owned by the module that does the job.

    capmaas run          the operator (kopf)                       -> capmaas.operator.main
    capmaas preflight    check a MAAS and its credentials          -> capmaas.preflight

Each owner module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only for
the sub-command being run, so configuration is never built at import time and `capmaas preflight` never
imports kopf.

Other installed distributions add sub-commands through the entry point group ``capmaas.commands``: each entry
point loads a table of the same shape as :data:`COMMANDS`. The development tools (distribution
``capmaas-dev``, package ``capmaas_dev``; installed by ``make venv``, never in the image) add

    capmaas crds         write / check the generated CRD YAML      -> capmaas_dev.crdgen
    capmaas simulate     serve the MAAS simulator                  -> capmaas_dev.simulator.serve
    capmaas dev-cluster  local kube-apiserver + etcd (up/down/env) -> capmaas_dev.devcluster.cli
    capmaas demo         the whole system on the embedded default  -> capmaas_dev.demo

so the product never imports its tooling (import contract), and an image without it has no such commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("capmaas.operator.main", "run the operator against the current kubeconfig"),
    "preflight": ("capmaas.preflight", "check that capmaas can use a MAAS and its credentials"),
}
#: The entry point group through which other distributions add sub-commands (a table like COMMANDS).
COMMANDS_GROUP = "capmaas.commands"


def commands() -> dict[str, tuple[str, str]]:
    """The product's commands and those the installed distributions add; a product command's name is never
    taken over by an added one."""
    found: dict[str, tuple[str, str]] = {}
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        table = ep.load()
        if not isinstance(table, dict):
            raise TypeError(f"entry point {ep.name} = {ep.value} ({COMMANDS_GROUP}): not a table of commands")
        for name, (module, help_text) in table.items():
            found.setdefault(str(name), (str(module), str(help_text)))
    return {**COMMANDS, **{name: found[name] for name in found if name not in COMMANDS}}


def build_parser(
    command: str | None = None, table: dict[str, tuple[str, str]] | None = None
) -> argparse.ArgumentParser:
    """The parser of ``table`` (default: :func:`commands`); only the module of ``command`` (the one being run)
    is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog="capmaas", description="capmaas: Cluster API provider for MAAS")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in (commands() if table is None else table).items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    table = commands()
    command = args_list[0] if args_list and args_list[0] in table else None
    args = build_parser(command, table).parse_args(args_list)
    result: int = importlib.import_module(args._module).run(args)
    return result
