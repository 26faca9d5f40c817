"""``capmaas run`` keeps glibc's mmap threshold fixed (capmaas.operator.main._large_blocks_mapped): a large
block freed does not make the next ones of its size come from the heap, where what they leave free stays
resident (docs/scaling.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Run in a child process: the allocator's settings are the process's. Prints whether the second of two
# same-sized large blocks is a mapping of its own (glibc's mallinfo2: hblks) while it is alive.
_CHILD = """
import ctypes, sys
from capmaas.operator import main

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

info = ctypes.CDLL(None).mallinfo2
info.restype = Info
set_ = main._large_blocks_mapped() if sys.argv[1] == "fixed" else None
first = bytearray(4 << 20)
del first
before = info().hblks
second = bytearray(4 << 20)
print(set_, info().hblks > before)
"""


def _child(mode: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out.stdout.strip()


def _glibc() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(not _glibc(), reason="glibc's allocator only")
def test_a_large_block_freed_leaves_the_next_ones_mapped() -> None:
    assert _child("default") == "None False"  # glibc raised its threshold: the second came from the heap
    assert _child("fixed") == "True True"


@pytest.mark.skipif(not _glibc(), reason="glibc's allocator only")
def test_the_variable_set_by_hand_is_left_to_glibc() -> None:
    """A threshold above the blocks' size, set by the variable, stays: they come from the heap."""
    assert _child("fixed", MALLOC_MMAP_THRESHOLD_=str(16 << 20)) == "False False"
