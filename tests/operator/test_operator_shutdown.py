"""``capmaas run`` stops at once on SIGTERM: nothing of ours is left for kopf to wait on.

kopf gives every task still running after its cleanup five seconds before it cancels it ("hung" tasks, logged
at DEBUG). A stop flag the operator handed to kopf without ever setting it left kopf's own "stop-flag waiter"
hanging there, so every stop (a pod's termination, a demo's teardown) took five seconds longer than it had
to. No duration is asserted: kopf's DEBUG log says whether it had hung tasks to wait for.
"""

from __future__ import annotations

import pytest
from operator_harness import Harness

pytestmark = pytest.mark.k8s


async def test_sigterm_leaves_no_hung_task_behind(harness: Harness) -> None:
    h = harness
    h.operator.env["CAPMAAS_LOGGING__LEVEL"] = "DEBUG"
    h.operator.start()
    await h.cluster()  # running, watching, one MAAS session open

    async def cleaned_up() -> bool:
        return "Activity 'register.<locals>.shutdown' succeeded" in h.operator.log.read_text()

    proc = h.operator.proc
    assert proc is not None
    h.operator.stop()  # SIGTERM, then waits for the exit
    assert proc.returncode == 0
    assert await cleaned_up(), h.operator.tail()
    log = h.operator.log.read_text()
    hung = [line for line in log.splitlines() if "Hung tasks" in line]
    assert hung, "kopf logs how its hung-task stop went (no kopf DEBUG log?)\n" + h.operator.tail()
    assert all("Hung tasks stopping is skipped: no tasks given" in line for line in hung), hung
