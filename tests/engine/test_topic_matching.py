"""Topic matching (AMQP semantics as RabbitMQ implements them): the trie of
engine/matching.py against a regular expression built per pattern."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.matching import TopicTrie


def _matches(pattern: list[str], key: list[str]) -> bool:
    """The reference: a regular expression over the words, each prefixed by a separator that
    no word contains, so `*` is one word, `#` zero or more, and empty words count."""
    tokens = []
    for word in pattern:
        tokens.append(
            {"#": r"(?:\x00[^\x00]*)*", "*": r"\x00[^\x00]*"}.get(word, r"\x00" + re.escape(word))
        )
    subject = "".join("\x00" + word for word in key)
    return re.fullmatch("".join(tokens), subject) is not None


TABLE = [
    ("stock.*.price", "stock.ibm.price", True),
    ("stock.*.price", "stock.price", False),
    ("stock.*.price", "stock.ibm.x.price", False),
    ("stock.#", "stock", True),
    ("stock.#", "stock.ibm.price", True),
    ("stock.#", "stocks.ibm", False),
    ("#", "", True),
    ("*", "", False),
    ("*", "a", True),
    ("#", "a.b.c", True),
    ("#.price", "price", True),
    ("#.price", "stock.ibm.price", True),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.x.y.c", False),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
    ("a..b", "a.x.b", False),
    ("", "", True),
    ("", "a", False),
    ("*.*", "a.", True),
    ("*.*", ".", True),
    ("#.*", "", False),
    ("#.*", "a", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
]


@pytest.mark.parametrize(("pattern", "key", "expected"), TABLE)
def test_topic_table(pattern: str, key: str, expected: bool) -> None:
    trie = TopicTrie()
    trie.add(pattern, "x")
    assert (trie.match(key) == {"x"}) is expected
    assert (
        _matches(pattern.split(".") if pattern else [], key.split(".") if key else []) is expected
    )


words = st.sampled_from(["a", "b", "", "#", "*"])
key_words = st.sampled_from(["a", "b", "", "c"])
patterns = st.lists(words, max_size=5).map(".".join)
keys = st.lists(key_words, max_size=5).map(".".join)


@settings(max_examples=500, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=8), st.lists(keys, min_size=1, max_size=8))
def test_trie_agrees_with_reference_on_random_patterns_and_keys(pats, ks) -> None:
    trie = TopicTrie()
    for n, pattern in enumerate(pats):
        trie.add(pattern, n)
    for key in ks:
        expected = {
            n
            for n, p in enumerate(pats)
            if _matches(p.split(".") if p else [], key.split(".") if key else [])
        }
        assert trie.match(key) == expected, (pats, key)


@settings(max_examples=200, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=8), keys)
def test_discarding_every_pattern_leaves_an_empty_trie(pats, key) -> None:
    trie = TopicTrie()
    for n, pattern in enumerate(pats):
        trie.add(pattern, n)
    for n, pattern in enumerate(pats):
        trie.discard(pattern, n)
    assert trie.match(key) == set()
    assert trie.match("") == set()
