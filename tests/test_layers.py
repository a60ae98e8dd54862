"""Layers import downward only (DESIGN.md section 1), checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "amqplite.protocol.connection": ("trio", "sqlalchemy", "pyspark", "amqplite.broker"),
    "amqplite.broker.core": ("trio", "sqlalchemy", "pyspark"),
    "amqplite.store.engine": ("trio", "pyspark", "amqplite.broker", "amqplite.server"),
    "amqplite.server.app": ("pyspark",),
    "amqplite.cli": ("pyspark",),
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_module_does_not_import_upward(module: str) -> None:
    forbidden = CASES[module]
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {forbidden!r} if any(k == m or k.startswith(m + '.') "
        "for k in sys.modules)]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"
