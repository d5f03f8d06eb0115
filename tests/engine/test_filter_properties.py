"""Property tests of the filter language: generated expressions never raise when evaluated
and agree with a plain reference interpreter of the AST; arbitrary text either parses or
raises InvalidSelector, quickly."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Message
from engine.errors import InvalidSelector
from engine.filters import (
    And,
    Arithmetic,
    Between,
    Compare,
    Identifier,
    In,
    IsNull,
    Like,
    Literal,
    Negate,
    Not,
    Or,
    compile_filter,
    parse,
)

NAMES = ["a", "b", "c", "s", "t"]

header_values = st.one_of(
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False).map(lambda f: round(f, 2)),
    st.sampled_from(["", "x", "ab", "a%", "a_b", "it's"]),
    st.booleans(),
)
headers = st.dictionaries(st.sampled_from(NAMES), header_values, max_size=5)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


literals = st.one_of(
    st.integers(-9, 9).map(str),
    st.sampled_from(["0.5", ".5", "2.", "1e1", "0x0A", "07"]),
    st.sampled_from(["", "x", "ab", "it's"]).map(quote),
    st.sampled_from(["TRUE", "FALSE"]),
)
values = st.recursive(
    st.one_of(literals, st.sampled_from(NAMES)),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda v: f"-{v}"),
    ),
    max_leaves=4,
)
conditions = st.recursive(
    st.one_of(
        st.tuples(values, st.sampled_from(["=", "<>", "<", ">", "<=", ">="]), values).map(" ".join),
        st.tuples(values, st.sampled_from(["", "NOT "]), values, values).map(
            lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"
        ),
        st.tuples(
            st.sampled_from(NAMES),
            st.sampled_from(["", "NOT "]),
            st.lists(literals, min_size=1, max_size=3),
        ).map(lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(
            st.sampled_from(NAMES),
            st.sampled_from(["", "NOT "]),
            st.sampled_from(["a%", "_", "%b%", "a!%", "x"]),
        ).map(lambda t: f"{t[0]} {t[1]}LIKE {quote(t[2])} ESCAPE '!'"),
        st.tuples(values, st.sampled_from(["", "NOT "])).map(lambda t: f"{t[0]} IS {t[1]}NULL"),
        st.sampled_from([*NAMES, "TRUE", "FALSE"]),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda c: f"NOT {c}"),
    ),
    max_leaves=6,
)


# -- a reference interpreter: slow, obvious, written from the documented semantics --------
def is_number(v: object) -> bool:
    return type(v) in (int, float)


def ref_value(node, headers: dict):
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Identifier):
        return headers.get(node.name)
    if isinstance(node, Negate):
        v = ref_value(node.operand, headers)
        return -v if is_number(v) else None
    if isinstance(node, Arithmetic):
        a, b = ref_value(node.left, headers), ref_value(node.right, headers)
        if not (is_number(a) and is_number(b)):
            return None
        if node.op == "/":
            if b == 0:
                return None
            if type(a) is int and type(b) is int:
                q = abs(a) // abs(b)
                return q if (a < 0) == (b < 0) else -q
            return a / b
        return {"+": a + b, "-": a - b, "*": a * b}[node.op]
    return ref_truth(node, headers)


def ref_compare(op, a, b):
    if a is None or b is None:
        return None
    if is_number(a) and is_number(b):
        return {"=": a == b, "<>": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    if type(a) is not type(b) or is_number(a) or is_number(b):
        return None
    return {"=": a == b, "<>": a != b}.get(op)


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


def ref_truth(node, headers: dict):
    if isinstance(node, Compare):
        return ref_compare(node.op, ref_value(node.left, headers), ref_value(node.right, headers))
    if isinstance(node, And):
        return ref_and([ref_truth(o, headers) for o in node.operands])
    if isinstance(node, Or):
        return ref_or([ref_truth(o, headers) for o in node.operands])
    if isinstance(node, Not):
        return ref_not(ref_truth(node.operand, headers))
    if isinstance(node, Between):
        v = ref_value(node.value, headers)
        result = ref_and(
            [
                ref_compare(">=", v, ref_value(node.low, headers)),
                ref_compare("<=", v, ref_value(node.high, headers)),
            ]
        )
        return ref_not(result) if node.negated else result
    if isinstance(node, In):
        v = ref_value(node.value, headers)
        if v is None or type(v) is bool:
            return None
        result = any(
            type(o.value) is not bool and ref_compare("=", v, o.value) for o in node.options
        )
        return not result if node.negated else result
    if isinstance(node, Like):
        v = ref_value(node.value, headers)
        if type(v) is not str:
            return None
        regex, chars = "", iter(node.pattern)
        for ch in chars:
            if ch == node.escape:
                regex += re.escape(next(chars))
            else:
                regex += {"%": ".*", "_": "."}.get(ch, re.escape(ch))
        result = re.fullmatch(regex, v, re.S) is not None
        return not result if node.negated else result
    if isinstance(node, IsNull):
        result = ref_value(node.value, headers) is None
        return not result if node.negated else result
    v = ref_value(node, headers)
    return v if type(v) is bool else None


@settings(max_examples=400, deadline=500)
@given(conditions, headers)
def test_generated_expressions_agree_with_the_reference_and_never_raise(text, hdrs) -> None:
    try:
        ast = parse(text)
    except InvalidSelector:
        return  # e.g. an escape character at the end of a LIKE pattern
    selects = compile_filter(text)
    message = Message(headers=hdrs)
    assert selects(message) is (ref_truth(ast, hdrs) is True)


@settings(max_examples=500, deadline=200)
@given(
    st.text(alphabet=st.sampled_from(list("ab 01'()=<>!.%_-+*/,xAND OR NOT IN LIKE")), max_size=40)
)
def test_arbitrary_text_parses_or_raises_invalid_selector(text: str) -> None:
    try:
        compile_filter(text)
    except InvalidSelector as error:
        assert error.column is None or 1 <= error.column <= len(text) + 1


@settings(max_examples=300, deadline=200)
@given(st.text(max_size=60))
def test_any_unicode_text_parses_or_raises_invalid_selector(text: str) -> None:
    try:
        compile_filter(text)
    except InvalidSelector:
        pass
