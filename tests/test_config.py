"""Settings precedence (defaults < TOML < env < flags) and user rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqplite.broker.auth import UserDB
from amqplite.config import ConfigError, load_settings


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
