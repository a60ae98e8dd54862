"""Fixtures for the audit tests: one SparkSession per test run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from amqplite.audit.config import AuditSetupError, preflight, sqlite_target


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A small local SparkSession with the SQLite JDBC driver (skips without Java)."""
    db = sqlite_target("/nonexistent/amqplite.db")
    try:
        preflight(db)
    except AuditSetupError as exc:
        if "broker database not found" not in str(exc):
            pytest.skip(str(exc))
    from amqplite.audit.job import build_session

    session = build_session(
        master="local[1]",
        jars=[db.jar],
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
