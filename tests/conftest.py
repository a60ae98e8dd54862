"""Test-wide settings (hypothesis must not fail on timing on a shared, loaded machine),
the PostgreSQL fixtures (tests/pg_server.py), and how the suite is marked and split
across pytest-xdist workers (scripts/test.sh runs ``-n 3 --dist loadgroup``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.pg_server import PgServer, start_server

settings.register_profile(
    "amqplite",
    deadline=None,  # CI shares 2 cores with brokers and Spark; time is not a property
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("amqplite")

#: modules of crash and other long tests (the ``slow`` marker, with every test whose name
#: says ``kill``); Spark, PostgreSQL and browser tests are found by what they use
SLOW_MODULES = frozenset({
    "tests/server/test_crash_loop.py",
    "tests/server/test_commit_failed_machine.py",
    "tests/server/test_commit_failed.py",
    "tests/store/test_crash.py",
    "tests/server/test_fuzz_live.py",
    "tests/server/test_fuzz_ws.py",
    "tests/server/test_spill_live.py",
    "tests/server/test_streams_live.py",
    "tests/server/test_many_connections.py",
})
#: the longest units of work, handed out first so that none of them is the run's tail
FIRST = ("spark", "tests/links/test_shovel.py", "tests/server/test_commit_failed_machine.py",
         "tests/server/test_crash_loop.py", "postgresql", "tests/links/test_federation.py",
         "tests/server/test_fuzz_live.py")
BROWSER_MODULES = frozenset({
    "tests/admin/test_dashboard.py",
    "tests/admin/test_dashboard_links.py",
})


def _uses_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return ("pg_server" in getattr(item, "fixturenames", ())
            or (callspec is not None and callspec.params.get("backend") == "postgresql"))


def _group(item: pytest.Item) -> tuple[str, bool]:
    """The item's xdist group and whether it is slow.

    One JVM and one PostgreSQL cluster serve all their tests (a session fixture per
    worker would start one per worker); every other module is one unit of work, so
    its module-scoped brokers start once.
    """
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("spark"):
        return "spark", True
    if _uses_postgresql(item):
        return "postgresql", True
    slow = (module in SLOW_MODULES or module in BROWSER_MODULES or "kill" in item.name
            or "dashboard" in item.name
            or item.get_closest_marker("slow") is not None)
    return module, slow


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, bool] = {}
    for item in items:
        group, slow = _group(item)
        if slow:
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(group))
        groups[group] = groups.get(group, False) or slow
    # the longest units, then groups with slow tests go first: under xdist the last unit
    # handed out is the run's tail (scripts/test.sh passes --no-loadscope-reorder to keep
    # this order); the sort is stable, so tests keep their order within a module
    def rank(item: pytest.Item) -> tuple[int, bool]:
        group = _group(item)[0]
        return (FIRST.index(group) if group in FIRST else len(FIRST), not groups[group])

    items.sort(key=rank)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the session (skipped without one, except in CI)."""
    server, cluster = start_server()
    try:
        yield server
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database on ``pg_server``: its name (dropped afterwards)."""
    name = pg_server.create_db()
    yield name
    pg_server.drop_db(name)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_db: str) -> str:
    """The URL of a fresh, empty PostgreSQL database."""
    return pg_server.url(pg_db)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Escape lone surrogates in captured output before xdist sends the report: some tests
    log names SQLite cannot store on purpose, and execnet carries only valid UTF-8."""
    report.sections = [(title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
                       for title, text in report.sections]
