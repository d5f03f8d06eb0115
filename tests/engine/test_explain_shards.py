"""Explain across shards (SPEC §10 and §12, docs/scaling.md "Crossing shards" and
"Consumers"): a COPY, MOVE, BOUNCE or dead letter into another shard's queue is a forward,
and a DELIVER to a destination read on another shard a MOVE into its delivery queue there.
Explain says so (the shard, the queue, the credit held), and its walk ends there: a shard's
engine holds no selectors of another shard's queues. Each case is explained, the engine
checked unchanged (counters, depths, credit, forwards, journal), then the message published
on it for real, and what explain said compared with what the routing did."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from engine import Engine, Message
from engine.placement import shard_by_hash
from tests.engine.test_explain import snapshot
from tests.engine.test_explain_edges import done_by_routing
from tests.engine.test_explain_edges import said_by_explain as said_here

FAR = "far"  # the other shard


def shard_router(engine_on, store_kind: str) -> Engine:
    """A shard router's engine on `store_kind`: it routes the queues of its default store,
    one of two shards (the other is FAR), with its event journal on."""
    eng = engine_on(store_kind, journal=True)
    local = eng.default_store
    eng.set_local_shard(local, [local, FAR])
    return eng


def homed(eng: Engine, shard: str, prefix: str) -> str:
    """A name that placement puts on `shard` (of the engine's shards)."""
    shards = eng.shards()
    names = (f"{prefix}{n}" for n in range(1000))
    return next(name for name in names if shard_by_hash(name, shards) == shard)


def explained(eng: Engine, queue: str, message: Message) -> dict[str, Any]:
    """explain, and nothing changed by it: no counter, depth, credit, forward or event."""
    eng.take_forwards()
    eng.journal.drain()
    before = snapshot(eng)
    said = eng.explain(queue, message)
    assert snapshot(eng) == before
    assert eng.take_forwards() == ([], [])
    assert len(eng.journal) == 0
    return said


def said_by_explain(said: dict) -> dict[str, Any]:
    """What the routing would record, by explain's account: test_explain_edges' reading of
    it, and the forwards to other shards."""
    forwards = [(end["shard"], end["queue"]) for end in said["ends"]
                if end["outcome"] == "forwarded"]  # fmt: skip
    here = dict(said, ends=[end for end in said["ends"] if end["outcome"] != "forwarded"])
    return {**said_here(here), "forwards": forwards}


def published(eng: Engine, queue: str, message: Message) -> tuple[dict[str, Any], list]:
    """Publish for real: what the routing did (journal, deliveries, depths, forwards), and
    the deliveries."""
    depths = {info.name: info.depth for info in eng.queues()}
    deliveries = eng.publish(queue, message)
    done = done_by_routing(eng, deliveries, depths)
    forwards, _ = eng.take_forwards()
    done["forwards"] = [(f.shard, f.queue) for f in forwards]
    return done, deliveries


def agree(eng: Engine, queue: str, message: Message) -> tuple[dict[str, Any], list]:
    """Explain (changing nothing), then publish: the routing does what explain said."""
    said = explained(eng, queue, message)
    done, deliveries = published(eng, queue, message)
    assert done == said_by_explain(said), said
    return said, deliveries


def far_step(said: dict, queue: str) -> dict[str, Any]:
    """The step at another shard's queue: named, with its shard, and the walk ends there."""
    [step] = [step for step in said["steps"] if step["queue"] == queue]
    assert step["shard"] == FAR
    assert step["outcome"]["kind"] == "forwarded" and step["outcome"]["shard"] == FAR
    assert f"shard {FAR!r}" in step["outcome"]["reason"]
    assert "does not hold" in step["outcome"]["reason"]
    [end] = [end for end in said["ends"] if end["queue"] == queue]
    assert end["outcome"] == "forwarded" and end["shard"] == FAR and end["by"] == step["arrives_by"]
    assert "does not hold" in end["reason"]
    return step


@pytest.mark.parametrize("named", [False, True], ids=["fixed", "target_from"])
@pytest.mark.parametrize("action", ["copy", "move", "bounce"])
def test_a_hop_into_another_shards_queue_is_a_forward_and_the_walk_ends_there(
    engine_on, store_kind, action, named
) -> None:
    eng = shard_router(engine_on, store_kind)
    eng.queue_create("src", history=5)
    eng.set_remote_queues({"there": FAR})
    sel = eng.selector_create("src").when_always()
    if named:
        getattr(sel, f"do_{action}")(target_from="to")
    else:
        getattr(sel, f"do_{action}")("there")
    if action != "copy":
        sel.set_credit(1)
    sel.enable()
    message = Message(address="a", headers={"to": "there"}, return_address="back")
    said, deliveries = agree(eng, "src", message)
    assert [step["queue"] for step in said["steps"]] == ["src", "there"]
    step = far_step(said, "there")
    assert step["arrives_by"] == action and step["from"] == {"queue": "src", "selector": 1}
    first = said["steps"][0]["outcome"]
    if action == "copy":
        assert first["kind"] == "processed"
        assert eng.stats("src")["outstanding"] == 0
    else:  # the MOVE's credit is held here until the far shard settles it back
        assert first == {**first, "kind": "taken", "action": action, "to": "there", "shard": FAR}
        assert "settles it back" in first["reason"] and "credit" in first["reason"]
        assert eng.stats("src")["outstanding"] == 1
        said, _ = agree(eng, "src", message)  # its one credit is out: the next one waits
        assert said["steps"][0]["outcome"]["kind"] == "waits"
    assert deliveries == []


def test_a_dead_letter_into_another_shards_queue_is_a_forward(engine_on, store_kind) -> None:
    eng = shard_router(engine_on, store_kind)
    eng.set_remote_queues({"far-dlq": FAR})
    eng.queue_create("src", dead_letter="far-dlq")
    eng.selector_create("src").when_match("eq", "x").do_deliver(homed(eng, eng.default_store,
                                                                      "d")).enable()  # fmt: skip
    said, _ = agree(eng, "src", Message(address="y"))
    assert said["steps"][0]["outcome"]["kind"] == "dead_lettered"
    assert said["steps"][0]["outcome"]["to"] == "far-dlq"
    assert far_step(said, "far-dlq")["arrives_by"] == "dead_letter"


@pytest.mark.parametrize("named", [False, True], ids=["fixed", "target_from"])
def test_a_deliver_to_a_destination_read_on_another_shard_is_a_move_into_its_queue(
    engine_on, store_kind, named
) -> None:
    eng = shard_router(engine_on, store_kind)
    away = homed(eng, FAR, "d")
    eng.queue_create("src")
    eng.set_remote_queues({away: FAR})  # its delivery queue there (a mailbox)
    sel = eng.selector_create("src").when_always()
    sel.do_deliver(target_from="to") if named else sel.do_deliver(away)
    sel.set_credit(1).enable()
    message = Message(address="a", headers={"to": away})
    said, deliveries = agree(eng, "src", message)
    assert deliveries == []  # not delivered here: moved there
    first = said["steps"][0]
    assert first["selectors"][0]["verdict"] == "takes"
    outcome = first["outcome"]
    assert outcome == {**outcome, "kind": "taken", "action": "deliver", "to": away,
                       "shard": FAR, "destination": away}  # fmt: skip
    assert f"read on shard {FAR!r}" in outcome["reason"]
    assert "delivery queue" in outcome["reason"] and "credit" in outcome["reason"]
    assert "dead-lettered" in outcome["reason"]  # what a dead letter there means here
    step = far_step(said, away)
    assert step["arrives_by"] == "move" and step["from"] == {"queue": "src", "selector": 1}
    assert next(end for end in said["ends"] if end["queue"] == away)["destination"] == away
    stats = eng.stats("src")  # counted delivered here, outstanding until settled back
    assert (stats["delivered"], stats["outstanding"]) == (1, 1)
    said, _ = agree(eng, "src", message)  # its one credit is out: the next one waits
    assert said["steps"][0]["outcome"]["kind"] == "waits"


@pytest.mark.parametrize("named", [False, True], ids=["fixed", "target_from"])
def test_a_deliver_to_a_destination_read_elsewhere_with_no_queue_there_is_dead_lettered(
    engine_on, store_kind, named
) -> None:
    eng = shard_router(engine_on, store_kind)
    away = homed(eng, FAR, "d")
    eng.queue_create("dlq")
    eng.queue_create("src", dead_letter="dlq")
    eng.selector_create("dlq").when_always().do_deliver("dlq:reader").enable()
    eng.set_remote_queues({away: FAR})  # a fixed DELIVER is refused without it
    sel = eng.selector_create("src").when_always()
    sel.do_deliver(target_from="to") if named else sel.do_deliver(away)
    sel.enable()
    eng.set_remote_queues({})  # ... and its delivery queue is gone since
    said, deliveries = agree(eng, "src", Message(address="a", headers={"to": away}))
    outcome = said["steps"][0]["outcome"]
    assert outcome["kind"] == "dead_lettered" and outcome["reason"] == "no-target"
    [letter] = [d.message for d in deliveries]
    assert letter.headers["x-reason"] == "no-target" and letter.headers["x-target"] == away
    assert outcome["failure"] == {"reason": "no-target", "detail": letter.headers["x-detail"],
                                  "target": away}  # fmt: skip
    assert said["steps"][0]["selectors"][0]["target_failure"] == outcome["failure"]


def test_a_deliver_whose_delivery_queue_a_copy_reached_first_is_a_loop(
    engine_on, store_kind
) -> None:
    eng = shard_router(engine_on, store_kind)
    away = homed(eng, FAR, "d")
    eng.queue_create("dlq", history=5)
    eng.queue_create("src", dead_letter="dlq")
    eng.set_remote_queues({away: FAR})
    eng.selector_create("src").when_always().do_copy(away).enable()
    eng.selector_create("src").when_always().do_deliver(away).enable()
    said, _ = agree(eng, "src", Message(address="a"))
    outcome = said["steps"][0]["outcome"]
    assert (outcome["kind"], outcome["reason"], outcome["to"]) == ("dead_lettered", "unroutable",
                                                                   "dlq")  # fmt: skip
    far_step(said, away)


def test_a_destinations_recorded_home_decides_where_explain_says_it_is_read(
    engine_on, store_kind
) -> None:
    """set_destination_homes: a home recorded for a destination wins over placement, for
    explain as for the routing."""
    eng = shard_router(engine_on, store_kind)
    local = eng.default_store
    there, here = homed(eng, local, "d"), homed(eng, FAR, "e")  # placement says the opposite
    eng.set_destination_homes({there: FAR, here: local})
    eng.queue_create("src")
    eng.set_remote_queues({there: FAR})
    eng.selector_create("src").when_always().do_deliver(target_from="to").enable()
    said, deliveries = agree(eng, "src", Message(address="a", headers={"to": there}))
    assert said["steps"][0]["outcome"]["shard"] == FAR and deliveries == []
    far_step(said, there)
    said, deliveries = agree(eng, "src", Message(address="a", headers={"to": here}))
    assert said["steps"][0]["outcome"] == {"kind": "delivered", "selector": 1,
                                           "destination": here}  # fmt: skip
    assert [d.destination for d in deliveries] == [here]


def test_a_deliver_to_a_destination_read_here_delivers(engine_on, store_kind) -> None:
    eng = shard_router(engine_on, store_kind)
    here = homed(eng, eng.default_store, "d")
    eng.queue_create("src")
    eng.set_remote_queues({homed(eng, FAR, "d"): FAR})
    eng.selector_create("src").when_always().do_deliver(target_from="to").enable()
    said, deliveries = agree(eng, "src", Message(address="a", headers={"to": here}))
    assert said["ends"] == [{"queue": "src", "outcome": "delivered", "destination": here,
                             "selector": 1}]  # fmt: skip
    assert [d.destination for d in deliveries] == [here]


# -- on random sharded networks -------------------------------------------------------------
LOCAL = ["q0", "q1", "q2", "q3", "q4"]
REMOTE = ["r0", "r1"]


def random_sharded_network(rng: random.Random) -> tuple[Engine, list[str]]:
    """A shard router's engine: five queues of its own (some deleted later), two of the
    other shard's, destinations read here, read there with a delivery queue there, and read
    there without one; selectors of every kind, dead-letter queues on either shard. Returns
    the engine and the names a message's envelope may name."""
    eng = Engine(journal=True)
    eng.set_local_shard("ram", ["ram", FAR])
    here, served, unserved = (homed(eng, shard, prefix) for shard, prefix in
                              (("ram", "h"), (FAR, "s"), (FAR, "u")))  # fmt: skip
    eng.set_remote_queues({**dict.fromkeys(REMOTE, FAR), served: FAR, unserved: FAR})
    for name in LOCAL:
        eng.queue_create(name, history=rng.choice([0, 5]))
    for name in LOCAL:
        if rng.random() < 0.5:
            others = [n for n in LOCAL + REMOTE if n != name]
            eng.queue_update(name, dead_letter=rng.choice(others))
    for name in LOCAL:
        for _ in range(rng.randint(0, 3)):
            sel = eng.selector_create(name)
            kind = rng.choice(["always", "match", "filter", "default"])
            if kind == "always":
                sel.when_always()
            elif kind == "default":
                sel.when_default()
            elif kind == "filter":
                sel.when_filter("n > 1")
            else:
                sel.when_match("eq", rng.choice(["a", "b"]), "header:k")
            action = rng.choice(["copy", "copy", "move", "bounce", "deliver", "deliver", "delete"])
            if action == "delete":
                sel.do_delete()
            elif rng.random() < 0.3:
                getattr(sel, f"do_{action}")(target_from="header:to")
            elif action == "deliver":
                sel.do_deliver(rng.choice([here, served, unserved]))
            else:
                getattr(sel, f"do_{action}")(rng.choice([n for n in LOCAL + REMOTE if n != name]))
            if action != "copy":
                sel.set_credit(rng.choice([-1, -1, 1, 0]))
            if rng.random() < 0.9:
                sel.enable()
    eng.set_remote_queues({**dict.fromkeys(REMOTE, FAR), served: FAR})  # unserved: none now
    for name in rng.sample(LOCAL[1:], rng.randint(0, 2)):
        eng.queue_delete(name)
    return eng, [*LOCAL, *REMOTE, here, served, unserved, "nowhere"]


def test_explain_ends_where_the_routing_ends_on_random_sharded_networks() -> None:
    rng = random.Random(10)
    compared: Counter = Counter()
    for _network in range(300):
        eng, names = random_sharded_network(rng)
        for _ in range(3):
            if any(info.depth for info in eng.queues()):
                break  # a message waiting ahead: routing queues the next one behind it
            headers: dict[str, str | int] = {"n": rng.randint(0, 3), "k": rng.choice("ab")}
            if rng.random() < 0.8:
                headers["to"] = rng.choice(names)
            said, _ = agree(eng, "q0", Message(address="x", headers=headers, return_address="r"))
            for kind, seen in said_by_explain(said).items():
                compared[kind] += len(seen) if kind == "forwards" else sum(seen.values())
            compared["into a delivery queue"] += sum(
                step["outcome"].get("action") == "deliver" and "shard" in step["outcome"]
                for step in said["steps"]
                if step.get("outcome")
            )
    assert min(compared.values()) > 30, compared  # every kind of end, often
