r"""Indexes that find the selectors whose MATCH condition holds for a value.

Theory of operation: a queue's routing table keeps one index per (field, operator). Matching a
message asks each index for its hits, so the cost grows with the number of hits and the
length of the key, not with the number of selectors:

* `ExactIndex`  — a dict from value to items.
* `PrefixIndex` — a dict per prefix length; a lookup probes each distinct length once.
* `TopicTrie`   — a trie over `.`-separated words with AMQP wildcards as RabbitMQ implements
  them: `*` is exactly one word, `#` is zero or more words, the empty key has zero words and
  `a..b` has an empty middle word.
* `RegexIndex`  — full-match regular expressions; these cannot be indexed, so they are tested
  one by one (operators choose regex knowing that).

Regular expressions run on RE2 (google-re2), not Python's backtracking `re`: RE2 matches in
time linear in the key, so no pattern and no address can hold the router (Python's `re` takes
minutes on `(a+)+$` against 28 characters, holding the queue's lease and the GIL). A pattern
must be valid for Python's `re` (its syntax errors carry the column) and for RE2, so the
constructs that need backtracking — backreferences, lookahead and lookbehind, atomic groups,
possessive quantifiers, conditionals — are refused when the selector is configured, with an
InvalidSelector naming the construct. `\Z` is accepted and read as RE2's `\z` (end of text).
RE2's `\d`, `\w`, `\s` and `\b` are ASCII, as in Java's default (engine/pipeline/translate.py
hands the same pattern to Spark's Java regex, so the backtest and the routing table agree).

Items are opaque to the indexes (the routing table stores selectors in them). Each index returns a
set, so an item registered twice under different patterns is reported once.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from re import _constants, _parser  # the tree re.compile parses, to size a pattern
from typing import Any

import re2

from engine.errors import InvalidSelector
from engine.validation import shown, surrogate_at, text_problem

MATCH_OPERATORS = ("eq", "topic", "prefix", "regex")
MAX_PATTERN = 1000  # characters of a match pattern (the catalog's column holds as many)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # refusals are InvalidSelectors, not lines on stderr
# a selector asks only whether a pattern matches, never for its groups: without them RE2
# runs its DFA (a capturing group over a field of tens of KB is some 15 times slower)
_RE2_OPTIONS.never_capture = True
# Python's `\Z` (end of text) is RE2's `\z`; an even run of backslashes before it is literal
_SURROGATE = re.compile("[\ud800-\udfff]")
_END_OF_TEXT = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


def topic_words(key: str) -> list[str]:
    """The words of a topic key; the empty key has none (AMQP)."""
    return key.split(".") if key else []


def pattern_words(pattern: str) -> list[str]:
    """The words of a topic pattern, with each run of `#` words as one: `#.#` swallows what
    `#` does (any number of words), but every `#` is a live state of the trie's walk at
    every word of the key, so `#` written 499 times over a key of 100,000 words cost 50
    million steps (an adversarial probe: 16 s for one message)."""
    words = topic_words(pattern)
    return [word for at, word in enumerate(words) if word != "#" or not at or words[at - 1] != "#"]


class ExactIndex:
    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, set[Hashable]] = {}

    def add(self, value: str, item: Hashable) -> None:
        self._items.setdefault(value, set()).add(item)

    def discard(self, value: str, item: Hashable) -> None:
        items = self._items.get(value)
        if items is not None:
            items.discard(item)
            if not items:
                del self._items[value]

    def match(self, key: str) -> set[Hashable]:
        return self._items.get(key, _NOTHING)

    def __len__(self) -> int:
        return sum(len(items) for items in self._items.values())


class PrefixIndex:
    __slots__ = ("_by_length",)

    def __init__(self) -> None:
        self._by_length: dict[int, dict[str, set[Hashable]]] = {}

    def add(self, prefix: str, item: Hashable) -> None:
        self._by_length.setdefault(len(prefix), {}).setdefault(prefix, set()).add(item)

    def discard(self, prefix: str, item: Hashable) -> None:
        table = self._by_length.get(len(prefix))
        if table is None or prefix not in table:
            return
        table[prefix].discard(item)
        if not table[prefix]:
            del table[prefix]
            if not table:
                del self._by_length[len(prefix)]

    def match(self, key: str) -> set[Hashable]:
        hits: set[Hashable] = set()
        size = len(key)
        for length, table in self._by_length.items():
            if length <= size:
                found = table.get(key[:length])
                if found:
                    hits |= found
        return hits


class _TopicNode:
    __slots__ = ("children", "hash_child", "is_hash", "items")

    def __init__(self, is_hash: bool = False) -> None:
        self.children: dict[str, _TopicNode] = {}
        self.hash_child: _TopicNode | None = None  # children["#"], kept apart for speed
        self.is_hash = is_hash  # reached through a `#`: may swallow further words
        # each item and how many of its patterns end here (`#.#` and `#` end at one node)
        self.items: dict[Hashable, int] = {}


class TopicTrie:
    """Topic patterns in a trie; matching runs it as an NFA, one word at a time.

    The live state set starts at the root; each word moves every state to its child of
    that word and its `*` child, and keeps `#` nodes (which swallow any number of words);
    after each step a state's `#` child is added too, since `#` may swallow none. The cost
    is proportional to the key's words times the live states, not the number of patterns.
    """

    __slots__ = ("_added", "_cache", "_root")

    # Routing keys repeat (a set of symbols, regions, services), so answers are remembered
    # per key; the memory is bounded and forgotten whenever a pattern is added or removed.
    CACHE_SIZE = 4096

    def __init__(self) -> None:
        self._root = _TopicNode()
        self._cache: dict[str, set[Hashable]] = {}
        self._added: set[tuple[str, Hashable]] = set()  # (pattern, item), as given

    def add(self, pattern: str, item: Hashable) -> None:
        if (pattern, item) in self._added:
            return
        self._added.add((pattern, item))
        self._cache.clear()
        node = self._root
        for word in pattern_words(pattern):
            nxt = node.children.get(word)
            if nxt is None:
                nxt = node.children[word] = _TopicNode(is_hash=word == "#")
                if word == "#":
                    node.hash_child = nxt
            node = nxt
        node.items[item] = node.items.get(item, 0) + 1

    def discard(self, pattern: str, item: Hashable) -> None:
        if (pattern, item) not in self._added:
            return
        self._added.discard((pattern, item))
        self._cache.clear()
        path = [self._root]
        words = pattern_words(pattern)
        for word in words:
            nxt = path[-1].children.get(word)
            if nxt is None:
                return
            path.append(nxt)
        items = path[-1].items
        if items.get(item, 0) > 1:
            items[item] -= 1
        else:
            items.pop(item, None)
        # prune empty branches so the trie does not grow with churn
        for depth in range(len(words), 0, -1):
            node = path[depth]
            if node.items or node.children:
                break
            parent = path[depth - 1]
            del parent.children[words[depth - 1]]
            if words[depth - 1] == "#":
                parent.hash_child = None

    def match(self, key: str) -> set[Hashable]:
        hits = self._cache.get(key)
        if hits is None:
            hits = frozenset(self._walk(key))
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = hits
        return hits

    def _walk(self, key: str) -> set[Hashable]:
        states = _closure([self._root])
        for word in key.split(".") if key else ():
            step: list[_TopicNode] = []
            for node in states:
                if node.is_hash:
                    step.append(node)
                children = node.children
                if children:
                    nxt = children.get(word)
                    if nxt is not None:
                        step.append(nxt)
                    if word != "*":
                        nxt = children.get("*")
                        if nxt is not None:
                            step.append(nxt)
            if not step:
                return _NOTHING
            states = _closure(step)
        hits: set[Hashable] = set()
        for node in states:
            if node.items:
                hits.update(node.items)
        return hits


def _closure(nodes: list[_TopicNode]) -> list[_TopicNode]:
    """`nodes` plus the `#` nodes reachable from them without consuming a word, once each."""
    if len(nodes) == 1 and nodes[0].hash_child is None:
        return nodes
    seen: dict[int, _TopicNode] = {}
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if node.hash_child is not None:
            stack.append(node.hash_child)
    return list(seen.values())


class RegexIndex:
    __slots__ = ("_patterns",)

    def __init__(self) -> None:
        self._patterns: dict[str, tuple[Any, set[Hashable]]] = {}

    def add(self, pattern: str, item: Hashable) -> None:
        entry = self._patterns.get(pattern)
        if entry is None:
            entry = self._patterns[pattern] = (compile_regex(pattern), set())
        entry[1].add(item)

    def discard(self, pattern: str, item: Hashable) -> None:
        entry = self._patterns.get(pattern)
        if entry is not None:
            entry[1].discard(item)
            if not entry[1]:
                del self._patterns[pattern]

    def match(self, key: str) -> set[Hashable]:
        hits: set[Hashable] = set()
        for regex, items in self._patterns.values():
            try:
                found = regex.fullmatch(key)
            except UnicodeEncodeError:  # a lone surrogate: RE2 reads UTF-8; one U+FFFD each
                found = regex.fullmatch(_SURROGATE.sub("\ufffd", key))
            if found is not None:
                hits |= items
        return hits


def _check_text(what: str, pattern: str) -> None:
    """InvalidSelector (with its column) when `pattern` holds a lone surrogate: RE2 and
    every store read UTF-8, which cannot carry one."""
    at = surrogate_at(pattern)
    if at is not None:
        raise InvalidSelector(f"{what} {text_problem(pattern)}", at + 1)


def compile_regex(pattern: str) -> Any:
    """`pattern` compiled for RE2 (linear-time matching; see the module doc): an object with
    `fullmatch(key)`. InvalidSelector for a syntax error (with its column), a lone
    surrogate or a construct RE2 cannot run in linear time."""
    _check_text("regular expression", pattern)
    try:
        re.compile(pattern)
        parsed = _parser.parse(pattern)
    except re.error as exc:
        column = (exc.pos + 1) if exc.pos is not None else None
        where = f" at column {column}" if column else ""
        raise InvalidSelector(f"invalid regular expression: {exc.msg}{where}", column) from None
    items = _written_out(parsed.data)
    if items > MAX_WRITTEN_OUT:
        raise InvalidSelector(
            f"regular expression too large: its repetitions written out make more than "
            f"{MAX_WRITTEN_OUT:,} items (RE2 compiles a{{0,1000}} as 1,000 copies of a, and "
            "the time grows faster than the count): repeat less, or use * and +"
        )
    try:
        return re2.compile(_END_OF_TEXT.sub(r"\1\\z", pattern), _RE2_OPTIONS)
    except re2.error as exc:
        problem = exc.args[0].decode("utf-8", "replace") if exc.args else "not supported"
        _, _, piece = problem.partition(": ")
        found = pattern.find(piece) if piece else -1
        column = found + 1 if found >= 0 else None
        where = f" at column {column}" if column else ""
        raise InvalidSelector(
            f"regular expression not supported{where}: {problem}. Regex selectors run on RE2, "
            "which matches in linear time: backreferences, lookahead/lookbehind, atomic "
            "groups, possessive quantifiers, conditionals and inline flags other than "
            "i, m, s and U are refused, as are repetitions over 1000",
            column,
        ) from None


# A regex's repetitions written out, at most (see _written_out): "a{0,1000}" 10 times
# compiles in a few tenths of a second; 110 times took RE2 about 40 s.
MAX_WRITTEN_OUT = 10_000


def _written_out(items: Any) -> int:
    """How many items a parsed regex (Python's re parser's tree) is when RE2 writes its
    counted repetitions out: each {m,n} is n copies of what it repeats (m+1 for {m,}: RE2
    writes m copies and a star), nested ones multiply. Stops counting past the limit."""
    total = 0
    for operator, argument in items:
        if operator in _REPEATS:
            low, high, repeated = argument
            copies = high if high != _constants.MAXREPEAT else low + 1
            total += max(copies, 1) * _written_out(repeated)
        elif operator is _constants.SUBPATTERN:
            total += _written_out(argument[-1])
        elif operator is _constants.BRANCH:
            total += sum(_written_out(branch) for branch in argument[1])
        elif operator in (_constants.ASSERT, _constants.ASSERT_NOT):
            total += _written_out(argument[1])
        else:
            total += 1
        if total > MAX_WRITTEN_OUT:
            break
    return total


_REPEATS = (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT)


def check_pattern(operator: str, pattern: str) -> None:
    """Raise InvalidSelector if `pattern` is not valid for `operator`."""
    if operator not in MATCH_OPERATORS:
        # the operator is shown short, and only when printable: it may be anything
        said = (
            f"unknown match operator {shown(operator)}"
            if isinstance(operator, str)
            else f"match operator must be a string, not {type(operator).__name__}"
        )
        raise InvalidSelector(f"{said}; use one of {', '.join(MATCH_OPERATORS)}")
    if not isinstance(pattern, str):
        raise InvalidSelector(f"match pattern must be a string, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise InvalidSelector(
            f"match pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN}"
        )
    _check_text("match pattern", pattern)
    if operator == "regex":
        compile_regex(pattern)


def new_index(operator: str) -> ExactIndex | PrefixIndex | TopicTrie | RegexIndex:
    return _INDEX_BY_OPERATOR[operator]()


_INDEX_BY_OPERATOR = {
    "eq": ExactIndex,
    "prefix": PrefixIndex,
    "topic": TopicTrie,
    "regex": RegexIndex,
}

_NOTHING: set[Hashable] = frozenset()  # type: ignore[assignment]
