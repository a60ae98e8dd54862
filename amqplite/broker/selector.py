"""Message selectors: the SQL-92 subset of JMS (Jakarta Messaging 3.x) and Artemis.

A STOMP SUBSCRIBE's ``selector`` header filters what the subscription gets.
``parse`` turns the text into nested closures once, so that ``matches`` (run per
message per consumer) costs a few Python calls and no tree walk. The text is
bounded (``MAX_LENGTH`` characters, ``MAX_DEPTH`` nesting) and ``LIKE`` uses a
wildcard matcher of our own (no regular expressions, no backtracking blow-up),
because the selector comes from any client.

Semantics follow the JMS specification:

- three-valued logic: a missing header is NULL, and anything compared with NULL
  is UNKNOWN; AND/OR/NOT use SQL's tables; a message matches only when the
  selector is TRUE;
- comparing values of unlike types (a string with a number, a boolean with a
  number) is FALSE, not an error, for ``<>`` as for ``=``; ``<``, ``<=``,
  ``>``, ``>=`` and BETWEEN compare numbers only (anything else is FALSE);
  arithmetic on a non-number,
  or a division by zero, is NULL; LIKE and IN on a non-string are FALSE;
- STOMP header values are strings, so ``age > 18`` does not match ``age:21``,
  as the specification requires. Artemis' ``convert_string_expressions:``
  prefix turns conversion on: a numeric-looking string then counts as a number
  (and ``true``/``false`` as a boolean) wherever it meets one. Its other
  prefix, ``hyphenated_props:``, lets names contain ``-`` (``content-type``),
  at the price of ``a-b`` being one name rather than a subtraction;
- the JMS header names read the STOMP headers they map to: JMSMessageID
  (``message-id``), JMSCorrelationID (``correlation-id``), JMSType (``type``),
  JMSPriority (``priority`` as a number, 4 when absent), JMSTimestamp
  (``timestamp`` as a number), JMSDeliveryMode (``'PERSISTENT'`` when
  ``persistent:true``, else ``'NON_PERSISTENT'``), and Artemis' core names
  AMQPriority, AMQTimestamp, AMQExpiration (``expires``, 0 when absent) and
  AMQDurable (``'DURABLE'``/``'NON_DURABLE'``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from amqplite.broker.like import like_matcher

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Selector", "SelectorError", "like_matcher", "parse"]

#: longest selector text accepted (characters)
MAX_LENGTH = 4096
#: deepest nesting of parentheses, NOT and unary signs
MAX_DEPTH = 32
#: longest header string converted to a number (conversion mode)
_MAX_NUMBER_TEXT = 64

CONVERT_PREFIX = "convert_string_expressions:"
HYPHEN_PREFIX = "hyphenated_props:"

Headers = Mapping[str, object]
Fn = Callable[[Headers], object]

_NUM = frozenset((int, float))
_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() takes '¹'
_KEYWORDS = frozenset(("AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS",
                       "NULL", "TRUE", "FALSE"))


class SelectorError(ValueError):
    """A selector that does not parse; the message names the position (1-based)."""

    def __init__(self, problem: str, position: int | None = None) -> None:
        self.problem = problem
        self.position = position
        if position is None:
            super().__init__(f"selector: {problem}")
        else:
            super().__init__(f"selector: {problem} at position {position + 1}")


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector; ``matches`` is TRUE-only (UNKNOWN does not match)."""

    text: str
    _fn: Fn

    def matches(self, headers: Headers) -> bool:
        return self._fn(headers) is True


# ---------------------------------------------------------------- values


def _to_number(s: str) -> int | float | None:
    """A header string as a number (conversion mode), or None when it is not one."""
    if not s or len(s) > _MAX_NUMBER_TEXT or s.strip("0123456789+-.eE"):
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return None


def _arith_operand(v: object, convert: bool) -> int | float | None:
    """A value as an arithmetic operand: a number, or None (NULL) for anything else."""
    if convert and type(v) is str:
        return _to_number(v)  # type: ignore[arg-type]
    return v if type(v) in _NUM else None  # type: ignore[return-value]


