"""Test-wide settings (hypothesis must not fail on timing on a shared, loaded machine),
the PostgreSQL fixtures (tests/pg_server.py), and how the suite is marked and split
across pytest-xdist workers (scripts/test.sh runs ``-n 3``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


SPARK_MODULES = frozenset({
    "tests/audit/test_job_spark.py",
    "tests/audit/test_link_hops.py",
    "tests/audit/test_protocol_audit.py",
    "tests/audit/test_real_broker.py",
})


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to under xdist: one worker runs a whole unit.

    All Spark tests share one JVM and all PostgreSQL tests one cluster (session fixtures,
    which each worker would otherwise start for itself); every other module is its own
    unit, so its module-scoped brokers start once.
    """
    module = nodeid.split("::", 1)[0]
    if module in SPARK_MODULES:
        return "spark"
    if "[postgresql" in nodeid or module == "tests/server/test_postgresql.py":
        return "postgresql"
    return module


def _is_slow(item: pytest.Item) -> bool:
    module = item.nodeid.split("::", 1)[0]
    return (unit_of(item.nodeid) in ("spark", "postgresql") or module in SLOW_MODULES
            or module in BROWSER_MODULES or "kill" in item.name or "dashboard" in item.name)


def pytest_itemcollected(item: pytest.Item) -> None:
    if _is_slow(item):
        item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow_units: set[str] = {unit_of(item.nodeid) for item in items
                            if item.get_closest_marker("slow") is not None}

    # the longest units, then units with slow tests go first: under xdist the last unit
    # handed out is the run's tail (scripts/test.sh passes --no-loadscope-reorder to keep
    # this order); the sort is stable, so tests keep their order within a module
    def rank(item: pytest.Item) -> tuple[int, bool]:
        unit = unit_of(item.nodeid)
        return (FIRST.index(unit) if unit in FIRST else len(FIRST), unit not in slow_units)

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule by ``unit_of``: xdist's own ``loadgroup`` marks do not reach the node ids
    under pytest 9 (pytest-xdist 3.8 rewrites ``item._nodeid``, which pytest 9 no longer
    reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


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
