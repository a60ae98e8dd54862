"""Stream handlers: super streams (RabbitMQ's topology) and reading a stream's entries.

Reading (``amqplite stream tail``) is read-only: no consumer, no cursor, no
delivery-log row; one bounded range scan of the store after every earlier
submission committed, so only committed entries are shown.
"""

from __future__ import annotations

import datetime
from typing import Any

import trio

from amqplite.admin import moves, views
from amqplite.admin import validate as V
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, bad_request, not_found
from amqplite.admin.validate import body_args, body_int, body_str
from amqplite.broker import superstream as ss
from amqplite.broker.policy import validate_queue_args
from amqplite.broker.streamlog import parse_age
from amqplite.protocol import streamrecord
from amqplite.protocol.codec import Timestamp
from amqplite.protocol.kafka import stored

#: entries one page of ``/entries`` returns at most
MAX_ENTRIES = 1000
#: stream arguments add-super-stream passes on to each partition
PARTITION_ARGS = ("x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
                  "x-initial-cluster-size", "x-queue-leader-locator")


def parse_from(value: str) -> Any:
    """A ``from`` query value as an x-stream-offset: first/last/next, an integer offset,
    an interval (``10m``), or a time (ISO 8601, or ``@<unix seconds>``)."""
    v = value.strip()
    if v in ("first", "last", "next"):
        return v
    try:
        return int(v)
    except ValueError:
        pass
    if parse_age(v) is not None:
        return v
    try:
        if v.startswith("@"):
            return Timestamp(int(v[1:]))
        t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.UTC)
        return Timestamp(int(t.timestamp()))
    except ValueError:
        raise bad_request(f"invalid from '{value}': first, last, next, an offset, an interval "
                          "(10m) or a time (ISO 8601 or @<unix seconds>)") from None