def _coerce(a: object, b: object) -> tuple[object, object]:
    """Conversion mode: a string meeting a number (or a boolean) becomes one."""
    ta, tb = type(a), type(b)
    if ta is str and tb is not str:
        if tb in _NUM:
            n = _to_number(a)  # type: ignore[arg-type]
            return (a if n is None else n), b
        if tb is bool:
            low = a.lower()  # type: ignore[attr-defined]
            return (True if low == "true" else False if low == "false" else a), b
    elif tb is str and ta is not str:
        b2, a2 = _coerce(b, a)
        return a2, b2
    return a, b


def _eq(a: object, b: object) -> bool | None:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is tb or (ta in _NUM and tb in _NUM):
        return a == b
    return False


def _ne(a: object, b: object) -> bool | None:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is tb or (ta in _NUM and tb in _NUM):
        return a != b
    return False  # unlike types: the comparison is FALSE, whichever it is


def _ordering(test: Callable[[object, object], bool]) -> Callable[[object, object], bool | None]:
    def cmp(a: object, b: object) -> bool | None:
        if a is None or b is None:
            return None
        if type(a) in _NUM and type(b) in _NUM:
            return test(a, b)
        return False
    return cmp


_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_COMPARE: dict[str, Callable[[object, object], bool | None]] = {
    "=": _eq, "<>": _ne, **{op: _ordering(test) for op, test in _TESTS.items()}}
#: the same comparison with its operands swapped
_MIRROR = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_VALID = frozenset((str, int, float, bool))  # header value types; others read as NULL


def _header_vs_const(name: str, op: str, c: object) -> Fn:
    """``header op constant`` in one closure: the common shape, kept cheap."""
    if c is None:
        return lambda h: None
    if type(c) is str and op in ("=", "<>"):
        want = op == "="

        def str_eq(h: Headers) -> object:
            v = h.get(name)
            if type(v) is str:
                return (v == c) is want
            return None if v is None or type(v) not in _VALID else False
        return str_eq
    if type(c) in _NUM and op in _TESTS:
        test = _TESTS[op]

        def num_order(h: Headers) -> object:
            v = h.get(name)
            t = type(v)
            if t is int or t is float:
                return test(v, c)
            return None if v is None or t not in _VALID else False
        return num_order
    cmp, get = _COMPARE[op], _header(name)
    return lambda h: cmp(get(h), c)


def _divide(a: int | float, b: int | float) -> int | float | None:
    if b == 0:
        return None
    if type(a) is int and type(b) is int:  # Java's long division truncates towards zero
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return a / b


_ARITH: dict[str, Callable[[int | float, int | float], int | float | None]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
}


# ---------------------------------------------------------------- tokens

# token kinds: 'num', 'str', 'id', 'kw' (value upper-cased), 'op', 'end'
@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    value: object
    pos: int


def _describe(t: _Tok) -> str:
    if t.kind == "end":
        return "the end"
    if t.kind == "str":
        return "a string"
    if t.kind == "num":
        return f"the number {t.value!r}"
    return f"'{t.value}'"


def _ident_start(c: str) -> bool:
    return c.isalpha() or c in "_$"


def _ident_part(c: str, hyphens: bool) -> bool:
    return c.isalnum() or c in "_$" or (hyphens and c == "-")


def _tokenize(text: str, start: int, hyphens: bool) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\f":
            i += 1
        elif c == "'":
            j, parts = i + 1, []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise SelectorError("unterminated string", i)
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == "'":
                    parts.append("'")
                    j = k + 2
                else:
                    j = k + 1
                    break
            toks.append(_Tok("str", "".join(parts), i))
            i = j
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            value, j = _number(text, i)
            toks.append(_Tok("num", value, i))
            i = j
        elif _ident_start(c):
            j = i + 1
            while j < n and _ident_part(text[j], hyphens):
                j += 1
            word = text[i:j]
            up = word.upper()
            toks.append(_Tok("kw", up, i) if up in _KEYWORDS else _Tok("id", word, i))
            i = j
        elif text.startswith(("<>", "<=", ">="), i):
            toks.append(_Tok("op", text[i:i + 2], i))
            i += 2
        elif c in "=<>+-*/(),":
            toks.append(_Tok("op", c, i))
            i += 1
        else:
            raise SelectorError(f"unexpected character {c!r}", i)
    toks.append(_Tok("end", None, n))
    return toks


