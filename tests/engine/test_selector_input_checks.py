"""A selector's MATCH patterns, filters and fields are checked when they are configured:
text that cannot be kept (a lone surrogate), a field whose meaning would change once kept,
and operators too long to repeat are refused with an InvalidSelector a person can act on,
and the selector is left exactly as it was."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidSelector
from engine.filters import compile_filter
from engine.matching import check_pattern


def sink(eng: Engine) -> None:
    """Queue "out", whose history keeps what arrives (its selector deletes it)."""
    eng.queue_create("out", history=10)
    eng.selector_create("out").when_always().do_delete().enable()


def copied(eng: Engine) -> list[str]:
    """The addresses of the messages that reached "out", oldest first."""
    return [m.address for m in eng.browse("out", start="oldest", count=10)]


@pytest.fixture
def wired(eng: Engine):
    """Queue "in" with one selector (eq "x", a filter, copy to "out") to try changes on."""
    eng.queue_create("in")
    sink(eng)
    sel = eng.selector_create("in").when_match("eq", "x").when_filter("h = 1").do_copy("out")
    sel.enable()
    return eng, sel


def refused_by(refused, eng: Engine, sel, call, *args, match: str) -> InvalidSelector:
    """The call is refused with InvalidSelector and the selector's wiring is unchanged."""
    before = sel.spec
    error = refused(eng, InvalidSelector, call, *args, match=match)
    assert sel.spec == before
    return error


def lone_surrogate(code: str, index: int) -> str:
    return rf"holds a lone surrogate \(U\+{code}\) at index {index}; text must be valid Unicode"


# -- lone surrogates in match patterns ----------------------------------------------------
SURROGATE_PATTERNS = [
    ("eq", "a\ud800", "D800", 1),
    ("topic", "a.\udfff.#", "DFFF", 2),
    ("prefix", "\ud800", "D800", 0),
    ("regex", "\ud800", "D800", 0),
    ("regex", "a(b|\udc00)+", "DC00", 4),
]


@pytest.mark.parametrize(("operator", "pattern", "code", "index"), SURROGATE_PATTERNS)
def test_a_lone_surrogate_in_a_match_pattern_is_refused_everywhere_a_pattern_enters(
    refused, wired, operator: str, pattern: str, code: str, index: int
) -> None:
    eng, sel = wired
    said = lone_surrogate(code, index)
    refused_by(refused, eng, sel, sel.when_match, operator, pattern, match=said)
    refused_by(refused, eng, sel, sel.when_match, operator, pattern, "h", match=said)
    refused_by(refused, eng, sel, sel.and_match, operator, pattern, match=said)
    refused_by(refused, eng, sel, sel.when_matches, [("eq", "y"), (operator, pattern)], match=said)
    error = refused_by(
        refused,
        eng,
        sel,
        sel.when_matches,
        [{"operator": operator, "pattern": pattern, "field": "h"}],
        match=said,
    )
    assert str(error).startswith("match condition 1: ")
    with pytest.raises(InvalidSelector, match=said) as raised:
        check_pattern(operator, pattern)
    assert raised.value.column == index + 1
    # the selector still routes as it did
    eng.publish("in", Message(address="x", headers={"h": 1}))
    assert eng.stats("out")["published"] == 1


# -- lone surrogates in filters ------------------------------------------------------------
SURROGATE_FILTERS = [
    ("h = '\ud800'", "D800", 5),
    ("h = 'ok' OR h = 'a\udfffb'", "DFFF", 18),
    ('"x\ud800" = 1', "D800", 2),
    ("h LIKE '%\udc00%' ESCAPE '!'", "DC00", 9),
    ("h IN ('a', '\ud800')", "D800", 12),
    ("h = 1 /* \ud800 */", "D800", 9),
]


@pytest.mark.parametrize(("expression", "code", "index"), SURROGATE_FILTERS)
def test_a_lone_surrogate_in_a_filter_is_refused_with_its_column(
    refused, wired, expression: str, code: str, index: int
) -> None:
    eng, sel = wired
    said = lone_surrogate(code, index)
    error = refused_by(refused, eng, sel, sel.when_filter, expression, match=said)
    assert error.column == index + 1
    assert f"column {index + 1}" in str(error)
    with pytest.raises(InvalidSelector, match=said) as raised:
        compile_filter(expression)
    assert raised.value.column == index + 1


def test_valid_unicode_in_patterns_and_filters_is_still_accepted(eng: Engine) -> None:
    eng.queue_create("in")
    sink(eng)
    sel = eng.selector_create("in").when_match("regex", "ä.*😀").and_match("eq", "é", "h")
    sel.when_filter("h = 'é' AND \"ü\" IS NULL").do_copy("out").enable()
    eng.publish("in", Message(address="äbc😀", headers={"h": "é"}))
    eng.publish("in", Message(address="äbc", headers={"h": "é"}))
    assert eng.stats("out")["published"] == 1


