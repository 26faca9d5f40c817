"""Coverage gate: the MAAS client and the simulator must stay at or above 90 % line+branch coverage.

Reads the .coverage data that `pytest --cov` wrote and fails (exit 1) naming the package under the bar.
"""

from __future__ import annotations

import sys

import coverage

GATES = {"capmaas/maas/": 90.0, "capmaas_dev/simulator/": 90.0}
EXCLUDE = ("capmaas_dev/simulator/bench.py",)


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    data = cov.get_data()
    failed = False
    for prefix, bar in GATES.items():
        files = [f for f in data.measured_files() if prefix in f and not f.endswith(EXCLUDE)]
        if not files:
            print(f"coverage gate: no data for {prefix}", file=sys.stderr)
            failed = True
            continue
        total = cov.report(include=files, file=open("/dev/null", "w"))  # noqa: SIM115
        status = "ok" if total >= bar else "BELOW"
        print(f"coverage gate: {prefix:<22} {total:5.1f}% (bar {bar:.0f}%) {status}")
        failed |= total < bar
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
