"""Explain at the edges: targets deleted under a selector, queue names that are no names, and
random networks in which explain's paper must end where the routing itself ends."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from itertools import pairwise

import pytest

from engine import Engine, Message
from engine.errors import InvalidName, NotFound, QueueFull
from engine.explain import MAX_STEPS


def test_a_copy_whose_target_queue_was_deleted_goes_nowhere_and_the_walk_goes_on() -> None:
    eng = Engine()
    eng.queue_create("src", history=5)
    eng.queue_create("gone")
    eng.queue_create("kept")
    eng.selector_create("src").when_always().do_copy("gone").enable()
    eng.selector_create("src").when_always().do_copy("kept").enable()
    eng.selector_create("kept").when_always().do_deliver("app").enable()
    eng.queue_delete("gone")
    said = eng.explain("src", Message(address="a"))
    first = said["steps"][0]
    gone, kept = first["selectors"]
    assert gone["verdict"] == "copies" and "target" not in gone
    assert gone["reason"] == "its target queue 'gone' does not exist: the copy goes nowhere"
    assert kept["verdict"] == "copies" and kept["target"] == "kept"
    assert first["outcome"]["kind"] == "processed"
    assert [step["queue"] for step in said["steps"]] == ["src", "kept"]
    assert {"queue": "kept", "outcome": "delivered", "destination": "app", "selector": 1} in said[
        "ends"
    ]
    # as the routing does it: the copy is skipped, the message processed, the other copy made
    deliveries = eng.publish("src", Message(address="a"))
    assert [(d.queue, d.destination) for d in deliveries] == [("kept", "app")]
    assert eng.stats("src")["history_size"] == 1 and eng.stats("src")["dropped"] == 0


@pytest.mark.parametrize("action", ["move", "bounce"])
def test_a_taker_whose_target_queue_was_deleted_leaves_the_message_waiting(action) -> None:
    eng = Engine()
    eng.queue_create("dlq")
    eng.queue_create("src", dead_letter="dlq")
    eng.queue_create("gone")
    getattr(eng.selector_create("src").when_always(), f"do_{action}")("gone").enable()
    eng.queue_delete("gone")
    said = eng.explain("src", Message(address="a"))
    [verdict] = said["steps"][0]["selectors"]
    assert verdict["verdict"] == "passes"
    assert verdict["reason"] == "its target queue does not exist"
    assert said["steps"][0]["outcome"]["kind"] == "waits"
    assert "target queue" in said["steps"][0]["outcome"]["reason"]
    assert [end["queue"] for end in said["ends"]] == ["src"]
    # the routing: the message waits in the queue (rule 4) until the target exists again
    eng.publish("src", Message(address="a"))
    assert eng.stats("src")["depth"] == 1 and eng.stats("dlq")["published"] == 0


def test_a_deliver_to_a_destination_with_no_queue_of_its_name_delivers() -> None:
    eng = Engine()
    eng.queue_create("src")
    eng.queue_create("app")  # a queue named like the destination, then deleted: no matter
    eng.selector_create("src").when_always().do_deliver("app").enable()
    eng.queue_delete("app")
    said = eng.explain("src", Message(address="a"))
    assert said["ends"] == [
        {"queue": "src", "outcome": "delivered", "destination": "app", "selector": 1}
    ]
    assert [d.destination for d in eng.publish("src", Message(address="a"))] == ["app"]


@pytest.mark.parametrize("name", [["a"], {"a": 1}, 7, None, b"src"])
def test_a_queue_name_that_is_no_string_is_an_invalid_name(name) -> None:
    eng = Engine()
    eng.queue_create("src")
    with pytest.raises(InvalidName):
        eng.explain(name, Message())  # type: ignore[arg-type]


def test_a_queue_name_that_names_no_queue_is_not_found() -> None:
    eng = Engine()
    with pytest.raises(NotFound):
        eng.explain("nowhere", Message())
    with pytest.raises(InvalidName):
        eng.explain("has space", Message())


def test_a_move_to_a_queue_a_copy_reached_first_is_dead_lettered_as_the_routing_does() -> None:
    eng = Engine()
    for name in ("dlq", "a", "b"):
        eng.queue_create(name, history=5)
    eng.queue_create("src", dead_letter="dlq")
    eng.selector_create("src").when_always().do_copy("b").enable()
    eng.selector_create("src").when_always().do_move("a").enable()
    eng.selector_create("b").when_always().do_copy("a").enable()  # reaches a first
    said = eng.explain("src", Message(address="x"))
    first = said["steps"][0]
    assert first["outcome"]["kind"] == "dead_lettered"
    assert first["outcome"]["reason"] == "unroutable"
    assert [step["queue"] for step in said["steps"]] == ["src", "b", "a", "dlq"]
    eng.publish("src", Message(address="x"))
    assert eng.stats("dlq")["published"] == 1
    assert eng.stats("a")["published"] == 1


# -- explain agrees with the routing, on random networks ------------------------------------
NAMES = ["q0", "q1", "q2", "q3", "q4", "q5"]
DESTINATIONS = ["app", "web"]


def random_network(rng: random.Random) -> Engine:
    """Six queues (some with a dead-letter queue), random selectors of every WHEN and DO
    with fixed targets and targets from the envelope, then one or two queues deleted, so
    some targets and dead-letter queues name queues that are gone."""
    eng = Engine(journal=True)
    for name in NAMES:
        eng.queue_create(name, history=rng.choice([0, 5]))
    for name in NAMES:
        if rng.random() < 0.5:
            eng.queue_update(name, dead_letter=rng.choice([n for n in NAMES if n != name]))
    for name in NAMES:
        for _ in range(rng.randint(0, 3)):
            sel = eng.selector_create(name)
            when = rng.choice(["always", "match", "match", "filter", "default"])
            if when == "always":
                sel.when_always()
            elif when == "default":
                sel.when_default()
            elif when == "filter":
                sel.when_filter("n > 1")
            elif rng.random() < 0.5:
                sel.when_match("eq", rng.choice(["a", "b"]), "header:k")
            else:
                sel.when_match("prefix", rng.choice(["x.", "y."]))
            action = rng.choice(["copy", "copy", "move", "bounce", "deliver", "delete"])
            if action == "delete":
                sel.do_delete()
            elif rng.random() < 0.25:
                getattr(sel, f"do_{action}")(target_from="header:to")
            elif action == "deliver":
                sel.do_deliver(rng.choice(DESTINATIONS))
            else:
                getattr(sel, f"do_{action}")(rng.choice([n for n in NAMES if n != name]))
            if action != "copy":
                sel.set_credit(rng.choice([-1, -1, 1, 0]))
            if rng.random() < 0.9:
                sel.enable()
    for name in rng.sample(NAMES[1:], rng.randint(1, 2)):
        eng.queue_delete(name)
    eng.journal.drain()
    return eng


def random_message(rng: random.Random) -> Message:
    headers: dict[str, str | int] = {"n": rng.randint(0, 3)}
    if rng.random() < 0.7:
        headers["k"] = rng.choice(["a", "b"])
    if rng.random() < 0.7:
        headers["to"] = rng.choice([*NAMES, "nowhere", "app", "$bad", "has space"])
    return_address = rng.choice([None, "x.back", "y.back"])
    return Message(
        address=rng.choice(["x.1", "y.1", "z.1"]), headers=headers, return_address=return_address
    )


def said_by_explain(said: dict) -> dict[str, Counter]:
    """What the routing would have recorded, by explain's account."""
    arrivals: Counter = Counter()
    dead_letters: Counter = Counter()
    for step in said["steps"][1:]:
        how, source = step["arrives_by"], step["from"]["queue"]
        if how == "dead_letter":
            dead_letters[(source, step["queue"])] += 1
        else:
            arrivals[(source, step["queue"], how)] += 1
    ends: dict[str, Counter] = {"delivered": Counter(), "dropped": Counter(),
                                "deleted": Counter(), "waiting": Counter()}  # fmt: skip
    for end in said["ends"]:
        outcome = end["outcome"]
        if outcome == "delivered":
            ends["delivered"][(end["queue"], end["destination"])] += 1
        elif outcome in ("dropped", "deleted"):
            ends[outcome][end["queue"]] += 1
        elif outcome in ("held", "waits for credit", "waits for its target queue"):
            ends["waiting"][end["queue"]] += 1
        else:
            assert outcome in ("processed", "history"), end
    return {"routes": arrivals, "dead_letters": dead_letters, **ends}


