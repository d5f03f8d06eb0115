"""Topic matching (AMQP semantics as RabbitMQ implements them): the trie of
engine/matching.py against a regular expression built per pattern.

Words are split by `.`; `*` is exactly one word, `#` is zero or more; the empty key has zero
words (so `#` matches it and `*` does not) and `a..b` has an empty middle word."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.matching import TopicTrie


def words(text: str) -> list[str]:
    return text.split(".") if text else []


def reference(pattern: str, key: str) -> bool:
    """A regular expression over the words, each written with a separator in front that no
    word contains, so `*` is one whole word, `#` zero or more whole words, empty words count,
    and a key's own `*` or `#` is just a word."""
    regex = "".join(
        {"#": r"(?:\x00[^\x00]*)*", "*": r"\x00[^\x00]*"}.get(word, r"\x00" + re.escape(word))
        for word in words(pattern)
    )
    subject = "".join("\x00" + word for word in words(key))
    return re.fullmatch(regex, subject) is not None


TABLE = [
    ("stock.*.price", "stock.ibm.price", True),
    ("stock.*.price", "stock.price", False),
    ("stock.*.price", "stock.ibm.x.price", False),
    ("stock.#", "stock", True),
    ("stock.#", "stock.ibm.price", True),
    ("stock.#", "stocks.ibm", False),
    ("stock.#", "", False),
    ("#", "", True),
    ("*", "", False),
    ("*", "a", True),
    ("*", ".", False),
    ("#", "a.b.c", True),
    ("#", ".", True),
    ("#.price", "price", True),
    ("#.price", "stock.ibm.price", True),
    ("#.price", "price.stock", False),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.y.b", True),
    ("a.#.b", "a.x.y.c", False),
    ("a.#.b", "a.b.b", True),
    ("a.#.b.#.c", "a.b.c", True),
    ("a.#.b.#.c", "a.c.b", False),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("#.#.#", "a", True),
    ("#.*.#", "", False),
    ("#.*.#", "a.b.c", True),
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
    ("a.#.b", "a..b", True),
    ("a..b", "a.x.b", False),
    ("a..b", "a.b", False),
    ("", "", True),
    ("", "a", False),
    ("", ".", False),
    (".", ".", True),
    (".", "", False),
    ("a.", "a.", True),
    ("a.", "a", False),
    (".a", ".a", True),
    ("*.*", "a.", True),
    ("*.*", ".", True),
    ("*.*", "a", False),
    ("#.*", "", False),
    ("#.*", "a", True),
    ("*.#", "a", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("a.b", "a.b", True),
    ("a.b", "A.b", False),
    ("a.b", "a.b.c", False),
    ("a*", "a*", True),
    ("a*", "ab", False),
    ("a#", "ab", False),
    ("*", "#", True),
    ("a.b", "a.*", False),
]


@pytest.mark.parametrize(("pattern", "key", "expected"), TABLE)
def test_topic_pattern_matches_key_as_rabbitmq_does(pattern: str, key: str, expected) -> None:
    trie = TopicTrie()
    trie.add(pattern, "x")
    assert (trie.match(key) == {"x"}) is expected
    assert reference(pattern, key) is expected  # the reference is right on the table too


pattern_words = st.sampled_from(["a", "b", "", "#", "*"])
key_words = st.sampled_from(["a", "b", "", "c", "*", "#"])
patterns = st.one_of(
    st.lists(pattern_words, max_size=6).map(".".join),
    st.sampled_from(["", "#", "#.#", "#.a", "a.#", "a.#.b", "#.#.#", "*.#.*", ".", "#..#"]),
)
keys = st.lists(key_words, max_size=7).map(".".join)


@settings(max_examples=800, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=10), st.lists(keys, min_size=1, max_size=10))
def test_trie_agrees_with_reference_on_random_patterns_and_keys(pats, ks) -> None:
    trie = TopicTrie()
    for n, pattern in enumerate(pats):
        trie.add(pattern, n)
    for key in [*ks, ""]:
        expected = {n for n, pattern in enumerate(pats) if reference(pattern, key)}
        assert trie.match(key) == expected, (pats, key)
        assert trie.match(key) == expected, (pats, key)  # a second time: the remembered answer


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), patterns, st.integers(0, 3)),
        st.tuples(st.just("discard"), patterns, st.integers(0, 3)),
        st.tuples(st.just("match"), keys, st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(operations)
def test_trie_stays_right_through_adds_discards_and_remembered_answers(ops) -> None:
    trie, registered = TopicTrie(), set()
    for operation, text, item in ops:
        if operation == "add":
            trie.add(text, item)
            registered.add((text, item))
        elif operation == "discard":
            trie.discard(text, item)
            registered.discard((text, item))
        else:
            expected = {item for pattern, item in registered if reference(pattern, text)}
            assert trie.match(text) == expected, (ops, text)


@settings(max_examples=200, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=8), keys)
def test_discarding_every_pattern_leaves_an_empty_trie(pats, key) -> None:
    trie = TopicTrie()
    for n, pattern in enumerate(pats):
        trie.add(pattern, n)
    trie.match(key)
    for n, pattern in enumerate(pats):
        trie.discard(pattern, n)
    assert trie.match(key) == set()
    assert trie.match("") == set()


def test_same_item_under_two_matching_patterns_is_reported_once() -> None:
    trie = TopicTrie()
    trie.add("a.*", "x")
    trie.add("a.#", "x")
    assert trie.match("a.b") == {"x"}
    trie.discard("a.*", "x")
    assert trie.match("a.b") == {"x"}
    assert trie.match("a") == {"x"}


def test_more_keys_than_the_trie_remembers_are_still_answered_right() -> None:
    trie = TopicTrie()
    trie.add("k.*", "star")
    trie.add("k.#.7", "seven")
    for n in range(TopicTrie.CACHE_SIZE + 500):
        key = f"k.{n % 10}" if n % 3 == 0 else f"k.{n}.{n % 10}"
        expected = {"star"} if n % 3 == 0 else set()
        if key.endswith(".7"):
            expected.add("seven")
        assert trie.match(key) == expected, key


def test_many_hashes_against_a_long_key_stay_fast() -> None:
    trie = TopicTrie()
    trie.add(".".join(["#"] * 20) + ".z", "x")
    trie.add(".".join(["#", "a"] * 10), "y")
    key = ".".join(["a"] * 200)
    started = time.thread_time()  # CPU time: a busy machine stretches the wall clock
    assert trie.match(key) == {"y"}
    assert trie.match(key + ".z") == {"x"}
    assert time.thread_time() - started < 0.5


# the deadline is the run's own: with every `#` a live state, the key's 300,000 words times
# 1,000 of them are a hundred million steps of Python
@pytest.mark.timeout(60)
def test_a_run_of_hashes_swallows_what_one_does_in_one_step() -> None:
    trie = TopicTrie()
    trie.add("#." * 1_000 + "b", "many")
    trie.add("#.#.b", "many")  # equivalent: the same node, kept till both are discarded
    trie.add("#.b", "one")
    trie.add("a.#.#", "tail")
    key = "x." * 300_000 + "b"
    assert trie.match(key) == {"many", "one"}
    assert trie.match("b") == {"many", "one"}
    assert trie.match("a") == {"tail"}
    assert trie.match("a.c.d") == {"tail"}
    trie.discard("#." * 1_000 + "b", "many")
    assert trie.match("b") == {"many", "one"}
    trie.discard("#.#.b", "many")
    assert trie.match("b") == {"one"}
