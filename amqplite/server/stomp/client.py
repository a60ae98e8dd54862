"""One STOMP connection: the trio shell (server/shell.py: reader, writer, timers)
on the sans-I/O ``StompConnection`` and the ``StompSession`` rules."""

from __future__ import annotations

import logging
import math
import secrets
import select
import time
from typing import TYPE_CHECKING

import trio
from mypy_extensions import mypyc_attr

from amqplite import __version__
from amqplite.broker.model import Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.stomp import errors as stomp_errors
from amqplite.protocol.stomp.connection import StompConnection
from amqplite.protocol.stomp.events import (
    AckReceived,
    ConnectRequested,
    DisconnectReceived,
    NackReceived,
    ProtocolError,
    SendReceived,
)
from amqplite.server.shell import WRITE_HIGH_WATER, ConnectionShell
from amqplite.sessions.stomp.session import StompSession

if TYPE_CHECKING:
    from amqplite.server.stomp.listener import StompListener

log = logging.getLogger("amqplite.stomp")

#: a DISCONNECT's RECEIPT waits for the commits before it, at most this many rounds
_DISCONNECT_ROUNDS = 20
#: how long the deletes of ACK/NACK frames may wait for another commit to ride
#: (``StompClient._interpret``): a kill -9 may redeliver what was acked this late
ACK_LINGER_S = 0.005
#: how long a windowed publisher's SENDs wait for the rest of its window
#: before an idle store commits them (``StompClient._interpret``)
SEND_LINGER_S = 0.001
#: how long receipted SENDs wait for their subscribers' ACKs before the store
#: commits them anyway (``StompClient._interpret``), while subscribers ack
SEND_HOLD_S = 0.004
#: "while subscribers ack": a read of ACK/NACKs came this recently
ACKING_S = 0.1


