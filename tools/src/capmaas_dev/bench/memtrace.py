"""``--memory DIR``: where the operator's memory is, at the benchmark's marks and at its peak.

``python -m capmaas_dev.bench.memtrace DIR FRAMES capmaas-args...`` (started by
:class:`capmaas_dev.bench.memory.MemoryTracedOperator`) runs ``capmaas`` in this process; with
``FRAMES`` above 0 under :mod:`tracemalloc` (that many frames per allocation, started before the operator's
first import). Each SIGUSR1 writes a *mark* to DIR: ``NN.json`` (VmRSS, ``/proc/self/smaps_rollup``, glibc's
``mallinfo2``, pymalloc's arenas) and, when traced, ``NN.snap`` (a tracemalloc snapshot). A thread writes
``peak.json``/``peak.snap`` whenever the process's memory (traced memory when traced, else VmRSS) passes its
last peak by :data:`PEAK_STEP`, and ``NN-peak.json``/``NN-peak.snap`` likewise for the peak since mark
``NN`` (each phase's own). The benchmark sends SIGUSR1 before its first create, at all Ready and once every
machine is released; it names the marks in ``marks.txt`` (one label a line, in order).

``python -m capmaas_dev.bench.memtrace report DIR [--top N] [--group traceback|lineno|filename]`` prints the
marks side by side and the largest holders of each snapshot, and what grew from the first mark to each later
one and to the peak. A traced process is slower and much larger than the real one (tracemalloc keeps a record
per block): read the shares, not the sizes; the untraced run (``FRAMES`` 0) gives the real sizes.

This module imports nothing of the benchmark or the demo: the operator process runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import io
import json
import os
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

#: Bytes the watched memory must pass its last recorded peak by before the peak is recorded again.
PEAK_STEP = 1 << 20
PEAK_POLL = 0.2


class _Mallinfo2(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, type[ctypes.c_size_t]]]] = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def mallinfo() -> dict[str, int]:
    """glibc's ``mallinfo2`` (every arena): ``arena`` bytes from the system by brk/arenas, ``hblkhd`` by
    mmap, ``uordblks`` in use, ``fordblks`` free but kept, ``keepcost`` releasable at the top. Empty when
    the C library has none."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return {}
    fn.restype = _Mallinfo2
    info = fn()
    return {name: int(getattr(info, name)) for name, _ in _Mallinfo2._fields_}


