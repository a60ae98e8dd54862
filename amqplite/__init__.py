"""amqplite: an AMQP 0-9-1 broker in one process, durable on one SQLite file.

The hot-path modules may be compiled with mypyc (setup.py decides at build time);
the compiled extension sits next to each module's ``.py`` and Python prefers it.
``AMQPLITE_PURE=1`` makes this package import the ``.py`` sources instead, so one
tree can run both builds (CI runs the core tests against each).
"""

from __future__ import annotations

import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import (
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    FileFinder,
    ModuleSpec,
    SourceFileLoader,
)
from types import ModuleType

__version__ = "0.1.0"

#: a module that is compiled whenever anything is: its loader tells which build runs
_PROBE = "amqplite.protocol.reader"


class _SourcesOnly(MetaPathFinder):
    """Finds ``amqplite.*`` modules among ``.py`` files only, never extensions."""

    def __init__(self) -> None:
        self._finders: dict[str, FileFinder] = {}

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if not fullname.startswith("amqplite.") or path is None:
            return None
        for entry in path:  # type: ignore[attr-defined]
            finder = self._finders.get(entry)
            if finder is None:
                finder = self._finders[entry] = FileFinder(
                    entry, (SourceFileLoader, SOURCE_SUFFIXES))
            spec = finder.find_spec(fullname, target)
            if spec is not None:
                return spec
        return None


if os.environ.get("AMQPLITE_PURE", "") not in ("", "0"):
    sys.meta_path.insert(0, _SourcesOnly())


def build() -> str:
    """Which build runs: ``compiled: mypyc`` or ``pure Python`` (for --version and the log)."""
    module = sys.modules.get(_PROBE)
    if module is not None:
        compiled = (module.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))
    elif any(isinstance(f, _SourcesOnly) for f in sys.meta_path):
        compiled = False
    else:  # not imported yet (an admin command): is its extension there?
        stem = os.path.join(os.path.dirname(__file__), "protocol", "reader")
        compiled = any(os.path.exists(stem + suffix) for suffix in EXTENSION_SUFFIXES)
    return "compiled: mypyc" if compiled else "pure Python"
