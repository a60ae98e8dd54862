"""Regular expressions that users write (policy, permission and listing patterns).

They run on the event loop against names a tenant chooses, so a backtracking
engine is a denial of service waiting for ``^(a|a)*$``: we compile them with
RE2, whose matching time is linear in the name. RE2 takes RabbitMQ's
PCRE-style patterns for all practical cases; the constructs it refuses
(look-around, back-references) are refused where a pattern is defined
(``PatternError``, a ValueError the admin API answers with 400).

Matching is a search (RabbitMQ's ``re:run``), case-sensitive unless asked.
A pattern that was stored by an older version and does not compile any more
matches nothing and is logged once: a stored row must never stop a start.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import re2

log = logging.getLogger("amqplite.broker")

#: distinct patterns kept compiled; policies and permissions are few, listings vary
CACHE_SIZE = 256
#: RE2's memory budget per pattern (program and DFA cache; past it the DFA gives way
#: to the NFA, still linear): the cache holds at most CACHE_SIZE of these
MAX_MEM = 1 << 20


class PatternError(ValueError):
    """A user's pattern that RE2 cannot compile; the text names the pattern."""


def _options(ignore_case: bool) -> Any:
    opts = re2.Options()
    opts.log_errors = False  # RE2 would write every refused pattern to stderr
    opts.case_sensitive = not ignore_case
    opts.max_mem = MAX_MEM
    return opts


_OPTIONS = {False: _options(False), True: _options(True)}


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compile(pattern: str, ignore_case: bool) -> tuple[Any, str]:
    """(compiled, "") or (None, why): a failure is cached too, so it costs once."""
    try:
        return re2.compile(pattern, _OPTIONS[ignore_case]), ""
    except re2.error as exc:
        why = exc.args[0] if exc.args else "invalid"
        if isinstance(why, bytes):
            why = why.decode("utf-8", "replace")
        return None, str(why)


def check(pattern: str, *, ignore_case: bool = False) -> str | None:
    """Why ``pattern`` is refused, or None when it compiles."""
    rx, why = _compile(pattern, ignore_case)
    return None if rx is not None else f"invalid regular expression '{pattern}': {why}"


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> Any:
    """The compiled pattern (cached); PatternError when RE2 refuses it."""
    rx, _ = _compile(pattern, ignore_case)
    if rx is None:
        raise PatternError(check(pattern, ignore_case=ignore_case))
    return rx


@functools.lru_cache(maxsize=64)
def _warn_once(pattern: str) -> None:
    log.warning("stored pattern %r does not compile; it matches nothing", pattern)


def search(pattern: str, name: str, *, ignore_case: bool = False) -> bool:
    """Whether ``pattern`` occurs in ``name``; an uncompilable pattern matches nothing."""
    rx, _ = _compile(pattern, ignore_case)
    if rx is None:
        _warn_once(pattern)
        return False
    return rx.search(name) is not None
