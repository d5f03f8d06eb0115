"""The filter language: JMS / SQL-92 message selectors, parsed once, compiled to closures.

Theory of operation: `compile_filter(text)` parses the expression with a lark LALR grammar
(filter_grammar.lark) into an AST of frozen dataclasses, checks its size and depth, and
compiles the AST into nested Python closures. Evaluating a filter on a message is then
calls of those closures only: no parsing, no tree walk, no name lookups by string.

Values and truth follow SQL three-valued logic exactly as JMS brokers (ActiveMQ, Artemis,
Qpid) do. A value is a str, int, float, bool or NULL (Python None); a condition is TRUE,
FALSE or UNKNOWN (True, False, None). A missing header is NULL; any comparison or
arithmetic with NULL is UNKNOWN/NULL; `NOT UNKNOWN` is UNKNOWN; `FALSE AND UNKNOWN` is FALSE;
`TRUE OR UNKNOWN` is TRUE; a selector selects only when the whole expression is TRUE.
Comparing values of different kinds (a string with a number, a boolean with a number) is
UNKNOWN, never an error and never a coercion; integers and floats compare numerically.
Strings and booleans only support `=` and `<>`: ordering them is UNKNOWN. Arithmetic follows
Java's numeric promotion (int / int truncates toward zero); division by zero is NULL.
`LIKE` on a non-string is UNKNOWN; `IS NULL` is never UNKNOWN.

Identifiers are case-sensitive header names, except these, which read the envelope:

    address          Message.address
    mid              Message.mid
    timestamp        Message.timestamp (float seconds)
    JMSMessageID     Message.mid
    JMSTimestamp     Message.timestamp in integer milliseconds
    JMSPriority      header `priority` (4 when missing, as in JMS)
    JMSType          header `type`
    JMSCorrelationID header `correlation_id`
    JMSDeliveryMode  header `delivery_mode` ('PERSISTENT' when missing)

A header whose name is not a plain identifier (`x-reason`) can be written in double quotes:
`"x-reason" = 'overflow'` (an extension; JMS has no quoted identifiers).

The grammar and parser live in filter_parser.py (with filter_grammar.lark), the AST in
filter_ast.py; this module compiles ASTs and re-exports both.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from engine.filter_ast import (
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
    Node,
    Not,
    Or,
    is_number,
    like_regex,
)
from engine.filter_parser import MAX_DEPTH, MAX_LENGTH, parse
from engine.message import Message

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "And",
    "Arithmetic",
    "Between",
    "Compare",
    "Filter",
    "Identifier",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Negate",
    "Node",
    "Not",
    "Or",
    "compile_filter",
    "parse",
]

Value = str | int | float | bool | None

Getter = Callable[[Message], Value]
Condition = Callable[[Message], bool | None]


# identifiers that do not simply read the header of that name
_ENVELOPE_NAMES = frozenset(
    {
        "address",
        "mid",
        "timestamp",
        "JMSMessageID",
        "JMSTimestamp",
        "JMSPriority",
        "JMSDeliveryMode",
    }
)


def _identifier_getter(name: str) -> Getter:
    if name == "address":
        return operator.attrgetter("address")
    if name in ("mid", "JMSMessageID"):
        return operator.attrgetter("mid")
    if name == "timestamp":
        return operator.attrgetter("timestamp")
    if name == "JMSTimestamp":
        return lambda m: None if m.timestamp is None else int(m.timestamp * 1000)
    if name == "JMSPriority":
        return lambda m: m.headers.get("priority", 4)
    if name == "JMSDeliveryMode":
        return lambda m: m.headers.get("delivery_mode", "PERSISTENT")
    header = _header_name(name)
    return lambda m: m.headers.get(header)


def _header_name(identifier: str) -> str:
    return {"JMSType": "type", "JMSCorrelationID": "correlation_id"}.get(identifier, identifier)


def _value(node: Node) -> Getter:
    if isinstance(node, Literal):
        constant = node.value
        return lambda m: constant
    if isinstance(node, Identifier):
        return _identifier_getter(node.name)
    if isinstance(node, Negate):
        inner = _value(node.operand)

        def negate(m: Message) -> Value:
            v = inner(m)
            return -v if v.__class__ is int or v.__class__ is float else None  # type: ignore

        return negate
    if isinstance(node, Arithmetic):
        return _arithmetic(node.op, _value(node.left), _value(node.right), node.right)
    condition = _condition(node)
    return condition  # a condition used as a value: TRUE/FALSE/UNKNOWN are bool/None


def _arithmetic(op: str, left: Getter, right: Getter, right_node: Node) -> Getter:
    if op == "/":

        def divide(m: Message) -> Value:
            a, b = left(m), right(m)
            if not (is_number(a) and is_number(b)) or b == 0:
                return None
            if a.__class__ is int and b.__class__ is int:
                quotient = abs(a) // abs(b)  # type: ignore[operator]
                return quotient if (a >= 0) == (b > 0) else -quotient  # type: ignore[operator]
            return a / b  # type: ignore[operator]

        return divide
    function = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    if isinstance(right_node, Literal) and is_number(right_node.value):
        constant = right_node.value

        def with_constant(m: Message) -> Value:
            a = left(m)
            if a.__class__ is int or a.__class__ is float:
                return function(a, constant)
            return None

        return with_constant

    def arithmetic(m: Message) -> Value:
        a, b = left(m), right(m)
        if is_number(a) and is_number(b):
            return function(a, b)
        return None

    return arithmetic


_ORDERING = {
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}


def _compare_values(op: str, a: Value, b: Value) -> bool | None:
    """The 3VL comparison of two runtime values (the general, unspecialised case)."""
    if a is None or b is None:
        return None
    a_number, b_number = is_number(a), is_number(b)
    if a_number and b_number:
        if op == "=":
            return a == b
        if op == "<>":
            return a != b
        return _ORDERING[op](a, b)
    if a_number or b_number or a.__class__ is not b.__class__:
        return None  # a string or boolean against anything else
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    return None  # strings and booleans only know = and <>


def _compare(node: Compare) -> Condition:
    op = node.op
    left, right = node.left, node.right
    # Specialise `value op literal`, the overwhelmingly common shape.
    if isinstance(right, Literal) and not isinstance(left, Literal):
        return _compare_to_literal(op, left, right.value)
    if isinstance(left, Literal) and not isinstance(right, Literal):
        mirrored = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        return _compare_to_literal(mirrored, right, left.value)
    get_left, get_right = _value(left), _value(right)
    return lambda m: _compare_values(op, get_left(m), get_right(m))


_PYTHON_OPERATORS = {"=": "==", "<>": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">="}


def _compare_to_literal(op: str, value: Node, constant: object) -> Condition:
    """`value op constant`, generated as one small function so the type test, the header
    read and the comparison run without further calls. Only the operator (from a fixed
    table) is spliced into the source; the values are bound as globals."""
    if not is_number(constant) and op not in ("=", "<>"):
        return lambda m: None  # strings and booleans only know = and <>
    if isinstance(value, Identifier) and value.name not in _ENVELOPE_NAMES:
        read = "m.headers.get(header)"
        header = _header_name(value.name)
    else:
        read = "get(m)"
        header = None
    if is_number(constant):
        kind_test = "v.__class__ is int or v.__class__ is float"
    else:
        kind_test = "v.__class__ is kind"
    source = (
        "def compare(m):\n"
        f"    v = {read}\n"
        f"    if {kind_test}:\n"
        f"        return v {_PYTHON_OPERATORS[op]} constant\n"
        "    return None\n"
    )
    namespace: dict[str, Any] = {
        "get": _value(value),
        "header": header,
        "constant": constant,
        "kind": constant.__class__,
    }
    exec(source, namespace)  # a fixed template: no user text reaches the source
    return namespace["compare"]


def _and(parts: list[Condition]) -> Condition:
    if len(parts) == 2:
        first, second = parts

        def and2(m: Message) -> bool | None:
            a = first(m)
            if a is False:
                return False
            b = second(m)
            if b is False:
                return False
            return True if a is True and b is True else None

        return and2

    return _junction(parts, decisive=False)


def _or(parts: list[Condition]) -> Condition:
    return _junction(parts, decisive=True)


def _junction(parts: list[Condition], decisive: bool) -> Condition:
    """AND (decisive=False) or OR (decisive=True) over any number of parts in 3VL: the
    decisive value wins at once; otherwise UNKNOWN if any part was, else the other value."""

    def junction(m: Message) -> bool | None:
        unknown = False
        for part in parts:
            result = part(m)
            if result is decisive:
                return decisive
            if result is None:
                unknown = True
        return None if unknown else not decisive

    return junction


def _negated(condition: Condition) -> Condition:
    def negate(m: Message) -> bool | None:
        result = condition(m)
        return None if result is None else not result

    return negate


def _condition(node: Node) -> Condition:
    if isinstance(node, Compare):
        return _compare(node)
    if isinstance(node, And):
        return _and([_condition(part) for part in node.operands])
    if isinstance(node, Or):
        return _or([_condition(part) for part in node.operands])
    if isinstance(node, Not):
        return _negated(_condition(node.operand))
    if isinstance(node, Between):
        get = _value(node.value)
        bounds = (node.low, node.high)
        if all(isinstance(b, Literal) and is_number(b.value) for b in bounds):
            low_value, high_value = node.low.value, node.high.value  # type: ignore[union-attr]

            def between_numbers(m: Message) -> bool | None:
                v = get(m)
                if v.__class__ is int or v.__class__ is float:
                    return low_value <= v <= high_value  # type: ignore[operator]
                return None

            return _negated(between_numbers) if node.negated else between_numbers
        low, high = _value(node.low), _value(node.high)

        def between(m: Message) -> bool | None:
            v = get(m)
            above = _compare_values(">=", v, low(m))
            if above is False:
                return False
            below = _compare_values("<=", v, high(m))
            if below is False:
                return False
            return True if above and below else None

        return _negated(between) if node.negated else between
    if isinstance(node, In):
        get = _value(node.value)
        values = [option.value for option in node.options]
        strings = frozenset(v for v in values if v.__class__ is str)
        numbers = frozenset(v for v in values if is_number(v))

        def within(m: Message) -> bool | None:
            v = get(m)
            if v.__class__ is str:
                return v in strings
            if v.__class__ is int or v.__class__ is float:
                return v in numbers
            return None

        return _negated(within) if node.negated else within
    if isinstance(node, Like):
        get = _value(node.value)
        matcher = like_regex(node.pattern, node.escape).fullmatch

        def like(m: Message) -> bool | None:
            v = get(m)
            if v.__class__ is not str:
                return None
            return matcher(v) is not None  # type: ignore[arg-type]

        return _negated(like) if node.negated else like
    if isinstance(node, IsNull):
        get = _value(node.value)
        if node.negated:
            return lambda m: get(m) is not None
        return lambda m: get(m) is None
    # a bare value as a condition: only a boolean is TRUE or FALSE
    get = _value(node)

    def truth(m: Message) -> bool | None:
        v = get(m)
        return v if v.__class__ is bool else None

    return truth


Filter = Callable[[Message], bool]
"""A compiled expression: `f(message)` is True only when the expression is TRUE. It also
carries `f.expression` (the text) and `f.ast` (the root node)."""


def compile_filter(expression: str) -> Filter:
    """Parse and compile `expression`; the result selects a message only when TRUE."""
    ast = parse(expression)
    condition = _condition(ast)

    def selects(message: Message) -> bool:
        try:
            return condition(message) is True
        except (ArithmeticError, ValueError, TypeError):
            # e.g. a header integer too large to mix with a float: the result is UNKNOWN,
            # which does not select; routing must never fail on a message's contents
            return False

    selects.expression = expression  # type: ignore[attr-defined]
    selects.ast = ast  # type: ignore[attr-defined]
    return selects
