"""One Kafka connection's rules: a decoded request in, its answer (or what the answer
waits for) out. No sockets, no clocks: ``now`` comes in, and the shell
(amqplite/server/kafka/) does the waiting a step names.

Why steps instead of awaiting here: Kafka clients pipeline, and answers must
leave in request order, yet a Produce with ``acks=all`` waits for its commit,
a Fetch long-polls and a JoinGroup waits for the rebalance. ``handle`` returns
at once with one of:

- ``bytes``: the framed response, ready; ``None``: no response (``acks=0``);
- :class:`AfterCommit`: build the response once ``Server.committed()`` returned;
- :class:`AfterConfirm`: build it once the channel's Confirms cover ``seq``;
- :class:`FetchWait`: a Fetch; plan it with ``fetch_plan`` until it is ready or
  its deadline passed, then ``fetch_reads``;
- :class:`Reads`: store reads (``fetch_stream``), then ``resume`` with the chunks;
- :class:`GroupWait`: the coordinator answers ``handle`` later (or now).

The shell keeps one slot per answered request, in order, and writes only the
filled head of that queue. Group answers completed by this connection's calls
(and meant for any connection) are collected in ``take_answers``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState, Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka import stored
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import LogRecord, produced
from amqplite.protocol.kafka.messages import ApiKey, Request, api_versions_body, encode_response
from amqplite.protocol.kafka.primitives import CodecError
from amqplite.sessions.kafka import admin
from amqplite.sessions.kafka.answers import Answers
from amqplite.sessions.kafka.coordinator import GroupCoordinator
from amqplite.sessions.kafka.steps import (
    AfterCommit,
    AfterConfirm,
    Close,
    FetchWait,
    Reads,
    Step,
)
from amqplite.sessions.kafka.topics import (
    NODE_ID,
    Fetched,
    FetchRead,
    OffsetAnswer,
    OffsetScan,
    StoredBatch,
    Topics,
)

log = logging.getLogger("amqplite.kafka")

CLUSTER_ID = "amqplite"
#: what the delivery log and the admin API call this front's sessions
PROTOCOL = "Kafka"
#: store reads one Fetch may make per partition (each at most ``READ_BATCH`` entries)
MAX_READS = 16


#: (topic, [(partition, its plan)]) in request order
FetchPlan = list[tuple[str, list[tuple[int, FetchRead]]]]


def parse_plain(auth: bytes) -> tuple[str, str] | None:
    """SASL/PLAIN's ``authzid NUL user NUL password`` (RFC 4616), or None if malformed."""
    parts = bytes(auth).split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError:
        return None


