"""How every benchmark mode runs on its stack: a failure of the stack's parts is said in one line and exits 1,
Ctrl-C exits 130, and the stack is always closed."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from capmaas_dev.demo.capi import CapiError
from capmaas_dev.demo.stack import Stack, StackError
from capmaas_dev.devcluster import MissingToolError, StartError


def run_on_stack(stack: Stack, run: Callable[[Stack], int], say: Callable[[str], None]) -> int:
    try:
        return run(stack)
    except (StackError, CapiError, MissingToolError, StartError) as exc:
        say(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
        return 130
    finally:
        stack.close()


def phase_timeout(args: argparse.Namespace, n: int) -> float:
    """How long a benchmark waits for ``n`` machines to reach Ready (or to go): ``--timeout``, else half a
    second a machine, at least two minutes, plus three MAAS deploys."""
    return float(args.timeout or max(120.0, n * 0.5 + args.deploy_seconds * 3))
