"""MQTT session rows are keyed by (vhost, client id) (issue 33, item 2): two vhosts'
``sensor-42`` are two rows each (session, packet ids, will), and a version-4
database's rows, keyed by the client id alone, move to the new keys in place."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    insert,
    update,
)

from amqplite.store import Store
from amqplite.store import schema as s
from amqplite.store.schema import SCHEMA_VERSION
from amqplite.storeops import (
    DeleteMQTTSession,
    DeleteMQTTWill,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
)
from tests.pg_server import both_backends


def _will(vhost: str, cid: str) -> PutMQTTWill:
    return PutMQTTWill(cid, vhost, "u", "status", b"OFFLINE", 1, True, b"", 0, None)


@both_backends
def test_the_same_client_id_in_two_vhosts_is_two_sessions(make_store: Callable[..., Store]
                                                           ) -> None:
    store = make_store()
    store.start()
    store.submit([op for v in ("A", "B") for op in (
        PutMQTTSession(v, "sensor-42", 60, user=f"user-{v}"),
        PutMQTTPacketId(v, "sensor-42", 9, False), _will(v, "sensor-42"))])
    store.submit([DeleteMQTTSession("B", "sensor-42"), DeleteMQTTWill("B", "sensor-42")])
    store.flush(10)
    got = store.load().mqtt_sessions
    assert got == [PutMQTTSession("A", "sensor-42", 60, user="user-A"),
                   PutMQTTPacketId("A", "sensor-42", 9, False), _will("A", "sensor-42")]


@both_backends
def test_a_version_4_database_moves_to_vhost_keys(db_url: str,
                                                  make_store: Callable[..., Store]) -> None:
    """The rows of a version-4 database (keyed by client id) keep their values under
    (vhost, client id); a packet id takes its session's vhost, an orphan one goes."""
    make_store().close()
    old = MetaData()
    sessions = Table("mqtt_sessions", old, Column("client_id", String(255), primary_key=True),
                     Column("vhost", String(255)), Column("expiry", Integer),
                     Column("disconnected_at", Float), Column("awaiting_pubrel", String))
    ids = Table("mqtt_packet_ids", old, Column("client_id", String(255), primary_key=True),
                Column("outbound", Boolean, primary_key=True),
                Column("packet_id", Integer, primary_key=True),
                Column("message_key", BigInteger), Column("released", Boolean))
    wills = Table("mqtt_wills", old, *(
        Column(c.name, c.type, primary_key=c.name == "client_id")
        for c in s.mqtt_wills.columns))
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for t in (s.mqtt_sessions, s.mqtt_packet_ids, s.mqtt_wills):
            t.drop(conn)
        old.create_all(conn)
        conn.execute(insert(sessions).values(client_id="s1", vhost="tenantA", expiry=60,
                                             disconnected_at=1.5, awaiting_pubrel=""))
        conn.execute(insert(ids), [
            {"client_id": "s1", "outbound": True, "packet_id": 7, "message_key": 1234,
             "released": True},
            {"client_id": "orphan", "outbound": False, "packet_id": 3, "message_key": 0,
             "released": False}])
        conn.execute(insert(wills).values(
            client_id="s1", vhost="tenantA", user="u", topic="status", payload=b"OFF", qos=1,
            retain=True, properties=b"", delay=0, due_at=None))
        conn.execute(update(s.meta).where(s.meta.c.key == "schema_version").values(value="4"))
    engine.dispose()
    store = make_store()  # Store.create upgrades in place
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert store.load().mqtt_sessions == [
        PutMQTTSession("tenantA", "s1", 60, 1.5),
        PutMQTTPacketId("tenantA", "s1", 7, True, 1234, True),
        PutMQTTWill("s1", "tenantA", "u", "status", b"OFF", 1, True, b"", 0, None)]
    store.start()  # and the new keys hold: the same id in another vhost is another row
    store.submit([PutMQTTSession("tenantB", "s1", 5, user="bob")])
    store.flush(10)
    assert [(s.vhost, s.client_id) for s in store.load().mqtt_sessions
            if isinstance(s, PutMQTTSession)] == [("tenantA", "s1"), ("tenantB", "s1")]