class KafkaSession:
    """A Kafka connection: before a login only ApiVersions and SASL; then every API of
    ``messages.SUPPORTED`` as the broker session's user in its vhost, through one
    channel in confirm mode (Produce's ``acks=all`` waits for the Confirm).

    ``authenticate(name, password)`` returns the user name or None; ``anonymous``
    is whom a client that skips SASL acts as (None: it must log in);
    ``default_vhost`` the vhost of a SASL name without ``vhost:``.
    """

    def __init__(self, broker: Broker, topics: Topics, coordinator: GroupCoordinator, *,
                 conn_id: int, peer: str, peer_host: str, advertised: tuple[str, int],
                 authenticate: Callable[[str, str], str | None] = lambda _n, _p: None,
                 anonymous: str | None = None, default_vhost: str = "/",
                 flush: Callable[[], None] = lambda: None,
                 finish: Callable[[], None] = lambda: None) -> None:
        self.broker = broker
        self.topics = topics
        self.coordinator = coordinator
        self.conn_id = conn_id
        self.peer = peer
        self.peer_host = peer_host
        self.advertised = advertised
        self.authenticate = authenticate
        self.anonymous = anonymous
        self.default_vhost = default_vhost
        self._flush = flush
        self._finish = finish
        self.session: Session | None = None
        self.ch: ChannelState | None = None
        self.client_id = ""
        self._mechanism: str | None = None
        #: every Confirm up to this seq arrived; single Confirms past it; nacked ranges
        self.confirmed_upto = 0
        self._singles: set[int] = set()
        self.nacked: list[tuple[int, int]] = []
        self._answers: list[Answers] = []
        #: the connection must close once what is queued is sent (a failed login)
        self.closing = False
        self.closed = False
        self.produced = 0
        self.fetched = 0

    # ------------------------------------------------------------ login
    @property
    def vhost(self) -> str:
        assert self.session is not None
        return self.session.vhost

    def login(self, user: str, vhost: str) -> None:
        """Open the broker session (raises AMQPError when the vhost is refused)."""
        self.broker.check_vhost_access(user, vhost)
        s = self.session = self.broker.open_session(user, vhost, self.peer)
        s.protocol = PROTOCOL
        s.transport = self
        s.client_properties = {"product": "Kafka", "client_id": self.client_id}
        s.client_id = self.client_id or None
        self.ch = self.broker.open_channel(s, 1)
        self.broker.confirm_select(self.ch)

    def take_answers(self) -> list[Answers]:
        """Group answers the last calls completed (for this or other connections)."""
        out, self._answers = self._answers, []
        return out

    # ------------------------------------------------------------ requests
    def handle(self, req: Request, now: float) -> Step:
        """One request; raises :class:`Close` when the connection must close."""
        key = req.api_key
        if req.header.client_id and not self.client_id:
            self.client_id = req.header.client_id
        if key == ApiKey.API_VERSIONS:
            return self.answer(req, api_versions_body())
        if key == ApiKey.SASL_HANDSHAKE:
            return self._sasl_handshake(req)
        if key == ApiKey.SASL_AUTHENTICATE:
            return self._sasl_authenticate(req)
        if self.ch is None:
            if self.anonymous is None:
                raise Close("a request before SASL authentication, and anonymous "
                            "clients are not allowed (kafka_allow_anonymous)")
            try:
                self.login(self.anonymous, self.default_vhost)
            except AMQPError as exc:
                raise Close(f"anonymous user '{self.anonymous}' may not use vhost "
                            f"'{self.default_vhost}': {exc}") from None
        return _HANDLERS[key](self, req, now)

    @staticmethod
    def answer(req: Request, body: dict) -> bytes:
        return encode_response(req.api_key, req.api_version, req.header.correlation_id, body)

    # ------------------------------------------------------------ SASL
    def _sasl_handshake(self, req: Request) -> bytes:
        mech = req.body["mechanism"]
        ok = mech == "PLAIN" and self.ch is None
        self._mechanism = mech if ok else None
        error = (ErrorCode.NONE if ok else ErrorCode.ILLEGAL_SASL_STATE if self.ch is not None
                 else ErrorCode.UNSUPPORTED_SASL_MECHANISM)
        return self.answer(req, {"error_code": error, "mechanisms": ["PLAIN"]})

    def _sasl_authenticate(self, req: Request) -> bytes:
        if self._mechanism != "PLAIN" or self.ch is not None:
            self.closing = True
            return self.answer(req, {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                                     "error_message": "SaslHandshake PLAIN comes first",
                                     "auth_bytes": b""})
        creds = parse_plain(req.body["auth_bytes"])
        name = "" if creds is None else creds[0]
        vhost, sep, user = name.partition(":")
        if not sep:
            vhost, user = self.default_vhost, name
        ok = creds is not None and self.authenticate(user, creds[1]) is not None
        message = None
        if ok:
            try:
                self.login(user, vhost)
            except AMQPError as exc:  # the vhost is refused
                ok, message = False, f"user '{user}' may not use vhost '{vhost}': {exc}"
        if not ok:
            self.closing = True
            return self.answer(req, {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                                     "error_message": message or "Authentication failed: "
                                     "invalid credentials", "auth_bytes": b""})
        return self.answer(req, {"error_code": ErrorCode.NONE, "error_message": None,
                                 "auth_bytes": b"", "session_lifetime_ms": 0})

    # ------------------------------------------------------------ Metadata
    def broker_row(self) -> dict:
        host, port = self.advertised
        return {"node_id": NODE_ID, "host": host, "port": port, "rack": None}

    def _metadata(self, req: Request, now: float) -> bytes:
        assert self.ch is not None
        body = req.body
        wanted = body["topics"]
        names = None if wanted is None else [t["name"] for t in wanted]
        if req.api_version == 0 and not names:
            names = None  # v0: an empty list means every topic
        infos = self.topics.metadata(self.ch, names, body["allow_auto_topic_creation"])
        topics = [{"error_code": info.error, "name": name, "is_internal": False,
                   "partitions": [{"error_code": 0, "partition_index": i,
                                   "leader_id": NODE_ID, "leader_epoch": 0,
                                   "replica_nodes": [NODE_ID], "isr_nodes": [NODE_ID],
                                   "offline_replicas": []}
                                  for i in range(len(info.partitions))]}
                  for name, info in infos.items()]
        return self.answer(req, {"throttle_time_ms": 0, "brokers": [self.broker_row()],
                                 "cluster_id": CLUSTER_ID, "controller_id": NODE_ID,
                                 "topics": topics})

    # ------------------------------------------------------------ Produce
    def _produce(self, req: Request, now: float) -> Step:
        ch = self.ch
        assert ch is not None
        body = req.body
        acks = body["acks"]
        refuse: ErrorCode | None = None
        if body["transactional_id"] is not None:
            refuse = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif acks not in (0, 1, -1):
            refuse = ErrorCode.INVALID_REQUIRED_ACKS
        #: per partition: index, outcome, producer id, its first confirm seq
        results: list[tuple[str, list[tuple[int, Any, int, int]]]] = []
        last_seq = 0
        for t in body["topic_data"]:
            name = t["name"]
            parts: list[tuple[int, Any, int, int]] = []
            for p in t["partition_data"]:
                idx = p["index"]
                if refuse is not None:
                    parts.append((idx, refuse, -1, 0))
                    continue
                cs = ch.confirms
                seq_lo = cs.next_seq if cs is not None else 0
                out, pid = self._produce_partition(ch, name, idx, p["records"])
                parts.append((idx, out, pid, seq_lo))
                if not isinstance(out, ErrorCode) and out.seq is not None:
                    last_seq = max(last_seq, out.seq)
            results.append((name, parts))
        if acks == 0:
            return None

        def build() -> bytes:
            return self.answer(req, {"responses": [
                {"name": name, "partition_responses": [
                    self._produce_row(idx, out, pid, lo, acks) for idx, out, pid, lo in parts]}
                for name, parts in results], "throttle_time_ms": 0})
        if acks == -1 and last_seq > 0 and refuse is None:
            return AfterConfirm(last_seq, build)
        return build()

    def _produce_partition(self, ch: ChannelState, topic: str, idx: int, data: Any,
                           ) -> tuple[Any, int]:
        """One partition's batches appended: a ``Produced`` (or an ErrorCode) and the
        producer id."""
        if data is None:
            return ErrorCode.INVALID_RECORD, -1
        try:
            batches = [(b, rb.decode_batch(b)) for b in rb.split_batches(data)]
        except CodecError as exc:
            log.info("Kafka %s: a corrupt batch for %s-%d: %s", self.peer, topic, idx, exc)
            return ErrorCode.CORRUPT_MESSAGE, -1
        if not batches:
            return ErrorCode.INVALID_RECORD, -1
        first = None
        last = None
        for raw, b in batches:
            if b.is_transactional or b.is_control:
                return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, b.producer_id
            assert b.records is not None
            if stored.storable(b):
                out = self.topics.produce_batch(ch, topic, idx, raw, b)
            else:
                out = self.topics.produce(ch, topic, idx, produced(b), producer_id=b.producer_id,
                                          producer_epoch=b.producer_epoch,
                                          base_sequence=b.base_sequence)
            if out.error != ErrorCode.NONE:
                return (out if first is None else first), b.producer_id
            self.produced += len(b.records)
            first = first or out
            last = out
        assert first is not None and last is not None
        return attrs.evolve(last, base_offset=first.base_offset), batches[-1][1].producer_id

    def _produce_row(self, idx: int, out: Any, pid: int, seq_lo: int, acks: int) -> dict:
        if isinstance(out, ErrorCode):
            return {"index": idx, "error_code": out, "base_offset": -1}
        error, message = out.error, out.message
        if acks == -1 and out.seq is not None and self._nacked(seq_lo, out.seq):
            self.topics.produce_failed(out, pid)
            error, message = ErrorCode.KAFKA_STORAGE_ERROR, "the store did not commit"
        return {"index": idx, "error_code": error, "base_offset": out.base_offset,
                "log_append_time_ms": -1, "log_start_offset": out.log_start_offset,
                "error_message": message}

    def _nacked(self, lo: int, hi: int) -> bool:
        """Was any Confirm of seqs ``lo..hi`` a nack?"""
        return bool(self.nacked) and any(a <= hi and b >= lo for a, b in self.nacked)

    # ------------------------------------------------------------ Fetch
    def _fetch(self, req: Request, now: float) -> FetchWait:
        return FetchWait(req, now + max(0, req.body["max_wait_ms"]) / 1000)

    def fetch_plan(self, w: FetchWait) -> FetchPlan:
        """Each partition's read from where the client is (again after a wake-up)."""
        assert self.ch is not None
        body = w.request.body
        left = body["max_bytes"] if body["max_bytes"] > 0 else 0x7FFFFFFF
        out: FetchPlan = []
        for t in body["topics"]:
            rows = []
            for p in t["partitions"]:
                r = self.topics.fetch(self.ch, t["topic"], p["partition"], p["fetch_offset"],
                                      max(1, min(p["partition_max_bytes"], left)))
                rows.append((p["partition"], r))
            out.append((t["topic"], rows))
        return out

    @staticmethod
    def fetch_ready(plan: FetchPlan, min_bytes: int = 1) -> bool:
        """Answer now: a partition has an error, or the partitions have about
        ``min_bytes`` of records (``FetchRead.available``, an estimate from the
        streams' average entry size: no store read to know), at least one record."""
        total = 0
        for _t, rows in plan:
            for _p, r in rows:
                if r.error != ErrorCode.NONE:
                    return True
                if r.read:
                    total += max(1, r.available)
        return total >= max(1, min_bytes)

    def wait_targets(self, plan: FetchPlan) -> list[tuple[str, str, int]]:
        """(vhost, topic, partition) of each partition a long poll waits on."""
        return [(self.vhost, t, p) for t, rows in plan for p, _r in rows]

    def fetch_reads(self, w: FetchWait, plan: FetchPlan) -> bytes | Reads:
        """The store reads of the planned partitions, then the response. A store read
        brings at most ``READ_BATCH`` entries: a partition whose read filled it and
        whose ``max_bytes`` has room is read on (up to ``MAX_READS`` rounds), so one
        Fetch answers with as much as the client asked for, not one read's worth."""
        wanted = [r for _t, rows in plan for _p, r in rows if r.read]
        if not wanted:
            return self._fetch_answer(w, plan, {})
        got: dict[int, Fetched] = {}
        return self._read_on(w, plan, [(r, r) for r in wanted], got, 1)

    def _read_on(self, w: FetchWait, plan: FetchPlan, todo: list[tuple[FetchRead, FetchRead]],
                 got: dict[int, Fetched], rounds: int) -> Reads:
        def resume(chunks: list[Any]) -> bytes | Reads:
            more: list[tuple[FetchRead, FetchRead]] = []
            for (first, cur), c in zip(todo, chunks, strict=True):
                f = Topics.fetched(cur, c)
                read = f.next_offset - cur.lo if f.records else 0
                prev = got.get(id(first))
                if prev is not None:
                    f = attrs.evolve(f, records=prev.records + f.records)
                got[id(first)] = f
                used = sum(r.size for r in f.records)
                if (read >= cur.limit and f.next_offset <= first.hi
                        and used < first.max_bytes and rounds < MAX_READS):
                    more.append((first, attrs.evolve(cur, lo=f.next_offset,
                                                     max_bytes=first.max_bytes - used)))
            if more:
                return self._read_on(w, plan, more, got, rounds + 1)
            return self._fetch_answer(w, plan, got)
        return Reads([(cur.queue_id, cur.lo, cur.limit) for _f, cur in todo], resume)

    def _fetch_answer(self, w: FetchWait, plan: FetchPlan, got: dict[int, Fetched]) -> bytes:
        body = w.request.body
        left = body["max_bytes"] if body["max_bytes"] > 0 else 0x7FFFFFFF
        responses = []
        for topic, rows in plan:
            parts = []
            for p, r in rows:
                f = got.get(id(r))
                records = None
                if f is not None and f.records and left > 0:
                    records = encode_fetched(f.records)
                    left -= len(records)
                    n = f.next_offset - max(r.lo, f.records[0].offset)
                    self.fetched += n
                    # a read of the log, not a delivery: one row per partition answered
                    self.broker.log_event(
                        "fetched", self.vhost, None, r.queue, consumer_tag=self.client_id or None,
                        reason=f"offset:{r.lo}-{f.next_offset - 1} records:{n} "
                               f"bytes:{len(records)}", protocol=PROTOCOL)
                elif f is not None and not f.records and f.next_offset > r.lo:
                    # offsets that hold nothing (a failed commit's): skip them
                    records = rb.encode_empty_batch(r.lo, f.next_offset - 1)
                hw = r.high_watermark if f is None else f.high_watermark
                parts.append({"partition_index": p, "error_code": r.error,
                              "high_watermark": hw, "last_stable_offset": hw,
                              "log_start_offset": r.log_start_offset if f is None
                              else f.log_start_offset,
                              "aborted_transactions": None, "preferred_read_replica": -1,
                              "records": records or b""})
            responses.append({"topic": topic, "partitions": parts})
        return self.answer(w.request, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                       "responses": responses})

    # ------------------------------------------------------------ ListOffsets
    def _list_offsets(self, req: Request, now: float) -> AfterCommit:
        """Answered after the commit: ``latest`` counts appends not committed yet."""
        return AfterCommit(lambda: self._list_offsets_now(req))

    def _list_offsets_now(self, req: Request) -> bytes | Reads:
        assert self.ch is not None
        found: list[tuple[str, list[tuple[int, OffsetAnswer | OffsetScan]]]] = [
            (t["name"], [(p["partition_index"],
                          self.topics.list_offset(self.ch, t["name"], p["partition_index"],
                                                  p["timestamp"]))
                         for p in t["partitions"]])
            for t in req.body["topics"]]
        return self._scan(req, found)

    def _scan(self, req: Request, found: list[tuple[str, list[tuple[int, Any]]]],
              ) -> bytes | Reads:
        scans = [a for _t, rows in found for _p, a in rows if isinstance(a, OffsetScan)]
        if scans:
            def resume(chunks: list[Any]) -> bytes | Reads:
                done = {id(s): Topics.scanned(s, c) for s, c in zip(scans, chunks, strict=True)}
                return self._scan(req, [(t, [(p, done.get(id(a), a)) for p, a in rows])
                                        for t, rows in found])
            return Reads([(s.queue_id, s.lo, s.limit) for s in scans], resume)
        return self.answer(req, {"throttle_time_ms": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "error_code": a.error,
                                        "timestamp": a.timestamp, "offset": a.offset,
                                        "leader_epoch": 0} for p, a in rows]}
            for t, rows in found]})

    # ------------------------------------------------------------ InitProducerId
    def _init_producer_id(self, req: Request, now: float) -> bytes:
        error, pid, epoch = self.topics.init_producer_id(req.body["transactional_id"])
        return self.answer(req, {"throttle_time_ms": 0, "error_code": error,
                                 "producer_id": pid, "producer_epoch": epoch})

    # ------------------------------------------------------------ the broker's transport
    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        done = self.confirmed_upto
        if multiple:
            if nack:
                self.nacked.append((done + 1, upto))
            if upto > done:
                done = upto
                self._singles = {s for s in self._singles if s > done}
        else:
            if nack:
                self.nacked.append((upto, upto))
            if upto > done:
                self._singles.add(upto)
        singles = self._singles
        while done + 1 in singles:
            done += 1
            singles.remove(done)
        self.confirmed_upto = done

    def confirmed(self, seq: int) -> bool:
        return self.confirmed_upto >= seq

    def deliver(self, *args: Any, **kwargs: Any) -> None:
        """No AMQP consumers on a Kafka session."""

    def deliver_stream(self, *args: Any) -> None:
        """No AMQP consumers on a Kafka session."""

    def send_return(self, *args: Any) -> None:
        """Produces are never mandatory."""

    def send_cancel(self, *args: Any) -> None:
        """No consumers to cancel."""

    def force_close(self, code: int, text: str) -> None:
        """The broker ends the session (its vhost or user deleted...): Kafka has no
        close frame, the connection closes."""
        self.closing = True
        self._finish()

    def flush(self) -> None:
        self._flush()

    wake = flush

    def close(self) -> None:
        """The connection is gone: its broker session ends (its group memberships
        stay until their session timeout, as in Kafka)."""
        if self.closed:
            return
        self.closed = True
        if self.session is not None:
            self.broker.close_session(self.session)


