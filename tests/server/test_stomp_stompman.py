"""stompman 3 (asyncio) against a real broker, used as its users use it: a ``Client``
with ``ConnectionParameters``, ``subscribe`` with a handler (the client acks when the
handler returns and NACKs when it raises), ``send`` with a receipt, ``begin``
transactions, heart-beats both ways.

stompman always sends the host it connects to as the CONNECT's ``host`` header,
which RabbitMQ (and amqplite) read as the vhost: its users create a vhost of that
name (here ``127.0.0.1``), as they must with RabbitMQ."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import stompman
from stompman.connection import Connection
from stompman.frames import HeartbeatFrame

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.stompclient import DEADLINE, stomp_broker, stomp_port

VHOST = "127.0.0.1"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with stomp_broker(tmp_path_factory.mktemp("stompman")) as b:
        with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest")) as api:
            api.put(f"/api/vhosts/{VHOST}").raise_for_status()
            api.put(f"/api/permissions/{VHOST}/guest",
                    json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
        yield b


class CountingConnection(Connection):
    """stompman's own connection, counting the heart-beats it reads (the
    ``connection_class`` hook)."""

    heartbeats = 0

    async def read_frames(self) -> AsyncIterator[Any]:  # type: ignore[override]
        async for frame in super().read_frames():
            if isinstance(frame, HeartbeatFrame):
                type(self).heartbeats += 1
            yield frame


@asynccontextmanager
async def client(b: BrokerProcess, **kw: Any) -> AsyncIterator[stompman.Client]:
    errors: list[Any] = []
    params = stompman.ConnectionParameters(VHOST, stomp_port(b), "guest", "guest")
    async with stompman.Client([params], on_error_frame=errors.append,
                               connect_retry_attempts=1, **kw) as c:
        yield c
    assert not errors, errors


class Inbox:
    """What a subscription's handler got; ``fail`` makes the handler raise (stompman
    then NACKs) for the bodies named there, once each."""

    def __init__(self, fail: set[bytes] | None = None) -> None:
        self.frames: list[Any] = []
        self.fail = fail or set()
        self.changed = asyncio.Event()

    async def handler(self, frame: Any) -> None:
        self.frames.append(frame)
        self.changed.set()
        if frame.body in self.fail:
            self.fail.discard(frame.body)
            raise RuntimeError("not now")

    async def wait(self, pred: Callable[[list[Any]], bool]) -> list[Any]:
        async with asyncio.timeout(DEADLINE):
            while not pred(self.frames):
                self.changed.clear()
                await self.changed.wait()
        return self.frames

    async def bodies(self, n: int) -> list[bytes]:
        return [f.body for f in await self.wait(lambda fs: len(fs) >= n)]


def run(coro: Awaitable[None]) -> None:
    """One test's client session, bounded (stompman's exit waits for unsubscribes)."""
    asyncio.run(asyncio.wait_for(coro, 3 * DEADLINE))


def _queue_depth(b: BrokerProcess, name: str) -> int:
    with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest")) as api:
        r = api.get(f"/api/queues/{VHOST}/{name}")
        r.raise_for_status()
        q = r.json()
        return int(q["messages"])


def _ignore(exc: Exception, frame: Any) -> None:
    """stompman's ``on_suppressed_exception``: the NACK is already sent."""


def test_queue_round_trip_binary_body_and_escaped_headers(broker: BrokerProcess) -> None:
    body = b"bin\x00ary \xff body"
    headers = {"persistent": "true", "odd": "a:b\nc\\d", "content-type": "application/x"}

    async def main() -> None:
        inbox = Inbox()
        async with client(broker) as c:
            sub = await c.subscribe("/queue/sm-q", inbox.handler, ack="client-individual",
                                    on_suppressed_exception=_ignore, receipt_timeout=DEADLINE)
            await c.send(body, "/queue/sm-q", headers=headers, receipt_timeout=DEADLINE)
            (m,) = await inbox.wait(lambda fs: len(fs) == 1)
            assert m.body == body
            assert m.headers["odd"] == "a:b\nc\\d"
            assert m.headers["destination"] == "/queue/sm-q"
            assert m.headers["content-length"] == str(len(body))
            assert m.headers["content-type"] == "application/x"
            assert m.headers["redelivered"] == "false"
            await asyncio.to_thread(wait_for, lambda: _queue_depth(broker, "sm-q") == 0,
                                    DEADLINE, what="the handler's ACK")
            await sub.unsubscribe()

    run(main())


