"""Settings precedence (defaults < TOML < env < flags) and user rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqplite.broker.auth import UserDB
from amqplite.config import ConfigError, Watermark, load_settings


def test_precedence(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text('port = 5000\ndurability = "os"\ndelivery_log = "full"\n'
                 '[users.app]\npassword = "pw"\ntags = "administrator"\n')
    s = load_settings(f, env={"AMQPLITE_PORT": "6000", "AMQPLITE_DELIVERY_LOG": "off"},
                      overrides={"port": 7000})
    assert (s.port, s.durability, s.delivery_log) == (7000, "os", "off")
    assert s.users["app"]["password"] == "pw"
    assert load_settings(None, env={}).port == 5672
    assert load_settings(None, env={"AMQPLITE_HOST": "127.0.0.1, ::1"}).host == ["127.0.0.1", "::1"]


@pytest.mark.parametrize(("text", "needle"), [
    ("bogus = 1", "unknown setting 'bogus'"),
    ('durability = "sometimes"', "durability must be one of"),
    ("port = -1", "port must not be negative"),
    ("port = [", "config file"),
    ("tls_port = 5671", "tls_port needs tls_cert and tls_key"),
    ("tls_verify_peer = true", "tls_verify_peer needs tls_ca"),
    ('tls_ca = "ca"\ntls_fail_if_no_peer_cert = true', "needs tls_verify_peer"),
    ("plain_listener = false", "leaves no listener"),
    ("mqtt_tls_port = 8883", "mqtt_tls_port needs tls_cert and tls_key"),
    ("mqtt_ssl_cert_login = true", "mqtt_ssl_cert_login needs tls_verify_peer"),
    ("kafka_ssl_cert_login = true", "kafka_ssl_cert_login needs tls_verify_peer"),
    ("admin_tls = true", "admin_tls needs"),
    ('auth_mechanisms = ["PLAIN", "KERBEROS"]', "auth_mechanisms must be"),
    ('ssl_options.verify = "sometimes"', "ssl_options.verify: expected verify_peer"),
    ('listeners.tcp = "yes"', 'listeners.tcp: expected "none"'),
    ('ssl_options.password = "x"', "unknown setting 'ssl_options.password'"),
    ('tls_verify_peer = "maybe"', "tls_verify_peer: cannot use"),
])
def test_bad_config_names_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_settings(f, env={})


def test_guest_only_from_loopback() -> None:
    db = UserDB()
    db.add("guest", "guest", ["administrator"], loopback_only=True)
    db.add("app", "pw")
    assert db.authenticate("guest", "guest", "127.0.0.1") is not None
    assert db.authenticate("guest", "guest", "::1") is not None
    assert db.authenticate("guest", "guest", "10.1.2.3") is None
    assert db.authenticate("app", "pw", "10.1.2.3") is not None
    assert db.authenticate("app", "nope", "127.0.0.1") is None


@pytest.mark.parametrize(("text", "size"), [
    ("50MB", 50_000_000), ("1GB", 10**9), ("512MiB", 512 * 2**20), ("2k", 2048),
    ("1.5GB", 1_500_000_000), ("0", 0), ("123456", 123456),
])
def test_sizes_use_rabbitmq_units(text: str, size: int) -> None:
    s = load_settings(None, env={"AMQPLITE_DISK_FREE_LIMIT": text})
    assert s.disk_free_limit_bytes == size


def test_guardrail_defaults_and_bad_size() -> None:
    s = load_settings(None, env={})
    assert (s.max_connections, s.disk_free_limit_bytes) == (0, 50_000_000)
    with pytest.raises(ConfigError, match="disk_free_limit: not a size"):
        load_settings(None, env={"AMQPLITE_DISK_FREE_LIMIT": "lots"})
    with pytest.raises(ConfigError, match="max_connections must not be negative"):
        load_settings(None, env={"AMQPLITE_MAX_CONNECTIONS": "-1"})


@pytest.mark.parametrize(("text", "relative", "absolute"), [
    ("0.4", 0.4, None), ("1", 1.0, None), ("0", 0.0, None), ("relative 0.6", 0.6, None),
    ("200MB", None, 200_000_000), ("1GiB", None, 2**30), ("536870912", None, 536870912),
    ("absolute 2GB", None, 2 * 10**9), ("512M", None, 512 * 2**20),
])
def test_memory_watermark_relative_or_absolute(text: str, relative: float | None,
                                               absolute: int | None) -> None:
    s = load_settings(None, env={"AMQPLITE_MEMORY_HIGH_WATERMARK": text})
    assert s.memory_watermark == Watermark(relative=relative, absolute=absolute)


def test_memory_watermark_default_and_limit(tmp_path: Path) -> None:
    s = load_settings(None, env={})
    assert (s.memory_watermark, s.memory_paging_ratio) == (Watermark(relative=0.4), 0.5)
    assert s.memory_watermark.limit(1000) == 400
    assert Watermark(absolute=123).limit(1000) == 123
    f = tmp_path / "m.toml"
    f.write_text("memory_high_watermark = 0.25\n")  # a TOML number works as well
    assert load_settings(f, env={}).memory_watermark == Watermark(relative=0.25)


@pytest.mark.parametrize("text", ["lots", "1.5", "-0.1", "relative 2", "12XB", ""])
def test_bad_memory_watermark_names_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^memory_high_watermark: not a"):
        load_settings(None, env={}, overrides={"memory_high_watermark": text})


def test_tls_settings_from_flags_env_and_rabbitmq_style_toml(tmp_path: Path) -> None:
    f = tmp_path / "tls.toml"
    f.write_text('listeners.tcp = "none"\nlisteners.ssl.default = 5671\n'
                 'ssl_options.certfile = "s.pem"\nssl_options.keyfile = "s.key"\n'
                 'ssl_options.cacertfile = "ca.pem"\nssl_options.verify = "verify_peer"\n'
                 'ssl_options.fail_if_no_peer_cert = true\n'
                 'management.ssl.port = 15671\n'
                 'management.ssl.certfile = "m.pem"\nmanagement.ssl.keyfile = "m.key"\n')
    s = load_settings(f, env={})
    assert (s.plain_listener, s.tls_port, s.tls_cert, s.tls_key, s.tls_ca) == (
        False, 5671, "s.pem", "s.key", "ca.pem")
    assert s.tls_verify_peer and s.tls_fail_if_no_peer_cert
    assert (s.admin_port, s.admin_tls, s.admin_cert_files) == (15671, True, ("m.pem", "m.key"))
    env = {"AMQPLITE_TLS_PORT": "0", "AMQPLITE_TLS_CERT": "a", "AMQPLITE_TLS_KEY": "b",
           "AMQPLITE_ADMIN_TLS": "true", "AMQPLITE_PLAIN_LISTENER": "false"}
    s = load_settings(None, env=env, overrides={"auth_mechanisms": "EXTERNAL,PLAIN"})
    assert (s.tls_port, s.admin_tls, s.admin_cert_files, s.plain_listener) == (
        0, True, ("a", "b"), False)
    assert s.auth_mechanisms == ["EXTERNAL", "PLAIN"]
    defaults = load_settings(None, env={})
    assert defaults.tls_port is None and defaults.plain_listener and not defaults.admin_tls
    assert defaults.auth_mechanisms == ["PLAIN", "AMQPLAIN"]



def test_mqtt_tls_settings_from_flags_env_and_rabbitmq_style_toml(tmp_path: Path) -> None:
    f = tmp_path / "mqtts.toml"
    f.write_text('ssl_options.certfile = "s.pem"\nssl_options.keyfile = "s.key"\n'
                 'ssl_options.cacertfile = "ca.pem"\nssl_options.verify = "verify_peer"\n'
                 'mqtt.listeners.ssl.default = 8883\nmqtt.ssl_cert_login = true\n')
    s = load_settings(f, env={})
    assert (s.mqtt_tls_port, s.mqtt_ssl_cert_login, s.tls_port) == (8883, True, None)
    env = {"AMQPLITE_MQTT_TLS_PORT": "0", "AMQPLITE_TLS_CERT": "a", "AMQPLITE_TLS_KEY": "b",
           "AMQPLITE_MQTT_WEBSOCKET": "false"}
    s = load_settings(None, env=env)
    assert (s.mqtt_tls_port, s.mqtt_ssl_cert_login, s.mqtt_websocket) == (0, False, False)
    defaults = load_settings(None, env={})
    assert defaults.mqtt_tls_port is None and defaults.mqtt_websocket
    assert not defaults.mqtt_ssl_cert_login


def test_kafka_topic_settings() -> None:
    s = load_settings(None, env={})
    assert (s.kafka_auto_create_topics, s.kafka_num_partitions) == (True, 1)
    s = load_settings(None, env={"AMQPLITE_KAFKA_AUTO_CREATE_TOPICS": "false",
                                 "AMQPLITE_KAFKA_NUM_PARTITIONS": "3"})
    assert (s.kafka_auto_create_topics, s.kafka_num_partitions) == (False, 3)
    with pytest.raises(ConfigError, match="kafka_num_partitions must be at least 1"):
        load_settings(None, env={"AMQPLITE_KAFKA_NUM_PARTITIONS": "0"})
