"""SPEC §12, targets from the envelope: `do_copy/do_move/do_bounce/do_deliver(target_from=F)`."""

from __future__ import annotations

import math

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, InvalidSelector


def network(eng: Engine, action: str, field: str, dead_letter: str | None = "dlq") -> None:
    """in --(action, target from `field`)--> a | b, each delivering to itself."""
    if dead_letter:
        eng.queue_create(dead_letter)
    eng.queue_create("in", dead_letter=dead_letter)
    for name in ("a", "b"):
        eng.queue_create(name)
        eng.selector_create(name).when_always().do_deliver(name).enable()
    getattr(eng.selector_create("in").when_always(), f"do_{action}")(target_from=field).enable()


def dead(eng: Engine) -> list[Message]:
    return eng.browse("dlq", start="oldest", count=50) if eng.queue_fetch("dlq").history else []


@pytest.mark.parametrize("action", ["copy", "move", "bounce"])
@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("address", Message(address="b")),
        ("return_address", Message(address="x", return_address="b")),
        ("header:to", Message(address="x", headers={"to": "b"})),
        ("to", Message(address="x", headers={"to": "b"})),
    ],
)
def test_each_message_goes_to_the_queue_its_field_names(eng, action, field, message):
    network(eng, action, field)
    got = eng.publish("in", message)
    assert [d.destination for d in got] == ["b"]
    assert eng.stats("a")["published"] == 0


def test_deliver_to_the_destination_a_header_names(eng: Engine) -> None:
    eng.queue_create("in")
    eng.selector_create("in").when_always().do_deliver(target_from="user").enable()
    got = eng.publish("in", Message(headers={"user": "alice"}))
    assert [(d.destination, d.message.destination) for d in got] == [("alice", "alice")]
    eng.confirm(got[0])
    assert eng.stats("in")["confirmed"] == 1


def dead_letter_queue(eng: Engine) -> None:
    eng.queue_create("dlq", history=100)
    eng.selector_create("dlq").when_always().do_delete().enable()


@pytest.mark.parametrize("action", ["copy", "move", "bounce", "deliver"])
def test_a_missing_or_empty_field_dead_letters_with_no_target(eng: Engine, action: str) -> None:
    dead_letter_queue(eng)
    network(eng, action, "to", dead_letter=None)
    eng.queue_update("in", dead_letter="dlq")
    eng.publish("in", Message(address="x"))
    eng.publish("in", Message(address="x", headers={"to": ""}))
    letters = dead(eng)
    assert [m.headers["x-reason"] for m in letters] == ["no-target", "no-target"]
    assert {m.headers["x-original-queue"] for m in letters} == {"in"}


@pytest.mark.parametrize("action", ["copy", "move", "bounce"])
def test_a_name_of_no_queue_dead_letters_with_no_such_queue_and_the_name(eng, action):
    dead_letter_queue(eng)
    network(eng, action, "to", dead_letter=None)
    eng.queue_update("in", dead_letter="dlq")
    eng.publish("in", Message(address="x", headers={"to": "nowhere"}))
    eng.publish("in", Message(address="x", headers={"to": "no where"}))  # not even a name
    letters = dead(eng)
    assert [m.headers["x-reason"] for m in letters] == ["no-such-queue", "no-target"]
    assert letters[0].headers["x-target"] == "nowhere"


@pytest.mark.parametrize("action", ["copy", "move", "bounce"])
def test_a_reserved_queue_is_no_target(eng_dlq: Engine, action: str) -> None:
    """Names starting with `$` are the engine's own (SPEC §1): a message cannot send itself
    into `$dead` (a forged dead letter, without x-reason) by naming it, as a DELIVER cannot
    name a `$` destination."""
    eng = eng_dlq
    dead_letter_queue(eng)
    network(eng, action, "to", dead_letter=None)
    eng.queue_update("in", dead_letter="dlq")
    eng.publish("nowhere", Message(address="x"))  # makes $dead: the engine's own
    assert eng.queue_fetch("$dead").depth == 1
    eng.publish("in", Message(address="x", headers={"to": "$dead"}))
    assert eng.queue_fetch("$dead").depth == 1
    letters = dead(eng)
    assert [m.headers["x-reason"] for m in letters] == ["no-target"]


