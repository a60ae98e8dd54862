#!/usr/bin/env bash
# Install what the tests need (venv, Python packages, Java + SQLite JDBC for the
# Spark audit job, RabbitMQ and Mosquitto for the conformance references) and run
# every suite: lint, unit/integration, Spark, and the conformance suite against a
# throwaway RabbitMQ node (AMQP part) and a throwaway Mosquitto (MQTT part, in
# conformance/mqtt/), with conformance/stomp against RabbitMQ's STOMP plugin, then
# every part against a freshly started amqplite.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
[ -f /usr/share/java/sqlite-jdbc.jar ] || need_apt+=(libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni)
# the reference broker for the conformance suite (Debian 12 ships 3.10.8)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need_apt+=(rabbitmq-server)
# a throwaway PostgreSQL cluster for the PostgreSQL store tests (tests/pg_server.py)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
# promtool checks a real /metrics scrape (tests/admin/test_metrics.py)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
# a headless browser for the dashboard tests (tests/admin/test_dashboard.py)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
command -v mosquitto_sub >/dev/null 2>&1 || need_apt+=(mosquitto-clients)
# Kafka's own command-line client for the Kafka front's tests (tests/server/test_kafka_clients.py)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
# the reference broker for conformance/mqtt (Debian 12 ships 2.0.11); started below
# as a throwaway process on its own port, never as the system service
[ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "== installing Debian packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "== missing Debian packages (need root to install): ${need_apt[*]}" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
echo "== installing amqplite[dev,audit]"
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e ".[dev,audit]"

# The suite runs against the compiled build: the hot path compiled with mypyc in
# place (.so files beside the .py files, which Python prefers), so the tests and
# the brokers they start as subprocesses all run it. The editable install above is
# pure Python (setup.py); the compiled files are removed on exit, so a later edit
# of a .py file is never shadowed by a stale extension.
COMPILE_JOB=""
remove_compiled() {
  [ -z "$COMPILE_JOB" ] || kill "$COMPILE_JOB" 2>/dev/null || true
  find amqplite -name '*.so' -delete
}
trap remove_compiled EXIT
# The compile (one large C file: one core for 2-4 minutes) runs in the background
# while lint, type checks and the pure-build pass use the other core.
echo "== compiling the hot path with mypyc (in place, in the background)"
remove_compiled
COMPILE_LOG=$(mktemp)
started=$(date +%s)
AMQPLITE_COMPILE=1 .venv/bin/python setup.py -q build_ext --inplace -j 2 >"$COMPILE_LOG" 2>&1 &
COMPILE_JOB=$!

if command -v npm >/dev/null 2>&1; then
  echo "== installing Node.js amqplib and MQTT.js for the client tests"
  npm install --silent --no-audit --no-fund --prefix tests/node >/dev/null 2>&1 \
    || echo "   (npm install failed: the amqplib and MQTT.js tests will be skipped)"
fi

echo "== ruff"
.venv/bin/ruff check amqplite tests conformance scripts

echo "== mypy"
.venv/bin/mypy amqplite

echo "== core and unit tests against the pure build (AMQPLITE_PURE=1)"
# the same tree, its .py sources imported instead of the compiled modules (by the
# brokers these tests start too: they inherit the variable), so neither build's bugs
# land; it runs while the compile goes on
AMQPLITE_PURE=1 .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 \
  tests/broker tests/protocol tests/sessions tests/test_layers.py

# The conformance runs share one cleanup: whatever was started is stopped on any
# exit, success or not.
RABBIT_DIR=""
RABBIT_OUT=""
RABBIT_JOB=""
MOSQ_DIR=""
MOSQ=""
DATA=""
BROKER=""
CONF_OUT=""
CONF_JOB=""
# stop_job PID: a background run and its timeout(1) children (which pass the signal on)
stop_job() {
  pkill -P "$1" 2>/dev/null || true
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  if [ -n "$MOSQ" ]; then
    kill "$MOSQ" 2>/dev/null || true
    wait "$MOSQ" 2>/dev/null || true
  fi
  [ -z "$MOSQ_DIR" ] || rm -rf "$MOSQ_DIR"
  if [ -n "$RABBIT_JOB" ]; then
    stop_job "$RABBIT_JOB"
    [ -z "$RABBIT_OUT" ] || cat "$RABBIT_OUT"
  fi
  [ -z "$RABBIT_OUT" ] || rm -f "$RABBIT_OUT"
  if [ -n "$RABBIT_DIR" ]; then
    bash scripts/rabbitmq.sh stop "$RABBIT_DIR" || true
    rm -rf "$RABBIT_DIR"
  fi
  if [ -n "$CONF_JOB" ]; then
    stop_job "$CONF_JOB"
    [ -z "$CONF_OUT" ] || cat "$CONF_OUT"
  fi
  [ -z "$CONF_OUT" ] || rm -f "$CONF_OUT"
  if [ -n "$BROKER" ]; then
    kill "$BROKER" 2>/dev/null || true
    wait "$BROKER" 2>/dev/null || true
  fi
  [ -z "$DATA" ] || rm -rf "$DATA"
  remove_compiled
}
trap cleanup EXIT

# wait_listening PORT WHAT: until something accepts on 127.0.0.1:PORT (30 s at most)
wait_listening() {
  .venv/bin/python - "$1" "$2" <<'PYEOF'
import socket, sys, time
deadline = time.monotonic() + 30
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"{sys.argv[2]} did not start listening within 30 s")
        time.sleep(0.1)
PYEOF
}

