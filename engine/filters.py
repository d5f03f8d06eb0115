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

The AST (stable; the Spark pipeline translates it and the console renders it):

    Literal(value)                         str | int | float | bool
    Identifier(name)                       as written (JMS names not yet mapped)
    Negate(operand)                        unary minus
    Arithmetic(op, left, right)            op in "+ - * /"
    Compare(op, left, right)               op in "= <> < > <= >="
    And(operands), Or(operands)            n-ary, flattened, at least two operands
    Not(operand)
    Between(value, low, high, negated)
    In(value, options, negated)            options: tuple of Literal
    Like(value, pattern, escape, negated)  pattern and escape: str (escape may be None)
    IsNull(value, negated)

Limits: an expression is at most 10 KiB and nests at most 100 levels; beyond, and on any
syntax error, `InvalidSelector` is raised with a short message and the 1-based column.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from engine.errors import InvalidSelector
from engine.message import Message

MAX_LENGTH = 10 * 1024
MAX_DEPTH = 100

Value = str | int | float | bool | None


# == AST =======================================================================================
@dataclass(frozen=True, slots=True)
class Literal:
    value: str | int | float | bool


@dataclass(frozen=True, slots=True)
class Identifier:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Arithmetic:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class Between:
    value: Node
    low: Node
    high: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    value: Node
    options: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    value: Node
    pattern: str
    escape: str | None = None
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    value: Node
    negated: bool = False


Node = (
    Literal
    | Identifier
    | Negate
    | Arithmetic
    | Compare
    | And
    | Or
    | Not
    | Between
    | In
    | Like
    | IsNull
)
CONDITIONS = (Compare, And, Or, Not, Between, In, Like, IsNull)


# == parsing ===================================================================================
class _Deep(Exception):
    """Raised from inside the parser when the tree passes MAX_DEPTH."""


class _ToAst:
    """Builds AST nodes from parse-tree nodes, one rule at a time (driven bottom-up by
    `_build`). Depth is tracked in a side table keyed by node identity."""

    def __init__(self) -> None:
        self.depth: dict[int, int] = {}
        self.columns: dict[int, int] = {}  # where string literals start

    def _node(self, node: Any, *children: Any) -> Any:
        depth = 1 + max((self.depth.get(id(c), 1) for c in children), default=0)
        if depth > MAX_DEPTH:
            raise _Deep()
        self.depth[id(node)] = depth
        return node

    def _flat(self, node: Any, chain: Any, extra: Any) -> Any:
        depth = max(self.depth.get(id(chain), 1), 1 + self.depth.get(id(extra), 1))
        if depth > MAX_DEPTH:
            raise _Deep()
        self.depth[id(node)] = depth
        return node

    # values
    def string(self, token: Token) -> Literal:
        literal = self._node(Literal(_unquote(token)))
        self.columns[id(literal)] = token.column
        return literal

    def number(self, token: Token) -> Literal:
        value = _number(token)
        if value.__class__ is int and not -(2**63) <= value < 2**63:
            raise InvalidSelector(
                f"integer {str(token)[:20]} at column {token.column} does not fit in 64 bits",
                token.column,
            )
        return self._node(Literal(value))

    def true(self, _: Token) -> Literal:
        return self._node(Literal(True))

    def false(self, _: Token) -> Literal:
        return self._node(Literal(False))

    def identifier(self, token: Token) -> Identifier:
        name = str(token)
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        return self._node(Identifier(name))

    def primary(self, items: list) -> Node:
        inner = items[1]  # ( expression ): parentheses count as a level of nesting
        depth = self.depth.get(id(inner), 1) + 1
        if depth > MAX_DEPTH:
            raise _Deep()
        self.depth[id(inner)] = depth
        return inner

    def sign(self, items: list) -> Node:
        op, operand = items
        if op == "+":
            return operand
        if isinstance(operand, Literal) and _is_number(operand.value):
            return self._node(Literal(-operand.value), operand)  # type: ignore[operator]
        return self._node(Negate(operand), operand)

    def arith(self, items: list) -> Node:
        left, op, right = items
        return self._node(Arithmetic(str(op), left, right), left, right)

    def compare(self, items: list) -> Node:
        left, op, right = items
        op_text = "<>" if str(op) == "!=" else str(op)
        return self._node(Compare(op_text, left, right), left, right)

    # conditions
    def or_(self, items: list) -> Node:
        left, _, right = items
        if isinstance(left, Or):  # flatten: a chain of ORs is one level deep
            return self._flat(Or((*left.operands, right)), left, right)
        return self._node(Or((left, right)), left, right)

    def and_(self, items: list) -> Node:
        left, _, right = items
        if isinstance(left, And):  # flatten: a chain of ANDs is one level deep
            return self._flat(And((*left.operands, right)), left, right)
        return self._node(And((left, right)), left, right)

    def not_(self, items: list) -> Node:
        operand = items[1]
        return self._node(Not(operand), operand)

    def between(self, items: list) -> Node:
        value, negated, low, high = items[0], _has_not(items), items[-3], items[-1]
        return self._node(Between(value, low, high, negated), value, low, high)

    def in_(self, items: list) -> Node:
        value = items[0]
        options = tuple(item for item in items[1:] if isinstance(item, Literal))
        return self._node(In(value, options, _has_not(items)), value)

    def like(self, items: list) -> Node:
        value = items[0]
        strings = [item for item in items[1:] if isinstance(item, Literal)]
        pattern = strings[0].value
        escape = strings[1].value if len(strings) > 1 else None
        if escape is not None and len(escape) != 1:  # type: ignore[arg-type]
            column = self.columns.get(id(strings[1]))
            raise InvalidSelector(
                f"ESCAPE must be one character, not {escape!r} (column {column})", column
            )
        try:
            _like_regex(pattern, escape)  # type: ignore[arg-type]
        except InvalidSelector as error:
            column = self.columns.get(id(strings[0]))
            raise InvalidSelector(f"{error} (column {column})", column) from None
        return self._node(Like(value, pattern, escape, _has_not(items)), value)  # type: ignore

    def is_null(self, items: list) -> Node:
        return self._node(IsNull(items[0], _has_not(items)), items[0])


