"""Permissions: RabbitMQ's matching, and which command needs which permission."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqplite import storeops as ops
from amqplite.broker.auth import check_password, hash_password, parse_tags, valid_hash
from amqplite.broker.core import Broker
from amqplite.broker.effects import CloseConnection
from amqplite.broker.permissions import Permission, permits, resource_name, validate_pattern
from amqplite.protocol.errors import ChannelError, ConnectionError_
from tests.broker.conftest import TRANSIENT, FakeClock

NAMES = st.text(alphabet="abcdefghij-._0123", max_size=12)


# ---------------------------------------------------------------- matching
def test_rabbitmq_matching_is_a_search() -> None:
    assert permits("^app-.*", "app-1")
    assert not permits("^app-.*", "my-app-1")
    assert permits("app", "myapp1")  # re:run searches: no implicit anchors
    assert permits(".*", "anything")
    assert not permits("", "q")  # empty is ^$: no resource name matches
    assert permits("^(a|b)$", "b") and not permits("^(a|b)$", "ab")


@given(NAMES, NAMES)
def test_literal_anchored_pattern_matches_only_itself(a: str, b: str) -> None:
    assert permits(f"^{re.escape(a)}$", b) == (a == b)


@given(NAMES)
def test_everything_and_nothing(name: str) -> None:
    assert permits(".*", name)
    assert not permits("", name) or name == ""


def test_default_exchange_is_amq_default() -> None:
    assert resource_name("exchange", "") == "amq.default"
    assert resource_name("queue", "") == ""
    assert Permission(write="^amq\\.default$").allows("write", "exchange", "")


def test_bad_patterns_are_named() -> None:
    assert validate_pattern("^ok.*$") is None
    why = validate_pattern("(")
    assert why is not None and "invalid regular expression" in why


# ------------------------------------------------------------------- users
def test_hash_is_rabbitmq_sha256_format() -> None:
    # from `rabbitmqctl export_definitions` (RabbitMQ 3.10.8): user guest, password guest
    exported = "zGX7VP5W4eQWxgq5R0D8JaQ5EZpROZAUToRD5UiSBgo4RMn1"
    assert valid_hash(exported) and check_password("guest", exported)
    assert not check_password("Guest", exported)
    h = hash_password("s3cret", salt=b"\x01\x02\x03\x04")
    assert check_password("s3cret", h) and not check_password("other", h)
    assert valid_hash(h) and valid_hash("")
    assert not valid_hash("not base64!") and not check_password("x", "")
    assert parse_tags("administrator, monitoring") == ["administrator", "monitoring"]
    assert parse_tags(["management"]) == ["management"]


# ---------------------------------------------------------------- commands
@pytest.fixture
def acl() -> Broker:
    b = Broker(now=FakeClock(), access_control=True)
    b.put_user("admin", hash_password("x"), "administrator")
    b.set_permissions("admin", "/", ".*", ".*", ".*")
    b.put_user("app", hash_password("x"), "")
    b.set_permissions("app", "/", "^app-.*", "^app-.*", "^app-.*")
    b.take_outcome()
    return b


def chan(b: Broker, user: str, vhost: str = "/"):  # type: ignore[no-untyped-def]
    b.check_vhost_access(user, vhost)
    s = b.open_session(user, vhost)
    return b.open_channel(s, 1)


def refused(fn, *args, **kw) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ChannelError) as e:
        fn(*args, **kw)
    assert e.value.reply_code == 403
    return e.value.reply_text


def test_configure_on_declare_and_delete(acl: Broker) -> None:
    ch = chan(acl, "app")
    acl.queue_declare(ch, "app-q")
    acl.exchange_declare(ch, "app-x", "direct")
    assert refused(acl.queue_declare, ch, "other") == (
        "ACCESS_REFUSED - access to queue 'other' in vhost '/' refused for user 'app'")
    assert refused(acl.exchange_declare, ch, "other", "fanout") == (
        "ACCESS_REFUSED - access to exchange 'other' in vhost '/' refused for "
        "user 'app'")
    assert "queue ''" not in refused(acl.queue_declare, ch, "")  # server-named: amq.gen-...
    assert "access to queue 'zzz'" in refused(acl.queue_delete, ch, "zzz")
    assert "access to exchange 'zzz'" in refused(acl.exchange_delete, ch, "zzz")
    acl.queue_delete(ch, "app-q")
    acl.exchange_delete(ch, "app-x")


def test_passive_declare_needs_no_permission(acl: Broker) -> None:
    admin = chan(acl, "admin")
    acl.queue_declare(admin, "shared")
    ch = chan(acl, "app")
    assert acl.queue_declare(ch, "shared", passive=True)[0] == "shared"
    acl.exchange_declare(ch, "amq.direct", "direct", passive=True)


def test_bind_needs_write_on_destination_and_read_on_source(acl: Broker) -> None:
    admin = chan(acl, "admin")
    acl.queue_declare(admin, "other")
    ch = chan(acl, "app")
    acl.queue_declare(ch, "app-q")
    acl.exchange_declare(ch, "app-x", "direct")
    acl.queue_bind(ch, "app-q", "app-x", "k")
    assert "access to exchange 'amq.direct'" in refused(
        acl.queue_bind, ch, "app-q", "amq.direct", "k")
    assert "access to queue 'other'" in refused(acl.queue_bind, ch, "other", "app-x", "k")
    assert "access to exchange 'amq.topic'" in refused(
        acl.exchange_bind, ch, "amq.topic", "app-x", "k")
    assert "access to exchange 'amq.fanout'" in refused(
        acl.exchange_bind, ch, "app-x", "amq.fanout", "k")
    acl.queue_bind(ch, "app-q", "app-x", "k", unbind=True)


def test_publish_needs_write_and_default_exchange_is_amq_default(acl: Broker) -> None:
    admin = chan(acl, "admin")
    acl.queue_declare(admin, "other")
    ch = chan(acl, "app")
    acl.exchange_declare(ch, "app-x", "fanout")
    acl.basic_publish(ch, "app-x", "", TRANSIENT, b"x")
    assert refused(acl.basic_publish, ch, "", "other", TRANSIENT, b"x") == (
        "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for "
        "user 'app'")
    acl.basic_publish(admin, "", "other", TRANSIENT, b"x")


def test_consume_get_purge_need_read(acl: Broker) -> None:
    admin = chan(acl, "admin")
    acl.queue_declare(admin, "other")
    ch = chan(acl, "app")
    for fn, args in ((acl.basic_consume, ("other",)), (acl.basic_get, ("other", True)),
                     (acl.queue_purge, ("other",))):
        assert "access to queue 'other'" in refused(fn, ch, *args)
    acl.queue_declare(ch, "app-q")
    acl.basic_get(ch, "app-q", True)
    acl.queue_purge(ch, "app-q")
    acl.basic_consume(ch, "app-q")


def test_dead_letter_exchange_needs_write(acl: Broker) -> None:
    ch = chan(acl, "app")
    assert "access to exchange 'dlx'" in refused(
        acl.queue_declare, ch, "app-q", arguments={"x-dead-letter-exchange": "dlx"})
    acl.queue_declare(ch, "app-q", arguments={"x-dead-letter-exchange": "app-dlx"})
    assert "access to exchange 'ae'" in refused(
        acl.exchange_declare, ch, "app-x", "direct", arguments={"alternate-exchange": "ae"})


def test_changes_take_effect_at_once(acl: Broker) -> None:
    ch = chan(acl, "app")
    acl.exchange_declare(ch, "app-x", "fanout")
    acl.basic_publish(ch, "app-x", "", TRANSIENT, b"x")  # the channel caches this check
    acl.set_permissions("app", "/", "^app-.*", "^nothing$", "^app-.*")
    refused(acl.basic_publish, ch, "app-x", "", TRANSIENT, b"x")
    ch = chan(acl, "app")
    acl.set_permissions("app", "/", "^app-.*", "^app-.*", "^app-.*")
    refused(acl.queue_declare, ch, "wide")
    acl.set_permissions("app", "/", ".*", ".*", ".*")
    acl.queue_declare(ch, "wide")
    acl.set_permissions("app", "/", "", "", "")
    refused(acl.basic_get, ch, "wide", True)
    acl.clear_permissions("app", "/")
    refused(acl.queue_declare, ch, "app-again")


def test_vhost_access_is_530(acl: Broker) -> None:
    acl.add_vhost("other")
    with pytest.raises(ConnectionError_) as e:
        acl.check_vhost_access("app", "other")
    assert (e.value.reply_code, e.value.reply_text) == (
        530, "NOT_ALLOWED - access to vhost 'other' refused for user 'app'")
    with pytest.raises(ConnectionError_) as e:
        acl.check_vhost_access("app", "nope")
    assert e.value.reply_text == "NOT_ALLOWED - vhost nope not found"
    with pytest.raises(ValueError):
        acl.set_permissions("app", "nope", ".*", ".*", ".*")
    with pytest.raises(ValueError):
        acl.set_permissions("ghost", "/", ".*", ".*", ".*")
    with pytest.raises(ValueError):
        acl.set_permissions("app", "/", "(", ".*", ".*")


# ------------------------------------------------------------------ vhosts
def test_vhosts_are_separate_namespaces(acl: Broker) -> None:
    acl.add_vhost("v2")
    acl.set_permissions("admin", "v2", ".*", ".*", ".*")
    a, b = chan(acl, "admin"), chan(acl, "admin", "v2")
    acl.queue_declare(a, "q")
    acl.queue_declare(b, "q")
    acl.basic_publish(a, "", "q", TRANSIENT, b"one")
    assert acl.vhosts["/"].queues["q"].message_count == 1
    assert acl.vhosts["v2"].queues["q"].message_count == 0
    assert set(acl.vhosts["v2"].exchanges) >= {"", "amq.direct", "amq.topic"}
    assert acl.vhosts["v2"].exchanges["amq.direct"] is not acl.vhosts["/"].exchanges["amq.direct"]


def test_delete_vhost_closes_its_connections_and_rows(acl: Broker) -> None:
    acl.add_vhost("v2")
    acl.set_permissions("app", "v2", ".*", ".*", ".*")
    ch = chan(acl, "app", "v2")
    keep = chan(acl, "app")
    acl.queue_declare(ch, "q", durable=True)
    acl.set_policy("v2", "p", ".*", {"max-length": 3})
    acl.take_outcome()
    assert acl.delete_vhost("v2")
    out = acl.take_outcome()
    closes = [e for e in out.effects if isinstance(e, CloseConnection)]
    assert [(c.session, c.reply_code, c.reply_text) for c in closes] == [
        (ch.session, 320, "CONNECTION_FORCED - vhost 'v2' is deleted")]
    assert ch.session.id not in acl.sessions and keep.session.id in acl.sessions
    assert "v2" not in acl.vhosts and "v2" not in acl.policies
    assert ("app", "v2") not in acl.permissions
    assert ops.DeleteVHost("v2") in out.store_ops
    assert any(isinstance(o, ops.DeleteQueue) for o in out.store_ops)
    assert not acl.delete_vhost("v2")


def test_delete_user_closes_its_connections(acl: Broker) -> None:
    ch = chan(acl, "app")
    acl.take_outcome()
    assert acl.delete_user("app")
    out = acl.take_outcome()
    assert [e.reply_text for e in out.effects if isinstance(e, CloseConnection)] == [
        "CONNECTION_FORCED - user 'app' is deleted"]
    assert ch.session.id not in acl.sessions
    assert ops.DeleteUser("app") in out.store_ops
    assert ("app", "/") not in acl.permissions


def test_store_ops_for_users_and_permissions(acl: Broker) -> None:
    acl.put_user("u", "hash", ["monitoring", "management"])
    acl.set_permissions("u", "/", "c", "w", "r")
    acl.clear_permissions("u", "/")
    acl.add_vhost("v", "desc")
    assert acl.take_outcome().store_ops == [
        ops.PutUser("u", "hash", "monitoring,management"),
        ops.PutPermission("u", "/", "c", "w", "r"),
        ops.DeletePermission("u", "/"),
        ops.PutVHost("v", "desc"),
    ]


def test_each_command_checks_the_permission_rabbitmq_checks(acl: Broker) -> None:
    """configure ^c, write ^w, read ^r: a name passes only the permission it starts with."""
    acl.put_user("split", "", "")
    acl.set_permissions("split", "/", "^c", "^w", "^r")
    admin = chan(acl, "admin")
    for q in ("c-q", "w-q", "r-q"):
        acl.queue_declare(admin, q)
    for x in ("c-x", "w-x", "r-x"):
        acl.exchange_declare(admin, x, "direct")
    ch = chan(acl, "split")

    def allowed(fn, *args, **kw) -> bool:  # type: ignore[no-untyped-def]
        try:
            fn(ch, *args, **kw)
        except ChannelError as exc:
            assert exc.reply_code == 403, exc.reply_text
            return False
        return True

    assert allowed(acl.queue_declare, "c-new") and not allowed(acl.queue_declare, "w-new")
    assert allowed(acl.exchange_declare, "c-newx", "direct")
    assert not allowed(acl.exchange_declare, "r-newx", "direct")
    assert allowed(acl.queue_bind, "w-q", "r-x", "k")
    assert not allowed(acl.queue_bind, "r-q", "r-x", "k")
    assert not allowed(acl.queue_bind, "w-q", "w-x", "k")
    assert allowed(acl.queue_bind, "w-q", "r-x", "k", unbind=True)
    assert allowed(acl.exchange_bind, "w-x", "r-x", "k")
    assert not allowed(acl.exchange_bind, "r-x", "w-x", "k")
    assert allowed(acl.basic_publish, "w-x", "", TRANSIENT, b"")
    assert not allowed(acl.basic_publish, "r-x", "", TRANSIENT, b"")
    for fn, args in ((acl.basic_get, ("r-q", True)), (acl.queue_purge, ("r-q",)),
                     (acl.basic_consume, ("r-q",))):
        assert allowed(fn, *args)
        assert not allowed(fn, *("w-q", *args[1:]))
    assert not allowed(acl.queue_delete, "r-q") and allowed(acl.queue_delete, "c-q")
    assert not allowed(acl.exchange_delete, "w-x") and allowed(acl.exchange_delete, "c-x")