# The suite claims RabbitMQ's behaviour: prove it against a real RabbitMQ. No skip:
# if RabbitMQ cannot be installed or started, this run fails. The reference runs
# (RabbitMQ, then Mosquitto) import nothing of amqplite, so they run while the
# compile finishes, on the core the pure-build pass has left; RabbitMQ's in the
# background beside Mosquitto's (separate servers, ports and clients), waited for
# after the compiled suite.
echo "== conformance against RabbitMQ (in the background)"
RABBIT_DIR=$(mktemp -d)
RABBIT_OUT=$(mktemp)
# Fixed ports below the kernel's ephemeral range (32768-60999 on Linux) and outside
# the test brokers' range (tests/brokerproc.py leaves 25700-25999 out), so no
# client socket or test broker can be holding them.
RABBIT_PORT=${CONFORMANCE_RABBIT_PORT:-25730}
# its management API: conformance sets topic permissions through it
RABBIT_MGMT_PORT=${CONFORMANCE_RABBIT_MGMT_PORT:-25731}
# its STOMP plugin (rabbitmq_stomp): the reference for conformance/stomp
export RABBITMQ_STOMP_PORT=${CONFORMANCE_RABBIT_STOMP_PORT:-25732}
(
  started=$(date +%s)
  bash scripts/rabbitmq.sh start "$RABBIT_DIR" "$RABBIT_PORT" "$RABBIT_MGMT_PORT"
  echo "   RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null) up on port" \
    "$RABBIT_PORT after $(( $(date +%s) - started )) s"
  AMQP_URL="amqp://guest:guest@127.0.0.1:$RABBIT_PORT/%2F" \
  MANAGEMENT_URL="http://127.0.0.1:$RABBIT_MGMT_PORT" STOMP_PORT=$RABBITMQ_STOMP_PORT \
    timeout 900 .venv/bin/python -m pytest -q -p no:cacheprovider conformance \
    --ignore=conformance/mqtt \
    || { echo "--- RabbitMQ log"; tail -50 "$RABBIT_DIR/log/node.log" || true; exit 1; }
  bash scripts/rabbitmq.sh stop "$RABBIT_DIR"
) >"$RABBIT_OUT" 2>&1 &
RABBIT_JOB=$!

# The MQTT part claims the specification as Mosquitto implements it: prove it
# against a throwaway Mosquitto (no persistence, loopback only): an anonymous
# listener, and a second one with a password file (guest/guest) for test_auth.py.
echo "== conformance/mqtt against Mosquitto"
MOSQ_DIR=$(mktemp -d)
MOSQ_PORT=${CONFORMANCE_MOSQUITTO_PORT:-25740}
MOSQ_AUTH_PORT=${CONFORMANCE_MOSQUITTO_AUTH_PORT:-25741}
# Mosquitto started as root reads the password file after dropping to its own user
chmod 755 "$MOSQ_DIR"
touch "$MOSQ_DIR/passwd"
mosquitto_passwd -b "$MOSQ_DIR/passwd" guest guest
chmod 644 "$MOSQ_DIR/passwd"
printf '%s\n' "per_listener_settings true" "persistence false" "log_dest stderr" \
  "listener $MOSQ_PORT 127.0.0.1" "allow_anonymous true" \
  "listener $MOSQ_AUTH_PORT 127.0.0.1" "allow_anonymous false" \
  "password_file $MOSQ_DIR/passwd" >"$MOSQ_DIR/mosquitto.conf"
