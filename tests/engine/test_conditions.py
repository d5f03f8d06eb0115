"""SPEC §12, several conditions: `and_match` adds MATCHes; all of them and the filter hold."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidSelector
from engine.selectors import MAX_CONDITIONS


def three_conditions(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("out")
    eng.selector_create("in").when_match("topic", "orders.*").and_match(
        "eq", "desk.eu", "return_address"
    ).and_match("prefix", "gold", "header:tier").do_copy("out").enable()
    eng.selector_create("out").when_always().do_deliver("app").enable()


def order(address: str = "orders.new", reply: str | None = "desk.eu", tier: str = "gold+"):
    return Message(address=address, return_address=reply, headers={"tier": tier})


def test_a_message_is_taken_only_when_all_three_conditions_hold(eng: Engine) -> None:
    three_conditions(eng)
    assert [d.destination for d in eng.publish("in", order())] == ["app"]
    assert eng.publish("in", order(address="orders.new.late")) == []  # address fails
    assert eng.publish("in", order(reply="desk.us")) == []  # return address fails
    assert eng.publish("in", order(reply=None)) == []  # no return address at all
    assert eng.publish("in", order(tier="silver")) == []  # header fails
    assert eng.publish("in", Message(address="orders.new", return_address="desk.eu")) == []


def test_conditions_combine_with_a_filter(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("eq", "a").and_match("eq", "eu", "region")
    sel.when_filter("qty > 5").do_deliver("app").enable()
    assert len(eng.publish("in", Message(address="a", headers={"region": "eu", "qty": 9}))) == 1
    assert eng.publish("in", Message(address="a", headers={"region": "eu", "qty": 1})) == []
    assert eng.publish("in", Message(address="a", headers={"region": "us", "qty": 9})) == []
    assert sel.when == "eq a and eq on region eu and filter qty > 5"


def test_when_match_starts_the_list_again(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("eq", "a").and_match("eq", "eu", "region")
    sel.when_match("eq", "a").do_deliver("app").enable()
    assert sel.spec.more_matches == ()
    assert len(eng.publish("in", Message(address="a"))) == 1


def test_and_match_on_a_filter_only_selector_becomes_its_first_match(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_filter("qty > 5").and_match("eq", "a")
    sel.do_deliver("app").enable()
    assert sel.spec.match == ("eq", "a", "address")
    assert len(eng.publish("in", Message(address="a", headers={"qty": 9}))) == 1
    assert eng.publish("in", Message(address="b", headers={"qty": 9})) == []


def test_field_forms_header_prefix_and_bare_header_name(eng: Engine) -> None:
    eng.queue_create("in")
    eng.selector_create("in").when_match("eq", "x", "header:address").do_deliver("h").enable()
    eng.selector_create("in").when_match("eq", "x", "region").do_deliver("bare").enable()
    got = eng.publish("in", Message(address="x", headers={"address": "x"}))
    assert [d.destination for d in got] == ["h"]  # the header, not the envelope's address
    got = eng.publish("in", Message(address="y", headers={"region": "x"}))
    assert [d.destination for d in got] == ["bare"]


def test_several_selectors_share_a_first_condition_and_differ_in_the_second(eng: Engine) -> None:
    eng.queue_create("in")
    for region in ("eu", "us", "ap"):
        eng.selector_create("in").when_match("prefix", "o.").and_match(
            "eq", region, "region"
        ).do_copy(eng.queue_create(region).name).enable()
        eng.selector_create(region).when_always().do_deliver(region).enable()
    got = eng.publish("in", Message(address="o.1", headers={"region": "us"}))
    assert [d.destination for d in got] == ["us"]


def test_the_conditions_survive_a_new_engine_on_the_same_catalog(eng: Engine) -> None:
    three_conditions(eng)
    again = Engine(catalog=eng.catalog)
    selector = again.selectors("in")[0]
    assert selector.spec.more_matches == (
        ("eq", "desk.eu", "return_address"),
        ("prefix", "gold", "tier"),
    )
    assert len(again.publish("in", order())) == 1
    assert again.publish("in", order(tier="tin")) == []


def test_when_matches_sets_the_whole_list_or_nothing(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_matches(
        [{"operator": "eq", "pattern": "a"}, ("eq", "eu", "region")]
    )
    before = sel.spec
    with pytest.raises(InvalidSelector, match="match condition 2"):
        sel.when_matches([("eq", "b"), ("regex", "(a+")])
    assert sel.spec == before


@pytest.mark.parametrize(
    ("operator", "pattern", "field", "said"),
    [
        ("eq", "x", "header:", "field"),
        ("eq", "x", "1abc", "field"),
        ("eq", "x", "head er", "field"),
        ("eq", "x", 7, "field"),
        ("like", "x", "address", "operator"),
        ("regex", "(a", "address", "regular expression"),
        ("regex", r"(a)\1", "address", "not supported"),
        ("eq", "x" * 1001, "address", "limit"),
    ],
)
def test_bad_conditions_are_refused_and_change_nothing(eng, operator, pattern, field, said):
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("eq", "a").do_deliver("app")
    before = sel.spec
    with pytest.raises(InvalidSelector, match=said):
        sel.and_match(operator, pattern, field)
    assert sel.spec == before


def test_too_many_conditions_are_refused(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("eq", "a")
    for number in range(MAX_CONDITIONS - 1):
        sel.and_match("eq", str(number), "h")
    with pytest.raises(InvalidSelector, match="at most"):
        sel.and_match("eq", "x", "h")
    assert len(sel.spec.more_matches) == MAX_CONDITIONS - 1
    with pytest.raises(InvalidSelector, match="at most"):
        sel.when_matches([("eq", "a")] * (MAX_CONDITIONS + 1))


def test_and_match_on_an_always_selector_is_refused(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_always()
    with pytest.raises(InvalidSelector, match="when_match"):
        sel.and_match("eq", "a")
    assert sel.spec.when == "always"


def test_a_catastrophic_regex_as_a_later_condition_runs_in_linear_time(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("prefix", "")
    sel.and_match("regex", "(a+)+$", "h").do_deliver("app").enable()
    headers = {"h": "a" * 5000 + "!"}
    assert eng.publish("in", Message(address="x", headers=headers)) == []
    assert len(eng.publish("in", Message(address="x", headers={"h": "a" * 5000}))) == 1


def test_a_surrogate_in_a_header_a_condition_reads_does_not_break_routing(eng: Engine) -> None:
    eng.queue_create("in")
    sel = eng.selector_create("in").when_match("eq", "a").and_match("regex", ".*", "h")
    sel.do_deliver("app").enable()
    got = eng.publish("in", Message(address="a", headers={"h": 1.5}))
    assert len(got) == 1
