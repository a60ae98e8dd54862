"""Which build runs: the compiled hot path (setup.py, mypyc) or the pure Python one.

CI compiles the tree in place and runs the suite on it, then the core tests
again with ``AMQPLITE_PURE=1``; these checks hold for either tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from amqplite import __version__

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import amqplite, amqplite.broker.core as core, amqplite.protocol.reader as reader\n"
         "print(amqplite.build()); print(core.__file__); print(reader.__file__)")


def _run(*args: str, pure: bool) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMQPLITE_PURE": "1" if pure else "0"}
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.strip().split("\n")


def test_amqplite_pure_imports_the_sources_and_says_so() -> None:
    build, core, reader = _run("-c", PROBE, pure=True)
    assert build == "pure Python"
    assert core.endswith("core.py") and reader.endswith("reader.py")
    assert _run("-m", "amqplite", "--version", pure=True) == [
        f"amqplite {__version__} (pure Python)"]


def test_version_and_build_name_the_modules_that_run() -> None:
    """Compiled in place, the extension modules load and both lines say so."""
    compiled = any((ROOT / f"amqplite/protocol/reader{s}").exists() for s in EXTENSION_SUFFIXES)
    build, core, reader = _run("-c", PROBE, pure=False)
    assert build == ("compiled: mypyc" if compiled else "pure Python")
    assert reader.endswith(tuple(EXTENSION_SUFFIXES) if compiled else (".py",))
    assert core.endswith(tuple(EXTENSION_SUFFIXES) if compiled else (".py",))
    assert _run("-m", "amqplite", "--version", pure=False) == [
        f"amqplite {__version__} ({build})"]
