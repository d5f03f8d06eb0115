"""Crossing shards in the engine (engine/forwarding.py, docs/scaling.md): two engines, each
routing its own shard's queues and holding stand-ins for the other's; the test carries
forwards and settles between them as the relay does (tests/stores/test_relay_shards.py
does it through Redis)."""

from __future__ import annotations

import pytest

from engine import Engine, Message, message_ops
from engine.errors import AlreadyExists, InvalidArgument, InvalidName, InvalidSelector, NotFound


class Shards:
    """Engines by shard name, and the carrying between them."""

    def __init__(self, **wiring: dict[str, str]) -> None:
        self.engines = {name: Engine() for name in wiring}
        for name, queues in wiring.items():
            for queue in queues:
                self.engines[name].queue_create(queue)
        for name, engine in self.engines.items():
            others = {other: queues for other, queues in wiring.items() if other != name}
            engine.set_remote_queues(
                {queue: other for other, queues in others.items() for queue in queues}
            )
        self.delivered: dict[str, list] = {}

    def __getitem__(self, name: str) -> Engine:
        return self.engines[name]

    def note(self, deliveries: list) -> None:
        for delivery in deliveries:
            self.delivered.setdefault(delivery.destination, []).append(delivery)

    def carry(self) -> int:
        """Carry every forward and settle until none is left; how many were carried."""
        carried = 0
        while True:
            moved = 0
            for name, engine in self.engines.items():
                forwards, settles = engine.take_forwards()
                for forward in forwards:
                    item = (forward.queue, forward.message, forward.visited, forward.origin,
                            forward.delivery_count)  # fmt: skip
                    self.note(self.engines[forward.shard].arrive_forwarded(name, [item]))
                for settle in settles:
                    self.note(self.engines[settle.shard].settle_forwarded([settle.origin]))
                moved += len(forwards) + len(settles)
            if not moved:
                return carried
            carried += moved


def bodies(deliveries: list) -> list[bytes]:
    return [delivery.message.body for delivery in deliveries]


def test_a_copy_to_another_shards_queue_arrives_there_once_and_routes_there() -> None:
    shards = Shards(a=["orders"], b=["audit"])
    shards["a"].selector_create("orders").when_always().do_copy("audit").enable()
    shards["a"].selector_create("orders").when_always().do_deliver("billing").enable()
    shards["b"].selector_create("audit").when_always().do_deliver("archive").enable()
    shards.note(shards["a"].publish("orders", Message(body=b"1")))
    assert bodies(shards.delivered["billing"]) == [b"1"]
    assert "archive" not in shards.delivered  # not routed on shard a
    assert shards.carry() == 1
    assert bodies(shards.delivered["archive"]) == [b"1"]
    assert shards["b"].stats("audit")["published"] == 1
    assert shards["a"].queues()[0].name == "orders"  # a stand-in is no queue of a's


def test_a_move_across_shards_holds_its_credit_until_the_copy_is_settled_there() -> None:
    shards = Shards(a=["jobs"], b=["work"])
    shards["a"].selector_create("jobs").when_always().do_move("work").set_credit(1).enable()
    shards["b"].selector_create("work").when_always().do_deliver("worker").enable()
    for n in range(3):
        shards["a"].publish("jobs", Message(body=b"%d" % n))
    shards.carry()
    assert bodies(shards.delivered["worker"]) == [b"0"]
    assert shards["a"].stats("jobs")["depth"] == 2  # waits for the credit to come back
    for expected in (b"1", b"2"):
        delivery = shards.delivered["worker"][-1]
        shards.note(shards["b"].confirm(delivery))  # settles on b, then on a
        shards.carry()
        assert shards.delivered["worker"][-1].message.body == expected
    shards["b"].confirm(shards.delivered["worker"][-1])
    shards.carry()
    assert shards["a"].stats("jobs")["depth"] == 0
    assert shards["a"].selectors("jobs")[0].outstanding == 0


def test_a_message_never_arrives_twice_at_a_queue_across_shards() -> None:
    shards = Shards(a=["left"], b=["right"])
    shards["a"].selector_create("left").when_always().do_copy("right").enable()
    shards["a"].selector_create("left").when_always().do_deliver("l").enable()
    shards["b"].selector_create("right").when_always().do_copy("left").enable()
    shards["b"].selector_create("right").when_always().do_deliver("r").enable()
    shards.note(shards["a"].publish("left", Message(body=b"x")))
    assert shards.carry() == 1  # right does not copy it back to left
    assert bodies(shards.delivered["l"]) == [b"x"] and bodies(shards.delivered["r"]) == [b"x"]