def _digits(text: str, i: int, ok: str = "0123456789") -> int:
    while i < len(text) and text[i] in ok:
        i += 1
    return i


def _number(text: str, i: int) -> tuple[int | float, int]:
    """A Java-style literal: 42, 42L, 0x2A, 052, 4.2, .5, 4e2, 4.2e-1, 4.2f, 4d."""
    n = len(text)
    if text.startswith(("0x", "0X"), i):
        j = _digits(text, i + 2, "0123456789abcdefABCDEF")
        if j == i + 2:
            raise SelectorError("a hexadecimal number needs digits", i)
        value: int | float = int(text[i + 2:j], 16)
        if j < n and text[j] in "lL":
            j += 1
        return value, _after_number(text, j, i)
    j = _digits(text, i)
    is_float = False
    if j < n and text[j] == ".":
        j = _digits(text, j + 1)
        is_float = True
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        e = _digits(text, k)
        if e == k:
            raise SelectorError("an exponent needs digits", i)
        j = e
        is_float = True
    if j < n and text[j] in "fFdD":
        j += 1
        is_float = True
    literal = text[i:j].rstrip("fFdD")
    if is_float:
        try:
            return float(literal), _after_number(text, j, i)
        except ValueError:
            raise SelectorError("malformed number", i) from None
    if j < n and text[j] in "lL":
        j += 1
    if len(literal) > 1 and literal[0] == "0":  # Java octal
        if literal.strip("01234567"):
            raise SelectorError("malformed octal number", i)
        return int(literal, 8), _after_number(text, j, i)
    return int(literal), _after_number(text, j, i)


def _after_number(text: str, j: int, start: int) -> int:
    if j < len(text) and (text[j].isalnum() or text[j] in "_$."):
        raise SelectorError("malformed number", start)
    return j


# ---------------------------------------------------------------- identifiers


def _header(name: str) -> Fn:
    def get(h: Headers) -> object:
        v = h.get(name)
        t = type(v)
        return v if (t is str or t in _NUM or t is bool) else None
    return get


def _numeric_header(name: str, default: int | None) -> Fn:
    def get(h: Headers) -> object:
        v = h.get(name)
        if type(v) is int:
            return v
        if type(v) is str:
            try:
                return int(v) if len(v) <= _MAX_NUMBER_TEXT else default
            except ValueError:
                return default
        return default
    return get


def _durability(yes: str, no: str) -> Fn:
    def get(h: Headers) -> object:
        v = h.get("persistent")
        return yes if (v is True or (type(v) is str and v.lower() == "true")) else no
    return get


_JMS_NAMES: dict[str, Callable[[], Fn]] = {
    "JMSMessageID": lambda: _header("message-id"),
    "JMSCorrelationID": lambda: _header("correlation-id"),
    "JMSType": lambda: _header("type"),
    "JMSPriority": lambda: _numeric_header("priority", 4),
    "JMSTimestamp": lambda: _numeric_header("timestamp", None),
    "JMSDeliveryMode": lambda: _durability("PERSISTENT", "NON_PERSISTENT"),
    "AMQPriority": lambda: _numeric_header("priority", 4),
    "AMQTimestamp": lambda: _numeric_header("timestamp", None),
    "AMQExpiration": lambda: _numeric_header("expires", 0),
    "AMQDurable": lambda: _durability("DURABLE", "NON_DURABLE"),
}


# ---------------------------------------------------------------- parser

# static kinds: 'bool', 'num', 'str', 'null', 'any' (a header: known at run time)
@dataclass(frozen=True, slots=True)
class _Expr:
    kind: str
    fn: Fn
    pos: int
    ident: str | None = None  # a header or JMS name
    const: bool = False  # a literal: fn ignores the headers


