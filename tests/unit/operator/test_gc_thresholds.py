"""The operator collects cyclic garbage less often than CPython's default (young collections after 10,000 new
container objects), and still collects it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from capmaas.operator.runtime import GC_THRESHOLDS, collect_less


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_the_runtime_collects_young_garbage_less_often_than_the_default() -> None:
    gc.set_threshold(700, 10, 10)
    collect_less()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700  # the default's young threshold
    assert GC_THRESHOLDS[1:] == (10, 10)  # the older generations as often, relative to it


@pytest.mark.usefixtures("thresholds")
def test_cycles_are_still_collected() -> None:
    collect_less()
    assert gc.isenabled()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    kept = [[] for _ in range(GC_THRESHOLDS[0] + 1)]  # enough new containers for a young collection
    assert gone() is None
    assert len(kept) > GC_THRESHOLDS[0]
