#!/usr/bin/env bash
# Line and branch coverage of the tests/ run, the broker subprocesses (and their store
# writer children) included, then the total. Extra arguments go to pytest instead of
# the default, which is scripts/test.sh's run: "-n 3 --dist load --no-loadscope-reorder
# tests" (e.g. `bash scripts/coverage.sh tests/broker`).
#
# Configuration is [tool.coverage.*] in pyproject.toml: `patch = ["subprocess", "_exit"]`
# makes every Python child that inherits the environment measure itself (through the
# .pth file coverage installs, inert unless COVERAGE_PROCESS_CONFIG is set) and save its
# data even when it leaves through os._exit. A broker stopped with kill -9 saves nothing:
# what only a crashed process ran is not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VENV_PYTHON:-.venv/bin/python}
DATA_DIR=${COVERAGE_DIR:-$PWD/.coverage-data}
rm -rf "$DATA_DIR"
mkdir -p "$DATA_DIR"
export COVERAGE_FILE=$DATA_DIR/.coverage
export AMQPLITE_PG_REQUIRED=${AMQPLITE_PG_REQUIRED:-1}
status=0
[ $# -gt 0 ] || set -- -n "${PYTEST_WORKERS:-3}" --dist load --no-loadscope-reorder tests
"$PY" -m coverage run -m pytest -q -p no:cacheprovider "$@" || status=$?
# a process killed while saving leaves an unreadable file: combine skips it and says so
"$PY" -m coverage combine -q "$DATA_DIR" || [ -f "$COVERAGE_FILE" ]
"$PY" -m coverage report --precision=1 --sort=cover --skip-covered | tail -40
"$PY" -m coverage json -q -o "$DATA_DIR/coverage.json"
"$PY" - "$DATA_DIR/coverage.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
print(f"line+branch {t['percent_covered']:.2f}%: statements {t['num_statements']}, "
      f"missed {t['missing_lines']}; branches {t['num_branches']}, partial "
      f"{t['num_partial_branches']}, missed {t['missing_branches']}")
PYEOF
exit $status
