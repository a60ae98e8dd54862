"""One dynamic shovel: consume from the source, publish to the destination, ack
as ``ack-mode`` says; reconnect after ``reconnect-delay`` when either end fails.

``on-confirm`` (the default) acks a source message only once the destination
confirmed it: at least once, so a destination that fails after confirming
but before the ack reached the source gets the message again (duplicates are
possible, losses are not). ``on-publish`` acks once the publish is written;
``no-ack`` consumes without acks. The message-shaping part
(:func:`outgoing`) is pure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from amqplite.links import client as C
from amqplite.links.access import Identity
from amqplite.links.audit import Hops, HopSink
from amqplite.links.backoff import Backoff
from amqplite.links.client_protocol import ContentIn, ProtocolFailure
from amqplite.links.config import ShovelSpec
from amqplite.links.pump import pump
from amqplite.links.uri import Endpoint, mask, parse
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.methods import (
    BasicConsume,
    BasicDeliver,
    BasicQos,
    ChannelOpen,
    ConfirmSelect,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
)
from amqplite.protocol.properties import decode_properties, encode_properties

log = logging.getLogger("amqplite.links")

#: where ``amqp://`` (no host) connects: the broker's own listener, found at run time
LocalAddress = Callable[[], tuple[str, int]]


def address(local: LocalAddress, ep: Endpoint) -> tuple[str, int]:
    """Where to connect for ``ep``: this broker's own listener for ``amqp://``."""
    return local() if ep.local else (ep.host, ep.port)


@attrs.define
class Status:
    """What ``/api/shovels`` shows of a shovel."""

    state: str = "starting"
    reason: str | None = None
    src_uri: str = ""
    dest_uri: str = ""
    forwarded: int = 0
    timestamp: float = attrs.field(factory=time.time)

    def set(self, state: str, reason: str | None = None) -> None:
        self.state, self.reason, self.timestamp = state, reason, time.time()


def passed_here(headers: FieldTable, node: str, vhost: str, name: str) -> bool:
    """Does the ``x-shovelled`` trail already name this shovel (``shovelled-by`` this
    node, same vhost and name)? Then the message came round a loop."""
    trail = headers.get("x-shovelled")
    if not isinstance(trail, list | tuple):
        return False
    return any(isinstance(e, dict) and e.get("shovel-name") == name
               and e.get("shovel-vhost") == vhost and e.get("shovelled-by") == node
               for e in trail)


def outgoing(spec: ShovelSpec, name: str, vhost: str, deliver: BasicDeliver,
             properties: bytes, src_uri: str, dest_uri: str, *,
             node: str = "amqplite") -> tuple[str, str, bytes] | None:
    """(exchange, routing key, properties) of the publish that forwards a delivery;
    None (drop it: the pump acks it at the source) when forward headers are on and
    its trail shows this shovel (``node``'s, RabbitMQ's ``shovelled-by``) already
    forwarded it: a shovel that feeds its own source forwards each message once,
    and its headers do not grow."""
    if spec.dest_queue is not None:
        exchange, key = "", spec.dest_queue
    elif spec.dest_exchange is not None:
        exchange = spec.dest_exchange
        key = spec.dest_exchange_key if spec.dest_exchange_key is not None else \
            str(deliver.routing_key)
    else:
        exchange, key = str(deliver.exchange), str(deliver.routing_key)
    if not (spec.publish_properties or spec.add_forward_headers or spec.add_timestamp_header):
        return exchange, key, properties
    props = decode_properties(properties)
    for k, v in spec.publish_properties.items():
        if hasattr(props, k) and k != "headers":
            setattr(props, k, v)
    headers = FieldTable(props.headers or {})
    if spec.add_forward_headers:
        if passed_here(headers, node, vhost, name):
            return None
        src = {"src-queue": spec.src_queue} if spec.src_queue is not None else {
            "src-exchange": spec.src_exchange, "src-exchange-key": spec.src_exchange_key}
        dest = {k: v for k, v in (("dest-queue", spec.dest_queue),
                                  ("dest-exchange", spec.dest_exchange),
                                  ("dest-exchange-key", spec.dest_exchange_key))
                if v is not None}
        entry = FieldTable({"shovelled-by": node, "shovel-type": "dynamic",
                            "shovel-name": name, "shovel-vhost": vhost,
                            "src-uri": mask(src_uri), "dest-uri": mask(dest_uri),
                            **src, **dest})
        headers["x-shovelled"] = [*headers.get("x-shovelled", []), entry]
    if spec.add_timestamp_header:
        headers["x-shovelled-timestamp"] = int(time.time())
    props.headers = headers
    return exchange, key, encode_properties(props)


