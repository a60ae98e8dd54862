"""The delivery-log audit: a PySpark batch job, its reports, and ``trace``.

Nothing here imports pyspark at module level, so ``import amqplite`` and the
broker start without it; pyspark is needed only when the job runs
(``pip install 'amqplite[audit]'``).

- :mod:`amqplite.audit.config` - job settings, database URLs, preflight checks.
- :mod:`amqplite.audit.state` - watermark, run journal and lock under ``OUT/_state``.
- :mod:`amqplite.audit.job` - :func:`run_audit` and the ``spark-submit`` entry point.
- :mod:`amqplite.audit.sqlite_read` - SQLite log pages read on the driver (no JDBC jar).
- :mod:`amqplite.audit.reports` - the report aggregates (Spark).
- :mod:`amqplite.audit.render` - JSON, HTML (inline SVG charts) and CSV output.
- :mod:`amqplite.audit.trace` - one message's history, read with SQLAlchemy.
- :mod:`amqplite.audit.schedule` - the nightly loop.
- :mod:`amqplite.audit.cli` - click objects ``audit`` and ``trace``.
"""
