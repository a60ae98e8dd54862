"""Topic exchange: binding patterns compiled into a trie of words.

``*`` matches exactly one word and ``#`` zero or more; words are separated by
dots and may be empty (``a..b`` has three words), as in RabbitMQ. Matching
walks the trie once per publish instead of testing every binding.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter


def _words(key: str) -> list[str]:
    """RabbitMQ splits the empty key into zero words (so ``*`` does not match it)."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.dests: dict[Destination, int] = {}


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class TopicExchange(Exchange):
    type_name = "topic"

    def __init__(self, name: str, **kw: object) -> None:
        super().__init__(name, **kw)  # type: ignore[arg-type]
        self._root = _Node()
        self._cache: dict[str, frozenset[Destination]] = {}

    def _index_add(self, binding: Binding) -> None:
        node = self._root
        for word in _words(binding.routing_key):
            node = node.children.setdefault(word, _Node())
        node.dests[binding.destination] = node.dests.get(binding.destination, 0) + 1
        self._cache.clear()

    def _index_remove(self, binding: Binding) -> None:
        path = [self._root]
        words = _words(binding.routing_key)
        for word in words:
            nxt = path[-1].children.get(word)
            if nxt is None:
                return
            path.append(nxt)
        leaf = path[-1]
        n = leaf.dests.get(binding.destination, 0) - 1
        if n > 0:
            leaf.dests[binding.destination] = n
        else:
            leaf.dests.pop(binding.destination, None)
        # prune empty branches so the trie does not grow with churn
        for i in range(len(words), 0, -1):
            node = path[i]
            if node.dests or node.children:
                break
            del path[i - 1].children[words[i - 1]]
        self._cache.clear()

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        cached = self._cache.get(routing_key)
        if cached is None:
            out: set[Destination] = set()
            _match(self._root, _words(routing_key), 0, out)
            cached = frozenset(out)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[routing_key] = cached
        return set(cached)


def _match(node: _Node, words: list[str], i: int, out: set[Destination]) -> None:
    """Collect destinations of every pattern in ``node``'s subtree matching words[i:]."""
    n = len(words)
    hash_node = node.children.get("#")
    if hash_node is not None:
        # '#' swallows words[i:j] for every j >= i
        for j in range(i, n + 1):
            _match(hash_node, words, j, out)
    if i == n:
        out.update(node.dests)
        return
    word = words[i]
    child = node.children.get(word)
    if child is not None:
        _match(child, words, i + 1, out)
    star = node.children.get("*")
    if star is not None:
        _match(star, words, i + 1, out)


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Reference matcher (used by tests and the admin API), same rules as the trie."""
    p = _words(pattern)
    w = _words(routing_key)

    def go(pi: int, wi: int) -> bool:
        if pi == len(p):
            return wi == len(w)
        if p[pi] == "#":
            return any(go(pi + 1, j) for j in range(wi, len(w) + 1))
        if wi == len(w):
            return False
        return (p[pi] == "*" or p[pi] == w[wi]) and go(pi + 1, wi + 1)

    return go(0, 0)