def pymalloc() -> dict[str, int]:
    """pymalloc's arenas and the bytes in its blocks, parsed from ``sys._debugmallocstats`` (written to the C
    stderr: read through a pipe). Empty under tracemalloc, which takes pymalloc's place."""
    read, write = os.pipe()
    saved = os.dup(2)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read, 65536), b"")))
    reader.start()
    try:
        os.dup2(write, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    reader.join()
    os.close(read)
    out: dict[str, int] = {}
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        name, sep, value = line.rpartition("=")
        if not sep:
            continue
        name, value = name.strip().strip("#").strip(), value.strip().replace(",", "")
        if value.isdigit() and name in (
            "arenas allocated total",
            "arenas reclaimed",
            "arenas highwater mark",
            "arenas allocated current",
            "bytes in allocated blocks",
            "bytes in available blocks",
            "bytes lost to pool headers",
            "bytes lost to quantization",
            "bytes lost to arena alignment",
            "Total",
        ):
            out[name] = int(value)
    return out


def proc_memory() -> dict[str, int]:
    """kB figures of ``/proc/self/status`` (VmRSS, VmHWM, RssAnon, RssFile) and ``smaps_rollup``."""
    out: dict[str, int] = {}
    for path, keys in (
        ("/proc/self/status", ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads")),
        ("/proc/self/smaps_rollup", ("Rss", "Pss", "Private_Dirty", "Anonymous", "Shared_Clean")),
    ):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = int(value.split()[0])
    return out


def bodies() -> dict[str, int]:
    """The Kubernetes object bodies the collector tracks (dicts with ``apiVersion``, ``kind`` and
    ``metadata``; garbage not yet collected included), by kind and deletion state."""
    found: dict[str, int] = {}
    for obj in gc.get_objects():
        if (
            type(obj) is dict
            and "apiVersion" in obj
            and "kind" in obj
            and isinstance(obj.get("metadata"), dict)
        ):
            state = "deleting" if obj["metadata"].get("deletionTimestamp") else "live"
            key = f"{obj['kind']} {state}"
            found[key] = found.get(key, 0) + 1
            if (sample := os.environ.get("MEMTRACE_SAMPLES")) and found[key] <= 2:
                with contextlib.suppress(TypeError, ValueError, OSError):
                    path = Path(sample) / f"{key.replace(' ', '-')}-{found[key]}.json"
                    path.write_text(json.dumps(obj, indent=1, default=str))
    return found


def _traced_bytes() -> int:
    return tracemalloc.get_traced_memory()[0]


def _rss_bytes() -> int:
    return proc_memory().get("VmRSS", 0) * 1024


class _Recorder:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.marks = 0
        self.phase: str | None = None
        self.lock = threading.Lock()

    def write(self, name: str) -> None:
        with self.lock:
            figures: dict[str, Any] = {
                "time": time.time(),
                "proc_kb": proc_memory(),
                "mallinfo2": mallinfo(),
                "pymalloc": pymalloc(),
            }
            if os.environ.get("MEMTRACE_BODIES"):
                figures["bodies"] = bodies()
            if os.environ.get("MEMTRACE_COLLECT"):
                # Diagnostic, and it changes the process: what a full collection frees at this mark.
                before = proc_memory()
                figures["gc"] = {"counts": gc.get_count(), "collected": gc.collect(), "stats": gc.get_stats()}
                figures["gc"]["rss_kb_before_after"] = [before.get("VmRSS"), proc_memory().get("VmRSS")]
                figures["gc"]["pymalloc_after"] = pymalloc()
                if os.environ.get("MEMTRACE_BODIES"):
                    figures["bodies_after_collect"] = bodies()
            if tracemalloc.is_tracing():
                current, peak = tracemalloc.get_traced_memory()
                figures["traced"] = {"current": current, "peak": peak}
                tmp = self.out / f"{name}.snap.tmp"
                tracemalloc.take_snapshot().dump(str(tmp))
                tmp.rename(self.out / f"{name}.snap")
            tmp = self.out / f"{name}.json.tmp"
            tmp.write_text(json.dumps(figures, indent=1))
            tmp.rename(self.out / f"{name}.json")  # last: the benchmark waits for it

    def mark(self, _sig: int, _frame: FrameType | None) -> None:
        name = f"{self.marks:02d}"
        self.marks += 1
        self.phase = None  # the peak watcher starts this mark's phase (see watch_peak)
        threading.Thread(target=self.write, args=(name,), daemon=True).start()

    def watch_peak(self) -> None:
        """Writes ``peak`` whenever the memory passes its last recorded peak, and ``NN-peak`` whenever it
        passes the last one recorded since mark ``NN`` (each phase's own peak: the deletion's burst after
        the all-Ready mark, though lower than the start-up's)."""
        measure = _traced_bytes if tracemalloc.is_tracing() else _rss_bytes
        best = measure()
        phase_best = 0
        while True:
            time.sleep(PEAK_POLL)
            now = measure()
            if self.phase is None and self.marks:
                self.phase, phase_best = f"{self.marks - 1:02d}-peak", now
            if now > best + PEAK_STEP:
                best = now
                self.write("peak")
            if self.phase is not None and now > phase_best + PEAK_STEP:
                phase_best = now
                self.write(self.phase)


def run(argv: list[str]) -> int:
    out, frames = Path(argv[0]), int(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if frames > 0:
        tracemalloc.start(frames)
    recorder = _Recorder(out)
    signal.signal(signal.SIGUSR1, recorder.mark)
    threading.Thread(target=recorder.watch_peak, name="memtrace peak", daemon=True).start()
    from capmaas.cli import main as capmaas_main

    return capmaas_main(argv[2:])


def _mb(n: float) -> str:
    return f"{n / 1e6:8.2f}"


def report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m capmaas_dev.bench.memtrace report")
    p.add_argument("dir", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--group", default="traceback", choices=("traceback", "lineno", "filename"))
    p.add_argument("--frames", type=int, default=4, help="frames printed per traceback")
    args = p.parse_args(argv)
    d: Path = args.dir
    labels = (d / "marks.txt").read_text().splitlines() if (d / "marks.txt").exists() else []
    names = sorted(x.stem for x in d.glob("[0-9][0-9]*.json")) + (
        ["peak"] if (d / "peak.json").exists() else []
    )
    buf = io.StringIO()
    for name in names:
        fig = json.loads((d / f"{name}.json").read_text())
        label = _label(name, labels)
        proc, mi, pm = fig["proc_kb"], fig["mallinfo2"], fig["pymalloc"]
        traced = fig.get("traced", {}).get("current", 0)
        rss, anon, files = (proc.get(k, 0) / 1024 for k in ("VmRSS", "RssAnon", "RssFile"))
        buf.write(
            f"{name:>7} {label:>22}: VmRSS {rss:6.1f} MB (anon {anon:.1f}, file {files:.1f}),"
            f" threads {proc.get('Threads')}; malloc in use {_mb(mi.get('uordblks', 0))}"
            f" free kept {_mb(mi.get('fordblks', 0))} mmapped {_mb(mi.get('hblkhd', 0))};"
            f" pymalloc arenas {pm.get('arenas allocated current', 0)}"
            f" (blocks {_mb(pm.get('bytes in allocated blocks', 0))},"
            f" free {_mb(pm.get('bytes in available blocks', 0))}); traced {_mb(traced)} MB\n"
        )
    print(buf.getvalue())
    snaps = {n: d / f"{n}.snap" for n in names if (d / f"{n}.snap").exists()}
    if not snaps:
        return 0
    loaded = {n: tracemalloc.Snapshot.load(str(path)) for n, path in snaps.items()}
    first = next(iter(loaded))
    for name, snap in loaded.items():
        print(f"=== {name}: top {args.top} by {args.group}")
        _print_stats(snap.statistics(args.group), args.top, args.frames)
        if name != first:
            print(f"=== {name} against {first}: top {args.top} growth")
            _print_stats(snap.compare_to(loaded[first], args.group), args.top, args.frames)
    return 0


def _label(name: str, labels: list[str]) -> str:
    """A mark's label from ``marks.txt``; ``NN-peak`` is the peak after mark ``NN``."""
    number, _, peak = name.partition("-")
    if not number.isdigit() or int(number) >= len(labels):
        return name
    return f"peak after {labels[int(number)]}" if peak else labels[int(number)]


def _print_stats(stats: list[Any], top: int, frames: int) -> None:
    total = sum(s.size for s in stats)
    print(f"total {_mb(total)} MB in {sum(s.count for s in stats)} blocks")
    for s in stats[:top]:
        diff = (
            f" ({'+' if s.size_diff >= 0 else ''}{s.size_diff / 1e6:.2f})" if hasattr(s, "size_diff") else ""
        )
        print(f"{_mb(s.size)} MB{diff} {s.count:8d} blocks")
        for line in s.traceback.format(limit=frames, most_recent_first=True)[::2]:
            print("      " + line.strip())


def main(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        return report(argv[1:])
    return run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
