"""The filter language: JMS / SQL-92 message selectors, parsed once, compiled to closures.

Theory of operation: `compile_filter(text)` parses the expression with a lark LALR grammar
(filter_grammar.lark, driven by filter_parser.py) into an AST of frozen dataclasses
(filter_ast.py, where its shape is documented), then compiles the AST into Python functions
bound to each other: a leaf predicate (`header op literal`, IN, LIKE, BETWEEN) becomes one
small generated function that reads the header and tests it inline, and AND/OR become one
flat generated function over their operands. Evaluating a filter is then calls of those
functions only: no parsing, no tree walk, no lookups by name.

Values and truth follow SQL three-valued logic as the JMS specification defines it. A value
is a str, int, float, bool or NULL (Python None); a condition is TRUE, FALSE or UNKNOWN
(True, False, None). A missing header is NULL; any comparison or arithmetic with NULL is
UNKNOWN/NULL; `NOT UNKNOWN` is UNKNOWN; `FALSE AND UNKNOWN` is FALSE; `TRUE OR UNKNOWN` is
TRUE; a selector selects only when the whole expression is TRUE.

Kinds: values of different kinds (string, number, boolean) never compare: the comparison is
UNKNOWN, never an error and never a coercion; integers and floats compare numerically (and
`bool` is not a number here, although Python says it is an int). Strings and booleans only
know `=` and `<>`; ordering them is UNKNOWN. `x IN (a, b)` is `x = a OR x = b`;
`x BETWEEN a AND b` is `x >= a AND x <= b`. Arithmetic follows Java: int op int is an int
(`/` truncates toward zero, `%` takes the dividend's sign), anything with a float is a float,
and division or remainder by zero is NULL, as is arithmetic on a non-number. `LIKE` on a
non-string is UNKNOWN; `IS NULL` is never UNKNOWN. Where the kinds are visible in the text
(`'a' < 'b'`), the parser refuses the expression instead (filter_parser.py).

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
`"x-reason" = 'overflow'`, as Artemis allows.

Generated source is made from fixed templates only: header names and literals never enter
it; they are bound as globals of the generated function.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from engine import filter_ast
from engine.filter_ast import is_number
from engine.filter_parser import MAX_DEPTH, MAX_LENGTH, parse
from engine.message import Message

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "Filter",
    "compile_filter",
    "like_matcher",
    "parse",
]

Value = str | int | float | bool | None
Getter = Callable[[Message], Value]
Condition = Callable[[Message], bool | None]

_NUMBER_TEST = "(v.__class__ is int or v.__class__ is float)"


def _generate(source: str, namespace: dict[str, Any]) -> Any:
    """The function `f` defined by `source`, a fixed template; values come via namespace."""
    exec(source, namespace)
    return namespace["f"]


# -- reading values -------------------------------------------------------------------------
def _header_name(identifier: str) -> str:
    return {"JMSType": "type", "JMSCorrelationID": "correlation_id"}.get(identifier, identifier)


_ENVELOPE: dict[str, tuple[str, dict[str, Any]]] = {
    "address": ("m.address", {}),
    "mid": ("m.mid", {}),
    "JMSMessageID": ("m.mid", {}),
    "timestamp": ("m.timestamp", {}),
    "JMSTimestamp": ("(None if m.timestamp is None else int(m.timestamp * 1000))", {}),
    "JMSPriority": ("m.headers.get('priority', 4)", {}),
    "JMSDeliveryMode": ("m.headers.get('delivery_mode', 'PERSISTENT')", {}),
}


def _read(node: filter_ast.Node, name: str = "get") -> tuple[str, dict[str, Any]]:
    """Source that reads the value of `node` from message `m`, and the globals it needs:
    a header or envelope field is read inline, anything else through a compiled getter."""
    if isinstance(node, filter_ast.Identifier):
        if node.name in _ENVELOPE:
            source, needs = _ENVELOPE[node.name]
            return source, dict(needs)
        return f"m.headers.get({name})", {name: _header_name(node.name)}
    if isinstance(node, filter_ast.Literal):
        return name, {name: node.value}
    return f"{name}(m)", {name: _value(node)}


def _value(node: filter_ast.Node) -> Getter:
    if isinstance(node, filter_ast.Literal):
        constant = node.value
        return lambda m: constant
    if isinstance(node, filter_ast.Identifier):
        read, namespace = _read(node)
        return _generate(f"def f(m):\n    return {read}\n", namespace)
    if isinstance(node, filter_ast.Negate):
        read, namespace = _read(node.operand)
        return _generate(
            f"def f(m):\n    v = {read}\n    return -v if {_NUMBER_TEST} else None\n", namespace
        )
    if isinstance(node, filter_ast.Arithmetic):
        return _arithmetic(node)
    condition = _condition(node)  # a condition as a value: TRUE/FALSE/UNKNOWN are bool/None
    return condition


def _divide(a: int | float, b: int | float) -> int | float:
    if a.__class__ is int and b.__class__ is int:
        quotient = abs(a) // abs(b)
        return quotient if (a >= 0) == (b > 0) else -quotient
    return a / b


def _remainder(a: int | float, b: int | float) -> int | float:
    if a.__class__ is int and b.__class__ is int:
        rest = abs(a) % abs(b)
        return rest if a >= 0 else -rest
    try:
        return math.fmod(a, b)
    except ValueError:  # an infinite dividend: Java gives NaN
        return math.nan


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _arithmetic(node: filter_ast.Arithmetic) -> Getter:
    """`left op right` on numbers; NULL for anything else and for a zero divisor."""
    left, left_globals = _read(node.left, "left")
    right, right_globals = _read(node.right, "right")
    namespace = {**left_globals, **right_globals}
    if node.op in ("/", "%"):
        namespace["function"] = _divide if node.op == "/" else _remainder
        result = "function(a, b) if b else None"  # 0 and 0.0 are false; bools never get here
    else:
        result = f"a {node.op} b"
    a_number = _NUMBER_TEST.replace("v.", "a.")
    b_number = _NUMBER_TEST.replace("v.", "b.")
    if isinstance(node.right, filter_ast.Literal) and is_number(node.right.value):
        b_number = "True"
    source = (
        "def f(m):\n"
        f"    a = {left}\n"
        f"    if {a_number}:\n"
        f"        b = {right}\n"
        f"        if {b_number}:\n"
        f"            return {result}\n"
        "    return None\n"
    )
    return _generate(source, namespace)


# -- comparisons ----------------------------------------------------------------------------
_ORDERING = {"<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}
_PYTHON_OPERATORS = {"=": "==", "<>": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">="}
_MIRRORED = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


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


def _compare(node: filter_ast.Compare) -> Condition:
    op, left, right = node.op, node.left, node.right
    # Specialise `value op literal`, the overwhelmingly common shape.
    if isinstance(right, filter_ast.Literal) and not isinstance(left, filter_ast.Literal):
        return _compare_to_literal(op, left, right.value)
    if isinstance(left, filter_ast.Literal) and not isinstance(right, filter_ast.Literal):
        return _compare_to_literal(_MIRRORED.get(op, op), right, left.value)
    get_left, get_right = _value(left), _value(right)
    return lambda m: _compare_values(op, get_left(m), get_right(m))


def _compare_to_literal(op: str, value: filter_ast.Node, constant: object) -> Condition:
    """`value op constant` as one generated function: read, kind test, compare."""
    if not is_number(constant) and op not in ("=", "<>"):
        return lambda m: None  # strings and booleans only know = and <>
    read, namespace = _read(value)
    kind_test = _NUMBER_TEST if is_number(constant) else "v.__class__ is kind"
    source = (
        "def f(m):\n"
        f"    v = {read}\n"
        f"    if {kind_test}:\n"
        f"        return v {_PYTHON_OPERATORS[op]} constant\n"
        "    return None\n"
    )
    return _generate(source, {**namespace, "constant": constant, "kind": constant.__class__})


# -- AND, OR, NOT ---------------------------------------------------------------------------
def _junction(parts: list[Condition], decisive: bool) -> Condition:
    """AND (decisive=False) or OR (decisive=True) over any number of parts in 3VL: the
    decisive value wins at once; otherwise UNKNOWN if any part was, else the other value.
    Generated flat (no loop, no nesting), so a chain of 1,000 ORs is one function."""
    lines = ["def f(m):", "    unknown = False"]
    for index in range(len(parts)):
        lines += [
            f"    r = p{index}(m)",
            f"    if r is {decisive}:",
            f"        return {decisive}",
            "    if r is None:",
            "        unknown = True",
        ]
    lines.append(f"    return None if unknown else {not decisive}")
    namespace = {f"p{index}": part for index, part in enumerate(parts)}
    return _generate("\n".join(lines) + "\n", namespace)


def _negated(condition: Condition) -> Condition:
    def negate(m: Message) -> bool | None:
        result = condition(m)
        return None if result is None else not result

    return negate


# -- predicates -----------------------------------------------------------------------------
def _between(node: filter_ast.Between) -> Condition:
    if not all(
        isinstance(b, filter_ast.Literal) and is_number(b.value) for b in (node.low, node.high)
    ):
        get, low, high = _value(node.value), _value(node.low), _value(node.high)

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
    read, namespace = _read(node.value)
    test = "not low <= v <= high" if node.negated else "low <= v <= high"
    source = f"def f(m):\n    v = {read}\n    if {_NUMBER_TEST}:\n        return {test}\n"
    namespace.update(low=node.low.value, high=node.high.value)  # type: ignore[union-attr]
    return _generate(source + "    return None\n", namespace)


def _in(node: filter_ast.In) -> Condition:
    """`x IN (a, b, ...)` is `x = a OR x = b ...`: TRUE on a match of the same kind; FALSE
    when every option has x's kind and none matched; else UNKNOWN (an option of another
    kind compares UNKNOWN). NOT IN negates that in 3VL."""
    options = [option.value for option in node.options]
    kinds = {
        "strings": frozenset(v for v in options if v.__class__ is str),
        "numbers": frozenset(v for v in options if is_number(v)),
        "booleans": frozenset(v for v in options if v.__class__ is bool),
    }
    found, missed = (False, True) if node.negated else (True, False)

    def miss(kind: str) -> bool | None:
        return missed if all(_kind_name(v) == kind for v in options) else None

    read, namespace = _read(node.value)
    source = (
        "def f(m):\n"
        f"    v = {read}\n"
        "    if v.__class__ is str:\n"
        "        return found if v in strings else strings_miss\n"
        f"    if {_NUMBER_TEST}:\n"
        "        return found if v in numbers else numbers_miss\n"
        "    if v.__class__ is bool:\n"
        "        return found if v in booleans else booleans_miss\n"
        "    return None\n"
    )
    namespace.update(kinds, found=found)
    namespace.update({f"{kind}_miss": miss(kind) for kind in kinds})
    return _generate(source, namespace)


def _kind_name(value: object) -> str:
    if value.__class__ is str:
        return "strings"
    return "booleans" if value.__class__ is bool else "numbers"


def like_matcher(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """A function telling whether a string matches a LIKE pattern: `%` any run, `_` one
    character, everything else literal (`.`, `*`, `(` included). The escape character makes
    a following `%`, `_` or escape character literal; anywhere else it stands for itself,
    as in Artemis (a trailing escape character is literal).

    No backtracking regex: the pattern is cut at its `%`s into fixed-length pieces; the
    first must start the string, the last must end it, and each middle piece is found
    leftmost after the one before, so time stays linear however many `%`s there are."""
    pieces: list[list[str | None]] = [[]]  # characters; None for `_`
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == escape and index + 1 < end and pattern[index + 1] in ("%", "_", escape):
            pieces[-1].append(pattern[index + 1])
            index += 2
            continue
        if char == "%":
            pieces.append([])
        else:
            pieces[-1].append(None if char == "_" else char)
        index += 1
    if len(pieces) == 1:
        if None not in pieces[0]:
            text = "".join(pieces[0])  # type: ignore[arg-type]
            return lambda v: v == text
        fullmatch = _piece_regex(pieces[0]).fullmatch
        return lambda v: fullmatch(v) is not None
    first, last = pieces[0], pieces[-1]
    middles = [piece for piece in pieces[1:-1] if piece]
    minimum = sum(len(piece) for piece in pieces)
    if all(None not in piece for piece in pieces):  # literal pieces: plain string methods
        prefix, suffix = "".join(first), "".join(last)  # type: ignore[arg-type]
        if not middles:
            return lambda v: len(v) >= minimum and v.startswith(prefix) and v.endswith(suffix)
        if len(middles) == 1 and not prefix and not suffix:
            middle = "".join(middles[0])  # type: ignore[arg-type]
            return lambda v: middle in v
    match_first = _piece_regex(first).match
    match_last = _piece_regex(last).match
    searches = [(_piece_regex(piece).search, len(piece)) for piece in middles]
    size_first, size_last = len(first), len(last)

    def like(v: str) -> bool:
        if len(v) < minimum or match_first(v) is None:
            return False
        stop = len(v) - size_last
        if match_last(v, stop) is None:
            return False
        position = size_first
        for search, size in searches:
            found = search(v, position, stop)
            if found is None:
                return False
            position = found.start() + size
        return True

    return like


def _piece_regex(piece: list[str | None]) -> re.Pattern[str]:
    return re.compile("".join("." if c is None else re.escape(c) for c in piece), re.DOTALL)


def _like(node: filter_ast.Like) -> Condition:
    read, namespace = _read(node.value)
    test = "not like(v)" if node.negated else "like(v)"
    source = f"def f(m):\n    v = {read}\n    return {test} if v.__class__ is str else None\n"
    return _generate(source, {**namespace, "like": like_matcher(node.pattern, node.escape)})


def _is_null(node: filter_ast.IsNull) -> Condition:
    read, namespace = _read(node.value)
    test = "is not None" if node.negated else "is None"
    return _generate(f"def f(m):\n    return {read} {test}\n", namespace)


def _condition(node: filter_ast.Node) -> Condition:
    if isinstance(node, filter_ast.Compare):
        return _compare(node)
    if isinstance(node, filter_ast.And):
        return _junction([_condition(part) for part in node.operands], decisive=False)
    if isinstance(node, filter_ast.Or):
        return _junction([_condition(part) for part in node.operands], decisive=True)
    if isinstance(node, filter_ast.Not):
        return _negated(_condition(node.operand))
    if isinstance(node, filter_ast.Between):
        return _between(node)
    if isinstance(node, filter_ast.In):
        return _in(node)
    if isinstance(node, filter_ast.Like):
        return _like(node)
    if isinstance(node, filter_ast.IsNull):
        return _is_null(node)
    # a bare value as a condition: only a boolean is TRUE or FALSE
    read, namespace = _read(node)
    return _generate(
        f"def f(m):\n    v = {read}\n    return v if v.__class__ is bool else None\n", namespace
    )


Filter = Callable[[Message], bool]
"""A compiled expression: `f(message)` is True only when the expression is TRUE. It also
carries `f.expression` (the text) and `f.ast` (the root node)."""


def compile_filter(expression: str) -> Filter:
    """Parse and compile `expression`; the result selects a message only when TRUE.
    Raises InvalidSelector (with `column`) when the expression is not valid."""
    ast = parse(expression)
    condition = _condition(ast)

    def selects(message: Message) -> bool:
        try:
            return condition(message) is True
        except (ArithmeticError, ValueError, TypeError):
            # e.g. a header integer too large to mix with a float: the result is UNKNOWN,
            # which does not select; routing must never fail on a message's contents
            return False

    def truth(message: Message) -> bool | None:
        """TRUE, FALSE or UNKNOWN (None): for explaining why a filter did not select."""
        try:
            return condition(message)
        except (ArithmeticError, ValueError, TypeError):
            return None

    selects.expression = expression  # type: ignore[attr-defined]
    selects.ast = ast  # type: ignore[attr-defined]
    selects.truth = truth  # type: ignore[attr-defined]
    return selects
