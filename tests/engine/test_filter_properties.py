"""Property tests of the filter language: generated expressions never raise when evaluated
and agree with a plain reference interpreter of the AST; arbitrary and mutated text either
parses or raises InvalidSelector, within a time bound; the LIKE matcher agrees with a
regular expression and stays fast on patterns that make regular expressions backtrack."""

from __future__ import annotations

import math
import re
import signal
import time
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Message, filter_ast
from engine.errors import InvalidSelector
from engine.filters import (
    _condition,
    compile_filter,
    like_matcher,
    parse,
)

SECONDS_PER_CASE = 2.0


@contextmanager
def time_limit(seconds: float = SECONDS_PER_CASE):
    """Fail a case that takes longer than `seconds` instead of hanging the suite."""

    def expire(signum, frame):
        raise TimeoutError(f"a case took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- generators: expressions that parse, built by the kind of value each part yields -------
NAMES = ["a", "b", "s", "t", "JMSPriority", "JMSType"]

header_values = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([2**63 - 1, -(2**63), 10**20]),
    st.floats(-5, 5, allow_nan=False).map(lambda f: round(f, 2)),
    st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 0.5]),
    st.sampled_from(["", "x", "ab", "a%", "a_b", "it's", "a.b", "(*)", "é", "A\nB"]),
    st.booleans(),
)
headers = st.dictionaries(st.sampled_from(["a", "b", "s", "t", "priority", "type"]), header_values)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


names = st.sampled_from(NAMES)
number_literals = st.one_of(
    st.integers(-9, 9).map(str),
    st.sampled_from(["0.5", ".5", "2.", "1e1", "1E-1", "0x0A", "07", "5L", "1e400"]),
    st.sampled_from(["9223372036854775807", "(-9223372036854775808)"]),
)
string_literals = st.sampled_from(["", "x", "ab", "it's", "a%", "5"]).map(quote)
boolean_literals = st.sampled_from(["TRUE", "FALSE", "true"])
numbers = st.recursive(
    st.one_of(number_literals, names),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda v: f"-({v})"),
    ),
    max_leaves=4,
)
equatable = st.one_of(
    st.tuples(numbers, numbers),
    st.tuples(st.one_of(string_literals, names), st.one_of(string_literals, names)),
    st.tuples(st.one_of(boolean_literals, names), st.one_of(boolean_literals, names)),
    st.tuples(names, st.one_of(string_literals, boolean_literals, number_literals)),
)
option_numbers = number_literals.map(lambda text: text.strip("()"))  # IN takes -9 unbracketed
options = st.lists(st.one_of(option_numbers, string_literals, boolean_literals), min_size=1)
conditions = st.recursive(
    st.one_of(
        st.tuples(numbers, st.sampled_from(["<", ">", "<=", ">=", "=", "<>"]), numbers).map(
            " ".join
        ),
        st.tuples(equatable, st.sampled_from(["=", "<>", "!="])).map(
            lambda t: f"{t[0][0]} {t[1]} {t[0][1]}"
        ),
        st.tuples(numbers, st.sampled_from(["", "NOT "]), numbers, numbers).map(
            lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"
        ),
        st.tuples(names, st.sampled_from(["", "NOT "]), options.map(", ".join)).map(
            lambda t: f"{t[0]} {t[1]}IN ({t[2]})"
        ),
        st.tuples(
            names,
            st.sampled_from(["", "NOT "]),
            st.text(alphabet="ab%_!.*(", max_size=6),
            st.sampled_from(["", " ESCAPE '!'", " ESCAPE '%'"]),
        ).map(lambda t: f"{t[0]} {t[1]}LIKE {quote(t[2])}{t[3]}"),
        st.tuples(st.one_of(numbers, names), st.sampled_from(["", "NOT "])).map(
            lambda t: f"{t[0]} IS {t[1]}NULL"
        ),
        st.sampled_from([*NAMES, "TRUE", "FALSE"]),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR", "and", "Or"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda c: f"NOT {c}"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]} /* comment */ AND {t[1]} -- end\n"),
    ),
    max_leaves=6,
)


# -- a reference interpreter: slow, obvious, written from the documented semantics --------
def is_number(v: object) -> bool:
    return type(v) in (int, float)


def kind(v: object) -> str:
    return "number" if is_number(v) else type(v).__name__


def ref_identifier(name: str, hdrs: dict):
    if name == "JMSPriority":
        return hdrs.get("priority", 4)
    if name == "JMSType":
        return hdrs.get("type")
    return hdrs.get(name)


def ref_arithmetic(op: str, a, b):
    if not (is_number(a) and is_number(b)):
        return None
    if op in "/%" and b == 0:
        return None
    if op == "/":
        if type(a) is int and type(b) is int:
            q = abs(a) // abs(b)
            return q if (a < 0) == (b < 0) else -q
        return a / b
    if op == "%":
        if type(a) is int and type(b) is int:
            q = abs(a) // abs(b)
            return a - b * (q if (a < 0) == (b < 0) else -q)  # Java: a - b * (a / b)
        return math.nan if math.isinf(a) else math.fmod(a, b)
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def ref_value(node, hdrs: dict):
    if isinstance(node, filter_ast.Literal):
        return node.value
    if isinstance(node, filter_ast.Identifier):
        return ref_identifier(node.name, hdrs)
    if isinstance(node, filter_ast.Negate):
        v = ref_value(node.operand, hdrs)
        return -v if is_number(v) else None
    if isinstance(node, filter_ast.Arithmetic):
        return ref_arithmetic(node.op, ref_value(node.left, hdrs), ref_value(node.right, hdrs))
    return ref_truth(node, hdrs)


