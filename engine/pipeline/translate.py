"""A selector's WHEN as a Spark SQL column: filter AST and match patterns, no Python UDF.

Theory of operation: `parse_when()` checks everything a person typed (the filter through
the engine's own parser, the pattern through the engine's own check) before Spark starts,
and raises the engine's `InvalidSelector`, column included. `when_column()` then turns the
checked WHEN into one boolean Column over the archive's history rows (engine/archive.py),
TRUE where the selector would have taken the message; it runs inside the JVM.

Values: a header may hold any kind, known per row only, so a value is translated into one
Column per kind it may have (`s` string, `i` 64-bit integer, `f` double, `b` boolean), of
which at most one is non-NULL on any row; a header reads its four typed maps, a literal has
one kind, arithmetic has `i` and/or `f`, a condition has `b`. Each operation combines the
kinds the way engine/filters.py does (read its docstring for the rules): a comparison is
one Column per pair of kinds that can compare, COALESCEd (the others are UNKNOWN, i.e.
NULL); arithmetic keeps Java's integer rules (`div` truncates, `%` takes the dividend's
sign, a zero divisor is NULL). Spark's AND, OR and NOT are already SQL's three-valued ones.

Where Spark and Python differ, the translation makes Spark say what the engine says:
NaN compares unequal to everything (Spark orders it above all numbers), LIKE becomes an
anchored Java regex (Spark's own LIKE refuses an escape character before other text, the
engine takes it literally), topic patterns become regexes over "." + key (so `#` can match
zero words). Known limits, documented in docs/pipeline.md: 64-bit integer arithmetic
overflows in Spark (Python's integers do not), a MATCH on a float header compares Spark's
text for the number, and a regex runs on Java's engine (the engine accepts only what both
Python's `re` and RE2 accept, engine/matching.py, which Java reads the same way, with ASCII
`\\d \\w \\s` as RE2 does; `(?P<name>` and `\\Z` are rewritten).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from engine import filter_ast
from engine.errors import InvalidSelector
from engine.fields import check_field, header_name
from engine.filter_parser import parse
from engine.matching import check_pattern

Value = dict[str, Column]  # kind ("s", "i", "f", "b") -> Column

_HEADER_MAPS = {
    "s": "headers_str",
    "i": "headers_int",
    "f": "headers_float",
    "b": "headers_bool",
}


@dataclass(frozen=True, slots=True)
class When:
    """A checked WHEN: an optional match (operator, pattern, field) and an optional filter
    AST. Neither means ALWAYS."""

    match: tuple[str, str, str] | None = None
    filter: filter_ast.Node | None = None
    expression: str | None = None

    def describe(self) -> str:
        parts = []
        if self.match is not None:
            operator, pattern, field = self.match
            on = "" if field == "address" else f" on {field}"
            parts.append(f"match {operator} {pattern!r}{on}")
        if self.expression is not None:
            parts.append(f"filter {self.expression!r}")
        return " and ".join(parts) or "always"


def parse_when(
    match_operator: str | None = None,
    pattern: str | None = None,
    filter: str | None = None,
    field: str = "address",
) -> When:
    """Check a WHEN without Spark; InvalidSelector (with its column) when it is not valid."""
    match = None
    if match_operator is not None or pattern is not None:
        if match_operator is None or pattern is None:
            raise InvalidSelector("a match needs both an operator and a pattern")
        check_pattern(match_operator, pattern)
        if not isinstance(field, str) or not field:
            raise InvalidSelector(f"match field must be 'address' or a header, not {field!r}")
        match = (match_operator, pattern, field)
    ast = None
    if filter is not None:
        if not isinstance(filter, str):
            raise InvalidSelector(f"a filter must be a string, not {type(filter).__name__}")
        ast = parse(filter)
    return When(match, ast, filter)


def when_column(when: When) -> Column:
    """TRUE where the WHEN takes the row, FALSE elsewhere (never NULL)."""
    parts = []
    if when.match is not None:
        parts.append(match_column(*when.match))
    if when.filter is not None:
        parts.append(condition(when.filter))
    if not parts:
        return F.lit(True)
    return F.coalesce(reduce(lambda a, b: a & b, parts), F.lit(False))


# -- matches --------------------------------------------------------------------------------
def match_column(operator: str, pattern: str, field: str = "address") -> Column:
    """The engine's MATCH (engine/matching.py) of `pattern` against `field` as
    engine/fields.py reads it: the address, the return address, or a header
    ("header:<name>" or a bare name; as header_text shows it: booleans as true/false,
    numbers as text)."""
    if field in ("address", "return_address"):
        key = F.col(field)
    else:
        key = _header_text(header_name(check_field(field)))  # type: ignore[arg-type]
    if operator == "eq":
        return key == F.lit(pattern)
    if operator == "prefix":
        return key.startswith(pattern)
    if operator == "topic":
        dotted = F.when(key == "", F.lit("")).otherwise(F.concat(F.lit("."), key))
        return dotted.rlike(topic_regex(pattern))
    if operator == "regex":
        return key.rlike(r"(?s)\A(?:" + java_regex(pattern) + r")\z")
    raise InvalidSelector(f"unknown match operator {operator!r}")


def _header_text(name: str) -> Column:
    value = _header(name)
    boolean = F.when(value["b"], F.lit("true")).when(~value["b"], F.lit("false"))
    return F.coalesce(value["s"], value["i"].cast("string"), value["f"].cast("string"), boolean)


def topic_regex(pattern: str) -> str:
    """A Java regex over "." + key (or "" for the empty key, which has no words) that holds
    exactly when the topic key matches `pattern`: every word is "." and its text, `*` is
    one word, `#` any number of them (runs of `#` collapse: `#.#` is `#`)."""
    pieces: list[str] = []
    for word in pattern.split(".") if pattern else []:
        if word == "#":
            if pieces and pieces[-1] == _ANY_WORDS:
                continue
            pieces.append(_ANY_WORDS)
        elif word == "*":
            pieces.append(r"\.[^.]*")
        else:
            pieces.append(r"\." + _quote(word))
    return r"\A" + "".join(pieces) + r"\z"


_ANY_WORDS = r"(?:\.[^.]*)*"


def _quote(text: str) -> str:
    """`text` as a literal in a Java regex: letters and digits as they are, everything else
    as \\x{hex} (safe for any character, whatever Java thinks of a backslash before it)."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def java_regex(pattern: str) -> str:
    """A Python regex in Java's dialect, for the constructs that are spelled differently."""
    pattern = re.sub(r"\(\?P<", "(?<", pattern)
    pattern = re.sub(r"\(\?P=(\w+)\)", r"\\k<\1>", pattern)
    return re.sub(r"(?<!\\)((?:\\\\)*)\\Z", r"\1\\z", pattern)