@mypyc_attr(native_class=False)  # compiled, its base (server/shell.py) is not
class StompClient(ConnectionShell):
    """One STOMP connection; its session rules are the broker's transport."""

    kind = "STOMP"

    def __init__(self, listener: StompListener, stream: trio.abc.Stream,
                 peer: tuple[str, int], cert_user: str | None = None) -> None:
        super().__init__(stream, peer, log)
        #: over TLS: the verified client certificate's user name (its CN)
        self.cert_user = cert_user
        # typed here, not in the class body: compiled, a Python class's annotations
        # are evaluated at import, and StompListener is imported for the type checker only
        self.listener: StompListener = listener
        self.broker = listener.broker
        self.proto: StompConnection = StompConnection(listener.limits, trio.current_time())
        self.rules: StompSession | None = None
        #: what the admin listing reads (the CONNECT's ``client-id``, if any)
        self.client_id = ""
        self._timer_wake = trio.Event()
        #: the last read held only ACK/NACK frames nobody waits on (see ``_interpret``)
        self._settled_only = False
        #: the last read's SENDs may wait for the rest of their window
        self._gather = False
        self._poller: select.poll | None = None
        #: the last read's batch was kept open to gather (the next one flushes)
        self._gathered = False
        #: the last read's receipted SENDs wait for their subscribers' ACKs
        self._hold = False

    @property
    def session(self) -> Session | None:
        """The broker session (None before login): what the admin listing reads."""
        return None if self.rules is None else self.rules.session

    @property
    def protocol(self) -> str:
        return f"STOMP {self.proto.version or '1.0'}"

    @property
    def timeout(self) -> int:
        """The heart-beat we expect from the client, in seconds (0: none)."""
        return int(self.proto.receive_interval)

    async def run(self) -> None:
        await self.serve(self.listener.connections)

    # ------------------------------------------------------------ the shell's hooks
    def _outgoing(self) -> bytes:
        return self.proto.data_to_send(trio.current_time())

    async def _handle_events(self) -> None:
        proto = self.proto
        self._settled_only = self._gather = False
        settled_only = True
        receipted = False
        while (ev := proto.next_event()) is not None:
            rules = self.rules
            t = type(ev)
            if t is SendReceived:
                settled_only = False
                receipted = receipted or ev.receipt is not None  # type: ignore[union-attr]
            elif settled_only and ((t is not AckReceived and t is not NackReceived)
                                   or ev.receipt is not None):  # type: ignore[union-attr]
                settled_only = False
            if type(ev) is ConnectRequested:
                self._connect(ev)
            elif type(ev) is ProtocolError:
                log.info("STOMP %s: %s: %s", self.name, ev.message, ev.detail.strip())
                self.finish()
            elif rules is not None:
                rules.handle(ev)
                if type(ev) is DisconnectReceived:
                    await self._disconnect(rules)
                    return
            if self._finishing:
                return
        self._settled_only = settled_only
        listener = self.listener
        self._hold = (receipted and self.rules is not None and not self.rules.held
                      and trio.current_time() - listener.acked_at < ACKING_S)
        self._gather = (receipted and self._fd >= 0 and self.rules is not None
                        and self.rules.last_released > 1
                        and listener.persistence.inflight == 0)
        if self.rules is not None and self.rules.held:
            await self.listener.committed()  # a RECEIPT means it is stored
            self.rules.release_held()
        if proto.closed:
            self.finish()

    def _interpret(self) -> None:
        """The store batch goes to the writer after each read, except:

        - a read of ACK/NACKs only (no receipt asked) keeps it open a moment:
          their deletes then ride the next commit someone waits for (the
          publishers' SENDs) instead of taking one of their own, which a SEND
          arriving just after would wait out (a whole fsync more per window of
          receipts). Nobody hears of an ack's commit, and the listener hands the
          batch over within ``ACK_LINGER_S`` anyway.
        - receipted SENDs while subscribers ack (an ACK read came within
          ``ACKING_S``): the batch waits up to ``SEND_HOLD_S`` for the ACKs of
          the messages just delivered. A read of ACKs hands a batch someone
          waits on over at once: a message delivered and acked before its
          insert commits is never written (``Persistence.flush_settled``), and
          a commit left with nothing durable takes no fsync
          (``store.committer.needs_fsync``), or none is needed at all, so the
          RECEIPTs leave without waiting for the disk, as RabbitMQ's do when a
          consumer's ack overtakes the write (its message store confirms it
          "ignored"). A RECEIPT still leaves only after its commit.
        - receipted SENDs of a windowed publisher, while the store is idle and
          more of its bytes already wait in the socket (a client writing frame
          by frame): the next read, which then always flushes, takes them along
          into the same commit, instead of this commit taking the window's
          first SENDs alone.
        """
        listener = self.listener
        gathered, self._gathered = self._gathered, False
        if self._settled_only:
            listener.acked_at = trio.current_time()
            persistence = listener.persistence
            if persistence.batch_waited_on:  # held SENDs wait: their ACKs came
                listener.interpret(flush=False)
                persistence.flush_settled()
            else:
                listener.interpret(flush=False)
                listener.flush_soon()
        elif self._hold:
            listener.interpret(flush=False)
            listener.flush_soon(SEND_HOLD_S)
        elif self._gather and not gathered and self._readable():
            # once: a client streaming its window must not keep an idle store waiting
            self._gathered = True
            listener.interpret(flush=False)
            listener.flush_soon(SEND_LINGER_S)  # a backstop: the next read flushes
        else:
            listener.interpret()

    def _readable(self) -> bool:
        """More bytes wait in the socket now (one poll(2), no wait)."""
        poller = self._poller
        if poller is None:
            poller = self._poller = select.poll()
            poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))

    async def _disconnect(self, rules: StompSession) -> None:
        """DISCONNECT: its RECEIPT once everything before it is confirmed, then close."""
        for _ in range(_DISCONNECT_ROUNDS):
            await self.listener.committed()
            rules.release_held()
            if not rules.receipts_pending:
                break
        self.proto.close()
        self.finish()

    def _connect(self, ev: ConnectRequested) -> None:
        listener = self.listener
        login = ev.login
        users = listener.users
        s = listener.settings
        vhost = ev.host or s.stomp_default_vhost
        passcode = ev.passcode or ""
        if login is None and self.cert_user is not None and s.stomp_ssl_cert_login:
            login = self.cert_user  # SASL EXTERNAL's rule: the user exists, may come from here
            user = users.identify(login, self.peer_host)
        else:
            if login is None and s.stomp_default_user:
                login, passcode = s.stomp_default_user, s.stomp_default_pass
            user = None if login is None else users.authenticate(login, passcode,
                                                                 self.peer_host)
        if user is None:
            name = login or ""
            line = users.failure_line(f"STOMP {self.name}", name, self.peer_host,
                                      time.monotonic())
            if line is not None:
                log.warning("%s", line)
            self.proto.reject(stomp_errors.access_refused(name))
            return
        assert login is not None
        try:
            self.broker.check_vhost_access(login, vhost)
        except AMQPError:
            log.warning("STOMP %s: user %r may not use vhost %r", self.name, login, vhost)
            self.proto.reject(stomp_errors.vhost_access_denied(vhost))
            return
        if (vlimit := listener.vhost_connection_limit(vhost)) is not None:
            log.warning("STOMP %s refused: vhost '%s' connection limit (%d) is reached",
                        self.name, vhost, vlimit)
            self.proto.reject(stomp_errors.vhost_connection_limit(vhost, vlimit))
            return
        if listener.at_connection_limit():  # as AMQP's 530: the node's limit is reached
            log.warning("STOMP %s refused: connection limit (%d) is reached", self.name,
                        listener.settings.max_connections)
            self.proto.reject(stomp_errors.StompError(
                "Bad CONNECT", "connection refused: node connection limit "
                               f"({listener.settings.max_connections}) is reached\n"))
            return
        name = "session-" + secrets.token_urlsafe(16)
        self.rules = StompSession(self.broker, self.proto, user=login, vhost=vhost,
                                  peer=self.name, name=name, flush=self.flush,
                                  finish=self.finish,
                                  default_nack_requeue=s.stomp_default_nack_requeue)
        self.client_id = ev.headers.get("client-id", "")
        self.proto.accept(name, trio.current_time(), server=f"amqplite/{__version__}")
        self._timer_wake.set()  # the heart-beat deadlines start now

    async def _timers(self) -> None:
        """The login timeout and heart-beats both ways (the protocol object keeps the
        clock; this task only wakes it at its deadline)."""
        proto = self.proto
        while not proto.closed:
            deadline = proto.deadline
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._timer_wake.wait()
            self._timer_wake = trio.Event()
            if proto.check_timers(trio.current_time()):
                log.info("STOMP %s: %s", self.name, "no heart-beat from the client"
                         if self.rules is not None else "no CONNECT in time")
                self.finish()
                return
            if proto.pending_bytes():
                self._wake.set()

    # ------------------------------------------------------------ the end
    def _end(self) -> None:
        rules = self.rules
        if rules is not None and not rules.closed:
            self.listener.execute(rules.close)

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, the admin API): ERROR with the reason; the
        session ends now."""
        if self.rules is not None:
            self.rules.force_close(code, text)
            self._end()
        self.finish()

    def flush(self) -> None:
        """Send from this task when the socket takes it (``send_now``): a RECEIPT
        leaves as its commit lands, without a writer wake-up."""
        s = self.session
        if s is not None and not s.writable:
            self._wake.set()  # the writer drains, then makes the session writable again
            return
        self.send_now()
        if s is not None and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)
