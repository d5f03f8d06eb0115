"""The AST of filter expressions (stable: the Spark pipeline translates it to Spark SQL and
the console renders it). Built by filter_parser.py, compiled by filters.py.

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import InvalidSelector


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


def is_number(value: object) -> bool:
    """A SQL number: int or float, never bool (which Python counts as an int)."""
    return value.__class__ is int or value.__class__ is float


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """The regular expression (full match) of a LIKE pattern: `%` any run, `_` one
    character, the escape character makes the next one literal, all else is literal."""
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