def encode_fetched(items: Sequence[LogRecord | StoredBatch]) -> bytes:
    """A partition's fetched records as record batches: stored batches rebased as they
    are (``records.rebased_pieces``), each run of converted AMQP entries as one new
    batch (``encode_run``)."""
    parts: list[Any] = []
    run: list[LogRecord] = []
    for it in items:
        if isinstance(it, StoredBatch):
            if run:
                parts.append(encode_run(run))
                run = []
            parts.extend(rb.rebased_pieces(it.data, it.offset, 0))
        else:
            run.append(it)
    if run:
        parts.append(encode_run(run))
    return b"".join(parts)


def encode_run(records: Sequence[LogRecord]) -> bytes:
    """One record batch v2 of a fetched run: offsets and times as deltas from the first."""
    base = records[0].offset
    base_ts = max(0, records[0].timestamp)
    return rb.encode_batch(
        [rb.Record(r.offset - base, (r.timestamp if r.timestamp >= 0 else base_ts) - base_ts,
                   r.key, r.value, r.headers) for r in records],
        base_offset=base, base_timestamp=base_ts, partition_leader_epoch=0)


_HANDLERS: dict[int, Callable[[KafkaSession, Request, float], Step]] = {
    ApiKey.METADATA: KafkaSession._metadata,
    ApiKey.PRODUCE: KafkaSession._produce,
    ApiKey.FETCH: KafkaSession._fetch,
    ApiKey.LIST_OFFSETS: KafkaSession._list_offsets,
    ApiKey.INIT_PRODUCER_ID: KafkaSession._init_producer_id,
    **admin.HANDLERS,
}
