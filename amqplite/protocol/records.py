"""A base for plain value records: attrs' equality and repr, as native classes
when compiled. Compiled code builds one per message (a broker effect such as
Deliver, a STOMP event such as SendReceived), which an attrs class (its
``__init__`` generated Python) would slow down."""

from __future__ import annotations

from typing import ClassVar


class Record:
    """Subclasses set ``__slots__`` and ``_FIELDS`` (the fields compared and shown,
    in their order) and assign them in their own ``__init__``."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._FIELDS)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value (as attrs)