class StreamHandlers(HandlerBase):
    """Routes tagged ``streams``."""

    async def stream_entries(self, req: Request) -> Response:
        vh, q = self._queue(req)
        self._check_read(req, vh.name, q.name)
        st = q.stream
        if st is None:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' is not a stream")
        budget = self.server.settings.admin_peek_max_bytes_value
        cut = False
        count = req.int_arg("count", 100, 1, MAX_ENTRIES)
        truncate = req.int_arg("truncate", 256, -1)
        encoding = req.query.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        spec = parse_from(req.query.get("from", "first"))
        try:
            lo, min_ts = st.resolve(spec, self.broker.now())
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        hi = st.next_offset - 1
        assert self.server.store is not None
        await moves.committed(self.server)
        chunks = await trio.to_thread.run_sync(self.server.store.fetch_stream, q.id, lo,
                                               count) if lo <= hi else []
        out: list[dict[str, Any]] = []
        nxt = lo
        seen = 0
        beyond = False
        for off, data, at in stored.entries(chunks, lo):  # Kafka batches expanded
            if off > hi:
                beyond = True
                break
            if seen == count:
                break
            seen += 1
            ts, key, exchange, rk, props, body = streamrecord.decode(data, at)
            if min_ts is not None and ts < min_ts:
                nxt = off + 1
                continue
            shown = len(body) if truncate < 0 else min(len(body), truncate)
            if shown + len(props) > budget:  # admin_peek_max_bytes: 'next' resumes here
                if out:
                    cut = True
                    break
                shown = max(0, budget - len(props))
                cut = True
            budget -= shown + len(props)
            nxt = off + 1
            info = self._entry(off, ts, key, exchange, rk, props, body, encoding, shown)
            info["truncated"] = shown < len(body)
            out.append(info)
            if cut:
                break
        if lo <= hi and not cut and (seen < count or beyond):
            nxt = hi + 1  # nothing more up to hi (a failed commit leaves a gap): go past it
        return Response({"entries": out, "next": max(nxt, lo), "max_bytes_reached": cut,
                         "first_offset": st.first_offset, "last_offset": st.next_offset - 1})

    @staticmethod
    def _entry(off: int, ts: int, key: int, exchange: str, rk: str, props: bytes, body: bytes,
               encoding: str, truncate: int | None) -> dict[str, Any]:
        """One entry as JSON; ``props`` as stored (with x-stream-offset, as delivered)."""
        from amqplite.broker.model import Message

        m = Message(key, exchange, rk, props, body)
        info = views.message_info(m, body, redelivered=False, encoding=encoding,
                                  truncate=truncate)
        info.pop("redelivered", None)
        info.pop("death", None)
        info["offset"] = off
        info["timestamp"] = views.iso(ts / 1_000_000)
        return info

    async def put_super_stream(self, req: Request) -> Response:
        """RabbitMQ's ``add_super_stream``: a direct exchange (``x-super-stream``) and one
        stream per partition bound by its key and ``x-stream-partition-order``."""
        vh = self._vhost(req.params["vhost"])
        name = V.shortstr(req.params["name"], "name", allow_empty=False)
        body = req.json()
        partitions = body_int(body, "partitions", None, lo=1)
        keys = body.get("routing_keys")
        if keys is not None and (not isinstance(keys, list)
                                 or not all(isinstance(k, str) for k in keys)):
            raise bad_request("routing_keys must be a list of strings")
        routing = body_str(body, "routing", "key")
        if routing not in ("key", "hash"):
            raise bad_request("routing must be key or hash")
        args = body_args(body)
        for a in args:
            if a not in PARTITION_ARGS:
                raise bad_request(f"argument '{a}' is not a stream argument for a partition "
                                  f"({', '.join(PARTITION_ARGS)})")
        bad = validate_queue_args(args)
        if bad is not None:
            raise bad_request(f"invalid arg '{bad[0]}': {bad[1]}")
        try:
            parts = ss.layout(name, partitions, keys)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        if name in vh.exchanges:
            raise bad_request(f"there is already an exchange named {name}")
        for qname, _, _ in parts:
            if qname in vh.queues:
                raise bad_request(f"there is already a queue named {qname}")
        xargs: dict[str, Any] = {ss.SUPER_STREAM_ARG: True}
        if routing == "hash":
            xargs[ss.ROUTING_ARG] = "hash"
        for qname, key, _ in parts:
            V.shortstr(qname, "partition name")
            V.shortstr(key, "routing_keys")
        ch = self._channel(vh.name, self._actor(req))
        undo = self._journal()  # all or nothing, as the CLI promises

        def step() -> None:
            try:
                undo.exchange(vh.name, name)
                self.broker.exchange_declare(ch, name, "direct", durable=True,
                                             arguments=xargs)
                for qname, key, order in parts:
                    undo.queue(vh.name, qname)
                    self.broker.queue_declare(ch, qname, durable=True,
                                              arguments={"x-queue-type": "stream", **args})
                    self.broker.queue_bind(ch, qname, name, key,
                                           {ss.PARTITION_ORDER_ARG: order})
            finally:
                self.broker.close_channel(ch)
        await self._write(step, undo)
        return Response(self._super_info(vh.name, name), 201)

    def _partitions(self, vhost: str, name: str) -> list[tuple[int, str, str]]:
        vh = self._vhost(vhost)
        ex = vh.exchanges.get(name)
        if ex is None or ex.arguments.get(ss.SUPER_STREAM_ARG) is not True:
            raise not_found(f"no super stream '{name}' in vhost '{vh.name}'")
        out = []
        for b in ex.bindings:
            kind, dst = b.destination
            order = b.args_dict.get(ss.PARTITION_ORDER_ARG)
            if kind == "queue" and isinstance(order, int):
                out.append((order, dst, b.routing_key))
        return sorted(out)

    def _super_info(self, vhost: str, name: str) -> dict[str, Any]:
        ex = self._vhost(vhost).exchanges[name]
        return {"name": name, "vhost": vhost,
                "routing": "hash" if ss.is_hash_routing(ex.arguments) else "key",
                "partitions": [{"name": q, "routing_key": k, "order": o}
                               for o, q, k in self._partitions(vhost, name)]}

    async def get_super_stream(self, req: Request) -> Response:
        self._partitions(req.params["vhost"], req.params["name"])  # 404 unless one
        return Response(self._super_info(req.params["vhost"], req.params["name"]))

    async def delete_super_stream(self, req: Request) -> Response:
        """RabbitMQ's ``delete_super_stream``: the partition streams, then the exchange."""
        vh = self._vhost(req.params["vhost"])
        name = req.params["name"]
        parts = self._partitions(vh.name, name)
        ch = self._channel(vh.name, self._actor(req))

        def step() -> None:
            try:
                for _, qname, _ in parts:
                    if qname in vh.queues:
                        self.broker.queue_delete(ch, qname)
                self.broker.exchange_delete(ch, name)
            finally:
                self.broker.close_channel(ch)
        await self._write(step)
        return Response(None, 204)
