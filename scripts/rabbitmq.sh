#!/usr/bin/env bash
# A throwaway RabbitMQ node for the conformance suite: its own node name, ports,
# epmd, mnesia and logs in one directory, loopback only, so it never
# clashes with a system RabbitMQ or with another run on the same machine. The
# one plugin enabled is rabbitmq_recent_history_exchange (conformance covers the
# x-recent-history exchange type); it opens no port. With a third argument the
# management plugin listens on 127.0.0.1:MGMT_PORT too (conformance sets topic
# permissions through the HTTP API, which amqplite serves in the same shape).
#
#   scripts/rabbitmq.sh start DIR PORT [MGMT_PORT]  # returns once the node accepts AMQP
#   scripts/rabbitmq.sh stop DIR         # SIGTERM, bounded wait, then SIGKILL
#   scripts/rabbitmq.sh ctl DIR ARGS...  # rabbitmqctl against that node
#
# More plugins: RABBITMQ_EXTRA_PLUGINS (an Erlang list's items, e.g.
# "rabbitmq_shovel,rabbitmq_shovel_management" for the shovel benchmark).
#
# RABBITMQ_MQTT_PORT=N also enables rabbitmq_mqtt with its listener on
# 127.0.0.1:N (scripts/bench_mqtt.py); without it no MQTT port opens (the
# plugin's default, 1883, would collide with a system Mosquitto or amqplite).
# RABBITMQ_STOMP_PORT=N likewise enables rabbitmq_stomp on 127.0.0.1:N (the
# plugin's default, 61613, is amqplite's STOMP port too).
#
# Installs the Debian package when it is missing (needs root). Every failure
# exits non-zero with the reason and the node's log: a conformance run against
# RabbitMQ must never be skipped silently.
set -euo pipefail

RMQ_BIN=/usr/lib/rabbitmq/bin
START_DEADLINE=${RABBITMQ_START_DEADLINE:-90}
STOP_DEADLINE=${RABBITMQ_STOP_DEADLINE:-30}

die() {
  echo "rabbitmq.sh: $*" >&2
  exit 1
}

install_rabbitmq() {
  [ -x "$RMQ_BIN/rabbitmq-server" ] && return 0
  [ "$(id -u)" = 0 ] || die "rabbitmq-server is not installed and installing it needs root"
  echo "== installing rabbitmq-server (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    rabbitmq-server >/dev/null
  [ -x "$RMQ_BIN/rabbitmq-server" ] || die "rabbitmq-server still missing after apt-get install"
  # The package may start the system service; this script never uses it.
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

node_env() {
  # Everything the node reads comes from DIR (and the state file written by start).
  local dir=$1
  # shellcheck disable=SC1091
  . "$dir/ports"
  export HOME=$dir  # the Erlang cookie lives here
  export RABBITMQ_NODENAME="amqplite-conf-$NODE_TAG@localhost"
  export RABBITMQ_USE_LONGNAME=false
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=$AMQP_PORT
  export RABBITMQ_DIST_PORT=$DIST_PORT
  export ERL_EPMD_PORT=$EPMD_PORT
  export ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_MNESIA_BASE=$dir/mnesia
  export RABBITMQ_LOG_BASE=$dir/log
  export RABBITMQ_LOGS=$dir/log/node.log
  export RABBITMQ_PID_FILE=$dir/node.pid
  export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
  export RABBITMQ_PLUGINS_EXPAND_DIR=$dir/plugins-expand
  export RABBITMQ_CONFIG_FILE=$dir/rabbitmq  # .conf is appended
  export RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
  export RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
  export ERL_CRASH_DUMP=$dir/erl_crash.dump  # never in the caller's directory
}

port_free() {
  python3 - "$1" <<'PYEOF'
import socket, sys
s = socket.socket()
# as a server binds: connections lingering in TIME_WAIT do not make a port busy
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen()
except OSError as exc:
    sys.exit(f"port {sys.argv[1]} is in use ({exc}): pick another (CONFORMANCE_RABBIT_PORT)")
PYEOF
}

wait_amqp() {
  # A real handshake start from *our* node: connection.start names it in cluster_name.
  local port=$1 pid=$2 deadline=$3 node=$4
  python3 - "$port" "$pid" "$deadline" "$node" <<'PYEOF'
import os, socket, sys, time
port, pid, limit, node = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
deadline = time.monotonic() + limit
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("rabbitmq-server exited before accepting AMQP")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"AMQP\x00\x00\x09\x01")
            s.settimeout(5)
            head = b""
            while len(head) < 7 or len(head) < 8 + int.from_bytes(head[3:7], "big"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                head += chunk
            if head[7:11] == b"\x00\x0a\x00\x0a":  # connection.start
                if node.encode() not in head:
                    sys.exit(f"another broker answers on port {port}")
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"RabbitMQ did not accept AMQP on port {port} within {limit:.0f}s")
    time.sleep(0.2)  # poll interval while the node boots
PYEOF
}