def test_without_a_dead_letter_queue_the_message_is_dropped_and_counted(eng: Engine) -> None:
    network(eng, "move", "to", dead_letter=None)
    assert eng.publish("in", Message(address="x", headers={"to": "nowhere"})) == []
    assert eng.stats("in")["dropped"] == 1
    assert eng.queue_fetch("in").depth == 0


def test_a_move_waits_for_credit_as_with_a_fixed_target(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("b")
    eng.selector_create("b").when_always().do_deliver("b").enable()
    mover = eng.selector_create("in").when_always().do_move(target_from="to").set_credit(1)
    mover.enable()
    first = eng.publish("in", Message(headers={"to": "b"}))
    assert eng.publish("in", Message(headers={"to": "b"})) == []  # no credit
    assert eng.queue_fetch("in").depth == 1
    assert len(eng.confirm(first[0])) == 1  # credit flows back up: the second moves on


def test_a_target_naming_its_own_queue_is_stopped(eng: Engine) -> None:
    dead_letter_queue(eng)
    eng.queue_create("in", dead_letter="dlq")
    eng.selector_create("in").when_always().do_move(target_from="to").enable()
    eng.publish("in", Message(headers={"to": "in"}))
    assert [m.headers["x-reason"] for m in dead(eng)] == ["unroutable"]


def test_a_loop_of_moves_is_stopped_as_with_fixed_targets(eng: Engine) -> None:
    dead_letter_queue(eng)
    for name in ("p", "q"):
        eng.queue_create(name, dead_letter="dlq")
    eng.selector_create("p").when_always().do_move(target_from="next").enable()
    eng.selector_create("q").when_always().do_move("p").enable()
    eng.publish("p", Message(headers={"next": "q"}))
    assert [m.headers["x-reason"] for m in dead(eng)] == ["unroutable"]


def test_a_copy_to_a_missing_queue_dead_letters_a_copy_and_the_message_goes_on(eng) -> None:
    dead_letter_queue(eng)
    eng.queue_create("in", dead_letter="dlq")
    eng.selector_create("in").when_always().do_copy(target_from="to").enable()
    eng.selector_create("in").when_always().do_deliver("app").enable()
    got = eng.publish("in", Message(headers={"to": "nowhere"}))
    assert [d.destination for d in got] == ["app"]
    assert [m.headers["x-reason"] for m in dead(eng)] == ["no-such-queue"]


def test_the_target_field_survives_a_new_engine_on_the_same_catalog(eng: Engine) -> None:
    network(eng, "move", "header:to")
    again = Engine(catalog=eng.catalog)
    assert again.selectors("in")[0].spec.target_from == "to"
    got = again.publish("in", Message(headers={"to": "a"}))
    assert [d.destination for d in got] == ["a"]


def test_a_fixed_target_and_target_from_together_are_refused(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("b")
    sel = eng.selector_create("in").when_always()
    with pytest.raises(InvalidSelector, match="not both"):
        sel.do_move("b", target_from="to")
    with pytest.raises(InvalidSelector, match="field"):
        sel.do_move(target_from="not a field")
    assert sel.spec.action is None


@pytest.mark.parametrize("value", [math.nan, math.inf, "b\ud800"])
def test_hostile_header_values_are_refused_at_publish_and_change_nothing(eng, value) -> None:
    network(eng, "move", "to")
    with pytest.raises(InvalidArgument):
        eng.publish("in", Message(headers={"to": value}))
    assert eng.stats("in")["published"] == 0


def test_a_number_header_names_the_queue_by_its_text(eng: Engine) -> None:
    network(eng, "move", "to")
    eng.queue_create("7")
    eng.selector_create("7").when_always().do_deliver("seven").enable()
    assert [d.destination for d in eng.publish("in", Message(headers={"to": 7}))] == ["seven"]