def like_regex(pattern: str, escape: str | None) -> str:
    """The LIKE pattern as an anchored Java regex (engine/filters.py like_matcher's rules:
    `%` any run, `_` one character, the escape character makes a following `%`, `_` or
    escape character literal and stands for itself anywhere else)."""
    out = []
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == escape and index + 1 < end and pattern[index + 1] in ("%", "_", escape):
            out.append(_quote(pattern[index + 1]))
            index += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else _quote(char))
        index += 1
    return r"(?s)\A" + "".join(out) + r"\z"


# -- values ---------------------------------------------------------------------------------
def _unknown() -> Column:
    return F.lit(None).cast("boolean")


def _header(name: str) -> Value:
    return {kind: F.col(column).getItem(name) for kind, column in _HEADER_MAPS.items()}


def _absent(value: Value) -> Column:
    if not value:
        return F.lit(True)  # a value no kind can have (arithmetic on strings): always NULL
    return reduce(lambda a, b: a & b, [c.isNull() for c in value.values()])


def _with_default(value: Value, kind: str, default: object) -> Value:
    """A header that reads as `default` (of `kind`) when the message lacks it."""
    result = dict(value)
    result[kind] = F.when(_absent(value), F.lit(default)).otherwise(value[kind])
    if kind == "i":
        result[kind] = result[kind].cast("long")
    return result


def _identifier(name: str) -> Value:
    if name == "address":
        return {"s": F.col("address")}
    if name in ("mid", "JMSMessageID"):
        return {"s": F.col("mid")}
    if name == "timestamp":
        return {"f": F.col("timestamp")}
    if name == "JMSTimestamp":
        return {"i": (F.col("timestamp") * 1000).cast("long")}
    if name == "JMSPriority":
        return _with_default(_header("priority"), "i", 4)
    if name == "JMSDeliveryMode":
        return _with_default(_header("delivery_mode"), "s", "PERSISTENT")
    header = {"JMSType": "type", "JMSCorrelationID": "correlation_id"}.get(name, name)
    return _header(header)


def _literal(value: object) -> Value:
    if value.__class__ is bool:
        return {"b": F.lit(value)}
    if value.__class__ is str:
        return {"s": F.lit(value)}
    if value.__class__ is int:
        return {"i": F.lit(value).cast("long")}
    return {"f": F.lit(value).cast("double")}


def value(node: filter_ast.Node) -> Value:
    if isinstance(node, filter_ast.Literal):
        return _literal(node.value)
    if isinstance(node, filter_ast.Identifier):
        return _identifier(node.name)
    if isinstance(node, filter_ast.Negate):
        operand = value(node.operand)
        return {kind: -operand[kind] for kind in ("i", "f") if kind in operand}
    if isinstance(node, filter_ast.Arithmetic):
        return _arithmetic(node)
    return {"b": condition(node)}


def _arithmetic(node: filter_ast.Arithmetic) -> Value:
    left, right = value(node.left), value(node.right)
    op = node.op
    result: Value = {}
    if "i" in left and "i" in right:
        a, b = left["i"], right["i"]
        if op == "/":
            result["i"] = F.when(b != 0, F.call_function("div", a, b))
        elif op == "%":
            result["i"] = F.when(b != 0, a % b)
        else:
            result["i"] = _operate(op, a, b)
    floats = []
    for lk, rk in (("i", "f"), ("f", "i"), ("f", "f")):
        if lk in left and rk in right:
            a, b = left[lk].cast("double"), right[rk].cast("double")
            if op in ("/", "%"):
                floats.append(F.when(F.abs(b) != 0, _operate(op, a, b)))
            else:
                floats.append(_operate(op, a, b))
    if floats:
        result["f"] = floats[0] if len(floats) == 1 else F.coalesce(*floats)
    return result