class Shovel:
    """One shovel's task: ``run`` until cancelled (restart = cancel and start again).

    ``on_done`` is called when ``src-delete-after`` is reached (the supervisor
    then deletes the parameter, as RabbitMQ does)."""

    def __init__(self, name: str, vhost: str, spec: ShovelSpec, local: LocalAddress,
                 on_done: Callable[[], None], hops: HopSink | None = None, *,
                 identity: Identity, refused: str | None = None,
                 node: str = "amqplite") -> None:
        self.name, self.vhost, self.spec = name, vhost, spec
        #: this broker's cluster name: ``shovelled-by`` in the forward headers
        self.node = node
        #: whom ``amqp://`` without host and credentials logs in as (the definer)
        self.identity = identity
        #: why the definer may not run it (it then waits, terminated, saying so)
        self.refused = refused
        #: the delivery log's ``shovelled`` rows (what ``amqplite trace`` shows)
        self.hops = Hops(hops, "shovelled", vhost, name, self.consumer_tag)
        self._local = local
        self._on_done = on_done
        self.status = Status(src_uri=mask(spec.src_uris[0]), dest_uri=mask(spec.dest_uris[0]))
        self._attempt = 0
        self._backoff = Backoff(spec.reconnect_delay)
        #: trio time the current run reached ``running`` (None: not yet)
        self._running_since: float | None = None
        #: its task returned (terminated for good, or src-delete-after reached)
        self.ended = False

    @property
    def consumer_tag(self) -> str:
        return f"amq.ctag-shovel-{self.name}"

    def _pick(self, uris: tuple[str, ...]) -> str:
        return uris[self._attempt % len(uris)]

    async def run(self) -> None:
        """Run, and after a failure wait (``links.backoff``) and run again; with
        ``reconnect-delay`` 0 a failed shovel stays terminated (RabbitMQ's meaning:
        do not reconnect) until it is restarted."""
        backoff = self._backoff
        where = f"shovel '{self.name}' in vhost '{self.vhost}'"
        if self.refused is not None:  # until users or permissions change
            self.status.set("terminated", self.refused)
            await trio.sleep_forever()
        while True:
            # a restart after a failure keeps showing why it failed until it runs
            self.status.set("starting", self.status.reason)
            self._running_since = None
            try:
                if not await self._once():  # (a run ends in an error or done)
                    raise ProtocolFailure("the shovel's connections ended")
            except BaseException as exc:  # one shovel's failure never reaches the others
                reason = failure(exc)
                if self.spec.reconnect_delay == 0:
                    self.status.set("terminated", f"{reason} (reconnect-delay is 0: "
                                                  "not restarted)")
                    log.warning("%s terminated, not restarted (reconnect-delay 0): %s",
                                where, reason)
                    return
                wait = backoff.failed(ran_for(self._running_since))
                self.status.set("terminated", reason)
                if backoff.should_log(reason):
                    log.warning("%s failed, retrying with backoff from %gs: %s", where,
                                wait, reason)
                self._attempt += 1
                await trio.sleep(wait)
                continue
            self.status.set("terminated", "src-delete-after reached")
            self._on_done()
            return

    def _running(self) -> None:
        """Connected and consuming: what the API shows, and the recovery logged once."""
        self.status.set("running")
        self._running_since = trio.current_time()
        if self._backoff.recovered():
            log.warning("shovel '%s' in vhost '%s' running again", self.name, self.vhost)

    async def _once(self) -> bool:
        """One connected run; True when src-delete-after is reached."""
        spec = self.spec
        src_uri, dest_uri = self._pick(spec.src_uris), self._pick(spec.dest_uris)
        self.status.src_uri, self.status.dest_uri = mask(src_uri), mask(dest_uri)
        login = self.identity.endpoint
        src_ep, dest_ep = login(parse(src_uri, "src-uri")), login(parse(dest_uri, "dest-uri"))
        label = f"Shovel {self.name}"
        check = self.identity.peer_check
        async with C.connect(dest_ep, *address(self._local, dest_ep), name=label,
                             peer_check=check(dest_ep)) as dest, \
                C.connect(src_ep, *address(self._local, src_ep), name=label,
                          peer_check=check(src_ep)) as src:
            await dest.call(1, ChannelOpen())
            if spec.ack_mode == "on-confirm":
                await dest.call(1, ConfirmSelect())
            if spec.dest_queue is not None and not spec.dest_predeclared:
                await _ensure_queue(dest, spec.dest_queue)
            await src.call(1, ChannelOpen())
            if spec.ack_mode != "no-ack":
                await src.call(1, BasicQos(0, min(spec.prefetch, 65535), False))
            if spec.src_queue is not None:
                queue = spec.src_queue
                count = (await _ensure_queue(src, queue) if not spec.src_predeclared
                         else None)
            else:
                ok = await src.call(1, QueueDeclare("", exclusive=True, auto_delete=True))
                assert isinstance(ok, QueueDeclareOk)
                queue, count = str(ok.queue), None
                await src.call(1, QueueBind(queue, spec.src_exchange or "",
                                            spec.src_exchange_key))
            remaining: int | None = None
            if spec.delete_after == "queue-length":
                if count is None:
                    ok = await src.call(1, QueueDeclare(queue, passive=True))
                    assert isinstance(ok, QueueDeclareOk)
                    count = ok.message_count
                remaining = count
            elif isinstance(spec.delete_after, int):
                remaining = spec.delete_after - self.status.forwarded
            if remaining is not None and remaining <= 0:
                return True
            await src.call(1, BasicConsume(queue, self.consumer_tag,
                                           no_ack=spec.ack_mode == "no-ack"))
            self._running()
            return await self._pump(src, dest, src_uri, dest_uri, queue, remaining)

    async def _pump(self, src: C.Connection, dest: C.Connection, src_uri: str,
                    dest_uri: str, queue: str, remaining: int | None) -> bool:
        spec = self.spec

        def shape(deliver: BasicDeliver, properties: bytes) -> tuple[str, str, bytes] | None:
            return outgoing(spec, self.name, self.vhost, deliver, properties, src_uri,
                            dest_uri, node=self.node)

        def forwarded(d: ContentIn, out: tuple[str, str, bytes]) -> None:
            self.status.forwarded += 1
            exchange, key, props = out
            self.hops.record(queue=queue, exchange=exchange, routing_key=key, properties=props,
                             size=len(d.body), src_uri=src_uri, dest_uri=dest_uri)

        await pump(src, dest, ack_mode=spec.ack_mode, shape=shape, forwarded=forwarded,
                   written=self.hops.flush, remaining=remaining)
        return True


