"""amqplite.store: durable state on SQLAlchemy Core, one writer process, group commit."""

from typing import TYPE_CHECKING, Any

from .ops import (
    CopyMessage,
    DeleteBinding,
    DeleteEntries,
    DeleteEntry,
    DeleteExchange,
    DeleteMQTTPacketId,
    DeleteMQTTSession,
    DeleteMQTTWill,
    DeleteParameter,
    DeletePolicy,
    DeleteQueue,
    LogEvent,
    Op,
    PutBinding,
    PutEntry,
    PutExchange,
    PutMessage,
    PutMeta,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
    PutParameter,
    PutPolicy,
    PutQueue,
    UpdateEntry,
)

if TYPE_CHECKING:
    from .engine import Store
    from .recovery import Recovered, RecoveredEntry


def __getattr__(name: str) -> Any:
    """Load the SQLAlchemy parts on first use only.

    The broker core imports ``amqplite.store.ops`` (plain attrs records) and
    must not pull SQLAlchemy in with it (DESIGN.md section 1).
    """
    import importlib

    if name == "Store":
        return importlib.import_module(f"{__name__}.engine").Store
    if name in ("Recovered", "RecoveredEntry"):
        return getattr(importlib.import_module(f"{__name__}.recovery"), name)
    if name in ("apply", "cbor", "engine", "reads", "recovery", "schema"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)


__all__ = [
    "CopyMessage",
    "DeleteBinding",
    "DeleteEntries",
    "DeleteEntry",
    "DeleteExchange",
    "DeleteMQTTPacketId",
    "DeleteMQTTSession",
    "DeleteMQTTWill",
    "DeleteParameter",
    "DeletePolicy",
    "DeleteQueue",
    "LogEvent",
    "Op",
    "PutBinding",
    "PutEntry",
    "PutExchange",
    "PutMQTTPacketId",
    "PutMQTTSession",
    "PutMQTTWill",
    "PutMessage",
    "PutMeta",
    "PutParameter",
    "PutPolicy",
    "PutQueue",
    "Recovered",
    "RecoveredEntry",
    "Store",
    "UpdateEntry",
]