def _has_not(items: list) -> bool:
    return any(isinstance(item, Token) and item.type == "NOT" for item in items)


def _unquote(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _number(token: Token) -> int | float:
    text = str(token)
    lowered = text.lower()
    if lowered.startswith("0x"):
        return int(text[2:], 16)
    if "." in text or "e" in lowered:
        return float(text)
    if len(text) > 1 and text.startswith("0"):
        return int(text[1:], 8)
    return int(text)


@cache
def _parser() -> Lark:
    grammar = (Path(__file__).parent / "filter_grammar.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="basic", maybe_placeholders=False)


_TERMINAL_NAMES = {
    "STRING": "a string",
    "NUMBER": "a number",
    "IDENTIFIER": "a header name",
    "QUOTED_IDENTIFIER": "a header name",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "COMP_OP": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*' or '/'",
    "$END": "the end",
}
_VALUE_STARTS = {"STRING", "NUMBER", "IDENTIFIER", "QUOTED_IDENTIFIER", "LPAR", "TRUE", "FALSE"}
_VALUE_ENDS = {
    "STRING",
    "NUMBER",
    "IDENTIFIER",
    "QUOTED_IDENTIFIER",
    "RPAR",
    "TRUE",
    "FALSE",
    "NULL",
}


def _describe_token(token: Token) -> str:
    if token.type == "$END":
        return "the end of the expression"
    return repr(str(token))


def _token_before(text: str, position: int) -> Token | None:
    """The last token that ends at or before `position` (lexing succeeded that far)."""
    previous = None
    try:
        for token in _parser().lex(text[:position]):
            previous = token
    except UnexpectedInput:
        return None
    return previous


def _syntax_error(text: str, error: UnexpectedInput) -> InvalidSelector:
    if isinstance(error, UnexpectedCharacters):
        column = error.column
        char = text[error.pos_in_stream] if error.pos_in_stream < len(text) else ""
        if char == "'":
            return InvalidSelector(f"unterminated string starting at column {column}", column)
        return InvalidSelector(f"unexpected character {char!r} at column {column}", column)
    assert isinstance(error, UnexpectedToken)
    token = error.token
    at_end = token.type == "$END"
    column = len(text) + 1 if at_end else token.column
    expected = set(error.expected)
    previous = _token_before(text, len(text) if at_end else token.start_pos)
    where = "at the end" if at_end else f"at column {column}"
    if expected & _VALUE_STARTS and previous is not None and previous.type not in _VALUE_ENDS:
        what = "a string" if expected == {"STRING"} else "a value"
        return InvalidSelector(f"expected {what} after {str(previous)!r} {where}", column)
    if expected == {"RPAR"} or (at_end and "RPAR" in expected):
        return InvalidSelector(f"missing ')' {where}", column)
    names = sorted({_TERMINAL_NAMES.get(name, name.upper()) for name in expected})
    hint = f"; expected {', '.join(names[:6])}" if names else ""
    if at_end:
        return InvalidSelector(f"the expression ends too early{hint}", column)
    return InvalidSelector(f"unexpected {_describe_token(token)} at column {column}{hint}", column)


def parse(text: str) -> Node:
    """The AST of a selector expression; InvalidSelector (with column) if it is not one."""
    if not isinstance(text, str):
        raise InvalidSelector(f"a filter expression must be a string, not {type(text).__name__}")
    if len(text.encode("utf-8")) > MAX_LENGTH:
        raise InvalidSelector(f"the expression is longer than {MAX_LENGTH // 1024} KiB")
    if not text.strip():
        raise InvalidSelector("the expression is empty", 1)
    parser = _parser()
    try:
        tree = parser.parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    builder = _ToAst()
    try:
        node = _build(builder, tree)
    except _Deep:
        raise InvalidSelector(f"the expression nests deeper than {MAX_DEPTH} levels") from None
    is_boolean = isinstance(node, Literal) and isinstance(node.value, bool)
    if not isinstance(node, (*CONDITIONS, Identifier)) and not is_boolean:
        raise InvalidSelector(
            "the expression must be a condition (a comparison, LIKE, IN, BETWEEN, IS NULL, "
            "TRUE/FALSE or a boolean header)",
            1,
        )
    return node


def _build(builder: _ToAst, tree: Any) -> Node:
    """Transform the parse tree bottom-up without recursion (trees can be 2,000 deep)."""
    stack: list[tuple[Any, bool]] = [(tree, False)]
    results: list[Any] = []
    while stack:
        item, expanded = stack.pop()
        if not isinstance(item, Tree):
            results.append(item)
            continue
        if not expanded:
            stack.append((item, True))
            for child in reversed(item.children):
                stack.append((child, False))
            continue
        count = len(item.children)
        children = results[len(results) - count :] if count else []
        del results[len(results) - count :]
        results.append(_apply(builder, item.data, children))
    return results[0]


def _apply(builder: _ToAst, rule: str, children: list) -> Any:
    if rule == "start":
        return children[0]
    method = getattr(builder, str(rule))
    if rule in ("string", "number", "true", "false", "identifier"):
        return method(children[0])
    return method(children)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, And | Or):
        return node.operands
    if isinstance(node, Arithmetic | Compare):
        return (node.left, node.right)
    if isinstance(node, Negate | Not):
        return (node.operand,)
    if isinstance(node, Between):
        return (node.value, node.low, node.high)
    if isinstance(node, In | Like | IsNull):
        return (node.value,)
    return ()


# == compilation ===============================================================================
Getter = Callable[[Message], Value]
Condition = Callable[[Message], bool | None]


def _is_number(value: object) -> bool:
    return value.__class__ is int or value.__class__ is float


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
            if not (_is_number(a) and _is_number(b)) or b == 0:
                return None
            if a.__class__ is int and b.__class__ is int:
                quotient = abs(a) // abs(b)  # type: ignore[operator]
                return quotient if (a >= 0) == (b > 0) else -quotient  # type: ignore[operator]
            return a / b  # type: ignore[operator]

        return divide
    function = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    if isinstance(right_node, Literal) and _is_number(right_node.value):
        constant = right_node.value

        def with_constant(m: Message) -> Value:
            a = left(m)
            if a.__class__ is int or a.__class__ is float:
                return function(a, constant)
            return None

        return with_constant

    def arithmetic(m: Message) -> Value:
        a, b = left(m), right(m)
        if _is_number(a) and _is_number(b):
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
    a_number, b_number = _is_number(a), _is_number(b)
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
    if not _is_number(constant) and op not in ("=", "<>"):
        return lambda m: None  # strings and booleans only know = and <>
    if isinstance(value, Identifier) and value.name not in _ENVELOPE_NAMES:
        read = "m.headers.get(header)"
        header = _header_name(value.name)
    else:
        read = "get(m)"
        header = None
    if _is_number(constant):
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


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    parts = []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            following = next(chars, None)
            if following is None:
                raise InvalidSelector(f"LIKE pattern {pattern!r} ends with its escape character")
            parts.append(re.escape(following))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


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
        if all(isinstance(b, Literal) and _is_number(b.value) for b in bounds):
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
        numbers = frozenset(v for v in values if _is_number(v))

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
        matcher = _like_regex(node.pattern, node.escape).fullmatch

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