# -- a header named "header:<name>" --------------------------------------------------------
def test_a_match_on_header_prefix_reaches_a_header_whose_name_starts_with_header(
    eng: Engine,
) -> None:
    eng.queue_create("in")
    sink(eng)
    sel = eng.selector_create("in").when_match("eq", "yes", field="header:header:x")
    sel.do_copy("out").enable()
    assert "header:header:x" in sel.when
    eng.publish("in", Message(address="a", headers={"header:x": "yes", "x": "no"}))
    eng.publish("in", Message(address="b", headers={"header:x": "no", "x": "yes"}))
    eng.publish("in", Message(address="c", headers={"x": "yes"}))
    assert copied(eng) == ["a"]


def test_and_match_and_when_matches_keep_a_header_prefixed_header_name(eng: Engine) -> None:
    eng.queue_create("in")
    sink(eng)
    sel = eng.selector_create("in").when_matches(
        [("prefix", "", "address"), {"operator": "eq", "pattern": "1", "field": "header:header:x"}]
    )
    sel.and_match("eq", "2", "header:header:y").do_copy("out").enable()
    eng.publish("in", Message(address="a", headers={"header:x": "1", "header:y": "2"}))
    eng.publish("in", Message(address="b", headers={"x": "1", "y": "2"}))
    assert copied(eng) == ["a"]


def test_target_from_on_header_prefix_reads_the_header_whose_name_starts_with_header(
    eng: Engine,
) -> None:
    eng.queue_create("in")
    for name in ("a", "b"):
        eng.queue_create(name)
        eng.selector_create(name).when_always().do_deliver(name).enable()
    sel = eng.selector_create("in").when_always().do_copy(target_from="header:header:to")
    sel.enable()
    assert "header:header:to" in repr(sel)
    got = eng.publish("in", Message(address="x", headers={"header:to": "b", "to": "a"}))
    assert [d.destination for d in got] == ["b"]


def test_plain_header_prefix_still_reads_the_bare_header(eng: Engine) -> None:
    eng.queue_create("in")
    sink(eng)
    eng.selector_create("in").when_match("eq", "yes", field="header:x").do_copy("out").enable()
    eng.publish("in", Message(address="a", headers={"x": "yes"}))
    eng.publish("in", Message(address="b", headers={"header:x": "yes"}))
    assert copied(eng) == ["a"]


# -- an empty field ------------------------------------------------------------------------
def test_an_empty_field_in_a_match_condition_is_refused_not_taken_as_address(
    refused, wired
) -> None:
    eng, sel = wired
    error = refused_by(
        refused,
        eng,
        sel,
        sel.when_matches,
        [{"operator": "eq", "pattern": "x", "field": ""}],
        match="match condition 1: field ''",
    )
    assert "non-empty" in str(error)
    refused_by(refused, eng, sel, sel.when_match, "eq", "x", "", match="field ''")


def test_a_missing_field_in_a_match_condition_is_the_address(eng: Engine) -> None:
    eng.queue_create("in")
    sink(eng)
    sel = eng.selector_create("in").when_matches(
        [{"operator": "eq", "pattern": "a"}, {"operator": "prefix", "pattern": "", "field": None}]
    )
    sel.do_copy("out").enable()
    eng.publish("in", Message(address="a"))
    eng.publish("in", Message(address="b", headers={"field": "a"}))
    assert copied(eng) == ["a"]


# -- unknown operators ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("operator", "shown"),
    [
        ("like", "'like'"),
        ("x" * 100_000, "'" + "x" * 40 + "...'"),
        ("bad\x00" * 1000, "of 4000 characters"),
        ("\ud800", "of 1 characters"),
        (["eq"] * 10_000, "list"),
    ],
    ids=["short", "long", "control-characters", "surrogate", "not-a-string"],
)
def test_an_unknown_operator_is_named_briefly(refused, wired, operator, shown: str) -> None:
    eng, sel = wired
    for call, args in [
        (sel.when_match, (operator, "p")),
        (sel.and_match, (operator, "p")),
        (sel.when_matches, ([{"operator": operator, "pattern": "p"}],)),
    ]:
        error = refused_by(refused, eng, sel, call, *args, match="match operator")
        said = str(error)
        assert len(said) < 200, said[:300]
        assert shown in said
        assert "eq, topic, prefix, regex" in said
        assert "\x00" not in said
        said.encode("utf-8")  # nothing that cannot be shown or kept
