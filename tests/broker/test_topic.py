"""Topic routing: the trie against a naive reference matcher."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amqplite.broker.exchanges import Binding, TopicExchange
from amqplite.broker.exchanges.topic import topic_matches

words = st.sampled_from(["a", "b", "c", ""])
pattern_words = st.sampled_from(["a", "b", "c", "*", "#", ""])
keys = st.lists(words, min_size=1, max_size=5).map(".".join)
patterns = st.lists(pattern_words, min_size=1, max_size=5).map(".".join)


@given(st.lists(patterns, min_size=1, max_size=8, unique=True), st.lists(keys, max_size=10))
def test_trie_matches_reference(pats: list[str], rks: list[str]) -> None:
    ex = TopicExchange("t")
    for i, p in enumerate(pats):
        ex.add_binding(Binding("t", ("queue", f"q{i}"), p))
    for rk in rks:
        want = {("queue", f"q{i}") for i, p in enumerate(pats) if topic_matches(p, rk)}
        assert ex.route(rk, lambda: None) == want


@given(st.lists(patterns, min_size=1, max_size=8), st.data())
def test_unbind_restores_routing(pats: list[str], data: st.DataObject) -> None:
    ex = TopicExchange("t")
    bs = [Binding("t", ("queue", f"q{i}"), p) for i, p in enumerate(pats)]
    for b in bs:
        ex.add_binding(b)
    gone = data.draw(st.lists(st.sampled_from(bs), unique=True))
    for b in gone:
        ex.remove_binding(b)
    rk = data.draw(keys)
    keep = [b for b in bs if b not in gone]
    assert ex.route(rk, lambda: None) == {
        b.destination for b in keep if topic_matches(b.routing_key, rk)
    }


def test_reference_examples() -> None:
    assert topic_matches("#", "")
    assert topic_matches("#", "a.b.c")
    assert topic_matches("a.#", "a")
    assert topic_matches("a.#.b", "a.b")
    assert topic_matches("a.#.b", "a.x.y.b")
    assert not topic_matches("a.*", "a")
    assert topic_matches("a.*", "a.")
    # RabbitMQ: the empty key has zero words, so '*' needs one and '' matches only ''
    assert not topic_matches("*", "")
    assert topic_matches("", "")
    assert not topic_matches("", "a")
    assert topic_matches("a.*.b", "a..b")
    assert not topic_matches("a.*.c", "a.c")
    assert topic_matches("#.#", "a")