async def _ensure_queue(conn: C.Connection, queue: str) -> int:
    """Its message count; a queue that is missing is declared durable (RabbitMQ's
    shovels declare theirs), one that exists is used as it is (a passive declare,
    so its arguments never conflict with ours)."""
    probe = 2
    await conn.call(probe, ChannelOpen())
    try:
        ok = await conn.call(probe, QueueDeclare(queue, passive=True))
    except C.ChannelClosed as exc:
        if exc.code != 404:
            raise
        await conn.call(probe, ChannelOpen())
        ok = await conn.call(probe, QueueDeclare(queue, durable=True))
    assert isinstance(ok, QueueDeclareOk)
    return int(ok.message_count)


def cancellation(exc: BaseException) -> BaseException | None:
    """The Cancelled in ``exc`` without the errors a link's connections raised as they
    were torn down with it (None: no Cancelled). Caught as one group, those errors
    are no failure to retry, and re-raised they would escape the cancel scope that
    stops the link and end the supervisor's nursery, and the broker with it."""
    if isinstance(exc, trio.Cancelled):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0]
    return None


def failure(exc: BaseException) -> str:
    """Why a link's run failed, as text; a cancellation (the link is being stopped) is
    raised again without what the teardown raised beside it, and so is anything
    that is not an Exception."""
    stop = cancellation(exc)
    if stop is not None:
        raise stop from None
    if not isinstance(exc, Exception):
        raise exc
    return C.failure_text(exc)


def ran_for(since: float | None) -> float:
    """Seconds a link has been running since trio time ``since`` (None: it never ran)."""
    return 0.0 if since is None else trio.current_time() - since


def describe(s: Shovel) -> dict[str, Any]:
    """RabbitMQ's ``/api/shovels`` row of a shovel (URIs masked)."""
    st = s.status
    row: dict[str, Any] = {
        "name": s.name, "vhost": s.vhost, "type": "dynamic", "state": st.state,
        "node": "amqplite@localhost",
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.timestamp)),
        "src_uri": st.src_uri, "dest_uri": st.dest_uri, "src_protocol": "amqp091",
        "dest_protocol": "amqp091", "forwarded": st.forwarded,
    }
    spec = s.spec
    for key, value in (("src_queue", spec.src_queue), ("src_exchange", spec.src_exchange),
                       ("dest_queue", spec.dest_queue), ("dest_exchange", spec.dest_exchange)):
        if value is not None:
            row[key] = value
    if st.reason is not None:
        row["reason"] = st.reason
    return row
