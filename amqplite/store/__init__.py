"""amqplite.store: durable state on SQLAlchemy Core, one writer process, group commit."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import Store
    from .recovery import Recovered, RecoveredEntry


def __getattr__(name: str) -> Any:
    """Load the SQLAlchemy parts on first use only.

    Importing the package (for its submodules) must not pull SQLAlchemy in
    before a store is opened (DESIGN.md section 1).
    """
    import importlib

    if name == "Store":
        return importlib.import_module(f"{__name__}.engine").Store
    if name in ("Recovered", "RecoveredEntry"):
        return getattr(importlib.import_module(f"{__name__}.recovery"), name)
    if name in ("apply", "cbor", "engine", "reads", "recovery", "schema"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)


__all__ = ["Recovered", "RecoveredEntry", "Store"]
