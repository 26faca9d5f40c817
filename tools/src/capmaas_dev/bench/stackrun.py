"""How every benchmark mode runs on its stack: a failure of the stack's parts is said in one line and exits 1,
Ctrl-C exits 130, and the stack is always closed."""

from __future__ import annotations

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