def done_by_routing(eng: Engine, deliveries: list, depths: dict[str, int]) -> dict[str, Counter]:
    """What the routing did: from its journal, its deliveries and the queues' depths."""
    routes: Counter = Counter()
    dead_letters: Counter = Counter()
    dropped: Counter = Counter()
    deleted: Counter = Counter()
    for event in eng.journal.drain().events:
        kind, queue, target, detail = event[1], event[3], event[5], event[6]
        if kind == "route":
            routes[(queue, target, detail)] += 1
        elif kind == "dead_letter":
            dead_letters[(queue, target)] += 1
        elif kind == "drop":
            dropped[queue] += 1
        elif kind == "delete":
            deleted[queue] += 1
    waiting = Counter()
    for info in eng.queues():
        grown = info.depth - depths.get(info.name, 0)
        if grown:
            waiting[info.name] = grown
    delivered = Counter((d.queue, d.destination) for d in deliveries)
    return {"routes": routes, "dead_letters": dead_letters, "delivered": delivered,
            "dropped": dropped, "deleted": deleted, "waiting": waiting}  # fmt: skip


def test_explain_ends_where_the_routing_ends_on_random_networks() -> None:
    rng = random.Random(12)
    compared = Counter()
    for network in range(400):
        eng = random_network(rng)
        for _ in range(4):
            if any(info.depth for info in eng.queues()):
                break  # a message waiting ahead: routing queues the next one behind it
            message = random_message(rng)
            said = eng.explain("q0", message)
            depths = {info.name: info.depth for info in eng.queues()}
            deliveries = eng.publish("q0", message)
            expected = said_by_explain(said)
            assert done_by_routing(eng, deliveries, depths) == expected, (network, said)
            for kind, seen in expected.items():
                compared[kind] += sum(seen.values())
    # the networks exercise every kind of end, often
    assert min(compared.values()) > 50, compared