def test_topic_fan_out_with_auto_and_client_acks(broker: BrokerProcess) -> None:
    async def main() -> None:
        a, b = Inbox(), Inbox()
        async with client(broker) as c:
            sa = await c.subscribe("/topic/sm.*.t", a.handler, ack="auto",
                                   on_suppressed_exception=_ignore, receipt_timeout=DEADLINE)
            sb = await c.subscribe("/topic/sm.#", b.handler, ack="client",
                                   on_suppressed_exception=_ignore, receipt_timeout=DEADLINE)
            for i in range(3):
                await c.send(f"t{i}".encode(), "/topic/sm.x.t")
            await c.send(b"only b", "/topic/sm.y", receipt_timeout=DEADLINE)
            assert await b.bodies(4) == [b"t0", b"t1", b"t2", b"only b"]
            assert await a.bodies(3) == [b"t0", b"t1", b"t2"]
            assert a.frames[0].headers["destination"] == "/topic/sm.x.t"
            await c.send(b"end", "/topic/sm.x.t")
            assert (await a.bodies(4))[3] == b"end"  # nothing else came in between
            await sa.unsubscribe()
            await sb.unsubscribe()

    run(main())


def test_transactions_commit_and_abort(broker: BrokerProcess) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with client(broker) as c:
            sub = await c.subscribe("/queue/sm-tx", inbox.handler,
                                    on_suppressed_exception=_ignore, receipt_timeout=DEADLINE)
            async with c.begin() as tx:
                await tx.send(b"one", "/queue/sm-tx")
                await tx.send(b"two", "/queue/sm-tx")
            with pytest.raises(RuntimeError):
                async with c.begin() as tx:
                    await tx.send(b"aborted", "/queue/sm-tx")
                    raise RuntimeError("changed my mind")
            await c.send(b"after", "/queue/sm-tx", receipt_timeout=DEADLINE)
            # the committed two, then the marker sent after the ABORT: the aborted
            # one would have arrived before it
            assert await inbox.bodies(3) == [b"one", b"two", b"after"]
            await sub.unsubscribe()

    run(main())


def test_a_raising_handler_nacks_and_the_message_comes_back(broker: BrokerProcess) -> None:
    async def main() -> None:
        inbox = Inbox(fail={b"flaky"})
        async with client(broker) as c:
            sub = await c.subscribe("/queue/sm-nack", inbox.handler, ack="client-individual",
                                    on_suppressed_exception=_ignore, receipt_timeout=DEADLINE,
                                    headers={"prefetch-count": "1"})
            await c.send(b"flaky", "/queue/sm-nack", headers={"persistent": "true"},
                         receipt_timeout=DEADLINE)
            first, again = await inbox.wait(lambda fs: len(fs) >= 2)
            assert first.body == again.body == b"flaky"
            assert (first.headers["redelivered"], again.headers["redelivered"]) == (
                "false", "true")
            await asyncio.to_thread(wait_for, lambda: _queue_depth(broker, "sm-nack") == 0,
                                    DEADLINE, what="the second delivery's ACK")
            await sub.unsubscribe()

    run(main())


def test_heart_beats_both_ways(broker: BrokerProcess) -> None:
    """stompman sends a heart-beat every second and checks ours (it reconnects if
    three of our intervals pass in silence): the connection stays up, idle, while
    the server's heart-beats arrive."""
    CountingConnection.heartbeats = 0

    async def main() -> None:
        async with client(broker, heartbeat=stompman.Heartbeat(1000, 1000),
                          connection_class=CountingConnection) as c:
            async with asyncio.timeout(DEADLINE):
                while CountingConnection.heartbeats < 4:
                    await asyncio.sleep(0.1)  # polling a counter, not a synchronisation
            assert c.is_alive()
            assert c._connection_manager._reconnection_count == 0  # never reconnected

    run(main())


def test_the_vhost_is_the_host_header(broker: BrokerProcess) -> None:
    """Without a vhost of that name, stompman's CONNECT is refused with an ERROR."""
    params = stompman.ConnectionParameters("localhost", stomp_port(broker), "guest", "guest")

    async def main() -> None:
        with pytest.raises(stompman.FailedAllConnectAttemptsError):
            async with stompman.Client([params], connect_retry_attempts=1):
                pass

    run(main())
