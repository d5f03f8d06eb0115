"""Seeded generators of messages, filter expressions and topic patterns for the pipeline's
differential tests (plain random, so a failure is reproducible from its seed)."""

from __future__ import annotations

import random

from engine.errors import InvalidSelector
from engine.filter_parser import parse

WORDS = ["a", "b", "c", "", "x.y"]
HEADER_NAMES = ["a", "b", "c", "s", "flag", "priority", "delivery_mode", "type", "n"]
STRINGS = ["x", "y", "ab", "", "a%b", "a_c", "PERSISTENT", "x.y", "é"]
INTS = [-3, -1, 0, 1, 2, 3, 4, 7]
# no NaN or infinities: the engine refuses them at the door (engine/validation.py)
FLOATS = [-1.5, 0.0, 0.5, 2.0, 2.5, 4.0, 1e300, -1e-300]


def header_value(rng: random.Random) -> str | int | float | bool:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(INTS)
    if kind < 0.5:
        return rng.choice(FLOATS)
    if kind < 0.8:
        return rng.choice(STRINGS)
    return rng.random() < 0.5


def address(rng: random.Random) -> str:
    return ".".join(rng.choice(["a", "b", "c", "", "stock"]) for _ in range(rng.randint(0, 4)))


def headers(rng: random.Random) -> dict[str, str | int | float | bool]:
    found = {name: header_value(rng) for name in HEADER_NAMES if rng.random() < 0.55}
    if "priority" in found:  # the engine takes only whole numbers from 0 up (SPEC 8)
        found["priority"] = rng.choice([0, 1, 4, 5, 9, 12])
    return found


# -- filter expressions ---------------------------------------------------------------------
IDENTIFIERS = [
    *HEADER_NAMES,
    "missing",
    "address",
    "JMSPriority",
    "JMSDeliveryMode",
    "JMSType",
    "timestamp",
    "JMSTimestamp",
    "JMSMessageID",
]


def _literal(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        return str(rng.choice(INTS))
    if kind < 0.5:
        return rng.choice(["0.5", "2.0", "-1.5", "2.5", "0.0", "1e0"])
    if kind < 0.85:
        return "'" + rng.choice(STRINGS).replace("'", "''") + "'"
    return rng.choice(["TRUE", "FALSE"])


def _value(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if roll < 0.5 or depth <= 0:
        return rng.choice(IDENTIFIERS)
    if roll < 0.75:
        return _literal(rng)
    if roll < 0.9:
        op = rng.choice(["+", "-", "*", "/", "%"])
        return f"({_value(rng, depth - 1)} {op} {_value(rng, depth - 1)})"
    return f"-{rng.choice(HEADER_NAMES)}"


def _condition(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if depth > 0 and roll < 0.25:
        op = rng.choice(["AND", "OR"])
        parts = [_condition(rng, depth - 1) for _ in range(rng.randint(2, 3))]
        return "(" + f" {op} ".join(parts) + ")"
    if depth > 0 and roll < 0.32:
        return f"NOT ({_condition(rng, depth - 1)})"
    roll = rng.random()
    subject = _value(rng, 1)
    if roll < 0.4:
        op = rng.choice(["=", "<>", "<", ">", "<=", ">="])
        return f"{subject} {op} {_value(rng, 1)}"
    if roll < 0.5:
        negated = rng.choice(["", "NOT "])
        return f"{subject} {negated}BETWEEN {_value(rng, 0)} AND {_value(rng, 0)}"
    if roll < 0.65:
        options = ", ".join(_literal(rng) for _ in range(rng.randint(1, 4)))
        return f"{subject} {rng.choice(['', 'NOT '])}IN ({options})"
    if roll < 0.8:
        pattern = rng.choice(["x%", "%b", "a\\%b", "a!_c", "_", "%", "a_c", "%.%", "é"])
        escape = " ESCAPE '!'" if "!" in pattern else ""
        return f"{rng.choice(HEADER_NAMES)} {rng.choice(['', 'NOT '])}LIKE '{pattern}'{escape}"
    if roll < 0.92:
        return f"{subject} IS {rng.choice(['', 'NOT '])}NULL"
    return rng.choice(["flag", "TRUE", "FALSE", "s", "priority"])


def expressions(count: int, seed: int) -> list[str]:
    """`count` distinct filter expressions that the engine's parser accepts."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < count:
        text = _condition(rng, 3)
        try:
            parse(text)
        except InvalidSelector:
            continue
        found[text] = None
    return list(found)


def topic_patterns(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["a", "b", "c", "", "stock", "*", "#"]
    found: dict[str, None] = {"": None, "#": None, "*": None, "#.#": None}
    while len(found) < count:
        found[".".join(rng.choice(words) for _ in range(rng.randint(1, 5)))] = None
    return list(found)
