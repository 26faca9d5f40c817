"""The benchmark harness's own CPU: the benchmark process less its MAAS simulator thread."""

from __future__ import annotations

import os
import threading
import time

from capmaas_dev.bench.metrics import HarnessCpu, cpu_seconds_of, proc_stats, thread_cpu_seconds


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_seconds_is_that_threads_alone() -> None:
    started, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def busy() -> None:
        tid.append(threading.get_native_id())
        started.set()
        _spin(0.3)
        done.wait(10)

    t = threading.Thread(target=busy)
    t.start()
    started.wait(10)
    before = thread_cpu_seconds(os.getpid(), tid[0])
    while t.is_alive() and thread_cpu_seconds(os.getpid(), tid[0]) - before < 0.2:
        time.sleep(0.01)
    spent = thread_cpu_seconds(os.getpid(), tid[0]) - before
    done.set()
    t.join()
    assert spent >= 0.2
    assert proc_stats(os.getpid()).cpu_seconds >= spent


def test_harness_cpu_leaves_the_simulator_thread_out() -> None:
    started, go, done, finish = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    tid: list[int] = []

    def simulator() -> None:
        tid.append(threading.get_native_id())
        started.set()
        go.wait(10)
        _spin(0.4)
        done.set()
        finish.wait(10)  # alive while it is measured, as the benchmark's simulator is

    t = threading.Thread(target=simulator)
    t.start()
    started.wait(10)
    before = HarnessCpu.now(tid[0], watch_tid=threading.get_native_id())
    go.set()
    _spin(0.1)  # the harness's own work, on this thread
    done.wait(10)
    after = HarnessCpu.now(tid[0], watch_tid=threading.get_native_id())
    finish.set()
    t.join()
    assert after.simulator - before.simulator >= 0.35
    assert after.process - before.process >= 0.45
    # The harness is the process less the simulator: this thread's 0.1 s is in it, the simulator's 0.4 s not.
    harness = after.harness_since(before)
    assert harness >= 0.05
    assert harness <= (after.process - before.process) - 0.35
    assert (
        after.watch - before.watch >= 0.05
    )  # the thread named as the watch: this one, a part of the harness


def test_cpu_seconds_of_named_processes() -> None:
    _spin(0.05)
    out = cpu_seconds_of({"this": os.getpid()})
    assert list(out) == ["this"]
    assert out["this"] >= 0.05
