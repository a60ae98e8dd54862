"""Fixtures for the audit tests: one SparkSession per test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from amqplite.audit.config import AuditSetupError, preflight, sqlite_target


def _setup_problem(jdbc: bool) -> str | None:
    """Why the job cannot run here (``None`` if it can), checked as ``audit run`` does."""
    try:
        preflight(sqlite_target("/nonexistent/amqplite.db"), jdbc=jdbc)
    except AuditSetupError as exc:
        if "broker database not found" not in str(exc):
            return str(exc)
    return None


@pytest.fixture(scope="session")
def jdbc_missing() -> str | None:
    """Why the SQLite JDBC driver cannot be used here, or ``None`` when it can."""
    return _setup_problem(jdbc=True)


@pytest.fixture(scope="session")
def spark(jdbc_missing: str | None) -> Iterator[Any]:
    """A small local SparkSession, with the SQLite JDBC jar when there is one.

    Skips without Java or pyspark; the jar is optional (the default reader
    reads SQLite on the driver).
    """
    problem = _setup_problem(jdbc=False)
    if problem:
        pytest.skip(problem)
    from amqplite.audit.job import build_session

    session = build_session(
        master="local[1]",
        jars=[] if jdbc_missing else [sqlite_target("/nonexistent/amqplite.db").jar],
        conf={
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            "spark.sql.adaptive.enabled": "false",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
            "spark.sql.codegen.wholeStage": "false",
        },
        app_name="amqplite-audit-tests",
    )
    yield session
    session.stop()