def _operate(op: str, a: Column, b: Column) -> Column:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    return a % b


# -- conditions -----------------------------------------------------------------------------
def _compare_columns(op: str, a: Column, b: Column) -> Column:
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def compare(op: str, left: Value, right: Value) -> Column:
    """The 3VL comparison: numbers with numbers, strings with strings and booleans with
    booleans (these two by = and <> only); anything else UNKNOWN."""
    parts = []
    if op in ("=", "<>"):
        for kind in ("s", "b"):
            if kind in left and kind in right:
                parts.append(_compare_columns(op, left[kind], right[kind]))
    for lk, rk in (("i", "i"), ("i", "f"), ("f", "i"), ("f", "f")):
        if lk in left and rk in right:
            a, b = left[lk], right[rk]
            test = _compare_columns(op, a, b)
            if "f" in (lk, rk):  # NaN is unequal to everything, ordered against nothing
                nan = reduce(
                    lambda x, y: x | y, [F.isnan(c) for k, c in ((lk, a), (rk, b)) if k == "f"]
                )
                both = a.isNotNull() & b.isNotNull()
                test = F.when(both & nan, F.lit(op == "<>")).otherwise(test)
            parts.append(test)
    if not parts:
        return _unknown()
    return parts[0] if len(parts) == 1 else F.coalesce(*parts)


def _in(node: filter_ast.In) -> Column:
    subject = value(node.value)
    options = [option.value for option in node.options]
    strings = [v for v in options if v.__class__ is str]
    ints = [v for v in options if v.__class__ is int]
    floats = [v for v in options if v.__class__ is float]
    booleans = [v for v in options if v.__class__ is bool]
    found, missed = (False, True) if node.negated else (True, False)

    def outcome(hit: Column, every_option_of_kind: bool) -> Column:
        miss = F.lit(missed) if every_option_of_kind else _unknown()
        return F.when(hit, F.lit(found)).otherwise(miss)

    def isin(column: Column, values: list) -> Column:
        return column.isin(values) if values else F.lit(False)

    branches: list[tuple[Column, Column]] = []
    if "s" in subject:
        hit = isin(subject["s"], strings)
        branches.append((subject["s"].isNotNull(), outcome(hit, len(strings) == len(options))))
    numbers_only = len(ints) + len(floats) == len(options)
    if "i" in subject:
        column = subject["i"]
        hit = isin(column, ints) | isin(column.cast("double"), floats)
        branches.append((column.isNotNull(), outcome(hit, numbers_only)))
    if "f" in subject:
        column = subject["f"]
        hit = isin(column, [float(v) for v in ints] + floats) & ~F.isnan(column)
        branches.append((column.isNotNull(), outcome(hit, numbers_only)))
    if "b" in subject:
        hit = isin(subject["b"], booleans)
        branches.append((subject["b"].isNotNull(), outcome(hit, len(booleans) == len(options))))
    if not branches:
        return _unknown()
    result = F.when(*branches[0])
    for test, outcome_column in branches[1:]:
        result = result.when(test, outcome_column)
    return result


def condition(node: filter_ast.Node) -> Column:
    """The 3VL truth of a condition node: TRUE, FALSE or NULL (UNKNOWN)."""
    if isinstance(node, filter_ast.Compare):
        return compare(node.op, value(node.left), value(node.right))
    if isinstance(node, filter_ast.And):
        return reduce(lambda a, b: a & b, [condition(part) for part in node.operands])
    if isinstance(node, filter_ast.Or):
        return reduce(lambda a, b: a | b, [condition(part) for part in node.operands])
    if isinstance(node, filter_ast.Not):
        return ~condition(node.operand)
    if isinstance(node, filter_ast.Between):
        subject = value(node.value)
        inside = compare(">=", subject, value(node.low)) & compare("<=", subject, value(node.high))
        return ~inside if node.negated else inside
    if isinstance(node, filter_ast.In):
        return _in(node)
    if isinstance(node, filter_ast.Like):
        subject = value(node.value)
        if "s" not in subject:
            return _unknown()
        test = subject["s"].rlike(like_regex(node.pattern, node.escape))
        return ~test if node.negated else test
    if isinstance(node, filter_ast.IsNull):
        absent = _absent(value(node.value))
        return ~absent if node.negated else absent
    subject = value(node)  # a bare value as a condition: only a boolean is TRUE or FALSE
    return subject["b"] if "b" in subject else _unknown()


__all__ = [
    "When",
    "compare",
    "condition",
    "like_regex",
    "match_column",
    "parse_when",
    "topic_regex",
    "value",
    "when_column",
]
