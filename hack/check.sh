#!/usr/bin/env bash
# `make check`: the inner loop, under 90 s on 2 cores. The lint phase (ruff, ruff format, mypy strict, the
# import contracts, the CRD drift check) runs beside the tests that need no Kubernetes binaries and are not
# marked slow (unit, the client against the simulator, conformance shapes, the demo's and the security
# helpers' own logic), on three pytest-xdist workers: those tests wait on timers about as much as they compute,
# so a third worker on two cores pays (figures in docs/dev/CONTRIBUTING.md). Needs only the venv: no Go tools,
# no image.
# `make test` remains the one command that runs everything.
#
#   PYTEST_ARGS: added to pytest's arguments (e.g. PYTEST_ARGS="-x")
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
logs=build/test-logs
mkdir -p "$logs"
start=$SECONDS

lint() {
  local t0=$SECONDS rc=0
  "$bin/ruff" check src tools/src tests || rc=1
  "$bin/ruff" format --check src tools/src tests || rc=1
  "$bin/mypy" || rc=1
  "$bin/lint-imports" || rc=1
  "$bin/capmaas" crds --check --out crds --chart-dir deploy/charts/capmaas || rc=1
  echo "lint finished in $((SECONDS - t0))s"
  return $rc
}

lint >"$logs/check-lint.log" 2>&1 &
lint_pid=$!

t0=$SECONDS
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
"$bin/pytest" -n "${CAPMAAS_CHECK_WORKERS:-3}" -m "not k8s and not slow and not e2e" -q -p no:cacheprovider \
  --ignore=tests/k8s --ignore=tests/e2e --ignore=tests/operator --ignore=tests/pod \
  ${PYTEST_ARGS:-}
tests_rc=$?
tests_time=$((SECONDS - t0))

wait "$lint_pid"
lint_rc=$?
echo "=== lint ==="
tail -n 40 "$logs/check-lint.log"
echo "=== make check: tests $tests_time s ($([ $tests_rc = 0 ] && echo ok || echo FAILED))," \
  "lint $([ $lint_rc = 0 ] && echo ok || echo FAILED), total $((SECONDS - start)) s," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) ==="
[ $tests_rc = 0 ] && [ $lint_rc = 0 ]
