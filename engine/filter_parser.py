"""Parsing filter expressions (filter_grammar.lark, LALR) into the AST of filter_ast.py.

The parse tree is turned into AST nodes bottom-up without recursion, so deeply nested input
cannot exhaust the stack; nesting and length are checked on the way.

Limits: an expression is at most 10 KiB and nests at most 100 levels; beyond, and on any
syntax error, `InvalidSelector` is raised with a short message and the 1-based column.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from engine.errors import InvalidSelector
from engine.filter_ast import (
    CONDITIONS,
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

MAX_LENGTH = 10 * 1024
MAX_DEPTH = 100


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
        if isinstance(operand, Literal) and is_number(operand.value):
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
            like_regex(pattern, escape)  # type: ignore[arg-type]
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
