#!/usr/bin/env bash
# `make test`: everything CI runs, one phase after another, each timed; a table of the phases (and of the test
# groups) is printed at the end, also when a phase fails (the table then says which).
#
# Phases: venv, controlplane (Go tools), node (kubelet, kube-scheduler, pause, apt packages), browser (Debian's
# Chromium for the site check), image (the operator image), verify (CRD drift), lint (ruff, mypy, import
# contracts), tests (the whole suite, on pytest-xdist workers), coverage gate. Each build phase
# is idempotent (it skips what is already built) and restartable (its outputs are renamed into place when
# complete), so running `make test` again after an interrupted or failed run carries on.
#
# Coverage: the gate (hack/coverage_gate.py) reads capmaas/maas/ and capmaas_dev/simulator/ only, so that is
# what the tests phase measures, and only in the tests that give those packages their coverage
# (tests/suite_plan.py, TRACED: tests/unit/maas, tests/unit/simulator, tests/conformance, tests/integration);
# every other test runs with coverage.py's tracer paused (pytest-cov's no_cover). Why: the run is CPU-bound on
# 2 cores, and on Python 3.11 the tracer is called for every Python call whether the code is measured or not:
# it doubled the CPU of the in-process tests (docs/benchmarks/test-durations.md). Every test still runs.
# `make coverage` (CAPMAAS_COVERAGE=all) is this script with every test traced and the whole product
# (capmaas, capmaas_dev) measured: the whole report, the same gate. Child processes (`capmaas run`, the
# operator zygote's forks, `capmaas demo`) are traced in neither.
#
# Environment: CAPMAAS_TEST_WORKERS (default 3: the tests mostly wait on timers, apiservers and subprocesses, so
# three workers pay on two cores; 0 runs them in this process, serially), PYTEST_ARGS (added to pytest's
# arguments), CAPMAAS_TEST_LOGS (default build/test-logs: pytest's output, the per-group times and the 20
# slowest tests are kept there), CAPMAAS_COVERAGE (`all`: every test traced, the whole product; `make coverage`).
set -uo pipefail
cd "$(dirname "$0")/.."
make=(make --no-print-directory)
workers=${CAPMAAS_TEST_WORKERS:-3}
logs=${CAPMAAS_TEST_LOGS:-build/test-logs}
mkdir -p "$logs"
export CAPMAAS_TEST_TIMES=$PWD/$logs/test-groups.json
rm -f "$CAPMAAS_TEST_TIMES" "$logs/timeline.json" "$logs/pytest.log" "$logs/slowest-20.txt"  # nothing of an earlier run in the table

phases=()
failed=
start=$SECONDS
busy() { # the box's busy CPU time so far, in clock ticks (/proc/stat: all but idle and iowait)
  awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat
}
phase() { # name command...: runs it, records its time and the box's CPU meanwhile; stops at the first failure
  local name=$1 t0=$SECONDS c0 rc cpu wall
  c0=$(busy)
  shift
  echo "=== make test: $name ==="
  "$@"
  rc=$?
  wall=$((SECONDS - t0))
  cpu=$((($(busy) - c0) / $(getconf CLK_TCK)))
  # busy %: of the wall time of every core (nproc); near 100 the phase is CPU-bound and more workers cannot help
  phases+=("$name $wall $cpu $((wall > 0 ? 100 * cpu / (wall * $(nproc)) : 0)) $([ $rc = 0 ] && echo ok || echo "FAILED($rc)")")
  [ $rc = 0 ] || { failed=$name; return 1; }
}

summary() {
  echo
  echo "=== make test: time per phase ==="
  echo "(box CPU: busy CPU seconds of the whole machine during the phase, on $(nproc) cores; busy: its share)"
  printf '%-16s %8s %8s %6s  %s\n' phase seconds 'box CPU' 'busy%' result
  for p in "${phases[@]}"; do
    # shellcheck disable=SC2086
    printf '%-16s %8s %8s %6s  %s\n' $p
  done
  printf '%-16s %8s\n' total $((SECONDS - start))
  if [ -s "$CAPMAAS_TEST_TIMES" ]; then
    echo
    echo "=== make test: time per test group (work: sum of test durations; span: first start to last end) ==="
    .venv/bin/python - "$CAPMAAS_TEST_TIMES" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
print(f"{'group':<22} {'tests':>6} {'work (s)':>9} {'span (s)':>9}")
for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["work_seconds"]):
    print(f"{name:<22} {r['tests']:>6} {r['work_seconds']:>9.1f} {r['span_seconds']:>9.1f}")
EOF
  fi
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  [ -z "$failed" ] || echo "make test: FAILED in phase $failed"
  # pytest's closing line last, for whoever reads the end of the output.
  [ ! -s "$logs/pytest.log" ] || grep -E '^(=+ )?[0-9]+ (passed|failed|error).* in [0-9.]+s' "$logs/pytest.log" | tail -1
}
trap summary EXIT

run_tests() {
  local dist=() cov=(--cov=capmaas.maas --cov=capmaas_dev.simulator)  # the gate's packages (coverage_gate.py)
  [ "$workers" = 0 ] || dist=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
  [ "${CAPMAAS_COVERAGE:-}" != all ] || cov=(--cov)  # pyproject's [tool.coverage.run] source: everything
  # shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
  .venv/bin/pytest "${dist[@]}" "${cov[@]}" --cov-report=term-missing:skip-covered -p no:cacheprovider \
    --durations=20 ${PYTEST_ARGS:-} 2>&1 | tee "$logs/pytest.log"
  local rc=${PIPESTATUS[0]}
  # The 20 slowest tests of this run, for docs/benchmarks (make test keeps the newest).
  sed -n '/slowest 20 durations/,/^$/p' "$logs/pytest.log" | sed '1d;/^$/d' >"$logs/slowest-20.txt"
  return "$rc"
}

phase venv "${make[@]}" venv &&
  phase controlplane "${make[@]}" controlplane &&
  phase node "${make[@]}" node &&
  phase browser "${make[@]}" browser-packages &&
  phase image "${make[@]}" image &&
  phase verify "${make[@]}" verify &&
  phase lint "${make[@]}" lint &&
  phase tests run_tests &&
  phase coverage-gate .venv/bin/python hack/coverage_gate.py