def test_a_publish_to_a_full_queue_with_no_dead_letter_queue_is_refused_as_publish_is() -> None:
    eng = Engine()
    eng.queue_create("full", limit=1)
    eng.queue_create("src")
    eng.selector_create("src").when_always().do_move("full").enable()
    eng.publish("full", Message())  # held: it has no selectors; the queue is full now
    said = eng.explain("full", Message())
    assert said["steps"][0]["outcome"]["kind"] == "refused"
    assert said["ends"] == [{"queue": "full", "outcome": "refused", "reason": "queue full"}]
    with pytest.raises(QueueFull):
        eng.publish("full", Message())
    # moved there, not published there: dropped (it has no dead-letter queue)
    said = eng.explain("src", Message())
    assert said["ends"] == [{"queue": "full", "outcome": "dropped", "reason": "overflow"}]
    eng.publish("src", Message())
    assert eng.stats("full")["dropped"] == 1


def test_a_chain_longer_than_explain_follows_ends_with_room_left_on_the_stack() -> None:
    """Explain recurses along the queues it follows: two frames a queue, so its MAX_STEPS
    fit under a router's or a web server's frames too (here: a recursion limit of 700)."""
    eng = Engine()
    names = [f"q{n}" for n in range(MAX_STEPS + 20)]
    for name in names:
        eng.queue_create(name)
    for n, (name, after) in enumerate(pairwise(names)):
        eng.queue_update(name, dead_letter=after)
        sel = eng.selector_create(name).when_always()
        kind = n % 3  # a move; a copy; a target the message does not name: a dead letter
        if kind == 0:
            sel.do_move(after)
        elif kind == 1:
            sel.do_copy(after)
        else:
            sel.do_move(target_from="to")
        sel.enable()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(700)
    try:
        said = eng.explain("q0", Message())
    finally:
        sys.setrecursionlimit(limit)
    assert len(said["steps"]) == MAX_STEPS + 1
    assert said["steps"][-1]["outcome"]["kind"] == "not followed"
    # where the walk stopped is an end (the console said "Would end: nowhere")
    stopped = {"queue": said["steps"][-1]["queue"], "outcome": "not followed",
               "reason": f"over {MAX_STEPS} queues"}  # fmt: skip
    assert stopped in said["ends"]


def test_a_delayed_message_is_explained_as_routed_when_it_falls_due() -> None:
    """explain said nothing of a delay (and the API did not carry it): the answer says the
    message is held first, and routed when it falls due, its ttl counted from then."""
    eng = Engine()
    eng.queue_create("dlq")
    eng.queue_create("q", dead_letter="dlq")
    eng.selector_create("q").when_always().do_deliver("app").enable()
    held = eng.explain("q", Message(address="a", delay=60.0, ttl=10.0))
    assert held["scheduled"]["delay"] == 60.0 and "held 60 s" in held["scheduled"]["said"]
    assert held["scheduled"]["due"] > time.time() + 59
    assert [end["outcome"] for end in held["ends"]] == ["delivered"]
    assert "scheduled" not in eng.explain("q", Message(address="a"))
    # as the routing does it: held, then delivered when due (the ttl counts from then)
    assert eng.publish("q", Message(address="a", delay=60.0, ttl=10.0)) == []
    assert eng.stats("q")["scheduled"] == 1
    [delivered] = eng.tick(now=time.time() + 61)
    assert delivered.destination == "app" and eng.stats("dlq")["depth"] == 0


def test_a_message_behind_waiting_ones_waits_in_order(eng) -> None:
    """Rule 4: a head waiting for credit keeps what arrives after it waiting, whatever the
    newcomer matches; explain said the newcomer would be deleted."""
    eng.queue_create("q")
    eng.queue_create("t")
    eng.selector_create("q").when_match("eq", "a").do_move("t").set_credit(0).enable()
    eng.selector_create("q").when_match("eq", "b").do_delete().enable()
    eng.publish("q", Message(address="a"))
    said = eng.explain("q", Message(address="b"))
    step = said["steps"][0]
    assert step["ahead"] == 1 and step["outcome"]["kind"] == "waits"
    assert said["ends"] == [{"queue": "q", "outcome": "waits behind others"}]
    eng.publish("q", Message(address="b"))  # and so it does
    assert [m.address for m in eng.peek("q", 5)] == ["a", "b"]
