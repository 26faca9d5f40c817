"""The ``capmaas`` command's sub-commands: the product's own, plus those the development tools (capmaas-dev)
register through the entry point group ``capmaas.commands``; the product never imports the tools to know them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from capmaas import cli
from capmaas_dev import commands


def test_the_tools_commands_come_from_their_entry_point() -> None:
    table = cli.commands()
    assert list(table)[:2] == ["run", "preflight"]  # the product's first
    for name in ("simulate", "demo", "dev-cluster", "crds"):
        assert table[name] == commands.COMMANDS[name]
        assert table[name][0].startswith("capmaas_dev.")
    assert not any(module.startswith("capmaas_dev") for module, _ in cli.COMMANDS.values())


def test_listing_the_commands_imports_no_tool() -> None:
    """``capmaas --help`` (and so every command's start) loads the tools' table only, not the tools."""
    code = (
        "import json, sys; from capmaas import cli; cli.build_parser(); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('capmaas'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["capmaas", "capmaas.cli", "capmaas_dev", "capmaas_dev.commands"]