def test_a_forward_to_a_queue_deleted_meanwhile_is_not_kept_and_its_move_settles() -> None:
    shards = Shards(a=["jobs"], b=["work"])
    shards["a"].selector_create("jobs").when_always().do_move("work").set_credit(1).enable()
    shards["a"].publish("jobs", Message(body=b"0"))
    shards["a"].publish("jobs", Message(body=b"1"))
    shards["b"].queue_delete("work")
    forwards, _ = shards["a"].take_forwards()
    item = (forwards[0].queue, forwards[0].message, forwards[0].visited, forwards[0].origin, 0)
    assert shards["b"].arrive_forwarded("a", [item]) == []
    _, settles = shards["b"].take_forwards()
    assert [s.shard for s in settles] == ["a"]
    shards["a"].settle_forwarded([settles[0].origin])  # the credit comes back: "1" goes
    assert [f.message.body for f in shards["a"].take_forwards()[0]] == [b"1"]


def test_dead_letters_go_to_another_shards_queue() -> None:
    shards = Shards(a=[], b=["dead"])
    shards["a"].queue_create("q", dead_letter="dead")  # a remote queue counts
    shards["a"].selector_create("q").when_match("eq", "ok").do_deliver("d").enable()
    shards["a"].publish("q", Message(body=b"lost", address="nobody"))
    forwards, _ = shards["a"].take_forwards()
    assert [(f.shard, f.queue) for f in forwards] == [("b", "dead")]
    assert forwards[0].message.headers["x-reason"] == "unroutable"


def test_deleting_a_selector_never_puts_back_what_it_moved_to_another_shard() -> None:
    shards = Shards(a=["jobs"], b=["work"])
    selector = shards["a"].selector_create("jobs").when_always().do_move("work")
    selector.enable()
    shards["a"].publish("jobs", Message(body=b"0"))
    shards.carry()
    selector.delete()
    assert shards["a"].stats("jobs")["depth"] == 0  # it is b's now
    assert shards["b"].stats("work")["depth"] == 1


def test_stand_ins_and_queues_never_share_a_name() -> None:
    shards = Shards(a=["mine"], b=["theirs"])
    with pytest.raises(AlreadyExists):
        shards["a"].queue_create("theirs")
    with pytest.raises(AlreadyExists):
        shards["a"].set_remote_queues({"mine": "b"})
    with pytest.raises(InvalidName):
        shards["a"].set_remote_queues({"bad\x00name": "b"})
    assert shards["a"].remote_queues() == {"theirs": "b"}  # unchanged by the refusals


def test_a_failed_call_leaves_no_forward_behind(monkeypatch) -> None:
    shards = Shards(a=["q"], b=["far"])
    shards["a"].selector_create("q").when_always().do_copy("far").enable()
    shards["a"].selector_create("q").when_always().do_deliver("d").enable()

    def broken(*_: object) -> None:  # a later stage of the same call fails
        raise RuntimeError("a defect after the copy")

    monkeypatch.setattr(shards["a"], "_take", broken)
    with pytest.raises(RuntimeError):
        shards["a"].publish("q", Message(body=b"1"))  # copied to far first, then fails
    assert shards["a"].take_forwards() == ([], [])


def test_hostile_forwards_are_refused_and_change_nothing() -> None:
    shards = Shards(a=["q"], b=["far"])
    for bad in (
        [("q", "not a message", (), None, 0)],
        [(None, Message(body=b"x"), (), None, 0)],
        [("q", Message(body=b"x"), (), ("q", "NaN", "t"), 0)],
    ):
        with pytest.raises((InvalidArgument, ValueError)):
            shards["a"].arrive_forwarded("b", bad)
    assert shards["a"].stats("q")["published"] == 0


def shard_router(local: str) -> Engine:
    """An engine that routes shard `local` of shards a and b, as a service's shard router."""
    engine = Engine()
    engine.store_create("ram", local)
    engine.set_default_store(local)
    engine.set_local_shard(local, ["a", "b"])  # only `local` is opened here
    return engine


def named_for(shard: str, prefix: str) -> str:
    """A name that placement puts on `shard` (of a and b)."""
    from engine.placement import shard_by_hash

    names = (f"{prefix}{n}" for n in range(100))
    return next(name for name in names if shard_by_hash(name, ["a", "b"]) == shard)


def test_a_deliver_to_a_destination_read_on_another_shard_is_a_move_into_its_queue() -> None:
    engine = shard_router("a")
    queue = named_for("a", "q")
    engine.queue_create(queue, store="a")
    away = named_for("b", "d")
    selector = engine.selector_create(queue).when_always()
    # no delivery queue on the destination's shard: refused, nothing half-applied
    with pytest.raises(InvalidSelector, match=f"destination '{away}' is read on shard 'b'"):
        selector.do_deliver(away)
    assert engine.selectors(queue)[0].spec.action is None
    # its own queue's name, a name homed here, and a pattern's private name deliver here
    for here in (queue, named_for("a", "d"), f"{queue}:worker-1"):
        selector.do_deliver(here)
    # with the queue of its name on its shard (a mailbox there), it is a MOVE into it,
    # outstanding here until that shard settles it back
    engine.set_remote_queues({away: "b"})
    selector.do_deliver(away).set_credit(1).enable()
    assert engine.publish(queue, Message(body=b"x")) == []
    assert engine.publish(queue, Message(body=b"y")) == []
    forwards, _ = engine.take_forwards()
    assert [(f.shard, f.queue, f.message.body) for f in forwards] == [("b", away, b"x")]
    assert engine.stats(queue)["outstanding"] == 1 and engine.queue_fetch(queue).depth == 1
    origin = forwards[0].origin
    engine.settle_forwarded([origin])  # acked there: credit back, the next one goes
    forwards, _ = engine.take_forwards()
    assert [f.message.body for f in forwards] == [b"y"]
    stats = engine.stats(queue)  # counted as the deliveries and acks they are
    assert (stats["delivered"], stats["confirmed"]) == (2, 1)