/usr/sbin/mosquitto -c "$MOSQ_DIR/mosquitto.conf" >"$MOSQ_DIR/mosquitto.log" 2>&1 &
MOSQ=$!
wait_listening "$MOSQ_PORT" "Mosquitto"
wait_listening "$MOSQ_AUTH_PORT" "Mosquitto's password listener"
echo "   Mosquitto $(dpkg-query -W -f='${Version}' mosquitto 2>/dev/null) up on port $MOSQ_PORT"
MQTT_PORT=$MOSQ_PORT MQTT_AUTH_PORT=$MOSQ_AUTH_PORT \
  timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider conformance/mqtt \
  || { echo "--- Mosquitto log"; tail -50 "$MOSQ_DIR/mosquitto.log"; exit 1; }
kill "$MOSQ"
wait "$MOSQ" 2>/dev/null || true
MOSQ=""
rm -rf "$MOSQ_DIR"
MOSQ_DIR=""

if ! wait "$COMPILE_JOB"; then
  cat "$COMPILE_LOG"
  echo "the mypyc build failed" >&2
  exit 1
fi
rm -f "$COMPILE_LOG"
COMPILE_JOB=""
echo "   $(.venv/bin/amqplite --version), built in $(( $(date +%s) - started )) s"

# The same conformance suite against amqplite's compiled build, in the background
# beside the compiled suite: its broker listens on fixed ports that no test broker
# takes (25720-25723), and most of its time is round trips, not CPU.
echo "== conformance against amqplite (in the background)"
DATA=$(mktemp -d)
CONF_OUT=$(mktemp)
PORT=${CONFORMANCE_PORT:-25720}
ADMIN_PORT=${CONFORMANCE_ADMIN_PORT:-25721}
AMQPLITE_MQTT=${CONFORMANCE_MQTT_PORT:-25722}
AMQPLITE_STOMP=${CONFORMANCE_STOMP_PORT:-25723}
.venv/bin/amqplite serve --host 127.0.0.1 --port "$PORT" --data-dir "$DATA" \
  --admin-port "$ADMIN_PORT" --mqtt-port "$AMQPLITE_MQTT" --no-mqtt-allow-anonymous \
  --stomp-port "$AMQPLITE_STOMP" --kafka-port 0 --log-level warning \
  >"$DATA/broker.log" 2>&1 &
BROKER=$!
wait_listening "$PORT" "amqplite"
wait_listening "$AMQPLITE_MQTT" "amqplite's MQTT listener"
wait_listening "$AMQPLITE_STOMP" "amqplite's STOMP listener"
(
  AMQP_URL="amqp://guest:guest@127.0.0.1:$PORT/%2F" \
  MANAGEMENT_URL="http://127.0.0.1:$ADMIN_PORT" STOMP_PORT=$AMQPLITE_STOMP \
    timeout 900 .venv/bin/python -m pytest -q -p no:cacheprovider conformance \
    --ignore=conformance/mqtt \
    || { echo "--- broker log"; tail -50 "$DATA/broker.log"; exit 1; }
  echo "== conformance/mqtt against amqplite"
  MQTT_PORT=$AMQPLITE_MQTT MQTT_USERNAME=guest MQTT_PASSWORD=guest \
    timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider conformance/mqtt \
    || { echo "--- broker log"; tail -50 "$DATA/broker.log"; exit 1; }
) >"$CONF_OUT" 2>&1 &
CONF_JOB=$!

echo "== tests (unit, integration, spark) against the compiled build"
# the PostgreSQL tests fail here rather than skip when PostgreSQL is missing
export AMQPLITE_PG_REQUIRED=1
# Three pytest-xdist workers on two cores: most tests wait on a broker subprocess, a
# JVM or a socket rather than compute. tests/conftest.py groups the work (one module,
# all Spark tests, all PostgreSQL tests: one worker each) and puts slow groups first.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-3}" \
  --dist load --no-loadscope-reorder tests

# collect JOB_VAR OUT_VAR WHAT: wait for a background conformance run, print its
# output, fail if it failed (the job's variable is cleared first: cleanup leaves it be)
collect() {
  local job=${!1} out=${!2} status=0
  wait "$job" || status=$?
  printf -v "$1" '%s' ""
  cat "$out"
  [ "$status" = 0 ] || { echo "conformance against $3 failed ($status)"; exit 1; }
}

echo "== conformance against RabbitMQ (its output)"
collect RABBIT_JOB RABBIT_OUT RabbitMQ
rm -rf "$RABBIT_DIR" "$RABBIT_OUT"
RABBIT_DIR=""
RABBIT_OUT=""

echo "== conformance against amqplite (its output)"
collect CONF_JOB CONF_OUT amqplite
