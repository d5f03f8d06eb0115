"""Parsing filter expressions (filter_grammar.lark, LALR) into the AST of filter_ast.py.

The parse tree is turned into AST nodes bottom-up without recursion, so deeply nested input
cannot exhaust the stack; nesting, literals and the kinds of operands are checked on the way.

Rules this module keeps, each reported as `InvalidSelector` with a short message and the
1-based column:
* an expression is at most 10 KiB, nests at most 100 levels and is valid Unicode (no
  lone surrogate, which no store and no JSON writer can carry);
* integer literals fit in 64 bits (-9223372036854775808 included), octal digits are 0-7;
* operands whose kind is known from the text must suit their operator, as ActiveMQ and
  Artemis check: `<` `>` `<=` `>=` and BETWEEN take numbers (`'a' < 'b'` is refused),
  arithmetic takes numbers (`name + '!'` is refused), AND/OR/NOT take conditions
  (`TRUE AND 3` is refused), LIKE takes a string, `=` and `<>` refuse two kinds that can
  never be equal (`TRUE = 1`), and `x = NULL` is refused in favour of `x IS NULL`.
Headers have no kind until a message arrives, so `a < b` is always accepted.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from engine import filter_ast
from engine.errors import InvalidSelector
from engine.validation import surrogate_at, text_problem

MAX_LENGTH = 10 * 1024
MAX_DEPTH = 100
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1


class _Deep(Exception):
    """Raised from inside the builder when the tree passes MAX_DEPTH."""


def _kind(node: filter_ast.Node) -> str | None:
    """What a node yields, when the text alone tells: 'string', 'number', 'boolean'."""
    if isinstance(node, filter_ast.Literal):
        value = node.value
        if value.__class__ is bool:
            return "boolean"
        return "string" if value.__class__ is str else "number"
    if isinstance(node, (filter_ast.Arithmetic, filter_ast.Negate)):
        return "number"
    if isinstance(node, filter_ast.CONDITIONS):
        return "boolean"
    return None  # a header: any kind, known only per message


def _describe(node: filter_ast.Node) -> str:
    if isinstance(node, filter_ast.Literal):
        if node.value.__class__ is str:
            text = repr(node.value) if len(node.value) <= 20 else repr(node.value[:17] + "...")
            return f"the string {text}"
        if node.value.__class__ is bool:
            return "TRUE" if node.value else "FALSE"
        return f"the number {node.value!r}"
    if isinstance(node, (filter_ast.Arithmetic, filter_ast.Negate)):
        return "arithmetic"
    return "a condition"


class _ToAst:
    """Builds AST nodes from parse-tree nodes, one rule at a time (driven bottom-up by
    `_build`). Each node's depth and starting column sit in a side table keyed by identity
    (the table holds the node too, so an identity is never reused while it is in there)."""

    def __init__(self) -> None:
        self.info: dict[int, tuple[Any, int, int]] = {}  # id -> (node, depth, column)
        self.column = 1  # where the rule being built starts (set by _build)
        self.unsigned_min: dict[int, int] = {}  # 9223372036854775808 waiting for its '-'

    def depth(self, node: Any) -> int:
        return self.info[id(node)][1] if id(node) in self.info else 1

    def column_of(self, node: Any) -> int:
        if isinstance(node, Token):
            return node.start_pos + 1  # counted from the start, newlines included
        return self.info[id(node)][2] if id(node) in self.info else self.column

    def _node(self, node: Any, *children: Any, depth: int | None = None) -> Any:
        if depth is None:
            depth = 1 + max((self.depth(c) for c in children), default=0)
        if depth > MAX_DEPTH:
            raise _Deep(self.column)
        self.info[id(node)] = (node, depth, self.column)
        return node

    def _refuse(self, message: str, node: Any) -> InvalidSelector:
        column = self.column_of(node)
        return InvalidSelector(f"{message} at column {column}", column)

    def _need_condition(self, node: filter_ast.Node) -> None:
        if _kind(node) in ("string", "number"):
            raise self._refuse(f"expected a condition, not {_describe(node)},", node)

    def _need_number(self, node: filter_ast.Node, operator: str) -> None:
        if _kind(node) in ("string", "boolean"):
            raise self._refuse(f"{operator} takes numbers, not {_describe(node)},", node)

    # values
    def string(self, token: Token) -> filter_ast.Literal:
        return self._node(filter_ast.Literal(str(token)[1:-1].replace("''", "'")))

    def number(self, token: Token) -> filter_ast.Literal:
        value = _number(token)
        literal = self._node(filter_ast.Literal(value))
        if value.__class__ is int and value == -_LONG_MIN:  # fits once negated: wait for '-'
            self.unsigned_min[id(literal)] = token.start_pos + 1
        elif value.__class__ is int and value > _LONG_MAX:
            raise _too_big(token, token.start_pos + 1)
        return literal

    def true(self, _: Token) -> filter_ast.Literal:
        return self._node(filter_ast.Literal(True))

    def false(self, _: Token) -> filter_ast.Literal:
        return self._node(filter_ast.Literal(False))

    def identifier(self, token: Token) -> filter_ast.Identifier:
        name = str(token)
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        return self._node(filter_ast.Identifier(name))

    def primary(self, items: list) -> filter_ast.Node:
        inner = items[1]  # ( expression ): parentheses count as a level of nesting
        node, depth, column = self.info[id(inner)]
        if depth + 1 > MAX_DEPTH:
            raise _Deep(self.column)
        self.info[id(inner)] = (node, depth + 1, column)
        return inner

    def sign(self, items: list) -> filter_ast.Node:
        op, operand = items
        self._need_number(operand, f"'{op}'")
        if op == "+":
            return operand
        if isinstance(operand, filter_ast.Literal) and operand.value.__class__ in (int, float):
            value = -operand.value  # type: ignore[operator]
            self.unsigned_min.pop(id(operand), None)
            if value.__class__ is float or _LONG_MIN <= value <= _LONG_MAX:
                return self._node(filter_ast.Literal(value), operand)  # literals stay 64-bit
        return self._node(filter_ast.Negate(operand), operand)

    def signed_number(self, items: list) -> filter_ast.Literal:
        op, token = items
        literal = self.number(token)
        return self.sign([op, literal]) if op == "-" else literal  # type: ignore[return-value]

    def arith(self, items: list) -> filter_ast.Node:
        left, op, right = items
        for operand in (left, right):
            if op == "+" and _kind(operand) == "string":
                raise self._refuse(
                    f"'+' takes numbers, not {_describe(operand)} (strings are not joined),",
                    operand,
                )
            self._need_number(operand, f"'{op}'")
        return self._node(filter_ast.Arithmetic(str(op), left, right), left, right)

    def compare(self, items: list) -> filter_ast.Node:
        left, op, right = items
        op_text = "<>" if str(op) == "!=" else str(op)
        if op_text in ("=", "<>"):
            left_kind, right_kind = _kind(left), _kind(right)
            if left_kind and right_kind and left_kind != right_kind:
                raise self._refuse(
                    f"'{op_text}' compares values of one kind, and {_describe(left)} and"
                    f" {_describe(right)} never match,",
                    left,
                )
        else:
            self._need_number(left, f"'{op_text}'")
            self._need_number(right, f"'{op_text}'")
        return self._node(filter_ast.Compare(op_text, left, right), left, right)

    # conditions
    def or_(self, items: list) -> filter_ast.Node:
        return self._junction(filter_ast.Or, items)

    def and_(self, items: list) -> filter_ast.Node:
        return self._junction(filter_ast.And, items)

    def _junction(
        self, kind: type[filter_ast.And] | type[filter_ast.Or], items: list
    ) -> filter_ast.Node:
        left, _, right = items
        self._need_condition(left)
        self._need_condition(right)
        if isinstance(left, kind):  # flatten: a chain of ANDs (or ORs) is one level deep
            depth = max(self.depth(left), 1 + self.depth(right))
            return self._node(kind((*left.operands, right)), depth=depth)
        return self._node(kind((left, right)), left, right)

    def not_(self, items: list) -> filter_ast.Node:
        operand = items[1]
        self._need_condition(operand)
        return self._node(filter_ast.Not(operand), operand)

    def between(self, items: list) -> filter_ast.Node:
        value, negated, low, high = items[0], _has_not(items), items[-3], items[-1]
        for node in (value, low, high):
            self._need_number(node, "BETWEEN")
        return self._node(filter_ast.Between(value, low, high, negated), value, low, high)

    def in_(self, items: list) -> filter_ast.Node:
        value = items[0]
        options = tuple(item for item in items[1:] if isinstance(item, filter_ast.Literal))
        return self._node(filter_ast.In(value, options, _has_not(items)), value)

    def like(self, items: list) -> filter_ast.Node:
        value = items[0]
        if _kind(value) in ("number", "boolean"):
            raise self._refuse(f"LIKE takes a string, not {_describe(value)},", value)
        strings = [item for item in items[1:] if isinstance(item, filter_ast.Literal)]
        pattern = strings[0].value
        escape = strings[1].value if len(strings) > 1 else None
        if escape is not None and len(escape) != 1:  # type: ignore[arg-type]
            raise self._refuse(f"ESCAPE takes one character, not {escape!r},", strings[1])
        return self._node(filter_ast.Like(value, pattern, escape, _has_not(items)), value)  # type: ignore

    def is_null(self, items: list) -> filter_ast.Node:
        return self._node(filter_ast.IsNull(items[0], _has_not(items)), items[0])


def _has_not(items: list) -> bool:
    return any(isinstance(item, Token) and item.type == "NOT" for item in items)


def _too_big(text: object, column: int) -> InvalidSelector:
    return InvalidSelector(
        f"the integer {str(text)[:24]} does not fit in 64 bits at column {column}", column
    )


_HEX = re.compile(r"0[xX]([0-9a-fA-F]+)[lL]?")
_DECIMAL = re.compile(r"([0-9]+)[lL]?")
_APPROXIMATE = re.compile(r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")


def _number(token: Token) -> int | float:
    """The value of a NUMBER token, as Java reads the literal (a leading 0 means octal).
    The grammar lets malformed numbers (`0x`, `1e`, `09`, `1.5f`) through as one token so
    that they are refused here, whole, with a message that names them."""
    text = str(token)
    # no 64-bit integer is this long, and Python's int() refuses 4,300 digits
    if len(text) > 400 and (_DECIMAL.fullmatch(text) or _HEX.fullmatch(text)):
        raise _too_big(text, token.start_pos + 1)
    if match := _HEX.fullmatch(text):
        return int(match[1], 16)
    if _APPROXIMATE.fullmatch(text):
        return float(text)
    if match := _DECIMAL.fullmatch(text):
        digits = match[1]
        if len(digits) > 1 and digits.startswith("0"):
            if set(digits) & {"8", "9"}:
                raise InvalidSelector(
                    f"{text!r} is not a number (a leading 0 means octal, digits 0-7)"
                    f" at column {token.start_pos + 1}",
                    token.start_pos + 1,
                )
            return int(digits, 8)
        return int(digits)
    shown = text if len(text) <= 24 else text[:21] + "..."
    column = token.start_pos + 1
    raise InvalidSelector(f"{shown!r} is not a number at column {column}", column)


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
    "MUL_OP": "'*', '/' or '%'",
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


def _tokens_before(text: str, position: int) -> list[Token]:
    """The tokens that end at or before `position` (lexing succeeded that far)."""
    tokens: list[Token] = []
    try:
        tokens.extend(_parser().lex(text[:position]))
    except UnexpectedInput:
        pass
    return tokens


def _syntax_error(text: str, error: UnexpectedInput) -> InvalidSelector:
    if isinstance(error, UnexpectedCharacters):
        column = error.pos_in_stream + 1  # counted from the start, newlines included
        char = text[error.pos_in_stream] if error.pos_in_stream < len(text) else ""
        if char == "'":
            return InvalidSelector(f"unterminated string starting at column {column}", column)
        if char == '"':
            return InvalidSelector(f"unterminated quoted name at column {column}", column)
        if text.startswith("/*", error.pos_in_stream):
            return InvalidSelector(f"unterminated comment starting at column {column}", column)
        return InvalidSelector(f"unexpected character {char!r} at column {column}", column)
    if not isinstance(error, UnexpectedToken):  # lark raises no other kind for LALR
        return InvalidSelector(f"invalid expression: {error}")
    token = error.token
    at_end = token.type == "$END"
    column = len(text) + 1 if at_end else token.start_pos + 1
    # the exact terminals that could come next (error.expected over-approximates: LALR
    # shares states between rules, so it would offer ',' outside any IN list)
    interactive = error.interactive_parser
    expected = set(interactive.accepts() if interactive is not None else error.expected)
    before = _tokens_before(text, len(text) if at_end else token.start_pos)
    previous = before[-1] if before else None
    where = "at the end" if at_end else f"at column {column}"
    if str(previous) == "/" and str(token) == "*" and previous.end_pos == token.start_pos:
        start = previous.start_pos + 1  # type: ignore[union-attr]
        return InvalidSelector(f"unterminated comment starting at column {start}", start)
    if token.type == "NULL" and previous is not None and previous.type == "COMP_OP":
        return InvalidSelector(
            f"compare with NULL using IS NULL or IS NOT NULL, not '{previous}', {where}", column
        )
    if previous is None:
        return InvalidSelector(f"expected a condition {where}, not {_describe_token(token)}", 1)
    if "NUMBER" in expected and "IDENTIFIER" not in expected:  # inside an IN list
        return InvalidSelector(
            f"expected a literal after {str(previous)!r} {where}"
            " (an IN list holds strings, numbers or booleans)",
            column,
        )
    if expected & _VALUE_STARTS and previous.type not in _VALUE_ENDS:
        what = "a string" if expected == {"STRING"} else "a value"
        return InvalidSelector(f"expected {what} after {str(previous)!r} {where}", column)
    if expected == {"RPAR"} or (at_end and "RPAR" in expected):
        return InvalidSelector(f"missing ')' {where}", column)
    if token.type in _VALUE_STARTS and previous.type in _VALUE_ENDS and "OR" in expected:
        return InvalidSelector(
            f"expected an operator, AND or OR before {_describe_token(token)} {where}", column
        )
    depth = sum(t.type == "LPAR" for t in before) - sum(t.type == "RPAR" for t in before)
    if token.type == "RPAR" and depth <= 0:
        return InvalidSelector(f"')' at column {column} has no matching '('", column)
    names = sorted({_TERMINAL_NAMES.get(name, name.upper()) for name in expected})
    hint = f"; expected {', '.join(names[:6])}" if names else ""
    if at_end:
        return InvalidSelector(f"the expression ends too early{hint}", column)
    return InvalidSelector(f"unexpected {_describe_token(token)} at column {column}{hint}", column)


def parse(text: str) -> filter_ast.Node:
    """The AST of a selector expression; InvalidSelector (with column) if it is not one."""
    if not isinstance(text, str):
        raise InvalidSelector(f"a filter expression must be a string, not {type(text).__name__}")
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_LENGTH:
        raise InvalidSelector(f"the expression is longer than {MAX_LENGTH // 1024} KiB")
    at = surrogate_at(text)
    if at is not None:  # anywhere: in a string, a quoted name or a comment
        problem = text_problem(text)
        raise InvalidSelector(f"the expression, at column {at + 1}, {problem}", at + 1)
    if not text.strip():
        raise InvalidSelector("the expression is empty", 1)
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    builder = _ToAst()
    try:
        node = _build(builder, tree)
    except _Deep as deep:
        column = deep.args[0]
        raise InvalidSelector(
            f"the expression nests deeper than {MAX_DEPTH} levels at column {column}", column
        ) from None
    for column in builder.unsigned_min.values():
        raise _too_big(str(-_LONG_MIN), column)
    if _kind(node) in ("string", "number"):
        column = builder.column_of(node)
        raise InvalidSelector(
            f"the expression must be a condition (a comparison, LIKE, IN, BETWEEN, IS NULL,"
            f" TRUE/FALSE or a boolean header), not {_describe(node)}, at column {column}",
            column,
        )
    return node


def _build(builder: _ToAst, tree: Any) -> filter_ast.Node:
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
        if children:
            builder.column = builder.column_of(children[0])
        results.append(_apply(builder, item.data, children))
    return results[0]


def _apply(builder: _ToAst, rule: str, children: list) -> Any:
    if rule == "start":
        return children[0]
    method = getattr(builder, str(rule))
    if rule in ("string", "number", "true", "false", "identifier"):
        return method(children[0])
    return method(children)
