"""Topic permissions in the pure core: the match, the variables, the store ops, and
what goes with a user or a vhost (the wire and the API: tests/admin, tests/server)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqplite import storeops as ops
from amqplite.broker import topic_permissions as topics
from amqplite.broker.core import Broker
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.topics import filter_to_binding_key, topic_to_routing_key
from tests.broker.conftest import TRANSIENT


def test_empty_expression_is_caret_dollar_and_search_is_unanchored() -> None:
    """RabbitMQ 3.10.8, measured: an empty write expression refuses key "a" and lets
    the empty key through."""
    assert not topics.permits("", "a", "u", "/", None)
    assert topics.permits("", "", "u", "/", None)
    assert topics.permits("b", "a.b.c", "u", "/", None)
    assert not topics.permits("^b", "a.b.c", "u", "/", None)


@given(st.text(min_size=1, max_size=20).filter(lambda n: "*" not in n and "#" not in n))
def test_a_variable_matches_exactly_its_value(name: str) -> None:
    """Whatever an AMQP user name holds (regex syntax included), ``^{username}$``
    matches that name and nothing else that differs from it."""
    assert topics.permits("^{username}$", name, name, "/", None)
    assert not topics.permits("^{username}$", name + "x", name, "/", None)
    assert not topics.permits("^{username}$", "x" + name, name, "/", None)


def test_client_id_left_as_written_without_one() -> None:
    """AMQP sessions have no client id: ``{client_id}`` stays, as RabbitMQ leaves an
    unknown variable (RE2 reads the braces literally)."""
    assert topics.expand("^{client_id}$", "u", "/", None) == "^{client_id}$"
    assert topics.permits("^{client_id}$", "{client_id}", "u", "/", None)
    assert topics.permits("^{client_id}\\.", "c|1.x", "u", "/", "c|1")
    assert not topics.permits("^{client_id}\\.", "c.x", "u", "/", "c|1")


@pytest.mark.parametrize("name", ["*", "a#", "x.*"])
def test_an_amqp_value_with_a_wildcard_matches_nothing(name: str) -> None:
    """A user ``*`` must not bind ``users.*.x`` (every user's) through ``{username}``."""
    assert not topics.permits("^users\\.{username}\\.", f"users.{name}.x", name, "/", None)
    assert topics.permits("^users\\.({username}|public)\\.", "users.public.x", name, "/",
                          None)


#: MQTT levels: any text but the level separator and the filters' wildcards
_level = st.text(st.characters(blacklist_characters="/+#", blacklist_categories=("Cs",)),
                 max_size=6)


@given(cid=st.text(max_size=12), levels=st.lists(_level, min_size=1, max_size=4))
def test_mqtt_client_id_matches_only_its_own_level(cid: str, levels: list[str]) -> None:
    """For any client id, ``^devices\\.{client_id}\\.`` passes a key (an MQTT topic or
    filter translated as the listener translates it) only when the key's second word
    is that client id in key form, i.e. the topic's second level is the client id:
    ``a.secret`` never reaches ``devices/a/secret``, an id with ``/`` or a wildcard
    nothing at all."""
    pattern = "^devices\\.{client_id}\\."
    topic = "/".join(["devices", *levels, "x"])
    for key in (topic_to_routing_key(topic), filter_to_binding_key(topic)):
        allowed = topics.permits(pattern, key, "u", "/", cid)
        assert allowed == (levels[0] == cid and topics.key_form(cid, True) is not None)
    if topics.key_form(cid, True) is not None:  # its own level passes, '.' included
        assert topics.permits(pattern, topic_to_routing_key(f"devices/{cid}/x"), "u", "/", cid)


def test_dotted_client_id_does_not_reach_another_device() -> None:
    """Issue 33's case: ``a.secret`` gets ``devices/a.secret/…`` only, ``a`` keeps its own."""
    pattern = "^devices\\.{client_id}\\."
    for topic in ("devices/a/secret/unlock", "devices/a/secret/#"):
        assert not topics.permits(pattern, filter_to_binding_key(topic), "u", "/", "a.secret")
        assert topics.permits(pattern, filter_to_binding_key(topic), "u", "/", "a")
    assert topics.permits(pattern, topic_to_routing_key("devices/a.secret/x"), "u", "/",
                          "a.secret")
    # a wildcard or a level separator in the id matches nothing, not every device
    for cid in ("+", "#", "*", "a/b", ""):
        assert not topics.permits(pattern, filter_to_binding_key("devices/+/x"), "u", "/", cid)
        assert not topics.permits(pattern, filter_to_binding_key("devices/a/b/x"), "u", "/",
                                  cid)


def test_validate_checks_the_expanded_expression() -> None:
    assert topics.validate("^{username}-[a-z]+$") is None
    assert topics.validate("(") is not None
    assert topics.validate("(?=look-ahead)") is not None  # RE2 refuses it


def _broker() -> Broker:
    b = Broker(access_control=True)
    b.put_user("app", "x", "", persist=False)
    b.set_permissions("app", "/", ".*", ".*", ".*", persist=False)
    return b


def test_publish_refused_only_on_a_topic_exchange_with_a_permission() -> None:
    b = _broker()
    ch = b.open_channel(b.open_session("app", "/"), 1)
    assert not b.topic_permissions.table  # the fast path: nothing to look up
    b.basic_publish(ch, "amq.topic", "x", TRANSIENT, b"")
    b.set_topic_permission("app", "/", "amq.topic", "^a", "^b")
    b.basic_publish(ch, "amq.direct", "x", TRANSIENT, b"")
    b.basic_publish(ch, "amq.topic", "a", TRANSIENT, b"")
    with pytest.raises(AMQPError) as exc:
        b.basic_publish(ch, "amq.topic", "x", TRANSIENT, b"")
    assert exc.value.reply_code == 403
    assert exc.value.reply_text == ("ACCESS_REFUSED - access to topic 'x' in exchange "
                                    "'amq.topic' in vhost '/' refused for user 'app'")


def test_store_ops_and_what_goes_with_a_user_or_vhost() -> None:
    b = _broker()
    b.add_vhost("v", persist=False)
    b.set_permissions("app", "v", ".*", ".*", ".*", persist=False)
    b.outbox.take()
    b.set_topic_permission("app", "/", "amq.topic", "^a", "^b")
    b.set_topic_permission("app", "v", "t", "", "")
    assert list(b.outbox.peek()) == [ops.PutTopicPermission("app", "/", "amq.topic", "^a", "^b"),
                           ops.PutTopicPermission("app", "v", "t", "", "")]
    with pytest.raises(ValueError, match="no user"):
        b.set_topic_permission("nobody", "/", "amq.topic", "", "")
    with pytest.raises(ValueError, match="invalid regular expression"):
        b.set_topic_permission("app", "/", "amq.topic", "(", "")
    b.outbox.take()
    assert b.clear_topic_permissions("app", "/", "other") == 0
    assert list(b.outbox.peek()) == []
    b.delete_vhost("v")
    assert b.topic_permissions.of("app", "v") is None
    b.delete_user("app")
    assert b.topic_permissions.table == {}
    # their rows go with DeleteVHost's and DeleteUser's
    assert not any(isinstance(op, ops.DeleteTopicPermission) for op in b.outbox.peek())
    assert ops.PutTopicPermission in ops.REPLAYABLE
    assert ops.DeleteTopicPermission in ops.REPLAYABLE
