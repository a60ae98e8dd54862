"""Dead letters end to end: headers, policies, priorities, expiry, and crashes."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect


def _name(p: str) -> str:
    return f"{p}-{uuid.uuid4().hex[:8]}"


def _count(ch, q: str) -> int:  # type: ignore[no-untyped-def]
    return int(ch.queue_declare(q, passive=True).method.message_count)


def _s(v: object) -> object:
    return v.decode() if isinstance(v, bytes) else v


def test_rejected_message_carries_x_death_and_first_last_headers(channel) -> None:  # type: ignore[no-untyped-def]
    dlx, dlq, work = _name("dlx"), _name("dlq"), _name("work")
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dlq)
    channel.queue_bind(dlq, dlx)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", work, b"poison",
                          pika.BasicProperties(headers={"app": "kept", "n": 7}, expiration="60000"))
    m, _, _ = channel.basic_get(work)
    channel.basic_reject(m.delivery_tag, requeue=False)
    m, props, body = wait_for(lambda: (r := channel.basic_get(dlq, auto_ack=True))[0] and r, 10,
                              what="the dead letter")
    h = props.headers
    assert body == b"poison" and props.expiration is None
    assert _s(h["app"]) == "kept" and h["n"] == 7
    (death,) = h["x-death"]
    assert _s(death["queue"]) == work and _s(death["reason"]) == "rejected"
    assert death["count"] == 1 and _s(death["exchange"]) == ""
    assert [_s(k) for k in death["routing-keys"]] == [work]
    assert _s(death["original-expiration"]) == "60000"
    for side in ("first", "last"):
        assert _s(h[f"x-{side}-death-queue"]) == work
        assert _s(h[f"x-{side}-death-reason"]) == "rejected"
    for q in (dlq, work):
        channel.queue_delete(q)
    channel.exchange_delete(dlx)


def test_policy_applies_to_existing_queue_and_arguments_win(broker: BrokerProcess) -> None:
    import httpx  # the admin API is how operators set policies

    c = connect(broker)
    ch = c.channel()
    prefix = _name("pol")
    dlq = prefix + "-dlq"
    ch.queue_declare(dlq)
    ch.queue_declare(prefix + "-a")
    ch.queue_declare(prefix + "-b", arguments={"x-max-length": 5})
    admin = broker.admin_url
    if admin is None:
        pytest.skip("broker started without the admin API")
    r = httpx.put(f"{admin}/api/policies/%2F/{prefix}", auth=("guest", "guest"), json={
        "pattern": f"^{prefix}-[ab]$", "apply-to": "queues",
        "definition": {"max-length": 1, "dead-letter-exchange": "",
                       "dead-letter-routing-key": dlq}})
    assert r.status_code in (200, 201, 204), r.text
    for i in range(3):
        ch.basic_publish("", prefix + "-a", str(i).encode())
        ch.basic_publish("", prefix + "-b", str(i).encode())
    assert _count(ch, prefix + "-a") == 1  # the policy's max-length
    assert _count(ch, prefix + "-b") == 3  # x-max-length 5 wins over the policy
    wait_for(lambda: _count(ch, dlq) == 2, 10, what="two maxlen dead letters")
    _, props, _ = ch.basic_get(dlq, auto_ack=True)
    assert _s(props.headers["x-death"][0]["reason"]) == "maxlen"
    httpx.delete(f"{admin}/api/policies/%2F/{prefix}", auth=("guest", "guest"))
    c.close()


def test_priority_queue_serves_highest_first(channel) -> None:  # type: ignore[no-untyped-def]
    q = channel.queue_declare("", exclusive=True, arguments={"x-max-priority": 10}).method.queue
    for prio in (1, 5, 0, 9, 5):
        channel.basic_publish("", q, str(prio).encode(), pika.BasicProperties(priority=prio))
    got = [channel.basic_get(q, auto_ack=True)[2] for _ in range(5)]
    assert got == [b"9", b"5", b"5", b"1", b"0"]


def test_bad_argument_is_406_naming_it(conn) -> None:  # type: ignore[no-untyped-def]
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(_name("bad"), arguments={"x-message-ttl": "soon"})
    assert e.value.reply_code == 406 and "x-message-ttl" in e.value.reply_text
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(_name("bad"), arguments={"x-overflow": "explode"})
    assert e.value.reply_code == 406 and "x-overflow" in e.value.reply_text


def test_unused_queue_expires(channel) -> None:  # type: ignore[no-untyped-def]
    q = _name("exp")
    channel.queue_declare(q, arguments={"x-expires": 300})

    def gone() -> bool:
        try:
            probe = channel.connection.channel()
            probe.queue_declare(q, passive=True)
            probe.close()
            return False
        except ChannelClosedByBroker:
            return True

    wait_for(gone, 10, interval=0.1, what="the queue to expire")


def test_classic_delivery_limit_dead_letters(channel) -> None:  # type: ignore[no-untyped-def]
    dlq, work = _name("dlq"), _name("work")
    channel.queue_declare(dlq)
    channel.queue_declare(work, arguments={"x-delivery-limit": 1, "x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", work, b"p")
    counts = []
    for _ in range(2):
        m, props, _ = channel.basic_get(work)
        counts.append((props.headers or {}).get("x-delivery-count"))
        channel.basic_nack(m.delivery_tag, requeue=True)
    assert counts == [None, 1]
    _, props, _ = wait_for(lambda: (r := channel.basic_get(dlq, auto_ack=True))[0] and r, 10,
                           what="the dead letter")
    assert _s(props.headers["x-death"][0]["reason"]) == "delivery_limit"
    assert _count(channel, work) == 0


def test_ttl_and_policies_survive_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("dl", durable=True)
    ch.queue_declare("ttl", durable=True, arguments={
        "x-message-ttl": 1500, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl"})
    ch.confirm_delivery()
    ch.basic_publish("", "ttl", b"later", pika.BasicProperties(delivery_mode=2))
    c.close()
    b.kill()
    b.start()
    c = connect(b)
    ch = c.channel()
    wait_for(lambda: _count(ch, "dl") == 1, 15, interval=0.1, what="expiry after restart")
    assert _count(ch, "ttl") == 0
    c.close()
    b.stop()


def test_kill_during_mass_expiry_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    n = 3000
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("dlq", durable=True)
    ch.queue_declare("src", durable=True, arguments={
        "x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", "src", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    # kill as soon as expiry has begun moving messages
    wait_for(lambda: _count(ch, "dlq") > 0, 20, interval=0.005, what="expiry to start")
    b.kill()
    b.start()
    c = connect(b)
    ch = c.channel()
    wait_for(lambda: _count(ch, "src") == 0, 20, interval=0.1, what="the rest to expire")
    seen = []
    while True:
        m, _, body = ch.basic_get("dlq", auto_ack=True)
        if m is None:
            break
        seen.append(int(body))
    assert len(seen) == len(set(seen)), "a message was dead-lettered twice"
    assert sorted(seen) == list(range(n)), f"{n - len(set(seen))} messages lost"
    c.close()
    b.stop()


def test_paged_out_bodies_are_dead_lettered_intact(tmp_path: Path) -> None:
    """Bodies deep in a queue live only in SQLite; expiring them copies them in the database."""
    n = 300
    b = BrokerProcess(tmp_path / "d", env={"AMQPLITE_BODY_WINDOW": "10"}).start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("dl", durable=True)
    ch.queue_declare("deep", durable=True, arguments={
        "x-message-ttl": 2000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl"})
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", "deep", f"body-{i}-".encode() * 50, pika.BasicProperties(delivery_mode=2))
    wait_for(lambda: _count(ch, "dl") == n, 20, interval=0.1, what="every message to expire")
    c.close()
    b.kill()  # the last expiries may not have committed: they must expire again, once
    b.start()
    c = connect(b)
    ch = c.channel()
    wait_for(lambda: _count(ch, "deep") == 0, 20, interval=0.1, what="the rest to expire")
    got = []
    while True:
        m, props, body = ch.basic_get("dl", auto_ack=True)
        if m is None:
            break
        got.append(body)
        assert _s(props.headers["x-death"][0]["reason"]) == "expired"
    assert sorted(got) == sorted(f"body-{i}-".encode() * 50 for i in range(n))
    assert len(got) == n
    c.close()
    b.stop()


def test_per_message_ttl_expires_on_time(broker: BrokerProcess, channel) -> None:  # type: ignore[no-untyped-def]
    """A 100 ms TTL dead-letters about 100 ms after publish (RabbitMQ: 103-119 ms), not
    whenever a 250 ms timer nap ends: the timer wakes for a sooner deadline. Lateness is
    what the broker records (delivery log: published -> expired), so client scheduling
    does not count; the bound is generous for a loaded machine."""
    dlq, work = _name("dlq"), _name("ttl")
    channel.queue_declare(dlq)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dlq})
    ids = [f"ttl-{uuid.uuid4().hex[:12]}" for _ in range(30)]
    for mid in ids:  # one at a time: each finds the timer asleep with nothing armed
        channel.basic_publish("", work, b"x", pika.BasicProperties(expiration="100",
                                                                   message_id=mid))
        wait_for(lambda: channel.basic_get(dlq, auto_ack=True)[0], 10, interval=0.005,
                 what="the expired message")
    db = broker.data_dir / "amqplite.db"

    def times() -> dict[tuple[str, str], int] | None:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as c:
            rows = c.execute(
                "select message_id, event, ts_us from delivery_log where event in "
                f"('published', 'expired') and message_id in ({','.join('?' * len(ids))})",
                ids).fetchall()
        return {(m, ev): ts for m, ev, ts in rows} if len(rows) == 2 * len(ids) else None

    ts = wait_for(times, 20, what="the delivery log rows")
    late = sorted((ts[(m, "expired")] - ts[(m, "published")]) / 1000 - 100 for m in ids)
    print(f"TTL lateness ms: median {late[len(late) // 2]:.1f}, p90 {late[26]:.1f}, "
          f"max {late[-1]:.1f}")
    assert late[0] >= 0
    assert late[26] < 100  # the old 250 ms nap: 147-150 here, up to 250 in the issue