def test_a_recorded_home_wins_over_placement_and_a_queue_of_the_name_over_both() -> None:
    """The homes the service recorded (set_destination_homes): a destination placement
    would read on b but recorded here is delivered here, as are the private names of its
    owner; one recorded on b is read there; a queue of the name decides before them."""
    engine = shard_router("a")
    queue = named_for("a", "q")
    engine.queue_create(queue, store="a")
    kept, moved = named_for("b", "d"), named_for("a", "e")
    assert engine.destination_home(kept) == "b"
    engine.set_destination_homes({kept: "a", moved: "b", queue: "b"})
    assert engine.destination_home(kept) == "a"
    assert engine.destination_home(f"{kept}:worker-1") == "a"
    assert engine.destination_home(moved) == "b"
    assert engine.destination_home(queue) == "a"  # its queue's shard
    selector = engine.selector_create(queue).when_always()
    with pytest.raises(InvalidSelector, match=f"destination '{moved}' is read on shard 'b'"):
        selector.do_deliver(moved)
    selector.do_deliver(kept).enable()
    [delivery] = engine.publish(queue, Message(body=b"x"))
    assert delivery.destination == kept and engine.take_forwards() == ([], [])
    with pytest.raises(InvalidName):
        engine.set_destination_homes({"bad\x00name": "a"})
    assert engine.destination_home(kept) == "a"  # the last homes kept


def test_an_envelope_target_read_elsewhere_goes_to_its_queue_or_is_dead_lettered() -> None:
    engine = shard_router("a")
    queue = named_for("a", "q")
    engine.queue_create("dlq", store="a")
    engine.queue_create(queue, store="a", dead_letter="dlq")
    engine.selector_create(queue).when_always().do_deliver(target_from="reply_to").enable()
    engine.selector_create("dlq").when_always().do_deliver("dlq:reader").enable()
    away, served, here = named_for("b", "d"), named_for("b", "s"), named_for("a", "d")
    engine.set_remote_queues({served: "b"})
    out = engine.publish(queue, Message(body=b"x", headers={"reply_to": away}))
    out += engine.publish(queue, Message(body=b"y", headers={"reply_to": here}))
    out += engine.publish(queue, Message(body=b"z", headers={"reply_to": served}))
    by_destination = {d.destination: d.message for d in out}
    assert set(by_destination) == {"dlq:reader", here}
    letter = by_destination["dlq:reader"]
    assert letter.headers["x-reason"] == "no-target"
    assert letter.headers["x-target"] == away
    forwards, _ = engine.take_forwards()
    assert [(f.shard, f.queue, f.message.body) for f in forwards] == [("b", served, b"z")]


def test_a_publish_into_another_shards_queue_is_forwarded_and_routed_there() -> None:
    """What the dead-letter inspector's send and message operations do (they publish)."""
    shards = Shards(a=["dead"], b=["orders"])
    shards["b"].selector_create("orders").when_always().do_deliver("billing").enable()
    shards["a"].check_target("orders")  # another shard's queue is a target
    with pytest.raises(NotFound):
        shards["a"].check_target("nowhere")
    assert shards["a"].publish_many("orders", [Message(body=b"1"), Message(body=b"2")]) == []
    assert shards.carry() == 2
    assert bodies(shards.delivered["billing"]) == [b"1", b"2"]
    assert shards["b"].stats("orders")["published"] == 2
    # a delayed one is refused: its shard's router keeps the time; nothing was forwarded
    with pytest.raises(InvalidArgument, match="lives on shard 'b'"):
        shards["a"].publish_many("orders", [Message(body=b"3"), Message(body=b"4", delay=5)])
    assert shards.carry() == 0


def test_a_message_operation_moves_into_another_shards_queue() -> None:
    shards = Shards(a=["parked"], b=["orders"])
    shards["b"].selector_create("orders").when_always().do_deliver("billing").enable()
    for n in range(3):
        shards["a"].publish("parked", Message(body=b"%d" % n, headers={"n": n}))
    outcome, _ = message_ops.operate(shards["a"], "parked", "move", filter="n >= 1",
                                     target="orders")  # fmt: skip
    assert (outcome.matched, outcome.done) == (2, 2)
    assert shards["a"].queue_fetch("parked").depth == 1
    shards.carry()
    assert bodies(shards.delivered["billing"]) == [b"1", b"2"]
    with pytest.raises(NotFound):
        message_ops.operate(shards["a"], "parked", "copy", target="nowhere")
    assert shards["a"].queue_fetch("parked").depth == 1
