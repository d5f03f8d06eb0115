"""The AST of filter expressions (stable: the Spark pipeline translates it to Spark SQL and
the console renders it). Built by filter_parser.py, compiled by filters.py.

Every node is a frozen dataclass; children are nodes, tuples of nodes, or plain values.

    Literal(value)                         str | int | float | bool (never NULL: JMS has no
                                           NULL literal outside IS NULL); a minus sign
                                           before a number literal is folded into it
    Identifier(name)                       as written (JMS names not yet mapped: the
                                           compiler maps JMSPriority and the like)
    Negate(operand)                        unary minus of a non-literal; unary plus vanishes
    Arithmetic(op, left, right)            op in "+ - * / %" ("%" as in Artemis)
    Compare(op, left, right)               op in "= <> < > <= >=" ("!=" is stored as "<>")
    And(operands), Or(operands)            n-ary, flattened, at least two operands
    Not(operand)
    Between(value, low, high, negated)     bounds included
    In(value, options, negated)            options: tuple of Literal, in written order
    Like(value, pattern, escape, negated)  pattern: str; escape: one-character str or None
    IsNull(value, negated)

Parentheses leave no node: `(a)` is `a`. Conditions (Compare, And, Or, Not, Between, In,
Like, IsNull) yield TRUE, FALSE or UNKNOWN; the others yield values. A bare Identifier or a
boolean Literal may stand where a condition is expected.
"""

from __future__ import annotations

from dataclasses import dataclass


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
