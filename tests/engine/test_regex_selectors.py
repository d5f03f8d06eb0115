"""Regex selectors run in linear time (engine/matching.py): a pattern that makes a
backtracking engine explode cannot hold up routing, and what needs backtracking is refused
when the selector is configured, with an error that says why."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, InvalidSelector


def wired() -> Engine:
    eng = Engine()
    for name in ("in", "hostile"):
        eng.queue_create(name)
    eng.selector_create("in").when_match("regex", "(a+)+$").do_copy("hostile").enable()
    eng.selector_create("in").when_match("eq", "ok").do_deliver("app").enable()
    return eng


# the deadline is the run's own: with Python's backtracking `re` the first hostile address
# alone takes minutes (2^28 ways to split the a's), the whole run a lifetime
@pytest.mark.timeout(60)
def test_hostile_addresses_against_a_catastrophic_regex_do_not_hold_up_other_traffic() -> None:
    eng = wired()
    delivered = 0
    for n in range(200):
        hostile = "a" * (28 + n * 50) + "b"
        assert eng.publish("in", Message(address=hostile)) == []
        delivered += len(eng.publish("in", Message(address="ok")))
    assert delivered == 200
    eng.publish("in", Message(address="aaaa"))
    assert eng.stats("hostile")["published"] == 1  # the regex still matches what it should


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"(a)\1", "invalid escape sequence"),
        (r"ab(?=c)", "(?="),
        (r"(?<=a)b", "(?<="),
        (r"(?P<w>a)\.(?P=w)", "(?P"),
        (r"(?>a+)b", "invalid"),
        (r"a{1001}", "repetition"),
    ],
)
def test_patterns_that_need_backtracking_are_refused_with_the_reason(
    pattern: str, named: str
) -> None:
    eng = wired()
    selector = eng.selector_create("in")
    with pytest.raises(InvalidSelector) as refused:
        selector.when_match("regex", pattern)
    text = str(refused.value)
    assert named in text and "RE2" in text and "backreferences" in text
    assert selector.spec.when is None  # nothing changed


def test_regex_syntax_is_pythons_with_end_of_text_and_ascii_classes() -> None:
    eng = Engine()
    eng.queue_create("in")
    eng.queue_create("out")
    eng.selector_create("in").when_match("regex", r"(?P<kind>\w+)\.\d+\Z").do_copy("out").enable()
    for address in ("order.42", "order.42\n", "order.٤٢", "ordér.1"):
        eng.publish("in", Message(address=address))
    with pytest.raises(InvalidArgument):  # what RE2 could not read is refused at the door
        eng.publish("in", Message(address="a\ud800b.1"))
    # \Z is the end of the text; \d and \w are ASCII (as in Java, which the backtest runs on)
    assert [m.address for m in eng.peek("out", 10)] + [
        m.address for m in eng.browse("out", start="oldest")
    ] == ["order.42"]


def test_overlong_match_patterns_are_refused() -> None:
    eng = Engine()
    eng.queue_create("in")
    with pytest.raises(InvalidSelector, match="limit is 1000"):
        eng.selector_create("in").when_match("prefix", "x" * 1001)


def test_a_stored_regex_that_needs_backtracking_loads_disabled_instead_of_breaking_the_engine():
    eng = wired()
    catalog = eng.catalog
    [spec] = [s for s in catalog.selector_specs("in") if s.id == 1]
    spec.match = ("regex", r"(a)\1", "address")  # as an older version stored it
    catalog.save_selector(spec)
    rebuilt = Engine(catalog=catalog)
    assert rebuilt.selector_fetch("in", 1).enabled is False
    assert rebuilt.selector_fetch("in", 2).enabled is True
    assert len(rebuilt.publish("in", Message(address="ok"))) == 1


def test_a_regex_whose_repetitions_expand_too_far_is_refused_at_once():
    """RE2 compiles a counted repetition by writing it out: "a{0,1000}" 110 times is
    110,000 items, which took RE2 about 40 s to compile, holding whatever compiled it (a
    router making the selector, a web worker previewing it). Refused before RE2 sees it."""
    eng = Engine()
    eng.queue_create("in")
    for pattern in ("a{0,1000}" * 110, "a{0,1000}" * 11, "(?:x{0,100}y){0,101}"):
        with pytest.raises(InvalidSelector, match="repetitions"):
            eng.selector_create("in").when_match("regex", pattern)
    for pattern in ("a{0,1000}" * 5, "x{1000}" * 10, r"[^/]{1,200}/[^/]{1,200}"):
        eng.selector_create("in").when_match("regex", pattern).do_delete().enable()