def ref_compare(op, a, b):
    if a is None or b is None or kind(a) != kind(b):
        return None
    if not is_number(a) and op not in ("=", "<>"):
        return None
    return {"=": a == b, "<>": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


def ref_not(v):
    return None if v is None else not v


def ref_and(values):
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def ref_or(values):
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


def ref_like_regex(pattern: str, escape: str | None) -> str:
    regex, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern) and pattern[i + 1] in ("%", "_", escape):
            regex += re.escape(pattern[i + 1])
            i += 2
            continue
        regex += {"%": ".*", "_": "."}.get(ch, re.escape(ch))
        i += 1
    return regex


def ref_truth(node, hdrs: dict):
    if isinstance(node, filter_ast.Compare):
        return ref_compare(node.op, ref_value(node.left, hdrs), ref_value(node.right, hdrs))
    if isinstance(node, filter_ast.And):
        return ref_and([ref_truth(o, hdrs) for o in node.operands])
    if isinstance(node, filter_ast.Or):
        return ref_or([ref_truth(o, hdrs) for o in node.operands])
    if isinstance(node, filter_ast.Not):
        return ref_not(ref_truth(node.operand, hdrs))
    if isinstance(node, filter_ast.Between):
        v = ref_value(node.value, hdrs)
        low, high = ref_value(node.low, hdrs), ref_value(node.high, hdrs)
        result = ref_and([ref_compare(">=", v, low), ref_compare("<=", v, high)])
        return ref_not(result) if node.negated else result
    if isinstance(node, filter_ast.In):
        v = ref_value(node.value, hdrs)
        result = ref_or([ref_compare("=", v, option.value) for option in node.options])
        return ref_not(result) if node.negated else result
    if isinstance(node, filter_ast.Like):
        v = ref_value(node.value, hdrs)
        if type(v) is not str:
            return None
        regex = ref_like_regex(node.pattern, node.escape)
        result = re.fullmatch(regex, v, re.DOTALL) is not None
        return not result if node.negated else result
    if isinstance(node, filter_ast.IsNull):
        result = ref_value(node.value, hdrs) is None
        return not result if node.negated else result
    v = ref_value(node, hdrs)
    return v if type(v) is bool else None


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions, headers)
def test_generated_expressions_agree_with_the_reference_and_never_raise(text, hdrs) -> None:
    with time_limit():
        ast = parse(text)  # every generated expression is valid
        condition = _condition(ast)  # the raw compiled condition: exceptions would surface
        message = Message(headers=hdrs)
        expected = ref_truth(ast, hdrs)
        assert condition(message) is expected, (text, hdrs)
        assert compile_filter(text)(message) is (expected is True)


def assert_parses_or_refuses(text: str) -> None:
    with time_limit():
        try:
            selects = compile_filter(text)
        except InvalidSelector as error:
            assert error.column is None or 1 <= error.column <= len(text) + 1, (text, error)
            assert str(error)
            return
        selects(Message(headers={"a": 1, "s": "x"}))


PIECES = [*"ab 01'\"()=<>!.%_-+*/,eExL\n", "AND", "OR", "NOT", "IN", "IS", "NULL", "LIKE"]
PIECES += ["ESCAPE", "BETWEEN", "TRUE", "--", "/*", "*/", "0x", "1.5", "'s'"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_arbitrary_text_parses_or_raises_invalid_selector(text: str) -> None:
    assert_parses_or_refuses(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_unicode_text_parses_or_raises_invalid_selector(text: str) -> None:
    assert_parses_or_refuses(text)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions, st.data())
def test_mutated_expressions_parse_or_raise_invalid_selector(text: str, data) -> None:
    position = data.draw(st.integers(0, len(text)))
    mutation = data.draw(st.sampled_from(["delete", "insert", "cut", "swap"]))
    if mutation == "delete":
        text = text[:position] + text[position + 1 :]
    elif mutation == "insert":
        inserted = data.draw(st.sampled_from(list("()',=<%_-*/\"!0x.e")))
        text = text[:position] + inserted + text[position:]
    elif mutation == "cut":
        text = text[:position]
    else:
        text = text[position:] + " " + text[:position]
    assert_parses_or_refuses(text)


# -- LIKE: the backtracking-free matcher against a regular expression ------------------------
@settings(max_examples=1000, deadline=None)
@given(
    st.text(alphabet="ab%_!.*", max_size=8),
    st.sampled_from([None, "!", "%", "_", "a"]),
    st.text(alphabet="ab!%_.*\n", max_size=10),
)
def test_like_matcher_agrees_with_a_regular_expression(pattern, escape, value) -> None:
    expected = re.fullmatch(ref_like_regex(pattern, escape), value, re.DOTALL) is not None
    assert like_matcher(pattern, escape)(value) is expected


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ("%a%a%a%a%a%a%a%a%a%a%a%a%b", "a" * 20_000),
        ("%" * 500 + "b", "a" * 20_000),
        ("%a_%a_%a_%a_%a_%a_%a_%c", "ab" * 10_000),
    ],
)
def test_like_stays_fast_on_patterns_that_make_regular_expressions_backtrack(pattern, value):
    selects = compile_filter(f"s LIKE {quote(pattern)}")
    started = time.thread_time()  # CPU time: a busy machine stretches the wall clock
    with time_limit():
        assert selects(Message(headers={"s": value})) is False
    assert time.thread_time() - started < 0.5
