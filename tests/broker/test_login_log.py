"""The failed-login log line: client text escaped, lines rate-limited per peer (pure)."""

from __future__ import annotations

from amqplite.broker.auth import FailedLogins, UserDB, log_safe


def test_log_safe_escapes_what_could_forge_or_flood_a_line() -> None:
    assert log_safe("app") == "app"
    assert log_safe("a\nb\r\x1b[31m\\") == "a\\nb\\r\\x1b[31m\\\\"
    assert log_safe("\u2028caf\u00e9\udc80") == "\\u2028caf\u00e9\\udc80"
    long = log_safe("x" * 10_000, limit=20)
    assert long == "x" * 20 + "... (10000 characters)"
    assert "\n" not in log_safe("".join(map(chr, range(0, 0x300))), limit=1000)


def test_failed_logins_are_logged_a_burst_per_window_per_peer() -> None:
    f = FailedLogins(burst=3, window=60.0)
    assert [f.note("10.0.0.1", t)[0] for t in range(10)] == [True] * 3 + [False] * 7
    assert f.note("10.0.0.2", 5.0) == (True, 0)  # another peer has its own budget
    # the next window's first line says how many were left out
    assert f.note("10.0.0.1", 61.0) == (True, 7)
    assert f.note("10.0.0.1", 62.0) == (True, 0)


def test_failed_login_table_stays_bounded() -> None:
    f = FailedLogins(burst=1, window=60.0, max_peers=100)
    for i in range(10_000):
        f.note(f"10.0.{i // 256}.{i % 256}", 1.0)
    assert len(f._peers) <= 100


def test_failure_line() -> None:
    users = UserDB()
    line = users.failure_line("admin API", "ev\nil", "127.0.0.1", 0.0)
    assert line == "admin API: login failed for user 'ev\\nil' from 127.0.0.1"
    assert users.failure_line("c", "n", "127.0.0.1", 0.0, refused="client certificate") == (
        "c: login refused for user 'n' (client certificate) from 127.0.0.1")
