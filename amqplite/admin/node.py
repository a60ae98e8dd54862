"""What the admin API sees of a running node: one narrow, typed surface.

The admin layer reads the node to answer requests and calls a few of its
commands; it does not walk the server's object graph. ``NodeView`` lists all
of it and ``server.app.Server`` provides it (``main.py``, the composition root,
has mypy check that), so the admin layer never names the Server, and a change
inside the shell that admin would feel shows here, as a change of this surface.
The parts it exposes are narrowed the same way (the memory monitor's figures,
the store's reads, the links supervisor's rows), each a Protocol of what
admin uses of it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from amqplite.broker.auth import UserDB
    from amqplite.broker.core import Broker
    from amqplite.config import Settings, Watermark
    from amqplite.server.connection import AMQPConnection
    from amqplite.server.counters import Counters

_R = TypeVar("_R")


class MemoryView(Protocol):
    """The memory monitor: its figures, and the watermark an administrator may set."""

    @property
    def used(self) -> int | None: ...
    @property
    def limit(self) -> int: ...
    @property
    def alarm(self) -> bool: ...
    @property
    def paging(self) -> bool: ...
    @property
    def paging_limit(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def watermark(self) -> Watermark: ...
    def set_watermark(self, watermark: Watermark) -> None: ...


class DiskView(Protocol):
    """The free-space watch on the data dir."""

    @property
    def free(self) -> int | None: ...
    @property
    def limit(self) -> int: ...
    @property
    def alarm(self) -> bool: ...


class CommitsView(Protocol):
    """The store bridge: admin writes wait for their own commit, reads queue behind
    the writes, and the backlog and failures show in alarms and metrics."""

    @property
    def failing(self) -> str | None: ...
    @property
    def abandoned(self) -> int: ...
    @property
    def inflight(self) -> int: ...
    @property
    def inflight_ops(self) -> int: ...
    async def own_commit(self) -> BaseException | None: ...
    async def repaired(self) -> None: ...
    async def read(self, name: str, *args: Any) -> Any: ...
    def add_waiter(self, fn: Callable[[BaseException | None], None]) -> None: ...
    def flush(self, force: bool = False) -> None: ...


class StoreReads(Protocol):
    """The store's reads admin runs in a thread of its own (SQLite readers do not
    block the writer), and its commit count for ``/metrics``."""

    @property
    def engine(self) -> Engine: ...
    @property
    def groups(self) -> int: ...
    def fetch_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]: ...
    def fetch_stream(self, queue_id: int, lo: int, limit: int,
                     ) -> list[tuple[int, int, bytes]]: ...


class MQTTView(Protocol):
    """The MQTT listener's clients, ports and counters."""

    @property
    def connections(self) -> Collection[Any]: ...
    @property
    def clients(self) -> Mapping[Any, Any]: ...
    @property
    def ports(self) -> Sequence[int]: ...
    @property
    def stats(self) -> Any: ...


class FederationView(Protocol):
    def links(self, vhost: str | None = None) -> list[dict[str, Any]]: ...
    def restart(self, vhost: str, link_id: str) -> bool: ...


class LinksView(Protocol):
    """The links supervisor (shovels and federation) when the node runs one."""

    @property
    def federation(self) -> FederationView | None: ...
    def shovels(self, vhost: str | None = None) -> list[dict[str, Any]]: ...
    def restart(self, vhost: str, name: str) -> bool: ...


class NodeView(Protocol):
    """Everything the admin API reads of the node, and the commands it calls."""

    # --- what it is and how it is configured
    @property
    def settings(self) -> Settings: ...
    @property
    def started_at(self) -> float: ...
    @property
    def listen_ports(self) -> Sequence[int]: ...
    @property
    def tls_ports(self) -> Sequence[int]: ...
    #: the admin API's base URL: ``run_admin`` sets it once it listens
    admin_url: str | None
    @property
    def link_secret(self) -> str: ...

    # --- its parts, narrowed to what admin reads of them
    @property
    def broker(self) -> Broker: ...
    @property
    def users(self) -> UserDB: ...
    @property
    def connections(self) -> Collection[AMQPConnection]: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def memory(self) -> MemoryView | None: ...
    @property
    def disk(self) -> DiskView | None: ...
    @property
    def persistence(self) -> CommitsView | None: ...
    @property
    def store(self) -> StoreReads | None: ...
    @property
    def mqtt(self) -> MQTTView | None: ...
    @property
    def links(self) -> LinksView | None: ...

    # --- commands
    def execute(self, command: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
        """Run one broker command and carry out its Outcome at once."""
        ...

    def interpret(self, *, flush: bool = True) -> None:
        """Carry out what the broker's commands since the last call asked for."""
        ...

    async def wait_paged(self, vhost: str, queue: str) -> None:
        """Wait until a queue's paged-out run is loaded back."""
        ...

    async def serve_mqtt_websocket(self, scope: dict[str, Any], receive: Any,
                                   send: Any) -> None:
        """MQTT over WebSockets at ``/ws`` (refused when the node serves none)."""
        ...
