"""`amqplite serve` failures are one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from amqplite.config import Settings, load_settings


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    """``amqplite serve`` to its end; MQTT and STOMP off unless the test names a port
    (1883 and 61613, the defaults, are one for the whole machine)."""
    mqtt = [] if "--mqtt-port" in args else ["--mqtt-port", "0"]
    mqtt += [] if "--stomp-port" in args else ["--stomp-port", "0"]
    mqtt += [] if "--kafka-port" in args else ["--kafka-port", "0"]
    return subprocess.run([sys.executable, "-m", "amqplite", "serve", *mqtt, *args],
                          capture_output=True, text=True, timeout=60)


def test_mqtt_port_defaults_to_1883() -> None:
    assert Settings().mqtt_port == 1883
    assert load_settings(None, {}).mqtt_port == 1883


def test_kafka_port_defaults_to_9092() -> None:
    assert Settings().kafka_port == 9092
    assert load_settings(None, {"AMQPLITE_KAFKA_PORT": "0"}).kafka_port == 0


def test_stomp_port_defaults_to_61613() -> None:
    assert Settings().stomp_port == 61613
    assert load_settings(None, {}).stomp_port == 61613
    assert load_settings(None, {"AMQPLITE_STOMP_PORT": "0"}).stomp_port == 0


def test_taken_1883_names_mqtt_port(tmp_path: Path) -> None:
    """With no MQTT setting at all, a taken 1883 (ours here, or a system Mosquitto's)
    stops the broker with one line naming ``mqtt_port`` and how to turn MQTT off."""
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(socket.socket())
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        try:
            s.bind(("127.0.0.1", 1883))
            s.listen()
        except OSError as exc:  # taken already: by whatever listens on it
            assert exc.errno == errno.EADDRINUSE, exc
        out = subprocess.run(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port", "0",
             "--admin-port", "0", "--stomp-port", "0", "--kafka-port", "0",
             "--data-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "AMQPLITE_MQTT_PORT"})
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("amqplite: cannot start: MQTT port 1883 on 127.0.0.1 is "
                               "already in use"), lines
    assert "--mqtt-port, AMQPLITE_MQTT_PORT or `mqtt_port` in the config file" in lines[0]
    assert "--mqtt-port 0" in lines[0]


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _serve("--host", "127.0.0.1", "--port", str(port), "--admin-port", "0",
                     "--data-dir", str(tmp_path))
    assert out.returncode == 1
    assert "amqplite: cannot start:" in out.stderr and "in use" in out.stderr
    assert f"AMQP port {port} on 127.0.0.1 is already in use" in out.stderr
    assert "--port, AMQPLITE_PORT or `port` in the config file" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("setting", "what"), [("admin_port", "admin API"),
                                               ("stomp_port", "STOMP"),
                                               ("kafka_port", "Kafka")])
def test_listener_port_in_use(tmp_path: Path, setting: str, what: str) -> None:
    flag = "--" + setting.replace("_", "-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        others = {"--admin-port": "0", flag: str(port)}
        out = _serve("--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path),
                     *[a for kv in others.items() for a in kv])
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"amqplite: cannot start: {what} port {port} on 127.0.0.1 "
                               "is already in use")
    assert f"{flag}, AMQPLITE_{setting.upper()} or `{setting}`" in lines[0]


def test_bad_config_value(tmp_path: Path) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text('delivery_log = "verbose"\n')
    out = _serve("--config", str(cfg))
    assert out.returncode != 0
    assert "delivery_log must be one of" in out.stderr and "Traceback" not in out.stderr


def test_a_database_that_cannot_be_opened_is_named_in_one_line(tmp_path: Path) -> None:
    """The writer process opens the database; what stops it reaches the operator as
    one line, as when the broker opened it itself."""
    (tmp_path / "data" / "amqplite.db").mkdir(parents=True)  # a directory: no database
    out = _serve("--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
                 "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("amqplite: cannot start: database error: "), out.stderr
    assert "unable to open database file" in lines[-1] and "Traceback" not in out.stderr


def test_second_broker_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    from tests.brokerproc import BrokerProcess

    b = BrokerProcess(tmp_path / "data").start()
    try:
        out = _serve("--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
                     "--data-dir", str(tmp_path / "data"))
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert "amqplite: cannot start:" in lines[0] and "in use by another amqplite" in lines[0]
        assert b.proc is not None and f"pid {b.proc.pid}" in lines[0]
        assert f"AMQP port(s) {b.port}" in lines[0] and f"admin port {b.admin_port}" in lines[0]
        # the running broker is untouched
        socket.create_connection(("127.0.0.1", b.port), timeout=2).close()
        # kill -9 leaves the lock file behind, but the kernel dropped the flock
        b.kill()
        assert (tmp_path / "data" / "amqplite.lock").exists()
        b.start()
    finally:
        b.stop()


def test_which_directory_is_locked(tmp_path: Path) -> None:
    from amqplite.server.app import _lock_dir

    assert _lock_dir(Settings(data_dir=str(tmp_path))) == tmp_path
    assert _lock_dir(Settings(database_url=f"sqlite:///{tmp_path}/x/b.db")) == tmp_path / "x"
    assert _lock_dir(Settings(database_url="postgresql://u@db/amqp")) is None
    assert _lock_dir(Settings(database_url="sqlite:///:memory:")) is None


def test_bad_memory_watermark_flag(tmp_path: Path) -> None:
    out = _serve("--data-dir", str(tmp_path), "--memory-high-watermark", "lots")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "memory_high_watermark: not a memory watermark: 'lots'" in out.stderr