def _string_test(get: Fn, test: Callable[[str], bool], negated: bool) -> Fn:
    """IN and LIKE: NULL stays UNKNOWN, a non-string is FALSE (either way round)."""
    def string_test(h: Headers) -> object:
        v = get(h)
        if v is None:
            return None
        if type(v) is not str:
            return False
        return test(v) is not negated
    return string_test


def _const(value: object) -> Fn:
    return lambda h: value


_KIND_WORD = {"num": "a number", "str": "a string", "bool": "a condition"}


class _Parser:
    def __init__(self, toks: list[_Tok], convert: bool) -> None:
        self.toks = toks
        self.i = 0
        self.depth = 0
        self.convert = convert

    # -- token helpers
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at_kw(self, *words: str) -> bool:
        t = self.toks[self.i]
        return t.kind == "kw" and t.value in words

    def at_op(self, *ops: str) -> bool:
        t = self.toks[self.i]
        return t.kind == "op" and t.value in ops

    def expect_op(self, op: str, what: str) -> _Tok:
        t = self.peek()
        if not (t.kind == "op" and t.value == op):
            raise SelectorError(f"expected {what}, found {_describe(t)}", t.pos)
        return self.take()

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SelectorError(f"nested deeper than {MAX_DEPTH} levels", pos)

    # -- kind checks
    @staticmethod
    def condition(e: _Expr) -> _Expr:
        if e.kind in ("num", "str"):
            raise SelectorError(f"expected a condition, found {_KIND_WORD[e.kind]}", e.pos)
        return e

    @staticmethod
    def numeric(e: _Expr, what: str) -> _Expr:
        if e.kind in ("str", "bool"):
            raise SelectorError(f"{what} needs numbers, found {_KIND_WORD[e.kind]}", e.pos)
        return e

    # -- grammar
    def selector(self) -> Fn:
        e = self.condition(self.or_expr())
        t = self.peek()
        if t.kind != "end":
            raise SelectorError(f"unexpected {_describe(t)}", t.pos)
        return e.fn

    def or_expr(self) -> _Expr:
        return self.junction("OR", self.and_expr)

    def and_expr(self) -> _Expr:
        return self.junction("AND", self.not_expr)

    def junction(self, word: str, operand: Callable[[], _Expr]) -> _Expr:
        """A flat run of OR (or AND): one loop at run time, however long the run."""
        first = operand()
        if not self.at_kw(word):
            return first
        parts = [self.condition(first)]
        while self.at_kw(word):
            self.take()
            parts.append(self.condition(operand()))
        fns = tuple(p.fn for p in parts)
        decisive = word == "OR"  # TRUE settles an OR, FALSE an AND
        neutral = not decisive

        def junction(h: Headers) -> object:
            result: bool | None = neutral
            for f in fns:
                v = f(h)
                if v is decisive:
                    return decisive
                if v is not neutral:
                    result = None
            return result
        return _Expr("bool", junction, first.pos)

    def not_expr(self) -> _Expr:
        if not self.at_kw("NOT"):
            return self.predicate()
        t = self.take()
        self.enter(t.pos)
        inner = self.condition(self.not_expr()).fn
        self.depth -= 1

        def negate(h: Headers) -> object:
            v = inner(h)
            return False if v is True else True if v is False else None
        return _Expr("bool", negate, t.pos)

    def predicate(self) -> _Expr:
        left = self.sum_expr()
        t = self.peek()
        if t.kind == "op" and t.value in _COMPARE:
            self.take()
            right = self.sum_expr()
            result = self.comparison(str(t.value), left, right)
        elif self.at_kw("NOT", "BETWEEN", "IN", "LIKE", "IS"):
            negated = False
            if self.at_kw("NOT"):
                self.take()
                negated = True
                if not self.at_kw("BETWEEN", "IN", "LIKE"):
                    t2 = self.peek()
                    raise SelectorError(
                        f"expected BETWEEN, IN or LIKE after NOT, found {_describe(t2)}",
                        t2.pos)
            word = self.take()
            if word.value == "BETWEEN":
                result = self.between(left, negated)
            elif word.value == "IN":
                result = self.in_list(self.header(left, "IN"), negated)
            elif word.value == "LIKE":
                result = self.like(self.header(left, "LIKE"), negated)
            else:
                result = self.is_null(self.header(left, "IS NULL"))
        else:
            return left
        after = self.peek()
        if (after.kind == "op" and after.value in _COMPARE) or self.at_kw(
                "BETWEEN", "IN", "LIKE", "IS"):
            raise SelectorError("comparisons do not chain: add parentheses", after.pos)
        return result

    def header(self, e: _Expr, what: str) -> Fn:
        if e.ident is None:
            raise SelectorError(f"{what} needs a header name on its left", e.pos)
        return e.fn

    def comparison(self, op: str, left: _Expr, right: _Expr) -> _Expr:
        cmp = _COMPARE[op]
        lf, rf = left.fn, right.fn
        if not self.convert:
            if right.const:
                left, right, op = right, left, _MIRROR[op]
                lf, rf = rf, lf
            if left.const:  # constant op expression (after the swap, if any)
                c, other = lf({}), right
                if other.ident is not None and other.ident not in _JMS_NAMES:
                    fn = _header_vs_const(other.ident, _MIRROR[op], c)
                else:
                    mirrored = _COMPARE[_MIRROR[op]]
                    fn = lambda h: mirrored(rf(h), c)  # noqa: E731
                return _Expr("bool", fn, left.pos)
        if self.convert:
            def converted(h: Headers) -> object:
                return cmp(*_coerce(lf(h), rf(h)))
            return _Expr("bool", converted, left.pos)
        return _Expr("bool", lambda h: cmp(lf(h), rf(h)), left.pos)

    def between(self, left: _Expr, negated: bool) -> _Expr:
        self.numeric(left, "BETWEEN")
        low = self.numeric(self.sum_expr(), "BETWEEN")
        if not self.at_kw("AND"):
            t = self.peek()
            raise SelectorError(f"expected AND in BETWEEN, found {_describe(t)}", t.pos)
        self.take()
        high = self.numeric(self.sum_expr(), "BETWEEN")
        vf, lf, hf = left.fn, low.fn, high.fn
        ge, le = _COMPARE[">="], _COMPARE["<="]
        convert = self.convert

        def within(h: Headers) -> object:
            v, lo, hi = vf(h), lf(h), hf(h)
            if convert:
                v, lo = _coerce(v, lo)
                v, hi = _coerce(v, hi)
            a, b = ge(v, lo), le(v, hi)
            if a is False or b is False:
                r: bool | None = False
            elif a is None or b is None:
                r = None
            else:
                r = True
            if negated and r is not None:
                return not r
            return r
        return _Expr("bool", within, left.pos)

    def in_list(self, get: Fn, negated: bool) -> _Expr:
        start = self.expect_op("(", "'(' after IN")
        values: set[str] = set()
        while True:
            t = self.take()
            if t.kind != "str":
                raise SelectorError(f"IN lists strings only, found {_describe(t)}", t.pos)
            values.add(str(t.value))
            if self.at_op(","):
                self.take()
                continue
            self.expect_op(")", "',' or ')' in the IN list")
            break
        return _Expr("bool", _string_test(get, frozenset(values).__contains__, negated),
                     start.pos)

    def like(self, get: Fn, negated: bool) -> _Expr:
        t = self.take()
        if t.kind != "str":
            raise SelectorError(f"LIKE needs a string pattern, found {_describe(t)}", t.pos)
        escape: str | None = None
        if self.at_kw("ESCAPE"):
            self.take()
            e = self.take()
            if e.kind != "str" or len(str(e.value)) != 1:
                raise SelectorError("ESCAPE needs a string of one character", e.pos)
            escape = str(e.value)
        try:
            m = like_matcher(str(t.value), escape)
        except ValueError as exc:
            raise SelectorError(str(exc), t.pos) from None
        return _Expr("bool", _string_test(get, m, negated), t.pos)

    def is_null(self, get: Fn) -> _Expr:
        negated = False
        if self.at_kw("NOT"):
            self.take()
            negated = True
        t = self.peek()
        if not self.at_kw("NULL"):
            raise SelectorError(f"expected NULL after IS, found {_describe(t)}", t.pos)
        self.take()
        if negated:
            return _Expr("bool", lambda h: get(h) is not None, t.pos)
        return _Expr("bool", lambda h: get(h) is None, t.pos)

    def sum_expr(self) -> _Expr:
        return self.chain(self.product, ("+", "-"))

    def product(self) -> _Expr:
        return self.chain(self.unary, ("*", "/"))

    def chain(self, operand: Callable[[], _Expr], ops: tuple[str, ...]) -> _Expr:
        first = operand()
        if not self.at_op(*ops):
            return first
        self.numeric(first, "arithmetic")
        rest: list[tuple[Callable[[int | float, int | float], int | float | None], Fn]] = []
        while self.at_op(*ops):
            op = str(self.take().value)
            rest.append((_ARITH[op], self.numeric(operand(), "arithmetic").fn))
        head, steps, convert = first.fn, tuple(rest), self.convert

        def compute(h: Headers) -> object:
            acc = _arith_operand(head(h), convert)
            if acc is None:
                return None
            for f, g in steps:
                v = _arith_operand(g(h), convert)
                if v is None:
                    return None
                try:
                    acc = f(acc, v)
                except OverflowError:
                    return None
                if acc is None:
                    return None
            return acc
        return _Expr("num", compute, first.pos)

    def unary(self) -> _Expr:
        if not self.at_op("+", "-"):
            return self.primary()
        t = self.take()
        self.enter(t.pos)
        inner = self.numeric(self.unary(), "a sign")
        self.depth -= 1
        if inner.kind == "num" and inner.ident is None and t.value == "-" \
                and self.toks[self.i - 1].kind == "num":
            value = inner.fn({})  # a negative literal: fold it
            return _Expr("num", _const(-value), t.pos, const=True)  # type: ignore[operator]
        f, convert, minus = inner.fn, self.convert, t.value == "-"

        def sign(h: Headers) -> object:
            v = _arith_operand(f(h), convert)
            if v is None:
                return None
            return -v if minus else v
        return _Expr("num", sign, t.pos)

    def primary(self) -> _Expr:
        t = self.take()
        if t.kind == "num":
            return _Expr("num", _const(t.value), t.pos, const=True)
        if t.kind == "str":
            return _Expr("str", _const(t.value), t.pos, const=True)
        if t.kind == "id":
            name = str(t.value)
            factory = _JMS_NAMES.get(name)
            return _Expr("any", factory() if factory else _header(name), t.pos, ident=name)
        if t.kind == "kw":
            if t.value in ("TRUE", "FALSE"):
                return _Expr("bool", _const(t.value == "TRUE"), t.pos, const=True)
            if t.value == "NULL":
                return _Expr("null", _const(None), t.pos, const=True)
        if t.kind == "op" and t.value == "(":
            self.enter(t.pos)
            inner = self.or_expr()
            self.depth -= 1
            self.expect_op(")", "')'")
            return _Expr(inner.kind, inner.fn, t.pos)
        raise SelectorError(f"expected a value, found {_describe(t)}", t.pos)


def parse(text: str) -> Selector:
    """Compile a selector, or raise SelectorError naming the position and problem."""
    if len(text) > MAX_LENGTH:
        raise SelectorError(f"longer than {MAX_LENGTH} characters")
    start = len(text) - len(text.lstrip(" \t\r\n\f"))
    convert = hyphens = False
    while True:
        if not convert and text.startswith(CONVERT_PREFIX, start):
            convert, start = True, start + len(CONVERT_PREFIX)
        elif not hyphens and text.startswith(HYPHEN_PREFIX, start):
            hyphens, start = True, start + len(HYPHEN_PREFIX)
        else:
            break
    toks = _tokenize(text, start, hyphens)
    if toks[0].kind == "end":
        raise SelectorError("empty selector", start)
    return Selector(text, _Parser(toks, convert).selector())
