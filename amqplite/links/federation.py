"""Exchange federation: one link per federated exchange and upstream, as RabbitMQ's
federation plugin (3.10) builds it, so either end may be amqplite or RabbitMQ.

On the upstream the link declares (names and arguments are the plugin's):

- the upstream exchange itself, if missing, like the local one;
- a queue ``federation: {X} -> {cluster name}`` (durable, ``x-expires`` /
  ``x-message-ttl`` from the upstream's fields), bound to
- an internal exchange ``federation: {X} -> {cluster name} A`` (or ``B``: each
  (re)start builds the other one and then deletes the old, so the bindings
  are swapped without a gap) of type ``x-federation-upstream``, carrying
  ``x-max-hops``, ``x-downstream-name`` and ``x-downstream-vhost``; a fanout
  when the upstream does not know that type;
- one exchange binding from X to it per distinct (routing key, arguments) of
  the local exchange's bindings, with ``x-bound-from``: only what someone here
  subscribed to crosses the link. Bindings added or removed here are
  propagated while the link runs (the broker core tells :class:`Links`).

It consumes the queue and republishes each message to the local exchange with
its routing key and an entry prepended to ``x-received-from``; a message that
already made ``max-hops`` hops or passed through this broker is dropped (and
acked). Acks follow ``ack-mode`` as for shovels (:mod:`links.pump`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import attrs
import trio

from amqplite.broker.exchanges import Binding
from amqplite.broker.exchanges.federation_upstream import (
    DOWNSTREAM_NAME,
    DOWNSTREAM_VHOST,
    MAX_HOPS,
    RECEIVED_FROM,
    already_seen,
    should_forward,
)
from amqplite.links import client as C
from amqplite.links.access import Identity
from amqplite.links.audit import Hops, HopSink
from amqplite.links.backoff import Backoff
from amqplite.links.client_protocol import ContentIn, ProtocolFailure
from amqplite.links.federation_config import UpstreamSpec
from amqplite.links.pump import pump
from amqplite.links.shovel import LocalAddress, address, failure, ran_for
from amqplite.links.uri import Endpoint, parse, strip_credentials
from amqplite.protocol.codec import FieldArray, FieldTable
from amqplite.protocol.methods import (
    BasicConsume,
    BasicDeliver,
    BasicQos,
    ChannelOpen,
    ConfirmSelect,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    Method,
    QueueBind,
    QueueDeclare,
    QueueDelete,
)
from amqplite.protocol.properties import decode_properties, encode_properties

log = logging.getLogger("amqplite.links")

BOUND_FROM = "x-bound-from"
PURPOSE = ("x-internal-purpose", "federation")
#: the main channel (queue, consume) and the command channel (declares that may fail)
MAIN, CMD = 1, 2


@attrs.frozen
class ExchangeInfo:
    """What the link needs of the local exchange (to declare its twin upstream)."""

    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]


@attrs.define
class LinkStatus:
    """What ``/api/federation-links`` shows of a link."""

    status: str = "starting"
    error: str | None = None
    uri: str = ""
    forwarded: int = 0
    timestamp: float = attrs.field(factory=time.time)

    def set(self, status: str, error: str | None = None) -> None:
        self.status, self.error, self.timestamp = status, error, time.time()


def queue_name(upstream_exchange: str, upstream_vhost: str, node: str, vhost: str,
               exchange: str) -> str:
    """The upstream queue's name (``upstream_queue_name`` in the plugin)."""
    if vhost == upstream_vhost:
        down = "" if exchange == upstream_exchange else f":{exchange}"
    else:
        down = f":{vhost}:{exchange}"
    return f"federation: {upstream_exchange} -> {node}{down}"


def link_id(vhost: str, exchange: str, upstream: str) -> str:
    """A short stable id for the API (RabbitMQ shows a hash too)."""
    return hashlib.sha1(f"{vhost}\0{exchange}\0{upstream}".encode()).hexdigest()[:8]


def _thaw(v: Any) -> Any:
    """A binding argument back from its frozen form (tables of x-bound-from)."""
    if isinstance(v, tuple):
        if v and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str)
                     for x in v):
            return FieldTable({k: _thaw(x) for k, x in v})
        return FieldArray([_thaw(x) for x in v])
    return v


def _key(b: Binding) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return b.routing_key, b.arguments


