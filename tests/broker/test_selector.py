"""Message selectors: the JMS specification's examples, SQL's three-valued logic,
precedence, errors with positions, and random expressions against a reference."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amqplite.broker import selector as sel
from amqplite.broker.selector import SelectorError, parse


def matches(text: str, **headers: object) -> bool:
    return parse(text).matches(headers)


# ---------------------------------------------------------------- the spec's examples


def test_jms_examples() -> None:
    car = "JMSType = 'car' AND color = 'blue' AND weight > 2500"
    assert matches(car, type="car", color="blue", weight=3000)
    assert not matches(car, type="car", color="red", weight=3000)
    assert not matches(car, type="car", color="blue")  # weight NULL: UNKNOWN
    age = "age BETWEEN 15 AND 19"
    assert matches(age, age=15) and matches(age, age=19) and matches(age, age=17.5)
    assert not matches(age, age=20) and not matches(age, age=14)
    assert matches("age NOT BETWEEN 15 AND 19", age=20)
    assert not matches("age NOT BETWEEN 15 AND 19", age=15)
    country = "Country IN (' UK', 'US', 'France')"
    assert matches(country, Country=" UK") and matches(country, Country="France")
    assert not matches(country, Country="UK") and not matches(country, Country="Peru")
    assert matches("Country NOT IN (' UK', 'US', 'France')", Country="Peru")
    assert matches("phone LIKE '12%3'", phone="123") and matches("phone LIKE '12%3'",
                                                                    phone="12993")
    assert not matches("phone LIKE '12%3'", phone="1234")
    assert matches("word LIKE 'l_se'", word="lose")
    assert not matches("word LIKE 'l_se'", word="loose")
    under = r"underscored LIKE '\_%' ESCAPE '\'"
    assert matches(under, underscored="_foo") and not matches(under, underscored="bar")
    assert matches("phone NOT LIKE '12%3'", phone="1234")
    assert matches("prop_name IS NULL") and not matches("prop_name IS NULL", prop_name="x")
    assert matches("prop_name IS NOT NULL", prop_name="")


def test_literals() -> None:
    assert matches("s = 'it''s'", s="it's")
    assert matches("n = 57 AND m = -957 AND p = +62", n=57, m=-957, p=62)
    assert matches("x = 7E3 AND y = -57.9E2 AND z = 7. AND w = .5", x=7000, y=-5790.0,
                   z=7, w=0.5)
    assert matches("h = 0x1F AND o = 017 AND l = 42L AND f = 1.5f", h=31, o=15, l=42, f=1.5)
    assert matches("b = TRUE AND c = false", b=True, c=False)
    assert matches("TRUE") and not matches("FALSE") and not matches("NULL")
    assert matches("flag", flag=True) and not matches("flag", flag="true")
    assert matches("n = 1.0", n=1)  # exact and approximate compare as numbers


def test_keywords_are_case_insensitive_names_are_not() -> None:
    assert matches("a between 1 and 3 aNd b is not null Or c", a=2, b="x")
    assert matches("A = 1", A=1) and not matches("A = 1", a=1)


# ---------------------------------------------------------------- types


def test_unlike_types_are_false_not_errors() -> None:
    assert not matches("s = 1", s="1")
    assert matches("NOT (s = 1)", s="1")  # FALSE, not UNKNOWN
    assert not matches("s > 0", s="abc") and matches("NOT (s > 0)", s="abc")
    assert not matches("b = 1", b=True)  # a boolean is not a number
    assert not matches("s < 'b'", s="a")  # strings compare with = and <> only
    assert matches("s <> 'b'", s="a")
    assert not matches("n LIKE '1%'", n=12) and matches("NOT n LIKE '1%'", n=12)
    assert not matches("n IN ('1')", n=1)
    assert not matches("x + 1 = 2", x="1") and not matches("NOT (x + 1 = 2)", x="1")


def test_arithmetic() -> None:
    assert matches("a * 2 + 1 = 7", a=3)
    assert matches("-a = -3 AND +a = 3 AND - -a = 3", a=3)
    assert matches("7 / 2 = 3 AND -7 / 2 = -3 AND 7.0 / 2 = 3.5")  # Java's long division
    assert not matches("a / 0 = 1", a=1) and not matches("NOT (a / 0 = 1)", a=1)  # NULL


def test_header_strings_are_strings_unless_converted() -> None:
    """Artemis: JMS forbids the conversion; convert_string_expressions: turns it on."""
    assert not matches("age > 18", age="21")
    conv = "convert_string_expressions:"
    assert matches(conv + "age > 18", age="21")
    assert matches(conv + "age = 21 AND age BETWEEN 20 AND 22 AND age + 1 = 22", age="21")
    assert matches(conv + "w > 2.5", w="2.75") and matches(conv + "-w < 0", w="1e3")
    assert matches(conv + "f = TRUE", f="true") and not matches(conv + "f = TRUE", f="yes")
    assert not matches(conv + "age > 18", age="twenty") and not matches(conv + "x > 1",
                                                                           x="inf")
    assert matches(conv + "a = b", a="2", b=2.0)


def test_hyphenated_names() -> None:
    assert matches("hyphenated_props:content-type = 'text/plain'",
                   **{"content-type": "text/plain"})
    assert matches("convert_string_expressions:hyphenated_props:content-length > 10",
                   **{"content-length": "11"})
    # without the prefix it is a subtraction of two headers: NULL, so no match
    assert not matches("content-type = 'text/plain'", **{"content-type": "text/plain"})


def test_jms_header_names() -> None:
    h: dict[str, object] = {"message-id": "T_1@@1", "correlation-id": "c7", "type": "car",
                            "priority": "9", "timestamp": "1700000000000",
                            "persistent": "true"}
    assert parse("JMSMessageID = 'T_1@@1' AND JMSCorrelationID = 'c7' AND JMSType = 'car'"
                 ).matches(h)
    assert parse("JMSPriority > 4 AND JMSTimestamp > 0 AND JMSDeliveryMode = 'PERSISTENT'"
                 ).matches(h)
    assert parse("AMQPriority = 9 AND AMQDurable = 'DURABLE' AND AMQExpiration = 0").matches(h)
    assert matches("JMSPriority = 4 AND JMSDeliveryMode = 'NON_PERSISTENT'")  # defaults
    assert matches("JMSCorrelationID IS NULL AND JMSTimestamp IS NULL")
    assert matches("JMSPriority = 4", priority="high")


# ---------------------------------------------------------------- logic and precedence

T, F, U = "TRUE", "FALSE", "NULL"
VALUE = {T: True, F: False, U: None}
AND = {(True, True): True, (True, False): False, (True, None): None,
       (False, False): False, (False, None): False, (None, None): None}
OR = {(True, True): True, (True, False): True, (True, None): True,
      (False, False): False, (False, None): None, (None, None): None}


@pytest.mark.parametrize("a", [T, F, U])
@pytest.mark.parametrize("b", [T, F, U])
def test_three_valued_logic(a: str, b: str) -> None:
    va, vb = VALUE[a], VALUE[b]
    key = (va, vb) if (va, vb) in AND else (vb, va)

    def truth(text: str) -> bool | None:
        """TRUE, FALSE or UNKNOWN, told apart with NOT."""
        if matches(text):
            return True
        return False if matches(f"NOT ({text})") else None

    assert truth(f"{a} AND {b}") is AND[key]
    assert truth(f"{a} OR {b}") is OR[key]
    assert truth(f"NOT {a}") is (None if va is None else not va)
    assert truth(f"{a} = {b}") is (None if va is None or vb is None else va == vb)


def test_null_comparisons_are_unknown() -> None:
    for text in ("x = 1", "x <> 1", "x > 1", "x BETWEEN 1 AND 2", "x IN ('a')",
                 "x LIKE 'a'", "x + 1 = 2", "1 = x"):
        assert not matches(text) and not matches(f"NOT ({text})"), text
    assert matches("x IS NULL") and not matches("x IS NOT NULL")
    assert not matches("NOT x BETWEEN 1 AND 2") and not matches("x NOT BETWEEN 1 AND 2")


def test_precedence() -> None:
    assert matches("1 + 2 * 3 = 7") and matches("(1 + 2) * 3 = 9")
    assert matches("10 - 4 - 3 = 3") and matches("8 / 4 / 2 = 1")  # left-associative
    assert matches("-2 * -3 = 6") and matches("- (2 + 3) = -5")
    assert matches("TRUE OR TRUE AND FALSE")  # AND binds tighter than OR
    assert not matches("(TRUE OR TRUE) AND FALSE")
    assert matches("NOT FALSE AND TRUE") and not matches("NOT (FALSE OR TRUE)")
    assert matches("NOT a = 2", a=1)  # NOT applies to the comparison
    assert matches("a BETWEEN 1 + 1 AND 2 * 2 AND b", a=3, b=True)
    assert matches("(a > 1) = TRUE", a=2)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(("text", "problem", "position"), [
    ("", "empty selector", 1),
    ("a =", "expected a value, found the end", 4),
    ("a = 'x", "unterminated string", 5),
    ("a = 1 AND", "expected a value, found the end", 10),
    ("a # 2", "unexpected character '#'", 3),
    ("a = ¹", "unexpected character '¹'", 5),  # str.isdigit() would take it
    ("a = 1)", "unexpected ')'", 6),
    ("(a = 1", "expected ')', found the end", 7),
    ("a = b = c", "comparisons do not chain", 7),
    ("a IN (1, 2)", "IN lists strings only", 7),
    ("a IN 'x'", "expected '(' after IN", 6),
    ("a LIKE b", "LIKE needs a string pattern", 8),
    ("a LIKE 'x' ESCAPE 'ab'", "ESCAPE needs a string of one character", 19),
    ("a LIKE 'x!' ESCAPE '!'", "ends with its escape character", 8),
    ("1 + 2", "expected a condition, found a number", 1),
    ("'a' OR b", "expected a condition, found a string", 1),
    ("a + 'x' = 1", "arithmetic needs numbers, found a string", 5),
    ("'a' BETWEEN 1 AND 2", "BETWEEN needs numbers", 1),
    ("1 IS NULL", "IS NULL needs a header name", 1),
    ("a IS 1", "expected NULL after IS", 6),
    ("a NOT IS NULL", "expected BETWEEN, IN or LIKE after NOT", 7),
    ("a BETWEEN 1 OR 2", "expected AND in BETWEEN", 13),
    ("a = 12abc", "malformed number", 5),
    ("a = 09", "malformed octal number", 5),
    ("a = 1e", "an exponent needs digits", 5),
    ("AND = 1", "expected a value, found 'AND'", 1),
])
def test_errors_name_problem_and_position(text: str, problem: str, position: int) -> None:
    with pytest.raises(SelectorError) as caught:
        parse(text)
    assert problem in str(caught.value)
    assert caught.value.position == position - 1
    assert str(caught.value).endswith(f"at position {position}")


def test_bounds() -> None:
    with pytest.raises(SelectorError, match="longer than 4096"):
        parse("a = 1 OR " * 600 + "TRUE")
    with pytest.raises(SelectorError, match="nested deeper than 32"):
        parse("(" * 40 + "a" + ")" * 40 + " = 1")
    with pytest.raises(SelectorError, match="nested deeper"):
        parse("NOT " * 40 + "a")
    with pytest.raises(SelectorError, match="nested deeper"):
        parse("a = " + "-" * 40 + "1")
    deepest = "NOT " * 8 + "(" * 12 + "- " * 12 + "a" + ")" * 12 + " = 1"
    assert parse(deepest).matches({"a": 1})  # 32 levels: the limit itself is fine
    # long flat chains are loops, not recursion: they fit the length budget
    assert parse(" OR ".join(f"a = {i}" for i in range(300))).matches({"a": 299})
    assert parse("+".join(["1"] * 2000) + " = 2000").matches({})
    assert parse(" AND ".join(["a"] * 600)).matches({"a": True})


def test_like_worst_cases_stay_cheap() -> None:
    """Many % against a long near-miss: each segment is found once, left to right."""
    s = "a" * 3000
    assert not sel.like_matcher("%a" * 500 + "%b")(s)
    assert not sel.like_matcher("%a_" * 500 + "b")(s)
    assert sel.like_matcher("%a_" * 500 + "%")(s)


# ---------------------------------------------------------------- reference


NAMES = ["a", "b", "c", "JMSPriority", "JMSType"]
_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def ref_number(s: str) -> Any:
    if not _NUMBER_TEXT.fullmatch(s):
        return None
    try:
        return int(s)
    except ValueError:
        return float(s)


def is_num(v: object) -> bool:
    return type(v) in (int, float)


def ref_lookup(name: str, h: Mapping[str, object]) -> object:
    if name == "JMSType":
        name = "type"
    if name == "JMSPriority":
        v = h.get("priority")
        if type(v) is int:
            return v
        if type(v) is str:
            try:
                return int(v)
            except ValueError:
                return 4
        return 4
    return h.get(name)


def ref_coerce(a: object, b: object) -> tuple[object, object]:
    if isinstance(a, str) and not isinstance(b, str):
        if is_num(b):
            n = ref_number(a)
            return (a if n is None else n), b
        if type(b) is bool:
            return {"true": True, "false": False}.get(a.lower(), a), b
    if isinstance(b, str) and not isinstance(a, str):
        b, a = ref_coerce(b, a)
    return a, b


def ref_compare(op: str, a: object, b: object, convert: bool) -> bool | None:
    if convert:
        a, b = ref_coerce(a, b)
    if a is None or b is None:
        return None
    if op in ("=", "<>"):
        same = type(a) is type(b) or (is_num(a) and is_num(b))
        if not same:
            return False
        return (a == b) if op == "=" else (a != b)
    if not (is_num(a) and is_num(b)):
        return False
    x: Any = a
    return {"<": x < b, "<=": x <= b, ">": x > b, ">=": x >= b}[op]


def ref_like(pattern: str, escape: str | None, s: str) -> bool:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.fullmatch("".join(out), s, re.DOTALL) is not None


def ref_not(v: object) -> bool | None:
    return not v if type(v) is bool else None


def ref_eval(node: tuple[Any, ...], h: Mapping[str, object], convert: bool) -> object:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "id":
        return ref_lookup(node[1], h)
    if kind in ("neg", "pos"):
        v = ref_eval(node[1], h, convert)
        if convert and isinstance(v, str):
            v = ref_number(v)
        if not is_num(v):
            return None
        return -v if kind == "neg" else v  # type: ignore[operator]
    if kind == "arith":
        a, b = ref_eval(node[2], h, convert), ref_eval(node[3], h, convert)
        if convert:
            a = ref_number(a) if isinstance(a, str) else a
            b = ref_number(b) if isinstance(b, str) else b
        if not (is_num(a) and is_num(b)):
            return None
        x: Any = a
        y: Any = b
        try:
            if node[1] == "+":
                return x + y
            if node[1] == "-":
                return x - y
            if node[1] == "*":
                return x * y
            if y == 0:
                return None
            if type(x) is int and type(y) is int:
                return int(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
            return x / y
        except OverflowError:
            return None
    if kind == "cmp":
        return ref_compare(node[1], ref_eval(node[2], h, convert),
                           ref_eval(node[3], h, convert), convert)
    if kind in ("and", "or"):
        a, b = ref_eval(node[1], h, convert), ref_eval(node[2], h, convert)
        a = a if type(a) is bool else None
        b = b if type(b) is bool else None
        if kind == "and":
            if a is False or b is False:
                return False
            return None if a is None or b is None else True
        if a is True or b is True:
            return True
        return None if a is None or b is None else False
    if kind == "not":
        return ref_not(ref_eval(node[1], h, convert))
    if kind == "between":
        v, lo, hi = (ref_eval(n, h, convert) for n in node[1:4])
        r = ref_eval(("and", ("lit", ref_compare(">=", v, lo, convert)),
                      ("lit", ref_compare("<=", v, hi, convert))), h, convert)
        return ref_not(r) if node[4] else r
    v = ref_lookup(node[1], h)
    if kind == "isnull":
        return (v is not None) if node[2] else (v is None)
    if v is None:
        return None
    if not isinstance(v, str):
        return False
    r = (v in node[2]) if kind == "in" else ref_like(node[2], node[3], v)
    return (not r) if node[-1] else r


# rendering: LEVEL says how tightly a node binds; a child looser than needed gets ()
LEVEL = {"or": 1, "and": 2, "not": 3, "cmp": 4, "between": 4, "in": 4, "like": 4,
         "isnull": 4, "arith+": 5, "arith*": 6, "neg": 7, "pos": 7, "lit": 8, "id": 8}


def level(node: tuple[Any, ...]) -> int:
    if node[0] == "arith":
        return LEVEL["arith+" if node[1] in "+-" else "arith*"]
    if node[0] == "lit" and is_num(node[1]) and node[1] < 0:
        return 7
    return LEVEL[node[0]]


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render(node: tuple[Any, ...], full: bool) -> str:
    def sub(child: tuple[Any, ...], need: int) -> str:
        text = render(child, full)
        if (full and child[0] not in ("lit", "id")) or level(child) < need:
            return f"({text})"
        return text

    kind = node[0]
    if kind == "lit":
        v = node[1]
        if v is None:
            return "NULL"
        if type(v) is bool:
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return quote(v)
        return repr(v)
    if kind == "id":
        return str(node[1])
    if kind in ("neg", "pos"):
        return ("- " if kind == "neg" else "+ ") + sub(node[1], 7)
    if kind == "arith":
        mine = level(node)
        return f"{sub(node[2], mine)} {node[1]} {sub(node[3], mine + 1)}"
    if kind == "cmp":
        return f"{sub(node[2], 5)} {node[1]} {sub(node[3], 5)}"
    if kind in ("and", "or"):
        mine = level(node)
        return f"{sub(node[1], mine)} {kind.upper()} {sub(node[2], mine + 1)}"
    if kind == "not":
        return "NOT " + sub(node[1], 3)
    if kind == "between":
        neg = "NOT " if node[4] else ""
        return (f"{sub(node[1], 5)} {neg}BETWEEN {sub(node[2], 5)} AND "
                f"{sub(node[3], 5)}")
    if kind == "isnull":
        return f"{node[1]} IS {'NOT ' if node[2] else ''}NULL"
    if kind == "in":
        return f"{node[1]} {'NOT ' if node[3] else ''}IN ({', '.join(map(quote, node[2]))})"
    escape = f" ESCAPE {quote(node[3])}" if node[3] else ""
    return f"{node[1]} {'NOT ' if node[4] else ''}LIKE {quote(node[2])}{escape}"


TEXT = st.text(alphabet="ab1.2'%_!", max_size=4)
names = st.sampled_from(NAMES)
ident = names.map(lambda n: ("id", n))
number = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)
                   ).map(lambda v: ("lit", v))
num_expr = st.recursive(
    st.one_of(number, ident, st.just(("lit", None))),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["neg", "pos"]), inner),
        st.tuples(st.just("arith"), st.sampled_from("+-*/"), inner, inner)),
    max_leaves=6)
value_expr = st.one_of(num_expr, TEXT.map(lambda s: ("lit", s)),
                       st.booleans().map(lambda b: ("lit", b)))


@st.composite
def like_node(draw: st.DrawFn) -> tuple[Any, ...]:
    escape = draw(st.sampled_from([None, "!"]))
    pattern = draw(TEXT)
    try:
        sel.like_matcher(pattern, escape)
    except ValueError:  # a dangling escape: give it a character to escape
        pattern += "!"
    return ("like", draw(names), pattern, escape, draw(st.booleans()))


predicate = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
              value_expr, value_expr),
    st.tuples(st.just("between"), num_expr, num_expr, num_expr, st.booleans()),
    st.tuples(st.just("in"), names, st.lists(TEXT, min_size=1, max_size=3).map(tuple),
              st.booleans()),
    like_node(),
    st.tuples(st.just("isnull"), names, st.booleans()),
    st.sampled_from([("lit", True), ("lit", False), ("lit", None)]),
    ident)
condition = st.recursive(
    predicate,
    lambda inner: st.one_of(st.tuples(st.just("not"), inner),
                            st.tuples(st.sampled_from(["and", "or"]), inner, inner)),
    max_leaves=8)
header_value = st.one_of(TEXT, st.sampled_from(["1", "2.5", "-3", "1e2", "true", "0"]),
                         st.integers(-5, 5), st.floats(-5, 5, allow_nan=False),
                         st.booleans())
headers = st.dictionaries(st.sampled_from(["a", "b", "c", "priority", "type"]),
                          header_value, max_size=5)


def compiled(text: str) -> sel.Selector:
    try:
        return parse(text)
    except SelectorError as exc:
        assume("nested deeper" not in str(exc))
        raise


@settings(max_examples=400)
@given(condition, st.lists(headers, min_size=1, max_size=4), st.booleans())
def test_random_expressions_match_the_reference(node: tuple[Any, ...],
                                                hs: list[dict[str, object]],
                                                convert: bool) -> None:
    prefix = "convert_string_expressions:" if convert else ""
    minimal, full = compiled(prefix + render(node, False)), compiled(prefix + render(node, True))
    for h in hs:
        expected = ref_eval(node, h, convert) is True
        assert minimal.matches(h) is expected, (minimal.text, h)
        assert full.matches(h) is expected, (full.text, h)


@settings(max_examples=500)
@given(st.text(alphabet="ab%_!", max_size=8), st.text(alphabet="ab%_!", max_size=10),
       st.sampled_from([None, "!", "a"]))
def test_like_matches_a_regex_reference(pattern: str, value: str, escape: str | None) -> None:
    try:
        m = sel.like_matcher(pattern, escape)
    except ValueError:
        assert escape is not None and pattern.endswith(escape)
        return
    assert m(value) is ref_like(pattern, escape, value)


SELECTORISH = st.lists(st.one_of(
    st.sampled_from(["a", "b", " ", "'", "''", "(", ")", "=", "<>", "<", ">=", "+", "-",
                     "*", "/", ",", "1", "2.5", "1e", "0x", "09", "AND", "OR", "NOT",
                     "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "%", "_",
                     "convert_string_expressions:", "hyphenated_props:", "\\", "."]),
    st.text(max_size=3)), max_size=30).map("".join)


@settings(max_examples=1000)
@given(st.one_of(SELECTORISH, st.text(max_size=60)), headers)
def test_random_text_only_ever_raises_selector_error(text: str,
                                                     h: dict[str, object]) -> None:
    try:
        s = parse(text)
    except SelectorError as exc:
        assert str(exc).startswith("selector: ")
        return
    assert s.matches(h) in (True, False)
