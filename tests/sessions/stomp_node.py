"""Driving the STOMP session rules with plain calls: a pure broker, the sans-I/O
connection, and the few lines of shell a test needs (carry out the Outcome,
hold confirms until a pretend commit)."""

from __future__ import annotations

from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.effects import CancelNotify, Confirm, Deliver
from amqplite.protocol.stomp.connection import StompConnection
from amqplite.protocol.stomp.events import ConnectRequested
from amqplite.protocol.stomp.frames import Frame, parse_all, serialize
from amqplite.sessions.stomp.session import StompSession
from tests.broker.conftest import FakeClock


class Node:
    """A broker and the shell's duty: apply Outcomes; after-commit confirms wait
    for ``commit()``."""

    def __init__(self) -> None:
        self.broker = Broker(now=FakeClock())
        self.uncommitted: list[Confirm] = []
        self.clients: list[Client] = []

    def connect(self, version: str = "1.2", name: str | None = None, **headers: str) -> Client:
        c = Client(self, version, name or f"session-{len(self.clients) + 1}", headers)
        self.clients.append(c)
        return c

    def run(self) -> None:
        out = self.broker.take_outcome()
        for e in out.effects:
            if isinstance(e, Deliver):
                e.channel.session.transport.deliver(e.channel, e.consumer_tag, e.delivery_tag,
                                                    e.redelivered, e.message, e.properties)
            elif isinstance(e, Confirm):
                if e.after_commit:
                    self.uncommitted.append(e)
                else:
                    e.channel.session.transport.send_confirm(e.channel, e.upto, e.multiple,
                                                             e.nack)
            elif isinstance(e, CancelNotify):
                e.channel.session.transport.send_cancel(e.channel, e.consumer_tag)

    def commit(self) -> None:
        """The store committed: held confirms and receipts go."""
        self.run()
        pending, self.uncommitted = self.uncommitted, []
        for c in pending:
            self.broker.confirm_landed(c)
            c.channel.session.transport.send_confirm(c.channel, c.upto, c.multiple, c.nack)
        for client in self.clients:
            if client.session is not None:
                client.session.release_held()


class Client:
    def __init__(self, node: Node, version: str, name: str, headers: dict[str, Any]) -> None:
        self.node = node
        self.version = version
        self.proto = StompConnection()
        self.finished = False
        self.session: StompSession | None = None
        self.proto.receive_data(serialize("CONNECT", {"accept-version": version, **headers}), 0.0)
        ev = self.proto.next_event()
        assert isinstance(ev, ConnectRequested)
        self.session = StompSession(node.broker, self.proto, user="guest", vhost="/",
                                    peer="127.0.0.1:1", name=name, finish=self._finish)
        self.proto.accept(name, 0.0)
        (connected,) = self.frames()
        assert connected.command == "CONNECTED"

    def _finish(self) -> None:
        self.finished = True

    def send(self, command: str, body: bytes = b"", **headers: str) -> None:
        """One client frame (``_`` in keyword names stands for ``-``), handled
        as the shell's reader handles it, then the Outcome carried out."""
        hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
        self.proto.receive_data(serialize(command, hdrs, body, self.version), 0.0)
        assert self.session is not None
        while (ev := self.proto.next_event()) is not None:
            self.session.handle(ev)
        self.node.run()

    def fill(self, destination: str, *bodies: bytes) -> None:
        """SEND each of ``bodies`` to ``destination``."""
        for body in bodies:
            self.send("SEND", body, destination=destination)

    def frames(self) -> list[Frame]:
        return parse_all(self.proto.data_to_send(0.0), self.version)

    def messages(self) -> list[Frame]:
        out = self.frames()
        assert all(f.command == "MESSAGE" for f in out), out
        return out

    def close(self) -> None:
        assert self.session is not None
        self.session.close()
        self.node.run()
        self.session = None