class FederationLink:
    """One link's task: ``run`` until cancelled; binding changes arrive through
    :meth:`binding_changed` (called synchronously by the supervisor)."""

    def __init__(self, vhost: str, exchange: str, spec: UpstreamSpec, policy: str, *,
                 node: str, local: LocalAddress, identity: Identity,
                 info: Callable[[], ExchangeInfo | None],
                 bindings: Callable[[], list[Binding]],
                 record: HopSink | None = None, refused: str | None = None) -> None:
        self.vhost, self.exchange, self.spec, self.policy = vhost, exchange, spec, policy
        self.node = node
        self.id = link_id(vhost, exchange, spec.name)
        #: whom both local ends log in as: the user who defined the upstream
        self.identity = identity
        #: why that user may not run the link (it then waits in "error", saying so)
        self.refused = refused
        self._local = local
        self._info, self._bindings = info, bindings
        #: the delivery log's ``federated`` rows (what ``amqplite trace`` shows)
        self.hops = Hops(record, "federated", vhost, spec.name, f"federation-link-{self.id}")
        self.status = LinkStatus(uri=strip_credentials(spec.uris[0]))
        self._attempt = 0
        self._backoff = Backoff(spec.reconnect_delay)
        #: trio time the current run reached ``running`` (None: not yet)
        self._running_since: float | None = None
        #: the internal exchange suffix in use upstream (A or B), once known
        self._suffix: str | None = None
        self._events_tx, self._events = trio.open_memory_channel[tuple[Binding, bool]](
            float("inf"))
        #: (routing key, args) -> destinations here; bound upstream while non-empty
        self._keys: dict[tuple[str, Any], set[Any]] = {}
        self.connection_name = (f"Federation link (upstream: {spec.name}, "
                                f"policy: {policy})")

    @property
    def upstream_exchange(self) -> str:
        return self.spec.exchange if self.spec.exchange is not None else self.exchange

    def binding_changed(self, b: Binding, added: bool) -> None:
        self._events_tx.send_nowait((b, added))

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        """Run, and after a failure wait (``links.backoff``) and run again. A
        reconnect-delay of 0 still waits :data:`backoff.MIN_DELAY`, doubling:
        RabbitMQ restarts a federation link at once then, which is the hot loop a
        failing link must not become."""
        where = f"federation link {self.spec.name} -> '{self.exchange}' in vhost '{self.vhost}'"
        if self.refused is not None:  # until users or permissions change
            self.status.set("error", self.refused)
            await trio.sleep_forever()
        while True:
            # a restart after a failure keeps showing why it failed until it runs
            self.status.set("starting", self.status.error)
            self._running_since = None
            try:
                await self._once()
                raise ProtocolFailure("the link's connections ended")
            except BaseException as exc:  # one link's failure never reaches the others
                reason = failure(exc)
                wait = self._backoff.failed(ran_for(self._running_since))
                self.status.set("error", reason)
                if self._backoff.should_log(reason):
                    log.warning("%s failed, retrying with backoff from %gs: %s", where,
                                wait, reason)
                self._attempt += 1
                await trio.sleep(wait)

    def _running(self) -> None:
        """Consuming upstream: what the API shows, and the recovery logged once."""
        self.status.set("running")
        self._running_since = trio.current_time()
        if self._backoff.recovered():
            log.warning("federation link %s -> '%s' in vhost '%s' running again",
                        self.spec.name, self.exchange, self.vhost)

    async def _once(self) -> None:
        spec = self.spec
        uri = spec.uris[self._attempt % len(spec.uris)]
        self.status.uri = strip_credentials(uri)
        ep = self.identity.endpoint(parse(uri))
        here = self.identity.endpoint(Endpoint(tls=False, host="", port=0, vhost=self.vhost,
                                               user="", password="", local=True))
        async with C.connect(ep, *address(self._local, ep), name=self.connection_name,
                             peer_check=self.identity.peer_check(ep)) as up, \
                C.connect(here, *self._local(), name=self.connection_name) as down:
            cname = up.server_properties.get("cluster_name")
            upstream_name = cname if isinstance(cname, str) else None
            await up.call(MAIN, ChannelOpen())
            await up.call(CMD, ChannelOpen())
            await self._ensure_upstream_exchange(up)
            queue = queue_name(self.upstream_exchange, ep.vhost, self.node, self.vhost,
                               self.exchange)
            args = FieldTable()
            if spec.expires is not None:
                args.set("x-expires", spec.expires, "l")
            if spec.message_ttl is not None:
                args.set("x-message-ttl", spec.message_ttl, "l")
            args["x-internal-purpose"] = "federation"
            await up.call(MAIN, QueueDeclare(queue, durable=True, arguments=args))
            if self._suffix is None:  # which one a previous run left there
                old_exists = await self._cmd(up, ExchangeDeclare(f"{queue} A", passive=True))
                self._suffix = "A" if old_exists is not None else "B"
            old = self._suffix
            new = "B" if old == "A" else "A"
            internal = f"{queue} {new}"
            await self._declare_internal(up, internal)
            await up.call(MAIN, QueueBind(queue, internal, ""))
            # the snapshot and the events after it: nothing happens between the two
            while True:
                try:
                    self._events.receive_nowait()
                except trio.WouldBlock:
                    break
            self._keys = {}
            ctx = (upstream_name, ep.vhost, internal, new)
            for b in self._bindings():
                await self._binding_op(up, b, True, ctx)
            await self._cmd(up, ExchangeDelete(f"{queue} {old}"))
            self._suffix = new
            if spec.ack_mode != "no-ack":
                await up.call(MAIN, BasicQos(0, min(spec.prefetch, 65535), False))
            await down.call(MAIN, ChannelOpen())
            if spec.ack_mode == "on-confirm":
                await down.call(MAIN, ConfirmSelect())
            await up.call(MAIN, BasicConsume(queue, self.hops.consumer_tag,
                                             no_ack=spec.ack_mode == "no-ack"))
            self._running()
            received = {"uri": strip_credentials(uri), "exchange": self.upstream_exchange}

            def shape(d: BasicDeliver, properties: bytes) -> tuple[str, str, bytes] | None:
                return self._shape(d, properties, received, upstream_name, ep.vhost)

            local_uri = f"amqp://{self.identity.user}@localhost/{quote(self.vhost, safe='')}"

            def forwarded(c: ContentIn, out: tuple[str, str, bytes]) -> None:
                self.status.forwarded += 1
                exchange, key, props = out
                self.hops.record(queue=queue, exchange=exchange, routing_key=key,
                                 properties=props, size=len(c.body), src_uri=uri,
                                 dest_uri=local_uri)

            async with trio.open_nursery() as n:
                n.start_soon(self._follow_bindings, up, ctx)
                await pump(up, down, ack_mode=spec.ack_mode, shape=shape, forwarded=forwarded,
                           written=self.hops.flush)

    def _shape(self, d: BasicDeliver, properties: bytes, received: dict[str, Any],
               upstream_name: str | None, upstream_vhost: str,
               ) -> tuple[str, str, bytes] | None:
        """The local publish of a delivery with its x-received-from entry, or None
        when it made its hops or already came through here (the upstream may be a
        plain fanout that does not filter)."""
        props = decode_properties(properties)
        headers = FieldTable(props.headers or {})
        if not should_forward(headers, self.spec.max_hops, self.node, self.vhost):
            return None
        entry = FieldTable(received)
        entry.set("redelivered", bool(d.redelivered), "t")
        if upstream_name is not None:
            entry["cluster-name"] = upstream_name
        entry["vhost"] = upstream_vhost
        before = headers.get(RECEIVED_FROM)
        headers[RECEIVED_FROM] = FieldArray(
            [entry, *(before if isinstance(before, list | tuple) else [])])
        props.headers = headers
        if not self.spec.trust_user_id:
            props.user_id = None
        return self.exchange, str(d.routing_key), encode_properties(props)

    # ------------------------------------------------------------ upstream setup
    async def _cmd(self, up: C.Connection, method: Method) -> Method | None:
        """A call on the command channel; None when the upstream closed the channel
        (404 for a passive declare of what is missing), which is then reopened."""
        try:
            return await up.call(CMD, method)
        except C.ChannelClosed:
            await up.call(CMD, ChannelOpen())
            return None

    async def _ensure_upstream_exchange(self, up: C.Connection) -> None:
        """The upstream exchange, declared like the local one when it is missing."""
        name = self.upstream_exchange
        if await self._cmd(up, ExchangeDeclare(name, passive=True)) is not None:
            return
        info = self._info()
        if info is None:
            raise ProtocolFailure(f"the local exchange '{self.exchange}' is gone")
        await up.call(CMD, ExchangeDeclare(name, info.type, durable=info.durable,
                                           auto_delete=info.auto_delete,
                                           internal=info.internal,
                                           arguments=FieldTable(info.arguments)))

    async def _declare_internal(self, up: C.Connection, name: str) -> None:
        """The internal exchange the queue is bound to: x-federation-upstream with the
        hop limit, or a fanout where that type is unknown (503 COMMAND_INVALID)."""
        await self._cmd(up, ExchangeDelete(name))
        args = FieldTable()
        args.set(MAX_HOPS, self.spec.max_hops, "l")
        args[DOWNSTREAM_NAME] = self.node
        args[DOWNSTREAM_VHOST] = self.vhost
        args[PURPOSE[0]] = PURPOSE[1]
        try:
            await up.call(CMD, ExchangeDeclare(name, "x-federation-upstream", durable=True,
                                               auto_delete=True, internal=True, arguments=args))
        except C.ChannelClosed as exc:
            await up.call(CMD, ChannelOpen())
            if exc.code != 503:
                raise ProtocolFailure(f"{exc.code} declaring '{name}' upstream") from None
            await up.call(CMD, ExchangeDeclare(name, "fanout", durable=True, auto_delete=True,
                                               internal=True,
                                               arguments=FieldTable([PURPOSE])))

    # ------------------------------------------------------------------ bindings
    def _bound_args(self, args: Mapping[str, Any], upstream_name: str | None,
                    upstream_vhost: str, suffix: str) -> FieldTable | None:
        """The upstream binding's arguments with our ``x-bound-from`` entry, or None
        when the binding must not go further (``update_binding`` in the plugin)."""
        prior = args.get(BOUND_FROM)
        if not isinstance(prior, list | tuple) or not prior:
            hops = self.spec.max_hops
            prior = []
        elif already_seen(upstream_name, upstream_vhost, prior):
            hops = 0
        else:
            first = prior[0]
            prev = first.get("hops") if isinstance(first, Mapping) else None
            hops = min((prev if isinstance(prev, int) else 1) - 1, self.spec.max_hops)
        if hops <= 0:
            return None
        info = FieldTable({"cluster-name": self.node, "vhost": self.vhost,
                           "exchange": f"{self.vhost}:{self.exchange} {suffix}"})
        info.set("hops", hops, "s")
        out = FieldTable({k: v for k, v in args.items() if k != BOUND_FROM})
        out[BOUND_FROM] = FieldArray([info, *prior])
        return out

    async def _binding_op(self, up: C.Connection, b: Binding, added: bool,
                          ctx: tuple[str | None, str, str, str]) -> None:
        upstream_name, upstream_vhost, internal, suffix = ctx
        raw = {k: _thaw(v) for k, v in b.arguments}
        if BOUND_FROM not in raw:  # several bindings, one key: bound once upstream
            dests = self._keys.setdefault(_key(b), set())
            if added:
                first = not dests
                dests.add(b.destination)
                if not first:
                    return
            else:
                dests.discard(b.destination)
                if dests:
                    return
                del self._keys[_key(b)]
        args = self._bound_args(raw, upstream_name, upstream_vhost, suffix)
        if args is None:
            return
        cls = ExchangeBind if added else ExchangeUnbind
        await up.call(CMD, cls(destination=internal, source=self.upstream_exchange,
                               routing_key=b.routing_key, arguments=args))

    async def _follow_bindings(self, up: C.Connection,
                               ctx: tuple[str | None, str, str, str]) -> None:
        async for b, added in self._events:
            await self._binding_op(up, b, added, ctx)

    # ------------------------------------------------------------------ removal
    async def cleanup(self) -> None:
        """Delete the upstream queue and internal exchanges (the link was removed, as
        RabbitMQ does unless ``resource-cleanup-mode`` is ``never``); bounded."""
        if self.spec.cleanup == "never" or self.refused is not None:
            return
        uri = self.spec.uris[self._attempt % len(self.spec.uris)]
        ep = self.identity.endpoint(parse(uri))
        with trio.move_on_after(10):
            try:
                async with C.connect(ep, *address(self._local, ep), name=self.connection_name,
                                     peer_check=self.identity.peer_check(ep)) as up:
                    queue = queue_name(self.upstream_exchange, ep.vhost, self.node,
                                       self.vhost, self.exchange)
                    await up.call(MAIN, ChannelOpen())
                    await up.call(CMD, ChannelOpen())
                    await self._cmd(up, QueueDelete(queue))
                    for suffix in ("A", "B"):
                        await self._cmd(up, ExchangeDelete(f"{queue} {suffix}"))
            except Exception as exc:  # the upstream is away: its queue expires or stays
                log.info("federation link %s -> '%s': cleanup upstream failed: %s",
                         self.spec.name, self.exchange, C.failure_text(exc))



def describe(link: FederationLink) -> dict[str, Any]:
    """RabbitMQ's ``/api/federation-links`` row of a link."""
    st = link.status
    row: dict[str, Any] = {
        "node": "amqplite@localhost", "exchange": link.exchange,
        "upstream_exchange": link.upstream_exchange, "type": "exchange",
        "vhost": link.vhost, "upstream": link.spec.name, "id": link.id,
        "status": st.status, "local_connection": link.connection_name, "uri": st.uri,
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.timestamp)),
        "forwarded": st.forwarded,
    }
    if st.error is not None:
        row["error"] = st.error
    return row
