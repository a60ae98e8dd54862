"""What every exchange type shares: identity, flags, arguments and its bindings."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.selected import SELECTED, SELECTOR_ARG, compile_selector

if TYPE_CHECKING:
    from amqplite.broker.model import Message
    from amqplite.broker.retained import RetainedSet, RetainedStore
    from amqplite.broker.selector import Selector

#: A binding destination: ("queue", name) or ("exchange", name).
Destination = tuple[str, str]

#: Lazily decodes the message headers; only the headers exchange calls it.
HeadersGetter = Callable[[], Mapping[str, Any] | None]


@attrs.define(frozen=True, slots=True)
class Binding:
    """One edge from an exchange to a queue or another exchange."""

    source: str
    destination: Destination
    routing_key: str
    arguments: tuple[tuple[str, Any], ...] = ()

    @property
    def args_dict(self) -> dict[str, Any]:
        return dict(self.arguments)


def freeze_args(args: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A hashable, order-independent form of a binding's argument table."""
    if not args:
        return ()
    return tuple(sorted((k, _freeze(v)) for k, v in args.items()))


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


#: binding argument of an x-lvc exchange: deliver only when the binding is re-issued
PUBLISH_ON_REQUEST = "x-publish-on-request"


# not a native class when compiled: subclasses pass ``**kw`` on to its keyword-only
# ``__init__`` and replace ``route`` per instance; its methods compile all the same
@mypyc_attr(native_class=False)
class Exchange:
    """Base class: stores bindings; subclasses index them for ``route``.

    Retaining types (``retains``: x-recent-history, x-lvc) also keep
    publications in the broker's retained store and hand them to bindings
    (``retain``/``replay``, see exchanges/retaining.py).
    """

    type_name = ""
    retains = False

    @classmethod
    def argument_error(cls, args: Mapping[str, Any]) -> str | None:
        """Why ``args`` are refused at declare (406 text after the class), or None."""
        return None

    def binding_error(self, args: Mapping[str, Any] | None) -> str | None:
        """Why a binding with ``args`` is refused by this type (406), or None."""
        if args and PUBLISH_ON_REQUEST in args:
            return (f"Invalid argument '{PUBLISH_ON_REQUEST}': only bindings to an x-lvc "
                    f"exchange may publish on request, '{self.name}' is of type "
                    f"'{self.type_name}'")
        return None

    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.bindings: set[Binding] = set()
        #: selector bindings (``x-selector``, see exchanges/selected.py): the token
        #: each is indexed under, and per token its destination and compiled selector
        self.selector_tokens: dict[Binding, str] = {}
        self.selected: dict[str, tuple[Destination, Selector]] = {}
        self._tokens = 0
        #: the ``alternate-exchange`` of the policy that applies (broker/policy_commands.py)
        self.policy_ae: str | None = None

    @property
    def alternate_exchange(self) -> str | None:
        """The argument, else the policy's key (RabbitMQ: the argument wins)."""
        ae = self.arguments.get("alternate-exchange")
        if isinstance(ae, bytes):
            ae = ae.decode("utf-8", "replace")
        return ae if isinstance(ae, str) and ae else self.policy_ae

    # retaining types only (``retains``): see exchanges/retaining.py
    def retained_set(self, store: RetainedStore, vhost: str) -> RetainedSet:
        """This exchange's set in the retained store (created empty if new)."""
        raise NotImplementedError

    def retain(self, store: RetainedStore, vhost: str, msg: Message) -> bool:
        """Keep a publish; True when a store write must commit before its confirm."""
        raise NotImplementedError

    def replay(self, store: RetainedStore, vhost: str, binding: Binding,
               new: bool) -> list[Message]:
        """What ``binding`` receives from the store: made (``new``) or re-issued."""
        raise NotImplementedError

    def add_binding(self, binding: Binding) -> bool:
        """Add ``binding``; False when it already existed (bind is idempotent)."""
        if binding in self.bindings:
            return False
        self.bindings.add(binding)
        self._index_add(self._selecting(binding) if binding.arguments else binding)
        return True

    def remove_binding(self, binding: Binding) -> bool:
        if binding not in self.bindings:
            return False
        self.bindings.discard(binding)
        token = self.selector_tokens.pop(binding, None)
        if token is None:
            self._index_remove(binding)
        else:
            del self.selected[token]
            self._index_remove(attrs.evolve(binding, destination=(SELECTED, token)))
        return True

    def _selecting(self, binding: Binding) -> Binding:
        """A selector binding as the index holds it: under a token of its own
        (``SELECTED``), so routing filters it; any other binding unchanged."""
        if SELECTOR_ARG not in binding.args_dict or binding.destination[0] == SELECTED:
            return binding  # (an inner index of a composite type gets it tokenised)
        self._tokens += 1
        token = str(self._tokens)
        self.selector_tokens[binding] = token
        self.selected[token] = (binding.destination, compile_selector(binding))
        return attrs.evolve(binding, destination=(SELECTED, token))

    def remove_destination(self, dest: Destination) -> list[Binding]:
        """Drop every binding to ``dest`` (its queue or exchange was deleted)."""
        gone = [b for b in self.bindings if b.destination == dest]
        for b in gone:
            self.remove_binding(b)
        return gone

    def bindings_to(self, dest: Destination) -> Iterable[Binding]:
        return (b for b in self.bindings if b.destination == dest)

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        raise NotImplementedError

    def _index_add(self, binding: Binding) -> None:
        raise NotImplementedError

    def _index_remove(self, binding: Binding) -> None:
        raise NotImplementedError