start() {
  local dir=${1:?usage: start DIR PORT} port=${2:?usage: start DIR PORT} mgmt=${3:-}
  install_rabbitmq
  port_free "$port" || die "cannot start RabbitMQ"
  [ -z "$mgmt" ] || port_free "$mgmt" || die "cannot start RabbitMQ's management listener"
  mkdir -p "$dir/log" "$dir/mnesia"
  {
    echo "AMQP_PORT=$port"
    echo "DIST_PORT=$(free_port)"
    echo "EPMD_PORT=$(free_port)"
    echo "NODE_TAG=$$"
  } >"$dir/ports"
  # the recent-history exchange type; the management plugin only when asked for;
  # rabbitmq_mqtt when RABBITMQ_MQTT_PORT is set (the MQTT benchmark); and what
  # RABBITMQ_EXTRA_PLUGINS adds (comma-separated: rabbitmq_federation for the
  # federation tests, the shovel plugins for the shovel benchmark)
  plugins="rabbitmq_recent_history_exchange${mgmt:+,rabbitmq_management}"
  plugins="$plugins${RABBITMQ_MQTT_PORT:+,rabbitmq_mqtt}"
  plugins="$plugins${RABBITMQ_STOMP_PORT:+,rabbitmq_stomp}"
  echo "[$plugins${RABBITMQ_EXTRA_PLUGINS:+,$RABBITMQ_EXTRA_PLUGINS}]." >"$dir/enabled_plugins"
  echo "[]." >"$dir/advanced.config"
  : >"$dir/rabbitmq-env.conf"
  cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$port
loopback_users.guest = true
log.console = false
log.file.level = info
EOF
  if [ -n "$mgmt" ]; then
    {
      echo "management.tcp.ip = 127.0.0.1"
      echo "management.tcp.port = $mgmt"
    } >>"$dir/rabbitmq.conf"
  fi
  if [ -n "${RABBITMQ_MQTT_PORT:-}" ]; then
    echo "mqtt.listeners.tcp.default = 127.0.0.1:$RABBITMQ_MQTT_PORT" >>"$dir/rabbitmq.conf"
  fi
  if [ -n "${RABBITMQ_STOMP_PORT:-}" ]; then
    echo "stomp.listeners.tcp.default = 127.0.0.1:$RABBITMQ_STOMP_PORT" >>"$dir/rabbitmq.conf"
  fi
  node_env "$dir"
  # setsid: the node and its helpers get their own process group, stopped as one.
  (cd "$dir" && exec setsid "$RMQ_BIN/rabbitmq-server" >"$dir/log/startup.log" 2>&1 </dev/null) &
  echo $! >"$dir/server.pid"
  # cluster_name in connection.start is "<node name>@<host name>"
  if ! wait_amqp "$port" "$(cat "$dir/server.pid")" "$START_DEADLINE" "${RABBITMQ_NODENAME%@*}@"; then
    echo "--- RabbitMQ startup log" >&2
    tail -40 "$dir/log/startup.log" >&2 || true
    tail -40 "$dir/log/node.log" >&2 || true
    stop "$dir" || true
    die "RabbitMQ failed to start"
  fi
  [ -z "$mgmt" ] || wait_http "$mgmt" "$START_DEADLINE" || {
    stop "$dir" || true
    die "RabbitMQ's management API failed to start"
  }
}

wait_http() {
  # The management listener starts after AMQP's: wait until it answers.
  python3 - "$1" "$2" <<'PYEOF'
import sys, time, urllib.error, urllib.request
port, limit = int(sys.argv[1]), float(sys.argv[2])
deadline = time.monotonic() + limit
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/overview", timeout=2)
        break
    except urllib.error.HTTPError:
        break  # 401: it answers
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"RabbitMQ's management API did not answer on port {port}")
        time.sleep(0.2)  # poll interval while the plugin starts
PYEOF
}

stop() {
  local dir=${1:?usage: stop DIR}
  [ -f "$dir/server.pid" ] || return 0
  local pid
  pid=$(cat "$dir/server.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_DEADLINE * 10)) ]; do
      sleep 0.1  # bounded wait for a process to exit
      waited=$((waited + 1))
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  # The Erlang VM daemonises epmd on our private port: stop that one only.
  if [ -f "$dir/ports" ]; then
    # shellcheck disable=SC1091
    . "$dir/ports"
    ERL_EPMD_PORT=$EPMD_PORT epmd -kill >/dev/null 2>&1 || true
  fi
  rm -f "$dir/server.pid"
}

ctl() {
  # rabbitmqctl against the node of DIR (its node name, epmd port and cookie)
  local dir=${1:?usage: ctl DIR ARGS...}
  shift
  node_env "$dir"
  "$RMQ_BIN/rabbitmqctl" -n "$RABBITMQ_NODENAME" "$@"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  ctl) shift; ctl "$@" ;;
  install) install_rabbitmq ;;
  *) die "usage: $0 start DIR PORT | stop DIR | ctl DIR ARGS... | install" ;;
esac
